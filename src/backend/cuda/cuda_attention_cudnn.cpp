// cuDNN fused attention through cudnn-frontend's graph API (see cuda_attention_cudnn.h): graph
// construction per shape, the cache, the packed (ragged) index arrays, and execution.
#include "backend/cuda/cuda_attention_cudnn.h"

#include <cudnn.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

// cudnn-frontend is header-only; its JSON (de)serialisation is not used here, and leaving it out
// keeps its bundled nlohmann-json away from the Debian one the rest of zerotune includes.
#define CUDNN_FRONTEND_SKIP_JSON_LIB 1
// On the emulated device every CUDA source is compiled with the kernels' built-ins as macros
// (src/emu/emu_device.h: gridDim, blockDim, ...); the frontend's headers use those names for
// parameters, so the macros are hidden while they are read. This file has no kernels.
#if defined(ZT_CUDA_EMULATE)
#pragma push_macro("threadIdx")
#pragma push_macro("blockIdx")
#pragma push_macro("blockDim")
#pragma push_macro("gridDim")
#pragma push_macro("warpSize")
#undef threadIdx
#undef blockIdx
#undef blockDim
#undef gridDim
#undef warpSize
#endif
#include <cudnn_frontend.h>
#if defined(ZT_CUDA_EMULATE)
#pragma pop_macro("threadIdx")
#pragma pop_macro("blockIdx")
#pragma pop_macro("blockDim")
#pragma pop_macro("gridDim")
#pragma pop_macro("warpSize")
#endif

#include "backend/attention_scratch_rules.h"
#include "backend/buffer.h"
#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "core/error.h"

namespace zt::cuda {

namespace fe = cudnn_frontend;

namespace {

// A cuDNN call that failed: zt::Error naming the call, cuDNN's status and message.
void check_cudnn(cudnnStatus_t status, const char* call) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  char message[256] = {};
  cudnnGetLastErrorString(message, sizeof(message));
  fail("cudnn: ", call, " failed: ", cudnnGetErrorString(status), message[0] ? " (" : "", message,
       message[0] ? ")" : "");
}
#define ZT_CUDNN_CHECK(call) check_cudnn((call), #call)

// A cudnn-frontend step that failed: its message, or "" when it succeeded.
std::string failure_of(fe::error_t error, const char* step) {
  if (error.is_good()) return "";
  return cat(step, ": ", error.get_message());
}

// Tensor uids of the variant packs.
enum Uid : int64_t {
  kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV,
  kSeqLen,       // int32 [B',1,1,1]: tokens of each sequence (packed rows)
  kRaggedQ,      // int32 [B'+1,1,1,1]: element offset of each sequence in q-like tensors
  kRaggedKV,     // ... in k-like tensors
  kRaggedStats,  // ... in the THD stats scratch
};

fe::DataType_t io_type(DType dtype) {
  return dtype == DType::BF16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF;
}

// What a graph depends on. Packed rows: `batch` is the bucketed sequence count B' and `time`
// the bucketed longest sequence S (the tokens live at ragged offsets instead).
struct GraphKey {
  DType dtype;
  int batch, time, heads, kv_heads, head_dim;
  float scale;
  bool packed;
  auto tie() const { return std::tie(dtype, batch, time, heads, kv_heads, head_dim, scale, packed); }
  bool operator<(const GraphKey& other) const { return tie() < other.tie(); }
};

// q-like [B,H,S,D] over the rows' [.., T, H, D] memory (k-like with Hkv heads). Packed: the
// batch stride is replaced by the ragged offsets.
std::shared_ptr<fe::graph::Tensor_attributes> bhsd(fe::graph::Graph& graph, const char* name,
                                                   int64_t uid, const GraphKey& key, int heads,
                                                   std::shared_ptr<fe::graph::Tensor_attributes> ragged) {
  const int64_t b = key.batch, s = key.time, h = heads, d = key.head_dim;
  auto tensor = graph.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid)
                                 .set_dim({b, h, s, d}).set_stride({s * h * d, d, h * d, 1}));
  if (ragged) tensor->set_ragged_offset(ragged);
  return tensor;
}
void as_bhsd_output(const std::shared_ptr<fe::graph::Tensor_attributes>& tensor, int64_t uid,
                    const GraphKey& key, int heads,
                    std::shared_ptr<fe::graph::Tensor_attributes> ragged) {
  const int64_t b = key.batch, s = key.time, h = heads, d = key.head_dim;
  tensor->set_output(true).set_uid(uid).set_dim({b, h, s, d}).set_stride({s * h * d, d, h * d, 1});
  if (ragged) tensor->set_ragged_offset(ragged);
}
// Stats [B,H,S,1] fp32: lse[B,H,T] itself, or (packed) the THD scratch [tokens, H].
void set_stats_layout(fe::graph::Tensor_attributes& stats, const GraphKey& key,
                      std::shared_ptr<fe::graph::Tensor_attributes> ragged) {
  const int64_t b = key.batch, s = key.time, h = key.heads;
  stats.set_uid(kStats).set_data_type(fe::DataType_t::FLOAT).set_dim({b, h, s, 1});
  if (ragged) {
    stats.set_stride({s * h, 1, h, 1}).set_ragged_offset(ragged);
  } else {
    stats.set_stride({h * s, s, 1, 1});
  }
}

// The index tensors of a packed graph (null when not packed).
struct PackedInputs {
  std::shared_ptr<fe::graph::Tensor_attributes> seq_len, ragged_q, ragged_kv, ragged_stats;
};
PackedInputs packed_inputs(fe::graph::Graph& graph, const GraphKey& key) {
  if (!key.packed) return {};
  auto index = [&](const char* name, int64_t uid, int64_t rows) {
    return graph.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid)
                            .set_dim({rows, 1, 1, 1}).set_stride({1, 1, 1, 1})
                            .set_data_type(fe::DataType_t::INT32));
  };
  return {index("seq_len", kSeqLen, key.batch), index("ragged_q", kRaggedQ, key.batch + 1),
          index("ragged_kv", kRaggedKV, key.batch + 1),
          index("ragged_stats", kRaggedStats, key.batch + 1)};
}

std::shared_ptr<fe::graph::Graph> new_graph(const GraphKey& key) {
  auto graph = std::make_shared<fe::graph::Graph>();
  graph->set_io_data_type(io_type(key.dtype))
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return graph;
}

std::shared_ptr<fe::graph::Graph> forward_graph(const GraphKey& key) {
  auto graph = new_graph(key);
  const PackedInputs packed = packed_inputs(*graph, key);
  auto q = bhsd(*graph, "q", kQ, key, key.heads, packed.ragged_q);
  auto k = bhsd(*graph, "k", kK, key, key.kv_heads, packed.ragged_kv);
  auto v = bhsd(*graph, "v", kV, key, key.kv_heads, packed.ragged_kv);
  auto options = fe::graph::SDPA_attributes().set_name("attention_forward").set_generate_stats(true)
                     .set_causal_mask(true).set_attn_scale(key.scale);
  if (key.packed) {
    options.set_padding_mask(true).set_seq_len_q(packed.seq_len).set_seq_len_kv(packed.seq_len);
  }
  auto [out, stats] = graph->sdpa(q, k, v, options);
  as_bhsd_output(out, kO, key, key.heads, packed.ragged_q);
  stats->set_output(true);
  set_stats_layout(*stats, key, packed.ragged_stats);
  return graph;
}

std::shared_ptr<fe::graph::Graph> backward_graph(const GraphKey& key, bool deterministic) {
  auto graph = new_graph(key);
  const PackedInputs packed = packed_inputs(*graph, key);
  auto q = bhsd(*graph, "q", kQ, key, key.heads, packed.ragged_q);
  auto k = bhsd(*graph, "k", kK, key, key.kv_heads, packed.ragged_kv);
  auto v = bhsd(*graph, "v", kV, key, key.kv_heads, packed.ragged_kv);
  auto out = bhsd(*graph, "o", kO, key, key.heads, packed.ragged_q);
  auto dout = bhsd(*graph, "dO", kDO, key, key.heads, packed.ragged_q);
  auto stats = graph->tensor(fe::graph::Tensor_attributes().set_name("stats"));
  set_stats_layout(*stats, key, packed.ragged_stats);
  auto options = fe::graph::SDPA_backward_attributes().set_name("attention_backward")
                     .set_causal_mask(true).set_attn_scale(key.scale)
                     .set_deterministic_algorithm(deterministic);
  if (key.packed) {
    options.set_padding_mask(true).set_seq_len_q(packed.seq_len).set_seq_len_kv(packed.seq_len);
  }
  auto [dq, dk, dv] = graph->sdpa_backward(q, k, v, out, dout, stats, options);
  as_bhsd_output(dq, kDQ, key, key.heads, packed.ragged_q);
  as_bhsd_output(dk, kDK, key, key.kv_heads, packed.ragged_kv);
  as_bhsd_output(dv, kDV, key, key.kv_heads, packed.ragged_kv);
  return graph;
}

// Validates and builds a graph's plan; "" or the reason it cannot run.
std::string build(fe::graph::Graph& graph, cudnnHandle_t handle) {
  std::string reason = failure_of(graph.validate(), "validate");
  if (reason.empty()) reason = failure_of(graph.build_operation_graph(handle), "build_operation_graph");
  if (reason.empty()) reason = failure_of(graph.create_execution_plans({fe::HeurMode_t::A}), "create_execution_plans");
  if (reason.empty()) reason = failure_of(graph.check_support(handle), "check_support");
  if (reason.empty()) reason = failure_of(graph.build_plans(handle), "build_plans");
  return reason;
}

struct GraphPair {
  std::shared_ptr<fe::graph::Graph> forward, backward;
  int64_t forward_workspace = 0, backward_workspace = 0;
  std::string unsupported;  // "" when both built
};

}  // namespace

// The packed index arrays of one batch geometry, on the device.
struct PackedIndex {
  // The key: the host sample starts it was made from and the rows' tokens (B*T), on which the last
  // sample's length and the empty sequences' offsets depend. One row's starts are {0} at every T:
  // without the tokens a longer row reused the shorter one's lengths (micro-batch 1 on varied
  // lengths: its last tokens never attended, NaN on the emulated cuDNN; a shorter row, read and
  // written past its end).
  std::vector<int64_t> starts;
  int64_t tokens = 0;
  int sequences = 0;
  Buffer arrays;                // int32: seq_len[B'], ragged_q, ragged_kv, ragged_stats [B'+1] each
  int32_t* seq_len = nullptr;
  int32_t* ragged_q = nullptr;
  int32_t* ragged_kv = nullptr;
  int32_t* ragged_stats = nullptr;
};

struct CudnnAttention::Impl {
  CudaBackendImpl& backend;
  cudnnHandle_t handle = nullptr;
  std::map<GraphKey, GraphPair> graphs;
  PackedIndex packed;  // the last batch geometry's arrays (rebuilt when the starts change)
  std::vector<int32_t> host_arrays;  // packed.arrays built on the host, uploaded through the backend's staging

  std::string unavailable;  // why cuDNN cannot be used at all (no handle), or ""

  explicit Impl(CudaBackendImpl& owner) : backend(owner) {
    // A cuDNN that does not start (a library without engines for this GPU, a version older than
    // the one built against) makes every call fall back, saying why, rather than fail the run.
    const cudnnStatus_t status = cudnnCreate(&handle);
    if (status != CUDNN_STATUS_SUCCESS) {
      handle = nullptr;
      unavailable = cat("cudnnCreate failed: ", cudnnGetErrorString(status));
      return;
    }
    ZT_CUDNN_CHECK(cudnnSetStream(handle, backend.stream()));
  }
  ~Impl() {
    if (handle) cudnnDestroy(handle);
  }

  GraphKey key_of(const AttentionCall& call) const {
    GraphKey key{call.dtype, call.batch, call.time, call.heads, call.kv_heads, call.head_dim,
                 call.scale, !call.sample_starts.empty()};
    if (key.packed) {
      const auto [sequences, longest] = geometry(call);
      // Rounded up to buckets (sequences to B times a power of two, the longest to a power of
      // two of at least 64, at most T): log-many graphs per run. The memory model counts the
      // workspace with the same functions (backend/attention_scratch_rules.h).
      key.batch = static_cast<int>(cudnn_ragged_batch(sequences, call.batch));
      key.time = static_cast<int>(cudnn_ragged_time(longest, call.time));
    }
    return key;
  }

  // (number of samples, longest sample) of packed rows.
  static std::pair<int, int> geometry(const AttentionCall& call) {
    const auto& starts = call.sample_starts;
    const int64_t end = int64_t{call.batch} * call.time;
    int64_t longest = 0;
    for (size_t i = 0; i < starts.size(); ++i) {
      longest = std::max(longest, (i + 1 < starts.size() ? starts[i + 1] : end) - starts[i]);
    }
    return {static_cast<int>(starts.size()), static_cast<int>(longest)};
  }

  GraphPair& graphs_for(const GraphKey& key) {
    auto found = graphs.find(key);
    if (found != graphs.end()) return found->second;
    GraphPair pair;
    pair.forward = forward_graph(key);
    pair.unsupported = build(*pair.forward, handle);
    if (pair.unsupported.empty()) {
      // Deterministic first: the same bits on every run, so a resumed run replays exactly.
      // Where cuDNN has no deterministic engine for the case, its atomic one (said once).
      pair.backward = backward_graph(key, true);
      pair.unsupported = build(*pair.backward, handle);
      if (!pair.unsupported.empty()) {
        const std::string deterministic_failure = pair.unsupported;
        pair.backward = backward_graph(key, false);
        pair.unsupported = build(*pair.backward, handle);
        if (pair.unsupported.empty()) {
          std::fprintf(stderr, "zerotune: attention backward (%s, H=%d Hkv=%d D=%d): cuDNN has no "
                       "deterministic engine (%s); its results may differ in the last bits between runs\n",
                       dtype_name(key.dtype), key.heads, key.kv_heads, key.head_dim,
                       deterministic_failure.c_str());
        }
      }
      if (!pair.unsupported.empty()) pair.unsupported = "backward: " + pair.unsupported;
    } else {
      pair.unsupported = "forward: " + pair.unsupported;
    }
    if (pair.unsupported.empty()) {
      ZT_CHECK(pair.forward->get_workspace_size(pair.forward_workspace).is_good() &&
                   pair.backward->get_workspace_size(pair.backward_workspace).is_good(),
               "cudnn: attention graphs built but their workspace size is unknown");
    }
    return graphs.emplace(key, std::move(pair)).first->second;
  }

  // The packed index arrays for this call's samples (uploaded once per batch geometry).
  void prepare_packed(const AttentionCall& call, const GraphKey& key);
  void run(fe::graph::Graph& graph, const char* op, int64_t workspace_bytes, std::unordered_map<int64_t, void*>& pack,
           const GraphKey& key);
};

void CudnnAttention::Impl::prepare_packed(const AttentionCall& call, const GraphKey& key) {
  const auto& starts = call.sample_starts;
  const int64_t end = int64_t{call.batch} * call.time;
  if (packed.sequences == key.batch && packed.tokens == end && packed.starts.size() == starts.size() &&
      std::equal(starts.begin(), starts.end(), packed.starts.begin())) {
    return;
  }
  const int sequences = key.batch;  // bucketed: the extra ones are empty
  const size_t count = size_t{4} * sequences + 3;
  host_arrays.resize(count);
  int32_t* const staging = host_arrays.data();
  int32_t* seq_len = staging;
  int32_t* ragged_q = seq_len + sequences;
  int32_t* ragged_kv = ragged_q + sequences + 1;
  int32_t* ragged_stats = ragged_kv + sequences + 1;
  const int64_t q_row = int64_t{call.heads} * call.head_dim, kv_row = int64_t{call.kv_heads} * call.head_dim;
  ZT_CHECK(end * q_row < (int64_t{1} << 31), "attention: packed rows of ", end, " tokens x ", q_row,
           " elements exceed cuDNN's int32 ragged offsets");
  for (int i = 0; i <= sequences; ++i) {
    // Sequence i < samples: a sample; beyond: empty, pointing at the end of the rows.
    const int64_t start = i < static_cast<int>(starts.size()) ? starts[i] : end;
    if (i < sequences) {
      const int64_t next = i + 1 < static_cast<int>(starts.size()) ? starts[i + 1] : end;
      seq_len[i] = static_cast<int32_t>(next - start);
    }
    ragged_q[i] = static_cast<int32_t>(start * q_row);
    ragged_kv[i] = static_cast<int32_t>(start * kv_row);
    ragged_stats[i] = static_cast<int32_t>(start * call.heads);
  }
  if (packed.arrays.bytes() < count * sizeof(int32_t)) {
    packed.arrays = backend.scratch(count * sizeof(int32_t));
  }
  // Queued behind the attention calls that read the previous arrays; no host wait.
  backend.upload(packed.arrays.data(), staging, count * sizeof(int32_t));
  auto* device = static_cast<int32_t*>(packed.arrays.data());
  packed.seq_len = device;
  packed.ragged_q = device + (ragged_q - staging);
  packed.ragged_kv = device + (ragged_kv - staging);
  packed.ragged_stats = device + (ragged_stats - staging);
  packed.starts.assign(starts.begin(), starts.end());
  packed.tokens = end;
  packed.sequences = sequences;
}

void CudnnAttention::Impl::run(fe::graph::Graph& graph, const char* op, int64_t workspace_bytes,
                               std::unordered_map<int64_t, void*>& pack, const GraphKey& key) {
  if (key.packed) {
    pack[kSeqLen] = packed.seq_len;
    pack[kRaggedQ] = packed.ragged_q;
    pack[kRaggedKV] = packed.ragged_kv;
    pack[kRaggedStats] = packed.ragged_stats;
  }
  Buffer workspace = backend.scratch(static_cast<size_t>(workspace_bytes));
  fe::error_t status = graph.execute(handle, pack, workspace.data());
  ZT_CHECK(status.is_good(), "cudnn: ", op, " (graph execute) failed: ", status.get_message());
}

CudnnAttention::CudnnAttention(CudaBackendImpl& backend) : impl_(std::make_unique<Impl>(backend)) {}
CudnnAttention::~CudnnAttention() = default;

std::string CudnnAttention::prepare(const AttentionCall& call) {
  if (call.dtype != DType::BF16 && call.dtype != DType::F16) return "cuDNN's fused attention takes bf16 and fp16 only";
  if (!impl_->unavailable.empty()) return impl_->unavailable;
  return impl_->graphs_for(impl_->key_of(call)).unsupported;
}

void CudnnAttention::forward(const AttentionCall& call, Tensor out, Tensor lse, Tensor q, Tensor k, Tensor v) {
  const GraphKey key = impl_->key_of(call);
  GraphPair& pair = impl_->graphs_for(key);
  ZT_CHECK(pair.unsupported.empty(), "attention_forward: cuDNN cannot run this case: ", pair.unsupported);
  std::unordered_map<int64_t, void*> pack{{kQ, q.data}, {kK, k.data}, {kV, v.data}, {kO, out.data}};
  Buffer stats;  // packed: the THD stats [tokens, H], then scattered into lse[B,H,T]
  if (key.packed) {
    impl_->prepare_packed(call, key);
    stats = impl_->backend.scratch(static_cast<size_t>(lse.numel()) * sizeof(float));
    pack[kStats] = stats.data();
  } else {
    pack[kStats] = lse.data;
  }
  impl_->run(*pair.forward, "attention_forward", pair.forward_workspace, pack, key);
  if (key.packed) {
    transpose_token_heads(impl_->backend.stream(), lse.f32(), static_cast<const float*>(stats.data()),
                          call.batch, call.time, call.heads, /*to_heads_major=*/true);
  }
}

void CudnnAttention::backward(const AttentionCall& call, Tensor dq, Tensor dk, Tensor dv, Tensor dout,
                              Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse) {
  const GraphKey key = impl_->key_of(call);
  GraphPair& pair = impl_->graphs_for(key);
  ZT_CHECK(pair.unsupported.empty(), "attention_backward: cuDNN cannot run this case: ", pair.unsupported);
  std::unordered_map<int64_t, void*> pack{{kQ, q.data},     {kK, k.data},     {kV, v.data},
                                          {kO, out.data},   {kDO, dout.data}, {kDQ, dq.data},
                                          {kDK, dk.data},   {kDV, dv.data}};
  Buffer stats;
  if (key.packed) {
    impl_->prepare_packed(call, key);
    stats = impl_->backend.scratch(static_cast<size_t>(lse.numel()) * sizeof(float));
    transpose_token_heads(impl_->backend.stream(), static_cast<float*>(stats.data()), lse.f32(),
                          call.batch, call.time, call.heads, /*to_heads_major=*/false);
    pack[kStats] = stats.data();
  } else {
    pack[kStats] = lse.data;
  }
  impl_->run(*pair.backward, "attention_backward", pair.backward_workspace, pack, key);
}

}  // namespace zt::cuda
