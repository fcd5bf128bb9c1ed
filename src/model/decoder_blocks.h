// DecoderBlocks: a family's L transformer blocks with explicit forward and backward, as the
// shared decoder skeleton (decoder.cpp) drives them. The skeleton owns everything around the
// blocks (embeddings, the residual stream, activation checkpointing, ZeRO unit hooks, the
// final norm and the head, FLOP counts); a family file owns only its block's math.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "core/rng.h"
#include "model/kv_cache.h"
#include "model/linear.h"
#include "model/param_store.h"

namespace zt {

struct BlockOptions {
  float lora_scaling = 0.0f;
  float lora_dropout = 0.0f;
  // The layers [first_layer, end_layer) the blocks hold (a pipeline stage's: pipe/stage_partition.h);
  // end_layer -1: through the last. Layers keep their model-wide index in every call.
  int64_t first_layer = 0;
  int64_t end_layer = -1;
};

// Per-module timing for `--profile-step` (the trainer's flops profiler): the model reports each
// piece of work as (module, FLOPs, seconds); module is embedding, attention, mlp, norm or head.
class ModuleTimer {
 public:
  virtual ~ModuleTimer() = default;
  virtual void record(const char* module, double flops, double seconds) = 0;
};

// What every block call needs besides its tensors.
struct BlockPass {
  int64_t batch = 0, seq = 0;          // B, T (rows N = B*T)
  double attention_pairs = 0.0;        // causal (query, key) pairs of the micro-batch (FLOP counts)
  Tensor positions;                    // int32 [B*T]: each token's position in its sample (packed rows)
  const DropoutContext* dropout = nullptr;
  Tensor lora_dz, lora_scratch;        // shared LoRA scratch of LinearLayer::backward
  ModuleTimer* timer = nullptr;        // --profile-step, or null
  KvCache* cache = nullptr;            // generation: the keys and values of earlier positions (kv_cache.h)
  int64_t rows() const { return batch * seq; }
  AttentionPass attention() const { return AttentionPass{batch, seq, positions, cache}; }
};

// What one block's forward keeps for its backward (one per layer, or one shared by all layers
// under activation checkpointing, which recomputes the forward before each backward).
class BlockSaved {
 public:
  virtual ~BlockSaved() = default;
};

class DecoderBlocks {
 public:
  virtual ~DecoderBlocks() = default;
  virtual std::unique_ptr<BlockSaved> make_saved() const = 0;
  // Grows `saved`, and the gradient workspace shared by all blocks, for B x T.
  virtual void reserve(BlockSaved& saved, int64_t batch, int64_t seq) = 0;
  // out[N,C] = block_layer(x[N,C]); saves what backward needs.
  virtual void forward(int64_t layer, const BlockPass& pass, Tensor x, BlockSaved& saved, Tensor out) = 0;
  // On entry d_residual[N,C] is the gradient of the block's output, on exit that of its input x.
  virtual void backward(int64_t layer, const BlockPass& pass, Tensor x, BlockSaved& saved, Tensor d_residual) = 0;
  // The linear layers of block `layer` (FLOP counts and LoRA scratch sizes).
  virtual std::vector<const LinearLayer*> linears(int64_t layer) const = 0;
};

// The linear layer `prefix + path` of block `layer`, the `index`-th of its block: its LoRA
// dropout masks come from a stream of their own (16 per layer), so no two modules share one.
inline LinearLayer block_linear(const ParamStore& store, const std::string& prefix, const char* path,
                                const BlockOptions& options, int64_t layer, int index) {
  const uint32_t stream = rng_stream(RngPurpose::LoraDropout, static_cast<uint32_t>(layer * 16 + index + 1));
  return LinearLayer(store, prefix + path, options.lora_scaling, options.lora_dropout, stream);
}

// Runs `work`; with a timer, reports its wall time (device synchronised before and after) and
// FLOPs under `module`.
template <class Work>
void time_module(Backend& backend, ModuleTimer* timer, const char* module, double flops, Work&& work) {
  if (!timer) {
    work();
    return;
  }
  backend.synchronize();
  const auto start = std::chrono::steady_clock::now();
  work();
  backend.synchronize();
  timer->record(module, flops, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

// FLOPs of the GEMMs of `linears` for N rows: forward, or (backward) input gradients plus the
// trainable weights' gradients; 2 per multiply-add.
inline double linear_flops(const std::vector<const LinearLayer*>& linears, int64_t rows, bool backward) {
  double macs = 0.0;
  for (const LinearLayer* linear : linears)
    macs += linear->macs_per_token() + (backward ? linear->trainable_macs_per_token() : 0.0);
  return 2.0 * static_cast<double>(rows) * macs;
}

// FLOPs of causal attention's core for `pairs` (query, key) pairs (BlockPass::attention_pairs):
// QK^T and PV, D multiply-adds per pair and head each; forward. Its backward is twice that.
inline double attention_core_flops(double pairs, int64_t heads, int64_t head_dim) {
  return 4.0 * pairs * static_cast<double>(heads * head_dim);
}

}  // namespace zt
