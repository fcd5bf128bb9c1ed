// The emulated cuDNN (src/emu/emu_cudnn*.cpp) through the real cudnn-frontend headers and the
// raw backend API: the refusals that make it a useful stand-in (each case fails if its check is
// removed) and deferred execution on the stream. The numerics of SDPA forward and backward
// against the CPU backend are in tests/gpu/test_cuda_attention.cpp (cudnn_* cases).
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#define CUDNN_FRONTEND_SKIP_JSON_LIB 1
#include <cudnn_frontend.h>

#include "backend/attention_scratch_rules.h"

namespace zt_emu {
uint64_t cudnn_executions();  // emu/emu_cudnn.cpp: execution plans run so far
}  // namespace zt_emu

namespace {

namespace fe = cudnn_frontend;

// ---- helpers ------------------------------------------------------------------------------------

struct Handle {
  Handle() { BOOST_REQUIRE(cudnnCreate(&handle) == CUDNN_STATUS_SUCCESS); }
  ~Handle() { cudnnDestroy(handle); }
  cudnnHandle_t handle = nullptr;
};

struct DeviceBuffer {
  explicit DeviceBuffer(size_t bytes) { BOOST_REQUIRE(cudaMalloc(&data, bytes) == cudaSuccess); }
  ~DeviceBuffer() { cudaFree(data); }
  void* data = nullptr;
};

std::string last_error() {
  char message[512] = {};
  cudnnGetLastErrorString(message, sizeof(message));
  return message;
}

// q, k, v, o [B,H,S,D] bf16 with the backend's strides [S*H*D, D, H*D, 1], stats [B,H,S,1]
// fp32, causal: the forward graph of cuda_attention_cudnn.cpp. `seq_stride` replaces q's.
constexpr int64_t kB = 1, kH = 2, kS = 8, kD = 16;
std::shared_ptr<fe::graph::Graph> forward_graph(int64_t q_seq_stride) {
  auto graph = std::make_shared<fe::graph::Graph>();
  graph->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  auto tensor = [&](const char* name, int64_t uid, int64_t seq_stride) {
    return graph->tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid)
                             .set_dim({kB, kH, kS, kD}).set_stride({kS * kH * kD, kD, seq_stride, 1}));
  };
  auto q = tensor("q", 1, q_seq_stride), k = tensor("k", 2, kH * kD), v = tensor("v", 3, kH * kD);
  auto [out, stats] = graph->sdpa(q, k, v, fe::graph::SDPA_attributes().set_name("sdpa").set_generate_stats(true)
                                               .set_causal_mask(true).set_attn_scale(0.25f));
  out->set_output(true).set_uid(4).set_dim({kB, kH, kS, kD}).set_stride({kS * kH * kD, kD, kH * kD, 1});
  stats->set_output(true).set_uid(5).set_data_type(fe::DataType_t::FLOAT).set_dim({kB, kH, kS, 1})
      .set_stride({kH * kS, kS, 1, 1});
  return graph;
}

// "" when the graph builds, else the failing step's message.
std::string build(fe::graph::Graph& graph, cudnnHandle_t handle) {
  for (auto step : {+[](fe::graph::Graph& g, cudnnHandle_t) { return g.validate(); },
                    +[](fe::graph::Graph& g, cudnnHandle_t h) { return g.build_operation_graph(h); },
                    +[](fe::graph::Graph& g, cudnnHandle_t) { return g.create_execution_plans({fe::HeurMode_t::A}); },
                    +[](fe::graph::Graph& g, cudnnHandle_t h) { return g.check_support(h); },
                    +[](fe::graph::Graph& g, cudnnHandle_t h) { return g.build_plans(h); }}) {
    fe::error_t error = step(graph, handle);
    if (error.is_bad()) return error.get_message() + " | " + last_error();
  }
  return "";
}

// Device buffers for forward_graph's tensors, q/k/v = 0.5, o poisoned.
struct ForwardData {
  DeviceBuffer q{kB * kS * kH * kD * 2}, k{kB * kS * kH * kD * 2}, v{kB * kS * kH * kD * 2};
  DeviceBuffer o{kB * kS * kH * kD * 2}, stats{kB * kH * kS * 4};
  ForwardData() {
    const std::vector<__nv_bfloat16> half(kB * kS * kH * kD, __float2bfloat16(0.5f));
    for (void* data : {q.data, k.data, v.data}) {
      BOOST_REQUIRE(cudaMemcpy(data, half.data(), half.size() * 2, cudaMemcpyHostToDevice) == cudaSuccess);
    }
    BOOST_REQUIRE(cudaMemset(o.data, 0xFF, kB * kS * kH * kD * 2) == cudaSuccess);
  }
  std::unordered_map<int64_t, void*> pack() { return {{1, q.data}, {2, k.data}, {3, v.data}, {4, o.data}, {5, stats.data}}; }
};

BOOST_AUTO_TEST_SUITE(emu_cudnn)

BOOST_AUTO_TEST_CASE(reports_the_headers_version_and_takes_the_composite_path) {
  BOOST_TEST(cudnnGetVersion() == size_t{CUDNN_VERSION});
  Handle handle;
  auto graph = forward_graph(kH * kD);
  BOOST_TEST(build(*graph, handle.handle) == "");
  ForwardData data;
  int64_t workspace_bytes = 0;
  BOOST_REQUIRE(graph->get_workspace_size(workspace_bytes).is_good());
  DeviceBuffer workspace(static_cast<size_t>(workspace_bytes));
  const uint64_t before = zt_emu::cudnn_executions();
  auto pack = data.pack();
  BOOST_REQUIRE(graph->execute(handle.handle, pack, workspace.data).is_good());
  BOOST_REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  BOOST_TEST(zt_emu::cudnn_executions() == before + 1);
  // Uniform scores: every output is the mean of v's 0.5s; stats = log(number of keys seen).
  std::vector<__nv_bfloat16> out(kB * kS * kH * kD);
  std::vector<float> stats(kB * kH * kS);
  BOOST_REQUIRE(cudaMemcpy(out.data(), data.o.data, out.size() * 2, cudaMemcpyDeviceToHost) == cudaSuccess);
  BOOST_REQUIRE(cudaMemcpy(stats.data(), data.stats.data, stats.size() * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
  for (const auto& value : out) BOOST_TEST(__bfloat162float(value) == 0.5f);
  for (int64_t s = 0; s < kS; ++s) {
    // scale * q.k = 0.25 * 16 * 0.25 = 1 for every key: lse = 1 + log(s + 1)
    BOOST_TEST(stats[static_cast<size_t>(s)] == 1.0f + std::log(static_cast<float>(s + 1)),
               boost::test_tools::tolerance(1e-6f));
  }
}

// q's sequence stride D instead of H*D: heads and rows overlap in memory. The frontend accepts
// the layout; the emulated cuDNN refuses it when the tensor is finalized.
BOOST_AUTO_TEST_CASE(overlapping_strides_are_refused_when_the_graph_is_built) {
  Handle handle;
  auto graph = forward_graph(kD);
  const std::string message = build(*graph, handle.handle);
  BOOST_TEST_INFO("message: " << message);
  BOOST_TEST(message.find("tensor uid 1: its strides put two elements at one address") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_null_pointer_in_the_variant_pack_is_refused_at_execute) {
  Handle handle;
  auto graph = forward_graph(kH * kD);
  BOOST_REQUIRE(build(*graph, handle.handle) == "");
  ForwardData data;
  int64_t workspace_bytes = 0;
  BOOST_REQUIRE(graph->get_workspace_size(workspace_bytes).is_good());
  DeviceBuffer workspace(static_cast<size_t>(workspace_bytes));
  auto pack = data.pack();
  pack[3] = nullptr;
  fe::error_t error = graph->execute(handle.handle, pack, workspace.data);
  BOOST_TEST(error.is_bad());
  BOOST_TEST_INFO("frontend: " << error.get_message());
  BOOST_TEST(last_error().find("pointer for tensor uid 3 is null") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_workspace_smaller_than_the_plans_is_refused_at_execute) {
  Handle handle;
  auto graph = forward_graph(kH * kD);
  BOOST_REQUIRE(build(*graph, handle.handle) == "");
  ForwardData data;
  int64_t workspace_bytes = 0;
  BOOST_REQUIRE(graph->get_workspace_size(workspace_bytes).is_good());
  BOOST_REQUIRE(workspace_bytes > 256);
  DeviceBuffer workspace(static_cast<size_t>(workspace_bytes - 256));
  auto pack = data.pack();
  fe::error_t error = graph->execute(handle.handle, pack, workspace.data);
  BOOST_TEST(error.is_bad());
  BOOST_TEST_INFO("frontend: " << error.get_message());
  BOOST_TEST(last_error().find("workspace is not") != std::string::npos);
}

// ---- the raw backend API: y = identity(x) over [1,1,4,8] fp32 ------------------------------------

struct Descriptor {
  explicit Descriptor(cudnnBackendDescriptorType_t type) {
    BOOST_REQUIRE(cudnnBackendCreateDescriptor(type, &handle) == CUDNN_STATUS_SUCCESS);
  }
  ~Descriptor() { cudnnBackendDestroyDescriptor(handle); }
  template <class T>
  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, std::vector<T> values) {
    BOOST_REQUIRE(cudnnBackendSetAttribute(handle, name, type, static_cast<int64_t>(values.size()), values.data()) ==
                  CUDNN_STATUS_SUCCESS);
  }
  cudnnStatus_t finalize() { return cudnnBackendFinalize(handle); }
  cudnnBackendDescriptor_t handle = nullptr;
};

std::unique_ptr<Descriptor> tensor(int64_t uid) {
  auto t = std::make_unique<Descriptor>(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  t->set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, std::vector<int64_t>{uid});
  t->set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, std::vector<cudnnDataType_t>{CUDNN_DATA_FLOAT});
  t->set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, std::vector<int64_t>{1, 1, 4, 8});
  t->set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, std::vector<int64_t>{32, 32, 8, 1});
  t->set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, std::vector<int64_t>{16});
  BOOST_REQUIRE(t->finalize() == CUDNN_STATUS_SUCCESS);
  return t;
}

// A finalized pointwise operation y = mode(x), with its mode descriptor kept alive beside it.
struct PointwiseOp {
  Descriptor mode{CUDNN_BACKEND_POINTWISE_DESCRIPTOR};
  Descriptor op{CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR};
  PointwiseOp(cudnnPointwiseMode_t mode_value, const Descriptor& x, const Descriptor& y) {
    mode.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, std::vector<cudnnPointwiseMode_t>{mode_value});
    BOOST_REQUIRE(mode.finalize() == CUDNN_STATUS_SUCCESS);
    op.set(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, std::vector<void*>{mode.handle});
    op.set(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, std::vector<void*>{x.handle});
    op.set(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, std::vector<void*>{y.handle});
    BOOST_REQUIRE(op.finalize() == CUDNN_STATUS_SUCCESS);
  }
};

BOOST_AUTO_TEST_CASE(raw_api_missing_uid_is_refused_and_execution_is_deferred) {
  Handle handle;
  auto x = tensor(1), y = tensor(2);
  const PointwiseOp pointwise(CUDNN_POINTWISE_IDENTITY, *x, *y);
  const Descriptor& op = pointwise.op;
  Descriptor graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, std::vector<void*>{op.handle});
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, std::vector<cudnnHandle_t>{handle.handle});
  BOOST_REQUIRE(graph.finalize() == CUDNN_STATUS_SUCCESS);
  Descriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  engine.set(CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, std::vector<void*>{graph.handle});
  engine.set(CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, std::vector<int64_t>{0});
  BOOST_REQUIRE(engine.finalize() == CUDNN_STATUS_SUCCESS);
  Descriptor config(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  config.set(CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, std::vector<void*>{engine.handle});
  BOOST_REQUIRE(config.finalize() == CUDNN_STATUS_SUCCESS);
  Descriptor plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
  plan.set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, std::vector<void*>{config.handle});
  plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, std::vector<cudnnHandle_t>{handle.handle});
  BOOST_REQUIRE(plan.finalize() == CUDNN_STATUS_SUCCESS);
  int64_t workspace_bytes = 0, count = 0;
  BOOST_REQUIRE(cudnnBackendGetAttribute(plan.handle, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                                         &count, &workspace_bytes) == CUDNN_STATUS_SUCCESS);
  DeviceBuffer workspace(static_cast<size_t>(workspace_bytes)), in(32 * 4), out(32 * 4);
  std::vector<float> ones(32, 1.0f), result(32, 0.0f);
  BOOST_REQUIRE(cudaMemcpy(in.data, ones.data(), 32 * 4, cudaMemcpyHostToDevice) == cudaSuccess);
  BOOST_REQUIRE(cudaMemset(out.data, 0, 32 * 4) == cudaSuccess);
  BOOST_REQUIRE(cudaDeviceSynchronize() == cudaSuccess);

  // Only y in the pack: x (uid 1) is missing.
  Descriptor missing(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  missing.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, std::vector<int64_t>{2});
  missing.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, std::vector<void*>{out.data});
  missing.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, std::vector<void*>{workspace.data});
  BOOST_REQUIRE(missing.finalize() == CUDNN_STATUS_SUCCESS);
  BOOST_TEST(cudnnBackendExecute(handle.handle, plan.handle, missing.handle) == CUDNN_STATUS_BAD_PARAM);
  BOOST_TEST(last_error().find("no pointer for tensor uid 1") != std::string::npos);

  // The full pack runs on the handle's stream: nothing changes before the host waits for it.
  cudaStream_t stream = nullptr;
  BOOST_REQUIRE(cudaStreamCreate(&stream) == cudaSuccess);
  BOOST_REQUIRE(cudnnSetStream(handle.handle, stream) == CUDNN_STATUS_SUCCESS);
  Descriptor full(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  full.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, std::vector<int64_t>{1, 2});
  full.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, std::vector<void*>{in.data, out.data});
  full.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, std::vector<void*>{workspace.data});
  BOOST_REQUIRE(full.finalize() == CUDNN_STATUS_SUCCESS);
  BOOST_REQUIRE(cudnnBackendExecute(handle.handle, plan.handle, full.handle) == CUDNN_STATUS_SUCCESS);
  float first = -1.0f;
  std::memcpy(&first, out.data, sizeof(float));  // the emulated arena is host memory
  BOOST_TEST(first == 0.0f);
  BOOST_REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  BOOST_REQUIRE(cudaMemcpy(result.data(), out.data, 32 * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
  BOOST_TEST(result == ones, boost::test_tools::per_element());
  cudnnSetStream(handle.handle, nullptr);
  cudaStreamDestroy(stream);
}

BOOST_AUTO_TEST_CASE(unimplemented_pointwise_modes_are_refused_at_finalize) {
  Handle handle;
  auto x = tensor(1), y = tensor(2);
  const PointwiseOp pointwise(CUDNN_POINTWISE_GELU_FWD, *x, *y);
  const Descriptor& op = pointwise.op;
  Descriptor graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, std::vector<void*>{op.handle});
  BOOST_TEST(graph.finalize() == CUDNN_STATUS_NOT_SUPPORTED);
  BOOST_TEST(last_error().find("not implemented by the emulated cuDNN") != std::string::npos);
}

// The workspace of the backward graph cuda_attention_cudnn.cpp builds (causal, GQA, the
// backend's strides), deterministic or not, as the real frontend sizes it with the emulated
// plan's: the memory model's rule (backend/attention_scratch_rules.h) to the byte. The frontend's part
// (the fp32 softmax sum; without determinism the fp32 dQ accumulator) comes from the headers.
BOOST_AUTO_TEST_CASE(backward_workspace_is_the_memory_models_rule) {
  constexpr int64_t b = 2, h = 4, h_kv = 2, s = 100, d = 16;
  Handle handle;
  for (bool deterministic : {true, false}) {
    auto graph = std::make_shared<fe::graph::Graph>();
    graph->set_io_data_type(fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    auto tensor = [&](const char* name, int64_t uid, int64_t heads) {
      return graph->tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid)
                               .set_dim({b, heads, s, d}).set_stride({s * heads * d, d, heads * d, 1}));
    };
    auto q = tensor("q", 1, h), k = tensor("k", 2, h_kv), v = tensor("v", 3, h_kv);
    auto o = tensor("o", 4, h), d_o = tensor("dO", 5, h);
    auto stats = graph->tensor(fe::graph::Tensor_attributes().set_name("stats").set_uid(6)
                                   .set_data_type(fe::DataType_t::FLOAT).set_dim({b, h, s, 1})
                                   .set_stride({h * s, s, 1, 1}));
    auto options = fe::graph::SDPA_backward_attributes().set_name("backward").set_causal_mask(true)
                       .set_attn_scale(0.25f).set_deterministic_algorithm(deterministic);
    auto [dq, dk, dv] = graph->sdpa_backward(q, k, v, o, d_o, stats, options);
    dq->set_output(true).set_uid(7).set_dim({b, h, s, d}).set_stride({s * h * d, d, h * d, 1});
    dk->set_output(true).set_uid(8).set_dim({b, h_kv, s, d}).set_stride({s * h_kv * d, d, h_kv * d, 1});
    dv->set_output(true).set_uid(9).set_dim({b, h_kv, s, d}).set_stride({s * h_kv * d, d, h_kv * d, 1});
    BOOST_REQUIRE(build(*graph, handle.handle) == "");
    int64_t workspace_bytes = 0;
    BOOST_REQUIRE(graph->get_workspace_size(workspace_bytes).is_good());
    const zt::SdpaGraphShape shape{b, h, h_kv, s, d, false};
    const int64_t frontend = b * h * s * 4 + (deterministic ? 0 : b * h * s * d * 4);
    BOOST_TEST(zt::cudnn_sdpa_frontend_workspace_bytes(shape, true, deterministic) == frontend);
    BOOST_TEST(workspace_bytes == frontend + zt::cudnn_sdpa_plan_workspace_bytes(shape, true, deterministic),
               (deterministic ? "deterministic" : "atomic") << " backward's workspace");
  }
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
