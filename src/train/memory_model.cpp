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
#include "train/metrics.h"
#include "zero/zero_engine.h"

#if ZT_WITH_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace zt {

MemoryTarget memory_target_of(const Backend& backend) {
  MemoryTarget target;
  target.device = backend.device();
#if ZT_WITH_CUDA
  if (const auto* cuda = dynamic_cast<const CudaBackend*>(&backend)) {
    target.allocation_size = cuda_allocation_size;
    target.discard_chunk_bytes = static_cast<int64_t>(cuda->discard_granularity());
    target.fixed_bytes = static_cast<int64_t>(cuda->memory_in_use());  // its own buffers, before the run's
  }
#endif
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

nlohmann::json MemoryPrediction::to_json() const {
  return {{"device_setup_bytes", device_setup}, {"device_setup_peak_bytes", device_setup_peak},
          {"device_peak_bytes", device_peak},
          {"host_setup_bytes", host_setup},     {"host_peak_bytes", host_peak},
          {"store_setup_bytes", store_setup},   {"store_peak_bytes", store_peak}};
}

MemoryPrediction predict_memory(const TrainConfig& config, const ModelConfig& model_config, int world_size, int rank,
                                int64_t seq_len, const MemoryTarget& target) {
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
  ParamStore store(*backend, plan.specs, plan.trainable, world_size, config.compute_dtype, residency, plan.quant);
  ZeroEngine engine(*backend, *comm, store, config.zero, config.optimizer, config.compute_dtype, comm.get());
  for (int unit = 0; unit < store.num_units(); ++unit) {  // loading writes nothing the counting backend keeps
    if (!residency.params) store.commit_unit_params(unit);
    engine.init_unit_from_store(unit);
  }
  engine.finish_init();
  ModelOptions model_options;
  model_options.activation_checkpointing = config.activation_checkpointing;
  if (config.lora.enabled()) {
    model_options.lora_scaling = 1.0f;
    model_options.lora_dropout = static_cast<float>(config.lora.dropout);
  }
  std::unique_ptr<CausalLM> model = make_causal_lm(model_config, store, *backend, model_options);
  model->set_unit_hooks(&engine);
  Buffer step_loss_sum(*backend, sizeof(double));  // fp64 [1]
  backend->synchronize();
  MemoryPrediction prediction;
  prediction.device_setup = backend->counted().device;
  prediction.host_setup = backend->counted().host;
  prediction.store_setup = backend->counted().discardable;
  prediction.device_setup_peak = backend->counted().device_peak;

  // One step of micro-batches of B x T tokens (batch_views.h: ids, targets, mask, row ids).
  const int64_t batch = config.micro_batch_size, tokens = batch * seq_len;
  backend->reset_peaks();
  Buffer input_ids(*backend, static_cast<size_t>(tokens) * 4), targets(*backend, static_cast<size_t>(tokens) * 4);
  Buffer loss_mask(*backend, static_cast<size_t>(tokens)), row_ids(*backend, static_cast<size_t>(tokens) * 8);
  BatchTensors views;
  views.batch = batch;
  views.seq = seq_len;
  views.input_ids = input_ids.view(DType::I32, {tokens});
  views.targets = targets.view(DType::I32, {tokens});
  views.loss_mask = loss_mask.view(DType::U8, {tokens});
  views.row_ids = row_ids.view(DType::I64, {tokens});
  DropoutContext dropout{config.seed, 0, views.row_ids};
  engine.begin_step();
  const bool fused = engine.optimizer().fuses_into_backward();  // LOMO: the update runs inside backward
  if (fused) engine.begin_update_pass(OptimizerStep{config.optimizer.lr, 1.0f, 1});
  for (int64_t micro = 0; micro < config.gradient_accumulation_steps; ++micro) {
    engine.begin_micro_batch(micro + 1 == config.gradient_accumulation_steps);
    model->forward(views, dropout);
    model->backward(views, 1.0f, dropout, step_loss_sum.view(DType::F64, {1}));
    engine.end_micro_batch();
  }
  engine.reduce_gradients();
  if (config.compute_dtype == DType::F16) engine.gradients_overflow();
  engine.gradient_norm();
  if (!fused) engine.apply_update(OptimizerStep{config.optimizer.lr, 1.0f, 1});
  prediction.device_peak = backend->counted().device_peak;
  prediction.host_peak = std::max(backend->counted().host_peak, prediction.host_setup);
  prediction.store_peak = backend->counted().discardable_peak;
  return prediction;
}

std::vector<std::string> fitting_memory_choices(const TrainConfig& config, const ModelConfig& model, int world_size,
                                                int64_t seq_len, const MemoryTarget& target, int64_t free_bytes) {
  struct Choice {
    int64_t peak;
    std::string text;
  };
  std::vector<Choice> fits;
  const bool fused = make_optimizer(config.optimizer)->fuses_into_backward();  // LOMO: no state to offload
  for (int stage = 0; stage <= 3; ++stage) {
    for (int offload = 0; offload <= (stage == 3 ? 2 : stage >= 1 ? 1 : 0); ++offload) {
      for (bool checkpointing : {false, true}) {
        if (fused && offload == 1) continue;
        TrainConfig variant = config;
        variant.zero.stage = stage;
        variant.zero.offload_optimizer_device = offload >= 1 && !fused ? "cpu" : "none";
        variant.zero.offload_param_device = offload == 2 ? "cpu" : "none";
        variant.activation_checkpointing = checkpointing;
        const MemoryPrediction prediction = predict_memory(variant, model, world_size, 0, seq_len, target);
        if (prediction.device_needed() > free_bytes) continue;
        std::string text = cat("zero_optimization.stage ", stage);
        if (offload >= 1 && !fused) text += " + offload_optimizer cpu";
        if (offload == 2) text += " + offload_param cpu";
        if (checkpointing) text += " + --activation-checkpointing";
        fits.push_back({prediction.device_needed(), cat(text, ": ", format_bytes(prediction.device_needed()))});
      }
    }
  }
  std::sort(fits.begin(), fits.end(), [](const Choice& a, const Choice& b) { return a.peak < b.peak; });
  std::vector<std::string> texts;
  for (const Choice& choice : fits) texts.push_back(choice.text);
  return texts;
}

}  // namespace zt
