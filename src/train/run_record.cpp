// Rank 0's record of a run's start: OUT/run.json and the start banner (training_run.h).
#include <cblas.h>
#include <omp.h>

#include <cstdio>
#include <filesystem>

#include "core/rank_threads.h"
#include "train/metrics.h"
#include "train/run_directory.h"
#include "train/training_run.h"
#include "train/versions.h"

namespace zt {

namespace {

namespace fs = std::filesystem;

std::string mib(int64_t bytes) { return cat(static_cast<double>(bytes) / (1024.0 * 1024.0), " MiB"); }

const char* precision_text(DType compute) {
  return compute == DType::F32 ? "fp32"
         : compute == DType::BF16 ? "bf16 (fp32 master weights)"
                                  : "fp16 (fp32 master weights, dynamic loss scaling)";
}

// The per-rank memory of the ZeRO layout and the expected traffic.
void print_zero_banner(const ZeroEngine& engine, const ZeroConfig& zero, int world_size, int nodes,
                       int64_t accumulation, const char* precision, DType grad_dtype) {
  const ZeroMemory m = engine.memory();
  const ZeroCommPlan plan = engine.comm_plan(accumulation);
  const std::string partial = m.resident_optimizer ? cat(" (ratio ", zero.offload_optimizer_ratio, ": ",
                                                            mib(m.resident_optimizer), " of it on the device)") : "";
  std::printf("zero: stage %d, offload_optimizer %s%s, offload_param %s, %d rank(s) on %d node(s), precision %s\n",
              zero.stage, zero.offload_optimizer_device.c_str(), partial.c_str(), zero.offload_param_device.c_str(),
              world_size, nodes, precision);
  const std::string widening = m.gradient_widening ? cat(" + ", mib(m.gradient_widening), " fp32 for the update") : "";
  std::printf("zero: per rank: parameters %s, gradients %s (%s%s), fp32 master %s, optimizer state %s%s\n",
              mib(m.compute_params).c_str(), mib(m.gradients).c_str(), dtype_name(grad_dtype), widening.c_str(),
              mib(m.master_params).c_str(),
              mib(m.optimizer_state).c_str(), m.host_bytes ? cat(" (host: ", mib(m.host_bytes), ")").c_str() : "");
  std::printf("zero: expected traffic per step and rank: all-reduce %s, reduce-scatter %s, all-gather %s\n",
              mib(static_cast<int64_t>(plan.all_reduce)).c_str(), mib(static_cast<int64_t>(plan.reduce_scatter)).c_str(),
              mib(static_cast<int64_t>(plan.all_gather)).c_str());
}

// The ZeRO layout: per-rank bytes and padded element counts (what the ZeRO formulas apply to).
void add_zero_layout(nlohmann::json& record, const ZeroEngine& engine, const ParamStore& store) {
  const ZeroMemory memory = engine.memory();
  record["zero_memory_per_rank"] = {{"parameters", memory.compute_params}, {"gradients", memory.gradients},
                                    {"gradient_widening", memory.gradient_widening},
                                    {"master_params", memory.master_params}, {"optimizer_state", memory.optimizer_state},
                                    {"resident_optimizer", memory.resident_optimizer}, {"host", memory.host_bytes}};
  nlohmann::json layout = {{"all_elements", 0}, {"trainable_elements", 0}, {"unit_elements", nlohmann::json::array()}};
  for (ParamGroup group : {ParamGroup::Frozen, ParamGroup::Decay, ParamGroup::NoDecay}) {
    layout["all_elements"] = layout["all_elements"].get<int64_t>() + store.group(group).numel;
    if (group != ParamGroup::Frozen)
      layout["trainable_elements"] = layout["trainable_elements"].get<int64_t>() + store.group(group).numel;
  }
  for (int unit = 0; unit < store.num_units(); ++unit) layout["unit_elements"].push_back(store.unit_numel(unit));
  record["zero_layout"] = layout;
}

// Rank 0's threads (core/rank_threads.h): the choice, and what OpenMP and OpenBLAS now run with.
void add_threads(nlohmann::json& record) {
  const RankThreads& threads = rank_threads();
  record["threads"] = {{"openmp", omp_get_max_threads()}, {"openblas", openblas_get_num_threads()},
                       {"chosen_by", threads.set_by.empty() ? "zerotune" : threads.set_by},
                       {"cpus", threads.cpus}, {"ranks_sharing_cpus", threads.sharing},
                       {"local_ranks", threads.local_ranks}, {"core_share", threads.share},
                       {"oversubscribed", threads.oversubscribed}};
}

void print_banner(TrainingRun& run, const std::optional<DeviceMemory>& device) {
  const TrainConfig& config = run.config;
  const ParamStore& store = *run.parts.store;
  std::printf("zerotune train: %s, %lld parameters (%lld trainable), %lld samples, %lld steps of %lld samples "
              "(micro-batch %lld x accumulation %lld x %d ranks)\n",
              run.model_config.model_type.c_str(), static_cast<long long>(store.count_parameters(false)),
              static_cast<long long>(store.count_parameters(true)), static_cast<long long>(run.dataset->num_samples()),
              static_cast<long long>(run.total_steps), static_cast<long long>(config.train_batch_size),
              static_cast<long long>(config.micro_batch_size),
              static_cast<long long>(config.gradient_accumulation_steps), run.world_size);
  std::printf("device: %s (%s); communicator: %s (%s)\n", run.device.choice.device.c_str(),
              run.device.choice.reason.c_str(), run.comm->name().c_str(), run.device.comm_reason.c_str());
  std::printf("%s\n", rank_threads().describe().c_str());
  print_zero_banner(*run.parts.engine, config.zero, run.world_size, run.comm->nodes(),
                    config.gradient_accumulation_steps, precision_text(config.compute_dtype), store.grad_dtype());
  if (run.parts.reference)  // DPO under full fine-tuning (train/frozen_reference.h)
    std::printf("zero: reference model (a frozen copy of the initial weights): parameters %s per rank, no gradients, "
                "master or optimizer state\n", mib(run.parts.reference->engine->memory().compute_params).c_str());
  std::printf("%s\n", memory_banner_line(run.memory_prediction,
                                         device ? std::optional<int64_t>(device->device_used) : std::nullopt,
                                         config.micro_batch_size, run.longest_sample)
                          .c_str());
  std::fflush(stdout);
}

}  // namespace

void write_run_record(TrainingRun& run) {
  const TrainConfig& config = run.config;
  const ParamStore& store = *run.parts.store;
  fs::create_directories(config.out_dir);
  nlohmann::json record = config.to_json();
  record["world_size"] = run.world_size;
  record["nodes"] = run.comm->nodes();
  record["backend"] = run.backend().name();
  record["device"] = run.device.choice.device;
  record["device_reason"] = run.device.choice.reason;
  record["communicator"] = run.comm->name();
  record["communicator_reason"] = run.device.comm_reason;
  record["versions"] = software_versions();
  add_threads(record);
  record["parameters"] = {{"total", store.count_parameters(false)}, {"trainable", store.count_parameters(true)}};
  record["steps_per_epoch"] = run.steps_per_epoch;
  record["total_steps"] = run.total_steps;
  if (!run.resume_batch.is_null()) record["resume_batch"] = run.resume_batch;
  record["dataset"] = {{"samples", run.dataset->num_samples()}, {"shards", run.dataset->shard_paths().size()}};
  add_zero_layout(record, *run.parts.engine, store);  // rank 0's: under a pipeline, stage 0's
  if (run.topology)
    record["pipeline_layout"] = {{"stages", run.topology->stages()}, {"replicas", run.topology->replicas()},
                                 {"stage_first_units", run.parts.stage.bounds}};
  record["memory_predicted"] = run.memory_prediction.to_json();
  record["memory_predicted"]["seq_len"] = run.longest_sample;
  record["memory_predicted"]["grown_from_seq_len"] = run.data_lengths.grown_from_seq_len;
  if (run.config.packing)  // the packed attention's bound the prediction counted (memory_model.h)
    record["memory_predicted"]["packing"] = packed_rows_text(run.config, run.longest_sample, run.data_lengths);
  run.backend().synchronize();  // discarded chunks given back: the device's figures are settled
  const std::optional<DeviceMemory> device = run.backend().memory();
  if (device) {
    record["memory_measured_setup"] = {{"device_used_bytes", device->device_used},
                                       {"backend_in_use_bytes", device->in_use}};
    record["device_memory"] = {{"discard_granularity_bytes", device->discard_granularity},
                               {"limit_bytes", device->limit}, {"counted_setup_bytes", device->counted}};
  }
  const ZeroCommPlan comm_plan = run.parts.engine->comm_plan(config.gradient_accumulation_steps);
  record["zero_comm_plan_bytes_per_step"] = {{"all_reduce", comm_plan.all_reduce},
                                             {"reduce_scatter", comm_plan.reduce_scatter},
                                             {"all_gather", comm_plan.all_gather},
                                             {"node_all_gather", comm_plan.node_all_gather},
                                             {"node_all_to_all", comm_plan.node_all_to_all},
                                             {"cross_all_to_all", comm_plan.cross_all_to_all},
                                             {"intra_node", comm_plan.intra_node()},
                                             {"inter_node", comm_plan.inter_node()}};
  write_text_file((fs::path(config.out_dir) / "run.json").string(), record.dump(2) + "\n");
  print_banner(run, device);
}

}  // namespace zt
