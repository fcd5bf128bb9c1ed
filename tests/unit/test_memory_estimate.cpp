// Unit tests of zero/memory_estimate.h and `zerotune estimate`: DeepSpeed's estimator formulas
// for known cases (values worked out by hand from estimate_zero2/zero3_model_states_mem_needs),
// zerotune's per-rank plan (padding, partitions, buckets, offload, aliasing), parameter counts
// of real model shapes, the rule of thumb, count parsing, and the command's input errors.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "model/config.h"
#include "model/lora.h"
#include "model/param_spec.h"
#include "test_util.h"
#include "train/memory_model.h"
#include "zero/memory_estimate.h"

namespace {

using zt::test::check_error;

constexpr int64_t k7B = 7000000000;
constexpr int64_t kLargest = 131072000;  // llama-7b's embedding: 32000 x 4096

zt::DeepSpeedEstimate ds(int stage, bool offload_optimizer, bool offload_params, int gpus_per_node = 8, int nodes = 1,
                         int64_t total = k7B, int64_t largest = kLargest) {
  return zt::deepspeed_estimate(total, largest, gpus_per_node, nodes, stage, offload_optimizer, offload_params);
}

// The llama-7b (Llama-2-7b-hf) shape.
zt::ModelConfig llama_7b_config() {
  return zt::parse_model_config({{"model_type", "llama"},
                                 {"vocab_size", 32000},
                                 {"hidden_size", 4096},
                                 {"intermediate_size", 11008},
                                 {"num_hidden_layers", 32},
                                 {"num_attention_heads", 32},
                                 {"max_position_embeddings", 4096}},
                                "llama-7b test config");
}

}  // namespace

BOOST_AUTO_TEST_SUITE(memory_estimate)

BOOST_AUTO_TEST_CASE(deepspeed_zero2_formulas_7b_one_node_eight_gpus) {
  // cpu_offload: gpu = 2 N = 14e9; cpu = N * max(4 * 8, 16) * 1.5 = 7e9 * 32 * 1.5 = 336e9.
  BOOST_TEST(ds(2, true, false).gpu_bytes == 14000000000);
  BOOST_TEST(ds(2, true, false).cpu_bytes == 336000000000);
  // no offload: gpu = 2 N + int(18 N / 8) = 14e9 + 15.75e9; cpu = N * 4 * 8 * 1.5 = 336e9.
  BOOST_TEST(ds(2, false, false).gpu_bytes == 29750000000);
  BOOST_TEST(ds(2, false, false).cpu_bytes == 336000000000);
  BOOST_TEST(ds(2, false, false).source == "DeepSpeed estimate_zero2_model_states_mem_needs");
  // Two nodes: cpu_offload cpu = N * max(4 * 16, 16) * 1.5 = 672e9; gpu = 14e9 + int(18 N / 16) = 21.875e9.
  BOOST_TEST(ds(2, true, false, 8, 2).cpu_bytes == 672000000000);
  BOOST_TEST(ds(2, false, false, 8, 2).gpu_bytes == 21875000000);
  // Python's int() truncates: 1000 params on 7 GPUs: 2000 + int(18000 / 7 = 2571.43) = 4571.
  BOOST_TEST(ds(2, false, false, 7, 1, 1000, 10).gpu_bytes == 4571);
  // The same accounting for stages 0 and 1 (no DeepSpeed estimator): stage 0 = 2 N + 18 N =
  // 140e9; stage 1 = 2 N + 2 N (whole fp16 grads) + int(16 N / 8) = 42e9, offloaded 4 N = 28e9.
  BOOST_TEST(ds(0, false, false).gpu_bytes == 140000000000);
  BOOST_TEST(ds(0, false, false).cpu_bytes == 336000000000);
  BOOST_TEST(ds(1, false, false).gpu_bytes == 42000000000);
  BOOST_TEST(ds(1, true, false).gpu_bytes == 28000000000);
  BOOST_TEST(ds(1, true, false).cpu_bytes == 336000000000);
}

BOOST_AUTO_TEST_CASE(deepspeed_zero3_formulas_7b) {
  // largest_layer_memory = 4 * 131072000 = 524288000.
  // offload optimizer + params: gpu = 524288000; cpu = N * 18 * (1/1) * 1.5 = 189e9 (zero_init),
  // N * max(4 * 8, 18) * 1.5 = 336e9 (without).
  BOOST_TEST(ds(3, true, true).gpu_bytes == 524288000);
  BOOST_TEST(ds(3, true, true).cpu_bytes == 189000000000);
  BOOST_TEST(ds(3, true, true).cpu_bytes_without_zero_init == 336000000000);
  // offload optimizer: gpu = 524288000 + int(2 N / 8) = 2274288000; cpu = N * 16 * 1.5 = 168e9
  // (zero_init), N * max(32, 16) * 1.5 = 336e9.
  BOOST_TEST(ds(3, true, false).gpu_bytes == 2274288000);
  BOOST_TEST(ds(3, true, false).cpu_bytes == 168000000000);
  BOOST_TEST(ds(3, true, false).cpu_bytes_without_zero_init == 336000000000);
  // no offload: gpu = 524288000 + int(18 N / 8) = 16274288000; cpu = 131072000 * 4 * 8 * 1.5 =
  // 6291456000 (zero_init), N * 4 * 8 * 1.5 = 336e9.
  BOOST_TEST(ds(3, false, false).gpu_bytes == 16274288000);
  BOOST_TEST(ds(3, false, false).cpu_bytes == 6291456000);
  BOOST_TEST(ds(3, false, false).cpu_bytes_without_zero_init == 336000000000);
  // Two nodes of 8: gpus_factor 1/2: cpu = N * 18 * 0.5 * 1.5 = 94.5e9; without zero_init
  // N * max(32, 9) * 1.5 = 336e9; gpu = 524288000 + int(2 N / 16) = 1399288000 (optimizer only).
  BOOST_TEST(ds(3, true, true, 8, 2).cpu_bytes == 94500000000);
  BOOST_TEST(ds(3, true, true, 8, 2).cpu_bytes_without_zero_init == 336000000000);
  BOOST_TEST(ds(3, true, false, 8, 2).gpu_bytes == 1399288000);
  // One GPU per node, 4 nodes: max(4 * 1, 18 / 4 = 4.5) = 4.5: cpu = N * 4.5 * 1.5 = 47.25e9.
  BOOST_TEST(ds(3, true, true, 1, 4).cpu_bytes_without_zero_init == 47250000000);
  BOOST_TEST(ds(3, true, true, 1, 4).cpu_bytes == 47250000000);
}

BOOST_AUTO_TEST_CASE(plan_partitions_buckets_and_offload) {
  zt::ZeroMemoryInputs in;
  in.total_params = 1001;  // pads to 1004 on 4 ranks: partitions of 251
  in.trainable_params = 1001;
  in.largest_layer_params = 100;
  in.gather_unit_params = 300;
  in.world_size = 4;
  in.gpus_per_node = 2;
  in.compute_dtype_bytes = 2;
  in.reduce_bucket_size = 100;
  in.stage3_prefetch_bucket_size = 500;
  in.stage3_max_live_parameters = 1000;

  in.stage = 0;
  zt::ZeroMemoryPlan plan = zt::zero_memory_plan(in);
  BOOST_TEST(plan.padded_params == 1004);
  BOOST_TEST(plan.param_partition == 251);
  BOOST_TEST(plan.trainable_partition == 251);
  BOOST_TEST(plan.device_param_bytes == 1004 * 2);
  BOOST_TEST(plan.device_grad_bytes == 1004 * 4);
  BOOST_TEST(plan.device_grad_bucket_bytes == 0);
  BOOST_TEST(plan.device_master_bytes == 1004 * 4);
  BOOST_TEST(plan.device_optimizer_bytes == 1004 * 8);
  BOOST_TEST(plan.device_total_bytes == 1004 * 18);
  BOOST_TEST(plan.host_total_bytes == 0);

  in.stage = 1;
  plan = zt::zero_memory_plan(in);
  BOOST_TEST(plan.device_grad_bytes == 1004 * 4);  // whole: all-reduced
  BOOST_TEST(plan.device_master_bytes == 251 * 4);
  BOOST_TEST(plan.device_optimizer_bytes == 251 * 8);
  BOOST_TEST(plan.device_total_bytes == 1004 * 2 + 1004 * 4 + 251 * 12);

  in.stage = 2;
  plan = zt::zero_memory_plan(in);
  BOOST_TEST(plan.device_grad_bytes == 251 * 4);
  BOOST_TEST(plan.device_grad_bucket_bytes == 100 * 4);
  BOOST_TEST(plan.device_total_bytes == 1004 * 2 + 251 * 4 + 400 + 251 * 12);

  in.offload_optimizer = true;
  plan = zt::zero_memory_plan(in);
  BOOST_TEST(plan.device_master_bytes == 0);
  BOOST_TEST(plan.device_optimizer_bytes == 0);
  BOOST_TEST(plan.host_master_bytes == 251 * 4);
  BOOST_TEST(plan.host_optimizer_bytes == 251 * 8);
  BOOST_TEST(plan.host_grad_bytes == 251 * 4);
  BOOST_TEST(plan.host_total_bytes == 251 * 16);
  BOOST_TEST(plan.host_total_bytes_per_node == 2 * 251 * 16);
  BOOST_TEST(plan.device_total_bytes == 1004 * 2 + 251 * 4 + 400);

  // Stage 3: partition 251 * 2 bytes + the gather unit (300) and the prefetched next one
  // (300 <= prefetch 500, 600 <= max live 1000): 600 gathered.
  in.stage = 3;
  in.offload_optimizer = false;
  plan = zt::zero_memory_plan(in);
  BOOST_TEST(plan.gathered_params == 600);
  BOOST_TEST(plan.device_param_bytes == 251 * 2 + 600 * 2);
  BOOST_TEST(plan.device_total_bytes == 251 * 2 + 1200 + 251 * 4 + 400 + 251 * 12);
  in.stage3_max_live_parameters = 599;  // no room for the next unit
  BOOST_TEST(zt::zero_memory_plan(in).gathered_params == 300);
  in.stage3_max_live_parameters = 1000;
  // A unit larger than the prefetch bucket still goes (DeepSpeed adds parameters while fewer
  // than the bucket's are in flight: opt-1.3b's 50.4M blocks against the 5e7 default); 0 is off.
  in.stage3_prefetch_bucket_size = 299;
  BOOST_TEST(zt::zero_memory_plan(in).gathered_params == 600);
  in.stage3_prefetch_bucket_size = 0;
  BOOST_TEST(zt::zero_memory_plan(in).gathered_params == 300);
  in.stage3_prefetch_bucket_size = 500;
  in.gather_unit_params = 0;  // falls back to the largest layer: 100 + 100
  BOOST_TEST(zt::zero_memory_plan(in).gathered_params == 200);
  in.gather_unit_params = 900;  // never more than the whole model
  in.stage3_prefetch_bucket_size = 1000;
  in.stage3_max_live_parameters = 2000;
  BOOST_TEST(zt::zero_memory_plan(in).gathered_params == 1004);

  // Offloaded parameters: the partition moves to the host, the gathered set stays.
  in.gather_unit_params = 300;
  in.stage3_prefetch_bucket_size = 500;
  in.stage3_max_live_parameters = 1000;
  in.offload_optimizer = true;
  in.offload_params = true;
  plan = zt::zero_memory_plan(in);
  BOOST_TEST(plan.device_param_bytes == 600 * 2);
  BOOST_TEST(plan.host_param_bytes == 251 * 2);
  BOOST_TEST(plan.host_total_bytes == 251 * 16 + 251 * 2);
  BOOST_TEST(plan.device_total_bytes == 1200 + 251 * 4 + 400);

  // offload_optimizer.ratio 0.6 (partial offload): int(0.4 x 251) = 100 elements' master and
  // state on the device, the other 151 (and only their gradient copy) on the host.
  in.offload_ratio = 0.6;
  plan = zt::zero_memory_plan(in);
  BOOST_TEST(plan.device_master_bytes == 100 * 4);
  BOOST_TEST(plan.device_optimizer_bytes == 100 * 8);
  BOOST_TEST(plan.host_total_bytes == 151 * 16 + 251 * 2);
  BOOST_TEST(plan.device_total_bytes == 1200 + 251 * 4 + 400 + 100 * 12);
  in.stage = 2;  // (stage 3's only: the other stages offload everything)
  in.offload_params = false;
  BOOST_TEST(zt::zero_memory_plan(in).host_master_bytes == 251 * 4);
  in.offload_ratio = 1.5;
  check_error([in] { zt::zero_memory_plan(in); }, "offload_ratio = 1.5: must be in [0, 1]");
}

// ZeRO++'s hpZ: stage 3 holds a secondary partition of P / R parameters beside its own 1/W.
BOOST_AUTO_TEST_CASE(plan_counts_the_hpz_secondary_partition) {
  zt::ZeroMemoryInputs in;
  in.total_params = in.trainable_params = 1001;  // pads to 1004 on 4 ranks
  in.largest_layer_params = in.gather_unit_params = 100;
  in.world_size = 4;
  in.gpus_per_node = 2;
  in.compute_dtype_bytes = 2;
  in.stage = 3;
  const zt::ZeroMemoryPlan without = zt::zero_memory_plan(in);
  BOOST_TEST(without.device_secondary_param_bytes == 0);
  in.hpz_partition_size = 2;
  const zt::ZeroMemoryPlan with = zt::zero_memory_plan(in);
  BOOST_TEST(with.device_secondary_param_bytes == 1004 / 2 * 2);
  BOOST_TEST(with.device_total_bytes == without.device_total_bytes + 1004);
  in.stage = 2;  // ZeRO++ is stage 3's
  BOOST_TEST(zt::zero_memory_plan(in).device_secondary_param_bytes == 0);
}

BOOST_AUTO_TEST_CASE(plan_lora_fp32_aliasing_and_bucket_cap) {
  zt::ZeroMemoryInputs in;
  in.total_params = 1000;
  in.trainable_params = 40;  // LoRA adapters
  in.largest_layer_params = 100;
  in.world_size = 4;
  in.gpus_per_node = 4;
  in.stage = 2;
  in.compute_dtype_bytes = 2;
  zt::ZeroMemoryPlan plan = zt::zero_memory_plan(in);
  BOOST_TEST(plan.device_param_bytes == 1000 * 2);  // frozen weights too, in the compute dtype
  BOOST_TEST(plan.device_grad_bytes == 10 * 4);
  BOOST_TEST(plan.device_grad_bucket_bytes == 40 * 4);  // default 5e8 capped at the 40 trainable
  BOOST_TEST(plan.device_master_bytes == 10 * 4);
  BOOST_TEST(plan.device_optimizer_bytes == 10 * 8);
  BOOST_TEST(!plan.master_aliases_params);
  // fp32 compute: the parameters are the master weights.
  in.compute_dtype_bytes = 4;
  plan = zt::zero_memory_plan(in);
  BOOST_TEST(plan.master_aliases_params);
  BOOST_TEST(plan.device_master_bytes == 0);
  BOOST_TEST(plan.device_param_bytes == 1000 * 4);
  // ... but not when the master copy lives on the host.
  in.offload_optimizer = true;
  plan = zt::zero_memory_plan(in);
  BOOST_TEST(!plan.master_aliases_params);
  BOOST_TEST(plan.host_master_bytes == 10 * 4);
  const nlohmann::json json = plan.to_json();
  BOOST_TEST(json.at("host_total_bytes_per_node") == 4 * 10 * 16);
  BOOST_TEST(json.at("device_total_bytes") == plan.device_total_bytes);
}

BOOST_AUTO_TEST_CASE(plan_optimizer_state_and_fused_gradients) {
  zt::ZeroMemoryInputs in;
  in.total_params = 1001;  // 1004 on 4 ranks, partitions of 251
  in.trainable_params = 1001;
  in.largest_layer_params = 100;
  in.gather_unit_params = 300;
  in.world_size = 4;
  in.gpus_per_node = 4;
  in.compute_dtype_bytes = 2;
  in.reduce_bucket_size = 100;
  // SGD with momentum: one fp32 buffer per element; without: none.
  in.stage = 1;
  in.optimizer_state_floats = 1;
  BOOST_TEST(zt::zero_memory_plan(in).device_optimizer_bytes == 251 * 4);
  in.optimizer_state_floats = 0;
  BOOST_TEST(zt::zero_memory_plan(in).device_optimizer_bytes == 0);
  // LOMO: the gather unit's gradients in flight (and its slice from stage 1), at every stage.
  in.fused_optimizer = true;
  in.stage = 0;
  BOOST_TEST(zt::zero_memory_plan(in).device_grad_bytes == 300 * 4);
  BOOST_TEST(zt::zero_memory_plan(in).device_grad_bucket_bytes == 0);
  for (int stage : {1, 2, 3}) {
    in.stage = stage;
    const zt::ZeroMemoryPlan plan = zt::zero_memory_plan(in);
    BOOST_TEST(plan.device_grad_bytes == 300 * 4 + 75 * 4);
    BOOST_TEST(plan.device_grad_bucket_bytes == 0);
    BOOST_TEST(plan.device_optimizer_bytes == 0);
  }
  // AdaLomo: as LOMO, plus its per-tensor state, whole on every rank at every stage.
  in.tensor_state_floats = 40;
  for (int stage : {0, 1, 2, 3}) {
    in.stage = stage;
    BOOST_TEST(zt::zero_memory_plan(in).device_optimizer_bytes == 40 * 4);
  }
  in.offload_optimizer = true;
  check_error([in] { zt::zero_memory_plan(in); }, "fused into backward (LOMO, AdaLomo) updates on the device: no "
              "optimizer offload");
  in.offload_optimizer = false;
  in.tensor_state_floats = -1;
  check_error([in] { zt::zero_memory_plan(in); }, "tensor_state_floats = -1: must be >= 0");
}

BOOST_AUTO_TEST_CASE(rule_of_thumb_shapes_follow_the_rule) {
  // 7e9 parameters: C ~ 4211, L = C / 128 blocks of 7 matrices and 2 norms, plus embedding, head,
  // final norm; together about the parameter count.
  const std::vector<std::vector<int64_t>> shapes = zt::rule_of_thumb_shapes(7000000000);
  const int64_t hidden = zt::rule_of_thumb_hidden_size(7000000000);
  const int64_t layers = std::llround(static_cast<double>(hidden) / 128.0);
  BOOST_TEST(shapes.size() == static_cast<size_t>(3 + 9 * layers));
  int64_t numel = 0;
  for (const std::vector<int64_t>& shape : shapes) numel += shape.size() == 2 ? shape[0] * shape[1] : shape[0];
  BOOST_TEST(std::abs(static_cast<double>(numel) / 7e9 - 1.0) < 0.05, numel);
  BOOST_TEST(shapes[0] == (std::vector<int64_t>{32000, hidden}));
}

BOOST_AUTO_TEST_CASE(fitting_choices_follow_the_optimizer) {
  // What `train` suggests when a run does not fit: every choice but optimizer offload for LOMO
  // (it has no state; its engine refuses the offload), offload included for AdamW.
  const zt::ModelConfig tiny = zt::load_model_config(std::string(ZT_SOURCE_DIR) + "/data/tiny-llama/config.json");
  zt::TrainConfig config;
  config.micro_batch_size = 1;
  config.gradient_accumulation_steps = 1;
  const auto choices = [&](const std::string& optimizer) {
    config.optimizer.type = optimizer;
    std::string all;
    for (const std::string& choice :
         zt::fitting_memory_choices(config, tiny, 2, 16, zt::typical_gpu_target(), int64_t{1} << 40))
      all += choice + "\n";
    return all;
  };
  const std::string adamw = choices("adamw");
  BOOST_TEST(adamw.find("offload_optimizer cpu") != std::string::npos, adamw);
  for (const char* fused : {"lomo", "adalomo"}) {
    const std::string fits = choices(fused);
    BOOST_TEST(fits.find("offload_optimizer") == std::string::npos, fits);
    BOOST_TEST(fits.find("zero_optimization.stage 3 + offload_param cpu") != std::string::npos, fits);
  }
}

BOOST_AUTO_TEST_CASE(plan_rejects_inconsistent_inputs) {
  zt::ZeroMemoryInputs good;
  good.total_params = 1000;
  good.trainable_params = 1000;
  good.largest_layer_params = 10;
  good.world_size = 8;
  good.gpus_per_node = 8;
  auto with = [&](auto edit) {
    zt::ZeroMemoryInputs in = good;
    edit(in);
    return [in] { zt::zero_memory_plan(in); };
  };
  check_error(with([](zt::ZeroMemoryInputs& in) { in.total_params = 0; }), "total_params = 0");
  check_error(with([](zt::ZeroMemoryInputs& in) { in.trainable_params = 1001; }), "trainable_params = 1001");
  check_error(with([](zt::ZeroMemoryInputs& in) { in.gpus_per_node = 3; }), "gpus_per_node = 3");
  check_error(with([](zt::ZeroMemoryInputs& in) { in.stage = 4; }), "ZeRO stage 4");
  check_error(with([](zt::ZeroMemoryInputs& in) { in.offload_optimizer = true; }),
              "offload_optimizer needs ZeRO stage 1, 2 or 3");
  check_error(with([](zt::ZeroMemoryInputs& in) { in.stage = 2; in.offload_params = true; }),
              "offload_param needs ZeRO stage 3");
  check_error(with([](zt::ZeroMemoryInputs& in) { in.compute_dtype_bytes = 1; }), "compute_dtype_bytes = 1");
  check_error(with([](zt::ZeroMemoryInputs& in) { in.compute_dtype_bytes = 4; in.grad_dtype_bytes = 2; }),
              "grad_dtype_bytes = 2");
  check_error(with([](zt::ZeroMemoryInputs& in) { in.fused_optimizer = true; in.grad_dtype_bytes = 2; }),
              "grad_dtype_bytes = 2");
  // 16-bit gradients: the gradient terms (device, bucket, host copy) halve, nothing else moves.
  for (int stage : {0, 1, 2, 3}) {
    zt::ZeroMemoryInputs in = good;
    in.stage = stage;
    in.offload_optimizer = stage >= 1;
    const zt::ZeroMemoryPlan wide = zt::zero_memory_plan(in);
    in.grad_dtype_bytes = 2;
    const zt::ZeroMemoryPlan narrow = zt::zero_memory_plan(in);
    BOOST_TEST_INFO("stage " << stage);
    BOOST_CHECK_EQUAL(2 * narrow.device_grad_bytes, wide.device_grad_bytes);
    BOOST_CHECK_EQUAL(2 * narrow.device_grad_bucket_bytes, wide.device_grad_bucket_bytes);
    BOOST_CHECK_EQUAL(2 * narrow.host_grad_bytes, wide.host_grad_bytes);
    BOOST_CHECK_EQUAL(wide.device_total_bytes - narrow.device_total_bytes,
                      narrow.device_grad_bytes + narrow.device_grad_bucket_bytes);
  }
  check_error([] { zt::deepspeed_estimate(10, 1, 1, 1, 3, false, true); }, "offload_param");
}

BOOST_AUTO_TEST_CASE(counts_of_llama_7b_and_tiny_llama_with_lora) {
  const std::vector<zt::ParamSpec> specs = zt::model_param_specs(llama_7b_config());
  const zt::ModelParamCounts counts = zt::count_model_params(specs, {});
  BOOST_TEST(counts.total == 6738415616);  // Llama-2-7b's parameter count
  BOOST_TEST(counts.trainable == counts.total);
  BOOST_TEST(counts.largest_layer == 131072000);  // embed_tokens / lm_head: 32000 x 4096
  // One block: 4 x 4096^2 attention + 3 x 4096 x 11008 MLP + 2 x 4096 norms.
  BOOST_TEST(counts.gather_unit == 4 * 4096 * 4096 + 3 * 4096 * 11008 + 2 * 4096);

  // data/tiny-llama: V 256, C 64, MLP 172, 2 layers, 4 heads, 2 KV heads (head dim 16).
  const zt::ModelConfig tiny = zt::load_model_config(std::string(ZT_SOURCE_DIR) + "/data/tiny-llama/config.json");
  const std::vector<zt::ParamSpec> tiny_specs = zt::model_param_specs(tiny);
  zt::LoraConfig lora;
  lora.r = 8;
  lora.targets = {"q_proj", "v_proj"};
  const std::vector<zt::ParamSpec> adapters = zt::lora_param_specs(tiny_specs, lora);
  const int64_t block = 64 * 64 + 32 * 64 + 32 * 64 + 64 * 64 + 3 * 172 * 64 + 2 * 64;  // 45440
  const int64_t base = 2 * 256 * 64 + 2 * block + 64;                                   // 123712
  const int64_t per_layer_lora = (8 * 64 + 64 * 8) + (8 * 64 + 32 * 8);                 // q + v: 1792
  const zt::ModelParamCounts tiny_counts = zt::count_model_params(tiny_specs, adapters);
  BOOST_TEST(tiny_counts.total == base + 2 * per_layer_lora);
  BOOST_TEST(tiny_counts.trainable == 2 * per_layer_lora);
  BOOST_TEST(tiny_counts.largest_layer == 256 * 64);
  BOOST_TEST(tiny_counts.gather_unit == block + per_layer_lora);
}

BOOST_AUTO_TEST_CASE(rule_of_thumb_and_count_parsing) {
  // 6738415616 parameters: C = cbrt(128 N / 12) ~ 4158 (llama-7b: 4096).
  BOOST_TEST(zt::rule_of_thumb_hidden_size(6738415616) == 4158);
  BOOST_TEST(zt::rule_of_thumb_largest_layer(6738415616) == 32000 * 4158);
  BOOST_TEST(zt::rule_of_thumb_block(6738415616) == 12 * 4158 * 4158);
  BOOST_TEST(zt::rule_of_thumb_largest_layer(1000) == 1000);  // capped at the model

  BOOST_TEST(zt::parse_param_count("6738415616", "--params") == 6738415616);
  BOOST_TEST(zt::parse_param_count("7e9", "--params") == 7000000000);
  BOOST_TEST(zt::parse_param_count("6.7B", "--params") == 6700000000);
  BOOST_TEST(zt::parse_param_count("125M", "--params") == 125000000);
  BOOST_TEST(zt::parse_param_count("350k", "--params") == 350000);
  check_error([] { zt::parse_param_count("-5", "--params"); }, "--params = -5: must be a count >= 1");
  check_error([] { zt::parse_param_count("0", "--params"); }, "--params = 0");
  check_error([] { zt::parse_param_count("seven", "--params"); }, "--params = 'seven': not a parameter count");
  check_error([] { zt::parse_param_count("7X", "--params"); }, "unknown suffix 'X'");
  check_error([] { zt::parse_param_count("1.5", "--nodes"); }, "--nodes = 1.5: not a whole number");
}

BOOST_AUTO_TEST_CASE(estimate_command_input_errors) {
  using Args = std::vector<std::string>;
  check_error([] { zt::command_estimate(Args{"--gpus-per-node", "8"}); }, "give the model: --model DIR or --params N");
  check_error([] { zt::command_estimate(Args{"--model", "x", "--params", "7e9"}); },
              "give either --model or --params, not both");
  check_error([] { zt::command_estimate(Args{"--params=-7e9"}); }, "--params = -7e9: must be a count >= 1");
  check_error([] { zt::command_estimate(Args{"--params", "7e9", "--gpus-per-node=0"}); }, "--gpus-per-node = 0");
  check_error([] { zt::command_estimate(Args{"--params", "7e9", "--nodes=-2"}); }, "--nodes = -2");
  check_error([] { zt::command_estimate(Args{"--params", "7e9", "--lora-r", "8"}); }, "--lora-r needs --model");
  check_error([] { zt::command_estimate(Args{"--params", "7e9", "--trainable-params", "8e9"}); },
              "--trainable-params = 8e9: more than --params = 7e9");
  check_error([] { zt::command_estimate(Args{"--params", "7e9", "--compute-dtype", "int8"}); },
              "--compute-dtype: unknown compute dtype 'int8'");
  check_error([] { zt::command_estimate(Args{"--model", "/nonexistent/model"}); }, "/nonexistent/model");
  const std::string tiny = std::string(ZT_SOURCE_DIR) + "/data/tiny-llama";
  check_error([&] { zt::command_estimate(Args{"--model", tiny, "--lora-r", "8", "--lora-targets", "foo_proj"}); },
              "LoRA target 'foo_proj' matches no linear module");
  check_error([&] { zt::command_estimate(Args{"--model", tiny, "--largest-layer-params", "5"}); },
              "go with --params");
}

BOOST_AUTO_TEST_SUITE_END()
