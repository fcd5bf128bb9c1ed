// `zerotune autotune --model DIR --data DIR --out OUT [train's options] [--device-memory 24GiB]
//                    [--max-micro-batch N] [--trial-steps N] [--no-fast] [--stages 0,1,2,3]
//                    [--checkpointing both|off|on] [--no-offload] [--try-pipeline-stages 1,2]`:
// DeepSpeed's autotuner's job (which ZeRO stage and micro-batch is fastest), with offload and
// activation checkpointing tuned too and every experiment's memory predicted first
// (train/autotune.h). Every rank runs the same experiments, each a short `train` in
// OUT/autotuning_exps/<name>/; rank 0 writes OUT/autotuning_results/ (ds_config_optimal.json,
// cmd_optimal.txt, summary.txt, results.json) and OUT/report.html.
#include <mpi.h>

#include <boost/program_options.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

#include "backend/make_backend.h"
#include "cli/commands.h"
#include "cli/parse_options.h"
#include "cli/train_options.h"
#include "comm/mpi/mpi_communicator.h"
#include "core/error.h"
#include "data/token_shards.h"
#include "model/config.h"
#include "model/lora.h"
#include "model/lora_targets.h"
#include "model/safetensors.h"
#include "optim/optimizer.h"
#include "train/autotune.h"
#include "train/memory_model.h"
#include "train/memory_model_choices.h"
#include "train/metrics.h"
#include "train/pipe_engine.h"
#include "train/report_html.h"
#include "train/run_directory.h"
#include "train/trainer.h"

namespace zt {

namespace fs = std::filesystem;
namespace po = boost::program_options;

namespace {

// The trainer's configuration of one experiment (under a pipeline the batch counts the D = world / P
// data-parallel replicas, as DeepSpeed's pipeline engine does).
TrainConfig experiment_config(const TrainConfig& base, const AutotuneExperiment& experiment, int world_size) {
  TrainConfig config = with_choice(base, experiment.choice);
  config.micro_batch_size = experiment.micro_batch;
  config.gradient_accumulation_steps = experiment.accumulation;
  config.train_batch_size = experiment.micro_batch * experiment.accumulation * config.data_parallel_size(world_size);
  return config;
}

// The DeepSpeed JSON of a setting: the user's (comments allowed, as DeepSpeed reads it) or an
// empty one, with the tuned keys set.
nlohmann::ordered_json experiment_ds_config(const std::string& user_path, const AutotuneExperiment& experiment,
                                            const TrainConfig& config, int world_size) {
  nlohmann::ordered_json ds = nlohmann::ordered_json::object();
  if (!user_path.empty()) {
    std::ifstream in(user_path);
    ZT_CHECK(in, user_path, ": cannot open the --deepspeed file");
    ds = nlohmann::ordered_json::parse(in, nullptr, true, true);
  }
  ds["train_micro_batch_size_per_gpu"] = experiment.micro_batch;
  ds["gradient_accumulation_steps"] = experiment.accumulation;
  ds["train_batch_size"] = experiment.micro_batch * experiment.accumulation * config.data_parallel_size(world_size);
  if (config.pipeline.enabled() || ds.contains("pipeline")) ds["pipeline"]["stages"] = config.pipeline.stages;
  nlohmann::ordered_json& zero = ds["zero_optimization"];
  zero["stage"] = experiment.choice.stage;
  zero["offload_optimizer"]["device"] = experiment.choice.offload_optimizer ? "cpu" : "none";
  zero["offload_param"]["device"] = experiment.choice.offload_params ? "cpu" : "none";
  if (experiment.choice.zeropp_ranks_per_node > 0) {  // ZeRO++ in DeepSpeed's keys
    zero["zero_quantized_weights"] = zero["zero_quantized_gradients"] = true;
    zero["zero_hpz_partition_size"] = experiment.choice.zeropp_ranks_per_node;
  }
  return ds;
}

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  ZT_CHECK(out, path.string(), ": cannot open for writing");
  out << text;
  out.flush();
  ZT_CHECK(out, path.string(), ": write failed (disk full?)");
}

// Measured figures of a finished experiment (rank 0): samples/s and TFLOPS per rank over the
// steps after the first (its warm-up: allocations, plans), and the peak memory per rank.
void read_measurement(const std::string& out_dir, bool on_cpu, AutotuneExperiment& experiment) {
  const MetricsHistory history = read_metrics_history((fs::path(out_dir) / "metrics.jsonl").string());
  double seconds = 0.0, samples = 0.0, flops_seconds = 0.0;
  for (size_t i = 0; i < history.steps.size(); ++i) {
    const nlohmann::json& record = history.steps[i];
    const char* memory_key = on_cpu ? "mem_cpu_backend_peak" : "mem_device_peak";
    if (record.contains(memory_key) && record[memory_key].is_number())
      experiment.measured_bytes = std::max(experiment.measured_bytes, record[memory_key].get<int64_t>());
    if (i == 0 && history.steps.size() > 1) continue;
    const double step_seconds = record.value("step_time", 0.0);
    seconds += step_seconds;
    samples += record.value("samples", 0.0);
    flops_seconds += record.value("tflops_per_rank", 0.0) * step_seconds;
  }
  ZT_CHECK(seconds > 0.0, out_dir, "/metrics.jsonl: no timed step");
  experiment.samples_per_sec = samples / seconds;
  experiment.tflops_per_rank = flops_seconds / seconds;
}

// Rank 0's measurement to every rank (they decide the search together).
void share_measurement(AutotuneExperiment& experiment) {
  double values[3] = {experiment.samples_per_sec, experiment.tflops_per_rank,
                      static_cast<double>(experiment.measured_bytes)};
  MPI_Bcast(values, 3, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  experiment.samples_per_sec = values[0];
  experiment.tflops_per_rank = values[1];
  experiment.measured_bytes = static_cast<int64_t>(values[2]);
}

// `zerotune train` with the optimal setting: the autotune command line without the options it
// tunes or owns, with the optimal DeepSpeed JSON and a new --out.
std::string optimal_command(const std::vector<std::string>& args, const fs::path& ds_path, const fs::path& out,
                            const AutotuneExperiment& best) {
  const std::set<std::string> dropped_with_value = {"--deepspeed",     "--out",          "--zero-stage",
                                                    "--offload-optimizer", "--micro-batch-size", "--grad-accum",
                                                    "--device-memory", "--max-micro-batch", "--trial-steps",
                                                    "--stages",        "--checkpointing", "--max-steps",
                                                    "--pipeline-stages", "--try-pipeline-stages"};
  const std::set<std::string> dropped_switches = {"--activation-checkpointing", "--no-fast", "--no-offload",
                                                  "--overwrite"};
  std::string command = "zerotune train";
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string name = args[i].substr(0, args[i].find('='));
    if (dropped_switches.count(name)) continue;
    if (dropped_with_value.count(name)) {
      if (args[i].find('=') == std::string::npos) ++i;  // its value is the next argument
      continue;
    }
    command += " " + args[i];
  }
  command += cat(" --deepspeed ", ds_path.string(), " --out ", out.string());
  if (best.choice.activation_checkpointing) command += " --activation-checkpointing";
  return command;
}

std::vector<int> parse_stages(const std::string& text) {
  std::vector<int> stages;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    ZT_CHECK(item == "0" || item == "1" || item == "2" || item == "3", "--stages '", text,
             "': a comma-separated list of ZeRO stages 0-3");
    stages.push_back(std::stoi(item));
  }
  ZT_CHECK(!stages.empty(), "--stages is empty");
  return stages;
}

// The budget: the GPU's free memory (with what the backend holds by itself, as the memory
// model counts it), or --device-memory; the smallest over the ranks. `target`: the allocator the
// memory model counts for (the CPU's exact bytes without a GPU).
std::optional<int64_t> memory_budget(const TrainConfig& base, Communicator& comm, const po::variables_map& vm,
                                     MemoryTarget& target) {
  target = MemoryTarget{};
  target.device = Device::CPU;
  target.pipeline_posts_ahead = true;  // the CPU backend's stages exchange over MPI
  std::optional<int64_t> budget;
  if (resolve_device(base.device, comm.local_rank()).device == "cuda") {
    std::unique_ptr<Backend> backend = make_backend("cuda", comm.local_rank());
    target = memory_target_of(*backend);
    if (const std::optional<DeviceMemory> memory = backend->memory()) budget = memory->device_free + target.fixed_bytes;
  }
  if (vm.count("device-memory")) budget = parse_byte_size(vm["device-memory"].as<std::string>(), "--device-memory");
  if (budget) {
    int64_t smallest = *budget;
    MPI_Allreduce(MPI_IN_PLACE, &smallest, 1, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD);
    budget = smallest;
  }
  return budget;
}

// --try-pipeline-stages "1,2": the pipeline stages P to try, each dividing the world (none given:
// the run's own P, --pipeline-stages or the JSON's, 1 by default).
std::vector<int> parse_pipeline_stages(const po::variables_map& vm, const TrainConfig& base, int world_size) {
  if (!vm.count("try-pipeline-stages")) return {static_cast<int>(base.pipeline.stages)};
  ZT_CHECK(!vm.count("pipeline-stages"), "give either --pipeline-stages P (every experiment) or --try-pipeline-stages "
           "(a list to search), not both");
  const std::string text = vm["try-pipeline-stages"].as<std::string>();
  std::vector<int> stages;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    ZT_CHECK(!item.empty() && item.find_first_not_of("0123456789") == std::string::npos && std::stoi(item) >= 1,
             "--try-pipeline-stages '", text, "': a comma-separated list of pipeline stage counts >= 1");
    const int stage_count = std::stoi(item);
    ZT_CHECK(world_size % stage_count == 0, "--try-pipeline-stages '", text, "': ", stage_count,
             " stages do not divide the ", world_size, " ranks (each stage needs the same number of replicas)");
    stages.push_back(stage_count);
  }
  ZT_CHECK(!stages.empty(), "--try-pipeline-stages is empty");
  return stages;
}

// A branch a pipeline refuses (ZeRO-3, ZeRO-2 with a trainable tie, ...: check_pipeline_run) is
// left out of the search, as a setting the trainer would not start; nothing is left out without one.
bool pipeline_refuses(const TrainConfig& base, const ZeroChoice& choice, const ModelConfig& model, int world_size) {
  TrainConfig config = with_choice(base, choice);
  if (!config.pipeline.enabled()) return false;
  config.save_at_end = false;  // as the trials run (trial_config)
  config.save_every = 0;
  try {
    check_pipeline_run(config, model, world_size, *make_optimizer(config.optimizer));
  } catch (const Error&) {
    return true;
  }
  return false;
}

// The ZeRO stage x offload x checkpointing settings the search walks (--stages, --no-offload,
// --checkpointing), for each pipeline stage count P (--try-pipeline-stages); on several nodes (of
// ranks_per_node ranks each) every stage-3 one with ZeRO++ too.
std::vector<ZeroChoice> search_branches(const TrainConfig& base, const po::variables_map& vm,
                                        const std::string& checkpointing, const ModelConfig& model, int world_size,
                                        int nodes, int ranks_per_node) {
  std::vector<ZeroChoice> branches;
  const std::vector<int> stages = parse_stages(vm["stages"].as<std::string>());
  const bool searching_pipelines = vm.count("try-pipeline-stages") > 0;
  for (int pipeline_stages : parse_pipeline_stages(vm, base, world_size)) {
    for (ZeroChoice choice : zero_offload_choices(make_optimizer(base.optimizer)->fuses_into_backward())) {
      if (std::find(stages.begin(), stages.end(), choice.stage) == stages.end()) continue;
      if (vm["no-offload"].as<bool>() && (choice.offload_optimizer || choice.offload_params)) continue;
      choice.pipeline_stages = searching_pipelines ? pipeline_stages : 0;
      for (bool on : {false, true}) {
        if ((on && checkpointing == "off") || (!on && checkpointing == "on")) continue;
        choice.activation_checkpointing = on;
        if (pipeline_refuses(base, choice, model, world_size)) continue;
        branches.push_back(choice);
        if (choice.stage == 3 && nodes > 1 && ranks_per_node > 1) {
          ZeroChoice zeropp = choice;
          zeropp.zeropp_ranks_per_node = ranks_per_node;
          branches.push_back(zeropp);
        }
      }
    }
  }
  ZT_CHECK(!branches.empty(), "autotune: no setting to try: every ZeRO stage x offload x checkpointing choice of "
           "--stages is refused with the pipeline stages asked for (docs/pipeline.md: ZeRO-3, LOMO, objectives)");
  return branches;
}

// An experiment's need per rank: the device peak (on the CPU backend the host peak: its buffers);
// under a pipeline the heaviest stage's, the job's (the trainer records the heaviest rank's peak).
int64_t predicted_need(const TrainConfig& config, const ModelConfig& model, int world_size, int64_t seq_len,
                       const MemoryTarget& target, const DataLengths& data) {
  const bool on_cpu = target.device == Device::CPU;
  const std::vector<MemoryPrediction> stages = predict_stage_memory(config, model, world_size, seq_len, target, data);
  const MemoryPrediction& prediction = stages[heaviest_stage(stages, on_cpu)];
  return on_cpu ? prediction.host_peak : prediction.device_needed();
}

// One experiment's run: `trial_steps` steps into its own OUT, nothing saved, evaluated or dumped.
TrainConfig trial_config(const TrainConfig& base, const AutotuneExperiment& experiment, int world_size,
                         const std::string& out_dir, int64_t trial_steps) {
  TrainConfig config = experiment_config(base, experiment, world_size);
  config.out_dir = out_dir;
  config.max_steps = trial_steps;
  config.save_every = 0;
  config.save_at_end = false;
  config.save_hf_at_end = false;
  config.eval_every = 0;
  config.eval_data_dir.clear();
  config.dump_step0_path.clear();
  config.dump_final_path.clear();
  // The trials' figures go to their own OUT only: the JSON's monitors are for the real run
  // (ds_config_optimal.json keeps them).
  config.tensorboard.enabled = false;
  config.csv_monitor.enabled = false;
  return config;
}

// What the results files say about the search as a whole.
struct AutotuneSummary {
  const TrainConfig& base;
  int world_size;
  int64_t seq_len;
  std::optional<int64_t> budget;
  bool on_cpu, fast;
  int64_t trial_steps;
};

// Rank 0: autotuning_results/ (results.json, summary.txt, the optimal DeepSpeed JSON, command and
// flags), the HTML report, and the table on stdout.
void write_autotune_results(const std::vector<std::string>& args, const AutotuneSummary& summary,
                            const std::vector<AutotuneExperiment>& experiments, const AutotuneExperiment& best,
                            const fs::path& out, const fs::path& results_dir) {
  const TrainConfig& base = summary.base;
  const int world_size = summary.world_size;
  nlohmann::ordered_json results = {{"model", base.model_dir},
                                    {"data", base.data_dir},
                                    {"world_size", world_size},
                                    {"seq_len", summary.seq_len},
                                    {"budget_bytes", summary.budget ? nlohmann::ordered_json(*summary.budget) : nullptr},
                                    {"device", summary.on_cpu ? "cpu" : "cuda"},
                                    {"fast", summary.fast},
                                    {"trial_steps", summary.trial_steps},
                                    {"optimal", best.name},
                                    {"experiments", nlohmann::ordered_json::array()}};
  for (const AutotuneExperiment& experiment : experiments) results["experiments"].push_back(experiment.to_json());
  const fs::path ds_path = results_dir / "ds_config_optimal.json";
  write_file(ds_path, experiment_ds_config(base.deepspeed_config_path, best, experiment_config(base, best, world_size), world_size).dump(2) + "\n");
  write_file(results_dir / "cmd_optimal.txt", optimal_command(args, ds_path, out / "optimal", best) + "\n");
  // What a job script adds to `train` besides the JSON (activation checkpointing is a flag).
  write_file(results_dir / "flags_optimal.txt", best.choice.activation_checkpointing ? "--activation-checkpointing\n" : "\n");
  const std::string table = format_autotune_table(experiments);
  write_file(results_dir / "summary.txt", table);
  write_file(results_dir / "results.json", results.dump(2) + "\n");
  const std::string report = write_autotune_report(out.string(), results);
  std::printf("%szerotune autotune: the fastest is %s; %s, %s, %s\n", table.c_str(), best.name.c_str(),
              ds_path.c_str(), (results_dir / "cmd_optimal.txt").c_str(), report.c_str());
  std::fflush(stdout);
}

// autotune times real training steps, so it needs the model's weights; a directory with only
// config.json (the planning case) stops here, before minutes of predictions, saying what serves.
void require_model_weights(const std::string& model_dir) {
  try {
    ModelWeights weights(model_dir);
  } catch (const Error& error) {
    fail("autotune times training steps on the model's weights, and ", error.what(),
         ". To plan without weights: `zerotune estimate --model ", model_dir,
         " --data ...` (the memory model needs only config.json). To time trials on random weights of the same "
         "shapes: `zerotune init --config ", model_dir, "/config.json --out DIR`, then autotune --model DIR");
  }
}

}  // namespace

int command_autotune(const std::vector<std::string>& args) {
  po::options_description extra("zerotune autotune options");
  extra.add_options()
      ("device-memory", po::value<std::string>(), "memory budget per rank (24GiB; KiB/MiB/GiB powers of 2, KB/MB/GB of "
       "10); default: the GPU's free memory (on the CPU backend: no budget)")
      ("max-micro-batch", po::value<int64_t>()->default_value(64), "the largest train_micro_batch_size_per_gpu tried")
      ("trial-steps", po::value<int64_t>()->default_value(3), "optimizer steps per experiment (the first is not "
       "measured: warm-up)")
      ("no-fast", po::bool_switch(), "try every micro-batch that fits (default: a branch stops once its throughput "
       "falls or gains less than 5%, DeepSpeed's fast mode)")
      ("stages", po::value<std::string>()->default_value("0,1,2,3"), "ZeRO stages to try")
      ("checkpointing", po::value<std::string>()->default_value("both"), "activation checkpointing: both, off or on")
      ("no-offload", po::bool_switch(), "do not try optimizer or parameter offload")
      ("try-pipeline-stages", po::value<std::string>(), "pipeline stage counts P to try, e.g. 1,2 (each divides the "
       "ranks; default: only the run's own --pipeline-stages, 1 unless given); settings a pipeline refuses (ZeRO-3) "
       "are left out, each P's experiments are predicted by their heaviest stage");
  po::variables_map vm;
  ParsedTrainOptions parsed = parse_train_options(args, "autotune", extra, {"model", "data", "out"}, vm);
  if (parsed.help) return 0;
  TrainConfig base = parsed.config;
  const std::string checkpointing = vm["checkpointing"].as<std::string>();
  ZT_CHECK(checkpointing == "both" || checkpointing == "off" || checkpointing == "on",
           "--checkpointing must be both, off or on, not '", checkpointing, "'");
  const int64_t trial_steps = vm["trial-steps"].as<int64_t>();
  ZT_CHECK(trial_steps >= 2, "--trial-steps must be >= 2 (the first step is warm-up), not ", trial_steps);
  // Checked before the data is read: a bad flag value must not read as a data problem.
  const int64_t max_micro_batch = vm["max-micro-batch"].as<int64_t>();
  ZT_CHECK(max_micro_batch >= 1, "--max-micro-batch must be >= 1 (the largest micro-batch tried), not ", max_micro_batch);
  ZT_CHECK(base.resume.empty(), "--resume does not go with autotune (each experiment starts from the model)");
  require_model_weights(base.model_dir);  // before any prediction or trial: planning without weights is estimate's

  std::unique_ptr<Communicator> comm = make_mpi_communicator(MPI_COMM_WORLD);
  const int world_size = comm->size(), rank = comm->rank();
  const bool leader = rank == 0;
  const ModelConfig model = load_model_config(base.model_dir);
  base.lora = lora_with_default_targets(base.lora, model);
  const TokenDataset dataset = TokenDataset::open(base.data_dir, base.data_split);
  const int64_t seq_len = dataset.longest_sample();
  const DataLengths data = data_lengths_of(dataset);  // as `train` predicts it
  const int64_t accumulation = base.gradient_accumulation_steps > 0 ? base.gradient_accumulation_steps : 1;

  MemoryTarget target;
  const std::optional<int64_t> budget = memory_budget(base, *comm, vm, target);

  AutotuneSearch search;
  search.accumulation = accumulation;
  search.budget_bytes = budget;
  search.fast = !vm["no-fast"].as<bool>();
  // A micro-batch must leave every rank a sample in each global batch of the data.
  search.max_micro_batch = std::min(max_micro_batch,
                                    dataset.num_samples() / (static_cast<int64_t>(world_size) * accumulation));
  ZT_CHECK(search.max_micro_batch >= 1, base.data_dir, ": ", dataset.num_samples(),
           " samples do not fill one global batch of micro-batch 1 x ", accumulation, " x ", world_size, " ranks");
  search.branches = search_branches(base, vm, checkpointing, model, world_size, comm->nodes(), comm->local_size());

  const fs::path out(base.out_dir), exps = out / "autotuning_exps", results_dir = out / "autotuning_results";
  if (leader) {
    fs::create_directories(exps);
    fs::create_directories(results_dir);
    std::printf("zerotune autotune: %zu settings (ZeRO stage x offload x activation checkpointing x pipeline stages), micro-batch 1..%lld, "
                "%lld tokens per sample, budget %s per rank%s\n",
                search.branches.size(), static_cast<long long>(search.max_micro_batch), static_cast<long long>(seq_len),
                budget ? format_bytes(*budget).c_str() : "none", search.fast ? ", fast mode" : "");
    std::fflush(stdout);
  }
  comm->barrier();

  const bool on_cpu = target.device == Device::CPU;
  const auto predict = [&](const AutotuneExperiment& experiment) {
    return predicted_need(experiment_config(base, experiment, world_size), model, world_size, seq_len, target, data);
  };
  const auto run = [&](AutotuneExperiment& experiment) {
    const TrainConfig config = trial_config(base, experiment, world_size, (exps / experiment.name).string(), trial_steps);
    RunOptions options = parsed.run;
    options.overwrite = true;
    options.profile_step = 0;
    if (leader) {
      write_file(exps / (experiment.name + ".json"),
                 experiment_ds_config(base.deepspeed_config_path, experiment, config, world_size).dump(2) + "\n");
      std::printf("autotune: %s (%s, micro-batch %lld): predicted %s\n", experiment.name.c_str(),
                  choice_text(experiment.choice).c_str(), static_cast<long long>(experiment.micro_batch),
                  format_bytes(experiment.predicted_bytes).c_str());
      std::fflush(stdout);
    }
    run_training(config, options);  // an error ends the job, as a failed `train` would
    experiment.ran = true;
    if (leader) read_measurement(config.out_dir, on_cpu, experiment);
    share_measurement(experiment);
  };
  const std::vector<AutotuneExperiment> experiments = autotune(search, predict, run);
  const AutotuneExperiment* best = fastest_experiment(experiments);
  if (!best) fail(budget ? nothing_fits_message(experiments, *budget) : std::string("autotune: no experiment ran"));

  if (leader) {
    AutotuneSummary summary{base, world_size, seq_len, budget, on_cpu, search.fast, trial_steps};
    write_autotune_results(args, summary, experiments, *best, out, results_dir);
  }
  comm->barrier();
  return 0;
}

}  // namespace zt
