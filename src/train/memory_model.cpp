// The memory model: the real set-up and one real step on the counting backend (memory_model.h).
#include "train/memory_model.h"

#include <algorithm>
#include <optional>

#include "backend/counting_backend.h"
#include "backend/attention_scratch_rules.h"
#include "backend/gpu_memory_rules.h"
#include "comm/null_communicator.h"
#include "data/batch.h"
#include "optim/optimizer.h"
#include "train/memory_model_choices.h"
#include "train/metrics.h"
#include "train/pipe_engine.h"
#include "train/run_assembly.h"
#include "train/step_runner.h"


namespace zt {

MemoryTarget memory_target_of(const Backend& backend) {
  MemoryTarget target;
  target.device = backend.device();
  const MemoryTraits traits = backend.memory_traits();
  if (traits.allocation_size) target.allocation_size = traits.allocation_size;
  target.discard_chunk_bytes = traits.discard_chunk_bytes;
  target.fixed_bytes = traits.fixed_bytes;  // its own buffers, before the run's
  // The CUDA backend's attention scratch (cuDNN's workspace) by its rule, the same in every build.
  if (target.device == Device::CUDA) target.attention_scratch = cuda_attention_scratch;
  target.pipeline_posts_ahead = target.device == Device::CPU;  // MPI; a GPU's NCCL (the run says which)
  return target;
}

MemoryTarget typical_gpu_target() {  // the same in every build (backend/gpu_memory_rules.h)
  MemoryTarget target;
  target.device = Device::CUDA;
  target.allocation_size = cuda_allocation_size;
  target.discard_chunk_bytes = kTypicalDiscardChunkBytes;
  target.fixed_bytes = cuda_allocation_size(kCudaWorkspaceBytes);
  target.attention_scratch = cuda_attention_scratch;
  return target;
}

const std::vector<std::string>& memory_terms() {
  static const std::vector<std::string> terms = {
      kTermParameters, kTermGathered,   kTermGradients,  kTermMaster,          kTermOptimizerState, kTermZeroBuffers,
      kTermReference,   kTermActivations, kTermLogits,    kTermModelOther, kTermAttentionWorkspace, kTermAllocatorSlack,
      kTermBackendFixed};
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

// Names what the assembly allocates: the store's buffers as parameters (told apart below), the
// engine's as communication buckets, then what the engine and the store hold by what it is (the
// master first: with fp32 compute it may be the parameters themselves, which then count as
// parameters), and the model's small buffers as other.
class TermObserver final : public AssemblyObserver {
 public:
  explicit TermObserver(CountingBackend& backend) : backend_(backend) {}
  void before_store() override { backend_.set_term(kTermParameters); }
  void before_engine() override { backend_.set_term(kTermZeroBuffers); }
  void before_model(ParamStore& store, ZeroEngine& engine) override {
    for (const ZeroEngine::PartitionViews& views : engine.partition_views())
      for (const ZeroEngine::PartitionViews::Part& part : views.parts) {
        backend_.move_to_term(part.master.data, kTermMaster);
        for (const Tensor& state : part.state) backend_.move_to_term(state.data, kTermOptimizerState);
      }
    for (const ZeroEngine::TensorStateViews& views : engine.tensor_state_views())
      for (const Tensor& state : views.state) backend_.move_to_term(state.data, kTermOptimizerState);
    const ZeroEngine::BufferAddresses engine_buffers = engine.buffer_addresses();
    for (const void* address : engine_buffers.parameters) backend_.move_to_term(address, kTermParameters);
    for (const void* address : engine_buffers.gradients) backend_.move_to_term(address, kTermGradients);
    for (ParamGroup group : {ParamGroup::Frozen, ParamGroup::Decay, ParamGroup::NoDecay}) {
      if (const Tensor params = store.group_params(group); params.numel())
        backend_.move_to_term(params.data, kTermParameters, kTermGathered);  // later: stage 3's gathered units
      if (const Tensor grads = store.group_grads(group); grads.numel())
        backend_.move_to_term(grads.data, kTermGradients);
    }
    backend_.set_term(kTermModelOther);
  }
  // A frozen reference (train/frozen_reference.h): its store and engine as the reference model (its
  // stage-3 store buffer's later units as gathered), its model's small buffers as other.
  void before_reference() override { backend_.set_term(kTermReference); }
  void before_reference_model(ParamStore& store, ZeroEngine& engine) override {
    for (const void* address : engine.buffer_addresses().parameters) backend_.move_to_term(address, kTermReference);
    if (const Tensor params = store.group_params(ParamGroup::Frozen); params.numel())
      backend_.move_to_term(params.data, kTermReference, kTermGathered);
    backend_.set_term(kTermModelOther);
  }

 private:
  CountingBackend& backend_;
};

// The step's parts: the micro-batch and what the model allocates outside the hooks as
// activations, the engine's calls as communication buckets.
class StepTerms final : public StepObserver {
 public:
  explicit StepTerms(CountingBackend& backend) : backend_(backend) {}
  void enter(StepPart part) override {
    backend_.set_term(part == StepPart::Model ? kTermActivations : kTermZeroBuffers);
  }

 private:
  CountingBackend& backend_;
};

// The terms that hold bytes (the counting backend keeps emptied ones at 0).
std::map<std::string, int64_t> held_terms(const std::map<std::string, int64_t>& terms) {
  std::map<std::string, int64_t> held;
  for (const auto& [term, bytes] : terms)
    if (bytes != 0) held[term] = bytes;
  return held;
}

// The trainer's largest micro-batches of B x T tokens (as the objective lays them out), every
// position a target so the step updates.
StepBatches model_batches(const TrainConfig& config, const Objective& objective, int64_t seq_len) {
  StepBatches batches;
  batches.micro.assign(static_cast<size_t>(config.gradient_accumulation_steps), objective.largest_micro_batch(config, seq_len));
  return batches;
}

}  // namespace

int64_t activation_regrowth_from(const TokenDataset& dataset) {
  const int64_t longest = dataset.longest_sample();
  for (int64_t index = 0; index < dataset.num_samples(); ++index)
    if (dataset.sample_length(index) < longest) return longest - 1;
  return 0;
}

DataLengths data_lengths_of(const TokenDataset& dataset) {
  DataLengths data;
  data.grown_from_seq_len = activation_regrowth_from(dataset);
  data.shortest_sample = dataset.longest_sample();
  for (int64_t index = 0; index < dataset.num_samples(); ++index)
    data.shortest_sample = std::min(data.shortest_sample, dataset.sample_length(index));
  return data;
}

PackedRows packed_rows_of(const TrainConfig& config, int64_t seq_len, const DataLengths& data) {
  if (!config.packing) return {};
  const int64_t shortest = data.shortest_sample > 0 ? std::min(data.shortest_sample, seq_len) : 1;
  return packed_rows_bound(config.micro_batch_size, shortest, seq_len);
}

std::string packed_rows_text(const TrainConfig& config, int64_t seq_len, const DataLengths& data) {
  if (!config.packing) return "";
  const PackedRows rows = packed_rows_of(config, seq_len, data);
  const std::string shortest =
      data.shortest_sample > 0 ? cat(std::min(data.shortest_sample, seq_len)) : std::string("1 (assumed: no data given)");
  return cat("cuDNN's packed attention graph counted at up to ", worst_ragged_batch(rows, config.micro_batch_size),
             " sequences x ", cudnn_ragged_time(seq_len, seq_len), " tokens per micro-batch (", config.micro_batch_size,
             " samples of ", shortest, " to ", seq_len, " tokens packed into rows, the padding after a row's last "
             "sample a sequence of its own; one sample per row: ", config.micro_batch_size, " sequences)");
}

std::string packed_attention_note(const TrainConfig& config, int64_t seq_len, const DataLengths& data,
                                  const MemoryPrediction& prediction) {
  const auto workspace = prediction.device_terms.find(kTermAttentionWorkspace);
  if (!config.packing || workspace == prediction.device_terms.end()) return "";
  return cat("--packing: ", format_bytes(workspace->second), " of it is the attention workspace, ",
             packed_rows_text(config, seq_len, data), ". ");
}

MemoryPrediction predict_memory(const TrainConfig& config, const ModelConfig& model_config, int world_size, int rank,
                                int64_t seq_len, const MemoryTarget& target, const DataLengths& data) {
  ZT_CHECK(seq_len > 0 && config.micro_batch_size > 0 && config.gradient_accumulation_steps > 0,
           "memory model: sequence length ", seq_len, ", micro-batch ", config.micro_batch_size, " and accumulation ",
           config.gradient_accumulation_steps, " must be positive");
  CountingOptions options;
  options.device = target.device;
  options.allocation_size = target.allocation_size;
  options.discard_chunk_bytes = target.discard_chunk_bytes;
  options.fixed_bytes = target.fixed_bytes;
  options.attention_scratch = target.attention_scratch;
  options.packed_rows = packed_rows_of(config, seq_len, data);  // the worst packed micro-batch's rows
  std::unique_ptr<CountingBackend> backend = make_counting_backend(options);
  // Under a pipeline this rank's stage (rank / D) with its data-parallel group of D = world / P
  // ranks, its instruction list run by the engine on a null world (pipe_engine.h).
  const int data_parallel = config.data_parallel_size(world_size);
  const int stage = rank / data_parallel;
  std::unique_ptr<Communicator> comm = make_null_communicator(rank % data_parallel, data_parallel);
  std::unique_ptr<Communicator> world = make_null_communicator(rank, world_size);

  // The run's own assembly (train/run_assembly.h), without weights: loading writes nothing the
  // counting backend keeps.
  TrainConfig run = config;
  run.quantize = run_quantization(config.quantize, model_config.quantization, config.model_dir);
  // A null communicator knows no machines: ZeRO++'s node groups get the layout the run will have
  // (hpZ's partition size, which the run checks against its machines; else one node).
  if (run.zero.zeropp() && run.zero.ranks_per_node == 0)
    run.zero.ranks_per_node = run.zero.zero_hpz_partition_size > 1 ? run.zero.zero_hpz_partition_size : data_parallel;
  run.dump_step0_path.clear();  // a debugging dump writes files; it is not a run to plan for
  run.scheduler = SchedulerConfig();  // the learning rate allocates nothing (and may be unresolved here)
  TermObserver terms(*backend);
  RunParts parts =
      assemble_run(run, model_config, *backend, *comm, comm.get(), data_parallel, UnitWeights(), &terms, stage);
  TermHooks hooks(*parts.engine, *backend);
  parts.model->set_unit_hooks(&hooks);
  std::optional<TermHooks> reference_hooks;  // a frozen reference's gathers, named as the policy's
  if (parts.reference) parts.reference->model->set_unit_hooks(&reference_hooks.emplace(*parts.reference->engine, *backend));
  StepConfig step_config = step_config_of(run);
  step_config.fault_points = false;
  StepRunner runner(step_config, *parts.model, *parts.objective, *parts.engine, *parts.store, *backend, *comm, *comm,
                    parts.scaler ? &*parts.scaler : nullptr, model_config.vocab_size);
  std::unique_ptr<PipeEngine> pipe;
  if (run.pipeline.enabled()) {
    const PipelineTopology topology(world_size, static_cast<int>(run.pipeline.stages));
    pipe = std::make_unique<PipeEngine>(run, topology, rank, *world, *backend, model_config.hidden_size,
                                        run.compute_dtype, model_config.tie_word_embeddings, target.pipeline_posts_ahead);
    pipe->attach(*parts.store, parts.stage);
    runner.set_pipeline(pipe.get());
    runner.set_more_chunks(parts.more_chunk_models());
  }
  backend->synchronize();
  MemoryPrediction prediction;
  prediction.device_setup = backend->counted().device;
  prediction.host_setup = backend->counted().host;
  prediction.store_setup = backend->counted().discardable;
  prediction.device_setup_peak = backend->counted().device_peak;

  // The trainer's step on micro-batches of B x T tokens; with grown_from_seq_len, a step of
  // shorter ones first (its buffers are then grown).
  backend->reset_peaks();
  StepTerms step_terms(*backend);
  runner.set_observer(&step_terms);
  const int64_t grown_from = data.grown_from_seq_len;
  const bool grows = grown_from > 0 && grown_from < seq_len;
  int64_t step = 0;
  for (int64_t step_seq : grows ? std::vector<int64_t>{grown_from, seq_len} : std::vector<int64_t>{seq_len}) {
    StepBatches batches = model_batches(run, *parts.objective, step_seq);
    runner.run(step, step, batches, parts.schedule, nullptr);
    ++step;
  }
  // The LM head's [chunk, V] logits, named now: what the peak held of them counts as logits.
  backend->move_to_term(parts.model->logits_storage(), kTermLogits);
  prediction.device_peak = backend->counted().device_peak;
  prediction.host_peak = std::max(backend->counted().host_peak, prediction.host_setup);
  prediction.store_peak = backend->counted().discardable_peak;
  prediction.device_terms = held_terms(backend->counted().device_terms_at_peak);
  prediction.host_terms = held_terms(backend->counted().host_terms_at_peak);
  return prediction;
}

std::vector<MemoryPrediction> predict_stage_memory(const TrainConfig& config, const ModelConfig& model, int world_size,
                                                   int64_t seq_len, const MemoryTarget& target,
                                                   const DataLengths& data) {
  const int data_parallel = config.data_parallel_size(world_size);  // refuses a P that does not divide the world
  const int stages = config.pipeline.enabled() ? static_cast<int>(config.pipeline.stages) : 1;
  std::vector<MemoryPrediction> predictions;
  for (int stage = 0; stage < stages; ++stage)
    predictions.push_back(
        predict_memory(config, model, world_size, stage * data_parallel, seq_len, target, data));
  return predictions;
}

size_t heaviest_stage(const std::vector<MemoryPrediction>& stages, bool on_host) {
  const auto need = [on_host](const MemoryPrediction& p) { return on_host ? p.host_peak : p.device_needed(); };
  size_t heaviest = 0;
  for (size_t stage = 1; stage < stages.size(); ++stage)
    if (need(stages[stage]) > need(stages[heaviest])) heaviest = stage;
  return heaviest;
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
                                                const DataLengths& data) {
  struct Fit {
    int64_t peak;
    std::string text;
  };
  std::vector<Fit> fits;
  for (ZeroChoice choice : zero_offload_choices(make_optimizer(config.optimizer)->fuses_into_backward())) {
    if (config.pipeline.enabled() && choice.stage == 3) continue;  // refused with pipeline stages
    for (bool checkpointing : {false, true}) {
      choice.activation_checkpointing = checkpointing;
      // Under a pipeline the heaviest stage's need (the rank that would not fit).
      const std::vector<MemoryPrediction> stages =
          predict_stage_memory(with_choice(config, choice), model, world_size, seq_len, target, data);
      const MemoryPrediction& prediction = stages[heaviest_stage(stages, false)];
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
