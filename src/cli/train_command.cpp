// `zerotune train`: the command-line and INI options, merged over the DeepSpeed JSON into a
// TrainConfig (flags win over the JSON), then the training loop.
#include <mpi.h>

#include <boost/program_options.hpp>

#include <cmath>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/commands.h"
#include "cli/train_options.h"
#include "cli/parse_options.h"
#include "backend/device_memory_limit.h"
#include "core/error.h"
#include "model/lora_targets.h"
#include "train/auto_values.h"
#include "train/ds_config.h"
#include "train/trainer.h"

namespace zt {

namespace po = boost::program_options;

namespace {

// ZeRO-Offload (docs/zero-offload.md): where the optimizer runs, and when its CPU update runs.
po::options_description offload_options() {
  po::options_description options("ZeRO-Offload options");
  options.add_options()
      ("offload-optimizer", po::value<std::string>(), "none | cpu (zero_optimization.offload_optimizer.device)")
      ("delayed-param-update", po::value<int64_t>(), "N: with offload_optimizer cpu, after N ordinary updates run "
       "each step's CPU optimizer in the background while the next step's forward and backward use the parameters "
       "before it (ZeRO-Offload's one-step delayed parameter update; off by default; docs/zero-offload.md)")
      ("update-per-bucket", po::bool_switch(), "with offload_optimizer cpu: the CPU optimizer updates each gradient "
       "bucket as the step's last backward reduces it, overlapping the backward (same bits as after it; a piece whose "
       "gradient is not finite is left unchanged). Needs adamw or sgd, gradient_clipping 0 and no fp16; off by "
       "default; docs/zero-offload.md");
  return options;
}

// ZeRO++ (docs/zero-plus-plus.md): DeepSpeed's zero_optimization keys as flags, and the node layout.
po::options_description zero_plus_plus_options() {
  po::options_description options("ZeRO++ options (stage 3, several nodes)");
  options.add_options()
      ("zero-quantized-weights", po::bool_switch(), "ZeRO++ qwZ (stage 3): gather weights as int8 blocks with fp32 "
                                                    "scales (zero_optimization.zero_quantized_weights)")
      ("zero-hpz-partition-size", po::value<int>(), "ZeRO++ hpZ (stage 3): keep a secondary partition over this many "
                                                    "ranks, the ranks per node, so backward gathers stay in the node "
                                                    "(zero_optimization.zero_hpz_partition_size; 1: off)")
      ("zero-quantized-gradients", po::bool_switch(), "ZeRO++ qgZ (stage 3): reduce gradients by an intra-node then an "
                                                      "inter-node all-to-all of int4 blocks "
                                                      "(zero_optimization.zero_quantized_gradients)")
      ("ranks-per-node", po::value<int>(), "ranks per node for ZeRO++'s node groups (default: from the hosts the ranks "
                                           "run on); e.g. 2 runs 4 ranks on one machine as two \"nodes\"");
  return options;
}

// Pipeline parallelism's flags (docs/pipeline.md).
po::options_description pipeline_options() {
  po::options_description options("pipeline parallelism");
  options.add_options()
      ("pipeline-stages", po::value<int64_t>(), "P: ranks split into P stages x world/P replicas (docs/pipeline.md)")
      ("pipeline-schedule", po::value<std::string>(), "with --pipeline-stages: 1f1b (default), gpipe or interleaved")
      ("pipeline-chunks", po::value<int64_t>(), "V model chunks per rank for the interleaved schedule (default 2)")
      ("partition-method", po::value<std::string>(), "units over stages: parameters (default), uniform, type:REGEX");
  return options;
}

// What the run trains the model to do (train/objective.h).
po::options_description objective_options() {
  po::options_description options("objective");
  options.add_options()
      ("objective", po::value<std::string>(), "what to train: sft (next-token cross-entropy, default), reward "
                                              "(DeepSpeed-Chat step 2's reward model, on data from prep --pairs) or "
                                              "dpo (TRL's DPO on those pairs; its reference: docs/dpo.md)")
      ("dpo-beta", po::value<double>(), "--objective dpo: beta, the strength of the pull to the reference "
                                        "(default 0.1, TRL's)")
      ("dpo-label-smoothing", po::value<double>(), "--objective dpo: the probability that a pair's preference is "
                                                   "flipped (cDPO, TRL's label_smoothing; default 0)");
  return options;
}

po::options_description train_options() {
  po::options_description options("zerotune train options");
  options.add_options()
      ("help,h", "show this help")
      ("model", po::value<std::string>(), "HF model directory (config.json + safetensors)")
      ("data", po::value<std::string>(), "tokenized dataset directory (HDF5 shards)")
      ("out", po::value<std::string>(), "output directory (metrics.jsonl, run.json)")
      ("deepspeed", po::value<std::string>(), "DeepSpeed JSON config (batch sizes, optimizer, scheduler, ...)")
      ("config", po::value<std::string>(), "INI file with any of these options (key = value)")
      ("micro-batch-size", po::value<int64_t>(), "samples per micro-batch per rank (train_micro_batch_size_per_gpu)")
      ("grad-accum", po::value<int64_t>(), "micro-batches per optimizer step (gradient_accumulation_steps)")
      ("lr", po::value<double>(), "learning rate (optimizer.params.lr)")
      ("weight-decay", po::value<double>(), "AdamW weight decay on linear and embedding weights")
      ("gradient-clipping", po::value<double>(), "clip the global gradient norm to this (0: off)")
      ("lr-scheduler", po::value<std::string>(), "constant | linear | cosine (HF style, with --warmup-steps)")
      ("warmup-steps", po::value<int64_t>(), "warmup steps of the linear/cosine schedule")
      ("lora-r", po::value<int>(), "LoRA rank (enables LoRA; base weights are frozen)")
      ("lora-alpha", po::value<double>(), "LoRA alpha (scaling alpha/r)")
      ("lora-dropout", po::value<double>(), "dropout on the LoRA input")
      ("lora-targets", po::value<std::string>(), "module names or path suffixes as PEFT matches them (q_proj,v_proj or "
                                                 "\"q_proj, v_proj\"; self_attn.q_proj), all-linear, or a regular "
                                                 "expression matched against whole module paths (.*\\.(q|v)_proj)")
      ("lora-rslora", po::bool_switch(), "rank-stabilised LoRA: scaling alpha/sqrt(r)")
      ("quantize", po::value<std::string>(), "QLoRA: store the frozen base linear weights 4-bit, nf4 or fp4 "
       "(bitsandbytes' format, blocks of 64; needs --lora-r)")
      ("double-quant", po::bool_switch(), "with --quantize: the 4-bit scales in 8 bits (bnb_4bit_use_double_quant)")
      ("adapter", po::value<std::string>(), "continue training this PEFT adapter directory")
      ("activation-checkpointing", po::bool_switch(), "recompute each block's forward in backward")
      ("offload-activations", po::bool_switch(),
       "with --activation-checkpointing: keep the saved block inputs in pinned host memory between forward and "
       "backward (copied beside compute, prefetched one block ahead)")
      ("epochs", po::value<int64_t>(), "epochs over the data (default 1)")
      ("max-steps", po::value<int64_t>(), "stop after this many optimizer steps (overrides --epochs)")
      ("seed", po::value<uint64_t>(), "seed of shuffling, dropout and LoRA init (default 42)")
      ("no-shuffle", po::bool_switch(), "take samples in order")
      ("group-by-length", po::bool_switch(), "micro-batches of similar lengths within each global batch (less padding)")
      ("head-chunk-rows", po::value<int64_t>(), "rows per chunk of the LM head + cross-entropy (default 0: automatic, "
                                                "a chunk's logits about one activation's size, at least 256 rows; a large value: whole logits)")
      ("packing", po::bool_switch(), "pack each micro-batch's samples into rows as long as the longest sample, attention "
                                     "and positions confined to each sample (no padding between them)")
      ("log-every", po::value<int64_t>(), "console line every N steps (default: steps_per_print)")
      ("peak-tflops", po::value<double>(), "per-rank peak TFLOPS for the MFU figure")
      ("profile-step", po::value<int64_t>(), "time each module (embedding, attention, mlp, norm, head, optimizer, "
                                             "communication) in step N: a table and OUT/profile.json")
      ("report-nonfinite", po::bool_switch(), "when a step is skipped (fp16 overflow, a non-finite gradient), name "
                                              "where inf/NaN first appeared on each rank: the first gradient in backward "
                                              "order, or the loss (checks every unit's gradients: slower)")
      ("cuda-profiler-steps", po::value<std::string>(), "FIRST:LAST (or N): cudaProfilerStart before step FIRST, "
                                                         "cudaProfilerStop after step LAST, for `nsys profile "
                                                         "--capture-range=cudaProfilerApi`")
      ("eval-data", po::value<std::string>(), "evaluation split (token shards): eval_loss/eval_ppl in metrics.jsonl")
      ("split", po::value<std::string>(), "the split of --data to train on (train-00000.h5 ...: train), when it holds several")
      ("eval-split", po::value<std::string>(), "the split to evaluate on: of --eval-data, or of --data without --eval-data")
      ("eval-every", po::value<int64_t>(), "evaluate every N steps (default: at the end of each epoch only)")
      ("eval-at-start", po::bool_switch(), "evaluate before the first step too, as DeepSpeed-Chat's step 1 prints "
                                           "its \"Epoch 0\" ppl (not on a resumed run)")
      ("sample-prompts", po::value<std::string>(), "greedy completions of these prompts after the last step (and every "
       "--sample-every steps), printed and appended to OUT/samples.jsonl: one prompt per line, or JSON lines with a "
       "\"prompt\" (a .jsonl file like prep's input)")
      ("sample-every", po::value<int64_t>(), "with --sample-prompts: sample every N steps too")
      ("sample-max-new-tokens", po::value<int64_t>(), "with --sample-prompts: at most this many new tokens per prompt (default 64)")
      ("device", po::value<std::string>(), "auto (default: cuda when this build has CUDA and the rank sees a GPU, "
       "else cpu), cpu, or cuda: the GPU local_rank % visible devices")
      ("device-memory-limit", po::value<std::string>(), "SIZE (24GiB, 512MiB or bytes): make each rank's GPU behave as "
       "one with that much memory, on a real GPU and on the emulated device alike (what zerotune takes from the driver "
       "counts; past it an allocation fails as on a full GPU). Default: ZT_DEVICE_MEMORY_LIMIT, else none")
      ("comm", po::value<std::string>(), "GPU collectives: auto (NCCL when each rank has its own GPU), nccl, or "
                                         "mpi (through host memory)")
      ("zero-stage", po::value<int>(), "ZeRO stage 0-3 (zero_optimization.stage)")
      ("bf16", po::bool_switch(), "train in bf16 with fp32 master weights (HF TrainingArguments' --bf16): "
                                  "resolves the DeepSpeed JSON's \"bf16\": {\"enabled\": \"auto\"}; an explicit "
                                  "\"enabled\" it contradicts is an error")
      ("fp16", po::bool_switch(), "train in fp16 with fp32 master weights and dynamic loss scaling (HF's --fp16): "
                                  "resolves \"fp16\": {\"enabled\": \"auto\"} likewise")
      ("grad-accum-dtype", po::value<std::string>(), "fp32 (default) | bf16 | fp16 (data_types.grad_accum_dtype): "
                                                     "gradients held, accumulated and reduced in that dtype; 16-bit "
                                                     "needs that compute dtype and halves the gradient bytes")
      ("save-every", po::value<int64_t>(), "save a checkpoint every N steps (OUT/checkpoints)")
      ("no-save-at-end", po::bool_switch(), "do not save a checkpoint after the last step")
      ("save-hf-at-end", po::bool_switch(), "after the last step also write OUT/hf: the HF model in the compute dtype, "
                                            "LoRA merged (DeepSpeed's stage3_gather_16bit_weights_on_model_save)")
      ("allow-data-change", po::bool_switch(), "--resume a checkpoint that was trained on other data (the data's "
                                               "sampled checksum differs)")
      ("keep-last", po::value<int64_t>(), "keep only the newest K checkpoints (default: all)")
      ("resume", po::value<std::string>(), "auto (the latest checkpoint under OUT, if any), a checkpoint directory, "
                                           "a run directory, its checkpoints/ or a `latest` file")
      ("overwrite", po::bool_switch(), "start over in an --out that holds another run (removes its checkpoints and "
                                       "metrics); without it such an --out needs --resume")
      ("comm-timeout", po::value<double>(), "seconds a collective may take before the job aborts (default 1800)")
      ("dump-step0", po::value<std::string>(), "write logits, loss and gradients of step 0 to this safetensors file")
      ("dump-final", po::value<std::string>(), "write every trainable parameter after the last step to this safetensors file");
  options.add(pipeline_options());
  options.add(objective_options());
  options.add(offload_options());
  options.add(zero_plus_plus_options());
  return options;
}

template <class T>
void take(const po::variables_map& vm, const char* key, T& target) {
  if (vm.count(key)) target = vm[key].as<T>();
}

// --cuda-profiler-steps FIRST:LAST or N (= N:N), 1-based steps, FIRST <= LAST.
void parse_profiler_steps(const std::string& text, RunOptions& run) {
  const size_t colon = text.find(':');
  const std::string first = text.substr(0, colon), last = colon == std::string::npos ? first : text.substr(colon + 1);
  const auto step_of = [&](const std::string& part) {
    size_t used = 0;
    int64_t value = 0;
    try {
      value = std::stoll(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    ZT_CHECK(used > 0 && used == part.size() && value >= 1, "--cuda-profiler-steps '", text,
             "': expected FIRST:LAST or N, steps counted from 1");
    return value;
  };
  run.profiler_first = step_of(first);
  run.profiler_last = step_of(last);
  ZT_CHECK(run.profiler_first <= run.profiler_last, "--cuda-profiler-steps '", text, "': FIRST ",
           run.profiler_first, " comes after LAST ", run.profiler_last);
}

// The batch and optimization flags (micro-batch, accumulation, lr, weight decay, clipping, schedule).
void take_optimization_flags(const po::variables_map& vm, TrainConfig& config, RunOptions& run) {
  // The flags get the checks the JSON keys get (0 means "derive it" only inside the JSON).
  if (vm.count("micro-batch-size")) config.micro_batch_size = vm["micro-batch-size"].as<int64_t>();
  ZT_CHECK(!vm.count("micro-batch-size") || config.micro_batch_size >= 1, "--micro-batch-size must be >= 1, not ",
           config.micro_batch_size);
  if (vm.count("grad-accum")) config.gradient_accumulation_steps = vm["grad-accum"].as<int64_t>();
  ZT_CHECK(!vm.count("grad-accum") || config.gradient_accumulation_steps >= 1, "--grad-accum must be >= 1, not ",
           config.gradient_accumulation_steps);
  run.grad_accum_given = vm.count("grad-accum") > 0;
  take(vm, "lr", config.optimizer.lr);
  ZT_CHECK(std::isfinite(config.optimizer.lr) && config.optimizer.lr >= 0.0,
           "--lr must be a finite number >= 0, not ", config.optimizer.lr);
  take(vm, "weight-decay", config.optimizer.weight_decay);
  ZT_CHECK(std::isfinite(config.optimizer.weight_decay) && config.optimizer.weight_decay >= 0.0,
           "--weight-decay must be a finite number >= 0, not ", config.optimizer.weight_decay);
  take(vm, "gradient-clipping", config.gradient_clipping);
  ZT_CHECK(std::isfinite(config.gradient_clipping) && config.gradient_clipping >= 0.0,
           "--gradient-clipping must be a finite number >= 0 (0: off), not ", config.gradient_clipping);
  if (vm.count("lr-scheduler")) {
    config.scheduler.type = vm["lr-scheduler"].as<std::string>();
    ZT_CHECK(config.scheduler.type == "constant" || config.scheduler.type == "linear" || config.scheduler.type == "cosine",
             "--lr-scheduler '", config.scheduler.type, "' is not one of constant, linear, cosine (DeepSpeed's "
             "WarmupLR/WarmupDecayLR/WarmupCosineLR come from the --deepspeed JSON)");
  }
  take(vm, "warmup-steps", config.scheduler.warmup_steps);
}

// LoRA, QLoRA and --adapter.
void take_lora_flags(const po::variables_map& vm, TrainConfig& config, RunOptions& run) {
  take(vm, "lora-r", config.lora.r);
  take(vm, "lora-alpha", config.lora.alpha);
  take(vm, "lora-dropout", config.lora.dropout);
  if (vm.count("lora-targets")) config.lora.targets = parse_lora_targets(vm["lora-targets"].as<std::string>());
  if (vm["lora-rslora"].as<bool>()) config.lora.rslora = true;
  const bool lora_flag = vm.count("lora-alpha") || vm.count("lora-dropout") || vm.count("lora-targets") ||
                         vm["lora-rslora"].as<bool>();
  ZT_CHECK(!lora_flag || config.lora.r > 0 || vm.count("adapter"),
           "LoRA options were given without --lora-r (the LoRA rank)");
  // No --lora-targets: the model type's PEFT default, resolved when the model config is read.
  ZT_CHECK(config.lora.dropout >= 0.0 && config.lora.dropout < 1.0, "--lora-dropout must be in [0, 1), not ",
           config.lora.dropout);
  if (vm.count("quantize")) {
    config.quantize.type = parse_quant4_type(vm["quantize"].as<std::string>(), "--quantize");
    config.quantize.double_quant = vm["double-quant"].as<bool>();
  }
  ZT_CHECK(!vm["double-quant"].as<bool>() || config.quantize.enabled(), "--double-quant needs --quantize nf4|fp4");
  take(vm, "adapter", run.adapter_dir);
  // An adapter brings its own LoRA settings, lora_dropout included (adapter_config.json).
  for (const char* flag : {"lora-alpha", "lora-dropout", "lora-targets"})
    ZT_CHECK(!vm.count("adapter") || !vm.count(flag), "--adapter takes the LoRA settings from ", run.adapter_dir,
             "/adapter_config.json (lora_alpha, lora_dropout, target_modules): do not give --", flag, " as well");
  ZT_CHECK(!vm.count("adapter") || !vm["lora-rslora"].as<bool>(), "--adapter takes the LoRA settings from ",
           run.adapter_dir, "/adapter_config.json (use_rslora): do not give --lora-rslora as well");
}

// The run's memory, data order, logging, profiling, device and ZeRO flags.
void take_run_flags(const po::variables_map& vm, TrainConfig& config, RunOptions& run) {
  if (vm["activation-checkpointing"].as<bool>()) config.activation_checkpointing = true;
  if (vm["offload-activations"].as<bool>()) config.offload_activations = true;
  ZT_CHECK(!config.offload_activations || config.activation_checkpointing,
           "--offload-activations needs --activation-checkpointing: it moves the block inputs that checkpointing "
           "keeps to host memory");
  take(vm, "pipeline-stages", config.pipeline.stages);
  take(vm, "pipeline-schedule", config.pipeline.schedule);
  take(vm, "partition-method", config.pipeline.partition_method);
  // The interleaved schedule's chunks: 2 unless given (1 is 1f1b).
  if (config.pipeline.schedule == "interleaved" && !vm.count("pipeline-chunks")) config.pipeline.chunks = 2;
  take(vm, "pipeline-chunks", config.pipeline.chunks);
  ZT_CHECK(config.pipeline.stages >= 1, "--pipeline-stages must be at least 1, not ", config.pipeline.stages);
  take(vm, "epochs", config.epochs);
  take(vm, "max-steps", config.max_steps);
  take(vm, "head-chunk-rows", config.head_chunk_rows);
  take(vm, "seed", config.seed);
  if (vm["no-shuffle"].as<bool>()) config.shuffle = false;
  if (vm["group-by-length"].as<bool>()) config.group_by_length = true;
  if (vm["packing"].as<bool>()) config.packing = true;
  take(vm, "objective", config.objective);
  take(vm, "dpo-beta", config.dpo_beta);
  take(vm, "dpo-label-smoothing", config.dpo_label_smoothing);
  for (const char* flag : {"dpo-beta", "dpo-label-smoothing"})
    ZT_CHECK(!vm.count(flag) || config.objective == "dpo", "--", flag, " is an option of --objective dpo, not of "
             "--objective ", config.objective);
  take(vm, "log-every", run.log_every);
  take(vm, "peak-tflops", run.peak_tflops);
  take(vm, "profile-step", run.profile_step);
  ZT_CHECK(run.profile_step >= 0, "--profile-step must not be negative");
  if (vm["report-nonfinite"].as<bool>()) run.report_nonfinite = true;
  if (vm.count("cuda-profiler-steps")) parse_profiler_steps(vm["cuda-profiler-steps"].as<std::string>(), run);
  take(vm, "dump-step0", config.dump_step0_path);
  take(vm, "dump-final", config.dump_final_path);
  take(vm, "device", config.device);
  ZT_CHECK(config.device == "auto" || config.device == "cpu" || config.device == "cuda",
           "--device must be auto, cpu or cuda, not '", config.device, "'");
  if (vm.count("device-memory-limit")) {
    ZT_CHECK(config.device != "cpu", "--device-memory-limit limits a GPU's memory: it does not go with --device cpu");
    set_device_memory_limit(parse_memory_size("--device-memory-limit", vm["device-memory-limit"].as<std::string>()),
                            "--device-memory-limit");
  }
  take(vm, "comm", config.comm);
  ZT_CHECK(config.comm == "auto" || config.comm == "nccl" || config.comm == "mpi", "--comm must be auto, nccl or mpi, not '",
           config.comm, "'");
  take(vm, "zero-stage", config.zero.stage);
  ZT_CHECK(config.zero.stage >= 0 && config.zero.stage <= 3, "--zero-stage must be 0, 1, 2 or 3, not ", config.zero.stage);
  take(vm, "offload-optimizer", config.zero.offload_optimizer_device);
  ZT_CHECK(config.zero.offload_optimizer_device == "none" || config.zero.offload_optimizer_device == "cpu",
           "--offload-optimizer must be none or cpu, not '", config.zero.offload_optimizer_device, "'");
  take(vm, "delayed-param-update", config.zero.delayed_update_after);
  ZT_CHECK(config.zero.delayed_update_after >= 0 || !vm.count("delayed-param-update"),
           "--delayed-param-update must be at least 0 (the ordinary updates before the delayed ones), not ",
           config.zero.delayed_update_after);
  ZT_CHECK(config.zero.delayed_update_after < 0 || config.pipeline.stages <= 1,
           "--delayed-param-update does not go with --pipeline-stages: a pipeline stage's engine updates between "
           "the schedule's micro-batches, not beside the next step");
  if (vm["update-per-bucket"].as<bool>()) config.zero.update_per_bucket = true;
  ZT_CHECK(!config.zero.update_per_bucket || config.pipeline.stages <= 1,
           "--update-per-bucket does not go with --pipeline-stages: a pipeline stage's last backward does not reduce "
           "its gradients bucket by bucket");
  if (vm["zero-quantized-weights"].as<bool>()) config.zero.zero_quantized_weights = true;
  if (vm["zero-quantized-gradients"].as<bool>()) config.zero.zero_quantized_gradients = true;
  take(vm, "zero-hpz-partition-size", config.zero.zero_hpz_partition_size);
  ZT_CHECK(config.zero.zero_hpz_partition_size >= 1, "--zero-hpz-partition-size must be at least 1, not ",
           config.zero.zero_hpz_partition_size);
  take(vm, "ranks-per-node", config.zero.ranks_per_node);
  ZT_CHECK(config.zero.ranks_per_node >= 1 || !vm.count("ranks-per-node"), "--ranks-per-node must be at least 1, not ",
           config.zero.ranks_per_node);
  if (vm.count("grad-accum-dtype")) {
    const std::string name = vm["grad-accum-dtype"].as<std::string>();
    const std::optional<DType> dtype = parse_deepspeed_dtype(name);
    ZT_CHECK(dtype, "--grad-accum-dtype must be one of ", deepspeed_dtype_spellings(), ", not '", name, "'");
    config.grad_accum_dtype = *dtype;
  }
}

// Checkpoints, resume, the communication timeout and evaluation.
void take_save_and_eval_flags(const po::variables_map& vm, TrainConfig& config, RunOptions& run) {
  take(vm, "save-every", config.save_every);
  ZT_CHECK(config.save_every >= 0, "--save-every must not be negative");
  if (vm["no-save-at-end"].as<bool>()) config.save_at_end = false;
  if (vm["save-hf-at-end"].as<bool>()) config.save_hf_at_end = true;
  if (config.zero.stage3_gather_16bit_weights_on_model_save && !config.save_hf_at_end) {
    config.save_hf_at_end = true;
    run.notes.push_back("zero_optimization.stage3_gather_16bit_weights_on_model_save: the 16-bit HF model is written to "
                        "OUT/hf after the last step (--save-hf-at-end)");
  }
  ZT_CHECK(!config.save_hf_at_end || config.save_at_end, "--save-hf-at-end exports the checkpoint saved after the last "
           "step: it cannot go with --no-save-at-end");
  if (vm["allow-data-change"].as<bool>()) run.allow_data_change = true;
  take(vm, "keep-last", config.keep_last);
  ZT_CHECK(config.keep_last >= 0, "--keep-last must not be negative");
  take(vm, "resume", config.resume);
  if (vm["overwrite"].as<bool>()) run.overwrite = true;
  take(vm, "comm-timeout", config.comm_timeout_seconds);
  ZT_CHECK(config.comm_timeout_seconds > 0, "--comm-timeout must be positive, not ", config.comm_timeout_seconds);
  take(vm, "eval-data", config.eval_data_dir);
  take(vm, "split", config.data_split);
  take(vm, "eval-split", config.eval_split);
  // --eval-split alone: another split of the training data's directory (train-*.h5 next to test-*.h5).
  if (config.eval_data_dir.empty() && !config.eval_split.empty()) config.eval_data_dir = config.data_dir;
  take(vm, "eval-every", config.eval_every);
  ZT_CHECK(config.eval_every >= 0, "--eval-every must not be negative");
  ZT_CHECK(config.eval_every == 0 || !config.eval_data_dir.empty(), "--eval-every needs --eval-data");
  config.eval_at_start = vm["eval-at-start"].as<bool>();
  ZT_CHECK(!config.eval_at_start || !config.eval_data_dir.empty(), "--eval-at-start needs --eval-data or --eval-split");
  take(vm, "sample-prompts", run.samples.prompts_file);
  take(vm, "sample-every", run.samples.every);
  take(vm, "sample-max-new-tokens", run.samples.max_new_tokens);
  check_sample_options(run.samples, vm.count("sample-every") > 0);
}

}  // namespace

ParsedTrainOptions parse_train_options(const std::vector<std::string>& args, const char* command,
                                       const po::options_description& extra,
                                       std::initializer_list<const char*> required, po::variables_map& vm) {
  po::options_description options = train_options();
  options.add(extra);
  ParsedTrainOptions parsed;
  try {
    po::store(po::command_line_parser(args).options(options).run(), vm);
  } catch (const po::error& error) {
    fail(error.what(), " (see zerotune ", command, " --help)");
  }
  if (vm.count("config")) {  // command-line values win: po::store keeps the first value stored
    const std::string path = vm["config"].as<std::string>();
    std::ifstream ini(path);
    ZT_CHECK(ini, path, ": cannot open the --config file");
    try {
      po::store(po::parse_config_file(ini, options), vm);
    } catch (const po::error& error) {
      fail(path, ": ", error.what(), " (the INI file takes the options of zerotune train --help, without --)");
    }
  }
  po::notify(vm);
  if (vm.count("help")) {
    std::cout << options << "\n";
    parsed.help = true;
    return parsed;
  }
  for (const char* option : required)
    ZT_CHECK(vm.count(option), "--", option, " is required (see zerotune ", command, " --help)");

  TrainConfig& config = parsed.config;
  RunOptions& run = parsed.run;
  int world_size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  if (vm.count("deepspeed")) {
    config.deepspeed_config_path = vm["deepspeed"].as<std::string>();
    // The JSON's batch numbers are checked against the data-parallel size: the flag's stages first
    // (taken again after the JSON, which they override).
    take(vm, "pipeline-stages", config.pipeline.stages);
    load_deepspeed_config(config.deepspeed_config_path, world_size, config, run.notes);
  }
  take(vm, "model", config.model_dir);
  take(vm, "data", config.data_dir);
  take(vm, "out", config.out_dir);
  take_optimization_flags(vm, config, run);
  take_lora_flags(vm, config, run);
  take_run_flags(vm, config, run);
  take_save_and_eval_flags(vm, config, run);
  // The flops profiler's step of the JSON, unless --profile-step names one.
  if (!vm.count("profile-step") && config.deepspeed_profile_step > 0) run.profile_step = config.deepspeed_profile_step;
  // Every "auto" of the JSON resolved as the HF Trainer does, and every flag that overrides it, said once;
  // the precision first (the banner's first line), from --bf16/--fp16 or the JSON.
  resolve_precision(config, vm["bf16"].as<bool>(), vm["fp16"].as<bool>(), run.notes);
  if (!config.deepspeed_config_path.empty())
    resolve_deepspeed_choices(config, [&](const std::string& flag) { return vm.count(flag) > 0; }, run.notes);
  ZT_CHECK(config.epochs > 0, "--epochs must be positive, not ", config.epochs);
  ZT_CHECK(config.max_steps >= 0, "--max-steps must not be negative");
  ZT_CHECK(config.head_chunk_rows >= 0, "--head-chunk-rows must not be negative (0: automatic)");
  return parsed;
}

int command_train(const std::vector<std::string>& args) {
  po::variables_map vm;
  ParsedTrainOptions parsed = parse_train_options(args, "train", po::options_description(), {"model", "data", "out"}, vm);
  if (!parsed.help) run_training(parsed.config, parsed.run);
  return 0;
}

}  // namespace zt
