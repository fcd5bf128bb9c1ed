// The emulated cuDNN's graph interpreter: runs a finalized operation graph (matmul, pointwise,
// reduction, reshape nodes, as cudnn-frontend's composite SDPA forward and backward spell
// attention) on the host, one node after another, with cuDNN's documented semantics:
// - a tensor's element (i0, i1, ..) lives at sum(i_d * stride_d); with a ragged offset tensor
//   the batch stride is replaced by ragged[i0], and an element of batch i0 whose offset is not
//   below ragged[i0 + 1] does not exist (packed sequences: reads give 0, writes are dropped);
// - intermediates (virtual tensors) are fp32, dense row-major here whatever strides they were
//   given (a fused engine never lays them out in memory, and cudnn-frontend gives some of them
//   overlapping strides); outputs are rounded once to their type; matmul operands are rounded
//   to the graph's 16-bit type (tensor cores: P and dS once, as on a GPU) and accumulate in
//   double, like the emulated cuBLASLt;
// - a reshape keeps memory order: y's element at (declared) offset o is x's element at offset o
//   (so a reshape that permutes dims and strides together is a transpose, as the frontend uses it);
// - broadcasting: an input dimension of 1 repeats; a matmul/reduction dimension that divides
//   the other one groups (GQA: query head h reads key head h / (H / Hkv));
// - matmul M/N/K overrides (int32 per batch): outside the first M x N of a batch nothing is
//   written, or the padding value when one is set; K stops at the override.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "emu/emu_cudnn.h"
#include "emu/emu_internal.h"

namespace zt_emu::cudnn {

int64_t TensorInfo::elements() const {
  int64_t count = 1;
  for (int64_t dim : dims) count *= dim;
  return count;
}

size_t type_size(cudnnDataType_t type) {
  switch (type) {
    case CUDNN_DATA_FLOAT: case CUDNN_DATA_INT32: return 4;
    case CUDNN_DATA_HALF: case CUDNN_DATA_BFLOAT16: return 2;
    case CUDNN_DATA_DOUBLE: case CUDNN_DATA_INT64: return 8;
    case CUDNN_DATA_BOOLEAN: case CUDNN_DATA_INT8: return 1;
    default: return 0;
  }
}

namespace {

double load(const void* data, int64_t index, cudnnDataType_t type) {
  switch (type) {
    case CUDNN_DATA_FLOAT: return static_cast<const float*>(data)[index];
    case CUDNN_DATA_DOUBLE: return static_cast<const double*>(data)[index];
    case CUDNN_DATA_HALF: return __half2float(static_cast<const __half*>(data)[index]);
    case CUDNN_DATA_BFLOAT16: return __bfloat162float(static_cast<const __nv_bfloat16*>(data)[index]);
    case CUDNN_DATA_INT32: return static_cast<const int32_t*>(data)[index];
    case CUDNN_DATA_INT64: return static_cast<double>(static_cast<const int64_t*>(data)[index]);
    case CUDNN_DATA_BOOLEAN: case CUDNN_DATA_INT8: return static_cast<const int8_t*>(data)[index];
    default: device_fault("emulated cuDNN: reading an unsupported data type");
  }
}

// Rounds once to the tensor's type (fp32 first, as cuDNN's fp32 compute does).
void store(void* data, int64_t index, cudnnDataType_t type, double value) {
  const float single = static_cast<float>(value);
  switch (type) {
    case CUDNN_DATA_FLOAT: static_cast<float*>(data)[index] = single; break;
    case CUDNN_DATA_DOUBLE: static_cast<double*>(data)[index] = value; break;
    case CUDNN_DATA_HALF: static_cast<__half*>(data)[index] = __float2half_rn(single); break;
    case CUDNN_DATA_BFLOAT16: static_cast<__nv_bfloat16*>(data)[index] = __float2bfloat16_rn(single); break;
    case CUDNN_DATA_INT32: static_cast<int32_t*>(data)[index] = static_cast<int32_t>(value); break;
    case CUDNN_DATA_BOOLEAN: case CUDNN_DATA_INT8: static_cast<int8_t*>(data)[index] = value != 0; break;
    default: device_fault("emulated cuDNN: writing an unsupported data type");
  }
}

// Memory a tensor is read from or written to: device (or by-value host) bytes of `type`, or an
// interpreter-owned fp32 array (virtual tensors; shared by reshapes).
struct Storage {
  void* data = nullptr;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  std::shared_ptr<std::vector<float>> owned;
};

// A tensor's elements: its layout over a storage, with the ragged offsets read at run time.
class View {
 public:
  View(const TensorInfo& info, Storage storage, std::vector<int64_t> strides, std::vector<int64_t> ragged)
      : info_(info), storage_(std::move(storage)), strides_(std::move(strides)), ragged_(std::move(ragged)) {}
  const std::vector<int64_t>& dims() const { return info_.dims; }
  const std::vector<int64_t>& strides() const { return strides_; }
  size_t rank() const { return info_.dims.size(); }
  bool ragged() const { return !ragged_.empty(); }
  // The fp32 array under the view, or null for another type (the interpreter's fast paths).
  float* floats() const { return storage_.type == CUDNN_DATA_FLOAT ? static_cast<float*>(storage_.data) : nullptr; }
  double load_at(int64_t offset) const { return load(storage_.data, offset, storage_.type); }
  void store_at(int64_t offset, double value) const { store(storage_.data, offset, storage_.type, value); }
  // Offset of element `index` (rank entries), or -1 where a ragged batch has no such element.
  int64_t offset(const int64_t* index) const {
    int64_t at = 0;
    size_t d = 0;
    if (!ragged_.empty()) {
      at = ragged_[index[0]];
      d = 1;
    }
    for (; d < info_.dims.size(); ++d) at += index[d] * strides_[d];
    if (!ragged_.empty() && at >= ragged_[index[0] + 1]) return -1;
    return at;
  }
  double read(const int64_t* index) const {
    const int64_t at = offset(index);
    return at < 0 ? 0.0 : load(storage_.data, at, storage_.type);
  }
  void write(const int64_t* index, double value) const {
    const int64_t at = offset(index);
    if (at >= 0) store(storage_.data, at, storage_.type, value);
  }

 private:
  const TensorInfo& info_;
  Storage storage_;
  std::vector<int64_t> strides_;  // of the storage: declared ones, or dense for intermediates
  std::vector<int64_t> ragged_;
};

// Maps an output index to an input's index: dimensions right-aligned, a dimension of 1
// broadcast, a dimension that divides the output's grouped (GQA).
void map_index(const std::vector<int64_t>& out_dims, const int64_t* out, const std::vector<int64_t>& in_dims,
               int64_t* in) {
  const size_t shift = out_dims.size() - in_dims.size();
  for (size_t d = 0; d < in_dims.size(); ++d) {
    const int64_t full = out_dims[d + shift], mine = in_dims[d];
    in[d] = mine == 1 ? 0 : out[d + shift] / (full / mine);
  }
}

// Calls body(index) for every index of `dims`, last dimension fastest.
template <class Body>
void for_each_index(const std::vector<int64_t>& dims, Body body) {
  for (int64_t dim : dims) if (dim == 0) return;
  std::vector<int64_t> index(dims.size(), 0);
  while (true) {
    body(index.data());
    size_t d = dims.size();
    while (d > 0) {
      --d;
      if (++index[d] < dims[d]) break;
      index[d] = 0;
      if (d == 0) return;
    }
    if (dims.empty()) return;
  }
}

double pointwise(int mode, double x, double b, double t, const int64_t* y_index, int64_t axis) {
  switch (mode) {
    case CUDNN_POINTWISE_ADD: return x + b;
    case CUDNN_POINTWISE_SUB: return x - b;
    case CUDNN_POINTWISE_MUL: return x * b;
    case CUDNN_POINTWISE_DIV: return x / b;
    case CUDNN_POINTWISE_MAX: return std::max(x, b);
    case CUDNN_POINTWISE_MIN: return std::min(x, b);
    // Transcendentals in fp32, as the fp32 compute type does them.
    case CUDNN_POINTWISE_EXP: return std::exp(static_cast<float>(x));
    case CUDNN_POINTWISE_LOG: return std::log(static_cast<float>(x));
    case CUDNN_POINTWISE_TANH_FWD: return std::tanh(static_cast<float>(x));
    case CUDNN_POINTWISE_SQRT: return std::sqrt(static_cast<float>(x));
    case CUDNN_POINTWISE_RSQRT: return 1.0f / std::sqrt(static_cast<float>(x));
    case CUDNN_POINTWISE_RECIPROCAL: return 1.0 / x;
    case CUDNN_POINTWISE_NEG: return -x;
    case CUDNN_POINTWISE_ABS: return std::fabs(x);
    case CUDNN_POINTWISE_IDENTITY: return x;
    case CUDNN_POINTWISE_CMP_EQ: return x == b;
    case CUDNN_POINTWISE_CMP_NEQ: return x != b;
    case CUDNN_POINTWISE_CMP_GT: return x > b;
    case CUDNN_POINTWISE_CMP_GE: return x >= b;
    case CUDNN_POINTWISE_CMP_LT: return x < b;
    case CUDNN_POINTWISE_CMP_LE: return x <= b;
    case CUDNN_POINTWISE_LOGICAL_AND: return (x != 0) && (b != 0);
    case CUDNN_POINTWISE_LOGICAL_OR: return (x != 0) || (b != 0);
    case CUDNN_POINTWISE_LOGICAL_NOT: return x == 0;
    case CUDNN_POINTWISE_BINARY_SELECT: return t != 0 ? x : b;  // cuDNN: y = t ? x : b
    case CUDNN_POINTWISE_GEN_INDEX: return static_cast<double>(y_index[axis]);
    default: device_fault("emulated cuDNN: pointwise mode " + std::to_string(mode) + " reached execution");
  }
}

int arity(int mode) {
  switch (mode) {
    case CUDNN_POINTWISE_EXP: case CUDNN_POINTWISE_LOG: case CUDNN_POINTWISE_TANH_FWD:
    case CUDNN_POINTWISE_SQRT: case CUDNN_POINTWISE_RSQRT: case CUDNN_POINTWISE_RECIPROCAL:
    case CUDNN_POINTWISE_NEG: case CUDNN_POINTWISE_ABS: case CUDNN_POINTWISE_IDENTITY:
    case CUDNN_POINTWISE_LOGICAL_NOT: case CUDNN_POINTWISE_GEN_INDEX: return 1;
    case CUDNN_POINTWISE_BINARY_SELECT: return 3;
    case CUDNN_POINTWISE_ADD: case CUDNN_POINTWISE_SUB: case CUDNN_POINTWISE_MUL: case CUDNN_POINTWISE_DIV:
    case CUDNN_POINTWISE_MAX: case CUDNN_POINTWISE_MIN: case CUDNN_POINTWISE_CMP_EQ: case CUDNN_POINTWISE_CMP_NEQ:
    case CUDNN_POINTWISE_CMP_GT: case CUDNN_POINTWISE_CMP_GE: case CUDNN_POINTWISE_CMP_LT: case CUDNN_POINTWISE_CMP_LE:
    case CUDNN_POINTWISE_LOGICAL_AND: case CUDNN_POINTWISE_LOGICAL_OR: return 2;
    default: return 0;  // not implemented
  }
}

// Whether no two elements of a tensor share an offset (its batch dim excluded when ragged).
bool injective(const TensorInfo& t) {
  std::vector<std::pair<int64_t, int64_t>> order;  // (stride, dim) of the dims of size > 1
  for (size_t d = t.ragged ? 1 : 0; d < t.dims.size(); ++d) {
    if (t.dims[d] > 1) order.emplace_back(t.strides[d], t.dims[d]);
  }
  std::sort(order.begin(), order.end());
  for (size_t i = 1; i < order.size(); ++i) {
    if (order[i].first < order[i - 1].first * order[i - 1].second) return false;
  }
  return order.empty() || order[0].first > 0;
}

// "" when `in` can feed an output of `out` dims (same or lower rank; each dim equal, 1, or,
// where `grouping`, a divisor).
std::string check_broadcast(const TensorInfo& in, const std::vector<int64_t>& out, bool grouping, const char* role) {
  if (in.dims.size() > out.size()) return std::string(role) + " has a higher rank than the output";
  const size_t shift = out.size() - in.dims.size();
  for (size_t d = 0; d < in.dims.size(); ++d) {
    const int64_t mine = in.dims[d], full = out[d + shift];
    if (mine == full || mine == 1) continue;
    if (grouping && mine > 0 && full % mine == 0) continue;
    return std::string(role) + " (uid " + std::to_string(in.uid) + ") dimension " + std::to_string(d) + " is " +
           std::to_string(mine) + ", the output's " + std::to_string(full);
  }
  return "";
}

std::string check_op(const Op& op) {
  switch (op.kind) {
    case OpKind::Matmul: {
      const auto &a = *op.x, &b = *op.b, &y = *op.y;
      const size_t r = y.dims.size();
      if (r < 3 || a.dims.size() != r || b.dims.size() != r) return op.what + ": a, b and c must have the same rank >= 3";
      if (a.dims[r - 2] != y.dims[r - 2] || b.dims[r - 1] != y.dims[r - 1] || a.dims[r - 1] != b.dims[r - 2])
        return op.what + ": a [.., M, K] x b [.., K, N] does not give c [.., M, N]";
      std::vector<int64_t> batch(y.dims.begin(), y.dims.end() - 2);
      for (const TensorInfo* in : {&a, &b}) {
        TensorInfo batch_only = *in;
        batch_only.dims.resize(r - 2);
        if (auto why = check_broadcast(batch_only, batch, true, "a matmul operand"); !why.empty()) return op.what + ": " + why;
      }
      for (const Tensor& o : {op.m_override, op.n_override, op.k_override}) {
        if (o && (o->type != CUDNN_DATA_INT32 || o->dims.empty() || o->dims[0] != y.dims[0] || o->elements() != y.dims[0]))
          return op.what + ": an M/N/K override must be int32 [B,1,..] with B = c's first dimension";
      }
      return "";
    }
    case OpKind::Pointwise: {
      const int n = arity(op.mode);
      if (n == 0) return op.what + ": this pointwise mode is not implemented by the emulated cuDNN";
      if (!op.x || (n >= 2 && !op.b) || (n == 3 && !op.t)) return op.what + ": an input is missing";
      if (op.mode == CUDNN_POINTWISE_GEN_INDEX && (op.axis < 0 || op.axis >= static_cast<int64_t>(op.y->dims.size())))
        return op.what + ": the axis is outside the output";
      if (op.mode != CUDNN_POINTWISE_GEN_INDEX) {
        for (const Tensor& in : {op.x, op.b, op.t}) {
          if (!in) continue;
          if (auto why = check_broadcast(*in, op.y->dims, false, "an input"); !why.empty()) return op.what + ": " + why;
        }
      }
      return "";
    }
    case OpKind::Reduction: {
      if (op.mode != CUDNN_REDUCE_TENSOR_ADD && op.mode != CUDNN_REDUCE_TENSOR_MAX && op.mode != CUDNN_REDUCE_TENSOR_MIN &&
          op.mode != CUDNN_REDUCE_TENSOR_AMAX)
        return op.what + ": this reduction is not implemented by the emulated cuDNN";
      if (op.x->dims.size() != op.y->dims.size()) return op.what + ": x and y must have the same rank";
      TensorInfo out = *op.y;
      if (auto why = check_broadcast(out, op.x->dims, true, "the output"); !why.empty()) return op.what + ": " + why;
      return "";
    }
    case OpKind::Reshape:
      if (op.x->elements() != op.y->elements()) return op.what + ": x and y have different element counts";
      if (op.x->ragged && op.x->dims.size() != op.y->dims.size()) return op.what + ": a ragged reshape must keep the rank";
      for (const Tensor& t : {op.x, op.y}) {
        if (!injective(*t)) return op.what + ": tensor uid " + std::to_string(t->uid) + " has strides that put two elements at one address";
      }
      if (op.x->ragged != op.y->ragged && (op.x->ragged == nullptr) != (op.y->ragged == nullptr))
        return op.what + ": x and y must both or neither be ragged";
      return "";
  }
  return "";
}

// The run-time state: each tensor's storage by uid.
class Run {
 public:
  Run(const Graph& graph, const std::unordered_map<int64_t, const void*>& pointers) : graph_(graph) {
    for (const auto& [uid, tensor] : graph.tensors) {
      if (tensor->is_virtual) continue;
      storages_[uid] = Storage{const_cast<void*>(pointers.at(uid)), tensor->type, nullptr};
    }
  }

  // The 16-bit type of the graph's memory tensors (bf16/fp16 attention), else fp32: cuDNN's
  // fused engines multiply on tensor cores, whose operands are 16-bit, so intermediates such as
  // P and dS are rounded to it once before each product (a GPU's numerics, and the reason
  // FlashAttention-style backward gradients differ from an fp32 reference by a few units).
  cudnnDataType_t matmul_operand_type() const {
    for (const auto& [uid, tensor] : graph_.tensors) {
      if (!tensor->is_virtual && (tensor->type == CUDNN_DATA_HALF || tensor->type == CUDNN_DATA_BFLOAT16)) {
        return tensor->type;
      }
    }
    return CUDNN_DATA_FLOAT;
  }

  View view(const Tensor& tensor) {
    if (!tensor->is_virtual) return View(*tensor, storages_.at(tensor->uid), tensor->strides, ragged_of(*tensor));
    // Intermediates: dense row-major fp32, zeros until written (what lies outside a matmul's
    // override reads as 0). Ragged offsets do not apply to them (they are not memory).
    std::vector<int64_t> dense(tensor->dims.size(), 1);
    for (size_t d = dense.size(); d-- > 1;) dense[d - 1] = dense[d] * tensor->dims[d];
    auto found = storages_.find(tensor->uid);
    if (found == storages_.end()) {
      auto owned = std::make_shared<std::vector<float>>(static_cast<size_t>(tensor->elements()), 0.0f);
      found = storages_.emplace(tensor->uid, Storage{owned->data(), CUDNN_DATA_FLOAT, owned}).first;
    }
    return View(*tensor, found->second, dense, {});
  }

 private:
  std::vector<int64_t> ragged_of(const TensorInfo& tensor) {
    if (!tensor.ragged) return {};
    const Storage& storage = storages_.at(tensor.ragged->uid);
    std::vector<int64_t> offsets(static_cast<size_t>(tensor.dims[0]) + 1);
    for (size_t i = 0; i < offsets.size(); ++i) offsets[i] = static_cast<int64_t>(load(storage.data, i, storage.type));
    return offsets;
  }

  const Graph& graph_;
  std::unordered_map<int64_t, Storage> storages_;
};

// Per batch index (c's first dimension) value of an override, or `full` without one.
int64_t override_of(Run& run, const Tensor& tensor, int64_t batch, int64_t full) {
  if (!tensor) return full;
  std::vector<int64_t> index(tensor->dims.size(), 0);
  index[0] = batch;
  return std::clamp<int64_t>(static_cast<int64_t>(run.view(tensor).read(index.data())), 0, full);
}

// value rounded to a matmul operand of `type` (16-bit on tensor cores; fp32 unchanged).
float as_operand(double value, cudnnDataType_t type) {
  const float single = static_cast<float>(value);
  if (type == CUDNN_DATA_HALF) return __half2float(__float2half_rn(single));
  if (type == CUDNN_DATA_BFLOAT16) return __bfloat162float(__float2bfloat16_rn(single));
  return single;
}

void run_matmul(Run& run, const Op& op) {
  const View a = run.view(op.x), b = run.view(op.b), y = run.view(op.y);
  const cudnnDataType_t operand_type = run.matmul_operand_type();
  const size_t r = y.rank();
  const int64_t m_full = y.dims()[r - 2], n_full = y.dims()[r - 1], k_full = a.dims()[r - 1];
  std::vector<int64_t> batch_dims(y.dims().begin(), y.dims().end() - 2);
  std::vector<int64_t> yi(r), ai(r), bi(r);
  std::vector<float> a_rows, b_columns;  // [M][K] and [N][K] of one batch: contiguous dot products
  for_each_index(batch_dims, [&](const int64_t* batch) {
    std::copy(batch, batch + r - 2, yi.begin());
    map_index(batch_dims, batch, std::vector<int64_t>(a.dims().begin(), a.dims().end() - 2), ai.data());
    map_index(batch_dims, batch, std::vector<int64_t>(b.dims().begin(), b.dims().end() - 2), bi.data());
    const int64_t m_n = override_of(run, op.m_override, batch[0], m_full);
    const int64_t n_n = override_of(run, op.n_override, batch[0], n_full);
    const int64_t k_n = override_of(run, op.k_override, batch[0], k_full);
    a_rows.assign(static_cast<size_t>(m_n * k_n), 0.0f);
    b_columns.assign(static_cast<size_t>(n_n * k_n), 0.0f);
    for (int64_t m = 0; m < m_n; ++m) {
      for (int64_t k = 0; k < k_n; ++k) {
        ai[r - 2] = m, ai[r - 1] = k;
        a_rows[m * k_n + k] = as_operand(a.read(ai.data()), operand_type);
      }
    }
    for (int64_t n = 0; n < n_n; ++n) {
      for (int64_t k = 0; k < k_n; ++k) {
        bi[r - 2] = k, bi[r - 1] = n;
        b_columns[n * k_n + k] = as_operand(b.read(bi.data()), operand_type);
      }
    }
    blocked_dot_products(a_rows.data(), b_columns.data(), static_cast<size_t>(m_n), static_cast<size_t>(n_n),
                         static_cast<size_t>(k_n), [&](size_t m, size_t n, double sum) {
                           yi[r - 2] = static_cast<int64_t>(m), yi[r - 1] = static_cast<int64_t>(n);
                           y.write(yi.data(), static_cast<float>(sum));  // the fp32 accumulator's value
                         });
    if (op.has_padding) {  // what lies outside the overrides
      for (int64_t m = 0; m < m_full; ++m) {
        for (int64_t n = 0; n < n_full; ++n) {
          if (m < m_n && n < n_n) continue;
          yi[r - 2] = m, yi[r - 1] = n;
          y.write(yi.data(), op.padding);
        }
      }
    }
  });
}

// Pointwise without ragged offsets: every offset is linear in y's index, so one walk over y's
// elements keeps a running offset per tensor (a broadcast dimension steps by 0), the last
// dimension in an inner loop. The same values as the general loop below, several times faster
// (attention's S x S score nodes); with every tensor fp32 (the virtual intermediates) the
// elements are read and written as floats directly, with the same roundings as load/store.
void run_pointwise_strided(const Op& op, const View& y, const std::vector<View>& inputs) {
  const size_t rank = y.rank(), count = inputs.size() + 1;  // inputs, then y
  if (op.y->elements() == 0) return;
  if (rank == 0) {  // a scalar
    double values[3] = {0, 0, 0};
    for (size_t i = 0; i < inputs.size(); ++i) values[i] = inputs[i].load_at(0);
    y.store_at(0, static_cast<float>(pointwise(op.mode, values[0], values[1], values[2], nullptr, op.axis)));
    return;
  }
  std::vector<std::vector<int64_t>> steps(count, std::vector<int64_t>(rank, 0));
  for (size_t i = 0; i < inputs.size(); ++i) {
    const size_t shift = rank - inputs[i].rank();
    for (size_t d = shift; d < rank; ++d) {
      steps[i][d] = inputs[i].dims()[d - shift] == 1 ? 0 : inputs[i].strides()[d - shift];
    }
  }
  steps[count - 1] = y.strides();
  const float* in_floats[3] = {nullptr, nullptr, nullptr};
  bool all_floats = y.floats() != nullptr;
  for (size_t i = 0; i < inputs.size(); ++i) {
    in_floats[i] = inputs[i].floats();
    all_floats = all_floats && in_floats[i] != nullptr;
  }
  const int64_t inner = y.dims()[rank - 1], outer = op.y->elements() / inner;
  std::vector<int64_t> index(rank, 0), offsets(count, 0);
  for (int64_t row = 0; row < outer; ++row) {
    for (int64_t x = 0; x < inner; ++x) {
      index[rank - 1] = x;
      double values[3] = {0, 0, 0};
      for (size_t i = 0; i < inputs.size(); ++i) {
        const int64_t at = offsets[i] + x * steps[i][rank - 1];
        values[i] = all_floats ? in_floats[i][at] : inputs[i].load_at(at);
      }
      const float result = static_cast<float>(pointwise(op.mode, values[0], values[1], values[2], index.data(), op.axis));
      const int64_t at = offsets[count - 1] + x * steps[count - 1][rank - 1];
      if (all_floats) {
        y.floats()[at] = result;
      } else {
        y.store_at(at, result);
      }
    }
    index[rank - 1] = 0;
    for (size_t d = rank - 1; d-- > 0;) {  // the next row, earlier dimensions slower
      for (size_t i = 0; i < count; ++i) offsets[i] += steps[i][d];
      if (++index[d] < y.dims()[d]) break;
      for (size_t i = 0; i < count; ++i) offsets[i] -= steps[i][d] * y.dims()[d];
      index[d] = 0;
    }
  }
}

void run_pointwise(Run& run, const Op& op) {
  const View y = run.view(op.y);
  const bool gen_index = op.mode == CUDNN_POINTWISE_GEN_INDEX;
  std::vector<View> inputs;
  for (const Tensor& in : {op.x, op.b, op.t}) {
    if (in && !gen_index) inputs.push_back(run.view(in));
  }
  bool ragged = y.ragged();
  for (const View& in : inputs) ragged = ragged || in.ragged();
  if (!ragged) return run_pointwise_strided(op, y, inputs);
  std::vector<std::vector<int64_t>> in_index;
  for (const View& in : inputs) in_index.emplace_back(in.rank());
  for_each_index(y.dims(), [&](const int64_t* index) {
    double values[3] = {0, 0, 0};
    for (size_t i = 0; i < inputs.size(); ++i) {
      map_index(y.dims(), index, inputs[i].dims(), in_index[i].data());
      values[i] = inputs[i].read(in_index[i].data());
    }
    // Intermediates are fp32: each node's result is rounded to fp32 before it is stored.
    y.write(index, static_cast<float>(pointwise(op.mode, values[0], values[1], values[2], index, op.axis)));
  });
}

// Whether every dimension of y is x's or 1 (a reduction without grouping).
bool reduces_by_broadcast(const std::vector<int64_t>& x_dims, const std::vector<int64_t>& y_dims) {
  for (size_t d = 0; d < x_dims.size(); ++d) {
    if (y_dims[d] != x_dims[d] && y_dims[d] != 1) return false;
  }
  return true;
}

void run_reduction(Run& run, const Op& op) {
  const View x = run.view(op.x), y = run.view(op.y);
  const bool is_max = op.mode == CUDNN_REDUCE_TENSOR_MAX || op.mode == CUDNN_REDUCE_TENSOR_AMAX;
  const double start = is_max ? -std::numeric_limits<double>::infinity()
                       : op.mode == CUDNN_REDUCE_TENSOR_MIN ? std::numeric_limits<double>::infinity() : 0.0;
  auto accumulate = [&](double& slot, double value) {
    if (op.mode == CUDNN_REDUCE_TENSOR_ADD) slot += value;
    else if (op.mode == CUDNN_REDUCE_TENSOR_AMAX) slot = std::max(slot, std::fabs(value));
    else if (is_max) slot = std::max(slot, value);
    else slot = std::min(slot, value);
  };
  // Accumulate by y's dense index (x in order: deterministic), then store once.
  std::vector<int64_t> y_dims = y.dims();
  std::vector<double> acc(static_cast<size_t>(op.y->elements()), start);
  std::vector<int64_t> yi(y.rank());
  auto dense = [&](const int64_t* index) {
    int64_t at = 0;
    for (size_t d = 0; d < y_dims.size(); ++d) at = at * y_dims[d] + index[d];
    return at;
  };
  const size_t rank = x.rank();
  if (!x.ragged() && rank > 0 && op.x->elements() > 0 && reduces_by_broadcast(x.dims(), y_dims)) {
    // The same walk as for_each_index below (x in order, last dimension fastest) with running
    // offsets into x and acc, fp32 read directly where x is fp32 (the score nodes).
    std::vector<int64_t> acc_step(rank, 0);
    for (size_t d = rank, stride = 1; d-- > 0; stride *= static_cast<size_t>(y_dims[d])) {
      acc_step[d] = y_dims[d] == 1 ? 0 : static_cast<int64_t>(stride);
    }
    const std::vector<int64_t>& x_step = x.strides();
    const float* x_floats = x.floats();
    const int64_t inner = x.dims()[rank - 1], outer = op.x->elements() / inner;
    std::vector<int64_t> index(rank, 0);
    int64_t x_at = 0, acc_at = 0;
    for (int64_t row = 0; row < outer; ++row) {
      for (int64_t e = 0; e < inner; ++e) {
        const int64_t at = x_at + e * x_step[rank - 1];
        accumulate(acc[static_cast<size_t>(acc_at + e * acc_step[rank - 1])],
                   x_floats ? static_cast<double>(x_floats[at]) : x.load_at(at));
      }
      for (size_t d = rank - 1; d-- > 0;) {  // the next row
        x_at += x_step[d];
        acc_at += acc_step[d];
        if (++index[d] < x.dims()[d]) break;
        x_at -= x_step[d] * x.dims()[d];
        acc_at -= acc_step[d] * x.dims()[d];
        index[d] = 0;
      }
    }
  } else {
    for_each_index(x.dims(), [&](const int64_t* index) {
      if (x.offset(index) < 0) return;  // a ragged batch's missing element takes no part
      map_index(x.dims(), index, y_dims, yi.data());
      accumulate(acc[dense(yi.data())], x.read(index));
    });
  }
  for_each_index(y_dims, [&](const int64_t* index) { y.write(index, static_cast<float>(acc[dense(index)])); });
}

// x's index holding the element at declared offset `offset` (within a batch when ragged), or
// false where x has none there.
bool index_at(const TensorInfo& x, int64_t offset, int64_t* index) {
  const size_t first = x.ragged ? 1 : 0;
  std::vector<size_t> order;  // dims by decreasing stride
  for (size_t d = first; d < x.dims.size(); ++d) {
    index[d] = 0;
    if (x.dims[d] > 1) order.push_back(d);
  }
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return x.strides[a] > x.strides[b]; });
  for (size_t d : order) {
    index[d] = offset / x.strides[d];
    offset -= index[d] * x.strides[d];
    if (index[d] >= x.dims[d]) return false;
  }
  return offset == 0;
}

// y[j] = x[the index of x at y's declared offset of j]: the memory order kept (see the top).
void run_reshape(Run& run, const Op& op) {
  const View x = run.view(op.x), y = run.view(op.y);
  const TensorInfo &xi = *op.x, &yi = *op.y;
  std::vector<int64_t> from(xi.dims.size(), 0);
  for_each_index(yi.dims, [&](const int64_t* index) {
    int64_t offset = 0;
    for (size_t d = yi.ragged ? 1 : 0; d < yi.dims.size(); ++d) offset += index[d] * yi.strides[d];
    if (xi.ragged) from[0] = index[0];
    if (!index_at(xi, offset, from.data())) device_fault("emulated cuDNN: " + op.what + " reads past its input's layout");
    y.write(index, x.read(from.data()));
  });
}

}  // namespace

std::string check_graph(const Graph& graph) {
  // Every virtual input must have been produced by an earlier node: the interpreter runs the
  // nodes in the order given (cudnn-frontend gives them in topological order).
  std::unordered_map<int64_t, bool> produced;
  for (const Op& op : graph.ops) {
    if (auto why = check_op(op); !why.empty()) return why;
    for (const Tensor& in : {op.x, op.b, op.t, op.m_override, op.n_override, op.k_override}) {
      if (in && in->is_virtual && !produced.count(in->uid))
        return op.what + ": its input uid " + std::to_string(in->uid) +
               " is virtual but no earlier operation produces it (cycle, or not in topological order)";
    }
    if (op.y->by_value) return op.what + ": the output cannot be a by-value scalar";
    produced[op.y->uid] = true;
  }
  return "";
}

void run_graph(const Graph& graph, const std::unordered_map<int64_t, const void*>& pointers) {
  Run run(graph, pointers);
  for (const Op& op : graph.ops) {
    switch (op.kind) {
      case OpKind::Matmul: run_matmul(run, op); break;
      case OpKind::Pointwise: run_pointwise(run, op); break;
      case OpKind::Reduction: run_reduction(run, op); break;
      case OpKind::Reshape: run_reshape(run, op); break;
    }
  }
}

}  // namespace zt_emu::cudnn
