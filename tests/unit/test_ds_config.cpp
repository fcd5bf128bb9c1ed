// Tests of the DeepSpeed JSON translation (src/train/ds_config) and of TrainConfig's batch-size
// resolution and JSON form (src/train/train_config.cpp).
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include <unistd.h>

#include "core/error.h"
#include "optim/optimizer.h"
#include "train/ds_config.h"
#include "train/train_config.h"
#include "test_util.h"

using nlohmann::json;
using zt::TrainConfig;

namespace {

const std::string kPath = "ds_config.json";

TrainConfig translate(const std::string& text, std::vector<std::string>& notes, int world_size = 1) {
  TrainConfig config;
  zt::apply_deepspeed_config(json::parse(text), kPath, world_size, config, notes);
  return config;
}

TrainConfig translate(const std::string& text, int world_size = 1) {
  std::vector<std::string> notes;
  return translate(text, notes, world_size);
}

using zt::test::check_error;

void check_translate_error(const std::string& text, const std::string& expected, int world_size = 1) {
  check_error([&] { translate(text, world_size); }, expected);
}

std::string optimizer_of_type(const std::string& type) { return R"({"optimizer": {"type": ")" + type + R"("}})"; }

bool has_note(const std::vector<std::string>& notes, const std::string& text) {
  return std::any_of(notes.begin(), notes.end(), [&](const std::string& n) { return n.find(text) != std::string::npos; });
}

size_t count_notes(const std::vector<std::string>& notes, const std::string& text) {
  return static_cast<size_t>(
      std::count_if(notes.begin(), notes.end(), [&](const std::string& n) { return n.find(text) != std::string::npos; }));
}

// A scratch directory for config files, removed at the end of the test.
using ScratchDir = zt::test::TempDir;

// What DeepSpeed-Chat's get_train_ds_config writes for step 1 with --dtype bf16 --zero_stage 2
// --offload --enable_tensorboard (json.dumps: 1e4 and 3e7 are written as floats), with the
// optimizer and scheduler that a JSON-only user adds, and a wandb section (disabled: an enabled
// one is refused).
const char* kDeepSpeedChatStep1 = R"({
  "train_batch_size": 64,
  "train_micro_batch_size_per_gpu": 8,
  "steps_per_print": 10,
  "zero_optimization": {
    "stage": 2,
    "overlap_comm": true,
    "offload_param": {"device": "cpu"},
    "offload_optimizer": {"device": "cpu"},
    "stage3_param_persistence_threshold": 10000.0,
    "stage3_max_live_parameters": 30000000.0,
    "stage3_prefetch_bucket_size": 30000000.0,
    "memory_efficient_linear": false
  },
  "bfloat16": {"enabled": true},
  "gradient_clipping": 1.0,
  "prescale_gradients": false,
  "wall_clock_breakdown": false,
  "hybrid_engine": {
    "enabled": false, "max_out_tokens": 512, "inference_tp_size": 1,
    "release_inference_cache": false, "pin_parameters": true, "tp_gather_partition_size": 8
  },
  "tensorboard": {"enabled": true, "output_path": "out/ds_tensorboard_logs/", "job_name": "step1_tensorboard"},
  "wandb": {"enabled": false, "project": "sft"},
  "optimizer": {"type": "AdamW", "params": {"lr": 9.65e-6, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.0}},
  "scheduler": {"type": "WarmupDecayLR",
                "params": {"warmup_min_lr": 0, "warmup_max_lr": 9.65e-6, "warmup_num_steps": 100,
                           "total_num_steps": 2000, "warmup_type": "linear"}}
})";

}  // namespace

BOOST_AUTO_TEST_SUITE(ds_config)

BOOST_AUTO_TEST_CASE(deepspeed_chat_step1_config_translates) {
  std::vector<std::string> notes;
  TrainConfig config = translate(kDeepSpeedChatStep1, notes, 4);
  BOOST_CHECK_EQUAL(config.train_batch_size, 64);
  BOOST_CHECK_EQUAL(config.micro_batch_size, 8);
  BOOST_CHECK_EQUAL(config.gradient_accumulation_steps, 0);  // derived later, after the flags
  BOOST_CHECK_EQUAL(config.gradient_clipping, 1.0);
  BOOST_CHECK_EQUAL(config.steps_per_print, 10);
  BOOST_CHECK(config.compute_dtype == zt::DType::BF16);
  BOOST_CHECK_EQUAL(config.deepspeed_config_path, kPath);
  BOOST_CHECK_EQUAL(config.optimizer.type, "adamw");
  BOOST_CHECK_EQUAL(config.optimizer.lr, 9.65e-6);
  BOOST_CHECK_EQUAL(config.optimizer.beta1, 0.9);
  BOOST_CHECK_EQUAL(config.optimizer.beta2, 0.95);
  BOOST_CHECK_EQUAL(config.optimizer.eps, 1e-8);
  BOOST_CHECK_EQUAL(config.optimizer.weight_decay, 0.0);
  BOOST_CHECK(config.optimizer.adam_w_mode);
  BOOST_CHECK_EQUAL(config.scheduler.type, "WarmupDecayLR");
  BOOST_CHECK_EQUAL(config.scheduler.warmup_max_lr, 9.65e-6);
  BOOST_CHECK_EQUAL(config.scheduler.warmup_num_steps, 100);
  BOOST_CHECK_EQUAL(config.scheduler.total_num_steps, 2000);
  BOOST_CHECK_EQUAL(config.scheduler.warmup_type, "linear");
  BOOST_CHECK_EQUAL(config.zero.stage, 2);
  BOOST_CHECK(config.zero.overlap_comm);
  BOOST_CHECK_EQUAL(config.zero.offload_optimizer_device, "cpu");
  BOOST_CHECK_EQUAL(config.zero.offload_param_device, "none");  // DeepSpeed uses it only in stage 3
  BOOST_CHECK_EQUAL(config.zero.stage3_param_persistence_threshold, 10000);
  BOOST_CHECK_EQUAL(config.zero.stage3_max_live_parameters, 30000000);
  BOOST_CHECK_EQUAL(config.zero.stage3_prefetch_bucket_size, 30000000);
  BOOST_CHECK_EQUAL(config.zero.reduce_bucket_size, 500000000);  // DeepSpeed's default
  // One note per ignored key, naming the file.
  for (const char* key : {"wall_clock_breakdown", "hybrid_engine"}) {
    BOOST_CHECK_MESSAGE(count_notes(notes, std::string(key) + " is ignored (tooling)") == 1, key);
  }
  BOOST_CHECK_EQUAL(count_notes(notes, "ds_config.json: wandb is disabled; ignored"), 1u);
  // The TensorBoard section is DeepSpeed-Chat's --enable_tensorboard: written where DeepSpeed writes.
  BOOST_CHECK(config.tensorboard.enabled);
  BOOST_CHECK_EQUAL(config.tensorboard.directory(), "out/ds_tensorboard_logs/step1_tensorboard");
  BOOST_CHECK(has_note(notes, "ds_config.json: tensorboard: rank 0 writes the metrics to "
                              "out/ds_tensorboard_logs/step1_tensorboard/ (TensorBoard event files)"));
  BOOST_CHECK(!config.csv_monitor.enabled);
  BOOST_CHECK(has_note(notes, "zero_optimization.memory_efficient_linear is ignored"));
  BOOST_CHECK(has_note(notes, "zero_optimization.offload_param is ignored below stage 3"));
  BOOST_CHECK_EQUAL(notes.size(), 6u);
  // The batch numbers are consistent with 4 ranks (accumulation 2) ...
  config.resolve_batch_sizes(4);
  BOOST_CHECK_EQUAL(config.gradient_accumulation_steps, 2);
  // ... and not with 3.
  check_translate_error(kDeepSpeedChatStep1,
                        "ds_config.json: batch sizes: train_batch_size 64 is not a positive multiple of "
                        "train_micro_batch_size_per_gpu 8 * world size 3 = 24",
                        3);
}

BOOST_AUTO_TEST_CASE(stage3_fp16_config_translates) {
  std::vector<std::string> notes;
  const TrainConfig config = translate(R"({
    "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 8,
    "fp16": {"enabled": true, "loss_scale_window": 100},
    "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu", "pin_memory": true},
                          "offload_optimizer": {"device": "cpu", "pin_memory": true, "buffer_count": 4},
                          "reduce_bucket_size": 5e8, "stage3_max_reuse_distance": 1e9,
                          "stage3_gather_16bit_weights_on_model_save": true, "sub_group_size": 1e8,
                          "round_robin_gradients": true, "contiguous_gradients": false},
    "scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 1000, "warmup_num_steps": 30,
                                                      "warmup_min_ratio": 0.01, "cos_min_ratio": 0.1}}
  })", notes);
  BOOST_CHECK(config.compute_dtype == zt::DType::F16);
  BOOST_CHECK_EQUAL(config.loss_scaler.loss_scale, 0.0);  // dynamic
  BOOST_CHECK_EQUAL(config.loss_scaler.loss_scale_window, 100);
  BOOST_CHECK_EQUAL(config.loss_scaler.initial_scale_power, 16);
  BOOST_CHECK_EQUAL(config.loss_scaler.hysteresis, 2);
  BOOST_CHECK_EQUAL(config.zero.stage, 3);
  BOOST_CHECK(config.zero.overlap_comm);  // DeepSpeed's default for stage 3
  BOOST_CHECK(!config.zero.contiguous_gradients);
  BOOST_CHECK(config.zero.round_robin_gradients);
  BOOST_CHECK(config.zero.stage3_gather_16bit_weights_on_model_save);
  BOOST_CHECK_EQUAL(config.zero.sub_group_size, 100000000);
  BOOST_CHECK_EQUAL(config.zero.offload_param_device, "cpu");
  BOOST_CHECK(config.zero.offload_param_pin_memory);
  BOOST_CHECK(config.zero.offload_optimizer_pin_memory);
  BOOST_CHECK(has_note(notes, "zero_optimization.offload_optimizer.buffer_count is ignored"));
  BOOST_CHECK_EQUAL(config.zero.offload_optimizer_ratio, 1.0);  // DeepSpeed's default: everything offloaded
  BOOST_CHECK_EQUAL(config.scheduler.type, "WarmupCosineLR");
  BOOST_CHECK_EQUAL(config.scheduler.warmup_min_ratio, 0.01);
  BOOST_CHECK_EQUAL(config.scheduler.cos_min_ratio, 0.1);
  BOOST_CHECK_EQUAL(config.scheduler.warmup_type, "log");  // DeepSpeed's default
}

BOOST_AUTO_TEST_CASE(fp16_without_scaler_settings_follows_zero_defaults) {
  std::vector<std::string> notes;
  const TrainConfig config = translate(R"({"fp16": {"enabled": true}, "zero_optimization": {"stage": 1}})", notes);
  BOOST_CHECK_EQUAL(config.loss_scaler.initial_scale_power, 32);  // DynamicLossScaler() defaults
  BOOST_CHECK_EQUAL(config.loss_scaler.hysteresis, 1);
  BOOST_CHECK(has_note(notes, "2^32"));
  // Without overlap_comm, stage 1 keeps DeepSpeed's default off.
  BOOST_CHECK(!config.zero.overlap_comm);
}

// "auto" (HF integration): not set by the JSON; tied values follow HF.
BOOST_AUTO_TEST_CASE(warmup_lr_without_max_lr_takes_the_optimizer_lr) {
  // Current DeepSpeed: WarmupLR's warmup_max_lr defaults to None -> the optimizer's lr;
  // WarmupDecayLR keeps its explicit default 0.001.
  const TrainConfig warmup = translate(R"({"optimizer": {"type": "AdamW", "params": {"lr": 2e-4}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 10}}})");
  BOOST_TEST(warmup.scheduler.warmup_max_lr_auto);
  BOOST_CHECK_EQUAL(warmup.to_json()["scheduler"]["warmup_max_lr"].get<double>(), 2e-4);
  const TrainConfig decay = translate(R"({"optimizer": {"type": "AdamW", "params": {"lr": 2e-4}},
    "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_num_steps": 10, "total_num_steps": 100}}})");
  BOOST_TEST(!decay.scheduler.warmup_max_lr_auto);
  BOOST_CHECK_EQUAL(decay.scheduler.warmup_max_lr, 0.001);
}

BOOST_AUTO_TEST_CASE(auto_values_resolve) {
  const TrainConfig config = translate(R"({
    "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
    "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
                                                     "warmup_num_steps": "auto", "total_num_steps": "auto"}},
    "fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"},
    "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
                          "stage3_param_persistence_threshold": "auto"}
  })");
  const TrainConfig defaults;
  BOOST_CHECK_EQUAL(config.train_batch_size, 0);
  BOOST_CHECK_EQUAL(config.micro_batch_size, 0);
  BOOST_CHECK_EQUAL(config.gradient_accumulation_steps, 0);
  BOOST_CHECK_EQUAL(config.gradient_clipping, defaults.gradient_clipping);
  BOOST_CHECK_EQUAL(config.optimizer.lr, defaults.optimizer.lr);
  BOOST_CHECK_EQUAL(config.optimizer.beta2, defaults.optimizer.beta2);
  BOOST_CHECK_EQUAL(config.optimizer.eps, defaults.optimizer.eps);
  BOOST_CHECK_EQUAL(config.optimizer.weight_decay, defaults.optimizer.weight_decay);
  BOOST_CHECK(config.compute_dtype == zt::DType::F32);
  BOOST_CHECK_EQUAL(config.scheduler.warmup_min_lr, 0.0);
  BOOST_CHECK(config.scheduler.warmup_max_lr_auto);       // the optimizer's lr
  BOOST_CHECK_EQUAL(config.scheduler.warmup_num_steps, 1);  // transformers: max(1, warmup_steps)
  BOOST_CHECK_EQUAL(config.scheduler.total_num_steps, 0);   // the run's length, filled in later
  BOOST_CHECK_EQUAL(config.zero.reduce_bucket_size, defaults.zero.reduce_bucket_size);
  BOOST_CHECK_EQUAL(config.zero.stage3_prefetch_bucket_size, defaults.zero.stage3_prefetch_bucket_size);
  BOOST_CHECK_EQUAL(config.zero.stage3_param_persistence_threshold, defaults.zero.stage3_param_persistence_threshold);
  // run.json shows the resolved peak.
  TrainConfig with_lr = config;
  with_lr.optimizer.lr = 3e-5;
  BOOST_CHECK_EQUAL(with_lr.to_json()["scheduler"]["warmup_max_lr"].get<double>(), 3e-5);
}

BOOST_AUTO_TEST_CASE(typos_get_the_nearest_key) {
  check_translate_error(R"({"train_micro_batch_size_per_gpus": 4})",
                        "ds_config.json: unknown DeepSpeed key 'train_micro_batch_size_per_gpus' (did you mean "
                        "'train_micro_batch_size_per_gpu'?)");
  check_translate_error(R"({"gradient_acumulation_steps": 4})", "(did you mean 'gradient_accumulation_steps'?)");
  check_translate_error(R"({"zero_optimization": {"stgae": 2}})",
                        "unknown DeepSpeed key 'zero_optimization.stgae' (did you mean 'zero_optimization.stage'?)");
  check_translate_error(R"({"zero_optimization": {"offload_optimizer": {"devce": "cpu"}}})",
                        "(did you mean 'zero_optimization.offload_optimizer.device'?)");
  check_translate_error(R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_max_lrr": 0.1}}})",
                        "(did you mean 'scheduler.params.warmup_max_lr'?)");
  check_translate_error(R"({"fp16": {"enabled": true, "loss_scale_windows": 100}})",
                        "(did you mean 'fp16.loss_scale_window'?)");
  check_translate_error(R"({"optimizer": {"type": "AdamW", "params": {"Lr": 0.1}}})",
                        "(did you mean 'optimizer.params.lr'?)");
  check_translate_error(R"({"optimizer": {"type": "AdamW", "params": {"lr": 0.1}, "param": {}}})",
                        "(did you mean 'optimizer.params'?)");
  // A parameter of another schedule is not a parameter of this one.
  check_translate_error(R"({"scheduler": {"type": "WarmupLR", "params": {"total_num_steps": 10}}})",
                        "unknown DeepSpeed key 'scheduler.params.total_num_steps'");
  // Nothing near: say so, and for a section list what it takes.
  check_translate_error(R"({"my_custom_setting": 1})", "unknown DeepSpeed key 'my_custom_setting': it is not in "
                                                       "DeepSpeed's config schema");
  check_translate_error(R"({"bf16": {"xyzzy": 1}})", "unknown DeepSpeed key 'bf16.xyzzy' (bf16 takes: enabled, "
                                                     "immediate_grad_update)");
  check_translate_error(R"({"optimizer": {"type": "AdamV"}})", "optimizer type 'AdamV' is neither a DeepSpeed nor a "
                                                                "torch.optim optimizer (did you mean 'adam'?)");
  check_translate_error(R"({"scheduler": {"type": "WarmupDecay"}})", "(did you mean 'WarmupDecayLR'?)");
}

BOOST_AUTO_TEST_CASE(edit_distance) {
  BOOST_CHECK_EQUAL(zt::key_edit_distance("stage", "stage"), 0u);
  BOOST_CHECK_EQUAL(zt::key_edit_distance("stgae", "stage"), 1u);  // adjacent swap
  BOOST_CHECK_EQUAL(zt::key_edit_distance("Stage", "stage"), 0u);  // case-insensitive
  BOOST_CHECK_EQUAL(zt::key_edit_distance("stag", "stage"), 1u);
  BOOST_CHECK_EQUAL(zt::key_edit_distance("", "abc"), 3u);
  BOOST_CHECK_EQUAL(zt::key_edit_distance("kitten", "sitting"), 3u);
}

BOOST_AUTO_TEST_CASE(unsupported_optimizers_and_schedules) {
  for (const char* type : {"OneBitLamb", "Lion", "MuAdam", "RMSprop"})
    check_translate_error(optimizer_of_type(type), std::string("ds_config.json: optimizer type ") + type +
                                              " is not supported (yet)");
  check_translate_error(R"({"scheduler": {"type": "OneCycle", "params": {}}})",
                        "scheduler type OneCycle is not supported (yet)");
  check_translate_error(R"({"scheduler": {"type": "LRRangeTest"}})", "scheduler type LRRangeTest is not supported (yet)");
  check_translate_error(R"({"scheduler": {"type": "StepLR"}})", "scheduler type StepLR is not supported (yet)");
  check_translate_error(R"({"optimizer": {"params": {"lr": 1}}})", "optimizer.type is missing");
  check_translate_error(R"({"optimizer": {"type": "Adam", "params": {"max_grad_norm": 1.0}}})",
                        "optimizer.params.max_grad_norm is not supported");
  check_translate_error(R"({"optimizer": {"type": "Adam", "params": {"amsgrad": true}}})",
                        "optimizer.params.amsgrad true is not supported (only false)");
  check_translate_error(R"({"optimizer": {"type": "AdamW", "params": {"bias_correction": false}}})",
                        "optimizer.params.bias_correction false is not supported (only true)");
}

BOOST_AUTO_TEST_CASE(zero_one_adam) {
  // DeepSpeed's docs example (docs/_tutorials/zero-one-adam.md), any case, and its defaults.
  const TrainConfig config = translate(
      R"({"optimizer": {"type": "zerooneadam", "params": {"lr": 1e-3, "weight_decay": 0.01, "bias_correction": false,
          "var_freeze_step": 1000, "var_update_scaler": 16, "local_step_scaler": 1000, "local_step_clipper": 16,
          "cuda_aware": false, "comm_backend_name": "mpi"}}})");
  BOOST_CHECK_EQUAL(config.optimizer.type, "zerooneadam");
  BOOST_CHECK_EQUAL(config.optimizer.var_freeze_step, 1000);
  BOOST_CHECK_EQUAL(config.optimizer.var_update_scaler, 16);
  BOOST_CHECK_EQUAL(config.optimizer.local_step_scaler, 1000);
  BOOST_CHECK_EQUAL(config.optimizer.local_step_clipper, 16);
  BOOST_CHECK_EQUAL(config.optimizer.comm_backend_name, "mpi");
  BOOST_CHECK_EQUAL(config.optimizer.weight_decay, 0.01);
  const TrainConfig defaults = translate(R"({"optimizer": {"type": "ZeroOneAdam", "params": {}}})");
  BOOST_CHECK_EQUAL(defaults.optimizer.var_freeze_step, 100000);
  BOOST_CHECK_EQUAL(defaults.optimizer.local_step_scaler, 32678);
  BOOST_CHECK_EQUAL(defaults.optimizer.comm_backend_name, "nccl");
  check_translate_error(R"({"optimizer": {"type": "ZeroOneAdam", "params": {"local_step_clipper": 0}}})",
                        "local_step_clipper");
  check_translate_error(R"({"optimizer": {"type": "ZeroOneAdam", "params": {"comm_backend_name": "hccl"}}})",
                        "comm_backend_name \"hccl\" is not supported");
  check_translate_error(R"({"optimizer": {"type": "ZeroOneAdam", "params": {"freeze_step": 10}}})", "freeze_step");
}

BOOST_AUTO_TEST_CASE(sgd_and_lamb) {
  // torch.optim.SGD by its class name, with torch's defaults for what is not given.
  const TrainConfig sgd = translate(
      R"({"optimizer": {"type": "SGD", "params": {"lr": 0.1, "momentum": 0.9, "nesterov": true, "weight_decay": 0.01}}})");
  BOOST_CHECK_EQUAL(sgd.optimizer.type, "sgd");
  BOOST_CHECK_EQUAL(sgd.optimizer.lr, 0.1);
  BOOST_CHECK_EQUAL(sgd.optimizer.momentum, 0.9);
  BOOST_CHECK_EQUAL(sgd.optimizer.dampening, 0.0);
  BOOST_CHECK(sgd.optimizer.nesterov);
  BOOST_CHECK_EQUAL(sgd.optimizer.weight_decay, 0.01);
  BOOST_CHECK_EQUAL(translate(R"({"optimizer": {"type": "SGD"}})").optimizer.weight_decay, 0.0);
  check_translate_error(R"({"optimizer": {"type": "SGD", "params": {"nesterov": true}}})",
                        "SGD with nesterov needs momentum > 0 and dampening 0");
  check_translate_error(R"({"optimizer": {"type": "SGD", "params": {"momentun": 0.9}}})",
                        "unknown DeepSpeed key 'optimizer.params.momentun' (did you mean 'optimizer.params.momentum'?)");
  check_translate_error(R"({"optimizer": {"type": "SGD", "params": {"momentum": -1}}})", "optimizer.params.momentum");
  // DeepSpeed's "Lamb" (any case) is FusedLamb with its defaults.
  const TrainConfig lamb = translate(R"({"optimizer": {"type": "LAMB", "params": {"lr": 0.002, "max_coeff": 3.0}}})");
  BOOST_CHECK_EQUAL(lamb.optimizer.type, "lamb");
  BOOST_CHECK_EQUAL(lamb.optimizer.max_coeff, 3.0);
  BOOST_CHECK_EQUAL(lamb.optimizer.min_coeff, 0.01);
  BOOST_CHECK(lamb.optimizer.bias_correction);
  BOOST_CHECK(!lamb.optimizer.eps_inside_sqrt);
  BOOST_CHECK(!translate(R"({"optimizer": {"type": "Lamb", "params": {"bias_correction": false}}})")
                   .optimizer.bias_correction);
  check_translate_error(R"({"optimizer": {"type": "Lamb", "params": {"min_coeff": 5.0, "max_coeff": 1.0}}})",
                        "min_coeff 5 and max_coeff 1 must satisfy 0 < min_coeff <= max_coeff");
  check_translate_error(R"({"optimizer": {"type": "Lamb", "params": {"amsgrad": true}}})", "FusedLamb has no AMSGrad");
  check_translate_error(R"({"optimizer": {"type": "Lamb", "params": {"max_grad_norm": 1.0}}})",
                        "optimizer.params.max_grad_norm is not supported");
}

BOOST_AUTO_TEST_CASE(adalomo) {
  // lomo_optim.AdaLomo's defaults for what is not given; "AdaLomo" in any case.
  const TrainConfig defaults = translate(R"({"optimizer": {"type": "AdaLomo"}})");
  BOOST_CHECK_EQUAL(defaults.optimizer.type, "adalomo");
  BOOST_CHECK_EQUAL(defaults.optimizer.lr, 1e-3);
  BOOST_CHECK_EQUAL(defaults.optimizer.weight_decay, 0.0);
  BOOST_CHECK_EQUAL(defaults.optimizer.eps_square, 1e-30);
  BOOST_CHECK_EQUAL(defaults.optimizer.eps_scale, 1e-3);
  BOOST_CHECK_EQUAL(defaults.optimizer.clip_threshold, 1.0);
  BOOST_CHECK_EQUAL(defaults.optimizer.decay_rate, -0.8);
  BOOST_CHECK_EQUAL(defaults.optimizer.clip_grad_value, 0.0);
  BOOST_CHECK_EQUAL(defaults.gradient_clipping, 0.0);
  std::vector<std::string> notes;
  const TrainConfig set = translate(R"({"optimizer": {"type": "adalomo", "params": {"lr": 5e-4, "weight_decay": 0.1,
      "eps": [1e-20, 2e-3], "clip_threshold": 0.5, "decay_rate": -0.6, "clip_grad_norm": 1.5, "clip_grad_value": 0.2,
      "loss_scale": 1024}}})",
                                    notes);
  BOOST_CHECK_EQUAL(set.optimizer.type, "adalomo");
  BOOST_CHECK_EQUAL(set.optimizer.lr, 5e-4);
  BOOST_CHECK_EQUAL(set.optimizer.weight_decay, 0.1);
  BOOST_CHECK_EQUAL(set.optimizer.eps_square, 1e-20);
  BOOST_CHECK_EQUAL(set.optimizer.eps_scale, 2e-3);
  BOOST_CHECK_EQUAL(set.optimizer.clip_threshold, 0.5);
  BOOST_CHECK_EQUAL(set.optimizer.decay_rate, -0.6);
  BOOST_CHECK_EQUAL(set.optimizer.clip_grad_value, 0.2);
  BOOST_CHECK_EQUAL(set.gradient_clipping, 1.5);  // clip_grad_norm is the run's gradient_clipping
  BOOST_CHECK(has_note(notes, "optimizer.params.loss_scale is not used"));
  BOOST_CHECK_EQUAL(translate(R"({"gradient_clipping": 2.0, "optimizer": {"type": "AdaLomo"}})").gradient_clipping, 2.0);
  check_translate_error(R"({"gradient_clipping": 2.0, "optimizer": {"type": "AdaLomo", "params": {"clip_grad_norm": 1.0}}})",
                        "optimizer.params.clip_grad_norm 1 and gradient_clipping 2 disagree (they are the same setting "
                        "for AdaLomo)");
  // Bad values name the key.
  check_translate_error(R"({"optimizer": {"type": "AdaLomo", "params": {"eps": 1e-30}}})",
                        "optimizer.params.eps must be [eps_square, eps_scale], two numbers >= 0");
  check_translate_error(R"({"optimizer": {"type": "AdaLomo", "params": {"eps": [1e-30]}}})", "optimizer.params.eps must be");
  check_translate_error(R"({"optimizer": {"type": "AdaLomo", "params": {"eps": [1e-30, -1]}}})",
                        "optimizer.params.eps must be");
  check_translate_error(R"({"optimizer": {"type": "AdaLomo", "params": {"clip_threshold": 0}}})",
                        "optimizer.params.clip_threshold must be a number > 0, got 0");
  check_translate_error(R"({"optimizer": {"type": "AdaLomo", "params": {"clip_threshold": -1}}})",
                        "optimizer.params.clip_threshold must be a number >= 0");
  check_translate_error(R"({"optimizer": {"type": "AdaLomo", "params": {"decay_rate": 0.8}}})",
                        "optimizer.params.decay_rate must be a number <= 0");
  check_translate_error(R"({"optimizer": {"type": "AdaLomo", "params": {"decay_rate": "fast"}}})",
                        "optimizer.params.decay_rate must be a number <= 0");
  check_translate_error(R"({"optimizer": {"type": "AdaLomo", "params": {"lr": -1}}})", "optimizer.params.lr must be");
  check_translate_error(R"({"optimizer": {"type": "AdaLomo", "params": {"weight_decay": -0.1}}})",
                        "optimizer.params.weight_decay must be");
  check_translate_error(R"({"optimizer": {"type": "AdaLomo", "params": {"clip_grad_value": -1}}})",
                        "optimizer.params.clip_grad_value must be");
  check_translate_error(R"({"optimizer": {"type": "AdaLomo", "params": {"clip_treshold": 1}}})",
                        "unknown DeepSpeed key 'optimizer.params.clip_treshold' (did you mean "
                        "'optimizer.params.clip_threshold'?)");
  check_translate_error(R"({"optimizer": {"type": "AdaLomo", "params": {"max_grad_norm": 1.0}}})",
                        "optimizer.params.max_grad_norm is not supported");
  // The optimizer itself refuses what a config set elsewhere could give it.
  zt::OptimizerConfig config;
  config.type = "adalomo";
  config.decay_rate = 0.5;
  check_error([&] { zt::make_optimizer(config); }, "optimizer AdaLomo: decay_rate 0.5 must be <= 0");
  config.decay_rate = -0.8;
  config.clip_threshold = 0.0;
  check_error([&] { zt::make_optimizer(config); }, "optimizer AdaLomo: clip_threshold 0 must be > 0");
  config.clip_threshold = 1.0;
  // Per-tensor state: rows and columns of a matrix, one vector for a vector; no other shapes.
  const std::unique_ptr<zt::Optimizer> made = zt::make_optimizer(config);
  BOOST_CHECK(made->fuses_into_backward());
  BOOST_CHECK(made->state_names().empty());
  const std::vector<int64_t> matrix = {6, 4}, vector = {5}, cube = {2, 3, 4};
  const std::vector<zt::TensorStateSpec> matrix_state = made->tensor_state(matrix);
  BOOST_REQUIRE_EQUAL(matrix_state.size(), 2u);
  BOOST_CHECK_EQUAL(matrix_state[0].name, "exp_avg_sq_row");
  BOOST_CHECK_EQUAL(matrix_state[0].numel, 6);
  BOOST_CHECK_EQUAL(matrix_state[1].name, "exp_avg_sq_col");
  BOOST_CHECK_EQUAL(matrix_state[1].numel, 4);
  const std::vector<zt::TensorStateSpec> vector_state = made->tensor_state(vector);
  BOOST_REQUIRE_EQUAL(vector_state.size(), 1u);
  BOOST_CHECK_EQUAL(vector_state[0].name, "exp_avg_sq");
  BOOST_CHECK_EQUAL(vector_state[0].numel, 5);
  check_error([&] { made->tensor_state(cube); }, "AdaLomo factors matrices and vectors; a parameter tensor has 3");
}

BOOST_AUTO_TEST_CASE(adam_flavours) {
  // DeepSpeed "Adam" (any case) is AdamW unless adam_w_mode is false.
  BOOST_CHECK(translate(R"({"optimizer": {"type": "adam", "params": {"weight_decay": 0.1}}})").optimizer.adam_w_mode);
  BOOST_CHECK_EQUAL(translate(R"({"optimizer": {"type": "ADAMW"}})").optimizer.type, "adamw");
  // L2 Adam: the same as AdamW only without weight decay.
  std::vector<std::string> notes;
  const TrainConfig l2 = translate(R"({"optimizer": {"type": "Adam", "params": {"adam_w_mode": false}}})", notes);
  BOOST_CHECK(!l2.optimizer.adam_w_mode);
  BOOST_CHECK(has_note(notes, "the same update as AdamW"));
  check_translate_error(R"({"optimizer": {"type": "Adam", "params": {"adam_w_mode": false, "weight_decay": 0.01}}})",
                        "optimizer Adam with adam_w_mode false (L2-regularised Adam) and weight_decay 0.01 is not "
                        "supported");
  // AdamW ignores adam_w_mode false, as DeepSpeed does.
  BOOST_CHECK(translate(R"({"optimizer": {"type": "AdamW", "params": {"adam_w_mode": false}}})").optimizer.adam_w_mode);
  // torch_adam builds torch.optim.AdamW, whose default weight decay is 0.01.
  BOOST_CHECK_EQUAL(translate(R"({"optimizer": {"type": "AdamW", "params": {"torch_adam": true}}})")
                        .optimizer.weight_decay, 0.01);
  BOOST_CHECK_EQUAL(translate(R"({"optimizer": {"type": "AdamW", "params": {"torch_adam": true, "weight_decay": 0}}})")
                        .optimizer.weight_decay, 0.0);
}

// DeepSpeed's pipeline section (issue 32): stages and partition are read, the rest noted; the
// batch numbers are checked against the data-parallel size (world / stages).
BOOST_AUTO_TEST_CASE(pipeline_section) {
  std::vector<std::string> notes;
  const TrainConfig two = translate(R"({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2,
      "pipeline": {"stages": 2, "partition": "best", "seed_layers": false, "activation_checkpoint_interval": 1}})",
                                    notes, 4);
  BOOST_CHECK_EQUAL(two.pipeline.stages, 2);
  BOOST_CHECK_EQUAL(two.pipeline.partition_method, "parameters");
  BOOST_CHECK(has_note(notes, "pipeline.stages 2 -> --pipeline-stages 2"));
  BOOST_CHECK(has_note(notes, "pipeline.activation_checkpoint_interval is ignored"));
  BOOST_CHECK_EQUAL(two.data_parallel_size(4), 2);
  TrainConfig resolved = two;
  resolved.resolve_batch_sizes(4);  // 8 = micro 2 x accumulation 2 x 2 replicas
  BOOST_CHECK_EQUAL(resolved.gradient_accumulation_steps, 2);
  BOOST_CHECK_EQUAL(translate(R"({"pipeline": {"stages": "auto", "partition": "type:DecoderLayer"}})").pipeline.partition_method,
                    "type:DecoderLayer");
  BOOST_CHECK_EQUAL(translate(R"({"pipeline": {"stages": "auto", "partition": "Uniform"}})").pipeline.stages, 1);
  check_translate_error(R"({"pipeline": {"stages": 0}})", "pipeline.stages must be an integer in [1, ");
  check_translate_error(R"({"pipeline": {"num_stages": 2}})", "num_stages");
  check_translate_error(R"({"train_batch_size": 8, "pipeline": {"stages": 3}})", "does not divide the 4 ranks", 4);
}

BOOST_AUTO_TEST_CASE(sections_that_change_the_math_are_refused) {
  for (const char* key : {"sparse_attention", "compression_training", "quantize_training"})
    check_translate_error(std::string("{\"") + key + "\": {}}",
                          std::string("ds_config.json: ") + key + " is not supported by zerotune (it changes what is computed)");
  check_translate_error(R"({"amp": {"enabled": true, "opt_level": "O1"}})",
                        "ds_config.json: amp is enabled, but it is not supported by zerotune");
  check_translate_error(R"({"curriculum_learning": {"enabled": true}})", "curriculum_learning is enabled");
  check_translate_error(R"({"elasticity": {"enabled": true}})", "elasticity is enabled");
  std::vector<std::string> notes;
  translate(R"({"amp": {"enabled": false}, "data_efficiency": {"enabled": false}})", notes);
  BOOST_CHECK(has_note(notes, "amp is disabled; ignored"));
  BOOST_CHECK(has_note(notes, "data_efficiency is disabled; ignored"));
  // Values that change the math, accepted only at DeepSpeed's default.
  check_translate_error(R"({"prescale_gradients": true})", "prescale_gradients true is not supported (only false)");
  check_translate_error(R"({"gradient_predivide_factor": 2.0})", "gradient_predivide_factor 2.0 is not supported");
  BOOST_CHECK_NO_THROW(translate(R"({"gradient_predivide_factor": 1, "prescale_gradients": false})"));
  check_translate_error(R"({"sparse_gradients": true})", "sparse_gradients true is not supported");
  check_translate_error(R"({"fp16": {"enabled": true, "auto_cast": true}})", "fp16.auto_cast true is not supported");
  check_translate_error(R"({"zero_optimization": {"stage": 3, "zero_quantized_nontrainable_weights": true}})",
                        "zero_optimization.zero_quantized_nontrainable_weights true is not supported");
  check_translate_error(R"({"zero_optimization": {"stage": 3, "zero_hpz_partition_size": 0}})",
                        "zero_optimization.zero_hpz_partition_size");
  check_translate_error(R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme"}}})",
                        "zero_optimization.offload_optimizer.device \"nvme\" is not supported (yet)");
  check_translate_error(R"({"zero_optimization": {"stage": 0, "offload_optimizer": {"device": "cpu"}}})",
                        "offload_optimizer.device \"cpu\" needs ZeRO stage 1, 2 or 3 (stage is 0)");
  check_translate_error(R"({"zero_optimization": {"stage": 4}})", "zero_optimization.stage must be an integer in [0, 3]");
}

// offload_optimizer.ratio: DeepSpeed's partial offload (ZeRO-Offload++), stage 3's.
BOOST_AUTO_TEST_CASE(offload_optimizer_ratio_is_partial_offload_at_stage_3) {
  std::vector<std::string> notes;
  TrainConfig config = translate(R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu",
                                                                                            "ratio": 0.3}}})", notes);
  BOOST_CHECK_EQUAL(config.zero.offload_optimizer_ratio, 0.3);
  BOOST_CHECK(!has_note(notes, "ratio"));
  config = translate(R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "none", "ratio": 0.3}}})",
                     notes);
  BOOST_CHECK(has_note(notes, "zero_optimization.offload_optimizer.ratio 0.3 has no effect"));
  check_translate_error(R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "ratio": 0.3}}})",
                        "zero_optimization.offload_optimizer.ratio 0.3 (partial offload, ZeRO-Offload++) needs ZeRO "
                        "stage 3, as in DeepSpeed (stage is 2)");
  check_translate_error(R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 1.5}}})",
                        "zero_optimization.offload_optimizer.ratio");
  check_translate_error(R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": -1}}})",
                        "zero_optimization.offload_optimizer.ratio");
}

// ZeRO++'s keys (docs/zero-plus-plus.md): DeepSpeed's spelling, off by default.
BOOST_AUTO_TEST_CASE(zero_plus_plus_keys_translate) {
  const zt::ZeroConfig off = translate(R"({"zero_optimization": {"stage": 3}})").zero;
  BOOST_TEST((!off.zero_quantized_weights && off.zero_hpz_partition_size == 1 && !off.zero_quantized_gradients));
  BOOST_TEST(!off.zeropp());
  const zt::ZeroConfig on = translate(R"({"zero_optimization": {"stage": 3, "zero_quantized_weights": true,
      "zero_hpz_partition_size": 8, "zero_quantized_gradients": true}})").zero;
  BOOST_TEST((on.zero_quantized_weights && on.zero_hpz_partition_size == 8 && on.zero_quantized_gradients));
  BOOST_TEST(on.zeropp());
}

// The 2-node ZeRO++ example of docs/cluster.md (job_scripts/slurm/train.sbatch, 8 ranks per node):
// all three, hpZ over the 8 ranks of a node, on stage 3, on the 16 ranks of two nodes.
BOOST_AUTO_TEST_CASE(two_node_zero_plus_plus_example_translates) {
  std::ifstream stream(std::string(ZT_SOURCE_DIR) + "/job_scripts/slurm/ds_config_zeropp_2node.json");
  BOOST_REQUIRE(stream.good());
  const std::string text((std::istreambuf_iterator<char>(stream)), std::istreambuf_iterator<char>());
  const zt::ZeroConfig zero = translate(text, 16).zero;
  BOOST_TEST((zero.stage == 3 && zero.zero_quantized_weights && zero.zero_hpz_partition_size == 8 &&
              zero.zero_quantized_gradients));
}

// The 2-node pipeline example of docs/cluster.md (job_scripts/slurm/train.sbatch, 8 ranks per
// node): DeepSpeed's pipeline section read (2 stages, partition by parameters: one stage per node),
// ZeRO-1 inside each stage's 8 replicas, 8 micro-batches per step.
BOOST_AUTO_TEST_CASE(two_node_pipeline_example_translates) {
  std::ifstream stream(std::string(ZT_SOURCE_DIR) + "/job_scripts/slurm/ds_config_pipeline_2node.json");
  BOOST_REQUIRE(stream.good());
  const std::string text((std::istreambuf_iterator<char>(stream)), std::istreambuf_iterator<char>());
  std::vector<std::string> notes;
  const TrainConfig config = translate(text, notes, 16);
  BOOST_CHECK_EQUAL(config.pipeline.stages, 2);
  BOOST_CHECK_EQUAL(config.pipeline.partition_method, "parameters");
  BOOST_CHECK(has_note(notes, "pipeline.stages 2 -> --pipeline-stages 2"));
  BOOST_CHECK_EQUAL(config.zero.stage, 1);
  BOOST_CHECK_EQUAL(config.gradient_accumulation_steps, 8);
  BOOST_CHECK(config.compute_dtype == zt::DType::BF16);
}

BOOST_AUTO_TEST_CASE(fp16_and_bf16_together_are_refused) {
  check_translate_error(R"({"fp16": {"enabled": true}, "bf16": {"enabled": true}})",
                        "ds_config.json: fp16.enabled and bf16.enabled are both true");
  check_translate_error(R"({"fp16": {"enabled": true}, "bfloat16": {"enabled": true}})",
                        "fp16.enabled and bfloat16.enabled are both true");
  check_translate_error(R"({"bf16": {"enabled": true}, "bfloat16": {"enabled": true}})",
                        "give only one of bf16 and bfloat16");
  // Disabled sections leave fp32.
  BOOST_CHECK(translate(R"({"fp16": {"enabled": false}, "bf16": {"enabled": false}})").compute_dtype ==
              zt::DType::F32);
}

BOOST_AUTO_TEST_CASE(grad_accum_dtype_in_deepspeed_spellings) {
  // DeepSpeed's DtypeEnum spellings; fp32 (absent, null) is the default.
  for (const char* name : {"fp32", "float32", "float", "torch.float32"})
    BOOST_CHECK(*zt::parse_deepspeed_dtype(name) == zt::DType::F32);
  for (const char* name : {"bf16", "bfloat16", "torch.bfloat16"}) BOOST_CHECK(*zt::parse_deepspeed_dtype(name) == zt::DType::BF16);
  for (const char* name : {"fp16", "float16", "half", "torch.float16"})
    BOOST_CHECK(*zt::parse_deepspeed_dtype(name) == zt::DType::F16);
  for (const char* name : {"int8", "bfloat", "FP16", ""}) BOOST_CHECK(!zt::parse_deepspeed_dtype(name));
  BOOST_CHECK(translate(R"({"data_types": {"grad_accum_dtype": null}})").grad_accum_dtype == zt::DType::F32);
  std::vector<std::string> notes;
  const TrainConfig bf16 = translate(R"({"bf16": {"enabled": true}, "data_types": {"grad_accum_dtype": "bfloat16"},
                                        "communication_data_type": "bf16"})", notes);
  BOOST_CHECK(bf16.grad_accum_dtype == zt::DType::BF16);
  BOOST_CHECK_EQUAL(count_notes(notes, "data_types.grad_accum_dtype \"bfloat16\" -> --grad-accum-dtype bf16"), 1u);
  BOOST_CHECK(translate(R"({"fp16": {"enabled": true}, "data_types": {"grad_accum_dtype": "half"}})").grad_accum_dtype ==
              zt::DType::F16);
  check_translate_error(R"({"data_types": {"grad_accum_dtype": "int8"}})",
                        "data_types.grad_accum_dtype must be one of \"fp32\"");
  check_translate_error(R"({"data_types": {"grad_accum_dtype": 16}})", "got 16");
  check_translate_error(R"({"data_types": {"grad_acum_dtype": "bf16"}})", "grad_accum_dtype");  // a typo
  // The reduction's dtype is the gradients': communication_data_type may only say the same.
  check_translate_error(R"({"communication_data_type": "fp16"})",
                        "communication_data_type \"fp16\" is not supported with data_types.grad_accum_dtype fp32");
  check_translate_error(R"({"bf16": {"enabled": true}, "data_types": {"grad_accum_dtype": "bf16"},
                           "communication_data_type": "fp32"})", "zerotune reduces gradients in their own dtype");
}

BOOST_AUTO_TEST_CASE(wrong_json_types_name_the_key_and_value) {
  check_translate_error(R"({"train_batch_size": "32"})",
                        "ds_config.json: train_batch_size must be an integer in [1, 9223372036854775807] or \"auto\", "
                        "got \"32\"");
  check_translate_error(R"({"train_batch_size": 2.5})", "train_batch_size must be an integer");
  check_translate_error(R"({"train_micro_batch_size_per_gpu": 0})", "train_micro_batch_size_per_gpu must be an integer in [1,");
  check_translate_error(R"({"gradient_clipping": true})", "gradient_clipping must be a number >= 0 or \"auto\", got true");
  check_translate_error(R"({"zero_optimization": {"stage": "2"}})", "zero_optimization.stage must be an integer in [0, 3], got \"2\"");
  check_translate_error(R"({"zero_optimization": {"overlap_comm": "yes"}})",
                        "zero_optimization.overlap_comm must be true or false, got \"yes\"");
  check_translate_error(R"({"optimizer": {"type": "AdamW", "params": {"betas": [0.9]}}})",
                        "optimizer.params.betas must be [beta1, beta2] with 0 <= beta < 1, or \"auto\", got [0.9]");
  check_translate_error(R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": [0.1, 0.2]}}})",
                        "per-parameter-group lists are not supported");
  check_translate_error(R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_type": "cosine"}}})",
                        "scheduler.params.warmup_type must be one of \"log, linear\", got \"cosine\"");
  check_translate_error(R"({"zero_optimization": []})", "zero_optimization must be a JSON object, got []");
  check_translate_error(R"([1, 2])", "ds_config.json: a DeepSpeed config must be a JSON object");
  check_translate_error(R"({"optimizer": {"type": 7}})", "optimizer.type must be an optimizer name");
}

BOOST_AUTO_TEST_CASE(scheduler_checks) {
  check_translate_error(R"({"scheduler": {"type": "WarmupDecayLR", "params": {"warmup_num_steps": 10}}})",
                        "scheduler.params.total_num_steps is required by WarmupDecayLR");
  check_translate_error(R"({"scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 50,
                                                                               "warmup_num_steps": 50}}})",
                        "ds_config.json: scheduler WarmupCosineLR: total_num_steps 50 must be greater than "
                        "warmup_num_steps 50");
  check_translate_error(R"({"scheduler": {"type": "WarmupLR", "params": {"last_batch_iteration": 10}}})",
                        "scheduler.params.last_batch_iteration 10 is not supported (only -1)");
  // An "auto" total is checked later, against the run's length.
  BOOST_CHECK_NO_THROW(translate(R"({"scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": "auto"}}})"));
}

BOOST_AUTO_TEST_CASE(tooling_keys_get_one_note_each) {
  std::vector<std::string> notes;
  translate(R"({
    "wandb": {"enabled": false}, "tensorboard": {"enabled": false}, "csv_monitor": {"enabled": true},
    "comms_logger": {"enabled": true}, "flops_profiler": {"enabled": true}, "autotuning": {"enabled": false},
    "dump_state": true, "zero_force_ds_cpu_optimizer": false, "zero_allow_untested_optimizer": true,
    "memory_breakdown": false, "checkpoint": {"tag_validation": "Warn"},
    "activation_checkpointing": {"partition_activations": true, "cpu_checkpointing": false}
  })", notes);
  for (const char* key : {"comms_logger", "autotuning", "dump_state", "zero_force_ds_cpu_optimizer", "zero_allow_untested_optimizer",
                          "memory_breakdown", "checkpoint"})
    BOOST_CHECK_MESSAGE(count_notes(notes, std::string("ds_config.json: ") + key + " is ignored (tooling)") == 1, key);
  BOOST_CHECK(has_note(notes, "activation_checkpointing is ignored"));
  // The monitors: disabled ones noted, an enabled file monitor says where it writes.
  BOOST_CHECK(has_note(notes, "ds_config.json: wandb is disabled; ignored"));
  BOOST_CHECK(has_note(notes, "ds_config.json: tensorboard is disabled; ignored"));
  BOOST_CHECK(has_note(notes, "ds_config.json: csv_monitor: rank 0 writes the metrics to DeepSpeedJobName/"));
  // The flops profiler is not ignored: its step becomes --profile-step (issue 17).
  BOOST_CHECK(has_note(notes, "flops_profiler.profile_step 1 -> --profile-step 1"));
  BOOST_CHECK_EQUAL(notes.size(), 12u);
  check_translate_error(R"({"activation_checkpointing": {"partition_activation": true}})",
                        "(did you mean 'activation_checkpointing.partition_activations'?)");
}

// DeepSpeed's monitor sections (monitor/config.py): tensorboard and csv_monitor are read with
// DeepSpeed's defaults; wandb and comet are refused when enabled, pointing to the file monitors.
BOOST_AUTO_TEST_CASE(monitor_sections) {
  const TrainConfig config = translate(R"({
    "tensorboard": {"enabled": true, "output_path": "/scratch/tb/", "job_name": "sft"},
    "csv_monitor": {"enabled": true}, "wandb": {"enabled": false, "team": "t", "group": "g", "project": "p"},
    "comet": {"enabled": false, "project": "p"}
  })");
  BOOST_CHECK(config.tensorboard.enabled);
  BOOST_CHECK_EQUAL(config.tensorboard.output_path, "/scratch/tb/");
  BOOST_CHECK_EQUAL(config.tensorboard.directory(), "/scratch/tb/sft");
  BOOST_CHECK(config.csv_monitor.enabled);
  BOOST_CHECK_EQUAL(config.csv_monitor.output_path, "");  // DeepSpeed's default: the working directory
  BOOST_CHECK_EQUAL(config.csv_monitor.job_name, "DeepSpeedJobName");
  BOOST_CHECK_EQUAL(config.csv_monitor.directory(), "DeepSpeedJobName");
  BOOST_CHECK(!translate("{}").tensorboard.enabled);
  BOOST_CHECK_EQUAL(config.to_json()["tensorboard"]["job_name"], "sft");

  check_translate_error(R"({"wandb": {"enabled": true, "project": "sft"}})",
                        "ds_config.json: wandb.enabled is true, but zerotune does not send metrics to Weights & Biases");
  check_translate_error(R"({"wandb": {"enabled": true}})", "use \"tensorboard\": {\"enabled\": true, ...}");
  check_translate_error(R"({"comet": {"enabled": true}})", "comet.enabled is true, but zerotune does not send metrics to Comet");
  check_translate_error(R"({"tensorboard": {"enabled": true, "outputpath": "x"}})",
                        "unknown DeepSpeed key 'tensorboard.outputpath' (did you mean 'tensorboard.output_path'?)");
  check_translate_error(R"({"csv_monitor": {"enabled": true, "job_name": 7}})", "csv_monitor.job_name must be a string, got 7");
  check_translate_error(R"({"csv_monitor": {"enabled": "yes"}})", "csv_monitor.enabled must be true or false");
  check_translate_error(R"({"tensorboard": {"enabled": true, "job_name": ""}})", "tensorboard.job_name must not be empty");
  check_translate_error(R"({"wandb": {"enabled": false, "entity": "x"}})", "unknown DeepSpeed key 'wandb.entity'");
}

BOOST_AUTO_TEST_CASE(deprecated_zero_forms) {
  std::vector<std::string> notes;
  BOOST_CHECK_EQUAL(translate(R"({"zero_optimization": true})", notes).zero.stage, 1);
  BOOST_CHECK(has_note(notes, "deprecated form"));
  const TrainConfig old = translate(R"({"zero_optimization": {"stage": 3, "cpu_offload": true,
                                                              "cpu_offload_param": true, "cpu_offload_use_pin_memory": true,
                                                              "prefetch_bucket_size": 1000}})");
  BOOST_CHECK_EQUAL(old.zero.offload_optimizer_device, "cpu");
  BOOST_CHECK_EQUAL(old.zero.offload_param_device, "cpu");
  BOOST_CHECK(old.zero.offload_optimizer_pin_memory);
  BOOST_CHECK_EQUAL(old.zero.stage3_prefetch_bucket_size, 1000);
  check_translate_error(R"({"zero_optimization": {"prefetch_bucket_size": 1, "stage3_prefetch_bucket_size": 2}})",
                        "give only one of zero_optimization.stage3_prefetch_bucket_size and "
                        "zero_optimization.prefetch_bucket_size");
}

BOOST_AUTO_TEST_CASE(files_invalid_json_and_duplicates) {
  ScratchDir scratch;
  const std::string good = scratch.write("good.json", "{\n  // DeepSpeed (hjson) allows comments\n"
                                                      "  \"train_batch_size\": 16, /* and these */ \"bf16\": {\"enabled\": true}\n}\n");
  TrainConfig config;
  std::vector<std::string> notes;
  zt::load_deepspeed_config(good, 2, config, notes);
  BOOST_CHECK_EQUAL(config.train_batch_size, 16);
  BOOST_CHECK(config.compute_dtype == zt::DType::BF16);
  BOOST_CHECK_EQUAL(config.deepspeed_config_path, good);

  const std::string broken = scratch.write("broken.json", "{\n  \"train_batch_size\": 16,\n}\n");
  check_error([&] { zt::load_deepspeed_config(broken, 1, config, notes); }, broken + ": invalid JSON: parse error at line 3, column 1");
  const std::string duplicate = scratch.write("dup.json", R"({"zero_optimization": {"stage": 2, "stage": 3}})");
  check_error([&] { zt::load_deepspeed_config(duplicate, 1, config, notes); }, duplicate + ": duplicate key 'stage'");
  check_error([&] { zt::load_deepspeed_config((scratch.path / "missing.json").string(), 1, config, notes); },
              "missing.json: cannot open the DeepSpeed config");
  const std::string typo = scratch.write("typo.json", R"({"train_micro_batch_size_per_gpus": 4})");
  check_error([&] { zt::load_deepspeed_config(typo, 1, config, notes); },
              typo + ": unknown DeepSpeed key 'train_micro_batch_size_per_gpus'");
}

// ---- TrainConfig::resolve_batch_sizes (DeepSpeed's _set_batch_related_parameters) -------------

namespace {

TrainConfig batches(int64_t total, int64_t micro, int64_t accum) {
  TrainConfig config;
  config.train_batch_size = total;
  config.micro_batch_size = micro;
  config.gradient_accumulation_steps = accum;
  return config;
}

void check_batches(TrainConfig config, int world, int64_t total, int64_t micro, int64_t accum) {
  config.resolve_batch_sizes(world);
  BOOST_CHECK_EQUAL(config.train_batch_size, total);
  BOOST_CHECK_EQUAL(config.micro_batch_size, micro);
  BOOST_CHECK_EQUAL(config.gradient_accumulation_steps, accum);
}

}  // namespace

BOOST_AUTO_TEST_CASE(batch_sizes_resolve_like_deepspeed) {
  check_batches(batches(32, 4, 2), 4, 32, 4, 2);  // all three, consistent
  check_batches(batches(32, 4, 0), 2, 32, 4, 4);  // total + micro -> accumulation
  check_batches(batches(32, 0, 2), 2, 32, 8, 2);  // total + accumulation -> micro
  check_batches(batches(0, 4, 3), 2, 24, 4, 3);   // micro + accumulation -> total
  check_batches(batches(32, 0, 0), 4, 32, 8, 1);  // total only: accumulation 1
  check_batches(batches(0, 4, 0), 3, 12, 4, 1);   // micro only: accumulation 1
  check_batches(batches(0, 0, 0), 2, 2, 1, 1);    // none: zerotune's micro-batch 1
  check_batches(batches(0, 0, 5), 2, 10, 1, 5);   // accumulation only: micro-batch 1
}

BOOST_AUTO_TEST_CASE(inconsistent_batch_sizes_show_the_arithmetic) {
  check_error([] { batches(32, 4, 2).resolve_batch_sizes(2); },
              "train_batch_size 32 != train_micro_batch_size_per_gpu 4 * gradient_accumulation_steps 2 * world size 2 "
              "= 16");
  check_error([] { batches(30, 4, 0).resolve_batch_sizes(2); },
              "train_batch_size 30 is not a positive multiple of train_micro_batch_size_per_gpu 4 * world size 2 = 8");
  check_error([] { batches(4, 4, 0).resolve_batch_sizes(2); },
              "train_batch_size 4 is not a positive multiple of train_micro_batch_size_per_gpu 4 * world size 2 = 8");
  check_error([] { batches(30, 0, 4).resolve_batch_sizes(2); },
              "train_batch_size 30 is not a positive multiple of gradient_accumulation_steps 4 * world size 2 = 8");
  check_error([] { batches(10, 0, 0).resolve_batch_sizes(4); },
              "train_batch_size 10 is not a positive multiple of world size 4 (with gradient_accumulation_steps 1) = 4");
  check_error([] { batches(-1, 0, 0).resolve_batch_sizes(1); }, "train_batch_size -1 must be positive");
  check_error([] { batches(0, 0, 0).resolve_batch_sizes(0); }, "world size 0 must be >= 1");
  // The DeepSpeed file is named when the numbers came from one.
  TrainConfig from_file = batches(32, 4, 2);
  from_file.deepspeed_config_path = "run/ds.json";
  check_error([&] { from_file.resolve_batch_sizes(2); }, "batch sizes (run/ds.json and flags): train_batch_size 32 !=");
  check_translate_error(R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2})",
                        "ds_config.json: batch sizes: train_batch_size 32 != train_micro_batch_size_per_gpu 4 * "
                        "gradient_accumulation_steps 2 * world size 2 = 16",
                        2);
}

BOOST_AUTO_TEST_CASE(to_json_writes_every_field) {
  TrainConfig config = translate(kDeepSpeedChatStep1, 4);
  config.resolve_batch_sizes(4);
  config.lora.r = 8;
  config.lora.targets = {"q_proj", "v_proj"};
  config.model_dir = "models/tiny";
  const json j = config.to_json();
  for (const char* key : {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                          "gradient_clipping", "steps_per_print", "compute_dtype", "grad_accum_dtype", "loss_scaler", "optimizer",
                          "scheduler", "zero_optimization", "lora", "activation_checkpointing", "offload_activations", "model_dir", "data_dir",
                          "out_dir", "deepspeed_config_path", "seed", "shuffle", "epochs", "max_steps",
                          "dump_step0_path", "eval_data_dir", "eval_every", "eval_at_start", "data_split", "eval_split",
                          "save_at_end", "save_hf_at_end", "quantize", "tensorboard", "csv_monitor"})
    BOOST_CHECK_MESSAGE(j.contains(key), key);
  BOOST_CHECK_MESSAGE(j.contains("packing"), "packing");
  BOOST_CHECK_MESSAGE(j.contains("head_chunk_rows"), "head_chunk_rows");
  BOOST_CHECK_MESSAGE(j.contains("quantize"), "quantize");
  BOOST_CHECK_EQUAL(j["objective"].get<std::string>(), "sft");  // --objective's default
  BOOST_CHECK_EQUAL(j["dpo_beta"].get<double>(), 0.1);           // --dpo-beta's default (TRL's)
  BOOST_CHECK_EQUAL(j["dpo_label_smoothing"].get<double>(), 0.0);
  BOOST_CHECK_EQUAL(j.size(), 47u);
  BOOST_CHECK_EQUAL(j["pipeline"]["stages"].get<int64_t>(), 1);  // no pipeline unless asked
  BOOST_CHECK_EQUAL(j["gradient_accumulation_steps"].get<int64_t>(), 2);
  BOOST_CHECK_EQUAL(j["compute_dtype"].get<std::string>(), "bf16");
  BOOST_CHECK_EQUAL(j["optimizer"]["betas"][1].get<double>(), 0.95);
  BOOST_CHECK_EQUAL(j["scheduler"]["type"].get<std::string>(), "WarmupDecayLR");
  BOOST_CHECK_EQUAL(j["scheduler"].size(), 10u);
  BOOST_CHECK_EQUAL(j["zero_optimization"]["offload_optimizer"]["device"].get<std::string>(), "cpu");
  BOOST_CHECK_EQUAL(j["zero_optimization"]["stage3_max_live_parameters"].get<int64_t>(), 30000000);
  BOOST_CHECK_EQUAL(j["zero_optimization"]["delayed_param_update"].get<int64_t>(), -1);  // off unless asked
  BOOST_CHECK_EQUAL(j["zero_optimization"]["update_per_bucket"].get<bool>(), false);
  BOOST_CHECK_EQUAL(j["zero_optimization"].size(), 23u);  // 17 + ZeRO++'s 3 keys, ranks_per_node, delayed_param_update,
                                                          // update_per_bucket
  BOOST_CHECK_EQUAL(j["loss_scaler"].size(), 5u);
  BOOST_CHECK_EQUAL(j["lora"]["targets"][1].get<std::string>(), "v_proj");
  BOOST_CHECK_EQUAL(j["model_dir"].get<std::string>(), "models/tiny");
}

BOOST_AUTO_TEST_SUITE_END()
