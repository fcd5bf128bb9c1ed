// The emulated libcudnn (docs/emulated-device.md, "cuDNN"): the handle functions and the subset
// of cuDNN's backend API that cudnn-frontend's SDPA forward and backward graphs drive, so the
// real frontend headers and the backend's cuda_attention_cudnn.cpp run unchanged.
//
// Descriptors are attribute stores: SetAttribute records the elements as given; Finalize turns a
// descriptor into an immutable value (a TensorInfo, an Op, a Graph; see emu_cudnn.h), refusing
// what the interpreter (emu_cudnn_graph.cpp) does not implement with CUDNN_STATUS_NOT_SUPPORTED
// and a message for cudnnGetLastErrorString. The one engine: global index 0, no knobs, no
// notes; heuristics return it for every supported graph; its plan's workspace is
// plan_workspace(graph) bytes. Execute checks the variant pack, then queues the interpretation on the handle's stream
// (deferred like a kernel: outputs change only when the host waits for the stream).
#include <cudnn.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "emu/emu_cudnn.h"
#include "emu/emu_internal.h"

struct cudnnContext {
  cudaStream_t stream = nullptr;
};

namespace zt_emu::cudnn {
namespace {

using Guard = std::lock_guard<std::recursive_mutex>;

constexpr size_t kVersion = 91900;         // the headers' cuDNN 9.19.0

thread_local std::string last_error;
std::atomic<uint64_t> executions{0};  // plans run (not just queued): tests see the path taken

cudnnStatus_t refuse(cudnnStatus_t status, std::string message) {
  last_error = "emulated cuDNN: " + std::move(message);
  return status;
}

// The plan's workspace: what zerotune's memory model allows a real engine, the same rule
// restated (backend/attention_scratch_rules.h, cudnn_sdpa_plan_workspace_bytes: src/emu includes only
// emu/ headers; gpu-emu.cuda_attention's cudnn_workspace_counted case fails if the two differ).
// Every plan: kPlanAllowance (no NVIDIA document gives the forward's or the atomic backward's
// engine workspace). The deterministic SDPA backward, which cudnn-frontend spells without its
// fp32 dQ accumulator (the dP-workspace decomposition: the engine keeps dS for a separate dQ
// product), also dS in the I/O type: B x H x ceil64(S_q) x ceil128(S_kv) x 2 bytes, the
// frontend's own estimate (required_dp_workspace_bytes_sm90 in
// cudnn_frontend/node/scaled_dot_product_flash_attention.h).
constexpr int64_t kPlanAllowance = int64_t{2} << 20;

int64_t plan_workspace(const Graph& graph) {
  const Op* scores = nullptr;  // the first matmul: S = Q K^T [B, H, S_q, S_kv]
  const Op* last = nullptr;    // the backward's last: dQ = dS K
  bool backward = false;       // only the backward transposes (reshapes) P and dS
  for (const Op& op : graph.ops) {
    if (op.kind == OpKind::Matmul) {
      if (!scores) scores = &op;
      last = &op;
    }
    backward = backward || op.kind == OpKind::Reshape;
  }
  if (!backward || !scores || scores->y->dims.size() != 4) return kPlanAllowance;
  if (last->y->is_virtual || last->y->type == CUDNN_DATA_FLOAT) return kPlanAllowance;  // dQ accumulated in fp32
  const std::vector<int64_t>& dims = scores->y->dims;
  const auto round_up = [](int64_t value, int64_t multiple) { return (value + multiple - 1) / multiple * multiple; };
  return kPlanAllowance + dims[0] * dims[1] * round_up(dims[2], 64) * round_up(dims[3], 128) * 2;
}

struct Attribute {
  cudnnBackendAttributeType_t type;
  int64_t count = 0;
  std::vector<unsigned char> bytes;
};

struct Descriptor {
  cudnnBackendDescriptorType_t type;
  std::map<int, Attribute> attributes;
  bool finalized = false;
  // What finalize made of it (one of these, by type).
  Tensor tensor;
  std::shared_ptr<const Op> op;
  std::shared_ptr<const Graph> graph;  // graph, heuristics, engine, engine config, plan
  cudnnHandle_t handle = nullptr;      // plan (deprecated attribute; may stay null)
};

std::set<Descriptor*>& live() {
  static std::set<Descriptor*> descriptors;
  return descriptors;
}
std::set<cudnnHandle_t>& handles() {
  static std::set<cudnnHandle_t> all;
  return all;
}

Descriptor* find(cudnnBackendDescriptor_t handle) {
  auto* descriptor = static_cast<Descriptor*>(handle);
  return live().count(descriptor) ? descriptor : nullptr;
}

size_t element_size(cudnnBackendAttributeType_t type) {
  switch (type) {
    case CUDNN_TYPE_BOOLEAN: case CUDNN_TYPE_CHAR: return 1;
    case CUDNN_TYPE_INT64: case CUDNN_TYPE_DOUBLE: return 8;
    case CUDNN_TYPE_VOID_PTR: case CUDNN_TYPE_BACKEND_DESCRIPTOR: case CUDNN_TYPE_HANDLE: return sizeof(void*);
    case CUDNN_TYPE_FRACTION: return 16;
    default: return 4;  // FLOAT, INT32 and the enums
  }
}

const Attribute* attribute(const Descriptor& d, int name) {
  auto found = d.attributes.find(name);
  return found == d.attributes.end() ? nullptr : &found->second;
}

template <class T>
std::vector<T> values(const Descriptor& d, int name) {
  const Attribute* a = attribute(d, name);
  if (!a) return {};
  std::vector<T> out(static_cast<size_t>(a->count));
  if (!out.empty()) std::memcpy(out.data(), a->bytes.data(), std::min(a->bytes.size(), out.size() * sizeof(T)));
  return out;
}

// The descriptors an attribute of type BACKEND_DESCRIPTOR names (null entries for unknown ones).
std::vector<Descriptor*> descriptors(const Descriptor& d, int name) {
  std::vector<Descriptor*> out;
  for (void* handle : values<void*>(d, name)) out.push_back(find(handle));
  return out;
}

// One referenced, finalized tensor: the tensor, or null with last_error set.
Tensor tensor_at(const Descriptor& d, int name, const char* role, bool required) {
  const auto refs = descriptors(d, name);
  if (refs.empty()) {
    if (required) refuse(CUDNN_STATUS_BAD_PARAM, std::string(role) + " is not set");
    return nullptr;
  }
  if (!refs[0] || refs[0]->type != CUDNN_BACKEND_TENSOR_DESCRIPTOR || !refs[0]->finalized) {
    refuse(CUDNN_STATUS_BAD_PARAM, std::string(role) + " is not a finalized tensor descriptor");
    return nullptr;
  }
  return refs[0]->tensor;
}

// ---- finalize, per descriptor type -------------------------------------------------------------

// A tensor: dims, strides, uid, type; the checks cuDNN's kernels need of real memory: positive
// dims, non-negative strides, a unit innermost stride, and no two elements at one address.
cudnnStatus_t finalize_tensor(Descriptor& d) {
  auto info = std::make_shared<TensorInfo>();
  info->dims = values<int64_t>(d, CUDNN_ATTR_TENSOR_DIMENSIONS);
  info->strides = values<int64_t>(d, CUDNN_ATTR_TENSOR_STRIDES);
  const auto uid = values<int64_t>(d, CUDNN_ATTR_TENSOR_UNIQUE_ID);
  const auto type = values<cudnnDataType_t>(d, CUDNN_ATTR_TENSOR_DATA_TYPE);
  if (info->dims.empty() || info->dims.size() != info->strides.size() || uid.empty() || type.empty())
    return refuse(CUDNN_STATUS_BAD_PARAM, "a tensor needs dimensions, strides of the same rank, a unique id and a data type");
  info->uid = uid[0];
  info->type = type[0];
  const std::string name = "tensor uid " + std::to_string(info->uid);
  if (type_size(info->type) == 0) return refuse(CUDNN_STATUS_NOT_SUPPORTED, name + ": data type not supported");
  const auto is_virtual = values<char>(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL);  // CUDNN_TYPE_BOOLEAN: 1 byte
  const auto by_value = values<char>(d, CUDNN_ATTR_TENSOR_IS_BY_VALUE);
  info->is_virtual = !is_virtual.empty() && is_virtual[0];
  info->by_value = !by_value.empty() && by_value[0];
  if (attribute(d, CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC)) {
    info->ragged = tensor_at(d, CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC, "the ragged offset", true);
    if (!info->ragged) return CUDNN_STATUS_BAD_PARAM;
    if (info->ragged->type != CUDNN_DATA_INT32 || info->ragged->elements() != info->dims[0] + 1)
      return refuse(CUDNN_STATUS_NOT_SUPPORTED, name + ": its ragged offsets must be int32 [B+1,1,..]");
  }
  for (size_t i = 0; i < info->dims.size(); ++i) {
    if (info->dims[i] <= 0 || info->strides[i] < 0)
      return refuse(CUDNN_STATUS_BAD_PARAM, name + ": dimensions must be positive and strides non-negative");
  }
  if (!info->is_virtual && !info->by_value) {
    // Dims of size > 1 by increasing stride (the batch's replaced by ragged offsets): the
    // smallest stride is 1 and each dim starts past the previous one's extent.
    std::vector<std::pair<int64_t, int64_t>> order;  // (stride, dim)
    for (size_t i = info->ragged ? 1 : 0; i < info->dims.size(); ++i) {
      if (info->dims[i] > 1) order.emplace_back(info->strides[i], info->dims[i]);
    }
    std::sort(order.begin(), order.end());
    if (!order.empty() && order[0].first != 1)
      return refuse(CUDNN_STATUS_NOT_SUPPORTED, name + ": the innermost stride is " + std::to_string(order[0].first) +
                                                    ", not 1 (the engine reads contiguous rows)");
    for (size_t i = 1; i < order.size(); ++i) {
      if (order[i].first < order[i - 1].first * order[i - 1].second)
        return refuse(CUDNN_STATUS_NOT_SUPPORTED, name + ": its strides put two elements at one address");
    }
  }
  d.tensor = info;
  return CUDNN_STATUS_SUCCESS;
}

// The mode-like attribute of an operation's sub-descriptor (pointwise, matmul, reduction).
Descriptor* sub_descriptor(const Descriptor& d, int name, cudnnBackendDescriptorType_t type) {
  const auto refs = descriptors(d, name);
  return !refs.empty() && refs[0] && refs[0]->type == type && refs[0]->finalized ? refs[0] : nullptr;
}

cudnnStatus_t finalize_matmul(Descriptor& d, Op& op) {
  op.kind = OpKind::Matmul;
  op.what = "matmul";
  op.x = tensor_at(d, CUDNN_ATTR_OPERATION_MATMUL_ADESC, "matmul A", true);
  op.b = tensor_at(d, CUDNN_ATTR_OPERATION_MATMUL_BDESC, "matmul B", true);
  op.y = tensor_at(d, CUDNN_ATTR_OPERATION_MATMUL_CDESC, "matmul C", true);
  if (!op.x || !op.b || !op.y) return CUDNN_STATUS_BAD_PARAM;
  op.m_override = tensor_at(d, CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, "M override", false);
  op.n_override = tensor_at(d, CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, "N override", false);
  op.k_override = tensor_at(d, CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, "K override", false);
  Descriptor* desc = sub_descriptor(d, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_BACKEND_MATMUL_DESCRIPTOR);
  if (!desc) return refuse(CUDNN_STATUS_BAD_PARAM, "matmul: no finalized matmul descriptor");
  if (const Attribute* padding = attribute(*desc, CUDNN_ATTR_MATMUL_PADDING_VALUE)) {
    op.has_padding = true;
    op.padding = padding->type == CUDNN_TYPE_DOUBLE ? values<double>(*desc, CUDNN_ATTR_MATMUL_PADDING_VALUE)[0]
                                                    : values<float>(*desc, CUDNN_ATTR_MATMUL_PADDING_VALUE)[0];
  }
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t finalize_pointwise(Descriptor& d, Op& op) {
  op.kind = OpKind::Pointwise;
  Descriptor* desc = sub_descriptor(d, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  if (!desc) return refuse(CUDNN_STATUS_BAD_PARAM, "pointwise: no finalized pointwise descriptor");
  const auto mode = values<cudnnPointwiseMode_t>(*desc, CUDNN_ATTR_POINTWISE_MODE);
  if (mode.empty()) return refuse(CUDNN_STATUS_BAD_PARAM, "pointwise: no mode");
  op.mode = mode[0];
  op.what = "pointwise mode " + std::to_string(op.mode);
  const auto axis = values<int64_t>(*desc, CUDNN_ATTR_POINTWISE_AXIS);
  op.axis = axis.empty() ? 0 : axis[0];
  for (int alpha : {CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2}) {
    const Attribute* a = attribute(d, alpha);
    const double value = !a ? 1.0 : a->type == CUDNN_TYPE_DOUBLE ? values<double>(d, alpha)[0] : values<float>(d, alpha)[0];
    if (value != 1.0) return refuse(CUDNN_STATUS_NOT_SUPPORTED, op.what + ": alpha other than 1 is not implemented");
  }
  op.x = tensor_at(d, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, "pointwise X", true);
  op.y = tensor_at(d, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, "pointwise Y", true);
  if (!op.x || !op.y) return CUDNN_STATUS_BAD_PARAM;
  op.b = tensor_at(d, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, "pointwise B", false);
  op.t = tensor_at(d, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, "pointwise T", false);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t finalize_reduction(Descriptor& d, Op& op) {
  op.kind = OpKind::Reduction;
  Descriptor* desc = sub_descriptor(d, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
  if (!desc) return refuse(CUDNN_STATUS_BAD_PARAM, "reduction: no finalized reduction descriptor");
  const auto mode = values<cudnnReduceTensorOp_t>(*desc, CUDNN_ATTR_REDUCTION_OPERATOR);
  if (mode.empty()) return refuse(CUDNN_STATUS_BAD_PARAM, "reduction: no operator");
  op.mode = mode[0];
  op.what = "reduction operator " + std::to_string(op.mode);
  op.x = tensor_at(d, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, "reduction X", true);
  op.y = tensor_at(d, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, "reduction Y", true);
  return op.x && op.y ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM;
}

cudnnStatus_t finalize_operation(Descriptor& d) {
  auto op = std::make_shared<Op>();
  cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
  switch (d.type) {
    case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR: status = finalize_matmul(d, *op); break;
    case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR: status = finalize_pointwise(d, *op); break;
    case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR: status = finalize_reduction(d, *op); break;
    case CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR:
      op->kind = OpKind::Reshape;
      op->what = "reshape";
      op->x = tensor_at(d, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, "reshape X", true);
      op->y = tensor_at(d, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, "reshape Y", true);
      if (!op->x || !op->y) status = CUDNN_STATUS_BAD_PARAM;
      break;
    default: return refuse(CUDNN_STATUS_NOT_SUPPORTED, "operation descriptor type " + std::to_string(d.type) + " is not implemented");
  }
  if (status != CUDNN_STATUS_SUCCESS) return status;
  d.op = op;
  return CUDNN_STATUS_SUCCESS;
}

// The operation graph: its operations and tensors, checked by the interpreter.
cudnnStatus_t finalize_graph(Descriptor& d) {
  auto graph = std::make_shared<Graph>();
  for (Descriptor* op : descriptors(d, CUDNN_ATTR_OPERATIONGRAPH_OPS)) {
    if (!op || !op->finalized || !op->op) return refuse(CUDNN_STATUS_BAD_PARAM, "an operation of the graph is not finalized");
    graph->ops.push_back(*op->op);
  }
  if (graph->ops.empty()) return refuse(CUDNN_STATUS_BAD_PARAM, "the operation graph has no operations");
  for (const Op& op : graph->ops) {
    for (const Tensor& t : {op.x, op.b, op.t, op.y, op.m_override, op.n_override, op.k_override}) {
      for (Tensor each = t; each; each = each->ragged) {
        auto [at, fresh] = graph->tensors.emplace(each->uid, each);
        if (!fresh && (at->second->dims != each->dims || at->second->strides != each->strides ||
                       at->second->type != each->type || at->second->is_virtual != each->is_virtual))
          return refuse(CUDNN_STATUS_BAD_PARAM, "two different tensors have uid " + std::to_string(each->uid));
      }
    }
  }
  if (std::string why = check_graph(*graph); !why.empty()) return refuse(CUDNN_STATUS_NOT_SUPPORTED, why);
  d.graph = graph;
  return CUDNN_STATUS_SUCCESS;
}

// Heuristics, engine, engine config, plan: each carries the graph of what it refers to.
cudnnStatus_t finalize_carrier(Descriptor& d, int name, cudnnBackendDescriptorType_t wanted, const char* what) {
  const auto refs = descriptors(d, name);
  if (refs.empty() || !refs[0] || refs[0]->type != wanted || !refs[0]->finalized)
    return refuse(CUDNN_STATUS_BAD_PARAM, std::string(what) + " needs a finalized descriptor it refers to");
  if (d.type == CUDNN_BACKEND_ENGINE_DESCRIPTOR) {
    const auto index = values<int64_t>(d, CUDNN_ATTR_ENGINE_GLOBAL_INDEX);
    if (!index.empty() && index[0] != 0) return refuse(CUDNN_STATUS_NOT_SUPPORTED, "the only engine is global index 0");
  }
  if (d.type == CUDNN_BACKEND_ENGINECFG_DESCRIPTOR && !descriptors(d, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES).empty())
    return refuse(CUDNN_STATUS_NOT_SUPPORTED, "the emulated engine has no knobs to choose");
  d.graph = refs[0]->graph;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t finalize(Descriptor& d) {
  switch (d.type) {
    case CUDNN_BACKEND_TENSOR_DESCRIPTOR: return finalize_tensor(d);
    case CUDNN_BACKEND_POINTWISE_DESCRIPTOR: case CUDNN_BACKEND_MATMUL_DESCRIPTOR:
    case CUDNN_BACKEND_REDUCTION_DESCRIPTOR: case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR:
    case CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR:
      return CUDNN_STATUS_SUCCESS;  // read by whoever refers to them
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR: return finalize_graph(d);
    case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR:
      return finalize_carrier(d, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "heuristics");
    case CUDNN_BACKEND_ENGINE_DESCRIPTOR:
      return finalize_carrier(d, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "an engine");
    case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR:
      return finalize_carrier(d, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_BACKEND_ENGINE_DESCRIPTOR, "an engine config");
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR: {
      const auto handle = values<cudnnHandle_t>(d, CUDNN_ATTR_EXECUTION_PLAN_HANDLE);
      d.handle = handle.empty() ? nullptr : handle[0];
      return finalize_carrier(d, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "a plan");
    }
    default:
      if (d.type >= CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR || d.type == CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR ||
          d.type == CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR || d.type == CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR ||
          d.type == CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR)
        return finalize_operation(d);
      return refuse(CUDNN_STATUS_NOT_SUPPORTED, "descriptor type " + std::to_string(d.type) + " is not implemented");
  }
}

// ---- get attribute: what the frontend asks of the engine and plan ----------------------------

// Copies integer `items` out in the type the caller asked for (INT64 or INT32: the frontend
// reads some sizes as int32), at most `requested` of them; `count` gets how many there are.
cudnnStatus_t answer(const std::vector<int64_t>& items, cudnnBackendAttributeType_t type, int64_t requested,
                     int64_t* count, void* out) {
  if (count) *count = static_cast<int64_t>(items.size());
  const size_t n = std::min(items.size(), static_cast<size_t>(std::max<int64_t>(requested, 0)));
  if (n && !out) return refuse(CUDNN_STATUS_BAD_PARAM, "GetAttribute: no array for the elements");
  if (n && type != CUDNN_TYPE_INT64 && type != CUDNN_TYPE_INT32)
    return refuse(CUDNN_STATUS_BAD_PARAM, "GetAttribute: this attribute is an integer (INT64 or INT32)");
  for (size_t i = 0; i < n; ++i) {
    if (type == CUDNN_TYPE_INT64) static_cast<int64_t*>(out)[i] = items[i];
    else static_cast<int32_t*>(out)[i] = static_cast<int32_t>(items[i]);
  }
  return CUDNN_STATUS_SUCCESS;
}

// Fills caller-created descriptors `out` (an array of handles) with copies of `source`.
cudnnStatus_t fill_descriptor(const Descriptor& source, int64_t requested, int64_t* count, void* out) {
  if (count) *count = 1;
  if (requested < 1) return CUDNN_STATUS_SUCCESS;
  Descriptor* target = out ? find(static_cast<void**>(out)[0]) : nullptr;
  if (!target || target->type != source.type)
    return refuse(CUDNN_STATUS_BAD_PARAM, "GetAttribute: the array must hold a created descriptor of the right type");
  *target = source;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t get_attribute(const Descriptor& d, int name, cudnnBackendAttributeType_t type, int64_t requested,
                            int64_t* count, void* out) {
  const bool computed = d.finalized && d.graph;
  if (computed && name == CUDNN_ATTR_ENGINEHEUR_RESULTS) {
    // One engine config (engine 0, no knobs), finalized.
    Descriptor engine{CUDNN_BACKEND_ENGINE_DESCRIPTOR, {}, true, nullptr, nullptr, d.graph, nullptr};
    engine.attributes[CUDNN_ATTR_ENGINE_GLOBAL_INDEX] = Attribute{CUDNN_TYPE_INT64, 1, std::vector<unsigned char>(8, 0)};
    auto* engine_copy = new Descriptor(engine);  // owned by the config below, like a child descriptor
    live().insert(engine_copy);
    Descriptor config{CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, {}, true, nullptr, nullptr, d.graph, nullptr};
    void* engine_handle = engine_copy;
    Attribute ref{CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, std::vector<unsigned char>(sizeof(void*))};
    std::memcpy(ref.bytes.data(), &engine_handle, sizeof(void*));
    config.attributes[CUDNN_ATTR_ENGINECFG_ENGINE] = ref;
    return fill_descriptor(config, requested, count, out);
  }
  if (computed && name == CUDNN_ATTR_ENGINECFG_ENGINE) {
    const auto refs = descriptors(d, CUDNN_ATTR_ENGINECFG_ENGINE);
    if (refs.empty() || !refs[0]) return refuse(CUDNN_STATUS_BAD_PARAM, "the engine config has no engine");
    return fill_descriptor(*refs[0], requested, count, out);
  }
  if (computed && name == CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG) {
    const auto refs = descriptors(d, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG);
    if (refs.empty() || !refs[0]) return refuse(CUDNN_STATUS_BAD_PARAM, "the plan has no engine config");
    return fill_descriptor(*refs[0], requested, count, out);
  }
  switch (name) {
    case CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT: return answer({1}, type, requested, count, out);
    case CUDNN_ATTR_ENGINE_GLOBAL_INDEX: return answer({0}, type, requested, count, out);
    case CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE: case CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE:
      return answer({d.graph ? plan_workspace(*d.graph) : kPlanAllowance}, type, requested, count, out);
    case CUDNN_ATTR_ENGINECFG_SHARED_MEMORY_USED: return answer({0}, type, requested, count, out);
    // No knobs, no numerical or behaviour notes: nothing for the frontend to filter on.
    case CUDNN_ATTR_ENGINE_KNOB_INFO: case CUDNN_ATTR_ENGINECFG_KNOB_CHOICES: case CUDNN_ATTR_ENGINE_NUMERICAL_NOTE:
    case CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE: case CUDNN_ATTR_EXECUTION_PLAN_COMPUTED_INTERMEDIATE_UIDS:
      if (count) *count = 0;
      return CUDNN_STATUS_SUCCESS;
    case CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION:
      return refuse(CUDNN_STATUS_NOT_SUPPORTED, "plans have no JSON representation (serialization is not emulated)");
    default: break;
  }
  // Anything else: what was set, as it was set.
  const Attribute* a = attribute(d, name);
  if (!a) return refuse(CUDNN_STATUS_NOT_SUPPORTED, "GetAttribute " + std::to_string(name) + " of descriptor type " +
                                                        std::to_string(d.type) + " is not implemented");
  if (a->type != type) return refuse(CUDNN_STATUS_BAD_PARAM, "GetAttribute " + std::to_string(name) + ": wrong type");
  if (count) *count = a->count;
  const size_t n = std::min<size_t>(static_cast<size_t>(a->count), static_cast<size_t>(std::max<int64_t>(requested, 0)));
  if (n && out) std::memcpy(out, a->bytes.data(), n * element_size(type));
  return CUDNN_STATUS_SUCCESS;
}

// ---- execute -----------------------------------------------------------------------------------

// Throws DeviceFault unless a tensor's memory is live device (or mapped pinned) memory: without ragged
// offsets its whole extent, with them one batch's (the offsets are device data the host cannot
// read before the stream gets there).
void check_memory(const TensorInfo& tensor, const void* pointer) {
  int64_t last = 0;
  for (size_t i = tensor.ragged ? 1 : 0; i < tensor.dims.size(); ++i) last += (tensor.dims[i] - 1) * tensor.strides[i];
  check_kernel_operand(pointer, static_cast<size_t>(last + 1) * type_size(tensor.type),
                       "tensor uid " + std::to_string(tensor.uid) + " of the variant pack");
}

// The variant pack against the plan's graph: every non-virtual uid with a non-null pointer,
// device memory wide enough for the tensor, a workspace of the plan's size. The pointers by
// uid (by-value scalars copied into `scalars`), or a status with last_error set.
cudnnStatus_t check_pack(const Graph& graph, const Descriptor& pack, std::unordered_map<int64_t, const void*>& pointers,
                         std::vector<std::vector<unsigned char>>& scalars) {
  const auto uids = values<int64_t>(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS);
  const auto data = values<void*>(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS);
  if (uids.size() != data.size()) return refuse(CUDNN_STATUS_BAD_PARAM, "the variant pack has different numbers of uids and pointers");
  std::unordered_map<int64_t, void*> given;
  for (size_t i = 0; i < uids.size(); ++i) given[uids[i]] = data[i];
  scalars.reserve(graph.tensors.size());
  for (const auto& [uid, tensor] : graph.tensors) {
    if (tensor->is_virtual) continue;
    auto found = given.find(uid);
    if (found == given.end()) return refuse(CUDNN_STATUS_BAD_PARAM, "the variant pack has no pointer for tensor uid " + std::to_string(uid));
    if (!found->second) return refuse(CUDNN_STATUS_BAD_PARAM, "the variant pack's pointer for tensor uid " + std::to_string(uid) + " is null");
    if (tensor->by_value) {  // a host scalar: copied now, as cuDNN takes it at the call
      scalars.emplace_back(static_cast<unsigned char*>(found->second),
                           static_cast<unsigned char*>(found->second) + type_size(tensor->type));
      pointers[uid] = scalars.back().data();
      continue;
    }
    try {
      check_memory(*tensor, found->second);
    } catch (const DeviceFault& fault) {
      return refuse(CUDNN_STATUS_BAD_PARAM, fault.message);
    }
    pointers[uid] = found->second;
  }
  const auto workspace = values<void*>(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE);
  const void* base = nullptr;
  size_t bytes = 0;
  if (workspace.empty() || !workspace[0] || !find_allocation(workspace[0], &base, &bytes) ||
      static_cast<const char*>(base) + bytes - static_cast<const char*>(workspace[0]) < plan_workspace(graph))
    return refuse(CUDNN_STATUS_BAD_PARAM, "the variant pack's workspace is not " +
                                              std::to_string(plan_workspace(graph)) +
                                              " bytes of device memory (the plan's workspace size)");
  return CUDNN_STATUS_SUCCESS;
}

}  // namespace
}  // namespace zt_emu::cudnn

namespace zt_emu {
uint64_t cudnn_executions() { return cudnn::executions.load(); }
}  // namespace zt_emu

using namespace zt_emu::cudnn;

extern "C" {

size_t cudnnGetVersion(void) { return kVersion; }

const char* cudnnGetErrorString(cudnnStatus_t status) {
  switch (status) {
    case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_NOT_INITIALIZED: return "CUDNN_STATUS_NOT_INITIALIZED";
    case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
    case CUDNN_STATUS_INTERNAL_ERROR: return "CUDNN_STATUS_INTERNAL_ERROR";
    case CUDNN_STATUS_EXECUTION_FAILED: return "CUDNN_STATUS_EXECUTION_FAILED";
    default: return "CUDNN_STATUS (another code)";
  }
}

void cudnnGetLastErrorString(char* message, size_t max_size) {
  if (!message || max_size == 0) return;
  const size_t n = std::min(last_error.size(), max_size - 1);
  std::memcpy(message, last_error.data(), n);
  message[n] = '\0';  // kept: the frontend reads it too before its caller does
}

cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) {
  Guard guard(zt_emu::device_lock());
  if (!handle) return refuse(CUDNN_STATUS_BAD_PARAM, "cudnnCreate: handle is null");
  *handle = new cudnnContext{};
  handles().insert(*handle);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) {
  Guard guard(zt_emu::device_lock());
  if (!handles().erase(handle)) return refuse(CUDNN_STATUS_BAD_PARAM, "cudnnDestroy: not a live handle");
  delete handle;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream) {
  Guard guard(zt_emu::device_lock());
  if (!handles().count(handle)) return refuse(CUDNN_STATUS_BAD_PARAM, "cudnnSetStream: not a live handle");
  handle->stream = stream;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetStream(cudnnHandle_t handle, cudaStream_t* stream) {
  Guard guard(zt_emu::device_lock());
  if (!handles().count(handle) || !stream) return refuse(CUDNN_STATUS_BAD_PARAM, "cudnnGetStream: bad handle or null stream");
  *stream = handle->stream;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t type, cudnnBackendDescriptor_t* descriptor) {
  Guard guard(zt_emu::device_lock());
  if (!descriptor) return refuse(CUDNN_STATUS_BAD_PARAM, "CreateDescriptor: descriptor is null");
  auto* d = new Descriptor{type, {}, false, nullptr, nullptr, nullptr, nullptr};
  live().insert(d);
  *descriptor = d;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t descriptor) {
  Guard guard(zt_emu::device_lock());
  Descriptor* d = find(descriptor);
  if (!d) return refuse(CUDNN_STATUS_BAD_PARAM, "DestroyDescriptor: not a live descriptor");
  live().erase(d);
  delete d;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t descriptor, cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t count, const void* elements) {
  Guard guard(zt_emu::device_lock());
  Descriptor* d = find(descriptor);
  if (!d) return refuse(CUDNN_STATUS_BAD_PARAM, "SetAttribute: not a live descriptor");
  if (d->finalized) return refuse(CUDNN_STATUS_NOT_INITIALIZED, "SetAttribute on a finalized descriptor");
  if (count < 0 || (count > 0 && !elements)) return refuse(CUDNN_STATUS_BAD_PARAM, "SetAttribute: bad element count or array");
  Attribute a{type, count, std::vector<unsigned char>(static_cast<size_t>(count) * element_size(type))};
  if (count) std::memcpy(a.bytes.data(), elements, a.bytes.size());
  d->attributes[name] = std::move(a);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const descriptor, cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t requested, int64_t* count,
                                       void* elements) {
  Guard guard(zt_emu::device_lock());
  const Descriptor* d = find(descriptor);
  if (!d) return refuse(CUDNN_STATUS_BAD_PARAM, "GetAttribute: not a live descriptor");
  return get_attribute(*d, name, type, requested, count, elements);
}

cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t descriptor) {
  Guard guard(zt_emu::device_lock());
  Descriptor* d = find(descriptor);
  if (!d) return refuse(CUDNN_STATUS_BAD_PARAM, "Finalize: not a live descriptor");
  if (d->finalized) return CUDNN_STATUS_SUCCESS;
  const cudnnStatus_t status = finalize(*d);
  d->finalized = status == CUDNN_STATUS_SUCCESS;
  return status;
}

cudnnStatus_t cudnnBackendExecute(cudnnHandle_t handle, cudnnBackendDescriptor_t plan, cudnnBackendDescriptor_t pack) {
  Guard guard(zt_emu::device_lock());
  if (!handles().count(handle)) return refuse(CUDNN_STATUS_BAD_PARAM, "Execute: not a live handle");
  const Descriptor* p = find(plan);
  const Descriptor* v = find(pack);
  if (!p || p->type != CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR || !p->finalized || !p->graph)
    return refuse(CUDNN_STATUS_BAD_PARAM, "Execute: not a finalized execution plan");
  if (!v || v->type != CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR)
    return refuse(CUDNN_STATUS_BAD_PARAM, "Execute: not a variant pack");
  auto pointers = std::make_shared<std::unordered_map<int64_t, const void*>>();
  auto scalars = std::make_shared<std::vector<std::vector<unsigned char>>>();
  if (cudnnStatus_t status = check_pack(*p->graph, *v, *pointers, *scalars); status != CUDNN_STATUS_SUCCESS) return status;
  std::shared_ptr<const Graph> graph = p->graph;
  zt_emu::enqueue(handle->stream, zt_emu::Work{"cuDNN execution plan", [graph, pointers, scalars] {
                                                 // Again when it runs: memory may have been freed since the call.
                                                 for (const auto& [uid, tensor] : graph->tensors) {
                                                   if (!tensor->is_virtual && !tensor->by_value) check_memory(*tensor, pointers->at(uid));
                                                 }
                                                 run_graph(*graph, *pointers);
                                                 ++executions;
                                               }, {}});
  return CUDNN_STATUS_SUCCESS;
}

// The legacy filter API: referenced by the frontend's (inline) filter-reordering helper, which
// unoptimized builds emit; the emulated cuDNN has no convolutions.
cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t*) {
  return refuse(CUDNN_STATUS_NOT_SUPPORTED, "filter descriptors (the legacy convolution API) are not emulated");
}
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t) {
  return refuse(CUDNN_STATUS_NOT_SUPPORTED, "filter descriptors (the legacy convolution API) are not emulated");
}
cudnnStatus_t cudnnSetFilterNdDescriptor(cudnnFilterDescriptor_t, cudnnDataType_t, cudnnTensorFormat_t, int, const int[]) {
  return refuse(CUDNN_STATUS_NOT_SUPPORTED, "filter descriptors (the legacy convolution API) are not emulated");
}
cudnnStatus_t cudnnReorderFilterAndBias(cudnnHandle_t, const cudnnFilterDescriptor_t, cudnnReorderType_t, const void*,
                                        void*, int, const void*, void*) {
  return refuse(CUDNN_STATUS_NOT_SUPPORTED, "filter reordering (the legacy convolution API) is not emulated");
}

}  // extern "C"
