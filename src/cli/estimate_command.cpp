// `zerotune estimate --model DIR | --params N [--largest-layer-params N] [--trainable-params N]
//                    [--gpus-per-node G] [--nodes K] [--lora-r R --lora-targets ...] [--objective sft|reward|dpo]
//                    [--compute-dtype bf16|fp16|fp32] [bucket sizes] [--deepspeed JSON]
//                    [--seq-len T | --data DIR] [--micro-batch B] [--packing] [--activation-checkpointing]
//                    [--device typical-gpu|cuda|cpu] [--max-seq-len --device-memory 24GiB,...] [--json]`:
// memory for model states per GPU and per CPU (node) for every ZeRO stage and offload choice:
// DeepSpeed's estimator formulas and zerotune's own buffer plan side by side
// (zero/memory_estimate.h); with --model, the memory model's prediction of the run
// (train/memory_model.h) broken down by term, activations with and without checkpointing; with
// --max-seq-len, the longest sequence each choice fits into each device memory.
#include <boost/program_options.hpp>

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/parse_options.h"
#include "core/dtype.h"
#include "core/error.h"
#include "model/lora_targets.h"
#include "model/config.h"
#include "model/lora.h"
#include "model/param_spec.h"
#include "backend/make_backend.h"
#include "data/token_shards.h"
#include "model/safetensors.h"
#include "optim/optimizer.h"
#include "train/ds_config.h"
#include "train/objective.h"
#include "train/pipe_engine.h"
#include "train/memory_model.h"
#include "train/memory_model_choices.h"
#include "train/metrics.h"
#include "zero/memory_estimate.h"
#include "zero/zero_engine.h"

namespace zt {

namespace {

// The configurations of the table, in DeepSpeed's vocabulary (train/memory_model_choices.h).
using Choice = ZeroChoice;

struct ModelSummary {
  std::string source;  // config.json path, or "--params"
  ModelParamCounts counts;
  bool shapes_assumed = false;  // largest layer / gather unit from the rule of thumb
  std::optional<ModelConfig> config;  // --model: the run the memory model sets up and steps
};

// With --model: what the memory model runs (train/memory_model.h), one row at a time.
struct RunShape {
  LoraConfig lora;
  OptimizerConfig optimizer;  // its state buffers; LOMO's gradients in flight
  QuantConfig quantize;  // QLoRA: the frozen base stored 4-bit (--quantize)
  std::string objective = "sft";  // train --objective: reward and dpo step on 2 rows per pair (reward: + a value head)
  int64_t seq_len = 512;
  int64_t micro_batch = 1;
  bool activation_checkpointing = false;
  bool offload_activations = false;  // with checkpointing: the block inputs in host memory
  TrainConfig base;  // --deepspeed's settings (else the defaults), which the fields above override
  MemoryTarget target = typical_gpu_target();  // --device: the allocator the memory model counts for
  DataLengths data;  // --data: growth when samples differ in length, packing's shortest sample (memory_model.h)
  bool packing = false;  // train --packing: the micro-batch's samples packed into rows
  int64_t head_chunk_rows = 0;  // the LM head + cross-entropy chunk (0: automatic)
  int64_t accumulation = 1;     // micro-batches per step (gradient_accumulation_steps): GPipe keeps all in flight
  PipelineConfig pipeline;      // --pipeline-stages P: the memory model steps every stage, the heaviest is the need
};

// The run the memory model sets up and steps for one row.
TrainConfig row_config(const RunShape& shape, const ZeroMemoryInputs& base, const Choice& choice, DType compute_dtype,
                       bool activation_checkpointing) {
  TrainConfig config = shape.base;
  config.micro_batch_size = shape.micro_batch;
  config.gradient_accumulation_steps = shape.accumulation;
  config.pipeline = shape.pipeline;
  config.compute_dtype = compute_dtype;
  config.lora = shape.lora;
  config.head_chunk_rows = shape.head_chunk_rows;
  config.quantize = shape.quantize;
  config.objective = shape.objective;
  config.packing = shape.packing;
  config.optimizer = shape.optimizer;
  config.zero.reduce_bucket_size = base.reduce_bucket_size;
  config.zero.stage3_max_live_parameters = base.stage3_max_live_parameters;
  config.zero.stage3_prefetch_bucket_size = base.stage3_prefetch_bucket_size;
  Choice with_checkpointing = choice;
  with_checkpointing.activation_checkpointing = activation_checkpointing;
  config = with_choice(config, with_checkpointing);
  // ZeRO++'s node groups (qgZ's two hops, hpZ's secondary partition): the estimate's nodes.
  if (config.zero.zero_hpz_partition_size == 1) config.zero.ranks_per_node = base.gpus_per_node;
  config.offload_activations = activation_checkpointing && shape.offload_activations;
  return config;
}

// Bytes in the largest binary unit that keeps the number >= 1 (tiny test models print KiB).
std::string bytes_text(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < std::size(units)) {
    value /= 1024.0;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.2f %s", value, units[unit]);
  return text;
}

// A parameter count with a decimal suffix: 6.74B, 131.1M, 45.4K.
std::string count_text(int64_t count) {
  const double value = static_cast<double>(count);
  char text[32];
  if (value >= 1e9) std::snprintf(text, sizeof text, "%.2fB", value / 1e9);
  else if (value >= 1e6) std::snprintf(text, sizeof text, "%.1fM", value / 1e6);
  else if (value >= 1e3) std::snprintf(text, sizeof text, "%.1fK", value / 1e3);
  else std::snprintf(text, sizeof text, "%.0f", value);
  return text;
}

const char* device_name(bool offloaded) { return offloaded ? "cpu" : "none"; }

// Elements of the optimizer's per-tensor state of one tensor (AdaLomo: rows + columns).
int64_t tensor_state_numel(const Optimizer& optimizer, const std::vector<int64_t>& shape) {
  int64_t numel = 0;
  for (const TensorStateSpec& spec : optimizer.tensor_state(shape)) numel += spec.numel;
  return numel;
}

// One rank's memory from the memory model: the trainer's own set-up and step on the counting
// backend, with its breakdown by term; the host per node is the node's ranks' together.
nlohmann::ordered_json prediction_json(const MemoryPrediction& prediction, int gpus_per_node) {
  nlohmann::ordered_json row = prediction.to_json();
  row["host_peak_bytes_per_node"] = prediction.host_peak * gpus_per_node;
  row["device_peak_terms"] = terms_json(prediction.device_terms);
  row["host_peak_terms"] = terms_json(prediction.host_terms);
  return row;
}

// The job's need: the heaviest stage's prediction (without a pipeline the one stage), with
// "pipeline_stage" naming it and, under a pipeline, "stages": every stage's prediction in order.
nlohmann::ordered_json predicted_run(const ModelSummary& model, const RunShape& shape, const ZeroMemoryInputs& base,
                                     const Choice& choice, DType compute_dtype, bool activation_checkpointing) {
  const std::vector<MemoryPrediction> stages =
      predict_stage_memory(row_config(shape, base, choice, compute_dtype, activation_checkpointing), *model.config,
                           base.world_size, shape.seq_len, shape.target, shape.data);
  const size_t heaviest = heaviest_stage(stages, shape.target.device == Device::CPU);
  nlohmann::ordered_json row = prediction_json(stages[heaviest], base.gpus_per_node);
  row["pipeline_stage"] = heaviest;
  if (stages.size() > 1) {
    row["stages"] = nlohmann::ordered_json::array();
    for (const MemoryPrediction& stage : stages) row["stages"].push_back(prediction_json(stage, base.gpus_per_node));
  }
  return row;
}

// --packing: what the run columns count for the packed attention, in words (null without it, or
// for a device whose attention takes no scratch: --device cpu).
nlohmann::ordered_json packing_json(const RunShape& shape, const ZeroMemoryInputs& base, DType compute_dtype) {
  if (!shape.packing || !shape.target.attention_scratch) return nullptr;
  return packed_rows_text(row_config(shape, base, Choice{}, compute_dtype, false), shape.seq_len, shape.data);
}

nlohmann::ordered_json estimate_report(const ModelSummary& model, const RunShape& shape, const ZeroMemoryInputs& base,
                                       int nodes, DType compute_dtype) {
  nlohmann::ordered_json report;
  report["model"] = {{"source", model.source},
                     {"total_params", model.counts.total},
                     {"trainable_params", model.counts.trainable},
                     {"largest_layer_params", model.counts.largest_layer},
                     {"gather_unit_params", model.counts.gather_unit},
                     {"shapes_assumed", model.shapes_assumed}};
  report["nodes"] = nodes;
  report["gpus_per_node"] = base.gpus_per_node;
  report["world_size"] = base.world_size;
  report["compute_dtype"] = dtype_name(compute_dtype);
  report["reduce_bucket_size"] = base.reduce_bucket_size;
  report["stage3_max_live_parameters"] = base.stage3_max_live_parameters;
  report["stage3_prefetch_bucket_size"] = base.stage3_prefetch_bucket_size;
  if (model.config)
    report["run"] = {{"seq_len", shape.seq_len}, {"micro_batch", shape.micro_batch}, {"objective", shape.objective},
                     {"quantize", quant_config_json(shape.quantize)},
                     {"activation_checkpointing", shape.activation_checkpointing},
                     {"grown_from_seq_len", shape.data.grown_from_seq_len},
                     {"packing", packing_json(shape, base, compute_dtype)},
                     {"gradient_accumulation_steps", shape.accumulation},
                     {"pipeline_stages", shape.pipeline.stages},
                     {"pipeline_schedule", shape.pipeline.schedule},
                     {"pipeline_chunks", shape.pipeline.chunks}};
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  report["optimizer"] = shape.optimizer.type;
  for (const Choice& choice : zero_offload_choices(base.fused_optimizer)) {
    if (choice.offload_params && !choice.offload_optimizer) continue;  // DeepSpeed's estimators have no such row
    if (shape.pipeline.enabled() && choice.stage == 3) continue;  // ZeRO-3 is refused with pipeline stages
    ZeroMemoryInputs inputs = base;
    inputs.stage = choice.stage;
    inputs.offload_optimizer = choice.offload_optimizer;
    inputs.offload_params = choice.offload_params;
    const ZeroMemoryPlan plan = zero_memory_plan(inputs);
    const DeepSpeedEstimate deepspeed =
        deepspeed_estimate(model.counts.total, model.counts.largest_layer, base.gpus_per_node, nodes, choice.stage,
                           choice.offload_optimizer, choice.offload_params);
    rows.push_back({{"stage", choice.stage},
                    {"offload_optimizer", device_name(choice.offload_optimizer)},
                    {"offload_param", device_name(choice.offload_params)},
                    {"deepspeed",
                     {{"gpu_bytes", deepspeed.gpu_bytes},
                      {"cpu_bytes_per_node", deepspeed.cpu_bytes},
                      {"cpu_bytes_per_node_without_zero_init", deepspeed.cpu_bytes_without_zero_init},
                      {"source", deepspeed.source}}},
                    {"zerotune", plan.to_json()}});
    if (model.config) {
      rows.back()["zerotune_run"] =
          predicted_run(model, shape, base, choice, compute_dtype, shape.activation_checkpointing);
      // Both ways, for the breakdown's activations with and without checkpointing.
      rows.back()["zerotune_run_by_checkpointing"] = {
          {"off", predicted_run(model, shape, base, choice, compute_dtype, false)},
          {"on", predicted_run(model, shape, base, choice, compute_dtype, true)}};
    }
  }
  report["rows"] = rows;
  // --deepspeed's offload_optimizer.ratio: its partial offload is in the stage-3 offload rows' runs.
  if (shape.base.zero.offload_optimizer_ratio < 1.0) report["offload_optimizer_ratio"] = shape.base.zero.offload_optimizer_ratio;
  return report;
}

// The memory model's peak per GPU by term for every row, activations with and without
// checkpointing, and the host memory per node.
std::string format_breakdown(const nlohmann::ordered_json& report) {
  std::string text = "\nzerotune run, per GPU at the step's peak by term (memory model; --json: every term, host terms too):\n";
  const auto term = [](const nlohmann::ordered_json& terms, std::initializer_list<const char*> names) {
    int64_t bytes = 0;
    for (const char* name : names)
      if (terms.contains(name)) bytes += terms[name].get<int64_t>();
    return bytes;
  };
  char row[400];
  std::snprintf(row, sizeof row, "%-5s %-9s %-7s | %10s %10s %10s %10s %10s %10s | %10s %10s %10s | %10s %10s | %10s\n",
                "stage", "offload", "offload", "params", "gathered", "grads", "master +", "buckets", "slack +",
                "activat.", "activat.", "logits", "peak", "peak", "host/node");
  text += row;
  std::snprintf(row, sizeof row, "%-5s %-9s %-7s | %10s %10s %10s %10s %10s %10s | %10s %10s %10s | %10s %10s | %10s\n", "",
                "optimizer", "param", "", "(stage 3)", "", "optimizer", "", "workspace", "", "(ckpt)", "", "", "(ckpt)",
                "");
  text += row;
  for (const auto& entry : report["rows"]) {
    const auto& off = entry["zerotune_run_by_checkpointing"]["off"];
    const auto& on = entry["zerotune_run_by_checkpointing"]["on"];
    const auto& terms = off["device_peak_terms"];
    std::snprintf(
        row, sizeof row, "%-5d %-9s %-7s | %10s %10s %10s %10s %10s %10s | %10s %10s %10s | %10s %10s | %10s\n",
        entry["stage"].get<int>(), entry["offload_optimizer"].get<std::string>().c_str(),
        entry["offload_param"].get<std::string>().c_str(), bytes_text(term(terms, {kTermParameters, kTermReference})).c_str(),
        bytes_text(term(terms, {kTermGathered})).c_str(), bytes_text(term(terms, {kTermGradients})).c_str(),
        bytes_text(term(terms, {kTermMaster, kTermOptimizerState})).c_str(),
        bytes_text(term(terms, {kTermZeroBuffers})).c_str(),
        bytes_text(term(terms, {kTermAllocatorSlack, kTermBackendFixed, kTermAttentionWorkspace, kTermModelOther}))
            .c_str(),
        bytes_text(term(terms, {kTermActivations})).c_str(),
        bytes_text(term(on["device_peak_terms"], {kTermActivations})).c_str(),
        bytes_text(term(terms, {kTermLogits})).c_str(), bytes_text(off["device_peak_bytes"]).c_str(),
        bytes_text(on["device_peak_bytes"]).c_str(), bytes_text(off["host_peak_bytes_per_node"]).c_str());
    text += row;
  }
  text += "The terms are what held memory when the step's peak was reached (a term can be smaller there than at its own\n"
          "  maximum); they add up to the peak. activations: the model's saved tensors and workspaces and the batch;\n"
          "  gathered: stage 3's units gathered and prefetched in the step (offload_param: their uploads); buckets: the\n"
          "  engine's reduce buckets and staging; slack: the caching allocator's size classes; workspace: cuBLASLt's\n"
          "  and attention's (cuDNN's graph workspace);\n"
          "  params: with --objective dpo without --lora-r, the reference model's frozen copy too.\n";
  return text;
}

// ", pipeline 2 stages (1f1b), 4 micro-batches per step" under a pipeline, else "".
std::string pipeline_note(const nlohmann::ordered_json& run) {
  if (!run.contains("pipeline_stages") || run["pipeline_stages"].get<int64_t>() <= 1) return "";
  const int64_t chunks = run["pipeline_chunks"];
  return cat(", pipeline ", run["pipeline_stages"].get<int64_t>(), " stages (", run["pipeline_schedule"].get<std::string>(),
             chunks > 1 ? cat(", ", chunks, " chunks per rank") : std::string(), "), ",
             run["gradient_accumulation_steps"].get<int64_t>(), " micro-batches per step");
}

// ", 4-bit base nf4 (...)" for a QLoRA run, else "".
std::string run_quantization_note(const nlohmann::ordered_json& run) {
  if (!run.contains("quantize")) return "";
  const QuantConfig quant = quant_config_from_json(nlohmann::json::parse(run["quantize"].dump()), "estimate");
  if (!quant.enabled()) return "";
  return cat(", 4-bit base ", describe(quant), " (counted by the zerotune run columns; the formula columns assume a "
             "16-bit base)");
}

// Per GPU and host, the zerotune formula's gradient bytes (gradients + stages 2/3's reduce bucket) of
// every row in the chosen dtype and in the other one (fp32 against 16-bit), so that the effect of
// data_types.grad_accum_dtype shows; `other` == `chosen` when the other cannot go with the run.
nlohmann::ordered_json gradient_dtype_comparison(const ZeroMemoryInputs& base, DType chosen, DType other,
                                                 const std::string& why_not_other) {
  nlohmann::ordered_json comparison;
  comparison["grad_accum_dtype"] = dtype_name(chosen);
  comparison["other"] = dtype_name(other);
  if (other == chosen) comparison["why_not_16bit"] = why_not_other;
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const Choice& choice : zero_offload_choices(base.fused_optimizer)) {
    if (choice.offload_params && !choice.offload_optimizer) continue;  // the main table's rows
    ZeroMemoryInputs inputs = base;
    inputs.stage = choice.stage;
    inputs.offload_optimizer = choice.offload_optimizer;
    inputs.offload_params = choice.offload_params;
    nlohmann::ordered_json row = {{"stage", choice.stage},
                                  {"offload_optimizer", device_name(choice.offload_optimizer)},
                                  {"offload_param", device_name(choice.offload_params)}};
    for (DType dtype : {chosen, other}) {
      inputs.grad_dtype_bytes = static_cast<int64_t>(dtype_size(dtype));
      const ZeroMemoryPlan plan = zero_memory_plan(inputs);
      row[dtype_name(dtype)] = {{"device_bytes", plan.device_grad_bytes + plan.device_grad_bucket_bytes},
                                {"host_bytes", plan.host_grad_bytes}};
    }
    rows.push_back(row);
  }
  comparison["rows"] = rows;
  return comparison;
}

// The gradient table: the chosen dtype, the other, and what the 16-bit one saves per GPU.
std::string format_gradient_comparison(const nlohmann::ordered_json& comparison) {
  const std::string chosen = comparison["grad_accum_dtype"], other = comparison["other"];
  std::string text = cat("\ngradients per GPU (zerotune formula: gradient buffers + stages 2/3's reduce bucket; "
                         "data_types.grad_accum_dtype ", chosen, "):\n");
  if (other == chosen) {
    return text + cat("  ", chosen, " only: ", comparison["why_not_16bit"].get<std::string>(), "\n");
  }
  const std::string wide = chosen == "fp32" ? chosen : other, narrow = chosen == "fp32" ? other : chosen;
  char row[200];
  std::snprintf(row, sizeof row, "%-5s %-9s %-7s | %12s %12s %12s\n", "stage", "offload", "offload",
                (wide + (wide == chosen ? " *" : "")).c_str(), (narrow + (narrow == chosen ? " *" : "")).c_str(), "saved");
  text += row;
  for (const auto& entry : comparison["rows"]) {
    const int64_t wide_bytes = entry[wide]["device_bytes"], narrow_bytes = entry[narrow]["device_bytes"];
    std::snprintf(row, sizeof row, "%-5d %-9s %-7s | %12s %12s %12s\n", entry["stage"].get<int>(),
                  entry["offload_optimizer"].get<std::string>().c_str(), entry["offload_param"].get<std::string>().c_str(),
                  bytes_text(wide_bytes).c_str(), bytes_text(narrow_bytes).c_str(),
                  bytes_text(wide_bytes - narrow_bytes).c_str());
    text += row;
  }
  text += "  * the run's dtype. 16-bit gradients also halve the gradient bytes each rank sends (all-reduce / "
          "reduce-scatter)\n  and, with offload_optimizer, the host gradient copy.\n";
  return text;
}

std::string format_report(const nlohmann::ordered_json& report) {
  const auto& model = report["model"];
  std::string text;
  auto line = [&](const std::string& part) { text += part + "\n"; };
  const int64_t total = model["total_params"], trainable = model["trainable_params"];
  const std::string trained =
      trainable == total ? std::string("all trainable") : cat(trainable, " trainable (", count_text(trainable), ")");
  line(cat("model: ", model["source"].get<std::string>(), ": ", total, " parameters (", count_text(total), "), ", trained,
           "; largest layer ", count_text(model["largest_layer_params"]), ", stage-3 gather unit ",
           count_text(model["gather_unit_params"]),
           model["shapes_assumed"].get<bool>() ? " (rule of thumb, see --help)" : ""));
  const int nodes = report["nodes"], gpus = report["gpus_per_node"];
  line(cat("hardware: ", nodes, " node", nodes == 1 ? "" : "s", " x ", gpus, " GPU", gpus == 1 ? "" : "s",
           " per node; compute dtype ", report["compute_dtype"].get<std::string>(), "; reduce_bucket_size ",
           report["reduce_bucket_size"].get<int64_t>(), ", stage3_max_live_parameters ",
           report["stage3_max_live_parameters"].get<int64_t>(), ", stage3_prefetch_bucket_size ",
           report["stage3_prefetch_bucket_size"].get<int64_t>()));
  const bool run = report.contains("run");
  const bool pipeline = run && report["run"]["pipeline_stages"].get<int64_t>() > 1;
  if (run)
    line(cat("run: micro-batch ", report["run"]["micro_batch"].get<int64_t>(), " x ", report["run"]["seq_len"].get<int64_t>(),
             " tokens", report["run"]["activation_checkpointing"].get<bool>() ? ", activation checkpointing" : "",
             run_quantization_note(report["run"]), pipeline_note(report["run"])));
  if (run && report["run"]["packing"].is_string()) line(cat("packing: ", report["run"]["packing"].get<std::string>()));
  if (run && report.contains("offload_optimizer_ratio"))
    line(cat("offload_optimizer.ratio ", report["offload_optimizer_ratio"].get<double>(), " (partial offload): in the "
             "zerotune columns of the stage-3 rows with offload_optimizer cpu"));
  line("");
  char row[320];
  std::snprintf(row, sizeof row, "%-5s %-9s %-7s | %12s %12s %12s | %12s %12s%s", "", "offload", "offload",
                "DeepSpeed", "DeepSpeed", "DeepSpeed", "zerotune", "zerotune",
                run ? " | zerotune run  zerotune run     zerotune" : "");
  line(std::string(row) + (pipeline ? "  heaviest" : ""));
  std::snprintf(row, sizeof row, "%-5s %-9s %-7s | %12s %12s %12s | %12s %12s%s", "stage", "optimizer", "param",
                "per GPU", "CPU/node", "(no z_init)", "per GPU", "CPU/node",
                run ? " | GPU set-up     GPU peak       CPU/node" : "");
  line(std::string(row) + (pipeline ? "  stage" : ""));
  for (const auto& entry : report["rows"]) {
    const auto& deepspeed = entry["deepspeed"];
    const auto& plan = entry["zerotune"];
    const int64_t cpu = deepspeed["cpu_bytes_per_node"], cpu_no_init = deepspeed["cpu_bytes_per_node_without_zero_init"];
    std::snprintf(row, sizeof row, "%-5d %-9s %-7s | %12s %12s %12s | %12s %12s", entry["stage"].get<int>(),
                  entry["offload_optimizer"].get<std::string>().c_str(),
                  entry["offload_param"].get<std::string>().c_str(), bytes_text(deepspeed["gpu_bytes"]).c_str(),
                  bytes_text(cpu).c_str(), entry["stage"].get<int>() == 3 ? bytes_text(cpu_no_init).c_str() : "",
                  bytes_text(plan["device_total_bytes"]).c_str(), bytes_text(plan["host_total_bytes_per_node"]).c_str());
    std::string text_row = row;
    if (entry.contains("zerotune_run")) {
      const auto& predicted = entry["zerotune_run"];
      std::snprintf(row, sizeof row, " | %12s %12s %12s", bytes_text(predicted["device_setup_bytes"]).c_str(),
                    bytes_text(predicted["device_peak_bytes"]).c_str(),
                    bytes_text(predicted["host_peak_bytes_per_node"]).c_str());
      text_row += row;
      if (pipeline) text_row += cat("  ", predicted["pipeline_stage"].get<int64_t>());
    }
    line(text_row);
  }
  line("");
  line("DeepSpeed: estimate_zero2_model_states_mem_needs (stage 2) and estimate_zero3_model_states_mem_needs (stage 3,");
  line("  CPU/node with zero_init=True, then False), additional_buffer_factor 1.5; stages 0/1 apply its stage-2");
  line("  per-parameter accounting (it has no estimator for them). Its formulas assume fp16/bf16 compute and count");
  line("  every parameter as trainable; its CPU figures include loading the model on the host.");
  line("zerotune: per GPU = compute-dtype parameters (stage 3: this rank's partition + the gathered working set)");
  line(cat("  + ", report.contains("gradients") ? report["gradients"]["grad_accum_dtype"].get<std::string>() : "fp32",
           " gradients (stages 2/3: partition + one reduce bucket; LOMO, AdaLomo: the unit in flight) + fp32 master"));
  line(cat("  weights and the optimizer's state (", report["optimizer"].get<std::string>(), "; partitioned from stage 1, ",
           "per-tensor state whole); CPU/node = the ",
           "offloaded states of the node's ranks. Activations, workspaces"));
  line("  and communication buffers come on top of both. `--json` gives every term.");
  if (run) {
    line("zerotune run (with --model): the memory model of `train` (the trainer's own set-up and one step on a counting");
    line("  backend: every buffer, activations and the 32 MiB cuBLASLt workspace included, in the caching allocator's");
    line("  size classes and 2 MiB virtual-memory chunks); `train` checks the same figure against the free device memory.");
  }
  if (pipeline) {
    line("Pipeline: the run columns and the breakdown are the heaviest stage's (its ranks' need is the job's); each stage");
    line("  holds its units' parameters, gradients and optimizer state and the inputs of its micro-batches in flight");
    line("  (1F1B: min(P - stage, M), GPipe: M). `--json` gives every stage (zerotune_run.stages). The DeepSpeed and");
    line("  zerotune formula columns are the whole model without a pipeline; ZeRO-3 rows are left out (refused).");
  }
  line("Offloading the optimizer needs ZeRO stage >= 1 and offloading parameters stage 3, as in DeepSpeed.");
  if (report.contains("gradients")) text += format_gradient_comparison(report["gradients"]);
  if (run) text += format_breakdown(report);
  return text;
}

// --max-seq-len: the longest sequence each stage x offload x checkpointing choice fits into each
// device memory (binary search over the memory model, train/memory_model.h).
nlohmann::ordered_json max_seq_len_report(const ModelSummary& model, const RunShape& shape, const ZeroMemoryInputs& base,
                                          DType compute_dtype, const std::vector<int64_t>& memories, int64_t limit) {
  nlohmann::ordered_json report;
  report["model"] = {{"source", model.source},
                     {"total_params", model.counts.total},
                     {"trainable_params", model.counts.trainable}};
  report["world_size"] = base.world_size;
  report["gpus_per_node"] = base.gpus_per_node;
  report["micro_batch"] = shape.micro_batch;
  report["compute_dtype"] = dtype_name(compute_dtype);
  report["optimizer"] = shape.optimizer.type;
  report["seq_len_limit"] = limit;
  report["device_memory_bytes"] = memories;
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const Choice& choice : zero_offload_choices(base.fused_optimizer)) {
    // Without checkpointing, with it, and with it and the block inputs offloaded.
    for (int mode = 0; mode < 3; ++mode) {
      const bool checkpointing = mode > 0;
      RunShape mode_shape = shape;
      mode_shape.offload_activations = mode == 2;
      const TrainConfig config = row_config(mode_shape, base, choice, compute_dtype, checkpointing);
      nlohmann::ordered_json longest = nlohmann::ordered_json::array();
      for (int64_t memory : memories)
        longest.push_back(
            longest_fitting_sequence(config, *model.config, base.world_size, shape.target, memory, limit));
      // What one token needs: the smallest need of this setting (model states dominate it).
      const int64_t floor =
          predict_memory(config, *model.config, base.world_size, 0, 1, shape.target).device_needed();
      rows.push_back({{"stage", choice.stage},
                      {"offload_optimizer", device_name(choice.offload_optimizer)},
                      {"offload_param", device_name(choice.offload_params)},
                      {"activation_checkpointing", checkpointing},
                      {"offload_activations", mode == 2},
                      {"one_token_bytes", floor},
                      {"longest_seq_len", longest}});
    }
  }
  report["rows"] = rows;
  // --deepspeed's offload_optimizer.ratio: its partial offload is in the stage-3 offload rows' runs.
  if (shape.base.zero.offload_optimizer_ratio < 1.0) report["offload_optimizer_ratio"] = shape.base.zero.offload_optimizer_ratio;
  return report;
}

std::string format_max_seq_len(const nlohmann::ordered_json& report) {
  std::string text;
  const auto& model = report["model"];
  const int64_t limit = report["seq_len_limit"];
  text += cat("model: ", model["source"].get<std::string>(), ": ", count_text(model["total_params"]), " parameters, ",
              count_text(model["trainable_params"]), " trainable; ", report["world_size"].get<int>(), " GPU(s), ",
              report["gpus_per_node"].get<int>(), " per node; micro-batch ", report["micro_batch"].get<int64_t>(), "; ",
              report["compute_dtype"].get<std::string>(), "; ", report["optimizer"].get<std::string>(), "\n");
  text += cat("longest sequence (tokens) whose predicted peak per GPU fits the device memory (searched up to ", limit,
              "; 0: not even one token fits):\n");
  std::string header = cat("stage offload_opt offload_param checkpointing | 1 token needs |");
  for (const auto& memory : report["device_memory_bytes"]) {
    char cell[32];
    std::snprintf(cell, sizeof cell, " %9s", bytes_text(memory.get<int64_t>()).c_str());
    header += cell;
  }
  text += header + "\n";
  for (const auto& row : report["rows"]) {
    char line[200];
    std::snprintf(line, sizeof line, "%-5d %-11s %-13s %-13s | %13s |", row["stage"].get<int>(),
                  row["offload_optimizer"].get<std::string>().c_str(), row["offload_param"].get<std::string>().c_str(),
                  row["offload_activations"].get<bool>()        ? "yes+offload"
                  : row["activation_checkpointing"].get<bool>() ? "yes"
                                                                : "no",
                  bytes_text(row["one_token_bytes"].get<int64_t>()).c_str());
    std::string out = line;
    for (const auto& longest : row["longest_seq_len"]) {
      const int64_t tokens = longest.get<int64_t>();
      char cell[32];
      std::snprintf(cell, sizeof cell, " %9s", tokens >= limit ? cat(">=", tokens).c_str() : cat(tokens).c_str());
      out += cell;
    }
    text += out + "\n";
  }
  text += "Predicted by the memory model of `train` (its set-up and one step on a counting backend, allocator rounding and\n"
          "  the cuBLASLt workspace included; not NCCL's buffers or other processes on the GPU).\n";
  return text;
}

// --seq-len beyond the model's position table: HF's model would not take such a sequence either
// (learned positions end there; RoPE models are not trained beyond it), and a huge value would
// only reach the memory model as an allocation failure. --max-seq-len --seq-len-limit may search
// further on purpose.
void check_seq_len_within_positions(int64_t seq_len, bool given, const ModelConfig& config) {
  if (!given || config.max_position_embeddings <= 0) return;
  ZT_CHECK(seq_len <= config.max_position_embeddings, "--seq-len = ", seq_len, ": above the model's limit, ",
           config.path, " max_position_embeddings = ", config.max_position_embeddings,
           " (give --seq-len <= ", config.max_position_embeddings, ")");
}

// The flags of `zerotune estimate`, as given (texts parsed later, where their errors name them).
struct EstimateFlags {
  std::string model_dir, params_text, largest_text, trainable_text, dtype_text, targets_text, quantize_text,
      grad_dtype_text;
  std::string reduce_bucket_text, max_live_text, prefetch_text, optimizer_text;
  std::string deepspeed_path, device_memory_text, device_text = "typical-gpu", data_dir;
  bool max_seq_len_mode = false;
  int64_t seq_len_limit = 0;
  int gpus_per_node = 1, nodes = 1, lora_r = 0;
  bool as_json = false;
  RunShape shape;
};

// The options (a table: one row per flag, its help text).
boost::program_options::options_description estimate_options(EstimateFlags& f) {
  namespace po = boost::program_options;
  RunShape& shape = f.shape;
  std::string& model_dir = f.model_dir;
  std::string &params_text = f.params_text, &largest_text = f.largest_text, &trainable_text = f.trainable_text;
  std::string &dtype_text = f.dtype_text, &targets_text = f.targets_text, &quantize_text = f.quantize_text;
  std::string &grad_dtype_text = f.grad_dtype_text, &reduce_bucket_text = f.reduce_bucket_text;
  std::string &max_live_text = f.max_live_text, &prefetch_text = f.prefetch_text, &optimizer_text = f.optimizer_text;
  std::string &deepspeed_path = f.deepspeed_path, &device_memory_text = f.device_memory_text;
  std::string &device_text = f.device_text, &data_dir = f.data_dir;
  bool &max_seq_len_mode = f.max_seq_len_mode, &as_json = f.as_json;
  int64_t& seq_len_limit = f.seq_len_limit;
  int &gpus_per_node = f.gpus_per_node, &nodes = f.nodes, &lora_r = f.lora_r;
  po::options_description description(
      "zerotune estimate: memory for parameters, gradients and optimizer state per GPU and per CPU (node) for\n"
      "each ZeRO stage and offload choice, by DeepSpeed's formulas and by zerotune's buffers.\n"
      "Counts accept 6738415616, 7e9, 6.7B, 125M. With --params only, the shapes follow a rule of thumb for\n"
      "LLaMA-like models: N = 12 L C^2 with L = C/128 layers gives the hidden size C; the largest layer is the\n"
      "embedding (32000 x C) and a decoder block has 12 C^2 parameters.\noptions");
  description.add_options()
      ("help,h", "print this help")
      ("model", po::value(&model_dir), "HF model directory (or config.json): count its parameters")
      ("params", po::value(&params_text), "total parameter count, instead of --model")
      ("largest-layer-params", po::value(&largest_text), "with --params: the largest layer (default: rule of thumb)")
      ("trainable-params", po::value(&trainable_text), "with --params: parameters being trained (default: all)")
      ("gpus-per-node", po::value(&gpus_per_node)->default_value(1), "GPUs (ranks) per node")
      ("nodes", po::value(&nodes)->default_value(1), "number of nodes")
      ("lora-r", po::value(&lora_r)->default_value(0), "with --model: LoRA rank (only the adapters are trained)")
      ("lora-targets", po::value(&targets_text), "with --lora-r: comma-separated modules or all-linear "
       "(default q_proj,v_proj)")
      ("compute-dtype", po::value(&dtype_text)->default_value("bf16"), "bf16, fp16 or fp32")
      ("grad-accum-dtype", po::value(&grad_dtype_text)->default_value("fp32"), "fp32, bf16 or fp16 "
       "(data_types.grad_accum_dtype): the gradients' dtype; 16-bit needs that compute dtype. The report also shows "
       "the gradient bytes in fp32 and in the compute dtype side by side")
      ("quantize", po::value(&quantize_text), "with --model and --lora-r: QLoRA, the frozen base stored 4-bit (nf4 or fp4)")
      ("objective", po::value(&shape.objective)->default_value("sft"), "with --model: train's --objective, sft "
       "(default), reward (DeepSpeed-Chat step 2: a micro-batch of pairs is twice the rows, plus the value head) or dpo "
       "(twice the rows; with --lora-r the reference forward reuses the policy's activation buffers, without it a "
       "frozen copy of the weights adds its parameters under the same ZeRO stage and a forward-only pass)")
      ("double-quant", po::bool_switch(&shape.quantize.double_quant), "with --quantize: 8-bit scales (bnb_4bit_use_double_quant)")
      ("optimizer", po::value(&optimizer_text)->default_value("adamw"),
       "adamw, lamb, sgd (with --momentum: one state buffer), lomo (no state, gradients only for the unit in flight) "
       "or adalomo (as lomo, plus rows + columns of each matrix)")
      ("momentum", po::value(&shape.optimizer.momentum)->default_value(0.0), "with --optimizer sgd: its momentum")
      ("reduce-bucket-size", po::value(&reduce_bucket_text)->default_value("500000000"),
       "zero_optimization.reduce_bucket_size (elements)")
      ("stage3-max-live-parameters", po::value(&max_live_text)->default_value("1000000000"),
       "zero_optimization.stage3_max_live_parameters")
      ("stage3-prefetch-bucket-size", po::value(&prefetch_text)->default_value("50000000"),
       "zero_optimization.stage3_prefetch_bucket_size")
      ("seq-len", po::value(&shape.seq_len)->default_value(512), "with --model: tokens per sample of the run")
      ("micro-batch", po::value(&shape.micro_batch)->default_value(1), "with --model: train_micro_batch_size_per_gpu")
      ("activation-checkpointing", po::bool_switch(&shape.activation_checkpointing),
       "with --model: recompute blocks in backward")
      ("offload-activations", po::bool_switch(&shape.offload_activations),
       "with --activation-checkpointing: the saved block inputs in pinned host memory (the rows with checkpointing)")
      ("deepspeed", po::value(&deepspeed_path), "DeepSpeed JSON: micro-batch, precision, optimizer and bucket sizes "
       "(the flags above win; every ZeRO stage and offload is estimated whatever it says)")
      ("max-seq-len", po::bool_switch(&max_seq_len_mode), "with --model and --device-memory: the longest sequence each "
       "stage x offload x checkpointing choice fits, by binary search over the memory model")
      ("device-memory", po::value(&device_memory_text), "per-GPU memory for --max-seq-len: 24GiB, or a list: "
       "24GiB,40GiB,80GiB (KiB/MiB/GiB powers of 2, KB/MB/GB of 10)")
      ("seq-len-limit", po::value(&seq_len_limit), "--max-seq-len searches up to this many tokens (default: the "
       "model's max_position_embeddings)")
      ("device", po::value(&device_text)->default_value("typical-gpu"), "whose allocator the run columns count for: "
       "typical-gpu (the CUDA caching allocator's size classes, 2 MiB chunks, 32 MiB cuBLASLt workspace), cuda (this "
       "machine's GPU 0, as `train` checks it) or cpu (the CPU backend: exact bytes, all of them host memory)")
      ("data", po::value(&data_dir), "with --model, instead of --seq-len: the token shards to train on (their longest "
       "sample, and the activation buffers' growth when samples differ in length, as `train` predicts it)")
      ("packing", po::bool_switch(&shape.packing), "with --model: train --packing (each micro-batch's samples packed "
       "into rows): the attention workspace counts cuDNN's packed graph for the worst micro-batch, bounded by the "
       "shortest sample of --data (without --data: samples of 1 token, said in the report)")
      ("head-chunk-rows", po::value(&shape.head_chunk_rows)->default_value(0),
       "with --model: rows per chunk of the LM head + cross-entropy, as train's (0: automatic; micro-batch x "
       "seq-len or more: the whole [tokens, vocab] logits at once)")
      ("grad-accum", po::value(&shape.accumulation)->default_value(1), "with --model: micro-batches per step "
       "(gradient_accumulation_steps; under a pipeline the micro-batches in flight: GPipe keeps all of them)")
      ("pipeline-stages", po::value(&shape.pipeline.stages)->default_value(1), "with --model: P pipeline stages of "
       "world/P ranks each (docs/pipeline.md): the memory model steps every stage; the run columns are the heaviest "
       "stage's (the column 'heaviest stage' names it), --json gives every stage's; ZeRO-3 rows are left out (refused)")
      ("pipeline-schedule", po::value(&shape.pipeline.schedule)->default_value("1f1b"), "with --pipeline-stages: "
       "1f1b, gpipe or interleaved")
      ("pipeline-chunks", po::value(&shape.pipeline.chunks), "with --pipeline-schedule interleaved: V model chunks per "
       "rank (default 2)")
      ("partition-method", po::value(&shape.pipeline.partition_method)->default_value("parameters"),
       "with --pipeline-stages: units over stages, parameters, uniform or type:REGEX")
      ("json", po::bool_switch(&as_json), "print the report as JSON");
  return description;
}

// Flags that contradict each other or are out of range, before anything is read.
void check_estimate_flags(const EstimateFlags& f, const boost::program_options::variables_map& values) {
  const RunShape& shape = f.shape;
  const bool have_model = values.count("model") > 0, have_params = values.count("params") > 0;
  ZT_CHECK(have_model || have_params, "give the model: --model DIR or --params N (see `zerotune estimate --help`)");
  ZT_CHECK(!(have_model && have_params), "give either --model or --params, not both");
  ZT_CHECK(f.gpus_per_node >= 1, "--gpus-per-node = ", f.gpus_per_node, ": must be >= 1");
  ZT_CHECK(f.nodes >= 1, "--nodes = ", f.nodes, ": must be >= 1");
  ZT_CHECK(f.lora_r >= 0, "--lora-r = ", f.lora_r, ": must be >= 0");
  ZT_CHECK(!values.count("lora-targets") || f.lora_r > 0, "--lora-targets was given without --lora-r (the LoRA rank)");
  ZT_CHECK(!shape.quantize.enabled() || (have_model && f.lora_r > 0),
           "--quantize needs --model and --lora-r: a 4-bit base is frozen under LoRA adapters (QLoRA)");
  ZT_CHECK(!shape.quantize.double_quant || shape.quantize.enabled(), "--double-quant needs --quantize nf4|fp4");
  TrainConfig objective_config;
  objective_config.objective = shape.objective;
  make_objective(objective_config);  // an unknown name is an error listing the objectives
  ZT_CHECK(shape.objective == "sft" || have_model, "--objective ", shape.objective, " needs --model: the memory model "
           "runs the objective's own micro-batches (--params has only the formulas)");
  ZT_CHECK(shape.seq_len >= 1, "--seq-len = ", shape.seq_len, ": must be >= 1");
  ZT_CHECK(shape.micro_batch >= 1, "--micro-batch = ", shape.micro_batch, ": must be >= 1");
  ZT_CHECK(!shape.offload_activations || shape.activation_checkpointing,
           "--offload-activations needs --activation-checkpointing: it moves the block inputs that checkpointing "
           "keeps to host memory");
  ZT_CHECK(shape.accumulation >= 1, "--grad-accum = ", shape.accumulation, ": must be >= 1");
  ZT_CHECK(shape.pipeline.stages >= 1, "--pipeline-stages = ", shape.pipeline.stages, ": must be >= 1");
  ZT_CHECK(!shape.pipeline.enabled() || (have_model && !f.max_seq_len_mode), "--pipeline-stages needs --model (the "
           "memory model steps each stage's units) and does not go with --max-seq-len");
  ZT_CHECK((f.gpus_per_node * f.nodes) % shape.pipeline.stages == 0, "--pipeline-stages ", shape.pipeline.stages,
           " does not divide the ", f.gpus_per_node * f.nodes, " ranks of --gpus-per-node x --nodes (each stage needs "
           "the same number of data-parallel replicas)");
  for (const char* flag : {"pipeline-schedule", "pipeline-chunks", "partition-method"})
    ZT_CHECK(values[flag].empty() || values[flag].defaulted() || shape.pipeline.enabled(), "--", flag,
             " goes with --pipeline-stages P (P > 1)");
  ZT_CHECK(!shape.packing || (have_model && shape.objective == "sft"), "--packing needs --model and --objective sft "
           "(train refuses it with reward and dpo: each pair's sides keep rows of their own)");
  ZT_CHECK(shape.head_chunk_rows >= 0, "--head-chunk-rows = ", shape.head_chunk_rows, ": must be >= 0 (0: automatic)");
  ZT_CHECK(have_model || (values["seq-len"].defaulted() && values["micro-batch"].defaulted() &&
                          !shape.activation_checkpointing),
           "--seq-len, --micro-batch and --activation-checkpointing go with --model (the run's activations come from "
           "the model's layers)");
  ZT_CHECK(!f.max_seq_len_mode || (have_model && values.count("device-memory")),
           "--max-seq-len needs --model (the activations come from its layers) and --device-memory (e.g. 24GiB)");
  ZT_CHECK(!values.count("device-memory") || f.max_seq_len_mode, "--device-memory goes with --max-seq-len");
  ZT_CHECK(!values.count("seq-len-limit") || (f.max_seq_len_mode && f.seq_len_limit >= 1),
           "--seq-len-limit goes with --max-seq-len and must be >= 1");
}

// --deepspeed: its micro-batch, optimizer, precision and bucket sizes, where no flag gave them.
void apply_deepspeed_config(EstimateFlags& f, const boost::program_options::variables_map& values) {
  RunShape& shape = f.shape;
  std::vector<std::string> notes;
  load_deepspeed_config(f.deepspeed_path, f.gpus_per_node * f.nodes, shape.base, notes);
  if (values["micro-batch"].defaulted() && shape.base.micro_batch_size > 0) shape.micro_batch = shape.base.micro_batch_size;
  if (values["optimizer"].defaulted()) {
    shape.optimizer = shape.base.optimizer;
    f.optimizer_text = shape.optimizer.type;
  }
  if (values["pipeline-stages"].defaulted() && shape.base.pipeline.enabled()) shape.pipeline = shape.base.pipeline;
  if (values["compute-dtype"].defaulted()) f.dtype_text = dtype_name(shape.base.compute_dtype);
  if (values["grad-accum-dtype"].defaulted()) f.grad_dtype_text = dtype_name(shape.base.grad_accum_dtype);
  if (values["reduce-bucket-size"].defaulted()) f.reduce_bucket_text = cat(shape.base.zero.reduce_bucket_size);
  if (values["stage3-max-live-parameters"].defaulted()) f.max_live_text = cat(shape.base.zero.stage3_max_live_parameters);
  if (values["stage3-prefetch-bucket-size"].defaulted()) f.prefetch_text = cat(shape.base.zero.stage3_prefetch_bucket_size);
}

// --device: whose allocator the memory model counts for (--device cuda keeps the GPU's backend
// alive in `live_backend` while the model asks it).
void choose_memory_target(const EstimateFlags& f, RunShape& shape, std::unique_ptr<Backend>& live_backend) {
  if (f.device_text == "cpu") {
    shape.target = MemoryTarget{};
    shape.target.device = Device::CPU;
    shape.target.pipeline_posts_ahead = true;  // the CPU backend's stages exchange over MPI
  } else if (f.device_text == "cuda") {
    live_backend = make_backend("cuda", 0);
    shape.target = memory_target_of(*live_backend);
  } else {
    ZT_CHECK(f.device_text == "typical-gpu", "--device must be typical-gpu, cuda or cpu, not '", f.device_text, "'");
  }
}

// --device-memory's list (24GiB,40GiB,...).
std::vector<int64_t> device_memory_list(const EstimateFlags& f) {
  std::vector<int64_t> sizes;
  for (size_t start = 0; f.max_seq_len_mode && start <= f.device_memory_text.size();) {
    const size_t comma = std::min(f.device_memory_text.find(',', start), f.device_memory_text.size());
    sizes.push_back(parse_byte_size(f.device_memory_text.substr(start, comma - start), "--device-memory"));
    start = comma + 1;
  }
  return sizes;
}

// --model: the model's parameter counts (with LoRA adapters) and its per-tensor optimizer state.
ModelSummary summarize_model_dir(EstimateFlags& f, const boost::program_options::variables_map& values,
                                 const Optimizer& optimizer, int64_t& tensor_state_floats) {
  ZT_CHECK(!values.count("largest-layer-params") && !values.count("trainable-params"),
           "--largest-layer-params and --trainable-params go with --params; with --model they are counted");
  const ModelConfig config = load_model_config(f.model_dir);
  check_seq_len_within_positions(f.shape.seq_len, !values["seq-len"].defaulted(), config);
  const std::vector<ParamSpec> specs = model_param_specs(config);
  std::vector<ParamSpec> adapters;
  if (f.lora_r > 0) {
    LoraConfig lora;
    lora.r = f.lora_r;
    lora.targets = parse_lora_targets(f.targets_text);
    lora = lora_with_default_targets(lora, config);  // none given: the model type's PEFT default, as `train`
    adapters = lora_param_specs(specs, lora);
    f.shape.lora = lora;
  }
  ModelSummary model;
  model.config = config;
  model.source = config.path;
  model.counts = count_model_params(specs, adapters);
  for (const ParamSpec& spec : adapters.empty() ? specs : adapters)
    if (!spec.tied()) tensor_state_floats += tensor_state_numel(optimizer, spec.shape);
  return model;
}

// --params: the counts given, the shapes by the rule of thumb where not given.
ModelSummary summarize_param_count(const EstimateFlags& f, const boost::program_options::variables_map& values,
                                   const Optimizer& optimizer, int64_t& tensor_state_floats) {
  ZT_CHECK(f.lora_r == 0, "--lora-r needs --model (the adapters' size comes from the model's layers); "
           "with --params give --trainable-params instead");
  ModelSummary model;
  model.source = "--params " + f.params_text;
  model.counts.total = parse_param_count(f.params_text, "--params");
  model.counts.trainable =
      values.count("trainable-params") ? parse_param_count(f.trainable_text, "--trainable-params") : model.counts.total;
  ZT_CHECK(model.counts.trainable <= model.counts.total, "--trainable-params = ", f.trainable_text,
           ": more than --params = ", f.params_text);
  model.counts.gather_unit = rule_of_thumb_block(model.counts.total);
  if (values.count("largest-layer-params")) {
    model.counts.largest_layer = parse_param_count(f.largest_text, "--largest-layer-params");
    ZT_CHECK(model.counts.largest_layer <= model.counts.total, "--largest-layer-params = ", f.largest_text,
             ": more than --params = ", f.params_text);
  } else {
    model.counts.largest_layer = rule_of_thumb_largest_layer(model.counts.total);
    model.shapes_assumed = true;
  }
  model.counts.gather_unit = std::max(model.counts.gather_unit, model.counts.largest_layer);
  // Per-tensor state from the rule of thumb's shapes: the full model's (with --trainable-params,
  // an upper bound: adapters have fewer rows and columns).
  for (const std::vector<int64_t>& shape_of_tensor : rule_of_thumb_shapes(model.counts.total))
    tensor_state_floats += tensor_state_numel(optimizer, shape_of_tensor);
  return model;
}

// What DeepSpeed's formulas and the rows take: the counts, the dtypes, the optimizer, the buckets.
ZeroMemoryInputs zero_memory_inputs(const EstimateFlags& f, const ModelSummary& model, DType compute_dtype,
                                    DType grad_dtype, const Optimizer& optimizer, int64_t tensor_state_floats) {
  ZeroMemoryInputs inputs;
  inputs.total_params = model.counts.total;
  inputs.trainable_params = model.counts.trainable;
  inputs.largest_layer_params = model.counts.largest_layer;
  inputs.gather_unit_params = model.counts.gather_unit;
  inputs.gpus_per_node = f.gpus_per_node;
  inputs.world_size = f.gpus_per_node * f.nodes;
  inputs.compute_dtype_bytes = static_cast<int64_t>(dtype_size(compute_dtype));
  inputs.grad_dtype_bytes = static_cast<int64_t>(dtype_size(grad_dtype));
  inputs.optimizer_state_floats = static_cast<int>(optimizer.state_names().size());
  inputs.fused_optimizer = optimizer.fuses_into_backward();
  inputs.tensor_state_floats = tensor_state_floats;
  inputs.reduce_bucket_size = parse_param_count(f.reduce_bucket_text, "--reduce-bucket-size");
  inputs.stage3_max_live_parameters = parse_param_count(f.max_live_text, "--stage3-max-live-parameters");
  inputs.stage3_prefetch_bucket_size = parse_param_count(f.prefetch_text, "--stage3-prefetch-bucket-size");
  inputs.hpz_partition_size = f.shape.base.zero.zero_hpz_partition_size;  // --deepspeed's ZeRO++ hpZ
  inputs.offload_ratio = f.shape.base.zero.offload_optimizer_ratio;         // and its partial offload
  return inputs;
}

// The report (or --max-seq-len's table), as text or JSON, on rank 0's stdout.
void print_estimate(const EstimateFlags& f, const ModelSummary& model, const ZeroMemoryInputs& inputs,
                    DType compute_dtype, DType grad_dtype, const Optimizer& optimizer) {
  if (f.max_seq_len_mode) {
    const int64_t limit = f.seq_len_limit > 0 ? f.seq_len_limit : model.config->max_position_embeddings;
    ZT_CHECK(limit >= 1, model.source, ": no max_position_embeddings: give --seq-len-limit");
    const nlohmann::ordered_json table =
        max_seq_len_report(model, f.shape, inputs, compute_dtype, device_memory_list(f), limit);
    const std::string text = f.as_json ? table.dump(2) + "\n" : format_max_seq_len(table);
    std::fwrite(text.data(), 1, text.size(), stdout);
    return;
  }
  // The gradients' other choice, shown beside the chosen one: fp32 against the compute dtype's 16
  // bits (none when 16-bit gradients cannot go with this run).
  const DType other_grad_dtype = grad_dtype == DType::F32 ? compute_dtype : DType::F32;
  const std::string why_not_other = other_grad_dtype == grad_dtype
                                        ? std::string("16-bit gradients need bf16/fp16 compute (this run: fp32)")
                                        : gradient_dtype_refusal(other_grad_dtype, compute_dtype, optimizer);
  nlohmann::ordered_json report = estimate_report(model, f.shape, inputs, f.nodes, compute_dtype);
  report["gradients"] =
      gradient_dtype_comparison(inputs, grad_dtype, why_not_other.empty() ? other_grad_dtype : grad_dtype, why_not_other);
  const std::string text = f.as_json ? report.dump(2) + "\n" : format_report(report);
  std::fwrite(text.data(), 1, text.size(), stdout);
}

}  // namespace

int command_estimate(const std::vector<std::string>& args) {
  EstimateFlags flags;
  boost::program_options::options_description description = estimate_options(flags);
  boost::program_options::variables_map values;
  if (!parse_command_options(args, description, values, "estimate")) return 0;
  RunShape& shape = flags.shape;
  if (values.count("quantize")) shape.quantize.type = parse_quant4_type(flags.quantize_text, "--quantize");
  check_estimate_flags(flags, values);
  if (values.count("deepspeed")) apply_deepspeed_config(flags, values);  // its settings, under the flags given
  // The interleaved schedule's chunks: 2 unless given (1 is 1f1b), as train's.
  if (shape.pipeline.schedule == "interleaved" && !values.count("pipeline-chunks")) shape.pipeline.chunks = 2;
  if (values.count("data")) {
    ZT_CHECK(values.count("model") && values["seq-len"].defaulted(), "--data goes with --model and instead of --seq-len");
    const TokenDataset dataset = TokenDataset::open(flags.data_dir);
    shape.seq_len = dataset.longest_sample();
    shape.data = data_lengths_of(dataset);
  }
  std::unique_ptr<Backend> live_backend;  // --device cuda: the GPU whose allocator the model counts for
  choose_memory_target(flags, shape, live_backend);
  shape.optimizer.type = flags.optimizer_text;
  ZT_CHECK(shape.optimizer.momentum == 0.0 || flags.optimizer_text == "sgd", "--momentum goes with --optimizer sgd");
  if (flags.max_seq_len_mode) device_memory_list(flags);  // its errors before any work
  const std::unique_ptr<Optimizer> optimizer = make_optimizer(shape.optimizer);  // refuses an unknown name
  DType compute_dtype = DType::BF16;
  try {
    compute_dtype = parse_compute_dtype(flags.dtype_text);
  } catch (const Error& error) {
    fail("--compute-dtype: ", error.what());
  }
  const std::optional<DType> grad_dtype = parse_deepspeed_dtype(flags.grad_dtype_text);
  ZT_CHECK(grad_dtype, "--grad-accum-dtype must be one of ", deepspeed_dtype_spellings(), ", not '",
           flags.grad_dtype_text, "'");
  check_gradient_dtype(*grad_dtype, compute_dtype, *optimizer);
  shape.base.grad_accum_dtype = *grad_dtype;  // the memory model's runs (row_config)

  int64_t tensor_state_floats = 0;  // the optimizer's per-tensor state over the trainable tensors
  const ModelSummary model = values.count("model")
                                 ? summarize_model_dir(flags, values, *optimizer, tensor_state_floats)
                                 : summarize_param_count(flags, values, *optimizer, tensor_state_floats);
  const ZeroMemoryInputs inputs =
      zero_memory_inputs(flags, model, compute_dtype, *grad_dtype, *optimizer, tensor_state_floats);
  if (shape.pipeline.enabled()) {  // what train would refuse of the pipeline, before the rows are stepped
    TrainConfig config = row_config(shape, inputs, Choice{}, compute_dtype, shape.activation_checkpointing);
    config.save_at_end = false;  // estimate plans no checkpoints
    check_pipeline_run(config, *model.config, inputs.world_size, *optimizer);
  }
  if (process_rank() != 0) return 0;  // one report per job
  print_estimate(flags, model, inputs, compute_dtype, *grad_dtype, *optimizer);
  return 0;
}

}  // namespace zt
