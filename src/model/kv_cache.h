// KvCache: the keys and values every layer has computed for the positions a generation has seen
// so far (one sequence), on the model's backend, so that each new token runs the model over
// itself alone: prefill the prompt once, then one token at a time. Also the one attention entry
// point the family blocks call (block_attention): training's causal self-attention over the
// pass's own tokens, or, with a cache, the new tokens' keys and values appended to the layer's
// cache and their queries attending over every cached position (Backend::attention_cached_forward).
#pragma once
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "backend/buffer.h"
#include "model/config.h"

namespace zt {

class KvCache {
 public:
  // Room for `capacity` positions of every layer of `config`, stored in `dtype` (the compute dtype).
  KvCache(Backend& backend, const ModelConfig& config, DType dtype, int64_t capacity);

  int64_t length() const { return length_; }      // P: positions cached so far
  int64_t capacity() const { return capacity_; }
  // Keys (or values) of `layer` for positions [0, count): [1, count, Hkv, D].
  Tensor keys(int64_t layer, int64_t count) const { return view(keys_, layer, count); }
  Tensor values(int64_t layer, int64_t count) const { return view(values_, layer, count); }
  // After a pass over `tokens` new positions (every layer has written them).
  void advance(int64_t tokens);
  void clear() { length_ = 0; }  // a new sequence (the buffers are kept)

 private:
  Tensor view(const std::vector<Buffer>& buffers, int64_t layer, int64_t count) const;
  DType dtype_;
  int64_t capacity_ = 0, kv_heads_ = 0, head_dim_ = 0;
  int64_t length_ = 0;
  std::vector<Buffer> keys_, values_;  // L x [capacity, Hkv, D]
};

// What a block's attention reads besides its tensors: the pass's layout and, in generation, the
// cache (null in training).
struct AttentionPass {
  int64_t batch = 0, seq = 0;  // B, T
  Tensor positions;            // int32 [B*T] within-sample positions (training's packed rows)
  KvCache* cache = nullptr;
};

// out[B,T,H,D] = attention of q[B,T,H,D] over k, v[B,T,Hkv,D] (rotary positions already applied).
// Without a cache: causal self-attention within each row's samples (lse[B,H,T] saved for
// backward). With one (B = 1): k and v are written at positions [P, P + T) of `layer`'s cache,
// and the queries, at positions P + t, attend over positions [0, P + t] (lse is not written).
void block_attention(Backend& backend, const AttentionPass& pass, int64_t layer, Tensor out, Tensor lse, Tensor q,
                     Tensor k, Tensor v, float scale);

}  // namespace zt
