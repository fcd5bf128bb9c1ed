// The CUDA runtime and NVRTC functions that cudnn-frontend's headers reference besides cuDNN
// (docs/emulated-device.md, "cuDNN"): the device attributes it reads to learn the SM version,
// and the stream-capture query it makes before executing. The rest belong to paths the emulated
// device does not have: CUDA graphs (user objects retained by a captured graph), kernels loaded
// from a library, and the frontend's own runtime-compiled (NVRTC) engines for sm_100. They exist
// so that executables link, and refuse: cudaErrorNotSupported / NVRTC_ERROR_INTERNAL_ERROR with
// a message, never a silent success.
#include <cuda_runtime.h>
#include <nvrtc.h>

#include <string>

#include "emu/emu_internal.h"

namespace {

cudaError_t not_emulated(const char* what) {
  zt_emu::set_last_error(cudaErrorNotSupported,
                         std::string(what) + " is not emulated (no CUDA graphs or loaded libraries on the emulated device)");
  return cudaErrorNotSupported;
}

}  // namespace

extern "C" {

// The attributes the frontend and cuDNN users read, from the emulated device's properties.
cudaError_t cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attr, int device) {
  if (!value) {
    zt_emu::set_last_error(cudaErrorInvalidValue, "cudaDeviceGetAttribute: value is null");
    return cudaErrorInvalidValue;
  }
  cudaDeviceProp prop;
  if (const cudaError_t error = cudaGetDeviceProperties(&prop, device); error != cudaSuccess) return error;
  switch (attr) {
    case cudaDevAttrComputeCapabilityMajor: *value = prop.major; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor: *value = prop.minor; return cudaSuccess;
    case cudaDevAttrMultiProcessorCount: *value = prop.multiProcessorCount; return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = static_cast<int>(prop.sharedMemPerBlockOptin); return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = static_cast<int>(prop.sharedMemPerBlock); return cudaSuccess;
    case cudaDevAttrMaxThreadsPerBlock: *value = prop.maxThreadsPerBlock; return cudaSuccess;
    case cudaDevAttrWarpSize: *value = prop.warpSize; return cudaSuccess;
    default:
      zt_emu::set_last_error(cudaErrorInvalidValue,
                             "cudaDeviceGetAttribute: attribute " + std::to_string(attr) + " is not emulated");
      return cudaErrorInvalidValue;
  }
}

// No stream is ever being captured on the emulated device.
cudaError_t cudaStreamGetCaptureInfo(cudaStream_t, enum cudaStreamCaptureStatus* captureStatus_out,
                                     unsigned long long* id_out, cudaGraph_t* graph_out,
                                     const cudaGraphNode_t** dependencies_out, const cudaGraphEdgeData** edgeData_out,
                                     size_t* numDependencies_out) {
  if (captureStatus_out) *captureStatus_out = cudaStreamCaptureStatusNone;
  if (id_out) *id_out = 0;
  if (graph_out) *graph_out = nullptr;
  if (dependencies_out) *dependencies_out = nullptr;
  if (edgeData_out) *edgeData_out = nullptr;
  if (numDependencies_out) *numDependencies_out = 0;
  return cudaSuccess;
}

cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode* mode) {
  if (!mode) return cudaErrorInvalidValue;
  *mode = cudaStreamCaptureModeGlobal;  // the mode in effect when nothing is captured
  return cudaSuccess;
}

cudaError_t cudaUserObjectCreate(cudaUserObject_t*, void*, cudaHostFn_t, unsigned int, unsigned int) {
  return not_emulated("cudaUserObjectCreate");
}
cudaError_t cudaUserObjectRelease(cudaUserObject_t, unsigned int) { return not_emulated("cudaUserObjectRelease"); }
cudaError_t cudaGraphRetainUserObject(cudaGraph_t, cudaUserObject_t, unsigned int, unsigned int) {
  return not_emulated("cudaGraphRetainUserObject");
}
cudaError_t cudaLibraryLoadData(cudaLibrary_t*, const void*, enum cudaJitOption*, void**, unsigned int,
                                enum cudaLibraryOption*, void**, unsigned int) {
  return not_emulated("cudaLibraryLoadData");
}
cudaError_t cudaLibraryUnload(cudaLibrary_t) { return not_emulated("cudaLibraryUnload"); }
cudaError_t cudaLibraryGetKernel(cudaKernel_t*, cudaLibrary_t, const char*) { return not_emulated("cudaLibraryGetKernel"); }
cudaError_t cudaKernelSetAttributeForDevice(cudaKernel_t, enum cudaFuncAttribute, int, int) {
  return not_emulated("cudaKernelSetAttributeForDevice");
}
// Kernels launch through zt::cuda::launch on the emulated device; a raw launch has no kernel body.
cudaError_t cudaLaunchKernel(const void*, dim3, dim3, void**, size_t, cudaStream_t) {
  return not_emulated("cudaLaunchKernel");
}

nvrtcResult nvrtcCreateProgram(nvrtcProgram*, const char*, const char*, int, const char* const*, const char* const*) {
  return NVRTC_ERROR_INTERNAL_ERROR;  // no runtime compilation on the emulated device
}
nvrtcResult nvrtcDestroyProgram(nvrtcProgram*) { return NVRTC_ERROR_INTERNAL_ERROR; }
nvrtcResult nvrtcCompileProgram(nvrtcProgram, int, const char* const*) { return NVRTC_ERROR_INTERNAL_ERROR; }
nvrtcResult nvrtcGetCUBINSize(nvrtcProgram, size_t*) { return NVRTC_ERROR_INTERNAL_ERROR; }
nvrtcResult nvrtcGetCUBIN(nvrtcProgram, char*) { return NVRTC_ERROR_INTERNAL_ERROR; }
nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram, size_t*) { return NVRTC_ERROR_INTERNAL_ERROR; }
nvrtcResult nvrtcGetProgramLog(nvrtcProgram, char*) { return NVRTC_ERROR_INTERNAL_ERROR; }

}  // extern "C"
