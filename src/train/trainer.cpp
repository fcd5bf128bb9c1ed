// The step loop: global batch -> micro-batches -> forward/backward (gradients accumulate in
// the flat buffers) -> global norm, clipping -> AdamW per parameter group -> metrics.
// Loss contract (DESIGN.md): sum of token losses over the global batch / its target tokens, so
// every micro-batch's backward is scaled by 1 / (target tokens of the whole global batch).
#include "train/trainer.h"

#include <mpi.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <span>

#include "backend/backend.h"
#include "data/batch.h"
#include "data/sampler.h"
#include "data/token_shards.h"
#include "model/causal_lm.h"
#include "model/config.h"
#include "model/lora.h"
#include "model/param_store.h"
#include "model/peft_adapter.h"
#include "model/safetensors.h"
#include "optim/adamw_optimizer.h"
#include "optim/grad_clip.h"
#include "optim/lr_schedule.h"
#include "train/batch_views.h"
#include "train/evaluation.h"
#include "train/metrics.h"
#include "train/versions.h"

namespace zt {

namespace {

namespace fs = std::filesystem;

// Parameter list (base + adapters) and which of them train.
struct ParameterPlan {
  std::vector<ParamSpec> specs;
  std::vector<bool> trainable;
};

ParameterPlan plan_parameters(const ModelConfig& model_config, const LoraConfig& lora) {
  ParameterPlan plan;
  plan.specs = model_param_specs(model_config);
  plan.trainable.assign(plan.specs.size(), !lora.enabled());  // LoRA freezes every base weight
  if (lora.enabled()) {
    for (ParamSpec& adapter : lora_param_specs(plan.specs, lora)) {
      plan.specs.push_back(std::move(adapter));
      plan.trainable.push_back(true);
    }
  }
  return plan;
}

void load_base_weights(const std::string& model_dir, ParamStore& store) {
  ModelWeights weights(model_dir);
  for (const ParamEntry& entry : store.entries()) {
    const std::string& name = entry.spec.name;
    if (name.find(".lora_A.") != std::string::npos || name.find(".lora_B.") != std::string::npos) continue;
    ZT_CHECK(weights.contains(name), weights.source(), ": tensor '", name, "' is missing (the config needs it)");
    weights.read_f32(name, store.param(name).f32(), entry.spec.shape);
  }
}

// PEFT's fresh adapter: A kaiming-uniform, B zeros (the store starts zeroed).
void init_lora_weights(ParamStore& store, uint64_t seed) {
  uint32_t adapter_index = 0;
  for (const ParamEntry& entry : store.entries()) {
    if (entry.spec.name.find(".lora_A.") == std::string::npos) continue;
    Tensor a = store.param(entry.spec.name);  // [r, in]
    lora_init_a(a.f32(), a.dim(0), a.dim(1), seed, adapter_index++);
  }
}

void write_text_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  ZT_CHECK(out, path.string(), ": cannot write");
}

// --dump-step0: logits of micro-batch 0, the step-0 loss and every trainable gradient.
void write_step0_dump(const std::string& path, const std::vector<float>& logits, int64_t batch, int64_t seq,
                      int64_t vocab, double loss, const ParamStore& store) {
  const float loss_value = static_cast<float>(loss);
  std::vector<SafetensorsEntry> entries;
  entries.push_back({"logits", {batch, seq, vocab}, logits.data(), DType::F32, DType::F32});
  entries.push_back({"loss", {1}, &loss_value, DType::F32, DType::F32});
  for (const ParamEntry& entry : store.entries()) {
    if (entry.group == ParamGroup::Frozen) continue;
    entries.push_back({"grad." + entry.spec.name, entry.spec.shape, store.grad(entry.spec.name).data, DType::F32,
                       DType::F32});
  }
  write_safetensors(path, entries);
}

}  // namespace

void run_training(TrainConfig config, const RunOptions& options) {
  int world_size = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  ZT_CHECK(world_size == 1, "this build trains on one rank only (launched with ", world_size,
           " ranks); multi-rank ZeRO training is not implemented yet");
  ZT_CHECK(config.compute_dtype == DType::F32, "compute dtype ", dtype_name(config.compute_dtype),
           " (bf16/fp16 mixed precision) is not implemented yet: disable fp16/bf16 in the DeepSpeed config");
  ZT_CHECK(!config.model_dir.empty(), "--model is required");
  ZT_CHECK(!config.data_dir.empty(), "--data is required");
  ZT_CHECK(!config.out_dir.empty(), "--out is required");
  config.resolve_batch_sizes(world_size);
  for (const std::string& note : options.notes) std::printf("note: %s\n", note.c_str());

  // Model, data and parameters.
  const ModelConfig model_config = load_model_config(config.model_dir);
  const TokenDataset dataset = TokenDataset::open(config.data_dir);
  const ShardAttributes& data_attrs = dataset.attributes();
  ZT_CHECK(data_attrs.vocab_size <= model_config.vocab_size, config.data_dir, ": the data's vocab_size ",
           data_attrs.vocab_size, " exceeds the model's (", model_config.path, ": vocab_size ",
           model_config.vocab_size, "): the data was tokenized for another model");
  std::unique_ptr<TokenDataset> eval_data;
  if (!config.eval_data_dir.empty()) {
    eval_data = std::make_unique<TokenDataset>(TokenDataset::open(config.eval_data_dir));
    const ShardAttributes& eval_attrs = eval_data->attributes();
    ZT_CHECK(eval_attrs.tokenizer_sha256 == data_attrs.tokenizer_sha256 && eval_attrs.vocab_size == data_attrs.vocab_size,
             "the evaluation data ", config.eval_data_dir, " (tokenizer ", eval_attrs.tokenizer_sha256, ", vocab_size ",
             eval_attrs.vocab_size, ") was tokenized differently from the training data ", config.data_dir,
             " (tokenizer ", data_attrs.tokenizer_sha256, ", vocab_size ", data_attrs.vocab_size, ")");
  }
  if (!options.adapter_dir.empty()) {
    ZT_CHECK(!config.lora.enabled(), "--adapter takes the LoRA settings from ", options.adapter_dir,
             "/adapter_config.json: do not give --lora-r as well");
    config.lora = read_peft_adapter_config(options.adapter_dir);
  }
  std::unique_ptr<Backend> backend = make_cpu_backend();
  ParameterPlan plan = plan_parameters(model_config, config.lora);
  ParamStore store(*backend, plan.specs, plan.trainable);
  load_base_weights(config.model_dir, store);
  if (!options.adapter_dir.empty()) load_peft_adapter_weights(options.adapter_dir, store);
  else if (config.lora.enabled()) init_lora_weights(store, config.seed);

  ModelOptions model_options;
  model_options.activation_checkpointing = config.activation_checkpointing;
  if (config.lora.enabled()) {
    model_options.lora_scaling = lora_scaling(config.lora);
    model_options.lora_dropout = static_cast<float>(config.lora.dropout);
  }
  std::unique_ptr<CausalLM> model = make_causal_lm(model_config, store, *backend, model_options);

  // Batches: DistributedSampler order; step b takes permutation positions [b*G, (b+1)*G).
  const int64_t global_batch = config.train_batch_size;
  const int64_t micro_batch = config.micro_batch_size;
  DistributedSampler sampler(dataset.num_samples(), world_size, rank, config.seed, config.shuffle, false);
  const int64_t steps_per_epoch = sampler.num_samples_per_rank() * world_size / global_batch;
  ZT_CHECK(steps_per_epoch > 0, config.data_dir, ": ", dataset.num_samples(), " samples do not fill one global batch of ",
           global_batch, " (train_batch_size)");
  const int64_t total_steps = config.max_steps > 0 ? config.max_steps : config.epochs * steps_per_epoch;
  resolve_schedule(config.scheduler, config.optimizer.lr, total_steps);

  AdamWOptimizer optimizer(*backend, store, config.optimizer);

  // Output directory: run.json now, metrics.jsonl per step.
  fs::create_directories(config.out_dir);
  nlohmann::json run = config.to_json();
  run["world_size"] = world_size;
  run["backend"] = backend->name();
  run["versions"] = software_versions();
  run["parameters"] = {{"total", store.count_parameters(false)}, {"trainable", store.count_parameters(true)}};
  run["steps_per_epoch"] = steps_per_epoch;
  run["total_steps"] = total_steps;
  run["dataset"] = {{"samples", dataset.num_samples()}, {"shards", dataset.shard_paths().size()}};
  write_text_file(fs::path(config.out_dir) / "run.json", run.dump(2) + "\n");
  MetricsWriter metrics_writer((fs::path(config.out_dir) / "metrics.jsonl").string(), false);
  std::printf("zerotune train: %s, %lld parameters (%lld trainable), %lld samples, %lld steps of %lld samples "
              "(micro-batch %lld x accumulation %lld x %d ranks)\n",
              model_config.model_type.c_str(), static_cast<long long>(store.count_parameters(false)),
              static_cast<long long>(store.count_parameters(true)), static_cast<long long>(dataset.num_samples()),
              static_cast<long long>(total_steps), static_cast<long long>(global_batch),
              static_cast<long long>(micro_batch), static_cast<long long>(config.gradient_accumulation_steps),
              world_size);
  std::fflush(stdout);

  const int64_t log_every = options.log_every > 0 ? options.log_every : std::max<int64_t>(1, config.steps_per_print);
  int64_t skipped = 0;
  std::vector<int64_t> order;  // this epoch's sample order (global positions)
  int64_t order_epoch = -1;
  for (int64_t step = 0; step < total_steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    const int64_t epoch = step / steps_per_epoch;
    if (epoch != order_epoch) {
      order = sampler.global_order(epoch);
      order_epoch = epoch;
    }
    const int64_t first = (step % steps_per_epoch) * global_batch;
    std::span<const int64_t> step_samples(order.data() + first, static_cast<size_t>(global_batch));
    const int64_t target_tokens = count_target_tokens(dataset, step_samples);
    const float grad_scale = target_tokens > 0 ? 1.0f / static_cast<float>(target_tokens) : 0.0f;

    // Forward/backward over the micro-batches; gradients accumulate in the flat buffers.
    store.zero_grads();
    double loss_sum = 0.0, flops = 0.0;
    int64_t real_tokens = 0, padded_tokens = 0;
    std::vector<float> step0_logits;  // [B, T, V] of micro-batch 0 (only for --dump-step0)
    int64_t step0_batch = 0, step0_seq = 0;
    DropoutContext dropout{config.seed, static_cast<uint32_t>(step), Tensor()};
    for (int64_t micro = 0; micro < config.gradient_accumulation_steps; ++micro) {
      MicroBatch micro_data = make_micro_batch(
          dataset, step_samples.subspan(static_cast<size_t>(micro * micro_batch), static_cast<size_t>(micro_batch)),
          static_cast<int32_t>(data_attrs.pad_id));
      BatchTensors batch = batch_views(micro_data);
      dropout.row_ids = batch.row_ids;
      Tensor logits = model->forward(batch, dropout);
      if (step == 0 && micro == 0 && !config.dump_step0_path.empty()) {
        step0_logits.assign(logits.f32(), logits.f32() + logits.numel());
        step0_batch = batch.batch;
        step0_seq = batch.seq;
      }
      loss_sum += model->backward(batch, grad_scale, dropout);
      real_tokens += micro_data.real_tokens;
      padded_tokens += batch.batch * batch.seq;
      flops += 2.0 * model->forward_flops(batch.batch, batch.seq) + model->trainable_weight_flops(batch.batch, batch.seq);
    }
    const double loss = target_tokens > 0 ? loss_sum / static_cast<double>(target_tokens) : 0.0;
    if (step == 0 && !config.dump_step0_path.empty())
      write_step0_dump(config.dump_step0_path, step0_logits, step0_batch, step0_seq, model_config.vocab_size, loss, store);

    // Optimizer step: global norm, clipping, AdamW per group. Skipped steps do not advance the
    // schedule or Adam's step count (DeepSpeed).
    const double grad_norm = optimizer.gradient_norm();
    const int64_t updates_done = step - skipped;
    const double lr = learning_rate_at(config.scheduler, config.optimizer.lr, updates_done);
    if (target_tokens == 0 || !std::isfinite(grad_norm)) {
      ++skipped;
      std::printf("warning: step %lld skipped (%s)\n", static_cast<long long>(step + 1),
                  target_tokens == 0 ? "the global batch has no target tokens" : "the gradient is not finite");
    } else {
      optimizer.step(lr, clip_coefficient(grad_norm, config.gradient_clipping), updates_done + 1);
    }

    StepMetrics metrics;
    metrics.step = step + 1;
    metrics.total_steps = total_steps;
    metrics.epoch = static_cast<double>(step + 1) / static_cast<double>(steps_per_epoch);
    metrics.loss = loss;
    metrics.lr = lr;
    metrics.grad_norm = grad_norm;
    metrics.skipped = skipped;
    metrics.samples = global_batch;
    metrics.tokens = real_tokens;
    metrics.target_tokens = target_tokens;
    metrics.padding_fraction = padded_tokens ? 1.0 - static_cast<double>(real_tokens) / static_cast<double>(padded_tokens) : 0.0;
    metrics.step_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    metrics.flops = flops;
    metrics.peak_tflops = options.peak_tflops;
    metrics.world_size = world_size;
    metrics_writer.write(metrics_json(metrics));
    if ((step + 1) % log_every == 0 || step + 1 == total_steps) {
      std::printf("%s\n", metrics_console_line(metrics).c_str());
      std::fflush(stdout);
    }
    const bool epoch_end = (step + 1) % steps_per_epoch == 0;
    const bool eval_due = config.eval_every > 0 && (step + 1) % config.eval_every == 0;
    if (eval_data && (epoch_end || eval_due)) {
      const EvalResult eval = evaluate(*model, *eval_data, micro_batch);
      metrics_writer.write({{"step", step + 1}, {"epoch", metrics.epoch}, {"eval_loss", eval.loss},
                            {"eval_ppl", eval.perplexity}, {"eval_tokens", eval.target_tokens},
                            {"eval_samples", eval.samples}});
      std::printf("eval at step %lld | eval_loss %.4f | eval_ppl %.3f | %lld target tokens in %lld samples\n",
                  static_cast<long long>(step + 1), eval.loss, eval.perplexity,
                  static_cast<long long>(eval.target_tokens), static_cast<long long>(eval.samples));
      std::fflush(stdout);
    }
  }
  std::printf("zerotune train: done, %lld steps (%lld skipped); metrics in %s\n", static_cast<long long>(total_steps),
              static_cast<long long>(skipped), (fs::path(config.out_dir) / "metrics.jsonl").c_str());
}

}  // namespace zt
