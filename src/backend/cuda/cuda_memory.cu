// The CUDA backend's copies (dtype conversions fp32 <-> bf16 <-> fp16 with round to nearest
// even, across host and device), queued same-dtype copies (copy_async), in-place rounding of
// fp32 values to bf16/fp16, and fills.
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_kernels.cuh"
#include "backend/buffer.h"

namespace zt::cuda {

namespace {

// dst[n] = src[n] converted, 8 elements per thread.
template <class DstFormat, class SrcFormat>
__global__ void convert_kernel(typename DstFormat::Storage* dst,
                               const typename SrcFormat::Storage* src, int64_t n) {
  const int64_t vectors = vectors_of(n);
  for (int64_t v = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; v < vectors;
       v += int64_t{gridDim.x} * blockDim.x) {
    float values[kVector];
    load8<SrcFormat>(src, v * kVector, n, values);
    store8<DstFormat>(dst, v * kVector, n, values);
  }
}

// x[n] = the nearest value of Format (fp32 storage kept).
template <class Format>
__global__ void round_kernel(float* x, int64_t n) {
  for_each_vector(n, [&](int64_t first) {
    float values[kVector];
    load8<Fp32Format>(x, first, n, values);
#pragma unroll
    for (int k = 0; k < kVector; ++k) values[k] = Format::to_float(Format::from_float(values[k]));
    store8<Fp32Format>(x, first, n, values);
  });
}

// dst[n] = value (a bit pattern of 2, 4 or 8 bytes).
template <class Word>
__global__ void fill_kernel(Word* dst, int64_t n, Word value) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    dst[i] = value;
  }
}

template <class Word>
void launch_fill(cudaStream_t stream, void* dst, int64_t n, Word value) {
  launch({grid_for(n), kThreads, 0, stream}, fill_kernel<Word>, static_cast<Word*>(dst), n, value);
  ZT_CUDA_CHECK_LAUNCH("fill_kernel");
}


// dst = src converted (both device memory, same numel, float dtypes).
void launch_convert(cudaStream_t stream, Tensor dst, Tensor src) {
  const int64_t n = src.numel();
  dispatch_float(dst.dtype, "copy", "dst", [&](auto dst_format) {
    using DstFormat = decltype(dst_format);
    dispatch_float(src.dtype, "copy", "src", [&](auto src_format) {
      using SrcFormat = decltype(src_format);
      launch({grid_for(vectors_of(n)), kThreads, 0, stream}, convert_kernel<DstFormat, SrcFormat>,
          static_cast<typename DstFormat::Storage*>(dst.data),
          static_cast<const typename SrcFormat::Storage*>(src.data), n);
      ZT_CUDA_CHECK_LAUNCH("convert_kernel");
    });
  });
}

// The checks copy() and copy_async() share; false when there is nothing to copy.
bool has_elements_to_copy(const char* op, const Tensor& dst, const Tensor& src) {
  ZT_CHECK(dst.numel() == src.numel(), op, ": dst ", dst.describe(), " and src ", src.describe(),
           " must have the same number of elements");
  if (src.numel() == 0) return false;
  ZT_CHECK(dst.data != nullptr && src.data != nullptr, op, ": empty view (dst ", dst.describe(),
           ", src ", src.describe(), ")");
  return true;
}

// dst = src byte for byte, queued on `stream` (device or pinned host memory on either side).
void queue_same_dtype_copy(cudaStream_t stream, const Tensor& dst, const Tensor& src) {
  if (dst.data == src.data) return;
  ZT_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, src.bytes(), cudaMemcpyDefault, stream));
}

// True for host memory that CUDA has not page-locked (malloc, new, std::vector): the driver
// stages its copies through pinned buffers of its own and "might be synchronous" with the host
// (CUDA's API synchronisation rules), so a device -> host cudaMemcpyAsync may return before the
// data has landed. One cudaPointerGetAttributes per call (a lookup in the driver's tables).
bool is_pageable_host_memory(const Tensor& tensor) {
  if (tensor.device != Device::CPU) return false;
  cudaPointerAttributes attributes{};
  ZT_CUDA_CHECK(cudaPointerGetAttributes(&attributes, tensor.data));
  return attributes.type == cudaMemoryTypeUnregistered;
}

}  // namespace

// A copy that touches host memory is complete, for the host, when copy() returns:
// - device -> host: the caller reads the data next (ZeRO-Offload's CPU Adam reads gradients),
//   so downloads wait for the stream (download(): one wait);
// - host -> device: the caller may overwrite the source right away (the CPU Adam writes the next
//   master values). cudaMemcpyAsync from PINNED memory returns at once and the DMA reads the
//   source later; from PAGEABLE memory it may wait for the device. So an upload of at most
//   HostStaging::kMaxUploadBytes (a micro-batch's ids, targets, mask, positions; a scalar) is
//   copied into pinned staging on the host and queued from there without any wait
//   (cuda_host_staging.h); a larger one (weights at set-up) is queued and the stream waited for.
// Device -> device copies stay queued.
void CudaBackendImpl::note_copy(const Tensor& dst, const Tensor& src) {
  if (dst.device != Device::CUDA) return;
  if (src.device == Device::CPU && src.dtype == DType::I32 && dst.dtype == DType::I32) {
    uploads_.note_upload(dst.data, static_cast<const int32_t*>(src.data), src.numel());
  } else {
    uploads_.note_write(dst.data, dst.bytes());
  }
}

void CudaBackendImpl::copy(Tensor dst, Tensor src) {
  if (!has_elements_to_copy("copy", dst, src)) return;
  note_copy(dst, src);
  const bool upload = src.device == Device::CPU && dst.device == Device::CUDA;
  const bool staged = upload && src.bytes() <= HostStaging::kMaxUploadBytes;
  if (dst.dtype == src.dtype) {
    if (dst.device == Device::CPU && src.device == Device::CPU) {
      if (dst.data != src.data) std::memmove(dst.data, src.data, src.bytes());
    } else if (dst.device == Device::CPU) {
      download(dst.data, src.data, src.bytes());
    } else if (staged) {
      this->upload(dst.data, src.data, src.bytes());
    } else {
      queue_same_dtype_copy(stream_, dst, src);
      if (upload) synchronize();  // the host source has been read (see above)
    }
    return;
  }
  ZT_CHECK(is_float(dst.dtype) && is_float(src.dtype), "copy: cannot convert ", src.describe(),
           " to ", dst.describe(), " (conversions are between fp32, bf16 and fp16 only)");
  // Convert on the device; a host side goes through a device staging buffer (released at the
  // end of this call: its block is reused in stream order, after the conversion).
  Buffer device_src_buffer, device_dst_buffer;
  Tensor device_src = src, device_dst = dst;
  if (src.device == Device::CPU) {
    device_src_buffer = scratch(src.bytes());
    device_src.data = device_src_buffer.data();
    device_src.device = Device::CUDA;
    if (staged) {
      this->upload(device_src.data, src.data, src.bytes());
    } else {
      ZT_CUDA_CHECK(cudaMemcpyAsync(device_src.data, src.data, src.bytes(), cudaMemcpyHostToDevice, stream_));
    }
  }
  if (dst.device == Device::CPU) {
    device_dst_buffer = scratch(dst.bytes());
    device_dst.data = device_dst_buffer.data();
    device_dst.device = Device::CUDA;
  }
  launch_convert(stream_, device_dst, device_src);
  if (dst.device == Device::CPU) {
    download(dst.data, device_dst.data, dst.bytes());  // waits
  } else if (upload && !staged) {
    synchronize();  // the host source has been read (see above)
  }
}

// Queued on the stream: device <-> device, and device <-> pinned host memory (DMA reads or
// writes the host side later: the caller waits for an event first, see Backend::copy_async).
// Host <-> host and pageable host memory take copy(), complete on return, which the contract
// allows: a pageable device -> host cudaMemcpyAsync may return before its data has landed, and
// CUDA does not say that an event recorded after it covers the driver's copy out of its staging
// buffer.
void CudaBackendImpl::copy_async(Tensor dst, Tensor src) {
  ZT_CHECK(dst.dtype == src.dtype, "copy_async: dst ", dst.describe(), " and src ", src.describe(),
           " must have the same dtype (copy() converts between dtypes)");
  if (!has_elements_to_copy("copy_async", dst, src)) return;
  note_copy(dst, src);
  const bool host_only = dst.device == Device::CPU && src.device == Device::CPU;
  if (host_only || is_pageable_host_memory(dst) || is_pageable_host_memory(src)) {
    copy(dst, src);
    return;
  }
  queue_same_dtype_copy(stream_, dst, src);
}

// On the transfer stream toward dst's side after the compute issued so far (an event of record_event_on: no
// deferred-error snapshot, the host never waits for it); pageable or host-only copies take
// copy() (complete on return, as copy_async's), which needs every earlier compute done:
// synchronize first.
std::unique_ptr<BackendEvent> CudaBackendImpl::transfer_async(Tensor dst, Tensor src) {
  ZT_CHECK(dst.dtype == src.dtype, "transfer_async: dst ", dst.describe(), " and src ",
           src.describe(), " must have the same dtype");
  const bool host_only = dst.device == Device::CPU && src.device == Device::CPU;
  if (!has_elements_to_copy("transfer_async", dst, src) || host_only ||
      is_pageable_host_memory(dst) || is_pageable_host_memory(src)) {
    synchronize();
    copy(dst, src);
    return Backend::record_event();
  }
  note_copy(dst, src);
  cudaStream_t stream = transfer_stream(dst.device);
  const std::unique_ptr<BackendEvent> issued = record_event_on(stream_);
  ZT_CUDA_CHECK(cudaStreamWaitEvent(stream, cuda_event_of(issued.get()), 0));
  queue_same_dtype_copy(stream, dst, src);
  return record_event_on(stream);
}

void CudaBackendImpl::round_to(Tensor x, DType dtype) {
  expect_device("round_to", "x", x, DType::F32);
  const int64_t n = x.numel();
  if (dtype == DType::F32 || n == 0) return;
  ZT_CHECK(dtype == DType::BF16 || dtype == DType::F16, "round_to: cannot round to ",
           dtype_name(dtype));
  auto round_with = [&](auto format) {
    using Format = decltype(format);
    launch({grid_for(vectors_of(n)), kThreads, 0, stream_}, round_kernel<Format>, x.f32(), n);
    ZT_CUDA_CHECK_LAUNCH("round_kernel");
  };
  if (dtype == DType::BF16) {
    round_with(Bf16Format{});
  } else {
    round_with(Fp16Format{});
  }
}

void CudaBackendImpl::fill(Tensor dst, float value) {
  expect_device("fill", "dst", dst);
  const int64_t n = dst.numel();
  if (n == 0) return;
  uploads_.note_write(dst.data, dst.bytes());
  switch (dst.dtype) {
    case DType::F32: return launch_fill(stream_, dst.data, n, std::bit_cast<uint32_t>(value));
    case DType::BF16: return launch_fill(stream_, dst.data, n, float_to_bf16(value));
    case DType::F16: return launch_fill(stream_, dst.data, n, float_to_fp16(value));
    case DType::I32:
      return launch_fill(stream_, dst.data, n,
                         static_cast<uint32_t>(integer_fill_value<int32_t>(dst, value)));
    case DType::I64:
      return launch_fill(stream_, dst.data, n,
                         static_cast<uint64_t>(integer_fill_value<int64_t>(dst, value)));
    case DType::U8:
      ZT_CUDA_CHECK(cudaMemsetAsync(dst.data, integer_fill_value<uint8_t>(dst, value),
                                    static_cast<size_t>(n), stream_));
      return;
    case DType::F64:  // scalar accumulators (a step's loss sum): the float widened exactly
      return launch_fill(stream_, dst.data, n, std::bit_cast<uint64_t>(static_cast<double>(value)));
  }
  fail("fill: unknown dtype in ", dst.describe());
}

}  // namespace zt::cuda
