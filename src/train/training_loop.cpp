// The loop over optimizer steps (training_run.h): this rank's micro-batches (prefetched) -> the
// step's schedule run by the StepRunner -> metrics (rank 0) -> evaluation and checkpoints when due.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "data/batch_prefetcher.h"
#include "train/monitors.h"
#include "train/nonfinite_watch.h"
#include "train/profiler.h"
#include "train/report_html.h"
#include "train/run_directory.h"
#include "train/step_runner.h"
#include "train/stop_signal.h"
#include "train/training_run.h"

namespace zt {

namespace {

namespace fs = std::filesystem;

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
// Bytes by collective sent between two counter readings.
nlohmann::json bytes_by_collective(const CommStats& before, const CommStats& after) {
  nlohmann::json sent;
  for (int kind = 0; kind < kCollectiveKinds; ++kind)
    sent[collective_name(static_cast<Collective>(kind))] =
        after.bytes_sent[static_cast<size_t>(kind)] - before.bytes_sent[static_cast<size_t>(kind)];
  return sent;
}

// ZeRO++'s node groups count their own traffic (a node's ranks, and the ranks with one place on every node).
struct NodeTraffic {
  CommStats intra, inter;
};
NodeTraffic node_traffic(const ZeroEngine& engine) {
  const NodeGroups* groups = engine.node_groups();
  return groups ? NodeTraffic{groups->intra->traffic(), groups->inter->traffic()} : NodeTraffic{};
}

// With node groups: the step's bytes within the node (the node groups' intra communicator) and
// across nodes (the inter one, plus the ZeRO collectives over all ranks, whose rings cross nodes).
void add_node_traffic(nlohmann::json& record, const NodeTraffic& before, const NodeTraffic& after) {
  const nlohmann::json intra = bytes_by_collective(before.intra, after.intra);
  const nlohmann::json inter = bytes_by_collective(before.inter, after.inter);
  double intra_total = 0.0, inter_total = 0.0;
  for (const auto& [kind, bytes] : intra.items()) intra_total += bytes.get<double>();
  for (const auto& [kind, bytes] : inter.items()) inter_total += bytes.get<double>();
  for (const char* kind : {"all_reduce", "reduce_scatter", "all_gather", "all_to_all"})
    inter_total += record["comm_bytes_sent"][kind].get<double>();
  record["comm_bytes_sent_node_groups"] = {{"intra", intra}, {"inter", inter}};
  record["comm_bytes_intra_node"] = intra_total;
  record["comm_bytes_inter_node"] = inter_total;
}

nlohmann::json metrics_record(const StepMetrics& metrics, const Backend& backend, const CommStats& before,
                              const CommStats& after, int64_t cpu_backend_peak) {
  nlohmann::json record = metrics_json(metrics);
  if (const std::optional<DeviceMemory> memory = backend.memory())
    record["mem_device_store_peak"] = memory->store_peak;  // ZeRO's flat parameter + gradient buffers
  if (backend.device() == Device::CPU)  // the CPU backend's buffers: what the memory model's host peak predicts
    record["mem_cpu_backend_peak"] = cpu_backend_peak;
  record["comm_bytes_sent"] = bytes_by_collective(before, after);
  return record;
}

class TrainingLoop {
 public:
  explicit TrainingLoop(TrainingRun& run)
      : run_(run), config_(run.config),
        prefetcher_([&run](int64_t step) { return run.step_samples->rank_batches(step); }, run.state.step,
                    run.total_steps),
        runner_(step_config_of(run.config), *run.parts.model, *run.parts.objective, *run.parts.engine, *run.parts.store, run.backend(),
                run.data_comm(), run.control(), run.parts.scaler ? &*run.parts.scaler : nullptr,
                run.model_config.vocab_size),
        last_saved_step_(run.resume_from ? run.state.step : -1) {
    runner_.set_pipeline(run.pipe.get());
    runner_.set_more_chunks(run.parts.more_chunk_models());
    if (run.leader) {
      const std::string metrics_path = (fs::path(config_.out_dir) / "metrics.jsonl").string();
      if (run.resume_from) trim_metrics_for_resume(metrics_path, run.state.step);  // later steps run again
      metrics_writer_.emplace(metrics_path, run.resume_from.has_value());
      open_monitors();
    }
    log_every_ = run.options.log_every > 0 ? run.options.log_every : std::max<int64_t>(1, config_.steps_per_print);
    if (run.options.report_nonfinite) {
      nonfinite_ = std::make_unique<NonFiniteWatch>(*run.parts.engine, *run.parts.store, run.backend());
      run.parts.model->set_unit_hooks(nonfinite_.get());
    }
  }

  ~TrainingLoop() {
    if (nonfinite_) run_.parts.model->set_unit_hooks(run_.parts.engine.get());  // the watch goes with the loop
  }

  bool run() {
    // --eval-at-start: the untrained model's perplexity first, as DeepSpeed-Chat's "Epoch 0".
    if (config_.eval_at_start && run_.eval_data && run_.state.step == 0) evaluate_now(0, 0.0);
    for (int64_t step = run_.state.step; step < run_.total_steps; ++step) {
      const StepMetrics metrics = train_step(step);
      evaluate_if_due(step, metrics.epoch);
      sample_if_due(step);
      if (save_or_stop(step)) return false;
    }
    return true;
  }

 private:
  // One optimizer step and its metrics (rank 0 writes them), timed modules under --profile-step.
  StepMetrics train_step(int64_t step) {
    Backend& backend = run_.backend();
    Communicator& control = run_.control();
    const RunOptions& options = run_.options;
    const auto start = std::chrono::steady_clock::now();
    control.set_context(cat("step ", step + 1));
    const CommStats comm_before = control.stats();
    const NodeTraffic nodes_before = node_traffic(*run_.parts.engine);
    const bool profiling = options.profile_step == step + 1;
    // --cuda-profiler-steps: from its first step (or the first step of a resumed run inside it).
    if (options.profiler_first > 0 && step + 1 == std::max(options.profiler_first, run_.state.step + 1) &&
        step + 1 <= options.profiler_last)
      backend.profiler_range(true);
    if (profiling) run_.parts.model->set_module_timer(&profiler_);
    const double comm_wait_at_start = control.stats().total_wait_seconds();
    StepBatches batches = prefetcher_.take(step);
    if (nonfinite_) nonfinite_->begin_step();
    const StepOutcome outcome =
        runner_.run(step, step - run_.skipped, batches, run_.parts.schedule, profiling ? &profiler_ : nullptr);
    if (outcome.skipped) {
      ++run_.skipped;
      run_.say(cat("warning: step ", step + 1, " skipped (", *outcome.skipped, ")"));
      if (nonfinite_) report_nonfinite(step, outcome);
    }
    StepMetrics metrics = step_metrics(outcome, step, run_.total_steps, run_.steps_per_epoch, run_.skipped,
                                       config_.train_batch_size);
    metrics.objective_figures = run_.parts.objective->step_figures(*run_.comm);  // every rank: a collective
    metrics.step_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    step_times_.add(metrics.step_seconds);
    metrics.mean_step_seconds = step_times_.mean();
    if (profiling) report_profile(step, metrics.step_seconds, control.stats().total_wait_seconds() - comm_wait_at_start);
    metrics.flops = outcome.flops;
    metrics.peak_tflops = options.peak_tflops;
    metrics.world_size = run_.world_size;
    if (const std::optional<DeviceMemory> memory = backend.memory()) {
      metrics.mem_device = memory->in_use;
      metrics.mem_device_peak = memory->peak;
    }
    int64_t cpu_backend_peak = backend.device() == Device::CPU ? cpu_backend_memory().peak : 0;
    if (config_.pipeline.enabled()) heaviest_stage_peaks(metrics, cpu_backend_peak);
    if (run_.leader) {
      nlohmann::json record = metrics_record(metrics, backend, comm_before, control.stats(), cpu_backend_peak);
      if (run_.parts.engine->node_groups()) add_node_traffic(record, nodes_before, node_traffic(*run_.parts.engine));
      metrics_writer_->write(record);
      if (monitors_) monitors_->write_step(record);
      run_.console->step(metrics, (step + 1) % log_every_ == 0 || step + 1 == run_.total_steps);
    }
    if (step + 1 == options.profiler_last) backend.profiler_range(false);
    return metrics;
  }

  // Under a pipeline the stages hold different units and in-flight inputs: the peaks recorded are
  // the heaviest rank's (every rank's call), the job's need as `zerotune estimate` predicts it.
  void heaviest_stage_peaks(StepMetrics& metrics, int64_t& cpu_backend_peak) {
    Communicator& world = *run_.host_comm;
    cpu_backend_peak = static_cast<int64_t>(world.all_reduce_max(static_cast<double>(cpu_backend_peak)));
    const double device_peak = world.all_reduce_max(static_cast<double>(metrics.mem_device_peak.value_or(0)));
    if (metrics.mem_device_peak) metrics.mem_device_peak = static_cast<int64_t>(device_peak);
  }

  // --report-nonfinite: every rank's first non-finite gradient of the skipped step (all ranks
  // skip together: the overflow flag and the norm are global), or that the loss was not finite.
  void report_nonfinite(int64_t step, const StepOutcome& outcome) {
    const std::vector<std::string> findings =
        run_.host_comm->all_gather_strings(nonfinite_->finding().value_or(""));
    bool any = false;
    for (size_t rank = 0; rank < findings.size(); ++rank) {
      if (findings[rank].empty()) continue;
      any = true;
      run_.say(cat("non-finite: step ", step + 1, ", rank ", rank, ": inf/NaN first in the ", findings[rank]));
    }
    if (!std::isfinite(outcome.loss))
      run_.say(cat("non-finite: step ", step + 1, ": the loss is ",
                   std::isnan(outcome.loss) ? "NaN" : (outcome.loss > 0 ? "inf" : "-inf"),
                   " (the forward overflowed before any gradient)"));
    else if (!any)
      run_.say(cat("non-finite: step ", step + 1, ": no gradient held inf/NaN before its reduction (the overflow came "
                   "in the reduction or the rounding to ", dtype_name(config_.compute_dtype), ")"));
  }

  // DeepSpeed's tensorboard / csv_monitor sections: the same records, in their files (rank 0).
  void open_monitors() {
    if (!Monitors::wanted(config_)) return;
    std::optional<Monitors::Resume> resume;
    if (run_.resume_from) resume = Monitors::Resume{run_.state.step, *run_.resume_from};
    monitors_.emplace(config_, resume, run_.parts.scaler.has_value());
    for (const std::string& line : monitors_->describe()) run_.say(line);
  }

  // --profile-step: the table on the console, profile.json in OUT.
  void report_profile(int64_t step, double step_seconds, double comm_wait_seconds) {
    run_.parts.model->set_module_timer(nullptr);
    profiler_.table.add("communication", 0.0, comm_wait_seconds);
    profiler_.table.step = step + 1;
    profiler_.table.step_seconds = step_seconds;
    profiler_.table.rank = run_.rank;
    run_.say(format_profile_table(profiler_.table));
    if (run_.leader)
      write_text_file((fs::path(config_.out_dir) / "profile.json").string(), profile_json(profiler_.table).dump(2) + "\n");
  }

  // At the end of each epoch and every eval_every steps, when there is evaluation data.
  void evaluate_if_due(int64_t step, double epoch) {
    const bool epoch_end = (step + 1) % run_.steps_per_epoch == 0;
    const bool eval_due = config_.eval_every > 0 && (step + 1) % config_.eval_every == 0;
    if (!run_.eval_data || !(epoch_end || eval_due)) return;
    evaluate_now(step + 1, epoch);
  }

  // Evaluation after `steps_done` steps: a metrics.jsonl record with the objective's eval_* fields
  // and its console line (the SFT objective's: the perplexity as DeepSpeed-Chat's step 1 prints it).
  void evaluate_now(int64_t steps_done, double epoch) {
    run_.control().set_context(steps_done == 0 ? std::string("evaluation before training")
                                               : cat("evaluation after step ", steps_done));
    const ObjectiveEval eval = run_.pipe ? evaluate_pipeline() : run_.parts.objective->evaluate(
        *run_.parts.model, *run_.eval_data, config_.micro_batch_size, *run_.comm, run_.backend());
    if (!run_.leader) return;
    nlohmann::json record = {{"step", steps_done}, {"epoch", epoch}};
    record.update(eval.record);  // the objective's eval_* fields (train/objective.h)
    metrics_writer_->write(record);
    if (monitors_) monitors_->write_eval(record);
    char epoch_text[32];
    std::snprintf(epoch_text, sizeof epoch_text, "%.2f", epoch);
    run_.say(cat("eval at step ", steps_done, " (epoch ", epoch_text, ") | ", eval.line));
  }

  // A pipeline (sft only: check_pipeline_run) evaluates through its stages, each replica its records.
  ObjectiveEval evaluate_pipeline() {
    std::vector<CausalLM*> chunks = {run_.parts.model.get()};
    for (CausalLM* chunk : run_.parts.more_chunk_models()) chunks.push_back(chunk);
    return sft_eval_of(run_.pipe->evaluate(chunks, *run_.eval_data, config_.micro_batch_size, run_.data_comm()));
  }

  // --sample-prompts: every --sample-every steps and after the last (every rank, in lockstep).
  void sample_if_due(int64_t step) {
    if (!run_.samples || !run_.samples->due(step + 1, run_.total_steps)) return;
    run_.control().set_context(cat("samples after step ", step + 1));
    run_.samples->run(step + 1, *run_.parts.model, run_.backend(), run_.parts.store->param_dtype(), *run_.comm,
                      [&](const std::string& line) { run_.say(line); });
  }

  // Checkpoints: every save_every steps, at the end, and when the batch system asks us to stop
  // (then true: the run ends here, saved).
  bool save_or_stop(int64_t step) {
    const bool stop = run_.comm->all_reduce_max(static_cast<double>(stop_signal_received())) > 0;
    const bool save_due = (config_.save_every > 0 && (step + 1) % config_.save_every == 0) || stop ||
                          (config_.save_at_end && step + 1 == run_.total_steps);
    if (save_due && last_saved_step_ != step + 1) {
      run_.control().set_context(cat("checkpoint at step ", step + 1));
      save(step + 1);
    }
    if (!stop) return false;
    run_.say(cat("zerotune train: stop requested (signal) at step ", step + 1, " of ", run_.total_steps,
                 ": checkpoint saved, exiting; run again with --resume auto to continue"));
    if (run_.console) run_.console->finish();
    if (run_.leader) write_report(config_.out_dir);
    return true;
  }

  void save(int64_t steps_done) {
    TrainingState now;
    now.step = steps_done;
    now.skipped = run_.skipped;
    now.samples_consumed = steps_done * config_.train_batch_size;
    if (run_.parts.scaler) {
      now.loss_scale = run_.parts.scaler->scale();
      now.loss_scaler = run_.parts.scaler->state().to_json();
    }
    // DPU: the update in flight completes first, so the run continues from the state it saves
    // (exactly as a run resumed from it does).
    run_.parts.engine->finish_delayed_update();
    const std::optional<PipelineCheckpoint> pipeline = run_.pipeline_checkpoint();
    const std::string dir = save_checkpoint(config_.out_dir, now, run_.identity, config_.to_json(), *run_.parts.engine,
                                            *run_.parts.store, run_.data_comm(), config_.keep_last,
                                            pipeline ? &*pipeline : nullptr);
    last_saved_step_ = steps_done;
    run_.say(cat("checkpoint saved: ", dir));
  }

  TrainingRun& run_;
  const TrainConfig& config_;
  // This rank's micro-batches of each step, built one step ahead on a background thread.
  BatchPrefetcher prefetcher_;
  StepRunner runner_;
  int64_t last_saved_step_;
  int64_t log_every_ = 1;
  std::optional<MetricsWriter> metrics_writer_;  // rank 0
  std::optional<Monitors> monitors_;             // rank 0, when the DeepSpeed JSON enables any
  StepTimeAverage step_times_;
  StepProfiler profiler_;
  std::unique_ptr<NonFiniteWatch> nonfinite_;  // --report-nonfinite (between the model and the engine)
};

}  // namespace

bool run_training_loop(TrainingRun& run) {
  run.backend().reset_memory_peak();  // mem_device_peak: the peak of the training steps, not of set-up
  reset_cpu_backend_peak();           // mem_cpu_backend_peak likewise (the CPU backend's buffers)
  if (run.leader) run.console.emplace(stdout, ConsoleProgress::wants_bar(stdout));
  TrainingLoop loop(run);
  return loop.run();
}

}  // namespace zt
