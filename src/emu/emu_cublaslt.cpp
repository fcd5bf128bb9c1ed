// The cuBLASLt subset the CUDA backend calls (src/backend/cuda/cuda_gemm.cpp), for the emulated
// device: handles, matmul descriptors, matrix layouts, preferences, the algorithm heuristic,
// cublasLtMatmul and the status strings, with the signatures of the toolkit's cublasLt.h.
//
// Written from NVIDIA's documented semantics, not from any implementation:
//   [H] the toolkit's /usr/local/cuda/include/cublasLt.h (CUDA 13.0), quoted here: the attribute
//       types and defaults, the return codes of each call, "bias vector length must match matrix
//       D rows", "bias vector elements are the same type as the elements of output matrix
//       (Dtype)" (CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, exceptions only for int8 IMMA and fp8
//       kernels), "Currently only CUBLAS_OP_N is supported" for TRANSC, the scale type's role
//       ("accumulator and value from matrix C are typically converted to scale type before final
//       scaling. Value is then converted from scale type to type of matrix D"), the layout's LD
//       ("must be large enough so that matrix memory locations are not overlapping (e.g. greater
//       or equal to CUBLASLT_MATRIX_LAYOUT_ROWS in case of CUBLASLT_ORDER_COL)"), the
//       MIN_ALIGNMENT preferences ("selecting a smaller value will exclude algorithms that can
//       not work with matrix A that is not as strictly aligned as they need", default 256), the
//       bias epilogue ("broadcasted to all columns and added before applying final
//       postprocessing"), and INVALID_VALUE from the heuristic "if requestedAlgoCount is less or
//       equal to zero".
//   [D] the cuBLAS guide, https://docs.nvidia.com/cuda/cublas/index.html#cublasltmatmul
//       (section "cublasLtMatmul()"): D = alpha*op(A)*op(B) + beta*C, column-major; in-place
//       (C == D) needs Cdesc == Ddesc, out-of-place needs C and D of the same type, rows and
//       columns (their leading dimensions may differ); the table of supported types, of which
//       this file keeps CUBLAS_COMPUTE_32F with scale type CUDA_R_32F and A/B/C/D types
//       16F/16F/16F, 16F/16F/32F, 16BF/16BF/16BF, 16BF/16BF/32F, 32F/32F/32F, and
//       CUBLAS_COMPUTE_32F_FAST_TF32 with all four 32F.
//   BLAS (netlib xGEMM): "when BETA is supplied as zero then C need not be set on input", so C
//   is not read when beta == 0 and a NaN in it does not show.
//
// What the emulation does, and its own rules where the documents leave a choice:
// - Everything outside that subset answers CUBLAS_STATUS_NOT_SUPPORTED, with a line on stderr:
//   layouts other than column-major and unbatched, epilogues other than DEFAULT and BIAS, the
//   descriptor attributes for scale factors, aux buffers, amax and the like, pointer modes
//   other than HOST and DEVICE. A combination of types or an epilogue outside the subset makes
//   the heuristic return NOT_SUPPORTED with no algorithm (silently unless ZT_EMU_VERBOSE is
//   set: cuda_gemm.cpp asks it for bias epilogues it may not have, and falls back).
// - Handles, descriptors, layouts and preferences are looked up before use: an unknown or
//   destroyed handle answers NOT_INITIALIZED ([H], "if cuBLASLt handle has not been
//   initialized"), an unknown or null descriptor, layout or preference INVALID_VALUE.
// - The heuristic returns one algorithm (workspace 0) or none. Alignment: the emulated
//   algorithm needs each pointer aligned to its element size (as any load of that type on a
//   GPU), so a preference promising less than that gets NOT_SUPPORTED; any promise of at least
//   the element size gets the algorithm (real cuBLASLt has slower kernels for 2- and 4-byte
//   aligned 16-bit data). The algorithm then REQUIRES the alignment it was chosen for, capped
//   at 16 bytes (the widest vector load): cublasLtMatmul with a pointer less aligned than that
//   (or a bias pointer less aligned than the one the descriptor held at heuristic time) answers
//   INVALID_VALUE, where a real kernel with vector loads could fault on a misaligned address.
//   So a plan cached for 16-byte aligned views and reused for a row-offset view is caught.
// - cublasLtMatmul checks its arguments when called (NOT_SUPPORTED / INVALID_VALUE as above,
//   and every operand must be device or pinned memory over the bytes its layout spans: else
//   INVALID_VALUE and the reason on stderr), reads host alpha/beta then, and QUEUES the product
//   on the stream (zt_emu::enqueue): D changes only when the host waits for the stream. The
//   queued work checks the operands again (they may have been freed since) and faults the
//   device (sticky error) if one is no longer accessible. With a sticky error pending the call
//   answers CUBLAS_STATUS_EXECUTION_FAILED, as a launch on a faulted GPU fails.
// - Numerics: operands are widened to float (fp32 inputs rounded to TF32, 10 mantissa bits, under
//   CUBLAS_COMPUTE_32F_FAST_TF32: the library is allowed to, so tests must tolerate it), each
//   product is formed and accumulated in double in k order, the sum rounded to float (the fp32
//   compute type), then alpha, beta*C and the bias are applied in float (the fp32 scale type)
//   and the result is rounded once to D's type (round to nearest even). Real cuBLASLt
//   accumulates in fp32 in an unspecified order (tiles, split-k), so only tolerances, not bits,
//   carry over to a GPU.
#include <cublasLt.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "emu/emu_internal.h"

// cublasLt.h leaves the handle's type incomplete: the emulated handle holds nothing.
struct cublasLtContext {};

namespace {

using Guard = std::lock_guard<std::recursive_mutex>;

// ---- the objects behind the opaque handles -------------------------------------------------------

struct MatrixLayout {
  uint32_t type = CUDA_R_32F;  // cudaDataType_t; the attribute is a uint32_t [H]
  int32_t order = CUBLASLT_ORDER_COL;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int32_t batch_count = 1;
  int64_t batch_stride = 0;  // ignored: batches are not emulated
  int64_t plane_offset = 0;
  uint32_t batch_mode = CUBLASLT_BATCH_MODE_STRIDED;
};

bool operator==(const MatrixLayout& x, const MatrixLayout& y) {
  return x.type == y.type && x.order == y.order && x.rows == y.rows && x.cols == y.cols &&
         x.ld == y.ld && x.batch_count == y.batch_count;
}

struct MatmulDesc {
  int32_t compute_type = CUBLAS_COMPUTE_32F;
  int32_t scale_type = CUDA_R_32F;
  int32_t pointer_mode = CUBLASLT_POINTER_MODE_HOST;
  int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N, transc = CUBLAS_OP_N;
  int32_t fill_mode = CUBLAS_FILL_MODE_FULL;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  int64_t bias_batch_stride = 0;  // ignored: batches are not emulated
  int32_t bias_type = -1;         // -1: D's type [H]
  int32_t sm_count_target = 0;    // a heuristic hint, no effect on the result
};

struct Preference {
  uint32_t search_mode = CUBLASLT_SEARCH_BEST_FIT;
  uint64_t max_workspace = 0;
  uint32_t reduction_scheme_mask = CUBLASLT_REDUCTION_SCHEME_MASK;
  uint32_t min_alignment_a = 256, min_alignment_b = 256;
  uint32_t min_alignment_c = 256, min_alignment_d = 256;
  float max_waves = 0.0f;
  uint64_t impl_mask = ~uint64_t{0};
};

// Live objects of one kind, keyed by the handle the caller holds (the object's address): a
// destroyed or never-created handle is found missing and answered with an error code instead
// of being dereferenced.
template <class State>
class Objects {
 public:
  template <class Handle>
  Handle create(const State& state) {
    auto owned = std::make_unique<State>(state);
    State* raw = owned.get();
    objects_.emplace(raw, std::move(owned));
    return reinterpret_cast<Handle>(raw);
  }
  State* find(const void* handle) const {
    const auto found = objects_.find(handle);
    return found == objects_.end() ? nullptr : found->second.get();
  }
  bool destroy(const void* handle) { return objects_.erase(handle) > 0; }

 private:
  std::unordered_map<const void*, std::unique_ptr<State>> objects_;
};

// Function-local: usable from static initialisers of other files. Guarded by the device lock.
Objects<cublasLtContext>& handles() {
  static Objects<cublasLtContext> objects;
  return objects;
}
Objects<MatrixLayout>& layouts() {
  static Objects<MatrixLayout> objects;
  return objects;
}
Objects<MatmulDesc>& descs() {
  static Objects<MatmulDesc> objects;
  return objects;
}
Objects<Preference>& preferences() {
  static Objects<Preference> objects;
  return objects;
}

void report(const char* call, const std::string& reason) {
  std::fprintf(stderr, "zerotune emulated device: %s: %s\n", call, reason.c_str());
}

// ---- attributes: one table of fields serves Set and Get ------------------------------------------

struct Field {
  void* address = nullptr;  // nullptr: an attribute the emulation does not model
  size_t size = 0;
};

template <class T>
Field field_of(T& value) {
  return Field{&value, sizeof(T)};
}

Field layout_field(MatrixLayout& layout, cublasLtMatrixLayoutAttribute_t attribute) {
  switch (attribute) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE: return field_of(layout.type);
    case CUBLASLT_MATRIX_LAYOUT_ORDER: return field_of(layout.order);
    case CUBLASLT_MATRIX_LAYOUT_ROWS: return field_of(layout.rows);
    case CUBLASLT_MATRIX_LAYOUT_COLS: return field_of(layout.cols);
    case CUBLASLT_MATRIX_LAYOUT_LD: return field_of(layout.ld);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return field_of(layout.batch_count);
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: return field_of(layout.batch_stride);
    case CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET: return field_of(layout.plane_offset);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_MODE: return field_of(layout.batch_mode);
  }
  return Field{};
}

Field desc_field(MatmulDesc& desc, cublasLtMatmulDescAttributes_t attribute) {
  switch (attribute) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: return field_of(desc.compute_type);
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE: return field_of(desc.scale_type);
    case CUBLASLT_MATMUL_DESC_POINTER_MODE: return field_of(desc.pointer_mode);
    case CUBLASLT_MATMUL_DESC_TRANSA: return field_of(desc.transa);
    case CUBLASLT_MATMUL_DESC_TRANSB: return field_of(desc.transb);
    case CUBLASLT_MATMUL_DESC_TRANSC: return field_of(desc.transc);
    case CUBLASLT_MATMUL_DESC_FILL_MODE: return field_of(desc.fill_mode);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return field_of(desc.epilogue);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return field_of(desc.bias);
    case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE: return field_of(desc.bias_batch_stride);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return field_of(desc.bias_type);
    case CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET: return field_of(desc.sm_count_target);
    default: return Field{};  // scale factors, aux buffers, amax, fast accumulation, emulation
  }
}

Field preference_field(Preference& preference, cublasLtMatmulPreferenceAttributes_t attribute) {
  switch (attribute) {
    case CUBLASLT_MATMUL_PREF_SEARCH_MODE: return field_of(preference.search_mode);
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: return field_of(preference.max_workspace);
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK: return field_of(preference.reduction_scheme_mask);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: return field_of(preference.min_alignment_a);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: return field_of(preference.min_alignment_b);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: return field_of(preference.min_alignment_c);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: return field_of(preference.min_alignment_d);
    case CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT: return field_of(preference.max_waves);
    case CUBLASLT_MATMUL_PREF_IMPL_MASK: return field_of(preference.impl_mask);
  }
  return Field{};
}

// What the emulation cannot honour in a layout or descriptor ("" when everything is modelled).
std::string unmodelled(const MatrixLayout& layout) {
  if (layout.order != CUBLASLT_ORDER_COL) return "only CUBLASLT_ORDER_COL layouts are emulated";
  if (layout.batch_count != 1) return "batched layouts (BATCH_COUNT != 1) are not emulated";
  if (layout.plane_offset != 0) return "planar complex layouts are not emulated";
  if (layout.batch_mode != CUBLASLT_BATCH_MODE_STRIDED) return "pointer-array batches are not emulated";
  return {};
}
std::string unmodelled(const MatmulDesc&) { return {}; }
std::string unmodelled(const Preference&) { return {}; }

// cublasLt*SetAttribute [H]: INVALID_VALUE for a null buffer or a size other than the
// attribute's; NOT_SUPPORTED (emulator) for an attribute or value it does not model.
template <class State, class Attribute, class FieldOf>
cublasStatus_t set_attribute(const char* call, State* object, Attribute attribute,
                             const void* buffer, size_t bytes, FieldOf field_of_state) {
  if (!object || !buffer) return CUBLAS_STATUS_INVALID_VALUE;
  State changed = *object;
  const Field field = field_of_state(changed, attribute);
  if (!field.address) {
    report(call, "attribute " + std::to_string(static_cast<int>(attribute)) + " is not emulated");
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (bytes != field.size) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(field.address, buffer, bytes);
  if (const std::string problem = unmodelled(changed); !problem.empty()) {
    report(call, problem);
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  *object = changed;
  return CUBLAS_STATUS_SUCCESS;
}

// cublasLt*GetAttribute [H]: size 0 asks for the size; otherwise the size must match.
template <class State, class Attribute, class FieldOf>
cublasStatus_t get_attribute(State* object, Attribute attribute, void* buffer, size_t bytes,
                             size_t* written, FieldOf field_of_state) {
  if (!object) return CUBLAS_STATUS_INVALID_VALUE;
  const Field field = field_of_state(*object, attribute);
  if (!field.address) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (bytes == 0) {
    if (!written) return CUBLAS_STATUS_INVALID_VALUE;
    *written = field.size;
    return CUBLAS_STATUS_SUCCESS;
  }
  if (!buffer || bytes != field.size) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(buffer, field.address, bytes);
  if (written) *written = bytes;
  return CUBLAS_STATUS_SUCCESS;
}

// ---- the problem: what a descriptor and four layouts ask for -------------------------------------

size_t element_size(uint32_t type) {
  switch (type) {
    case CUDA_R_32F: return 4;
    case CUDA_R_16F:
    case CUDA_R_16BF: return 2;
    default: return 0;  // not a type of the emulated subset
  }
}

struct Verdict {
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  std::string reason;
  bool ok() const { return status == CUBLAS_STATUS_SUCCESS; }
};

Verdict refuse(cublasStatus_t status, std::string reason) { return Verdict{status, std::move(reason)}; }

bool is_transposed(int32_t op) { return op == CUBLAS_OP_T || op == CUBLAS_OP_C; }  // real types: C == T

std::string describe(const char* name, const MatrixLayout& layout) {
  return std::string(name) + " " + std::to_string(layout.rows) + "x" + std::to_string(layout.cols) +
         " (ld " + std::to_string(layout.ld) + ")";
}

// The documented type combinations kept here (see [D] at the top).
Verdict check_types(const MatmulDesc& desc, const MatrixLayout& a, const MatrixLayout& b,
                    const MatrixLayout& c, const MatrixLayout& d) {
  const std::string types = "compute type " + std::to_string(desc.compute_type) + ", scale type " +
                            std::to_string(desc.scale_type) + ", A/B/C/D types " +
                            std::to_string(a.type) + "/" + std::to_string(b.type) + "/" +
                            std::to_string(c.type) + "/" + std::to_string(d.type);
  const Verdict unsupported = refuse(CUBLAS_STATUS_NOT_SUPPORTED, "no emulated kernel for " + types);
  if (desc.scale_type != CUDA_R_32F || a.type != b.type || c.type != d.type) return unsupported;
  if (desc.compute_type == CUBLAS_COMPUTE_32F_FAST_TF32) {
    return a.type == CUDA_R_32F && d.type == CUDA_R_32F ? Verdict{} : unsupported;
  }
  if (desc.compute_type != CUBLAS_COMPUTE_32F) return unsupported;
  const bool inputs_16bit = a.type == CUDA_R_16F || a.type == CUDA_R_16BF;
  if (inputs_16bit && (d.type == a.type || d.type == CUDA_R_32F)) return Verdict{};
  if (a.type == CUDA_R_32F && d.type == CUDA_R_32F) return Verdict{};
  return unsupported;
}

Verdict check_operation(const MatmulDesc& desc, const MatrixLayout& d) {
  const auto valid_op = [](int32_t op) { return op == CUBLAS_OP_N || is_transposed(op); };
  if (!valid_op(desc.transa) || !valid_op(desc.transb))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "TRANSA/TRANSB must be a cublasOperation_t");
  if (desc.transc != CUBLAS_OP_N)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "TRANSC must be CUBLAS_OP_N");  // [H]
  if (desc.fill_mode != CUBLAS_FILL_MODE_FULL)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "only CUBLAS_FILL_MODE_FULL is emulated");
  if (desc.pointer_mode != CUBLASLT_POINTER_MODE_HOST && desc.pointer_mode != CUBLASLT_POINTER_MODE_DEVICE)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "only the HOST and DEVICE pointer modes are emulated");
  if (desc.epilogue == CUBLASLT_EPILOGUE_DEFAULT) return Verdict{};
  if (desc.epilogue != CUBLASLT_EPILOGUE_BIAS)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                  "epilogue " + std::to_string(desc.epilogue) + " is not emulated (DEFAULT and BIAS are)");
  // [H] BIAS_DATA_TYPE: the bias has D's type (the exceptions are int8 and fp8 kernels).
  if (desc.bias_type != -1 && static_cast<uint32_t>(desc.bias_type) != d.type)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "bias type " + std::to_string(desc.bias_type) +
                                                   " differs from D's type " + std::to_string(d.type));
  return Verdict{};
}

Verdict check_layout(const char* name, const MatrixLayout& layout) {
  if (const std::string problem = unmodelled(layout); !problem.empty())
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, std::string(name) + ": " + problem);
  // [H] LD: at least the number of rows for column-major storage (and positive).
  if (layout.ld < 1 || static_cast<uint64_t>(layout.ld) < layout.rows)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, describe(name, layout) + ": ld is less than the rows");
  return Verdict{};
}

// op(A) is m x k, op(B) k x n, C and D m x n, with m and n D's rows and columns.
Verdict check_shapes(const MatmulDesc& desc, const MatrixLayout& a, const MatrixLayout& b,
                     const MatrixLayout& c, const MatrixLayout& d) {
  const std::pair<const char*, const MatrixLayout*> named[] = {{"A", &a}, {"B", &b}, {"C", &c}, {"D", &d}};
  for (const auto& [name, layout] : named) {
    if (Verdict verdict = check_layout(name, *layout); !verdict.ok()) return verdict;
  }
  const uint64_t m = d.rows, n = d.cols;
  const uint64_t a_rows = is_transposed(desc.transa) ? a.cols : a.rows;  // op(A)'s
  const uint64_t k = is_transposed(desc.transa) ? a.rows : a.cols;
  const uint64_t b_rows = is_transposed(desc.transb) ? b.cols : b.rows;  // op(B)'s
  const uint64_t b_cols = is_transposed(desc.transb) ? b.rows : b.cols;
  const std::string shapes = describe("A", a) + (is_transposed(desc.transa) ? "^T, " : ", ") +
                             describe("B", b) + (is_transposed(desc.transb) ? "^T, " : ", ") +
                             describe("C", c) + ", " + describe("D", d);
  if (a_rows != m || b_cols != n || b_rows != k || c.rows != m || c.cols != n)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "shapes do not multiply: " + shapes);
  return Verdict{};
}

Verdict check_problem(const MatmulDesc& desc, const MatrixLayout& a, const MatrixLayout& b,
                      const MatrixLayout& c, const MatrixLayout& d) {
  if (Verdict verdict = check_shapes(desc, a, b, c, d); !verdict.ok()) return verdict;
  if (Verdict verdict = check_types(desc, a, b, c, d); !verdict.ok()) return verdict;
  return check_operation(desc, d);
}

// ---- the algorithm --------------------------------------------------------------------------------

// cublasLtMatmulAlgo_t is "semi-opaque" [H]: the emulated algorithm writes a marker and the
// pointer alignments it was chosen for (see the top of the file) into its words.
constexpr uint64_t kAlgoMarker = 0x5a54454d55414c47;  // "ZTEMUALG"
constexpr uint64_t kWidestLoadBytes = 16;

struct AlgoRequirements {
  uint64_t a = 1, b = 1, c = 1, d = 1, bias = 1;  // bytes each pointer must be aligned to
};

uint64_t alignment_of(const void* pointer) {
  const auto address = reinterpret_cast<uintptr_t>(pointer);
  return address == 0 ? 256 : uint64_t{1} << std::countr_zero(address);
}

cublasLtMatmulAlgo_t encode(const AlgoRequirements& needs) {
  cublasLtMatmulAlgo_t algo{};
  algo.data[0] = kAlgoMarker;
  algo.data[1] = needs.a;
  algo.data[2] = needs.b;
  algo.data[3] = needs.c;
  algo.data[4] = needs.d;
  algo.data[5] = needs.bias;
  return algo;
}

bool decode(const cublasLtMatmulAlgo_t& algo, AlgoRequirements* needs) {
  if (algo.data[0] != kAlgoMarker) return false;
  *needs = AlgoRequirements{algo.data[1], algo.data[2], algo.data[3], algo.data[4], algo.data[5]};
  return true;
}

// The largest power of two dividing `promised` (a promise of 24 bytes is one of 8), capped at
// the widest load: what an algorithm chosen for that promise may rely on.
uint64_t relied_on(uint64_t promised) {
  if (promised == 0) return 1;
  return std::min<uint64_t>(uint64_t{1} << std::countr_zero(promised), kWidestLoadBytes);
}

// The algorithm for `preference`, or why there is none.
Verdict choose_algorithm(const MatmulDesc& desc, const MatrixLayout& a, const MatrixLayout& b,
                         const MatrixLayout& c, const MatrixLayout& d, const Preference& preference,
                         AlgoRequirements* needs) {
  const std::pair<const char*, uint64_t> promises[] = {
      {"A", preference.min_alignment_a}, {"B", preference.min_alignment_b},
      {"C", preference.min_alignment_c}, {"D", preference.min_alignment_d}};
  const size_t sizes[] = {element_size(a.type), element_size(b.type), element_size(c.type),
                          element_size(d.type)};
  uint64_t* fields[] = {&needs->a, &needs->b, &needs->c, &needs->d};
  for (int i = 0; i < 4; ++i) {
    const auto& [name, promised] = promises[i];
    if (relied_on(promised) < sizes[i])
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                    std::string("MIN_ALIGNMENT_") + name + "_BYTES " + std::to_string(promised) +
                        " is less than the element size " + std::to_string(sizes[i]));
    *fields[i] = relied_on(promised);
  }
  needs->bias = 1;
  if (desc.epilogue == CUBLASLT_EPILOGUE_BIAS) {
    // [H] BIAS_POINTER: the heuristic takes the bias alignment from the pointer's value.
    const uint64_t bias_alignment = desc.bias ? relied_on(alignment_of(desc.bias)) : element_size(d.type);
    if (bias_alignment < element_size(d.type))
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "the bias pointer is not aligned to its element size");
    needs->bias = bias_alignment;
  }
  return Verdict{};
}

// ---- the computation ------------------------------------------------------------------------------

float load(const void* data, size_t index, uint32_t type) {
  switch (type) {
    case CUDA_R_16BF: return __bfloat162float(static_cast<const __nv_bfloat16*>(data)[index]);
    case CUDA_R_16F: return __half2float(static_cast<const __half*>(data)[index]);
    default: return static_cast<const float*>(data)[index];
  }
}

void store(void* data, size_t index, uint32_t type, float value) {
  switch (type) {
    case CUDA_R_16BF: static_cast<__nv_bfloat16*>(data)[index] = __float2bfloat16_rn(value); break;
    case CUDA_R_16F: static_cast<__half*>(data)[index] = __float2half_rn(value); break;
    default: static_cast<float*>(data)[index] = value; break;
  }
}

// fp32 rounded to TF32 (10 explicit mantissa bits), to nearest even; inf and NaN unchanged.
float round_to_tf32(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7f800000u) == 0x7f800000u) return value;
  const uint32_t kept_lsb = (bits >> 13) & 1u;
  bits += 0xfffu + kept_lsb;
  return std::bit_cast<float>(bits & ~0x1fffu);
}

// The bytes a column-major layout spans: (cols - 1) * ld + rows elements.
size_t span_bytes(const MatrixLayout& layout) {
  if (layout.rows == 0 || layout.cols == 0) return 0;
  const uint64_t elements = (layout.cols - 1) * static_cast<uint64_t>(layout.ld) + layout.rows;
  return static_cast<size_t>(elements) * element_size(layout.type);
}

// The stored matrix as dense column-major floats (ld = rows), or its transpose when `transpose`
// (cols x rows, ld = cols). Read column by column: contiguous in the source.
std::vector<float> dense(const void* data, const MatrixLayout& layout, bool transpose, bool tf32) {
  const size_t rows = layout.rows, cols = layout.cols, ld = static_cast<size_t>(layout.ld);
  std::vector<float> out(rows * cols);
  for (size_t j = 0; j < cols; ++j) {
    for (size_t i = 0; i < rows; ++i) {
      float value = load(data, i + j * ld, layout.type);
      if (tf32) value = round_to_tf32(value);
      out[transpose ? j + i * cols : i + j * rows] = value;
    }
  }
  return out;
}

// Everything the queued work needs, captured by value when cublasLtMatmul is called.
struct Operation {
  MatmulDesc desc;
  MatrixLayout a, b, c, d;
  const void* a_data = nullptr;
  const void* b_data = nullptr;
  const void* c_data = nullptr;
  void* d_data = nullptr;
  float alpha = 1.0f, beta = 0.0f;                     // host pointer mode: read at the call
  const void* alpha_device = nullptr;                  // device pointer mode: read when it runs
  const void* beta_device = nullptr;
  std::string what;                                    // "cublasLtMatmul m=.. n=.. k=.."
};

bool device_pointers(const MatmulDesc& desc) { return desc.pointer_mode == CUBLASLT_POINTER_MODE_DEVICE; }

// Every operand the product will read or write: device-accessible over its span, else a
// zt_emu::DeviceFault naming it. `beta` decides whether C is read.
void check_operands(const Operation& op, float beta) {
  zt_emu::check_kernel_operand(op.a_data, span_bytes(op.a), "matrix A of " + op.what);
  zt_emu::check_kernel_operand(op.b_data, span_bytes(op.b), "matrix B of " + op.what);
  if (beta != 0.0f) zt_emu::check_kernel_operand(op.c_data, span_bytes(op.c), "matrix C of " + op.what);
  zt_emu::check_kernel_operand(op.d_data, span_bytes(op.d), "matrix D of " + op.what);
  if (op.desc.epilogue == CUBLASLT_EPILOGUE_BIAS)
    zt_emu::check_kernel_operand(op.desc.bias, op.d.rows * element_size(op.d.type),
                                 "the bias vector of " + op.what);
}

// D = alpha * op(A) op(B) + beta * C (+ bias), as described at the top of the file.
void run_matmul(const Operation& op) {
  float alpha = op.alpha, beta = op.beta;
  if (device_pointers(op.desc)) {
    zt_emu::check_kernel_operand(op.alpha_device, sizeof(float), "alpha of " + op.what);
    zt_emu::check_kernel_operand(op.beta_device, sizeof(float), "beta of " + op.what);
    std::memcpy(&alpha, op.alpha_device, sizeof(float));
    std::memcpy(&beta, op.beta_device, sizeof(float));
  }
  check_operands(op, beta);  // again: memory may have been freed since the call
  const size_t m = op.d.rows, n = op.d.cols;
  const size_t k = is_transposed(op.desc.transa) ? op.a.rows : op.a.cols;
  const bool tf32 = op.desc.compute_type == CUBLAS_COMPUTE_32F_FAST_TF32;
  // Column i of `a_rows` (k x m) is row i of op(A); column j of `b_columns` (k x n) is column
  // j of op(B): each dot product below reads two contiguous runs of k floats. C is copied before
  // D is written, which makes in-place (C == D) trivially safe.
  const std::vector<float> a_rows = dense(op.a_data, op.a, !is_transposed(op.desc.transa), tf32);
  const std::vector<float> b_columns = dense(op.b_data, op.b, is_transposed(op.desc.transb), tf32);
  const std::vector<float> c_values = beta != 0.0f ? dense(op.c_data, op.c, false, false) : std::vector<float>{};
  std::vector<float> bias(m, 0.0f);
  if (op.desc.epilogue == CUBLASLT_EPILOGUE_BIAS) {
    for (size_t i = 0; i < m; ++i) bias[i] = load(op.desc.bias, i, op.d.type);
  }
  const size_t ldd = static_cast<size_t>(op.d.ld);
  zt_emu::blocked_dot_products(a_rows.data(), b_columns.data(), m, n, k, [&](size_t i, size_t j, double sum) {
    float value = alpha * static_cast<float>(sum);  // the fp32 accumulator, scaled in fp32
    if (beta != 0.0f) value += beta * c_values[i + j * m];
    value += bias[i];
    store(op.d_data, i + j * ldd, op.d.type, value);
  });
}

// The call-time checks of cublasLtMatmul beyond the problem itself: the algorithm's alignment
// needs and the operands' memory. INVALID_VALUE with the reason, or success.
Verdict check_call(const Operation& op, const cublasLtMatmulAlgo_t* algo, const void* alpha,
                   const void* beta) {
  if (!alpha || !beta) return refuse(CUBLAS_STATUS_INVALID_VALUE, "alpha and beta must not be null");
  // [D] in-place needs Cdesc == Ddesc; out-of-place C != D may differ in ld only.
  if (op.c_data == op.d_data && !(op.c == op.d))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "C and D are the same memory with different layouts");
  if (op.desc.epilogue == CUBLASLT_EPILOGUE_BIAS && !op.desc.bias)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "the BIAS epilogue needs a bias pointer");
  if (algo) {
    AlgoRequirements needs;
    if (!decode(*algo, &needs))
      return refuse(CUBLAS_STATUS_INVALID_VALUE, "algo is not one cublasLtMatmulAlgoGetHeuristic returned");
    const std::pair<const char*, std::pair<const void*, uint64_t>> pointers[] = {
        {"A", {op.a_data, needs.a}}, {"B", {op.b_data, needs.b}}, {"C", {op.c_data, needs.c}},
        {"D", {op.d_data, needs.d}}, {"bias", {op.desc.bias, needs.bias}}};
    for (const auto& [name, pointer_and_need] : pointers) {
      const auto& [pointer, need] = pointer_and_need;
      if (pointer && alignment_of(pointer) < need)
        return refuse(CUBLAS_STATUS_INVALID_VALUE,
                      std::string(name) + " is " + std::to_string(alignment_of(pointer)) +
                          "-byte aligned but the algorithm was chosen for " + std::to_string(need) +
                          "-byte alignment (the preference's MIN_ALIGNMENT, or the bias pointer "
                          "when the heuristic ran)");
    }
  }
  try {
    const float known_beta = device_pointers(op.desc) ? 1.0f : op.beta;  // unknown: assume C is read
    check_operands(op, known_beta);
  } catch (const zt_emu::DeviceFault& fault) {
    return refuse(CUBLAS_STATUS_INVALID_VALUE, fault.message);
  }
  return Verdict{};
}

// ZT_EMU_CUBLASLT_REFUSE (read once): none (unset or ""), "bias-epilogue" or "all"; anything else
// stops the process naming the variable.
bool refused_on_request(const MatmulDesc& desc) {
  static const std::string mode = [] {
    const char* value = std::getenv("ZT_EMU_CUBLASLT_REFUSE");
    const std::string text = value ? value : "";
    if (!text.empty() && text != "bias-epilogue" && text != "all") {
      std::fprintf(stderr, "zerotune emulated device: ZT_EMU_CUBLASLT_REFUSE='%s' is not bias-epilogue or all\n",
                   text.c_str());
      std::abort();
    }
    return text;
  }();
  if (mode == "all") return true;
  return mode == "bias-epilogue" && desc.epilogue == CUBLASLT_EPILOGUE_BIAS;
}

}  // namespace

// ---- the cuBLASLt API ------------------------------------------------------------------------------

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* lightHandle) {
  Guard guard(zt_emu::device_lock());
  if (!lightHandle) return CUBLAS_STATUS_INVALID_VALUE;
  *lightHandle = handles().create<cublasLtHandle_t>(cublasLtContext{});
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle) {
  Guard guard(zt_emu::device_lock());
  return handles().destroy(lightHandle) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}

size_t cublasLtGetVersion(void) { return CUBLAS_VERSION; }

const char* cublasLtGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

const char* cublasLtGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized (bad handle)";
    case CUBLAS_STATUS_ALLOC_FAILED: return "resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid value was passed (see stderr)";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "the device does not support the operation";
    case CUBLAS_STATUS_MAPPING_ERROR: return "access to GPU memory failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the operation or combination of types is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR: return "license error";
  }
  return "unknown cuBLAS status";
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* matLayout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  Guard guard(zt_emu::device_lock());
  if (!matLayout) return CUBLAS_STATUS_INVALID_VALUE;
  MatrixLayout layout;
  layout.type = static_cast<uint32_t>(type);
  layout.rows = rows;
  layout.cols = cols;
  layout.ld = ld;  // checked against the rows when used (heuristic, matmul)
  *matLayout = layouts().create<cublasLtMatrixLayout_t>(layout);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
  Guard guard(zt_emu::device_lock());
  return layouts().destroy(matLayout) || !matLayout ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t matLayout,
                                                cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t sizeInBytes) {
  Guard guard(zt_emu::device_lock());
  return set_attribute("cublasLtMatrixLayoutSetAttribute", layouts().find(matLayout), attr, buf,
                       sizeInBytes, layout_field);
}

cublasStatus_t cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t matLayout,
                                                cublasLtMatrixLayoutAttribute_t attr, void* buf,
                                                size_t sizeInBytes, size_t* sizeWritten) {
  Guard guard(zt_emu::device_lock());
  return get_attribute(layouts().find(matLayout), attr, buf, sizeInBytes, sizeWritten, layout_field);
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* matmulDesc,
                                        cublasComputeType_t computeType, cudaDataType_t scaleType) {
  Guard guard(zt_emu::device_lock());
  if (!matmulDesc) return CUBLAS_STATUS_INVALID_VALUE;
  MatmulDesc desc;
  desc.compute_type = static_cast<int32_t>(computeType);
  desc.scale_type = static_cast<int32_t>(scaleType);
  *matmulDesc = descs().create<cublasLtMatmulDesc_t>(desc);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
  Guard guard(zt_emu::device_lock());
  return descs().destroy(matmulDesc) || !matmulDesc ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc,
                                              cublasLtMatmulDescAttributes_t attr, const void* buf,
                                              size_t sizeInBytes) {
  Guard guard(zt_emu::device_lock());
  return set_attribute("cublasLtMatmulDescSetAttribute", descs().find(matmulDesc), attr, buf,
                       sizeInBytes, desc_field);
}

cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t matmulDesc,
                                              cublasLtMatmulDescAttributes_t attr, void* buf,
                                              size_t sizeInBytes, size_t* sizeWritten) {
  Guard guard(zt_emu::device_lock());
  return get_attribute(descs().find(matmulDesc), attr, buf, sizeInBytes, sizeWritten, desc_field);
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  Guard guard(zt_emu::device_lock());
  if (!pref) return CUBLAS_STATUS_INVALID_VALUE;
  *pref = preferences().create<cublasLtMatmulPreference_t>(Preference{});
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  Guard guard(zt_emu::device_lock());
  return preferences().destroy(pref) || !pref ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t sizeInBytes) {
  Guard guard(zt_emu::device_lock());
  return set_attribute("cublasLtMatmulPreferenceSetAttribute", preferences().find(pref), attr, buf,
                       sizeInBytes, preference_field);
}

cublasStatus_t cublasLtMatmulPreferenceGetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    void* buf, size_t sizeInBytes,
                                                    size_t* sizeWritten) {
  Guard guard(zt_emu::device_lock());
  return get_attribute(preferences().find(pref), attr, buf, sizeInBytes, sizeWritten, preference_field);
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle,
                                              cublasLtMatmulDesc_t operationDesc,
                                              cublasLtMatrixLayout_t Adesc,
                                              cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc,
                                              cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t preference,
                                              int requestedAlgoCount,
                                              cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                              int* returnAlgoCount) {
  Guard guard(zt_emu::device_lock());
  if (!handles().find(lightHandle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  const MatmulDesc* desc = descs().find(operationDesc);
  const MatrixLayout *a = layouts().find(Adesc), *b = layouts().find(Bdesc);
  const MatrixLayout *c = layouts().find(Cdesc), *d = layouts().find(Ddesc);
  const Preference* wanted = preferences().find(preference);
  // [H]: INVALID_VALUE "if requestedAlgoCount is less or equal to zero".
  if (!desc || !a || !b || !c || !d || !wanted || requestedAlgoCount <= 0 || !heuristicResultsArray ||
      !returnAlgoCount)
    return CUBLAS_STATUS_INVALID_VALUE;
  *returnAlgoCount = 0;
  // ZT_EMU_CUBLASLT_REFUSE: a real cuBLASLt may have no algorithm for a shape, alignment or
  // epilogue on a given GPU (it answers with zero results); the emulator has one for every
  // valid problem, so the backend's fallbacks would never run. "bias-epilogue" refuses every
  // problem with the bias epilogue, "all" every problem (docs/emulated-device.md).
  if (refused_on_request(*desc)) return CUBLAS_STATUS_SUCCESS;
  AlgoRequirements needs;
  Verdict verdict = check_problem(*desc, *a, *b, *c, *d);
  if (verdict.ok()) verdict = choose_algorithm(*desc, *a, *b, *c, *d, *wanted, &needs);
  if (!verdict.ok()) {
    if (verdict.status != CUBLAS_STATUS_NOT_SUPPORTED || zt_emu::env_int("ZT_EMU_VERBOSE", 0))
      report("cublasLtMatmulAlgoGetHeuristic", verdict.reason);
    return verdict.status;
  }
  heuristicResultsArray[0] = cublasLtMatmulHeuristicResult_t{};
  heuristicResultsArray[0].algo = encode(needs);
  heuristicResultsArray[0].workspaceSize = 0;
  heuristicResultsArray[0].state = CUBLAS_STATUS_SUCCESS;
  heuristicResultsArray[0].wavesCount = 1.0f;
  *returnAlgoCount = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc,
                              const void* alpha, const void* A, cublasLtMatrixLayout_t Adesc,
                              const void* B, cublasLtMatrixLayout_t Bdesc, const void* beta,
                              const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo,
                              void* workspace, size_t workspaceSizeInBytes, cudaStream_t stream) {
  (void)workspace;  // the emulated algorithm needs no workspace (its heuristic result says 0)
  (void)workspaceSizeInBytes;
  constexpr const char* kCall = "cublasLtMatmul";
  Guard guard(zt_emu::device_lock());
  // [H]: NOT_INITIALIZED "if cuBLASLt handle has not been initialized".
  if (!handles().find(lightHandle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  const MatmulDesc* desc = descs().find(computeDesc);
  const MatrixLayout *a = layouts().find(Adesc), *b = layouts().find(Bdesc);
  const MatrixLayout *c = layouts().find(Cdesc), *d = layouts().find(Ddesc);
  if (!desc || !a || !b || !c || !d) {
    report(kCall, "a null, destroyed or unknown descriptor or layout");
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (const Verdict verdict = check_problem(*desc, *a, *b, *c, *d); !verdict.ok()) {
    report(kCall, verdict.reason);
    return verdict.status;
  }
  Operation op{*desc, *a, *b, *c, *d, A, B, C, D, 1.0f, 0.0f, nullptr, nullptr, {}};
  const uint64_t k = is_transposed(desc->transa) ? a->rows : a->cols;
  op.what = "cublasLtMatmul (m=" + std::to_string(d->rows) + ", n=" + std::to_string(d->cols) +
            ", k=" + std::to_string(k) + ")";
  if (device_pointers(*desc)) {
    op.alpha_device = alpha;
    op.beta_device = beta;
  } else if (alpha && beta) {  // HOST pointer mode: the values as they are now
    std::memcpy(&op.alpha, alpha, sizeof(float));
    std::memcpy(&op.beta, beta, sizeof(float));
  }
  if (const Verdict verdict = check_call(op, algo, alpha, beta); !verdict.ok()) {
    report(kCall, verdict.reason);
    return verdict.status;
  }
  if (zt_emu::sticky_error() != cudaSuccess) return CUBLAS_STATUS_EXECUTION_FAILED;
  try {
    const std::string what = op.what;
    zt_emu::enqueue(stream, zt_emu::Work{what, [op = std::move(op)] { run_matmul(op); }, {}});
  } catch (const zt_emu::DeviceFault& fault) {  // e.g. a stream that does not exist
    report(kCall, fault.message);
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
