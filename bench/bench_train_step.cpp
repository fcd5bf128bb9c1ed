// Benchmark: one training step (forward, backward, AdamW) of a small LLaMA on the CPU backend,
// with random weights and tokens. Prints the median step time and tokens/s; bench/run_cpu_bench.sh
// runs it next to the same step in PyTorch (bench/torch_train_step.py) and prints the ratio.
//   bench_train_step [--hidden 512] [--layers 4] [--seq 256] [--batch 4] [--vocab 32000] [--steps 5] [--lora-r 0]
#include "bench_util.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/rng.h"
#include "model/causal_lm.h"
#include "model/lora.h"
#include "model/param_store.h"

using namespace zt;

namespace {
using bench::flag;
}  // namespace

int main(int argc, char** argv) {
  const int64_t hidden = flag(argc, argv, "--hidden", 512), layers = flag(argc, argv, "--layers", 4);
  const int64_t seq = flag(argc, argv, "--seq", 256), batch = flag(argc, argv, "--batch", 4);
  const int64_t vocab = flag(argc, argv, "--vocab", 32000), steps = flag(argc, argv, "--steps", 5);
  const int lora_r = static_cast<int>(flag(argc, argv, "--lora-r", 0));
  const int64_t heads = hidden / 64;
  nlohmann::json json = {{"model_type", "llama"},         {"vocab_size", vocab},
                         {"hidden_size", hidden},         {"intermediate_size", hidden * 8 / 3 / 64 * 64},
                         {"num_hidden_layers", layers},   {"num_attention_heads", heads},
                         {"num_key_value_heads", heads},  {"max_position_embeddings", seq}};
  ModelConfig config = parse_model_config(json, "bench");
  std::unique_ptr<Backend> backend = make_cpu_backend();
  std::vector<ParamSpec> specs = model_param_specs(config);
  std::vector<bool> trainable(specs.size(), lora_r == 0);
  LoraConfig lora;
  if (lora_r > 0) {
    lora.r = lora_r;
    lora.alpha = 2.0 * lora_r;
    lora.targets = {"all-linear"};
    for (ParamSpec& spec : lora_param_specs(specs, lora)) {
      specs.push_back(spec);
      trainable.push_back(true);
    }
  }
  ParamStore store(*backend, specs, trainable);
  uint32_t stream = 0;
  for (const ParamEntry& entry : store.entries()) {
    float* values = store.param(entry.spec.name).f32();
    RngKey key{1, rng_stream(RngPurpose::Test, stream++), 0};
    for (int64_t i = 0; i < entry.spec.numel(); ++i)
      values[i] = entry.spec.role == ParamRole::NormWeight ? 1.0f : 0.02f * rng_normal(key, static_cast<uint64_t>(i));
  }
  ModelOptions options;
  if (lora.enabled()) options.lora_scaling = lora_scaling(lora);
  std::unique_ptr<CausalLM> model = make_causal_lm(config, store, *backend, options);

  const int64_t n = batch * seq;
  std::vector<int32_t> ids(static_cast<size_t>(n)), targets(static_cast<size_t>(n));
  std::vector<uint8_t> mask(static_cast<size_t>(n), 1);
  std::vector<int64_t> row_ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    ids[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919) % vocab);
    targets[static_cast<size_t>(i)] = static_cast<int32_t>((i * 104729 + 1) % vocab);
    row_ids[static_cast<size_t>(i)] = i;
  }
  BatchTensors tensors{batch, seq, Tensor(ids.data(), DType::I32, {n}), Tensor(targets.data(), DType::I32, {n}),
                       Tensor(mask.data(), DType::U8, {n}), Tensor(row_ids.data(), DType::I64, {n}),
                       Tensor(), 0.0};  // one sample per row: positions t, B * T^2 / 2 attention pairs
  std::vector<Buffer> moments;
  for (ParamGroup group : {ParamGroup::Decay, ParamGroup::NoDecay}) {
    for (int i = 0; i < 2; ++i) {
      moments.emplace_back(*backend, static_cast<size_t>(std::max<int64_t>(1, store.group(group).numel)) * sizeof(float));
      backend->fill(moments.back().view(DType::F32, {std::max<int64_t>(1, store.group(group).numel)}), 0.0f);
    }
  }

  std::vector<double> seconds;
  double loss = 0.0;
  for (int64_t step = 0; step <= steps; ++step) {  // step 0 warms up (allocations, page faults)
    auto start = std::chrono::steady_clock::now();
    store.zero_grads();
    DropoutContext dropout{1, static_cast<uint32_t>(step), tensors.row_ids};
    model->forward(tensors, dropout);
    loss = model->backward(tensors, 1.0f / static_cast<float>(n), dropout) / static_cast<double>(n);
    int moment = 0;
    for (ParamGroup group : {ParamGroup::Decay, ParamGroup::NoDecay}) {
      const int64_t numel = store.group(group).numel;
      if (numel) {
        AdamWParams params;
        params.lr = 1e-4;
        params.weight_decay = 0.01;
        params.step = step + 1;
        backend->optimizer_kernels().adamw(store.group_params(group), store.group_grads(group),
                                           moments[static_cast<size_t>(moment)].view(DType::F32, {numel}),
                                           moments[static_cast<size_t>(moment + 1)].view(DType::F32, {numel}), params);
      }
      moment += 2;
    }
    double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (step > 0) seconds.push_back(elapsed);
  }
  std::sort(seconds.begin(), seconds.end());
  const double median = seconds[seconds.size() / 2];
  std::printf("zerotune cpu: hidden %lld layers %lld seq %lld batch %lld vocab %lld lora_r %d | loss %.4f | "
              "median step %.4f s | %.0f tokens/s\n",
              static_cast<long long>(hidden), static_cast<long long>(layers), static_cast<long long>(seq),
              static_cast<long long>(batch), static_cast<long long>(vocab), lora_r, loss, median,
              static_cast<double>(n) / median);
  std::printf("ZT_STEP_SECONDS %.6f\n", median);
  return 0;
}
