// DeepSpeed JSON -> TrainConfig (see ds_config.h for what is translated, noted or refused).
// The key lists are DeepSpeed 0.14.4's schema: runtime/constants.py and config.py (top level),
// runtime/zero/config.py and offload_config.py (zero_optimization), lr_schedules.py (scheduler
// params), engine.py _configure_basic_optimizer and ops/adam (optimizer params).
#include "train/ds_config.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "core/error.h"
#include "optim/lr_schedule.h"

namespace zt {

using nlohmann::json;

namespace {

// What zerotune does with a key of DeepSpeed's schema.
enum class Role {
  translated,              // read by the code below (maybe accepted only at one value)
  tooling,                 // monitoring, profiling, launching: noted as ignored
  no_effect,               // a DeepSpeed implementation knob that does not change the result: noted
  unsupported,             // a feature that changes what is computed: an error
  unsupported_if_enabled,  // such a feature with an "enabled" switch: an error when on, noted when off
};

struct KnownKey {
  std::string name;
  Role role;
};
using KeyTable = std::vector<KnownKey>;

// "auto" is the HF-integration placeholder for "fill this in from the trainer's arguments".
bool is_auto(const json& value) { return value.is_string() && value.get<std::string>() == "auto"; }

std::string lowercase(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

// A value for a message: its JSON text, shortened when long.
std::string show(const json& value) {
  std::string text = value.dump();
  if (text.size() > 80) text = text.substr(0, 77) + "...";
  return text;
}

std::string join(const std::vector<std::string>& names) {
  std::string text;
  for (const std::string& name : names) text += (text.empty() ? "" : ", ") + name;
  return text;
}

// The candidate nearest to `key` when it is near enough to be the intended one, else "".
std::string nearest(const std::string& key, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = std::numeric_limits<size_t>::max();
  for (const std::string& candidate : candidates) {
    const size_t distance = key_edit_distance(key, candidate);
    if (distance < best_distance) best_distance = distance, best = candidate;
  }
  return best_distance <= std::max<size_t>(2, key.size() / 2) ? best : "";
}

// Whether a value was found, found as "auto", or absent (the target is then left as it was).
enum class Got { absent, automatic, value };

// One JSON object of the config: its dotted location (for messages), the file and the notes.
class Section {
 public:
  Section(const json& object, const std::string& file, std::string location, std::vector<std::string>& notes,
          DeepSpeedKeys* keys = nullptr)
      : object_(&object), file_(&file), location_(std::move(location)), notes_(&notes), keys_(keys) {}

  const std::string& file() const { return *file_; }
  const json* find(const std::string& key) const {
    auto it = object_->find(key);
    return it == object_->end() ? nullptr : &*it;
  }
  bool has(const std::string& key) const { return find(key) != nullptr; }
  std::string key_path(const std::string& key) const { return location_.empty() ? key : location_ + "." + key; }
  void note(const std::string& text) const { notes_->push_back(cat(*file_, ": ", text)); }

  // Every key present must be in `table`: typos are errors with the nearest known key, tooling
  // and no-effect keys get a note, unsupported features an error.
  void check_keys(const KeyTable& table) const {
    std::vector<std::string> names;
    for (const KnownKey& known : table) names.push_back(known.name);
    for (auto it = object_->begin(); it != object_->end(); ++it) {
      auto known = std::find_if(table.begin(), table.end(), [&](const KnownKey& k) { return k.name == it.key(); });
      if (known == table.end()) fail_unknown(it.key(), names);
      check_role(it.key(), it.value(), known->role);
    }
  }

  [[noreturn]] void fail_value(const std::string& key, const json& value, const std::string& expected) const {
    fail(*file_, ": ", key_path(key), " must be ", expected, ", got ", show(value));
  }

  // An integer in [min, max]; JSON floats with an integral value (Python writes 3e7 as
  // 30000000.0, as DeepSpeed-Chat's configs do) count as integers, as pydantic reads them.
  Got integer(const std::string& key, int64_t& out, int64_t min, int64_t max, bool allow_auto) const {
    const json* value = find(key);
    if (!value) return Got::absent;
    if (allow_auto && is_auto(*value)) return record(key, Got::automatic);
    const std::string expected = cat("an integer in [", min, ", ", max, "]", allow_auto ? " or \"auto\"" : "");
    double number = 0.0;
    if (value->is_number_integer() && !value->is_number_unsigned()) number = static_cast<double>(value->get<int64_t>());
    else if (value->is_number()) number = value->get<double>();
    else fail_value(key, *value, expected);
    // Range check in double first so that huge values cannot overflow the cast.
    if (!(number >= static_cast<double>(min) && number <= static_cast<double>(max)) || number != std::floor(number))
      fail_value(key, *value, expected);
    out = value->is_number_integer() ? value->get<int64_t>() : static_cast<int64_t>(number);
    if (out < min || out > max) fail_value(key, *value, expected);
    return record(key, Got::value);
  }

  Got integer(const std::string& key, int& out, int min, int max, bool allow_auto) const {
    int64_t wide = out;
    const Got got = integer(key, wide, min, max, allow_auto);
    out = static_cast<int>(wide);
    return got;
  }

  Got number(const std::string& key, double& out, double min, bool allow_auto) const {
    const json* value = find(key);
    if (!value) return Got::absent;
    if (allow_auto && is_auto(*value)) return record(key, Got::automatic);
    const std::string expected = cat("a number >= ", min, allow_auto ? " or \"auto\"" : "");
    if (value->is_array()) fail_value(key, *value, expected + " (per-parameter-group lists are not supported)");
    if (!value->is_number()) fail_value(key, *value, expected);
    const double number = value->get<double>();
    if (!std::isfinite(number) || number < min) fail_value(key, *value, expected);
    out = number;
    return record(key, Got::value);
  }

  Got boolean(const std::string& key, bool& out, bool allow_auto) const {
    const json* value = find(key);
    if (!value) return Got::absent;
    if (allow_auto && is_auto(*value)) return record(key, Got::automatic);
    if (!value->is_boolean()) fail_value(key, *value, allow_auto ? "true, false or \"auto\"" : "true or false");
    out = value->get<bool>();
    return record(key, Got::value);
  }

  Got string(const std::string& key, std::string& out) const {
    const json* value = find(key);
    if (!value) return Got::absent;
    if (!value->is_string()) fail_value(key, *value, "a string");
    out = value->get<std::string>();
    return record(key, Got::value);
  }

  Got text(const std::string& key, std::string& out, const std::vector<std::string>& choices) const {
    const json* value = find(key);
    if (!value) return Got::absent;
    if (!value->is_string() ||
        std::find(choices.begin(), choices.end(), value->get<std::string>()) == choices.end())
      fail_value(key, *value, "one of \"" + join(choices) + "\"");
    out = value->get<std::string>();
    return record(key, Got::value);
  }

  // Keys zerotune accepts only at the value that leaves the computation as it implements it.
  void require(const std::string& key, const json& allowed, const std::string& why) const {
    const json* value = find(key);
    if (value && *value != allowed)
      fail(*file_, ": ", key_path(key), " ", show(*value), " is not supported (only ", show(allowed), "): ", why);
  }

  // The object under `key`; absent or null gives an empty section.
  Section child(const std::string& key) const {
    static const json empty = json::object();
    const json* value = find(key);
    if (!value || value->is_null()) return Section(empty, *file_, key_path(key), *notes_, keys_);
    if (!value->is_object()) fail_value(key, *value, "a JSON object");
    return Section(*value, *file_, key_path(key), *notes_, keys_);
  }

  // Notes that `key` was given as "auto" or as a value (DeepSpeedKeys), and passes `got` on.
  Got record(const std::string& key, Got got) const {
    if (keys_ && got == Got::automatic) keys_->automatic.push_back(key_path(key));
    if (keys_ && got == Got::value) keys_->given[key_path(key)] = *find(key);
    return got;
  }

  // Of two spellings DeepSpeed accepts for one field (a pydantic alias), the one present.
  std::string either(const std::string& name, const std::string& alias) const {
    ZT_CHECK(!(has(name) && has(alias)), *file_, ": give only one of ", key_path(name), " and ", key_path(alias),
             " (the same setting)");
    return has(alias) ? alias : name;
  }

 private:
  [[noreturn]] void fail_unknown(const std::string& key, const std::vector<std::string>& names) const {
    const std::string suggestion = nearest(key, names);
    if (!suggestion.empty())
      fail(*file_, ": unknown DeepSpeed key '", key_path(key), "' (did you mean '", key_path(suggestion), "'?)");
    if (location_.empty())
      fail(*file_, ": unknown DeepSpeed key '", key, "': it is not in DeepSpeed's config schema");
    fail(*file_, ": unknown DeepSpeed key '", key_path(key), "' (", location_, " takes: ", join(names), ")");
  }

  void check_role(const std::string& key, const json& value, Role role) const {
    switch (role) {
      case Role::translated: return;
      case Role::tooling: note(cat(key_path(key), " is ignored (tooling)")); return;
      case Role::no_effect:
        note(cat(key_path(key), " is ignored (a DeepSpeed implementation setting that does not change the result)"));
        return;
      case Role::unsupported:
        fail(*file_, ": ", key_path(key), " is not supported by zerotune (it changes what is computed)");
      case Role::unsupported_if_enabled: {
        const json* enabled = value.is_object() && value.contains("enabled") ? &value["enabled"] : nullptr;
        if (!value.is_object() || (enabled && !enabled->is_boolean() && !is_auto(*enabled)))
          fail_value(key, value, "a JSON object with \"enabled\": true or false");
        if (enabled && enabled->is_boolean() && enabled->get<bool>())
          fail(*file_, ": ", key_path(key), " is enabled, but it is not supported by zerotune (it changes what is "
               "computed); remove the section or set \"enabled\": false");
        note(cat(key_path(key), " is disabled; ignored"));
        return;
      }
    }
  }

  const json* object_;
  const std::string* file_;
  std::string location_;
  std::vector<std::string>* notes_;
  DeepSpeedKeys* keys_;  // where "auto" keys and given values are recorded (may be null)
};

// ---- top level -----------------------------------------------------------------------------

const KeyTable& top_level_keys() {
  static const KeyTable table = {
      {"train_batch_size", Role::translated},
      {"train_micro_batch_size_per_gpu", Role::translated},
      {"gradient_accumulation_steps", Role::translated},
      {"gradient_clipping", Role::translated},
      {"steps_per_print", Role::translated},
      {"optimizer", Role::translated},
      {"scheduler", Role::translated},
      {"fp16", Role::translated},
      {"bf16", Role::translated},
      {"bfloat16", Role::translated},
      {"zero_optimization", Role::translated},
      {"activation_checkpointing", Role::translated},
      {"prescale_gradients", Role::translated},
      {"gradient_predivide_factor", Role::translated},
      {"sparse_gradients", Role::translated},
      {"disable_allgather", Role::translated},
      {"communication_data_type", Role::translated},
      {"data_types", Role::translated},
      // monitors: tensorboard and csv_monitor written, wandb and comet refused when enabled
      {"wandb", Role::translated},
      {"tensorboard", Role::translated},
      {"csv_monitor", Role::translated},
      {"comet", Role::translated},
      // tooling: profilers, logging, launching, checkpoint I/O
      {"comms_logger", Role::tooling},
      {"flops_profiler", Role::translated},  // profile_step -> --profile-step
      {"autotuning", Role::tooling},
      {"dump_state", Role::tooling},
      {"wall_clock_breakdown", Role::tooling},
      {"memory_breakdown", Role::tooling},
      {"zero_allow_untested_optimizer", Role::tooling},
      {"zero_force_ds_cpu_optimizer", Role::tooling},
      {"nebula", Role::tooling},
      {"aio", Role::tooling},
      {"timers", Role::tooling},
      {"checkpoint", Role::tooling},
      {"dataloader_drop_last", Role::tooling},
      {"vocabulary_size", Role::tooling},
      {"hybrid_engine", Role::tooling},  // DeepSpeed-Chat's RLHF generation engine
      {"weight_quantization", Role::tooling},  // inference only
      // implementation knobs with no effect on the result
      {"graph_harvesting", Role::no_effect},
      {"use_data_before_expert_parallelism", Role::no_effect},
      {"seq_parallel_comm_data_type", Role::no_effect},
      // features that change what is computed
      {"sparse_attention", Role::unsupported},
      {"pipeline", Role::translated},  // stages, partition -> --pipeline-stages, --partition-method
      {"compression_training", Role::unsupported},
      {"quantize_training", Role::unsupported},
      {"amp", Role::unsupported_if_enabled},
      {"data_efficiency", Role::unsupported_if_enabled},
      {"curriculum_learning", Role::unsupported_if_enabled},
      {"progressive_layer_drop", Role::unsupported_if_enabled},
      {"eigenvalue", Role::unsupported_if_enabled},
      {"elasticity", Role::unsupported_if_enabled},  // it chooses the batch sizes itself
  };
  return table;
}

constexpr int64_t kMaxInt = std::numeric_limits<int64_t>::max();

// A dtype key as DeepSpeed reads it (absent or null: nullopt).
std::optional<DType> dtype_key(const Section& section, const std::string& key) {
  const json* value = section.find(key);
  if (!value || value->is_null()) return std::nullopt;
  const std::optional<DType> dtype = value->is_string() ? parse_deepspeed_dtype(value->get<std::string>()) : std::nullopt;
  if (!dtype) section.fail_value(key, *value, cat("one of ", deepspeed_dtype_spellings()));
  section.record(key, Got::value);
  return dtype;
}

// data_types.grad_accum_dtype: the gradients' storage (fp32 by default; DeepSpeed's default is
// the model's dtype under ZeRO). communication_data_type: zerotune reduces gradients in that
// same dtype, so it is accepted only when it says so.
void translate_gradient_dtypes(const Section& top, TrainConfig& config) {
  Section data_types = top.child("data_types");
  data_types.check_keys({{"grad_accum_dtype", Role::translated}});
  if (const std::optional<DType> grad = dtype_key(data_types, "grad_accum_dtype")) {
    config.grad_accum_dtype = *grad;
    if (*grad != DType::F32)
      data_types.note(cat("data_types.grad_accum_dtype ", show(*data_types.find("grad_accum_dtype")), " -> --grad-accum-dtype ",
                          dtype_name(*grad), " (gradients held, accumulated and reduced in ", dtype_name(*grad),
                          ": half the gradient bytes; each add and each reduction step rounds once, the optimizer reads "
                          "them widened to fp32)"));
  }
  const std::optional<DType> comm = dtype_key(top, "communication_data_type");
  if (comm && *comm != config.grad_accum_dtype)
    fail(top.file(), ": communication_data_type ", show(*top.find("communication_data_type")), " is not supported with "
         "data_types.grad_accum_dtype ", dtype_name(config.grad_accum_dtype), ": zerotune reduces gradients in their "
         "own dtype (set both to the same, or leave communication_data_type out)");
}

void translate_top_level(const Section& top, TrainConfig& config) {
  top.integer("train_batch_size", config.train_batch_size, 1, kMaxInt, true);
  top.integer("train_micro_batch_size_per_gpu", config.micro_batch_size, 1, kMaxInt, true);
  top.integer("gradient_accumulation_steps", config.gradient_accumulation_steps, 1, kMaxInt, true);
  top.number("gradient_clipping", config.gradient_clipping, 0.0, true);
  top.integer("steps_per_print", config.steps_per_print, 1, kMaxInt, false);
  top.require("prescale_gradients", false, "zerotune averages gradients after the reduction");
  top.require("gradient_predivide_factor", 1.0, "zerotune averages gradients after the reduction");
  top.require("sparse_gradients", false, "zerotune reduces dense gradients");
  top.require("disable_allgather", false, "a legacy ZeRO-1 mode zerotune does not implement");
  translate_gradient_dtypes(top, config);
}

// flops_profiler (DeepSpeed's per-module profile of one step): its profile_step becomes
// --profile-step when enabled; its output options are DeepSpeed's console layout, not ours.
void translate_flops_profiler(const Section& top, TrainConfig& config) {
  if (!top.has("flops_profiler")) return;
  const Section section = top.child("flops_profiler");
  section.check_keys({{"enabled", Role::translated}, {"recompute_fwd_factor", Role::translated},
                      {"profile_step", Role::translated}, {"module_depth", Role::translated},
                      {"top_modules", Role::translated}, {"detailed", Role::translated},
                      {"output_file", Role::translated}});
  bool enabled = false;
  section.boolean("enabled", enabled, false);
  int64_t step = 1;  // DeepSpeed's default
  section.integer("profile_step", step, 1, kMaxInt, false);
  if (!enabled) {
    section.note("flops_profiler is disabled; ignored");
    return;
  }
  config.deepspeed_profile_step = step;
  section.note(cat("flops_profiler.profile_step ", step, " -> --profile-step ", step,
                   " (module times of that step in the log and OUT/profile.json; module_depth, top_modules, detailed "
                   "and output_file are ignored)"));
}

// ---- monitors (DeepSpeed's monitor/config.py) ----------------------------------------------

// tensorboard / csv_monitor: rank 0 writes the metrics to output_path/job_name (train/monitors.h).
void translate_file_monitor(const Section& top, const std::string& key, MonitorConfig& monitor) {
  if (!top.has(key)) return;
  const Section section = top.child(key);
  section.check_keys({{"enabled", Role::translated}, {"output_path", Role::translated}, {"job_name", Role::translated}});
  section.boolean("enabled", monitor.enabled, false);
  section.string("output_path", monitor.output_path);
  section.string("job_name", monitor.job_name);
  if (!monitor.enabled) {
    section.note(cat(key, " is disabled; ignored"));
    return;
  }
  ZT_CHECK(!monitor.job_name.empty(), top.file(), ": ", key, ".job_name must not be empty (it names the directory "
           "inside output_path that the files go to)");
  section.note(cat(key, ": rank 0 writes the metrics to ", monitor.directory(), "/ (", key == "tensorboard" ?
                   "TensorBoard event files" : "one CSV file per metric", ")"));
}

// wandb / comet send the metrics to a web service, which compute nodes often cannot reach and
// zerotune does not talk to: refused when enabled (a silently missing dashboard is found out
// only after the run), with the file monitors as the way out.
void refuse_service_monitor(const Section& top, const std::string& key, const KeyTable& keys) {
  if (!top.has(key)) return;
  const Section section = top.child(key);
  section.check_keys(keys);
  bool enabled = false;
  section.boolean("enabled", enabled, false);
  if (!enabled) {
    section.note(cat(key, " is disabled; ignored"));
    return;
  }
  fail(top.file(), ": ", key, ".enabled is true, but zerotune does not send metrics to ",
       key == "wandb" ? "Weights & Biases" : "Comet", " (a web service: compute nodes often have no network); set \"",
       key, "\": {\"enabled\": false} and use \"tensorboard\": {\"enabled\": true, ...} (TensorBoard event files) "
       "or \"csv_monitor\": {\"enabled\": true, ...} (CSV files), which rank 0 writes to output_path/job_name/; "
       "metrics.jsonl in --out has every figure too");
}

void translate_monitors(const Section& top, TrainConfig& config) {
  translate_file_monitor(top, "tensorboard", config.tensorboard);
  translate_file_monitor(top, "csv_monitor", config.csv_monitor);
  // Their other keys (WandbConfig, CometConfig) only matter when the monitor is on, which is
  // refused: accepted without a note each.
  refuse_service_monitor(top, "wandb", {{"enabled", Role::translated}, {"group", Role::translated},
                                        {"team", Role::translated}, {"project", Role::translated}});
  refuse_service_monitor(top, "comet", {{"enabled", Role::translated}, {"samples_log_interval", Role::translated},
                                        {"project", Role::translated}, {"workspace", Role::translated},
                                        {"api_key", Role::translated}, {"experiment_name", Role::translated},
                                        {"experiment_key", Role::translated}, {"online", Role::translated},
                                        {"mode", Role::translated}});
}

// ---- optimizer -----------------------------------------------------------------------------

// DeepSpeed's own optimizer names (matched case-insensitively, runtime/config.py) and the
// torch.optim classes it falls back to (matched as spelled).
const std::vector<std::string> kDeepSpeedOptimizers = {"adagrad",    "adam",   "adamw",   "lamb",
                                                       "onebitadam", "zerooneadam", "onebitlamb", "muadam",
                                                       "muadamw",    "musgd",  "lion"};
const std::vector<std::string> kTorchOptimizers = {"ASGD",  "Adadelta", "Adagrad", "Adam",    "AdamW",
                                                   "Adamax", "LBFGS",    "NAdam",   "RAdam",   "RMSprop",
                                                   "Rprop", "SGD",      "SparseAdam"};

// "betas": [beta1, beta2] (or "auto": keep the defaults).
void translate_betas(const Section& params, OptimizerConfig& optimizer) {
  const json* betas = params.find("betas");
  if (betas && is_auto(*betas)) params.record("betas", Got::automatic);
  if (!betas || is_auto(*betas)) return;
  const bool valid = betas->is_array() && betas->size() == 2 && (*betas)[0].is_number() && (*betas)[1].is_number() &&
                     (*betas)[0].get<double>() >= 0.0 && (*betas)[0].get<double>() < 1.0 &&
                     (*betas)[1].get<double>() >= 0.0 && (*betas)[1].get<double>() < 1.0;
  if (!valid) params.fail_value("betas", *betas, "[beta1, beta2] with 0 <= beta < 1, or \"auto\"");
  optimizer.beta1 = (*betas)[0].get<double>();
  optimizer.beta2 = (*betas)[1].get<double>();
}

// Keys every optimizer's params may hold with no effect on zerotune (torch's implementation
// switches), and the ones that must keep their default.
const KeyTable kImplementationKeys = {{"set_grad_none", Role::no_effect},
                                                                       {"foreach", Role::no_effect},
                                                                       {"fused", Role::no_effect},
                                                                       {"capturable", Role::no_effect},
                                                                       {"differentiable", Role::no_effect},
                                                                       {"maximize", Role::translated}};

void check_optimizer_keys(const Section& params, KeyTable keys) {
  keys.insert(keys.end(), kImplementationKeys.begin(), kImplementationKeys.end());
  keys.push_back({"max_grad_norm", Role::translated});
  params.check_keys(keys);
  ZT_CHECK(!params.has("max_grad_norm"), params.file(), ": optimizer.params.max_grad_norm is not supported (as in "
           "DeepSpeed): use the top-level \"gradient_clipping\"");
  params.require("maximize", false, "zerotune minimizes the loss");
}

// DeepSpeed's FusedAdam / DeepSpeedCPUAdam and torch's Adam/AdamW (the engine passes the params
// through to whichever it builds).
void translate_adam(const Section& section, const Section& params, const std::string& name, OptimizerConfig& optimizer) {
  check_optimizer_keys(params, {{"lr", Role::translated},
                                {"betas", Role::translated},
                                {"eps", Role::translated},
                                {"weight_decay", Role::translated},
                                {"bias_correction", Role::translated},
                                {"amsgrad", Role::translated},
                                {"adam_w_mode", Role::translated},
                                {"torch_adam", Role::translated},
                                {"fp32_optimizer_states", Role::translated}});
  params.number("lr", optimizer.lr, 0.0, true);
  translate_betas(params, optimizer);
  params.number("eps", optimizer.eps, 0.0, true);
  const Got weight_decay = params.number("weight_decay", optimizer.weight_decay, 0.0, true);
  params.require("bias_correction", true, "zerotune's Adam is bias-corrected");
  params.require("amsgrad", false, "zerotune implements Adam without AMSGrad");
  params.require("fp32_optimizer_states", true, "zerotune keeps optimizer states in fp32");

  // DeepSpeed: "AdamW", or "Adam" unless adam_w_mode is false, is decoupled weight decay.
  bool adam_w_mode = true, torch_adam = false;
  params.boolean("adam_w_mode", adam_w_mode, false);
  params.boolean("torch_adam", torch_adam, false);
  const bool decoupled = name == "adamw" || adam_w_mode;
  optimizer.type = "adamw";
  optimizer.adam_w_mode = decoupled;
  if (torch_adam && decoupled && weight_decay == Got::absent) {
    optimizer.weight_decay = 0.01;  // torch.optim.AdamW's default, which torch_adam builds
    section.note("optimizer.params.torch_adam builds torch.optim.AdamW: weight_decay defaults to its 0.01");
  }
  if (!decoupled) {
    ZT_CHECK(optimizer.weight_decay == 0.0, params.file(), ": optimizer Adam with adam_w_mode false (L2-regularised "
             "Adam) and weight_decay ", optimizer.weight_decay, " is not supported: use AdamW (decoupled decay)");
    section.note("optimizer Adam with adam_w_mode false and weight_decay 0 is the same update as AdamW");
  }
}

// torch.optim.SGD (DeepSpeed builds it by name): its defaults, lr included (1e-3 in current torch).
void translate_sgd(const Section& params, OptimizerConfig& optimizer) {
  check_optimizer_keys(params, {{"lr", Role::translated},
                                {"momentum", Role::translated},
                                {"dampening", Role::translated},
                                {"weight_decay", Role::translated},
                                {"nesterov", Role::translated}});
  optimizer.type = "sgd";
  optimizer.weight_decay = 0.0;
  params.number("lr", optimizer.lr, 0.0, true);
  params.number("momentum", optimizer.momentum, 0.0, false);
  params.number("dampening", optimizer.dampening, 0.0, false);
  params.number("weight_decay", optimizer.weight_decay, 0.0, true);
  params.boolean("nesterov", optimizer.nesterov, false);
  ZT_CHECK(!optimizer.nesterov || (optimizer.momentum > 0.0 && optimizer.dampening == 0.0), params.file(),
           ": optimizer SGD with nesterov needs momentum > 0 and dampening 0 (as torch.optim.SGD)");
}

// DeepSpeed "Lamb": FusedLamb (deepspeed/ops/lamb/fused_lamb.py) and its defaults.
void translate_lamb(const Section& params, OptimizerConfig& optimizer) {
  check_optimizer_keys(params, {{"lr", Role::translated},
                                {"betas", Role::translated},
                                {"eps", Role::translated},
                                {"weight_decay", Role::translated},
                                {"bias_correction", Role::translated},
                                {"eps_inside_sqrt", Role::translated},
                                {"max_coeff", Role::translated},
                                {"min_coeff", Role::translated},
                                {"amsgrad", Role::translated}});
  optimizer.type = "lamb";
  params.number("lr", optimizer.lr, 0.0, true);
  translate_betas(params, optimizer);
  params.number("eps", optimizer.eps, 0.0, true);
  params.number("weight_decay", optimizer.weight_decay, 0.0, true);
  params.boolean("bias_correction", optimizer.bias_correction, false);
  params.boolean("eps_inside_sqrt", optimizer.eps_inside_sqrt, false);
  params.number("max_coeff", optimizer.max_coeff, 0.0, false);
  params.number("min_coeff", optimizer.min_coeff, 0.0, false);
  params.require("amsgrad", false, "FusedLamb has no AMSGrad");
  ZT_CHECK(optimizer.min_coeff > 0.0 && optimizer.min_coeff <= optimizer.max_coeff, params.file(),
           ": optimizer Lamb: min_coeff ", optimizer.min_coeff, " and max_coeff ", optimizer.max_coeff,
           " must satisfy 0 < min_coeff <= max_coeff");
}

// What LOMO and AdaLomo share: lr, weight_decay (default 0) and clipping. clip_grad_norm is the
// run's "gradient_clipping" (the same number either way).
void translate_lomo_common(const Section& params, TrainConfig& config) {
  OptimizerConfig& optimizer = config.optimizer;
  optimizer.weight_decay = 0.0;
  params.number("lr", optimizer.lr, 0.0, true);
  params.number("weight_decay", optimizer.weight_decay, 0.0, true);
  if (const json* value = params.find("clip_grad_value"); value && !value->is_null())
    params.number("clip_grad_value", optimizer.clip_grad_value, 0.0, false);
  if (const json* value = params.find("clip_grad_norm"); value && !value->is_null()) {
    double norm = 0.0;
    params.number("clip_grad_norm", norm, 0.0, false);
    const bool top_level = config.gradient_clipping > 0.0;
    ZT_CHECK(!top_level || config.gradient_clipping == norm, params.file(), ": optimizer.params.clip_grad_norm ", norm,
             " and gradient_clipping ", config.gradient_clipping, " disagree (they are the same setting for ",
             optimizer.type == "adalomo" ? "AdaLomo" : "LOMO", ")");
    config.gradient_clipping = norm;
  }
}

// LOMO (OpenLMLab/LOMO's lomo_optim.Lomo; HF TrainingArguments optim "lomo"): lr, weight_decay,
// clip_grad_value; its clip_grad_norm is the run's "gradient_clipping" (the same number either way).
void translate_lomo(const Section& params, TrainConfig& config) {
  check_optimizer_keys(params, {{"lr", Role::translated},
                                {"weight_decay", Role::translated},
                                {"clip_grad_norm", Role::translated},
                                {"clip_grad_value", Role::translated},
                                {"loss_scale_args", Role::translated}});
  OptimizerConfig& optimizer = config.optimizer;
  optimizer.type = "lomo";
  translate_lomo_common(params, config);
  ZT_CHECK(!params.has("loss_scale_args"), params.file(), ": optimizer.params.loss_scale_args is not supported: "
           "zerotune's fp16 loss scaler is DeepSpeed's, set in the \"fp16\" section");
}

// What DeepSpeed's 1-bit optimizers (OneBitAdam, ZeroOneAdam) share: Adam's lr, betas, eps and
// weight decay, the exchange's comm_backend_name, and no AMSGrad.
void translate_compressed_adam(const Section& params, OptimizerConfig& optimizer, const char* what) {
  params.number("lr", optimizer.lr, 0.0, true);
  translate_betas(params, optimizer);
  params.number("eps", optimizer.eps, 0.0, true);
  params.number("weight_decay", optimizer.weight_decay, 0.0, true);
  if (const json* name = params.find("comm_backend_name"); name && name->is_string() &&
                                                          (*name == "compressed" || *name == "hccl"))
    fail(params.file(), ": optimizer.params.comm_backend_name \"", name->get<std::string>(),
         "\" is not supported: zerotune exchanges through \"nccl\" (the device communicator, packing on the "
         "device) or \"mpi\" (packing in host memory)");
  params.text("comm_backend_name", optimizer.comm_backend_name, {"nccl", "mpi"});
  params.require("amsgrad", false, cat(what, " has no AMSGrad (DeepSpeed raises on it too)"));
}

// DeepSpeed "OneBitAdam" (deepspeed/runtime/fp16/onebit/adam.py) and its defaults. Its
// bias_correction and eps_inside_sqrt are stored there but never used; cuda_aware is MPI's
// device-buffer mode, which zerotune does not use (the "mpi" exchange packs in host memory).
void translate_onebit_adam(const Section& params, OptimizerConfig& optimizer) {
  check_optimizer_keys(params, {{"lr", Role::translated},
                                {"betas", Role::translated},
                                {"eps", Role::translated},
                                {"weight_decay", Role::translated},
                                {"freeze_step", Role::translated},
                                {"comm_backend_name", Role::translated},
                                {"cuda_aware", Role::no_effect},
                                {"bias_correction", Role::no_effect},
                                {"eps_inside_sqrt", Role::no_effect},
                                {"amsgrad", Role::translated}});
  optimizer.type = "onebitadam";
  translate_compressed_adam(params, optimizer, "1-bit Adam");
  params.integer("freeze_step", optimizer.freeze_step, 0, std::numeric_limits<int64_t>::max(), false);
}

// AdaLomo (lomo_optim.AdaLomo; HF TrainingArguments optim "adalomo"): LOMO's keys plus eps
// [eps_square, eps_scale], clip_threshold and decay_rate. Its fixed loss_scale (2^10 by default)
// is not used: zerotune scales the loss for fp16 only, with DeepSpeed's loss scaler.
void translate_adalomo(const Section& params, TrainConfig& config) {
  check_optimizer_keys(params, {{"lr", Role::translated},
                                {"weight_decay", Role::translated},
                                {"clip_grad_norm", Role::translated},
                                {"clip_grad_value", Role::translated},
                                {"eps", Role::translated},
                                {"clip_threshold", Role::translated},
                                {"decay_rate", Role::translated},
                                {"loss_scale", Role::translated}});
  OptimizerConfig& optimizer = config.optimizer;
  optimizer.type = "adalomo";
  translate_lomo_common(params, config);
  if (const json* eps = params.find("eps")) {
    const bool valid = eps->is_array() && eps->size() == 2 && (*eps)[0].is_number() && (*eps)[1].is_number() &&
                       (*eps)[0].get<double>() >= 0.0 && (*eps)[1].get<double>() >= 0.0 &&
                       std::isfinite((*eps)[0].get<double>()) && std::isfinite((*eps)[1].get<double>());
    if (!valid) params.fail_value("eps", *eps, "[eps_square, eps_scale], two numbers >= 0 (AdaLomo's default [1e-30, 1e-3])");
    optimizer.eps_square = (*eps)[0].get<double>();
    optimizer.eps_scale = (*eps)[1].get<double>();
    params.record("eps", Got::value);
  }
  params.number("clip_threshold", optimizer.clip_threshold, 0.0, false);
  if (const json* value = params.find("clip_threshold"); value && optimizer.clip_threshold == 0.0)
    params.fail_value("clip_threshold", *value, "a number > 0");
  if (const json* value = params.find("decay_rate")) {
    if (!value->is_number() || !std::isfinite(value->get<double>()) || value->get<double>() > 0.0)
      params.fail_value("decay_rate", *value, "a number <= 0 (the second moment's beta2 at update t is 1 - t^decay_rate)");
    optimizer.decay_rate = value->get<double>();
    params.record("decay_rate", Got::value);
  }
  if (const json* value = params.find("loss_scale"); value && !value->is_null()) {
    double scale = 0.0;
    params.number("loss_scale", scale, 0.0, false);
    params.note("optimizer.params.loss_scale is not used: zerotune scales the loss only for fp16, with its loss scaler "
                "(the \"fp16\" section); without fp16 a power-of-two scale would not change the gradients");
  }
}

// DeepSpeed "ZeroOneAdam" (deepspeed/runtime/fp16/onebit/zoadam.py) and its defaults; as with
// OneBitAdam, bias_correction and eps_inside_sqrt are never read there and cuda_aware is MPI's
// device-buffer mode.
void translate_zero_one_adam(const Section& params, OptimizerConfig& optimizer) {
  check_optimizer_keys(params, {{"lr", Role::translated},
                                {"betas", Role::translated},
                                {"eps", Role::translated},
                                {"weight_decay", Role::translated},
                                {"var_freeze_step", Role::translated},
                                {"var_update_scaler", Role::translated},
                                {"local_step_scaler", Role::translated},
                                {"local_step_clipper", Role::translated},
                                {"comm_backend_name", Role::translated},
                                {"cuda_aware", Role::no_effect},
                                {"bias_correction", Role::no_effect},
                                {"eps_inside_sqrt", Role::no_effect},
                                {"amsgrad", Role::translated}});
  optimizer.type = "zerooneadam";
  translate_compressed_adam(params, optimizer, "0/1 Adam");
  constexpr int64_t kMost = std::numeric_limits<int32_t>::max();
  params.integer("var_freeze_step", optimizer.var_freeze_step, 0, std::numeric_limits<int64_t>::max() / 2, false);
  params.integer("var_update_scaler", optimizer.var_update_scaler, 1, kMost, false);
  params.integer("local_step_scaler", optimizer.local_step_scaler, 1, kMost, false);
  params.integer("local_step_clipper", optimizer.local_step_clipper, 1, kMost, false);
}

void translate_optimizer(const Section& top, TrainConfig& config) {
  if (!top.has("optimizer")) return;
  const Section section = top.child("optimizer");
  section.check_keys({{"type", Role::translated}, {"params", Role::translated}, {"legacy_fusion", Role::no_effect}});
  std::string type;
  const json* type_value = section.find("type");
  if (!type_value) fail(top.file(), ": optimizer.type is missing (zerotune supports Adam, AdamW, Lamb, SGD, LOMO and AdaLomo)");
  if (!type_value->is_string()) section.fail_value("type", *type_value, "an optimizer name such as \"AdamW\"");
  type = type_value->get<std::string>();
  // DeepSpeed's own names match case-insensitively; torch.optim classes as spelled.
  const std::string name = lowercase(type);
  const Section params = section.child("params");
  if (name == "adam" || name == "adamw") return translate_adam(section, params, name, config.optimizer);
  if (name == "lamb") return translate_lamb(params, config.optimizer);
  if (name == "lomo") return translate_lomo(params, config);
  if (name == "onebitadam") return translate_onebit_adam(params, config.optimizer);
  if (name == "zerooneadam") return translate_zero_one_adam(params, config.optimizer);
  if (name == "adalomo") return translate_adalomo(params, config);
  if (type == "SGD") return translate_sgd(params, config.optimizer);
  const bool known = std::find(kDeepSpeedOptimizers.begin(), kDeepSpeedOptimizers.end(), name) !=
                         kDeepSpeedOptimizers.end() ||
                     std::find(kTorchOptimizers.begin(), kTorchOptimizers.end(), type) != kTorchOptimizers.end();
  if (known)
    fail(top.file(), ": optimizer type ", type, " is not supported (yet): zerotune implements Adam, AdamW, Lamb, SGD, "
         "OneBitAdam, ZeroOneAdam, LOMO and AdaLomo");
  std::vector<std::string> candidates = kDeepSpeedOptimizers;
  candidates.insert(candidates.end(), kTorchOptimizers.begin(), kTorchOptimizers.end());
  const std::string suggestion = nearest(type, candidates);
  fail(top.file(), ": optimizer type '", type, "' is neither a DeepSpeed nor a torch.optim optimizer",
       suggestion.empty() ? std::string() : cat(" (did you mean '", suggestion, "'?)"));
}

// ---- scheduler -----------------------------------------------------------------------------

const std::vector<std::string> kDeepSpeedSchedules = {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR", "OneCycle",
                                                      "LRRangeTest"};
const std::vector<std::string> kTorchSchedules = {
    "LambdaLR",       "MultiplicativeLR", "StepLR",     "MultiStepLR",       "ConstantLR",
    "LinearLR",       "ExponentialLR",    "SequentialLR", "CosineAnnealingLR", "ChainedScheduler",
    "ReduceLROnPlateau", "CyclicLR",      "CosineAnnealingWarmRestarts", "OneCycleLR", "PolynomialLR"};

void translate_scheduler(const Section& top, TrainConfig& config) {
  if (!top.has("scheduler")) return;
  const Section section = top.child("scheduler");
  section.check_keys({{"type", Role::translated}, {"params", Role::translated}});
  const json* type_value = section.find("type");
  if (!type_value) fail(top.file(), ": scheduler.type is missing (one of WarmupLR, WarmupDecayLR, WarmupCosineLR)");
  if (!type_value->is_string()) section.fail_value("type", *type_value, "a scheduler name such as \"WarmupLR\"");
  const std::string type = type_value->get<std::string>();
  const bool translated = type == "WarmupLR" || type == "WarmupDecayLR" || type == "WarmupCosineLR";
  if (!translated) {
    const bool known = std::find(kDeepSpeedSchedules.begin(), kDeepSpeedSchedules.end(), type) !=
                           kDeepSpeedSchedules.end() ||
                       std::find(kTorchSchedules.begin(), kTorchSchedules.end(), type) != kTorchSchedules.end();
    if (known)
      fail(top.file(), ": scheduler type ", type,
           " is not supported (yet): zerotune implements WarmupLR, WarmupDecayLR and WarmupCosineLR");
    std::vector<std::string> candidates = kDeepSpeedSchedules;
    candidates.insert(candidates.end(), kTorchSchedules.begin(), kTorchSchedules.end());
    const std::string suggestion = nearest(type, candidates);
    fail(top.file(), ": scheduler type '", type, "' is neither a DeepSpeed nor a torch.optim.lr_scheduler schedule",
         suggestion.empty() ? std::string() : cat(" (did you mean '", suggestion, "'?)"));
  }

  // The constructor arguments of DeepSpeed's classes (lr_schedules.py).
  const Section params = section.child("params");
  KeyTable keys = {{"warmup_num_steps", Role::translated},
                   {"warmup_type", Role::translated},
                   {"last_batch_iteration", Role::translated}};
  if (type == "WarmupCosineLR") {
    keys.insert(keys.end(), {{"total_num_steps", Role::translated},
                             {"warmup_min_ratio", Role::translated},
                             {"cos_min_ratio", Role::translated}});
  } else {
    keys.insert(keys.end(), {{"warmup_min_lr", Role::translated}, {"warmup_max_lr", Role::translated}});
    if (type == "WarmupDecayLR") keys.push_back({"total_num_steps", Role::translated});
  }
  params.check_keys(keys);
  params.require("last_batch_iteration", -1, "a schedule starts at its beginning (resume restores the position)");

  SchedulerConfig& schedule = config.scheduler;
  schedule.type = type;
  params.number("warmup_min_lr", schedule.warmup_min_lr, 0.0, true);  // "auto": 0, DeepSpeed's and HF's value
  const Got max_lr = params.number("warmup_max_lr", schedule.warmup_max_lr, 0.0, true);
  // "auto" (HF) takes the optimizer's lr; so does a WarmupLR without the key (current DeepSpeed's
  // default is None -> the optimizer's lr; WarmupDecayLR still defaults to 0.001).
  if (max_lr == Got::automatic || (max_lr == Got::absent && type == "WarmupLR")) schedule.warmup_max_lr_auto = true;
  if (params.integer("warmup_num_steps", schedule.warmup_num_steps, 1, kMaxInt, true) == Got::automatic)
    schedule.warmup_num_steps = 1;  // HF fills warmup_steps (0 by default), DeepSpeed's WarmupLR takes max(2, n):
                                    // 1 here gives the same 2 steps; --warmup-steps fills it (auto_values.cpp)
  params.text("warmup_type", schedule.warmup_type, {"log", "linear"});
  params.number("warmup_min_ratio", schedule.warmup_min_ratio, 0.0, true);
  params.number("cos_min_ratio", schedule.cos_min_ratio, 0.0, true);
  if (type != "WarmupLR") {
    const Got total = params.integer("total_num_steps", schedule.total_num_steps, 1, kMaxInt, true);
    ZT_CHECK(total != Got::absent, top.file(), ": scheduler.params.total_num_steps is required by ", type,
             " (DeepSpeed has no default; \"auto\" takes the run's length)");
    if (total == Got::automatic) schedule.total_num_steps = 0;  // the trainer fills in the run's length
  }
  // Check what is known now; an "auto" total stands in as long enough.
  SchedulerConfig probe = schedule;
  if (probe.total_num_steps == 0) probe.total_num_steps = kMaxInt;
  try {
    validate_schedule(probe);
  } catch (const Error& error) {
    fail(top.file(), ": ", error.what());
  }
}

// ---- precision -----------------------------------------------------------------------------

void translate_precision(const Section& top, TrainConfig& config) {
  ZT_CHECK(!(top.has("bf16") && top.has("bfloat16")), top.file(),
           ": give only one of bf16 and bfloat16 (DeepSpeed reads bf16 and ignores the other)");
  bool fp16_enabled = false, bf16_enabled = false;

  const Section fp16 = top.child("fp16");
  fp16.check_keys({{"enabled", Role::translated},
                   {"auto_cast", Role::translated},
                   {"loss_scale", Role::translated},
                   {"initial_scale_power", Role::translated},
                   {"loss_scale_window", Role::translated},
                   {"hysteresis", Role::translated},
                   {"consecutive_hysteresis", Role::translated},
                   {"min_loss_scale", Role::translated},
                   {"fp16_master_weights_and_grads", Role::translated}});
  // "auto": --fp16 decides (off without it: auto_values.h resolve_precision).
  const bool fp16_auto = fp16.boolean("enabled", fp16_enabled, true) == Got::automatic;
  fp16.require("auto_cast", false, "zerotune casts parameters, not module inputs");
  fp16.require("consecutive_hysteresis", false, "zerotune's loss scaler uses DeepSpeed's default hysteresis");
  fp16.require("fp16_master_weights_and_grads", false, "zerotune keeps fp32 master weights and gradients");
  LossScalerConfig& scaler = config.loss_scaler;
  fp16.number("loss_scale", scaler.loss_scale, 0.0, false);
  const bool dynamic_args_given = fp16.has("initial_scale_power") || fp16.has("loss_scale_window") ||
                                  fp16.has("hysteresis") || fp16.has("min_loss_scale") ||
                                  fp16.has("consecutive_hysteresis");
  fp16.integer("initial_scale_power", scaler.initial_scale_power, 0, 64, false);
  fp16.integer("loss_scale_window", scaler.loss_scale_window, 1, std::numeric_limits<int>::max(), false);
  fp16.integer("hysteresis", scaler.hysteresis, 1, std::numeric_limits<int>::max(), false);
  fp16.number("min_loss_scale", scaler.min_loss_scale, 0.0, false);
  if ((fp16_enabled || fp16_auto) && !dynamic_args_given && scaler.loss_scale == 0.0) {
    // DeepSpeed passes no dynamic-scaler arguments then, and its ZeRO optimizers build
    // DynamicLossScaler() with that class's defaults: initial scale 2^32, hysteresis 1. An
    // "auto" that --fp16 turns on is the same section (its precision note shows the scale).
    scaler.initial_scale_power = 32;
    scaler.hysteresis = 1;
    if (fp16_enabled)
      fp16.note("fp16 sets none of initial_scale_power, loss_scale_window, hysteresis, min_loss_scale: as DeepSpeed's "
                "ZeRO optimizers do then, the dynamic loss scale starts at 2^32 with hysteresis 1");
  }

  const std::string bf16_key = top.has("bfloat16") ? "bfloat16" : "bf16";
  const Section bf16 = top.child(bf16_key);
  bf16.check_keys({{"enabled", Role::translated}, {"immediate_grad_update", Role::no_effect}});
  bf16.boolean("enabled", bf16_enabled, true);

  ZT_CHECK(!(fp16_enabled && bf16_enabled), top.file(), ": fp16.enabled and ", bf16_key,
           ".enabled are both true; DeepSpeed allows only one of them");
  if (fp16_enabled) config.compute_dtype = DType::F16;
  if (bf16_enabled) config.compute_dtype = DType::BF16;
}

// ---- zero_optimization ---------------------------------------------------------------------

const KeyTable& zero_keys() {
  static const KeyTable table = {
      {"stage", Role::translated},
      {"reduce_bucket_size", Role::translated},
      {"allgather_bucket_size", Role::translated},
      {"overlap_comm", Role::translated},
      {"contiguous_gradients", Role::translated},
      {"reduce_scatter", Role::translated},
      {"allgather_partitions", Role::translated},
      {"round_robin_gradients", Role::translated},
      {"sub_group_size", Role::translated},
      {"offload_optimizer", Role::translated},
      {"offload_param", Role::translated},
      {"cpu_offload", Role::translated},                 // deprecated: offload_optimizer cpu
      {"cpu_offload_param", Role::translated},           // deprecated: offload_param cpu
      {"cpu_offload_use_pin_memory", Role::translated},  // deprecated: pin_memory
      {"stage3_prefetch_bucket_size", Role::translated},
      {"prefetch_bucket_size", Role::translated},
      {"stage3_param_persistence_threshold", Role::translated},
      {"param_persistence_threshold", Role::translated},
      {"stage3_model_persistence_threshold", Role::translated},
      {"model_persistence_threshold", Role::translated},
      {"stage3_max_live_parameters", Role::translated},
      {"max_live_parameters", Role::translated},
      {"stage3_max_reuse_distance", Role::translated},
      {"max_reuse_distance", Role::translated},
      {"stage3_gather_16bit_weights_on_model_save", Role::translated},
      {"gather_16bit_weights_on_model_save", Role::translated},
      {"stage3_gather_fp16_weights_on_model_save", Role::translated},  // deprecated spelling
      {"zero_quantized_weights", Role::translated},
      {"zero_quantized_nontrainable_weights", Role::translated},
      {"zero_quantized_gradients", Role::translated},
      {"stage3_use_all_reduce_for_fetch_params", Role::no_effect},
      {"use_all_reduce_for_fetch_params", Role::no_effect},
      {"use_multi_rank_bucket_allreduce", Role::no_effect},
      {"load_from_fp32_weights", Role::no_effect},
      {"elastic_checkpoint", Role::no_effect},
      {"ignore_unused_parameters", Role::no_effect},
      {"legacy_stage1", Role::no_effect},
      {"zero_hpz_partition_size", Role::translated},
      {"mics_shard_size", Role::no_effect},
      {"mics_hierarchical_params_gather", Role::no_effect},
      {"memory_efficient_linear", Role::no_effect},
      {"pipeline_loading_checkpoint", Role::no_effect},
      {"override_module_apply", Role::no_effect},
  };
  return table;
}

// offload_optimizer / offload_param: device none|cpu (nvme is refused), pin_memory; the NVMe
// buffer settings are noted as ignored.
// offload_optimizer.ratio (DeepSpeed's partial offload, ZeRO-Offload++) goes to `ratio`.
void translate_offload(const Section& zero, const std::string& key, std::string& device, bool& pin_memory,
                       double* ratio = nullptr) {
  const Section offload = zero.child(key);
  KeyTable keys = {{"device", Role::translated},  {"pin_memory", Role::translated},
                   {"nvme_path", Role::no_effect}, {"buffer_count", Role::no_effect}};
  if (key == "offload_optimizer") {
    keys.insert(keys.end(), {{"pipeline_read", Role::no_effect},
                             {"pipeline_write", Role::no_effect},
                             {"fast_init", Role::no_effect},
                             {"ratio", Role::translated}});
  } else {
    keys.insert(keys.end(), {{"buffer_size", Role::no_effect}, {"max_in_cpu", Role::no_effect}});
  }
  offload.check_keys(keys);
  if (const json* value = offload.find("device"); value && value->is_string() && value->get<std::string>() == "nvme")
    fail(zero.file(), ": ", offload.key_path("device"), " \"nvme\" is not supported (yet): use \"cpu\" or \"none\"");
  offload.text("device", device, {"none", "cpu"});
  offload.boolean("pin_memory", pin_memory, false);
  if (ratio && offload.number("ratio", *ratio, 0.0, false) == Got::value && *ratio > 1.0)
    offload.fail_value("ratio", *ratio, "a number in [0, 1]: the share of the optimizer states offloaded to the CPU");
}

void translate_zero(const Section& top, TrainConfig& config) {
  ZeroConfig& zero = config.zero;
  if (const json* value = top.find("zero_optimization"); value && value->is_boolean()) {
    zero.stage = value->get<bool>() ? 1 : 0;  // DeepSpeed's deprecated form
    top.note(cat("zero_optimization: ", value->dump(), " is DeepSpeed's deprecated form of {\"stage\": ", zero.stage, "}"));
    return;
  }
  const Section section = top.child("zero_optimization");
  section.check_keys(zero_keys());
  section.integer("stage", zero.stage, 0, 3, false);
  // Sizes: "auto" keeps DeepSpeed's default. HF fills reduce_bucket_size (hidden_size^2) and,
  // under ZeRO-3, stage3_prefetch_bucket_size (0.9 hidden_size^2) and
  // stage3_param_persistence_threshold (10 hidden_size); it leaves the others "auto", which
  // DeepSpeed's schema refuses. They change only speed and memory (auto_values.cpp says each).
  section.integer("reduce_bucket_size", zero.reduce_bucket_size, 0, kMaxInt, true);
  section.integer("allgather_bucket_size", zero.allgather_bucket_size, 0, kMaxInt, true);
  section.integer("sub_group_size", zero.sub_group_size, 0, kMaxInt, true);
  section.integer(section.either("stage3_prefetch_bucket_size", "prefetch_bucket_size"),
                  zero.stage3_prefetch_bucket_size, 0, kMaxInt, true);
  section.integer(section.either("stage3_param_persistence_threshold", "param_persistence_threshold"),
                  zero.stage3_param_persistence_threshold, 0, kMaxInt, true);
  section.integer(section.either("stage3_model_persistence_threshold", "model_persistence_threshold"),
                  zero.stage3_model_persistence_threshold, 0, kMaxInt, true);
  section.integer(section.either("stage3_max_live_parameters", "max_live_parameters"),
                  zero.stage3_max_live_parameters, 0, kMaxInt, true);
  section.integer(section.either("stage3_max_reuse_distance", "max_reuse_distance"), zero.stage3_max_reuse_distance,
                  0, kMaxInt, true);
  const std::string gather_key =
      section.either("stage3_gather_16bit_weights_on_model_save", "gather_16bit_weights_on_model_save");
  section.boolean(section.either(gather_key, "stage3_gather_fp16_weights_on_model_save"),
                  zero.stage3_gather_16bit_weights_on_model_save, false);
  // DeepSpeed's overlap_comm default depends on the stage: on for stage 3, off below.
  if (section.boolean("overlap_comm", zero.overlap_comm, false) == Got::absent) zero.overlap_comm = zero.stage == 3;
  section.boolean("contiguous_gradients", zero.contiguous_gradients, false);
  section.boolean("reduce_scatter", zero.reduce_scatter, false);
  section.boolean("allgather_partitions", zero.allgather_partitions, false);
  section.boolean("round_robin_gradients", zero.round_robin_gradients, false);
  // ZeRO++ (docs/zero-plus-plus.md); the engine checks that they go with stage 3.
  section.boolean("zero_quantized_weights", zero.zero_quantized_weights, false);
  section.require("zero_quantized_nontrainable_weights", false,
                  "zerotune gathers frozen weights as the trainable ones (int8 with zero_quantized_weights) but keeps "
                  "them unquantized in memory");
  section.boolean("zero_quantized_gradients", zero.zero_quantized_gradients, false);
  section.integer("zero_hpz_partition_size", zero.zero_hpz_partition_size, 1, 1 << 20, false);

  // Offload, in the current form or DeepSpeed's deprecated booleans (not both, as in DeepSpeed).
  ZT_CHECK(!(section.has("cpu_offload") && section.has("offload_optimizer")), top.file(),
           ": give only one of zero_optimization.cpu_offload (deprecated) and zero_optimization.offload_optimizer");
  ZT_CHECK(!(section.has("cpu_offload_param") && section.has("offload_param")), top.file(),
           ": give only one of zero_optimization.cpu_offload_param (deprecated) and zero_optimization.offload_param");
  translate_offload(section, "offload_optimizer", zero.offload_optimizer_device, zero.offload_optimizer_pin_memory,
                    &zero.offload_optimizer_ratio);
  translate_offload(section, "offload_param", zero.offload_param_device, zero.offload_param_pin_memory);
  bool deprecated_flag = false;
  if (section.boolean("cpu_offload", deprecated_flag, false) == Got::value && deprecated_flag)
    zero.offload_optimizer_device = "cpu";
  if (section.boolean("cpu_offload_param", deprecated_flag, false) == Got::value && deprecated_flag)
    zero.offload_param_device = "cpu";
  if (section.boolean("cpu_offload_use_pin_memory", deprecated_flag, false) == Got::value)
    zero.offload_optimizer_pin_memory = zero.offload_param_pin_memory = deprecated_flag;

  ZT_CHECK(zero.offload_optimizer_device == "none" || zero.stage >= 1, top.file(),
           ": zero_optimization.offload_optimizer.device \"cpu\" needs ZeRO stage 1, 2 or 3 (stage is ", zero.stage, ")");
  if (zero.offload_optimizer_ratio < 1.0) {
    // DeepSpeed's partial offload is stage 3's (stage3.py); the other stages offload everything.
    ZT_CHECK(zero.offload_optimizer_device == "none" || zero.stage == 3, top.file(),
             ": zero_optimization.offload_optimizer.ratio ", zero.offload_optimizer_ratio, " (partial offload, "
             "ZeRO-Offload++) needs ZeRO stage 3, as in DeepSpeed (stage is ", zero.stage, "); remove it to offload "
             "all optimizer states");
    if (zero.offload_optimizer_device == "none")
      top.note(cat("zero_optimization.offload_optimizer.ratio ", zero.offload_optimizer_ratio,
                   " has no effect: offload_optimizer.device is \"none\""));
  }
  if (zero.offload_param_device != "none" && zero.stage < 3) {
    // DeepSpeed-Chat writes offload_param for every stage; DeepSpeed uses it only in stage 3.
    section.note(cat("zero_optimization.offload_param is ignored below stage 3 (as in DeepSpeed; stage is ",
                     zero.stage, ")"));
    zero.offload_param_device = "none";
  }
}

// ---- pipeline (DeepSpeed's runtime/config.py get_pipeline_config) ----------------------------

// "pipeline": {"stages": P or "auto", "partition": "best" | "parameters" | "uniform" | "type:REGEX",
// ...}. DeepSpeed's PipelineModule takes num_stages and partition_method itself; the section's
// defaults ("auto", "best") leave them to it, here to --pipeline-stages (1) and "parameters"
// (what "best" means in zerotune: balance the trainable parameters).
void translate_pipeline(const Section& top, TrainConfig& config) {
  if (!top.has("pipeline")) return;
  const Section section = top.child("pipeline");
  section.check_keys({{"stages", Role::translated},
                      {"partition", Role::translated},
                      {"seed_layers", Role::no_effect},
                      {"activation_checkpoint_interval", Role::translated},
                      {"pipe_partitioned", Role::no_effect},
                      {"grad_partitioned", Role::no_effect},
                      {"use_reentrant", Role::no_effect}});
  if (section.integer("stages", config.pipeline.stages, 1, kMaxInt, true) == Got::value)
    section.note(cat("pipeline.stages ", config.pipeline.stages, " -> --pipeline-stages ", config.pipeline.stages));
  std::string partition;
  if (section.string("partition", partition) == Got::value) {
    config.pipeline.partition_method = partition == "best" ? "parameters" : lowercase(partition.substr(0, 5)) == "type:"
                                                                               ? partition : lowercase(partition);
    section.note(cat("pipeline.partition \"", partition, "\" -> --partition-method ", config.pipeline.partition_method));
  }
  int64_t interval = 0;
  if (section.integer("activation_checkpoint_interval", interval, 0, kMaxInt, false) == Got::value && interval > 0)
    section.note("pipeline.activation_checkpoint_interval is ignored: use --activation-checkpointing (every block); "
                 "a pipeline stage recomputes its forward before each backward anyway");
}

// ---- activation_checkpointing --------------------------------------------------------------

void translate_activation_checkpointing(const Section& top) {
  if (!top.has("activation_checkpointing")) return;
  const Section section = top.child("activation_checkpointing");
  section.check_keys({{"partition_activations", Role::translated},
                      {"contiguous_memory_optimization", Role::translated},
                      {"cpu_checkpointing", Role::translated},
                      {"number_checkpoints", Role::translated},
                      {"synchronize_checkpoint_boundary", Role::translated},
                      {"profile", Role::translated}});
  section.note("activation_checkpointing is ignored: in DeepSpeed it configures deepspeed.checkpointing but does not "
               "switch checkpointing on for HF models (they call gradient_checkpointing_enable()); use "
               "--activation-checkpointing (and --offload-activations for what cpu_checkpointing does)");
}

}  // namespace

size_t key_edit_distance(const std::string& a_text, const std::string& b_text) {
  const std::string a = lowercase(a_text), b = lowercase(b_text);
  // distance[i][j]: edits turning a[0:i] into b[0:j]; rows kept for the swap case.
  std::vector<std::vector<size_t>> distance(a.size() + 1, std::vector<size_t>(b.size() + 1, 0));
  for (size_t i = 0; i <= a.size(); ++i) distance[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) distance[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t substitution = a[i - 1] == b[j - 1] ? 0 : 1;
      distance[i][j] = std::min({distance[i - 1][j] + 1, distance[i][j - 1] + 1, distance[i - 1][j - 1] + substitution});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        distance[i][j] = std::min(distance[i][j], distance[i - 2][j - 2] + 1);
    }
  }
  return distance[a.size()][b.size()];
}

std::optional<DType> parse_deepspeed_dtype(const std::string& name) {
  for (const char* spelling : {"fp32", "float32", "float", "torch.float32"})
    if (name == spelling) return DType::F32;
  for (const char* spelling : {"bf16", "bfloat16", "torch.bfloat16"})
    if (name == spelling) return DType::BF16;
  for (const char* spelling : {"fp16", "float16", "half", "torch.float16"})
    if (name == spelling) return DType::F16;
  return std::nullopt;
}

const char* deepspeed_dtype_spellings() {
  return "\"fp32\" (\"float32\", \"float\", \"torch.float32\"), \"bf16\" (\"bfloat16\", \"torch.bfloat16\"), "
         "\"fp16\" (\"float16\", \"half\", \"torch.float16\")";
}

void apply_deepspeed_config(const json& ds, const std::string& path, int world_size, TrainConfig& config,
                            std::vector<std::string>& notes) {
  ZT_CHECK(ds.is_object(), path, ": a DeepSpeed config must be a JSON object, got ", show(ds));
  const Section top(ds, path, "", notes, &config.deepspeed_keys);
  top.check_keys(top_level_keys());
  config.deepspeed_config_path = path;
  translate_top_level(top, config);
  translate_optimizer(top, config);
  translate_scheduler(top, config);
  translate_precision(top, config);
  translate_zero(top, config);
  translate_activation_checkpointing(top);
  translate_pipeline(top, config);
  translate_flops_profiler(top, config);
  translate_monitors(top, config);

  // DeepSpeed checks the batch numbers of the JSON against the world size; so do we, on a copy:
  // the flags may still change them, and resolve_batch_sizes derives them after the flags.
  TrainConfig probe = config;
  probe.deepspeed_config_path.clear();
  try {
    probe.resolve_batch_sizes(world_size);
  } catch (const Error& error) {
    fail(path, ": ", error.what());
  }
}

namespace {

// An accelerate config (YAML, `accelerate config`'s file) given where the DeepSpeed JSON belongs:
// the message says which of its lines to carry over and how.
void refuse_accelerate_yaml(const std::string& path, const std::string& text) {
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos || text[first] == '{' || text.find("deepspeed_config") == std::string::npos) return;
  std::string advice;
  std::istringstream lines(text);
  int number = 0;
  for (std::string line; std::getline(lines, line);) {
    ++number;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon), value = line.substr(colon + 1);
    key.erase(0, key.find_first_not_of(" \t"));
    value.erase(0, value.find_first_not_of(" \t"));
    value.erase(value.find_last_not_of(" \t\r") + 1);
    std::string how;
    if (key == "deepspeed_config_file" && !value.empty()) how = cat("give --deepspeed ", value);
    else if (key == "zero_stage") how = cat("--zero-stage ", value);
    else if (key == "offload_optimizer_device" && value != "none") how = cat("--offload-optimizer ", value);
    else if (key == "offload_param_device" && value != "none")
      how = cat("\"zero_optimization\": {\"offload_param\": {\"device\": \"", value, "\"}} in a DeepSpeed JSON");
    else if (key == "mixed_precision" && (value == "bf16" || value == "fp16"))
      how = cat("\"", value, "\": {\"enabled\": true} in a DeepSpeed JSON");
    else if (key == "gradient_accumulation_steps") how = cat("--grad-accum ", value);
    else if (key == "gradient_clipping") how = cat("--gradient-clipping ", value);
    if (!how.empty()) advice += cat("\n  line ", number, ": ", key, ": ", value, "  ->  ", how);
  }
  fail(path, ": an accelerate config (YAML), not a DeepSpeed JSON config; zerotune reads the DeepSpeed JSON and its "
       "flags", advice.empty() ? std::string(": give --deepspeed the JSON file the YAML's deepspeed_config_file names")
                               : cat(". Carry its settings over:", advice));
}

}  // namespace

void load_deepspeed_config(const std::string& path, int world_size, TrainConfig& config,
                           std::vector<std::string>& notes) {
  std::ifstream file(path, std::ios::binary);
  ZT_CHECK(file, path, ": cannot open the DeepSpeed config");
  std::stringstream text;
  text << file.rdbuf();
  ZT_CHECK(!file.bad(), path, ": cannot read the DeepSpeed config");

  // DeepSpeed refuses duplicate keys (dict_raise_error_on_duplicate_keys): track the keys of
  // each open object while parsing.
  std::vector<std::set<std::string>> open_objects;
  const json::parser_callback_t refuse_duplicates = [&](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) open_objects.emplace_back();
    else if (event == json::parse_event_t::object_end) open_objects.pop_back();
    else if (event == json::parse_event_t::key)
      ZT_CHECK(open_objects.back().insert(parsed.get<std::string>()).second, path, ": duplicate key '",
               parsed.get<std::string>(), "'");
    return true;
  };
  refuse_accelerate_yaml(path, text.str());
  json ds;
  try {
    ds = json::parse(text.str(), refuse_duplicates, true, /*ignore_comments=*/true);
  } catch (const json::parse_error& error) {
    std::string what = error.what();  // "[json.exception.parse_error.101] parse error at line L, column C: ..."
    if (const size_t start = what.find("] "); start != std::string::npos) what = what.substr(start + 2);
    fail(path, ": invalid JSON: ", what);
  }
  apply_deepspeed_config(ds, path, world_size, config, notes);
}

}  // namespace zt
