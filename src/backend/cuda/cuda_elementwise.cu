// The CUDA backend's pointwise ops: accumulate, scale, add_bias, SwiGLU, ReLU, inverted dropout
// (the CPU backend's Philox masks, bit for bit) and rotary position embedding. Each thread
// handles 8 consecutive elements with 16-byte loads and stores where alignment allows.
// Arithmetic follows the CPU backend's expressions; explicit __fmul_rn/__fadd_rn where a fused
// multiply-add would change the rounding, so results are what the formula says, independent of
// the compiler's contraction choices.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_kernels.cuh"
#include "core/rng.h"

namespace zt::cuda {

namespace {

template <class DstFormat, class SrcFormat>
__global__ void accumulate_kernel(typename DstFormat::Storage* dst,
                                  const typename SrcFormat::Storage* src, int64_t n, float scale) {
  for_each_vector(n, [&](int64_t first) {
    float out[kVector], in[kVector];
    load8<DstFormat>(dst, first, n, out);
    load8<SrcFormat>(src, first, n, in);
#pragma unroll
    for (int k = 0; k < kVector; ++k) out[k] = __fadd_rn(out[k], __fmul_rn(scale, in[k]));
    store8<DstFormat>(dst, first, n, out);
  });
}

template <class Format>
__global__ void scale_kernel(typename Format::Storage* x, int64_t n, float factor) {
  for_each_vector(n, [&](int64_t first) {
    float values[kVector];
    load8<Format>(x, first, n, values);
#pragma unroll
    for (int k = 0; k < kVector; ++k) values[k] *= factor;
    store8<Format>(x, first, n, values);
  });
}

template <class Format>
__global__ void clamp_kernel(typename Format::Storage* x, int64_t n, float lo, float hi) {
  for_each_vector(n, [&](int64_t first) {
    float values[kVector];
    load8<Format>(x, first, n, values);
#pragma unroll
    for (int k = 0; k < kVector; ++k) values[k] = values[k] < lo ? lo : values[k] > hi ? hi : values[k];  // NaN kept
    store8<Format>(x, first, n, values);
  });
}

// y[N,C] += bias[C] (y flattened to n = N*C elements).
template <class Format>
__global__ void add_bias_kernel(typename Format::Storage* y, FloatArg bias, int64_t n,
                                int64_t cols) {
  for_each_vector(n, [&](int64_t first) {
    float values[kVector];
    load8<Format>(y, first, n, values);
#pragma unroll
    for (int k = 0; k < kVector; ++k) {
      if (first + k < n) values[k] += bias.load((first + k) % cols);
    }
    store8<Format>(y, first, n, values);
  });
}

template <class Format>
__global__ void swiglu_forward_kernel(typename Format::Storage* h,
                                      const typename Format::Storage* gate,
                                      const typename Format::Storage* up, int64_t n) {
  for_each_vector(n, [&](int64_t first) {
    float g[kVector], u[kVector], out[kVector];
    load8<Format>(gate, first, n, g);
    load8<Format>(up, first, n, u);
#pragma unroll
    for (int k = 0; k < kVector; ++k) out[k] = g[k] / (1.0f + expf(-g[k])) * u[k];  // silu(g) * up
    store8<Format>(h, first, n, out);
  });
}

template <class Format>
__global__ void swiglu_backward_kernel(typename Format::Storage* dgate,
                                       typename Format::Storage* dup,
                                       const typename Format::Storage* dh,
                                       const typename Format::Storage* gate,
                                       const typename Format::Storage* up, int64_t n) {
  for_each_vector(n, [&](int64_t first) {
    float g[kVector], u[kVector], grad[kVector], dg[kVector], du[kVector];
    load8<Format>(gate, first, n, g);
    load8<Format>(up, first, n, u);
    load8<Format>(dh, first, n, grad);
#pragma unroll
    for (int k = 0; k < kVector; ++k) {
      const float sigmoid = 1.0f / (1.0f + expf(-g[k]));
      // silu'(g) = s + g s (1 - s) for s = sigmoid(g).
      const float silu_derivative = sigmoid * (1.0f + g[k] * (1.0f - sigmoid));
      dg[k] = grad[k] * u[k] * silu_derivative;
      du[k] = grad[k] * (g[k] * sigmoid);
    }
    store8<Format>(dgate, first, n, dg);
    store8<Format>(dup, first, n, du);
  });
}

// y = max(x, 0) (NaN stays NaN); y may alias x.
template <class Format>
__global__ void relu_forward_kernel(typename Format::Storage* y,
                                    const typename Format::Storage* x, int64_t n) {
  for_each_vector(n, [&](int64_t first) {
    float values[kVector];
    load8<Format>(x, first, n, values);
#pragma unroll
    for (int k = 0; k < kVector; ++k) values[k] = values[k] < 0.0f ? 0.0f : values[k];
    store8<Format>(y, first, n, values);
  });
}

// dx = dy * (y > 0); dx may alias dy.
template <class Format>
__global__ void relu_backward_kernel(typename Format::Storage* dx,
                                     const typename Format::Storage* dy,
                                     const typename Format::Storage* y, int64_t n) {
  for_each_vector(n, [&](int64_t first) {
    float grad[kVector], out[kVector];
    load8<Format>(dy, first, n, grad);
    load8<Format>(y, first, n, out);
#pragma unroll
    for (int k = 0; k < kVector; ++k) grad[k] = out[k] > 0.0f ? grad[k] : 0.0f;
    store8<Format>(dx, first, n, grad);
  });
}

// out[N,C] = in * keep / (1 - p), keep = uniform(key, row_ids[n] * C + c) >= p, exactly as the
// CPU backend draws it. A negative row id sets a deferred error bit (reported at the next sync).
template <class Format>
__global__ void dropout_kernel(typename Format::Storage* out, const typename Format::Storage* in,
                               const int64_t* row_ids, int64_t n, int64_t cols, float p,
                               float keep_scale, RngKey key, unsigned long long* deferred_errors) {
  for_each_vector(n, [&](int64_t first) {
    float values[kVector];
    load8<Format>(in, first, n, values);
#pragma unroll
    for (int k = 0; k < kVector; ++k) {
      const int64_t i = first + k;
      if (i >= n) break;
      const int64_t row_id = row_ids[i / cols];
      if (row_id < 0) atomicOr(deferred_errors, static_cast<unsigned long long>(kDropoutNegativeRowId));
      const uint64_t index = static_cast<uint64_t>(row_id * cols) + static_cast<uint64_t>(i % cols);
      const bool keep = rng_uniform(key, index) >= p;
      values[k] = keep ? values[k] * keep_scale : 0.0f;
    }
    store8<Format>(out, first, n, values);
  });
}

// Rotates the pairs (x[..., i], x[..., i + D/2]) of x[B,T,H,D] in place by angle
// t * inv_freq[i] (direction +1) or its negative (-1, the transpose for backward).
template <class Format>
__global__ void rope_kernel(typename Format::Storage* x, const float* inv_freq,
                            const int32_t* positions, int64_t time, int64_t heads, int64_t half,
                            float direction, int64_t pairs) {
  for (int64_t pair = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; pair < pairs;
       pair += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = pair % half;
    const int64_t token_head = pair / half;  // (b * T + t) * H + h
    const int64_t token = token_head / heads;  // b * T + t
    const int64_t position = positions ? positions[token] : token % time;
    // As HF: angle = position * inv_freq in fp32, then cos and sin in fp32.
    const float angle = static_cast<float>(position) * inv_freq[i];
    const float cosine = cosf(angle);
    const float sine = direction * sinf(angle);
    typename Format::Storage* first = x + token_head * 2 * half + i;  // x1; x2 is half further
    const float x1 = Format::to_float(first[0]);
    const float x2 = Format::to_float(first[half]);
    // x * cos + rotate_half(x) * sin, rotate_half(x) = (-x2, x1).
    first[0] = Format::from_float(__fsub_rn(__fmul_rn(x1, cosine), __fmul_rn(x2, sine)));
    first[half] = Format::from_float(__fadd_rn(__fmul_rn(x2, cosine), __fmul_rn(x1, sine)));
  }
}

void rotate_pairs(CudaBackendImpl& backend, const char* op, const Tensor& x,
                  const Tensor& inv_freq, const Tensor& positions, float direction) {
  expect_device_float(op, "x", x);
  expect_device(op, "inv_freq", inv_freq, DType::F32);
  ZT_CHECK(x.ndim == 4, op, ": x must be [B, T, H, D], got ", x.describe());
  const int64_t time = x.dim(1), heads = x.dim(2), head_dim = x.dim(3);
  ZT_CHECK(head_dim % 2 == 0, op, ": head dim D must be even, got ", x.describe());
  const int64_t half = head_dim / 2;
  expect_shape(op, "inv_freq", inv_freq, {half});
  const int32_t* position_of = positions_data(op, positions, x.dim(0), time);
  const int64_t pairs = x.numel() / 2;
  if (pairs == 0) return;
  dispatch_float(x.dtype, op, "x", [&](auto format) {
    using Format = decltype(format);
    launch({grid_for(pairs), kThreads, 0, backend.stream()}, rope_kernel<Format>,
        data_of<Format>(x), static_cast<const float*>(inv_freq.data), position_of, time, heads,
        half, direction, pairs);
    ZT_CUDA_CHECK_LAUNCH("rope_kernel");
  });
}

}  // namespace

void CudaBackendImpl::accumulate(Tensor dst, Tensor src, float scale_factor) {
  expect_device_float("accumulate", "dst", dst);
  expect_device_float("accumulate", "src", src);
  expect_numel("accumulate", "src", src, dst.numel(), "the elements of dst");
  const int64_t n = dst.numel();
  if (n == 0) return;
  dispatch_float(dst.dtype, "accumulate", "dst", [&](auto dst_format) {
    using DstFormat = decltype(dst_format);
    dispatch_float(src.dtype, "accumulate", "src", [&](auto src_format) {
      using SrcFormat = decltype(src_format);
      launch({grid_for(vectors_of(n)), kThreads, 0, stream_}, accumulate_kernel<DstFormat, SrcFormat>,
          data_of<DstFormat>(dst), data_of<SrcFormat>(src), n, scale_factor);
      ZT_CUDA_CHECK_LAUNCH("accumulate_kernel");
    });
  });
}

void CudaBackendImpl::scale(Tensor dst, float factor) {
  expect_device_float("scale", "dst", dst);
  const int64_t n = dst.numel();
  if (n == 0) return;
  dispatch_float(dst.dtype, "scale", "dst", [&](auto format) {
    using Format = decltype(format);
    launch({grid_for(vectors_of(n)), kThreads, 0, stream_}, scale_kernel<Format>, data_of<Format>(dst), n,
                                                                             factor);
    ZT_CUDA_CHECK_LAUNCH("scale_kernel");
  });
}

void CudaBackendImpl::clamp(Tensor x, float lo, float hi) {
  expect_device_float("clamp", "x", x);
  ZT_CHECK(lo <= hi, "clamp: lo ", lo, " > hi ", hi);
  const int64_t n = x.numel();
  if (n == 0) return;
  dispatch_float(x.dtype, "clamp", "x", [&](auto format) {
    using Format = decltype(format);
    launch({grid_for(vectors_of(n)), kThreads, 0, stream_}, clamp_kernel<Format>, data_of<Format>(x), n, lo, hi);
    ZT_CUDA_CHECK_LAUNCH("clamp_kernel");
  });
}

void CudaBackendImpl::add_bias(Tensor y, Tensor bias) {
  expect_device_float("add_bias", "y", y);
  expect_device_float("add_bias", "bias", bias);
  const MatrixShape shape = matrix_shape("add_bias", "y", y);
  expect_shape("add_bias", "bias", bias, {shape.cols});
  const int64_t n = y.numel();
  if (n == 0) return;
  dispatch_float(y.dtype, "add_bias", "y", [&](auto format) {
    using Format = decltype(format);
    launch({grid_for(vectors_of(n)), kThreads, 0, stream_}, add_bias_kernel<Format>,
        data_of<Format>(y), float_arg(bias), n, shape.cols);
    ZT_CUDA_CHECK_LAUNCH("add_bias_kernel");
  });
}

void CudaBackendImpl::swiglu_forward(Tensor h, Tensor gate, Tensor up) {
  const char* op = "swiglu_forward";
  expect_device_float(op, "h", h);
  expect_device_like(op, "gate", gate, "h", h);
  expect_device_like(op, "up", up, "h", h);
  const int64_t n = h.numel();
  if (n == 0) return;
  dispatch_float(h.dtype, op, "h", [&](auto format) {
    using Format = decltype(format);
    launch({grid_for(vectors_of(n)), kThreads, 0, stream_}, swiglu_forward_kernel<Format>,
        data_of<Format>(h), data_of<Format>(gate), data_of<Format>(up), n);
    ZT_CUDA_CHECK_LAUNCH("swiglu_forward_kernel");
  });
}

void CudaBackendImpl::swiglu_backward(Tensor dgate, Tensor dup, Tensor dh, Tensor gate,
                                      Tensor up) {
  const char* op = "swiglu_backward";
  expect_device_float(op, "dh", dh);
  const char* names[] = {"dgate", "dup", "gate", "up"};
  const Tensor* tensors[] = {&dgate, &dup, &gate, &up};
  for (int i = 0; i < 4; ++i) expect_device_like(op, names[i], *tensors[i], "dh", dh);
  const int64_t n = dh.numel();
  if (n == 0) return;
  dispatch_float(dh.dtype, op, "dh", [&](auto format) {
    using Format = decltype(format);
    launch({grid_for(vectors_of(n)), kThreads, 0, stream_}, swiglu_backward_kernel<Format>,
        data_of<Format>(dgate), data_of<Format>(dup), data_of<Format>(dh), data_of<Format>(gate),
        data_of<Format>(up), n);
    ZT_CUDA_CHECK_LAUNCH("swiglu_backward_kernel");
  });
}

void CudaBackendImpl::relu_forward(Tensor y, Tensor x) {
  expect_device_float("relu_forward", "x", x);
  expect_device_like("relu_forward", "y", y, "x", x);
  const int64_t n = x.numel();
  if (n == 0) return;
  dispatch_float(x.dtype, "relu_forward", "x", [&](auto format) {
    using Format = decltype(format);
    launch({grid_for(vectors_of(n)), kThreads, 0, stream_}, relu_forward_kernel<Format>,
        data_of<Format>(y), data_of<Format>(x), n);
    ZT_CUDA_CHECK_LAUNCH("relu_forward_kernel");
  });
}

void CudaBackendImpl::relu_backward(Tensor dx, Tensor dy, Tensor y) {
  const char* op = "relu_backward";
  expect_device_float(op, "dx", dx);
  expect_device_like(op, "dy", dy, "dx", dx);
  expect_device_like(op, "y", y, "dx", dx);
  const int64_t n = dx.numel();
  if (n == 0) return;
  dispatch_float(dx.dtype, op, "dx", [&](auto format) {
    using Format = decltype(format);
    launch({grid_for(vectors_of(n)), kThreads, 0, stream_}, relu_backward_kernel<Format>,
        data_of<Format>(dx), data_of<Format>(dy), data_of<Format>(y), n);
    ZT_CUDA_CHECK_LAUNCH("relu_backward_kernel");
  });
}

void CudaBackendImpl::dropout(Tensor out, Tensor in, float p, RngKey key, Tensor row_ids) {
  const char* op = "dropout";
  expect_device_float(op, "out", out);
  expect_device(op, "in", in);
  expect_same_shape(op, "in", in, "out", out);
  expect_same_dtype(op, "in", in, "out", out);
  expect_device(op, "row_ids", row_ids, DType::I64);
  const MatrixShape shape = matrix_shape(op, "out", out);
  expect_numel(op, "row_ids", row_ids, shape.rows, "one global position per row of out");
  ZT_CHECK(p >= 0.0f && p < 1.0f, op, ": probability p = ", p, " must be in [0, 1)");
  const int64_t n = out.numel();
  if (n == 0) return;
  if (p == 0.0f) {  // identity (no random numbers drawn)
    if (out.data != in.data) {
      ZT_CUDA_CHECK(cudaMemcpyAsync(out.data, in.data, out.bytes(), cudaMemcpyDeviceToDevice, stream_));
    }
    return;
  }
  const float keep_scale = 1.0f / (1.0f - p);
  dispatch_float(out.dtype, op, "out", [&](auto format) {
    using Format = decltype(format);
    launch({grid_for(vectors_of(n)), kThreads, 0, stream_}, dropout_kernel<Format>,
        data_of<Format>(out), data_of<Format>(in), static_cast<const int64_t*>(row_ids.data), n,
        shape.cols, p, keep_scale, key,
        reinterpret_cast<unsigned long long*>(device_status() + kDeferredErrors));
    ZT_CUDA_CHECK_LAUNCH("dropout_kernel");
  });
}

void CudaBackendImpl::rope_forward(Tensor x, Tensor inv_freq, Tensor positions) {
  rotate_pairs(*this, "rope_forward", x, inv_freq, positions, 1.0f);
}

void CudaBackendImpl::rope_backward(Tensor dx, Tensor inv_freq, Tensor positions) {
  rotate_pairs(*this, "rope_backward", dx, inv_freq, positions, -1.0f);
}

}  // namespace zt::cuda
