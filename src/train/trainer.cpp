// The training run: set-up (model, data, ZeRO engine, resume), then the loop over optimizer
// steps: this rank's micro-batches (data/step_samples.h, prefetched) -> the step's schedule run
// by the StepRunner (forward/backward, reduction, update: train/step_runner.h) -> metrics
// (rank 0) -> evaluation and checkpoints when due.
#include "train/trainer.h"

#include <mpi.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <span>

#include "backend/backend.h"
#include "backend/make_backend.h"
#include "comm/device_communicator.h"
#include "ckpt/checkpoint.h"
#include "ckpt/export.h"
#include "comm/mpi/mpi_communicator.h"
#include "core/fault_injection.h"
#include "data/batch.h"
#include "data/batch_prefetcher.h"
#include "data/data_model_check.h"
#include "data/length_grouping.h"
#include "data/step_samples.h"
#include "data/token_shards.h"
#include "model/causal_lm.h"
#include "model/config.h"
#include "model/lora.h"
#include "model/param_store.h"
#include "model/parameter_plan.h"
#include "model/peft_adapter.h"
#include "model/safetensors.h"
#include "optim/grad_clip.h"
#include "optim/optimizer.h"
#include "optim/loss_scaler.h"
#include "optim/lr_schedule.h"
#include "train/batch_views.h"
#include "train/evaluation.h"
#include "train/memory_model.h"
#include "train/metrics.h"
#include "train/profiler.h"
#include "train/report_html.h"
#include "train/run_directory.h"
#include "train/step_runner.h"
#include "train/step_schedule.h"
#include "train/stop_signal.h"
#include "train/versions.h"
#include "zero/zero_engine.h"

namespace zt {

namespace {

namespace fs = std::filesystem;

void write_text_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  ZT_CHECK(out, path.string(), ": cannot write: ", std::strerror(errno));
}

// --dump-final: every trainable parameter (fp32, HF names) after the last step.
// (Host copies: the store may be on a GPU.)
void write_final_dump(const std::string& path, const ParamStore& store) {
  std::vector<std::vector<float>> host;  // moving inner vectors keeps the entries' pointers valid
  std::vector<SafetensorsEntry> entries;
  for (const ParamEntry& entry : store.entries()) {
    if (entry.group == ParamGroup::Frozen) continue;
    host.push_back(store.read_param(entry.spec.name));
    entries.push_back({entry.spec.name, entry.spec.shape, host.back().data(), DType::F32, DType::F32});
  }
  write_safetensors(path, entries);
}

std::string mib(int64_t bytes) { return cat(static_cast<double>(bytes) / (1024.0 * 1024.0), " MiB"); }

// Rank 0's start banner: the per-rank memory of the ZeRO layout and the expected traffic.
void print_zero_banner(const ZeroEngine& engine, const ZeroConfig& zero, int world_size, int nodes,
                       int64_t accumulation, const char* precision, DType grad_dtype) {
  const ZeroMemory m = engine.memory();
  const ZeroCommPlan plan = engine.comm_plan(accumulation);
  std::printf("zero: stage %d, offload_optimizer %s, offload_param %s, %d rank(s) on %d node(s), precision %s\n",
              zero.stage, zero.offload_optimizer_device.c_str(), zero.offload_param_device.c_str(), world_size, nodes,
              precision);
  const std::string widening = m.gradient_widening ? cat(" + ", mib(m.gradient_widening), " fp32 for the update") : "";
  std::printf("zero: per rank: parameters %s, gradients %s (%s%s), fp32 master %s, optimizer state %s%s\n",
              mib(m.compute_params).c_str(), mib(m.gradients).c_str(), dtype_name(grad_dtype), widening.c_str(),
              mib(m.master_params).c_str(),
              mib(m.optimizer_state).c_str(), m.host_bytes ? cat(" (host: ", mib(m.host_bytes), ")").c_str() : "");
  std::printf("zero: expected traffic per step and rank: all-reduce %s, reduce-scatter %s, all-gather %s\n",
              mib(static_cast<int64_t>(plan.all_reduce)).c_str(), mib(static_cast<int64_t>(plan.reduce_scatter)).c_str(),
              mib(static_cast<int64_t>(plan.all_gather)).c_str());
}

// A run whose predicted device peak exceeds the device's free memory stops here, before anything
// is allocated, saying which ZeRO / offload / checkpointing choices would fit.
void check_device_memory_fits(const Backend& backend, const TrainConfig& config, const ModelConfig& model_config,
                              int world_size, int rank, int64_t longest_sample, int64_t regrowth,
                              const MemoryTarget& memory_target, const MemoryPrediction& memory_prediction) {
  if (const std::optional<DeviceMemory> device = backend.memory()) {
    const int64_t free = device->device_free;
    const int64_t needed = memory_prediction.device_needed() - memory_target.fixed_bytes;  // the fixed part is held
    if (needed > free) {
      const std::vector<std::string> fits = fitting_memory_choices(
          config, model_config, world_size, longest_sample, memory_target, free + memory_target.fixed_bytes, regrowth);
      std::string choices;
      for (const std::string& fit : fits) choices += "\n  " + fit;
      fail("rank ", rank, " (", backend.name(), "): this run needs about ", format_bytes(memory_prediction.device_needed()),
           " of device memory at its peak (", format_bytes(memory_prediction.device_setup), " after set-up; micro-batch ",
           config.micro_batch_size, " x ", longest_sample, " tokens, the longest sample), but only ",
           format_bytes(free + memory_target.fixed_bytes), " are free. ",
           fits.empty() ? std::string("No ZeRO stage, offload or activation checkpointing choice fits: lower "
                                      "train_micro_batch_size_per_gpu or the data's max_seq_len, use LoRA, or use more GPUs.")
                        : cat("These choices would fit (predicted peak):", choices));
    }
  }
}

// What a checkpoint must match to be resumed by this run (ckpt/checkpoint.h).
RunIdentity run_identity(const TrainConfig& config, const TokenDataset& dataset, bool allow_data_change) {
  RunIdentity identity;
  identity.model_dir = config.model_dir;
  identity.model_checksum = model_structure_checksum(config.model_dir);
  identity.train_batch_size = config.train_batch_size;
  identity.dataset_samples = dataset.num_samples();
  identity.seed = config.seed;
  identity.shuffle = config.shuffle;
  identity.lora = config.lora;
  identity.quantize = config.quantize;
  identity.model_weights_digest = model_weights_digest(config.model_dir);
  identity.data_digest = data_digest(dataset.shard_paths());
  identity.allow_data_change = allow_data_change;
  return identity;
}

// A step's figures for metrics.jsonl and the console (step_seconds and what follows: the caller's).
StepMetrics step_metrics(const StepOutcome& outcome, int64_t step, int64_t total_steps, int64_t steps_per_epoch,
                         int64_t skipped, int64_t global_batch) {
  StepMetrics metrics;
  metrics.step = step + 1;
  metrics.total_steps = total_steps;
  metrics.epoch = static_cast<double>(step + 1) / static_cast<double>(steps_per_epoch);
  metrics.loss = outcome.loss;
  metrics.lr = outcome.lr;
  metrics.grad_norm = outcome.grad_norm;
  metrics.loss_scale = outcome.loss_scale;
  metrics.skipped = skipped;
  metrics.samples = global_batch;
  metrics.tokens = static_cast<int64_t>(outcome.real_tokens);
  metrics.target_tokens = outcome.target_tokens;
  metrics.padding_fraction = outcome.padded_tokens > 0 ? 1.0 - outcome.real_tokens / outcome.padded_tokens : 0.0;
  return metrics;
}

// Rank 0's metrics.jsonl record of a step: `metrics`, the memory figures the memory model is
// checked against, and the bytes sent in the step by collective (`before` and `after` it).
nlohmann::json metrics_record(const StepMetrics& metrics, const Backend& backend, const CommStats& before,
                              const CommStats& after) {
  nlohmann::json record = metrics_json(metrics);
  if (const std::optional<DeviceMemory> memory = backend.memory())
    record["mem_device_store_peak"] = memory->store_peak;  // ZeRO's flat parameter + gradient buffers
  if (backend.device() == Device::CPU)  // the CPU backend's buffers: what the memory model's host peak predicts
    record["mem_cpu_backend_peak"] = cpu_backend_memory().peak;
  nlohmann::json sent;
  for (int kind = 0; kind < kCollectiveKinds; ++kind)
    sent[collective_name(static_cast<Collective>(kind))] =
        after.bytes_sent[static_cast<size_t>(kind)] - before.bytes_sent[static_cast<size_t>(kind)];
  record["comm_bytes_sent"] = sent;
  return record;
}

}  // namespace

void run_training(TrainConfig config, const RunOptions& options) {
  // host_comm: MPI; it keeps the traffic counters, the timeout and the error context. comm: what
  // the collectives go through (host staging around MPI when the backend is a GPU's).
  std::unique_ptr<Communicator> host_comm = make_mpi_communicator(MPI_COMM_WORLD);
  host_comm->set_timeout(std::chrono::duration<double>(config.comm_timeout_seconds));
  Communicator* comm = host_comm.get();
  const int world_size = comm->size(), rank = comm->rank();
  const bool leader = rank == 0;
  ZT_CHECK(!config.model_dir.empty(), "--model is required");
  ZT_CHECK(!config.data_dir.empty(), "--data is required");
  ZT_CHECK(!config.out_dir.empty(), "--out is required");
  ZT_CHECK(config.dump_step0_path.empty() || (world_size == 1 && config.zero.stage <= 1),
           "--dump-step0 needs one rank and ZeRO stage 0 or 1 (it writes full, unpartitioned gradients)");
  // An optimizer fused into backward (LOMO) keeps no gradients and takes one micro-batch per step.
  const bool fused_optimizer = make_optimizer(config.optimizer)->fuses_into_backward();
  ZT_CHECK(!fused_optimizer || config.dump_step0_path.empty(), "--dump-step0 writes the step's gradients, which "
           "optimizer ", config.optimizer.type, " applies inside backward and never keeps");
  install_stop_signal_handlers();  // before loading: a signal during start-up stops after step 1, saved
  claim_run_directory(config.out_dir, !config.resume.empty(), options.overwrite, *host_comm);
  config.resolve_batch_sizes(world_size);
  if (fused_optimizer) fused_update_schedule(config.gradient_accumulation_steps, false);  // refused before loading
  check_gradient_dtype(config.grad_accum_dtype, config.compute_dtype, *make_optimizer(config.optimizer));  // likewise
  if (leader)
    for (const std::string& note : options.notes) std::printf("note: %s\n", note.c_str());

  // Model, data and parameters.
  const ModelConfig model_config = load_model_config(config.model_dir);
  // QLoRA: --quantize, or the model's own bitsandbytes quantization_config (run.json records which).
  config.quantize = run_quantization(config.quantize, model_config.quantization, config.model_dir);
  const TokenDataset dataset = TokenDataset::open(config.data_dir, config.data_split);
  const ShardAttributes& data_attrs = dataset.attributes();
  check_data_matches_model(data_attrs, config.data_dir, config.model_dir, model_config.vocab_size);
  std::unique_ptr<TokenDataset> eval_data;
  if (!config.eval_data_dir.empty()) {
    eval_data = std::make_unique<TokenDataset>(TokenDataset::open(config.eval_data_dir, config.eval_split));
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
  config.lora = lora_with_default_targets(config.lora, model_config);  // as run.json and checkpoints record it
  // A sequence the model cannot take (learned positions end, a sliding window zerotune does not
  // implement) stops here rather than at the step whose batch holds it.
  check_sequence_length(model_config, dataset.longest_sample(), config.data_dir);
  if (eval_data) check_sequence_length(model_config, eval_data->longest_sample(), config.eval_data_dir);
  RunDevice run_device = set_up_run_device(config.device, config.comm, *host_comm);
  const DeviceChoice& device_choice = run_device.choice;
  const std::string& communicator_reason = run_device.comm_reason;
  std::unique_ptr<Backend> backend = std::move(run_device.backend);
  std::unique_ptr<Communicator> device_comm = std::move(run_device.comm);
  if (device_comm) comm = device_comm.get();
  Communicator* control = run_device.control;  // the timeout, error context and traffic counters
  control->set_timeout(std::chrono::duration<double>(config.comm_timeout_seconds));
  // What this rank will hold, predicted before anything is allocated (train/memory_model.h):
  // a run that cannot fit stops here, saying what would.
  const int64_t longest_sample = dataset.longest_sample();
  const int64_t regrowth = activation_regrowth_from(dataset);  // shorter samples: buffers grow later
  const MemoryTarget memory_target = memory_target_of(*backend);
  const MemoryPrediction memory_prediction =
      predict_memory(config, model_config, world_size, rank, longest_sample, memory_target, regrowth);
  check_device_memory_fits(*backend, config, model_config, world_size, rank, longest_sample, regrowth, memory_target,
                           memory_prediction);
  ParameterPlan plan = plan_parameters(model_config, config.lora, config.quantize);
  // Loaded unit by unit: under ZeRO-3 a rank never holds more than one unit beyond its
  // partition, not even while loading (zero_store_residency).
  const StoreResidency residency = zero_store_residency(config.zero, world_size, *make_optimizer(config.optimizer));
  ParamStore store(*backend, plan.specs, plan.trainable, world_size, config.compute_dtype, residency, plan.quant,
                   config.grad_accum_dtype);
  ZeroEngine engine(*backend, *comm, store, config.zero, config.optimizer, config.compute_dtype, host_comm.get());
  for (int unit = 0; unit < store.num_units(); ++unit) {
    if (!residency.params) store.commit_unit_params(unit);
    load_base_weights(config.model_dir, store, unit);
    if (!options.adapter_dir.empty()) load_peft_adapter_weights(options.adapter_dir, store, unit);
    else if (config.lora.enabled()) init_lora_weights(store, config.seed, unit);
    engine.init_unit_from_store(unit);
  }
  engine.finish_init();
  // fp16: DeepSpeed's dynamic loss scaler; bf16 and fp32 train unscaled (as DeepSpeed does).
  std::optional<DynamicLossScaler> scaler;
  if (config.compute_dtype == DType::F16) scaler.emplace(config.loss_scaler);

  ModelOptions model_options;
  model_options.activation_checkpointing = config.activation_checkpointing;
  model_options.offload_activations = config.offload_activations;
  model_options.head_chunk_rows = config.head_chunk_rows;
  if (config.lora.enabled()) {
    model_options.lora_scaling = lora_scaling(config.lora);
    model_options.lora_dropout = static_cast<float>(config.lora.dropout);
  }
  std::unique_ptr<CausalLM> model = make_causal_lm(model_config, store, *backend, model_options);
  model->set_unit_hooks(&engine);

  // Batches (data/step_samples.h): the DistributedSampler's order cut into global batches, this
  // rank's share of each in micro-batches.
  const int64_t global_batch = config.train_batch_size;
  const int64_t micro_batch = config.micro_batch_size;
  // --packing: rows as long as the longest sample, so a packed micro-batch never holds more
  // positions than micro_batch x longest, what the memory prediction above assumes.
  StepSamples step_samples(dataset, world_size, rank, config.seed, config.shuffle, global_batch, micro_batch,
                           config.group_by_length, config.packing ? longest_sample : 0);
  const int64_t steps_per_epoch = step_samples.steps_per_epoch();
  ZT_CHECK(steps_per_epoch > 0, config.data_dir, ": ", dataset.num_samples(), " samples do not fill one global batch of ",
           global_batch, " (train_batch_size)");
  const int64_t total_steps = config.max_steps > 0 ? config.max_steps : config.epochs * steps_per_epoch;
  resolve_schedule(config.scheduler, config.optimizer.lr, total_steps);
  ZT_CHECK(options.profiler_last <= total_steps, "--cuda-profiler-steps ends at step ", options.profiler_last,
           ", beyond this run's last step ", total_steps);

  // Resume: the optimizer partitions (re-sliced for this world size and stage) and the position.
  const RunIdentity identity = run_identity(config, dataset, options.allow_data_change);
  TrainingState state;
  const std::optional<std::string> resume_from = resolve_resume_checkpoint(config.resume, config.out_dir);
  if (resume_from) {
    state = load_checkpoint(*resume_from, identity, engine, store, *comm);
    if (scaler) scaler->load_state(LossScalerState::from_json(state.loss_scaler, *resume_from), *resume_from);
    ZT_CHECK(state.step <= total_steps, *resume_from, " was saved after step ", state.step, ", beyond this run's last step ",
             total_steps, " (--max-steps / --epochs): give a larger --max-steps to continue it, or a new --out to start over");
    if (leader) std::printf("resumed from %s at step %lld\n", resume_from->c_str(), static_cast<long long>(state.step));
    if (leader)
      for (const std::string& note : state.notes) std::printf("resume: %s\n", note.c_str());
  } else if (!config.resume.empty() && leader) {
    std::printf("--resume %s: no checkpoint under %s yet, starting from step 0\n", config.resume.c_str(),
                (fs::path(config.out_dir) / "checkpoints").c_str());
  }

  // Output directory (rank 0): run.json now, metrics.jsonl per step.
  std::optional<MetricsWriter> metrics_writer;
  if (leader) {
    fs::create_directories(config.out_dir);
    nlohmann::json run = config.to_json();
    run["world_size"] = world_size;
    run["nodes"] = comm->nodes();
    run["backend"] = backend->name();
    run["device"] = device_choice.device;
    run["device_reason"] = device_choice.reason;
    run["communicator"] = comm->name();
    run["communicator_reason"] = communicator_reason;
    run["versions"] = software_versions();
    run["parameters"] = {{"total", store.count_parameters(false)}, {"trainable", store.count_parameters(true)}};
    run["steps_per_epoch"] = steps_per_epoch;
    run["total_steps"] = total_steps;
    run["dataset"] = {{"samples", dataset.num_samples()}, {"shards", dataset.shard_paths().size()}};
    const ZeroMemory memory = engine.memory();
    run["zero_memory_per_rank"] = {{"parameters", memory.compute_params}, {"gradients", memory.gradients},
                                   {"gradient_widening", memory.gradient_widening},
                                   {"master_params", memory.master_params}, {"optimizer_state", memory.optimizer_state},
                                   {"host", memory.host_bytes}};
    nlohmann::json layout = {{"all_elements", 0}, {"trainable_elements", 0}, {"unit_elements", nlohmann::json::array()}};
    for (ParamGroup group : {ParamGroup::Frozen, ParamGroup::Decay, ParamGroup::NoDecay}) {
      layout["all_elements"] = layout["all_elements"].get<int64_t>() + store.group(group).numel;
      if (group != ParamGroup::Frozen)
        layout["trainable_elements"] = layout["trainable_elements"].get<int64_t>() + store.group(group).numel;
    }
    for (int unit = 0; unit < store.num_units(); ++unit) layout["unit_elements"].push_back(store.unit_numel(unit));
    run["zero_layout"] = layout;  // padded element counts: what the ZeRO formulas apply to
    run["memory_predicted"] = memory_prediction.to_json();
    run["memory_predicted"]["seq_len"] = longest_sample;
    run["memory_predicted"]["grown_from_seq_len"] = regrowth;
    backend->synchronize();  // discarded chunks given back: the device's figures are settled
    const std::optional<DeviceMemory> device = backend->memory();
    if (device) {
      run["memory_measured_setup"] = {{"device_used_bytes", device->device_used},
                                      {"backend_in_use_bytes", device->in_use}};
      run["device_memory"] = {{"discard_granularity_bytes", device->discard_granularity},
                              {"limit_bytes", device->limit}, {"counted_setup_bytes", device->counted}};
    }
    const ZeroCommPlan comm_plan = engine.comm_plan(config.gradient_accumulation_steps);
    run["zero_comm_plan_bytes_per_step"] = {{"all_reduce", comm_plan.all_reduce},
                                            {"reduce_scatter", comm_plan.reduce_scatter},
                                            {"all_gather", comm_plan.all_gather}};
    write_text_file(fs::path(config.out_dir) / "run.json", run.dump(2) + "\n");
    const std::string metrics_path = (fs::path(config.out_dir) / "metrics.jsonl").string();
    if (resume_from) trim_metrics_for_resume(metrics_path, state.step);  // steps after the checkpoint run again
    metrics_writer.emplace(metrics_path, resume_from.has_value());
    std::printf("zerotune train: %s, %lld parameters (%lld trainable), %lld samples, %lld steps of %lld samples "
                "(micro-batch %lld x accumulation %lld x %d ranks)\n",
                model_config.model_type.c_str(), static_cast<long long>(store.count_parameters(false)),
                static_cast<long long>(store.count_parameters(true)), static_cast<long long>(dataset.num_samples()),
                static_cast<long long>(total_steps), static_cast<long long>(global_batch),
                static_cast<long long>(micro_batch), static_cast<long long>(config.gradient_accumulation_steps),
                world_size);
    std::printf("device: %s (%s); communicator: %s (%s)\n", device_choice.device.c_str(), device_choice.reason.c_str(),
                comm->name().c_str(), communicator_reason.c_str());
    print_zero_banner(engine, config.zero, world_size, comm->nodes(), config.gradient_accumulation_steps,
                      config.compute_dtype == DType::F32 ? "fp32"
                      : config.compute_dtype == DType::BF16 ? "bf16 (fp32 master weights)"
                                                            : "fp16 (fp32 master weights, dynamic loss scaling)",
                      store.grad_dtype());
    std::printf("memory: rank 0 predicted %s after set-up, %s at the step's peak (micro-batch %lld x %lld tokens)%s%s\n",
                format_bytes(memory_prediction.device_setup).c_str(), format_bytes(memory_prediction.device_peak).c_str(),
                static_cast<long long>(micro_batch), static_cast<long long>(longest_sample),
                device ? cat("; the device reports ", format_bytes(device->device_used), " in use after set-up").c_str() : "",
                memory_prediction.host_peak ? cat("; host ", format_bytes(memory_prediction.host_peak)).c_str() : "");
    std::fflush(stdout);
  }

  backend->reset_memory_peak();  // mem_device_peak: the peak of the training steps, not of set-up
  reset_cpu_backend_peak();     // mem_cpu_backend_peak likewise (the CPU backend's buffers)
  const int64_t log_every = options.log_every > 0 ? options.log_every : std::max<int64_t>(1, config.steps_per_print);
  // Rank 0's console: the step lines (a progress bar on a terminal) and every other message.
  std::optional<ConsoleProgress> console;
  if (leader) console.emplace(stdout, ConsoleProgress::wants_bar(stdout));
  const auto say = [&](const std::string& line) {
    if (console) console->message(line);
  };
  StepTimeAverage step_times;
  StepProfiler profiler;
  int64_t skipped = state.skipped;
  // This rank's micro-batches of each step, built one step ahead on a background thread.
  BatchPrefetcher prefetcher([&](int64_t step) { return step_samples.rank_batches(step); }, state.step, total_steps);
  const StepConfig step_config{config.seed, config.optimizer.lr, config.scheduler, config.gradient_clipping,
                               config.dump_step0_path};
  StepRunner runner(step_config, *model, engine, store, *backend, *comm, *control, scaler ? &*scaler : nullptr,
                    model_config.vocab_size);
  // An optimizer fused into backward (LOMO) measures the global norm in a first backward when it
  // must clip by it or watch for fp16 overflow, and updates in a second.
  const std::vector<StepInstruction> schedule =
      engine.optimizer().fuses_into_backward()
          ? fused_update_schedule(config.gradient_accumulation_steps,
                                  config.gradient_clipping > 0.0 || config.compute_dtype == DType::F16)
          : gradient_accumulation_schedule(config.gradient_accumulation_steps);

  int64_t last_saved_step = resume_from ? state.step : -1;
  const auto save = [&](int64_t steps_done) {
    TrainingState now;
    now.step = steps_done;
    now.skipped = skipped;
    now.samples_consumed = steps_done * global_batch;
    if (scaler) {
      now.loss_scale = scaler->scale();
      now.loss_scaler = scaler->state().to_json();
    }
    const std::string dir = save_checkpoint(config.out_dir, now, identity, config.to_json(), engine, store, *comm, config.keep_last);
    last_saved_step = steps_done;
    say(cat("checkpoint saved: ", dir));
  };
  for (int64_t step = state.step; step < total_steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    control->set_context(cat("step ", step + 1));
    const CommStats comm_before = control->stats();
    const bool profiling = options.profile_step == step + 1;
    // --cuda-profiler-steps: from its first step (or the first step of a resumed run inside it).
    if (options.profiler_first > 0 && step + 1 == std::max(options.profiler_first, state.step + 1) &&
        step + 1 <= options.profiler_last)
      backend->profiler_range(true);
    if (profiling) model->set_module_timer(&profiler);
    const double comm_wait_at_start = control->stats().total_wait_seconds();
    StepBatches batches = prefetcher.take(step);
    const StepOutcome outcome = runner.run(step, step - skipped, batches, schedule, profiling ? &profiler : nullptr);
    if (outcome.skipped) {
      ++skipped;
      say(cat("warning: step ", step + 1, " skipped (", *outcome.skipped, ")"));
    }

    StepMetrics metrics = step_metrics(outcome, step, total_steps, steps_per_epoch, skipped, global_batch);
    metrics.step_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    step_times.add(metrics.step_seconds);
    metrics.mean_step_seconds = step_times.mean();
    if (profiling) {
      model->set_module_timer(nullptr);
      profiler.table.add("communication", 0.0, control->stats().total_wait_seconds() - comm_wait_at_start);
      profiler.table.step = step + 1;
      profiler.table.step_seconds = metrics.step_seconds;
      profiler.table.rank = rank;
      say(format_profile_table(profiler.table));
      if (leader) write_text_file(fs::path(config.out_dir) / "profile.json", profile_json(profiler.table).dump(2) + "\n");
    }
    metrics.flops = outcome.flops;
    metrics.peak_tflops = options.peak_tflops;
    metrics.world_size = world_size;
    if (const std::optional<DeviceMemory> memory = backend->memory()) {
      metrics.mem_device = memory->in_use;
      metrics.mem_device_peak = memory->peak;
    }
    if (leader) {
      metrics_writer->write(metrics_record(metrics, *backend, comm_before, control->stats()));
      console->step(metrics, (step + 1) % log_every == 0 || step + 1 == total_steps);
    }
    if (step + 1 == options.profiler_last) backend->profiler_range(false);
    const bool epoch_end = (step + 1) % steps_per_epoch == 0;
    const bool eval_due = config.eval_every > 0 && (step + 1) % config.eval_every == 0;
    if (eval_data && (epoch_end || eval_due)) {
      control->set_context(cat("evaluation after step ", step + 1));
      const EvalResult eval = evaluate(*model, *eval_data, micro_batch, *comm, *backend);
      if (leader) {
        metrics_writer->write({{"step", step + 1}, {"epoch", metrics.epoch}, {"eval_loss", eval.loss},
                               {"eval_ppl", eval.perplexity}, {"eval_tokens", eval.target_tokens},
                               {"eval_samples", eval.samples}});
        say(cat("eval at step ", step + 1, " | eval_loss ", eval.loss, " | eval_ppl ", eval.perplexity, " | ",
                eval.target_tokens, " target tokens in ", eval.samples, " samples"));
      }
    }
    // Checkpoints: every save_every steps, at the end, and when the batch system asks us to stop.
    const bool stop = comm->all_reduce_max(static_cast<double>(stop_signal_received())) > 0;
    const bool save_due = (config.save_every > 0 && (step + 1) % config.save_every == 0) || stop ||
                          (config.save_at_end && step + 1 == total_steps);
    if (save_due && last_saved_step != step + 1) {
      control->set_context(cat("checkpoint at step ", step + 1));
      save(step + 1);
    }
    if (stop) {
      say(cat("zerotune train: stop requested (signal) at step ", step + 1, " of ", total_steps,
              ": checkpoint saved, exiting; run again with --resume auto to continue"));
      if (console) console->finish();
      if (leader) write_report(config.out_dir);
      return;
    }
  }
  control->set_context("after training");
  if (config.save_hf_at_end) {  // rank 0 exports the final checkpoint (every rank wrote its partition)
    if (leader) {
      ExportOptions hf;
      hf.checkpoint_dir = (fs::path(config.out_dir) / "checkpoints" / cat("global_step", total_steps)).string();
      hf.model_dir = config.model_dir;
      hf.out_dir = (fs::path(config.out_dir) / "hf").string();
      hf.format = "hf";
      hf.merge = config.lora.enabled();
      hf.dtype = config.compute_dtype;  // 16-bit as trained (fp32 runs: fp32)
      say(cat("--save-hf-at-end: ", export_checkpoint(hf)));
    }
    comm->barrier();
  }
  if (!config.dump_final_path.empty()) {
    engine.gather_full_params();
    if (leader) write_final_dump(config.dump_final_path, store);
  }
  comm->barrier();
  if (leader) {
    console->finish();
    const std::string metrics_path = (fs::path(config.out_dir) / "metrics.jsonl").string();
    std::printf("%s", format_run_summary(summarize_run(read_metrics_history(metrics_path))).c_str());
    std::printf("zerotune train: done, %lld steps (%lld skipped); metrics in %s, report in %s\n",
                static_cast<long long>(total_steps), static_cast<long long>(skipped), metrics_path.c_str(),
                write_report(config.out_dir).c_str());
    std::fflush(stdout);
  }
  // No update at all is a failed run, not a finished one (scripts test the exit status).
  ZT_CHECK(total_steps == state.step || skipped - state.skipped < total_steps - state.step, "every one of the ",
           total_steps - state.step, " steps of this run was skipped (see the warnings above): no update was made");
}

}  // namespace zt
