// The key/value cache of a generation and the blocks' attention entry point (kv_cache.h).
#include "model/kv_cache.h"

#include "core/error.h"

namespace zt {

KvCache::KvCache(Backend& backend, const ModelConfig& config, DType dtype, int64_t capacity)
    : dtype_(dtype), capacity_(capacity), kv_heads_(config.num_key_value_heads), head_dim_(config.head_dim) {
  ZT_CHECK(capacity > 0, "a key/value cache needs room for at least one position, got ", capacity);
  const size_t bytes = static_cast<size_t>(capacity * kv_heads_ * head_dim_) * dtype_size(dtype);
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    keys_.emplace_back(backend, bytes);
    values_.emplace_back(backend, bytes);
  }
}

void KvCache::advance(int64_t tokens) {
  ZT_CHECK(length_ + tokens <= capacity_, "the key/value cache holds ", capacity_, " positions; ", length_,
           " are cached and ", tokens, " more do not fit");
  length_ += tokens;
}

Tensor KvCache::view(const std::vector<Buffer>& buffers, int64_t layer, int64_t count) const {
  ZT_CHECK(count <= capacity_, "the key/value cache holds ", capacity_, " positions, not ", count);
  return buffers[static_cast<size_t>(layer)].view(dtype_, {capacity_, kv_heads_, head_dim_}).rows(0, count).reshaped(
      {1, count, kv_heads_, head_dim_});
}

void block_attention(Backend& backend, const AttentionPass& pass, int64_t layer, Tensor out, Tensor lse, Tensor q,
                     Tensor k, Tensor v, float scale) {
  KvCache* cache = pass.cache;
  if (!cache) {
    backend.attention_forward(out, lse, q, k, v, pass.positions, scale);
    return;
  }
  ZT_CHECK(pass.batch == 1, "a key/value cache holds one sequence; this pass has ", pass.batch, " rows");
  const int64_t first = cache->length(), total = first + pass.seq;  // new positions [first, total)
  ZT_CHECK(total <= cache->capacity(), "the key/value cache holds ", cache->capacity(), " positions; ", first,
           " are cached and ", pass.seq, " more do not fit");
  Tensor keys = cache->keys(layer, total), values = cache->values(layer, total);  // [1, total, Hkv, D]
  const int64_t kv_width = k.numel() / pass.seq;  // Hkv * D
  backend.copy(keys.reshaped({total, kv_width}).rows(first, pass.seq), k.reshaped({pass.seq, kv_width}));
  backend.copy(values.reshaped({total, kv_width}).rows(first, pass.seq), v.reshaped({pass.seq, kv_width}));
  backend.attention_cached_forward(out, q, keys, values, scale);
}

}  // namespace zt
