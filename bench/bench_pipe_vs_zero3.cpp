// Benchmark (issue 32, item 8): the step time of a pipeline (P = 2, 4; 1F1B and interleaved V = 2;
// D = W / P replicas) against ZeRO-3 on the same W ranks, simulated with per-layer times measured
// on an H100, for a LLaMA-7B-shaped model (32 layers, hidden 4096, MLP 11008, seq 2048, bf16,
// micro-batch 1). No GPU here: a model of time, not a measurement (BENCHMARKS.md states the
// assumptions and their sources).
//
// Compute per layer and micro-batch (ms), from the H100 runs of 2026-11-27 (BENCHMARKS.md,
// /work/shared/gpu/RESULTS-2026-11-27.md): `train --profile-step` on 4 layers of the 7B shape,
// LoRA r16 all-linear, seq 2048: attention 80.8 ms (our first tensor-core attention: kernel
// forward 5.05 + backward 13.68 ms per layer), mlp 8.6 ms (522 TFLOP/s), norm 0.9, other 0.9;
// with the attention kernel replaced by cuDNN's (forward 0.085, backward 0.310 ms, BENCHMARKS.md
// "cuDNN fused attention"). The linear layers run at the mlp module's rate; LoRA's backward
// computes the inputs' gradients only (one GEMM per forward GEMM), full fine-tuning's also the
// weights' (two); norm, RoPE and the rest split 1 : 2 between forward and backward.
//
// Pipeline: pipe/pipe_simulation.h runs every rank's schedule (pipe/pipe_schedule.h) in the form
// the engine uses on NCCL (1F1B grouped, interleaved overlapped), a chunk of 32 / (P V) layers
// costing that many layers' forward and backward; the engine recomputes a stage's forward before
// its backward (docs/pipeline.md), counted for every chunk (an upper bound: 1F1B's last stage does
// not); a message (B T C x 2 bytes) arrives after alpha + bytes / bandwidth. After the schedule,
// the D replicas of a stage all-reduce its gradients (ring: 2 (D-1)/D bytes / bandwidth), not
// overlapped. ZeRO-3: every rank runs all 32 layers on M / P micro-batches (the same global batch
// of D M micro-batches); per layer and micro-batch an all-gather of its bf16 parameters before the
// forward and again before the backward, and a reduce-scatter of its gradients after it (ring:
// (W-1)/W bytes / bandwidth + (W-1) alpha each), on one communication stream prefetching one layer
// ahead: a layer takes max(its compute, its communication), and each pass's first all-gather is
// exposed. LoRA reduces only the adapters' gradients; ZeRO-3 still gathers the frozen base weights.
// Every rank has its own link of the given bandwidth (the inter-node case). Left out of both: the
// embedding, the LM head and loss, the optimizer step, memory.
//   bench_pipe_vs_zero3 [--bandwidth GB/s] [--alpha us]   (defaults 25 GB/s, 10 us)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>

#include "pipe/pipe_schedule.h"
#include "pipe/pipe_simulation.h"

namespace {

constexpr int kLayers = 32;
constexpr double kHidden = 4096, kMlp = 11008, kSeq = 2048, kLoraRank = 16;
constexpr double kLayerParams = 4 * kHidden * kHidden + 3 * kHidden * kMlp;                 // 202.4 M
constexpr double kLoraParams = kLoraRank * (4 * 2 * kHidden + 3 * (kHidden + kMlp));        // 1.25 M
constexpr double kActivationBytes = 1 * kSeq * kHidden * 2;                                 // B T C bf16

// Per layer and micro-batch, ms (the derivation above).
struct LayerTimes {
  double forward, backward;
};

LayerTimes measured_layer_times(bool full_finetune) {
  const double profile_attention = 80.8 / 4, profile_mlp = 8.6 / 4, profile_rest = (0.9 + 0.9) / 4;
  const double ours_attention_kernel = 5.05 + 13.68, cudnn_forward = 0.085, cudnn_backward = 0.310;
  const double mlp_flops = 2 * 2 * kSeq * 3 * kHidden * kMlp;        // forward + inputs' gradient
  const double ms_per_flop = profile_mlp / mlp_flops;                 // the mlp module's rate
  const double linear_forward = 2 * kSeq * kLayerParams * ms_per_flop;
  const double projections = 2 * linear_forward * (4 * kHidden * kHidden) / kLayerParams;
  const double rest = profile_rest + (profile_attention - ours_attention_kernel - projections);
  const double weight_gradients = full_finetune ? linear_forward : 0.0;
  return {cudnn_forward + linear_forward + rest / 3,
          cudnn_backward + linear_forward + weight_gradients + 2 * rest / 3};
}

struct Link {
  double bytes_per_ms;  // GB/s x 1e6
  double alpha_ms;
};

double ring_all_gather_ms(double bytes, int ranks, const Link& link) {  // = reduce-scatter's
  if (ranks == 1) return 0.0;
  return (ranks - 1.0) / ranks * bytes / link.bytes_per_ms + (ranks - 1) * link.alpha_ms;
}

struct Setup {
  const char* tuning;
  bool full_finetune;
  int world, micro_batches;  // M: micro-batches per pipeline replica
};

double zero3_step_ms(const Setup& setup, int pipeline_stages, const Link& link) {
  const LayerTimes layer = measured_layer_times(setup.full_finetune);
  const double gather = ring_all_gather_ms(kLayerParams * 2, setup.world, link);
  const double reduce = ring_all_gather_ms((setup.full_finetune ? kLayerParams : kLoraParams) * 2, setup.world, link);
  const double micro_batch = gather + kLayers * std::max(layer.forward, gather) + gather +
                             kLayers * std::max(layer.backward, gather + reduce);
  return setup.micro_batches / pipeline_stages * micro_batch;
}

double pipeline_step_ms(const Setup& setup, zt::PipeScheduleKind kind, int stages, int chunks, bool recompute,
                        const Link& link) {
  const LayerTimes layer = measured_layer_times(setup.full_finetune);
  zt::PipeScheduleShape shape;
  shape.ranks = stages;
  shape.chunks = chunks;
  shape.micro_batches = setup.micro_batches;
  shape.form = zt::pipe_exchange_form(kind, /*exchanges_independent=*/false);  // NCCL's form
  const double layers_per_chunk = double(kLayers) / (stages * chunks);
  zt::PipeCosts costs;
  costs.forward = layers_per_chunk * layer.forward;
  costs.backward = layers_per_chunk * (layer.backward + (recompute ? layer.forward : 0.0));
  costs.latency = link.alpha_ms + kActivationBytes / link.bytes_per_ms;
  costs.transport = shape.form == zt::PipeExchangeForm::Overlapped ? zt::PipeTransport::Stream
                                                                   : zt::PipeTransport::Grouped;
  const double schedule = zt::simulate_pipe_schedule(zt::make_pipe_schedule(kind, shape), shape, costs).step_time;
  const int replicas = setup.world / stages;
  const double stage_gradient_bytes = (setup.full_finetune ? kLayerParams : kLoraParams) * 2 * kLayers / stages;
  return schedule + 2 * ring_all_gather_ms(stage_gradient_bytes, replicas, link);
}

void print_rows(const Setup& setup, const Link& link) {
  const double global_tokens_per_replica = setup.micro_batches * kSeq;
  // ZeRO-3 processes the same global batch as every pipeline row: D M = W M / P micro-batches.
  for (int stages : {2, 4}) {
    const int replicas = setup.world / stages;
    const double tokens = replicas * global_tokens_per_replica;
    const double zero3 = zero3_step_ms(setup, stages, link);
    std::printf("| %s | %d | ZeRO-3 (the batch of P=%d) | 1 | %d | %d per rank | %.1f | %.0f | 1.00 | - | - |\n",
                setup.tuning, setup.world, stages, setup.world, setup.micro_batches / stages, zero3,
                tokens / zero3 * 1e3);
    for (zt::PipeScheduleKind kind : {zt::PipeScheduleKind::OneFOneB, zt::PipeScheduleKind::Interleaved}) {
      const int chunks = kind == zt::PipeScheduleKind::Interleaved ? 2 : 1;
      const double step = pipeline_step_ms(setup, kind, stages, chunks, true, link);
      const double no_recompute = pipeline_step_ms(setup, kind, stages, chunks, false, link);
      std::string name = zt::pipe_schedule_name(kind) + (chunks > 1 ? " V=2" : "");
      std::printf("| %s | %d | %s | %d | %d | %d | %.1f | %.0f | %.2f | %.1f | %.2f |\n", setup.tuning, setup.world,
                  name.c_str(), stages, replicas, setup.micro_batches, step, tokens / step * 1e3, zero3 / step,
                  no_recompute, zero3 / no_recompute);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    double bandwidth_gb_s = 25.0, alpha_us = 10.0;
    for (int i = 1; i + 1 < argc; i += 2) {
      if (std::strcmp(argv[i], "--bandwidth") == 0) bandwidth_gb_s = std::atof(argv[i + 1]);
      else if (std::strcmp(argv[i], "--alpha") == 0) alpha_us = std::atof(argv[i + 1]);
      else throw std::runtime_error(std::string("unknown option ") + argv[i] + " (--bandwidth GB/s, --alpha us)");
    }
    if (argc % 2 == 0 || bandwidth_gb_s <= 0 || alpha_us < 0)
      throw std::runtime_error("usage: bench_pipe_vs_zero3 [--bandwidth GB/s > 0] [--alpha us >= 0]");
    const Link link{bandwidth_gb_s * 1e6, alpha_us * 1e-3};
    for (bool full : {false, true}) {
      const LayerTimes layer = measured_layer_times(full);
      std::printf("%s: per layer and micro-batch forward %.3f ms, backward %.3f ms\n", full ? "full" : "lora",
                  layer.forward, layer.backward);
    }
    std::printf("per layer: all-gather of %.1f MB bf16 parameters at W=8: %.3f ms; activation message %.1f MB: "
                "%.3f ms (%.0f GB/s, alpha %.0f us)\n\n",
                kLayerParams * 2 / 1e6, ring_all_gather_ms(kLayerParams * 2, 8, link), kActivationBytes / 1e6,
                link.alpha_ms + kActivationBytes / link.bytes_per_ms, bandwidth_gb_s, alpha_us);
    std::printf("| tuning | W | configuration | P | D | M | step time (ms) | tokens/s | speed vs ZeRO-3 | "
                "step time without recompute (ms) | its speed vs ZeRO-3 |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (const char* tuning : {"lora", "full"})
      for (int world : {8, 16})
        for (int micro_batches : {8, 32})
          print_rows({tuning, std::strcmp(tuning, "full") == 0, world, micro_batches}, link);
    return 0;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "bench_pipe_vs_zero3: %s\n", error.what());
    return 1;
  }
}
