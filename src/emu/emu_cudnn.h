// The emulated cuDNN (docs/emulated-device.md, "cuDNN"): what the descriptor code
// (emu_cudnn.cpp) hands to the graph interpreter (emu_cudnn_graph.cpp) once an operation graph is
// finalized. Everything here is immutable after finalize, so execution plans and queued work can
// share it after the frontend has destroyed the descriptors it came from.
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace zt_emu::cudnn {

// A finalized CUDNN_BACKEND_TENSOR_DESCRIPTOR.
struct TensorInfo {
  int64_t uid = 0;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  std::vector<int64_t> dims, strides;  // same rank, elements
  bool is_virtual = false;             // an intermediate: lives in the interpreter, fp32
  bool by_value = false;               // a host scalar passed through the variant pack
  std::shared_ptr<const TensorInfo> ragged;  // int32 [B+1,1,..]: element offset of each batch
  int64_t elements() const;
};
using Tensor = std::shared_ptr<const TensorInfo>;

enum class OpKind { Matmul, Pointwise, Reduction, Reshape };

// A finalized operation. Unused members stay null / default.
struct Op {
  OpKind kind;
  std::string what;  // "matmul", "pointwise EXP", ... for messages
  // Matmul: a [.., M, K] x b [.., K, N] -> y [.., M, N]; overrides are int32 [B,1,..] per batch.
  // Pointwise: y = mode(x, b, t). Reduction: y = reduce(x). Reshape: y views x's memory.
  Tensor x, b, t, y;
  Tensor m_override, n_override, k_override;
  bool has_padding = false;
  double padding = 0;
  int mode = 0;      // cudnnPointwiseMode_t or cudnnReduceTensorOp_t
  int64_t axis = 0;  // GEN_INDEX
};

// A finalized CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR: the operations in execution order and
// every tensor they name, by uid.
struct Graph {
  std::vector<Op> ops;
  std::unordered_map<int64_t, Tensor> tensors;
};

// Validates a graph for the interpreter: "" or why it is not supported.
std::string check_graph(const Graph& graph);

// Runs `graph` (on the host, called from the stream's queue). `pointers` maps every non-virtual
// uid to its device pointer or (by-value tensors) to a host copy of the value.
void run_graph(const Graph& graph, const std::unordered_map<int64_t, const void*>& pointers);

size_t type_size(cudnnDataType_t type);  // 0 for types the interpreter does not read

}  // namespace zt_emu::cudnn

namespace zt_emu {
uint64_t cudnn_executions();  // execution plans run so far (tests: which attention path ran)
}  // namespace zt_emu
