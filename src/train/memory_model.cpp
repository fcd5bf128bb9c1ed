// The memory model: the real set-up and one real step on the counting backend (memory_model.h).
#include "train/memory_model.h"

#include <algorithm>

#include "backend/buffer.h"
#include "backend/counting_backend.h"
#include "comm/null_communicator.h"
#include "model/causal_lm.h"
#include "model/linear.h"
#include "model/param_store.h"
#include "model/parameter_plan.h"
#include "optim/optimizer.h"
#include "train/memory_model_choices.h"
#include "train/metrics.h"
#include "zero/zero_engine.h"

#if ZT_WITH_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace zt {

MemoryTarget memory_target_of(const Backend& backend) {
  MemoryTarget target;
  target.device = backend.device();
  const MemoryTraits traits = backend.memory_traits();
  if (traits.allocation_size) target.allocation_size = traits.allocation_size;
  target.discard_chunk_bytes = traits.discard_chunk_bytes;
  target.fixed_bytes = traits.fixed_bytes;  // its own buffers, before the run's
  return target;
}

MemoryTarget typical_gpu_target() {
  MemoryTarget target;
  target.device = Device::CUDA;
#if ZT_WITH_CUDA
  target.allocation_size = cuda_allocation_size;
  target.discard_chunk_bytes = kTypicalDiscardChunkBytes;
  target.fixed_bytes = cuda_allocation_size(kCudaWorkspaceBytes);
#endif
  return target;
}

const std::vector<std::string>& memory_terms() {
  static const std::vector<std::string> terms = {
      kTermParameters, kTermGathered,   kTermGradients,  kTermMaster,          kTermOptimizerState, kTermZeroBuffers,
      kTermActivations, kTermLogits,    kTermModelOther, kTermAllocatorSlack, kTermBackendFixed};
  return terms;
}

nlohmann::json MemoryPrediction::to_json() const {
  return {{"device_setup_bytes", device_setup}, {"device_setup_peak_bytes", device_setup_peak},
          {"device_peak_bytes", device_peak},
          {"host_setup_bytes", host_setup},     {"host_peak_bytes", host_peak},
          {"store_setup_bytes", store_setup},   {"store_peak_bytes", store_peak},
          {"device_peak_terms", device_terms},  {"host_peak_terms", host_terms}};
}

namespace {

// The engine's hooks, with what they allocate counted under the ZeRO terms; between them the
// model allocates its activations.
class TermHooks final : public UnitHooks {
 public:
  TermHooks(UnitHooks& engine, CountingBackend& backend) : engine_(engine), backend_(backend) {}
  void acquire(int unit, UnitUse use) override { around(kTermGathered, [&] { engine_.acquire(unit, use); }); }
  void release(int unit) override { around(kTermGathered, [&] { engine_.release(unit); }); }
  void gradients_ready(int unit) override { around(kTermZeroBuffers, [&] { engine_.gradients_ready(unit); }); }

 private:
  template <class Call>
  void around(const char* term, Call&& call) {
    backend_.set_term(term);
    call();
    backend_.set_term(kTermActivations);
  }
  UnitHooks& engine_;
  CountingBackend& backend_;
};

// The terms that hold bytes (the counting backend keeps emptied ones at 0).
std::map<std::string, int64_t> held_terms(const std::map<std::string, int64_t>& terms) {
  std::map<std::string, int64_t> held;
  for (const auto& [term, bytes] : terms)
    if (bytes != 0) held[term] = bytes;
  return held;
}

}  // namespace

int64_t activation_regrowth_from(const TokenDataset& dataset) {
  const int64_t longest = dataset.longest_sample();
  for (int64_t index = 0; index < dataset.num_samples(); ++index)
    if (dataset.sample_length(index) < longest) return longest - 1;
  return 0;
}

MemoryPrediction predict_memory(const TrainConfig& config, const ModelConfig& model_config, int world_size, int rank,
                                int64_t seq_len, const MemoryTarget& target, int64_t grown_from_seq_len) {
  ZT_CHECK(seq_len > 0 && config.micro_batch_size > 0 && config.gradient_accumulation_steps > 0,
           "memory model: sequence length ", seq_len, ", micro-batch ", config.micro_batch_size, " and accumulation ",
           config.gradient_accumulation_steps, " must be positive");
  CountingOptions options;
  options.device = target.device;
  options.allocation_size = target.allocation_size;
  options.discard_chunk_bytes = target.discard_chunk_bytes;
  options.fixed_bytes = target.fixed_bytes;
  std::unique_ptr<CountingBackend> backend = make_counting_backend(options);
  std::unique_ptr<Communicator> comm = make_null_communicator(rank, world_size);

  // Set-up, in the trainer's order (trainer.cpp).
  const ParameterPlan plan = plan_parameters(model_config, config.lora,
                                             run_quantization(config.quantize, model_config.quantization, config.model_dir));
  const StoreResidency residency =
      zero_store_residency(config.zero, world_size, *make_optimizer(config.optimizer));
  backend->set_term(kTermParameters);  // the store's buffers, told apart below
  ParamStore store(*backend, plan.specs, plan.trainable, world_size, config.compute_dtype, residency, plan.quant,
                   config.grad_accum_dtype);
  backend->set_term(kTermZeroBuffers);  // the engine's, master and optimizer state told apart below
  ZeroEngine engine(*backend, *comm, store, config.zero, config.optimizer, config.compute_dtype, comm.get());
  for (int unit = 0; unit < store.num_units(); ++unit) {  // loading writes nothing the counting backend keeps
    if (!residency.params) store.commit_unit_params(unit);
    engine.init_unit_from_store(unit);
  }
  engine.finish_init();
  // What the engine and the store hold, by what it is (the master first: with fp32 compute it
  // may be the parameters themselves, which then count as parameters).
  for (const ZeroEngine::PartitionViews& views : engine.partition_views()) {
    backend->move_to_term(views.master.data, kTermMaster);
    for (const Tensor& state : views.state) backend->move_to_term(state.data, kTermOptimizerState);
  }
  for (const ZeroEngine::TensorStateViews& views : engine.tensor_state_views())
    for (const Tensor& state : views.state) backend->move_to_term(state.data, kTermOptimizerState);
  const ZeroEngine::BufferAddresses engine_buffers = engine.buffer_addresses();
  for (const void* address : engine_buffers.parameters) backend->move_to_term(address, kTermParameters);
  for (const void* address : engine_buffers.gradients) backend->move_to_term(address, kTermGradients);
  for (ParamGroup group : {ParamGroup::Frozen, ParamGroup::Decay, ParamGroup::NoDecay}) {
    if (const Tensor params = store.group_params(group); params.numel())
      backend->move_to_term(params.data, kTermParameters, kTermGathered);  // later: stage 3's gathered units
    if (const Tensor grads = store.group_grads(group); grads.numel()) backend->move_to_term(grads.data, kTermGradients);
  }
  backend->set_term(kTermModelOther);
  ModelOptions model_options;
  model_options.activation_checkpointing = config.activation_checkpointing;
  model_options.offload_activations = config.offload_activations;
  model_options.head_chunk_rows = config.head_chunk_rows;
  if (config.lora.enabled()) {
    model_options.lora_scaling = 1.0f;
    model_options.lora_dropout = static_cast<float>(config.lora.dropout);
  }
  std::unique_ptr<CausalLM> model = make_causal_lm(model_config, store, *backend, model_options);
  TermHooks hooks(engine, *backend);
  model->set_unit_hooks(&hooks);
  Buffer step_loss_sum(*backend, sizeof(double));  // fp64 [1]
  backend->synchronize();
  MemoryPrediction prediction;
  prediction.device_setup = backend->counted().device;
  prediction.host_setup = backend->counted().host;
  prediction.store_setup = backend->counted().discardable;
  prediction.device_setup_peak = backend->counted().device_peak;

  // One step of micro-batches of B x T tokens (batch_views.h: ids, targets, mask, row ids); with
  // grown_from_seq_len, a step of shorter ones first (its buffers are then grown).
  backend->reset_peaks();
  const bool grows = grown_from_seq_len > 0 && grown_from_seq_len < seq_len;
  for (int64_t step_seq : grows ? std::vector<int64_t>{grown_from_seq_len, seq_len} : std::vector<int64_t>{seq_len}) {
    const int64_t batch = config.micro_batch_size, tokens = batch * step_seq;
    backend->set_term(kTermActivations);  // the batch, then what the model allocates outside the hooks
    Buffer input_ids(*backend, static_cast<size_t>(tokens) * 4), targets(*backend, static_cast<size_t>(tokens) * 4);
    Buffer loss_mask(*backend, static_cast<size_t>(tokens)), row_ids(*backend, static_cast<size_t>(tokens) * 8);
    BatchTensors views;
    views.batch = batch;
    views.seq = step_seq;
    views.input_ids = input_ids.view(DType::I32, {tokens});
    views.targets = targets.view(DType::I32, {tokens});
    views.loss_mask = loss_mask.view(DType::U8, {tokens});
    views.row_ids = row_ids.view(DType::I64, {tokens});
    DropoutContext dropout{config.seed, 0, views.row_ids};
    backend->set_term(kTermZeroBuffers);
    engine.begin_step();
    const bool fused = engine.optimizer().fuses_into_backward();  // LOMO: the update runs inside backward
    if (fused) engine.begin_update_pass(OptimizerStep{config.optimizer.lr, 1.0f, 1});
    for (int64_t micro = 0; micro < config.gradient_accumulation_steps; ++micro) {
      engine.begin_micro_batch(micro + 1 == config.gradient_accumulation_steps);
      backend->set_term(kTermActivations);
      model->forward(views, dropout);
      backend->move_to_term(model->logits_storage(), kTermLogits);  // [chunk, V] (the LM head's chunk)
      model->backward(views, 1.0f, dropout, step_loss_sum.view(DType::F64, {1}));
      backend->set_term(kTermZeroBuffers);
      engine.end_micro_batch();
    }
    engine.reduce_gradients();
    engine.check_gradients();  // the norm and overflow flag, as StepRunner::update reads them
    if (!fused) engine.apply_update(OptimizerStep{config.optimizer.lr, 1.0f, 1});
  }
  prediction.device_peak = backend->counted().device_peak;
  prediction.host_peak = std::max(backend->counted().host_peak, prediction.host_setup);
  prediction.store_peak = backend->counted().discardable_peak;
  prediction.device_terms = held_terms(backend->counted().device_terms_at_peak);
  prediction.host_terms = held_terms(backend->counted().host_terms_at_peak);
  return prediction;
}

int64_t longest_fitting_sequence(const TrainConfig& config, const ModelConfig& model, int world_size,
                                 const MemoryTarget& target, int64_t device_bytes, int64_t max_seq_len) {
  ZT_CHECK(max_seq_len >= 1, "longest fitting sequence: the longest sequence to try (", max_seq_len, ") must be >= 1");
  const auto fits = [&](int64_t seq_len) {
    return predict_memory(config, model, world_size, 0, seq_len, target).device_needed() <= device_bytes;
  };
  if (!fits(1)) return 0;
  if (fits(max_seq_len)) return max_seq_len;
  int64_t low = 1, high = max_seq_len;  // fits(low), !fits(high)
  while (high - low > 1) {
    const int64_t middle = low + (high - low) / 2;
    (fits(middle) ? low : high) = middle;
  }
  return low;
}

std::vector<std::string> fitting_memory_choices(const TrainConfig& config, const ModelConfig& model, int world_size,
                                                int64_t seq_len, const MemoryTarget& target, int64_t free_bytes,
                                                int64_t grown_from_seq_len) {
  struct Fit {
    int64_t peak;
    std::string text;
  };
  std::vector<Fit> fits;
  for (ZeroChoice choice : zero_offload_choices(make_optimizer(config.optimizer)->fuses_into_backward())) {
    for (bool checkpointing : {false, true}) {
      choice.activation_checkpointing = checkpointing;
      const MemoryPrediction prediction =
          predict_memory(with_choice(config, choice), model, world_size, 0, seq_len, target, grown_from_seq_len);
      if (prediction.device_needed() > free_bytes) continue;
      fits.push_back({prediction.device_needed(), cat(choice_text(choice), ": ", format_bytes(prediction.device_needed()))});
    }
  }
  std::sort(fits.begin(), fits.end(), [](const Fit& a, const Fit& b) { return a.peak < b.peak; });
  std::vector<std::string> texts;
  for (const Fit& fit : fits) texts.push_back(fit.text);
  return texts;
}

}  // namespace zt
