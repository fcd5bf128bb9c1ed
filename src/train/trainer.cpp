// The training run (trainer.h) as a short story of phases over one TrainingRun
// (training_run.h): prepare (checks, model and data), the device and the memory gate, the
// assembly (run_assembly.h), the step plan and resume, the run record, the loop
// (training_loop.cpp) and the finish.
#include "train/trainer.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "backend/backend.h"
#include "ckpt/checkpoint.h"
#include "ckpt/checkpoint_batch.h"
#include "ckpt/export.h"
#include "comm/mpi/mpi_communicator.h"
#include "data/data_model_check.h"
#include "model/lora.h"
#include "model/parameter_plan.h"
#include "model/peft_adapter.h"
#include "model/safetensors.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "train/memory_model.h"
#include "train/metrics.h"
#include "train/report_html.h"
#include "train/resume_batch.h"
#include "train/run_directory.h"
#include "train/step_schedule.h"
#include "train/stop_signal.h"
#include "train/training_run.h"

namespace zt {

namespace {

namespace fs = std::filesystem;

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

// --dump-final: rank 0 writes every trainable parameter; under a pipeline each stage's replica 0
// writes its stage's to PATH.stageS first, and rank 0 merges them in stage order (and removes them):
// a test and debugging file, so PATH must be on a file system every rank sees.
void write_final_weights(TrainingRun& run) {
  const std::string& path = run.config.dump_final_path;
  run.parts.engine->gather_full_params();
  if (!run.topology) {
    if (run.leader) write_final_dump(path, *run.parts.store);
    return;
  }
  const int stage = run.topology->stage_of(run.rank);
  if (run.topology->replica_of(run.rank) == 0) write_final_dump(cat(path, ".stage", stage), *run.parts.store);
  run.host_comm->barrier();
  if (!run.leader) return;
  std::vector<std::vector<float>> host;  // moving inner vectors keeps the entries' pointers valid
  std::vector<SafetensorsEntry> entries;
  for (int s = 0; s < run.topology->stages(); ++s) {
    const std::string part = cat(path, ".stage", s);
    {
      const SafetensorsFile file(part);
      for (const std::string& name : file.names()) {
        if (std::any_of(entries.begin(), entries.end(), [&](const SafetensorsEntry& e) { return e.name == name; }))
          continue;  // a tied table's copy on the last stage (the first stage's is the same)
        const SafetensorsTensorInfo& info = file.info(name);
        host.emplace_back(static_cast<size_t>(info.numel()));
        file.read_as_f32(name, host.back().data());
        entries.push_back({name, info.shape, host.back().data(), DType::F32, DType::F32});
      }
    }
    fs::remove(part);
  }
  write_safetensors(path, entries);
}

// A run whose predicted device peak exceeds the device's free memory stops here, before anything
// is allocated, saying which ZeRO / offload / checkpointing choices would fit.
void check_device_memory_fits(const Backend& backend, const TrainConfig& config, const ModelConfig& model_config,
                              int world_size, int rank, int64_t longest_sample, const DataLengths& data,
                              const MemoryTarget& memory_target, const MemoryPrediction& memory_prediction) {
  if (const std::optional<DeviceMemory> device = backend.memory()) {
    const int64_t free = device->device_free;
    const int64_t needed = memory_prediction.device_needed() - memory_target.fixed_bytes;  // the fixed part is held
    if (needed > free) {
      const std::vector<std::string> fits = fitting_memory_choices(
          config, model_config, world_size, longest_sample, memory_target, free + memory_target.fixed_bytes, data);
      std::string choices;
      for (const std::string& fit : fits) choices += "\n  " + fit;
      fail("rank ", rank, " (", backend.name(), "): this run needs about ", format_bytes(memory_prediction.device_needed()),
           " of device memory at its peak (", format_bytes(memory_prediction.device_setup), " after set-up; micro-batch ",
           config.micro_batch_size, " x ", longest_sample, " tokens, the longest sample), but only ",
           format_bytes(free + memory_target.fixed_bytes), " are free. ",
           packed_attention_note(config, longest_sample, data, memory_prediction), fits.empty() ? std::string("No ZeRO stage, offload or activation checkpointing choice fits: lower "
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
  identity.reference_from_model_dir = make_objective(config)->needs_frozen_reference(config);
  identity.data_digest = data_digest(dataset.shard_paths());
  identity.allow_data_change = allow_data_change;
  return identity;
}

// --resume on another number of ranks: the checkpoint's global batch kept by choosing the
// accumulation (train/resume_batch.h), said and recorded in run.json. Before the batch sizes are
// resolved: the accumulation changes the step's schedule, the memory prediction and the assembly.
void keep_resumed_batch(TrainingRun& run) {
  if (!run.resume_from) return;
  TrainConfig& config = run.config;
  const bool accumulation_fixed =
      run.options.grad_accum_given || config.deepspeed_keys.given.count("gradient_accumulation_steps") > 0;
  const std::optional<ResumeBatchDecision> decision =
      keep_checkpoint_batch(config, config.data_parallel_size(run.world_size), accumulation_fixed,
                            read_checkpoint_batch(*run.resume_from), *run.resume_from);
  if (!decision) return;
  run.resume_batch = decision->record;
  if (run.leader) std::printf("resume: %s\n", decision->text.c_str());
}

// Checks that need nothing loaded, the run directory, the batch sizes, then the model and data
// (and what they must agree on), before any device is touched.
void prepare(TrainingRun& run) {
  TrainConfig& config = run.config;
  run.host_comm = make_mpi_communicator(MPI_COMM_WORLD);
  run.host_comm->set_timeout(std::chrono::duration<double>(config.comm_timeout_seconds));
  run.comm = run.host_comm.get();
  run.world_size = run.host_comm->size();
  run.rank = run.host_comm->rank();
  run.leader = run.rank == 0;
  ZT_CHECK(!config.model_dir.empty(), "--model is required");
  ZT_CHECK(!config.data_dir.empty(), "--data is required");
  ZT_CHECK(!config.out_dir.empty(), "--out is required");
  ZT_CHECK(config.dump_step0_path.empty() || (run.world_size == 1 && config.zero.stage <= 1),
           "--dump-step0 needs one rank and ZeRO stage 0 or 1 (it writes full, unpartitioned gradients)");
  // An optimizer fused into backward (LOMO) keeps no gradients and takes one micro-batch per step.
  const std::unique_ptr<Optimizer> optimizer = make_optimizer(config.optimizer);
  ZT_CHECK(!optimizer->fuses_into_backward() || config.dump_step0_path.empty(), "--dump-step0 writes the step's "
           "gradients, which optimizer ", config.optimizer.type, " applies inside backward and never keeps");
  install_stop_signal_handlers();  // before loading: a signal during start-up stops after step 1, saved
  claim_run_directory(config.out_dir, !config.resume.empty(), run.options.overwrite, *run.host_comm);
  run.resume_from = resolve_resume_checkpoint(config.resume, config.out_dir, *run.host_comm);
  keep_resumed_batch(run);
  config.resolve_batch_sizes(run.world_size);
  run_schedule(config, *optimizer);  // an accumulation a fused optimizer cannot take is refused before loading
  check_gradient_dtype(config.grad_accum_dtype, config.compute_dtype, *optimizer);  // likewise
  if (run.leader)
    for (const std::string& note : run.options.notes) std::printf("note: %s\n", note.c_str());

  run.model_config = load_model_config(config.model_dir);
  check_pipeline_run(config, run.model_config, run.world_size, *optimizer);
  ZT_CHECK(!config.pipeline.enabled() || !run.options.samples.enabled(), "--pipeline-stages ", config.pipeline.stages,
           ": --sample-prompts generates with the whole model on every rank, which a pipeline stage does not hold");
  // QLoRA: --quantize, or the model's own bitsandbytes quantization_config (run.json records which).
  config.quantize = run_quantization(config.quantize, run.model_config.quantization, config.model_dir);
  run.dataset.emplace(TokenDataset::open(config.data_dir, config.data_split));
  const ShardAttributes& data_attrs = run.dataset->attributes();
  check_data_matches_model(data_attrs, config.data_dir, config.model_dir, run.model_config.vocab_size);
  if (!config.eval_data_dir.empty()) {
    run.eval_data.emplace(TokenDataset::open(config.eval_data_dir, config.eval_split));
    const ShardAttributes& eval_attrs = run.eval_data->attributes();
    ZT_CHECK(eval_attrs.tokenizer_sha256 == data_attrs.tokenizer_sha256 && eval_attrs.vocab_size == data_attrs.vocab_size,
             "the evaluation data ", config.eval_data_dir, " (tokenizer ", eval_attrs.tokenizer_sha256, ", vocab_size ",
             eval_attrs.vocab_size, ") was tokenized differently from the training data ", config.data_dir,
             " (tokenizer ", data_attrs.tokenizer_sha256, ", vocab_size ", data_attrs.vocab_size, ")");
  }
  if (run.options.samples.enabled())  // the prompts read and tokenized now: a bad file stops before any work
    run.samples = std::make_unique<TrainingSamples>(run.options.samples, config.model_dir, run.model_config,
                                                    config.out_dir, run.leader);
  if (!run.options.adapter_dir.empty()) {
    ZT_CHECK(!config.lora.enabled(), "--adapter takes the LoRA settings from ", run.options.adapter_dir,
             "/adapter_config.json: do not give --lora-r as well");
    config.lora = read_peft_adapter_config(run.options.adapter_dir);
  }
  config.lora = lora_with_default_targets(config.lora, run.model_config);  // as run.json and checkpoints record it
  // A sequence the model cannot take (learned positions end, a sliding window zerotune does not
  // implement) stops here rather than at the step whose batch holds it.
  check_sequence_length(run.model_config, run.dataset->longest_sample(), config.data_dir);
  if (run.eval_data) check_sequence_length(run.model_config, run.eval_data->longest_sample(), config.eval_data_dir);
  // The data must be what the objective trains on (pairs for reward), before anything is allocated.
  const std::unique_ptr<Objective> objective = make_objective(config);
  objective->check_data(config, *run.dataset, config.data_dir);
  if (run.eval_data) objective->check_data(config, *run.eval_data, config.eval_data_dir);
}

// --pipeline-stages: the layout (printed with the nodes each stage runs on), each stage's
// data-parallel group (collective over every rank), and the engine of this rank's stage.
void split_pipeline(TrainingRun& run) {
  const TrainConfig& config = run.config;
  if (!config.pipeline.enabled()) return;
  run.topology.emplace(run.world_size, static_cast<int>(config.pipeline.stages));
  const std::vector<std::string> nodes = run.host_comm->all_gather_strings(this_host());
  if (run.leader)
    for (const std::string& line : describe_topology(*run.topology, nodes)) std::printf("%s\n", line.c_str());
  const int stage = run.topology->stage_of(run.rank), replica = run.topology->replica_of(run.rank);
  run.stage_comm = run.comm->split(stage, replica);
  if (run.comm != run.host_comm.get()) run.stage_host_comm = run.host_comm->split(stage, replica);
  run.pipe = std::make_unique<PipeEngine>(config, *run.topology, run.rank, *run.comm, run.backend(),
                                          run.model_config.hidden_size, config.compute_dtype,
                                          run.model_config.tie_word_embeddings, run.comm->exchanges_independent());
  run.pipe->set_trace(PipeTrace::from_environment(run.rank, stage));  // ZT_PIPE_TRACE: the timeline (bench)
}

// The backend and its communicator, then what this rank will hold, predicted before anything is
// allocated (train/memory_model.h): a run that cannot fit stops here, saying what would.
void open_device(TrainingRun& run) {
  const TrainConfig& config = run.config;
  run.device = set_up_run_device(config.device, config.comm, *run.host_comm);
  if (run.device.comm) run.comm = run.device.comm.get();
  run.control().set_timeout(std::chrono::duration<double>(config.comm_timeout_seconds));
  run.longest_sample = run.dataset->longest_sample();
  run.data_lengths = data_lengths_of(*run.dataset);  // shorter samples: buffers grow later, rows pack more
  MemoryTarget target = memory_target_of(run.backend());
  target.pipeline_posts_ahead = run.comm->exchanges_independent();  // as split_pipeline's engine
  run.memory_prediction = predict_memory(config, run.model_config, run.world_size, run.rank, run.longest_sample,
                                         target, run.data_lengths);
  check_device_memory_fits(run.backend(), config, run.model_config, run.world_size, run.rank, run.longest_sample,
                           run.data_lengths, target, run.memory_prediction);
  split_pipeline(run);
}

// The run's parts with the model's weights: the base, then a PEFT adapter or fresh LoRA weights.
void assemble(TrainingRun& run) {
  const TrainConfig& config = run.config;
  const std::string& adapter_dir = run.options.adapter_dir;
  const std::unique_ptr<Objective> objective = make_objective(config);  // its added parameters' weights
  const UnitWeights weights = [&](ParamStore& store, int unit, const StageUnits& stage) {
    load_base_weights(config.model_dir, store, unit);
    objective->init_added_params(store, unit, config.model_dir, config.seed);
    if (!adapter_dir.empty()) load_peft_adapter_weights(adapter_dir, store, unit);
    else if (config.lora.enabled()) init_lora_weights(store, config.seed, unit, stage.adapter_index);
  };
  const int stage = run.topology ? run.topology->stage_of(run.rank) : 0;
  run.parts = assemble_run(config, run.model_config, run.backend(), run.data_comm(), run.data_host_comm(),
                           run.data_comm().size(), weights, nullptr, stage);
  if (run.pipe) run.pipe->attach(*run.parts.store, run.parts.stage);
}

// Batches (data/step_samples.h): the DistributedSampler's order cut into global batches, this
// rank's share of each in micro-batches; the number of steps and the learning-rate schedule.
void plan_steps(TrainingRun& run) {
  TrainConfig& config = run.config;
  // --packing: rows as long as the longest sample, so a packed micro-batch never holds more
  // positions than micro_batch x longest, what the memory prediction assumes.
  // Every stage of a replica reads the replica's samples (the data-parallel rank's).
  const int data_rank = run.topology ? run.topology->replica_of(run.rank) : run.rank;
  run.step_samples = std::make_unique<StepSamples>(*run.dataset, run.data_comm().size(), data_rank, config.seed,
                                                   config.shuffle,
                                                   config.train_batch_size, config.micro_batch_size,
                                                   config.group_by_length, config.packing ? run.longest_sample : 0);
  run.steps_per_epoch = run.step_samples->steps_per_epoch();
  ZT_CHECK(run.steps_per_epoch > 0, config.data_dir, ": ", run.dataset->num_samples(),
           " samples do not fill one global batch of ", config.train_batch_size, " (train_batch_size)");
  run.total_steps = config.max_steps > 0 ? config.max_steps : config.epochs * run.steps_per_epoch;
  resolve_schedule(config.scheduler, config.optimizer.lr, run.total_steps);
  ZT_CHECK(run.options.profiler_last <= run.total_steps, "--cuda-profiler-steps ends at step ",
           run.options.profiler_last, ", beyond this run's last step ", run.total_steps);
}

// Resume: the optimizer partitions (re-sliced for this world size and stage) and the position.
void resume(TrainingRun& run) {
  const TrainConfig& config = run.config;
  run.identity = run_identity(config, *run.dataset, run.options.allow_data_change);
  if (!run.resume_from) {  // (found in prepare: keep_resumed_batch)
    if (!config.resume.empty() && run.leader)
      std::printf("--resume %s: no checkpoint under %s yet, starting from step 0\n", config.resume.c_str(),
                  (fs::path(config.out_dir) / "checkpoints").c_str());
    return;
  }
  const std::string& from = *run.resume_from;
  run.state = load_checkpoint(from, run.identity, *run.parts.engine, *run.parts.store, run.data_comm(),
                              run.parts.stage.model_units());
  if (run.parts.scaler) run.parts.scaler->load_state(LossScalerState::from_json(run.state.loss_scaler, from), from);
  ZT_CHECK(run.state.step <= run.total_steps, from, " was saved after step ", run.state.step,
           ", beyond this run's last step ", run.total_steps,
           " (--max-steps / --epochs): give a larger --max-steps to continue it, or a new --out to start over");
  if (!run.leader) return;
  std::printf("resumed from %s at step %lld\n", from.c_str(), static_cast<long long>(run.state.step));
  for (const std::string& note : run.state.notes) std::printf("resume: %s\n", note.c_str());
}

// After the last step: the HF export (--save-hf-at-end), --dump-final, the summary and report.
void finish(TrainingRun& run) {
  const TrainConfig& config = run.config;
  run.control().set_context("after training");
  if (config.save_hf_at_end) {  // rank 0 exports the final checkpoint (every rank wrote its partition)
    if (run.leader) {
      ExportOptions hf;
      hf.checkpoint_dir = (fs::path(config.out_dir) / "checkpoints" / cat("global_step", run.total_steps)).string();
      hf.model_dir = config.model_dir;
      hf.out_dir = (fs::path(config.out_dir) / "hf").string();
      hf.format = "hf";
      hf.merge = config.lora.enabled();
      hf.dtype = config.compute_dtype;  // 16-bit as trained (fp32 runs: fp32)
      run.say(cat("--save-hf-at-end: ", export_checkpoint(hf)));
    }
    run.comm->barrier();
  }
  if (!config.dump_final_path.empty()) write_final_weights(run);
  run.comm->barrier();
  if (run.leader) {
    run.console->finish();
    const std::string metrics_path = (fs::path(config.out_dir) / "metrics.jsonl").string();
    std::printf("%s", format_run_summary(summarize_run(read_metrics_history(metrics_path))).c_str());
    std::printf("zerotune train: done, %lld steps (%lld skipped); metrics in %s, report in %s\n",
                static_cast<long long>(run.total_steps), static_cast<long long>(run.skipped), metrics_path.c_str(),
                write_report(config.out_dir).c_str());
    std::fflush(stdout);
  }
  // No update at all is a failed run, not a finished one (scripts test the exit status).
  const int64_t steps = run.total_steps - run.state.step, skipped = run.skipped - run.state.skipped;
  ZT_CHECK(steps == 0 || skipped < steps, "every one of the ", steps,
           " steps of this run was skipped (see the warnings above): no update was made");
}

}  // namespace

void run_training(TrainConfig config, const RunOptions& options) {
  TrainingRun run(std::move(config), options);
  prepare(run);
  open_device(run);
  assemble(run);
  plan_steps(run);
  resume(run);
  run.skipped = run.state.skipped;
  if (run.leader) write_run_record(run);
  if (!run_training_loop(run)) return;  // stopped by a signal, saved
  finish(run);
}

}  // namespace zt
