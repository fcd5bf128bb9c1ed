// The Backend interface: every numeric operation the trainer performs, at the granularity of
// fused ops (a norm, an attention, a cross-entropy over the vocabulary, an optimizer update),
// never scalar loops. The CPU backend (cpu/) is the reference; the CUDA backend implements
// the same contract. All tensors are row-major, contiguous views; shapes are in the comments.
// The kernels of particular optimizers are not Backend's virtuals: they sit behind
// optimizer_kernels() (backend/optimizer_kernels.h), so that a new optimizer does not widen
// Backend and its three implementations (CPU, CUDA, counting).
//
// Conventions:
// - N = rows (tokens of a micro-batch, B*T), C = channels, V = vocabulary, F = MLP width,
//   B = batch, T = sequence length, H = heads, Hkv = key/value heads, D = head dim.
// - "backward" ops ACCUMULATE (+=) into parameter gradients and WRITE (=) input gradients,
//   unless the comment says otherwise. An empty parameter-gradient view means "frozen: skip".
// - Storage dtypes (both backends; DESIGN.md "Numerics"): activations, weights and their
//   gradients may be stored in fp32, bf16 or fp16 ("float" below); arithmetic is fp32 whatever
//   the storage, and every stored result is rounded to its view's dtype (RNE). The sums that
//   span a whole step or buffer (the cross-entropy loss sum, sum_squares for gradient norms) are
//   accumulated in double on both backends. The per-row statistics of RMSNorm and LayerNorm
//   (mean, mean of squares, and their backward's row dot products) are fp32 on the CUDA backend
//   (a block tree reduction over one row: relative error about log2(C) x 2^-24, as HF computes
//   them in fp32) and double on the CPU reference; the tests bound the difference. What each op
//   accepts:
//   - copy: any float <-> any float, same-dtype copies of any dtype. fill: every dtype.
//     round_to: fp32 values to bf16/fp16, in place.
//   - accumulate: dst and src any float (each its own). scale, sum_squares, has_inf_or_nan: any float.
//   - matmul: a and b the same float dtype; c the same as a, or fp32 (16-bit inputs with an fp32
//     output, e.g. weight gradients accumulated in fp32). matmul_bias: c, a, b as matmul; bias any float.
//   - add_bias: y any float, bias any float. bias_backward: dy any float, dbias any float.
//   - embedding: out and table the same float dtype; ids int32. Backward: dout and dtable any float.
//   - norms: x, y, dy, dx one float dtype; weight, bias any float; mean/rstd fp32; dweight,
//     dbias any float.
//   - rope: x any float; inv_freq fp32; positions int32. swiglu, relu, dropout: all activations one float dtype;
//     row_ids int64.
//   - attention (and attention_cached_forward): q, k, v, out, dout, dq, dk, dv one float
//     dtype; lse fp32; positions int32.
//   - cross_entropy: logits any float (dlogits are written in the logits' dtype); targets int32;
//     mask uint8.
//   - dequantize_4bit: out any float; the payload's pieces as Quant4View says.
//   - quantize_blocks: in any float; dequantize_blocks: out any float; q uint8, scales fp32.
//   - the optimizer kernels (optimizer_kernels(), backend/optimizer_kernels.h): all buffers fp32
//     (master weights and optimizer state are always fp32).
//   Anything else is a zt::Error naming the op and the argument.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "backend/optimizer_kernels.h"
#include "core/rng.h"
#include "core/tensor.h"

namespace zt {

// A 4-bit blockwise-quantized tensor of n values (core/quant4bit.h: bitsandbytes' layout):
// views into its payload on the backend.
struct Quant4View {
  Tensor packed;         // uint8 [ceil(n / 2)]: element 2i in the high nibble, 2i+1 in the low
  Tensor absmax;         // fp32 [blocks], or uint8 [blocks] (indices into nested_code) when nested
  Tensor code;           // fp32 [16]: the 4-bit code table (NF4 or FP4)
  Tensor nested_absmax;  // fp32 [ceil(blocks / 256)]; empty without double quantization
  Tensor nested_code;    // fp32 [256]: the 8-bit dynamic table
  Tensor nested_offset;  // fp32 [1]: the mean the nested absmax values were centred on
  int64_t blocksize = 64;
  bool nested() const { return !nested_absmax.empty(); }
};

// A point in a backend's queue of work (the CUDA backend: an event recorded on its stream).
// How a backward op stores an activation gradient (see the norms below).
enum class GradStore { Write, Add };

// A backend's own device memory and what the device says (bytes): Backend::memory().
struct DeviceMemory {
  int64_t in_use = 0;      // allocate()d now, plus the discardable buffers' mapped chunks
  int64_t peak = 0;        // of in_use since construction or reset_memory_peak()
  int64_t store_peak = 0;  // of which: the discardable parameter and gradient buffers (ZeRO's flat store)
  int64_t device_used = 0;  // the device's own count (cudaMemGetInfo: total - free), anyone's
  int64_t device_free = 0;  // free on the device (within --device-memory-limit / ZT_DEVICE_MEMORY_LIMIT)
  // What the memory it gets back and may take depends on: the virtual-memory chunk that discard
  // frees (cuMemGetAllocationGranularity: 2 MiB on current GPUs, ZT_EMU_VMM_GRANULARITY on the
  // emulated device; 0 without virtual memory management) and the device-memory limit (0: none),
  // with the bytes this process holds from the driver now (what the limit counts).
  int64_t discard_granularity = 0;
  int64_t limit = 0;
  int64_t counted = 0;
};

// How a backend's buffers take memory, for the memory model (train/memory_model.h).
struct MemoryTraits {
  int64_t (*allocation_size)(int64_t bytes) = nullptr;  // an allocate(bytes)'s real size; null: exact
  int64_t discard_chunk_bytes = 0;  // what discard() frees at a time (0: nothing)
  int64_t fixed_bytes = 0;          // the backend's own buffers now (cuBLASLt workspace, status words)
};

class BackendEvent {
 public:
  virtual ~BackendEvent() = default;
  // Blocks the host until every operation issued before the event was recorded has finished.
  virtual void wait() = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual std::string name() const = 0;

  // ---- memory -------------------------------------------------------------------------
  virtual void* allocate(size_t bytes) = 0;  // aligned to 64 bytes; throws on failure
  // Memory whose pages discard() gives back and commit() takes again, at the same addresses
  // (ZeRO's flat parameter and gradient buffers: a stage-3 rank holds only its gathered units,
  // a stage-2 rank only the gradients in flight). The CUDA backend reserves a virtual range and
  // maps physical memory chunk by chunk (cuda/cuda_vmm.h); the default is allocate(), whose
  // pages the CPU backend's discard() gives back with madvise. Released with release().
  // `committed` false: the buffer starts with no memory, as if all of it had been discarded
  // (commit before writing); the CPU's untouched pages cost nothing either way.
  virtual void* allocate_discardable(size_t bytes, bool committed = true) {
    (void)committed;
    return allocate(bytes);
  }
  virtual void release(void* pointer) = 0;
  // dst = src (same numel); converts dtype (fp32/bf16/fp16, RNE) and crosses devices.
  virtual void copy(Tensor dst, Tensor src) = 0;
  // dst = src, same dtype, queued: with a host side (pinned memory, make_host_backend) it may
  // return before the transfer has finished, so the host side must not be read (download) or
  // written (upload) until an event recorded after the call has been waited for. Device work
  // issued later is ordered after it. The default (synchronous backends) is copy().
  virtual void copy_async(Tensor dst, Tensor src) { copy(dst, src); }
  // An event after everything issued so far (the default: already complete).
  virtual std::unique_ptr<BackendEvent> record_event();
  // dst = src (same dtype) on the backend's transfer queue, beside the compute queue, so that a
  // GPU overlaps the copy with compute (activation offload): it starts once the compute issued
  // so far has completed (without the host waiting, and without the deferred-error snapshot
  // record_event() queues: the ordering is the device's alone), and the returned event
  // completes with it. Compute issued later does not wait for it unless wait_for(event) is
  // called; host memory follows copy_async's rules. Transfers toward the host and toward the
  // device take two queues (a GPU runs an upload and a download at once); each queue runs its
  // transfers in the order issued, so the event of a later one follows the earlier ones of its
  // direction. The default (synchronous backends) is copy(), already complete.
  virtual std::unique_ptr<BackendEvent> transfer_async(Tensor dst, Tensor src);
  // Compute issued after this call starts once `event` (of record_event or transfer_async) has
  // completed; the host does not wait. The default has nothing to order.
  virtual void wait_for(const BackendEvent& event) { (void)event; }
  virtual void fill(Tensor dst, float value) = 0;
  // The contents of `range` are no longer needed (ZeRO released a gathered unit or reduced
  // gradients): the backend may give the memory of whole pages inside it back to the system.
  // The range's contents are unspecified afterwards: write before reading it again.
  virtual void discard(Tensor range) { (void)range; }
  // Before writing into a range that was discarded: makes its memory usable again (the CUDA
  // backend maps physical memory back into discardable buffers; on the CPU the pages come back
  // by themselves when touched). Its contents are unspecified until written.
  virtual void commit(Tensor range) { (void)range; }
  // Rounds fp32 values in place to the nearest value of `dtype` (bf16/fp16, RNE; fp16
  // overflow becomes +-inf): mixed precision's compute-dtype parameters and gradients held in
  // fp32 storage (the CPU backend's emulation; the ZeRO engine's casts). Every backend rounds
  // without a temporary buffer, so that the memory model's counting backend allocates what the
  // run does.
  virtual void round_to(Tensor x, DType dtype) = 0;
  // Waits until every operation issued so far has finished (timing; a no-op on the CPU, whose
  // operations are synchronous).
  virtual void synchronize() {}
  // Its own device memory; nullopt for the CPU backend, whose memory is the process's.
  virtual std::optional<DeviceMemory> memory() const { return std::nullopt; }
  // Starts memory()'s peaks again from what is held now (after set-up: the training peak).
  virtual void reset_memory_peak() {}
  // How its buffers take memory; the default: exact sizes, nothing discarded, nothing fixed.
  virtual MemoryTraits memory_traits() const { return {}; }
  // The PCI bus id of the GPU it runs on ("0000:41:00.0"); empty for the CPU.
  virtual std::string pci_bus_id() const { return ""; }
  // Starts (true) or stops (false) the range an external profiler records: the CUDA backend
  // calls cudaProfilerStart/Stop, so that `nsys profile --capture-range=cudaProfilerApi` records
  // only the steps of --cuda-profiler-steps (and the emulated device counts their host waits).
  virtual void profiler_range(bool start) { (void)start; }
  // A CPU backend whose memory this backend copies to and from fastest (ZeRO-Offload's master,
  // optimizer state and gradient partitions): the CUDA backend's allocates page-locked (pinned)
  // host memory, so device<->host copies run at full PCIe speed without a staging copy (copy()
  // still returns only when the host side is done). Its discard() keeps the pages (pinned pages
  // must stay mapped). The default is a plain CPU backend.
  virtual std::unique_ptr<Backend> make_host_backend();
  // Host memory that need not be pinned (pin_memory false): a plain CPU backend, except where
  // the backend counts rather than allocates (the memory model's counting backend).
  virtual std::unique_ptr<Backend> make_pageable_host_backend();

  // ---- elementwise --------------------------------------------------------------------
  // dst += scale * src (same shape). Residual adds and gradient accumulation.
  virtual void accumulate(Tensor dst, Tensor src, float scale) = 0;
  virtual void scale(Tensor dst, float factor) = 0;
  // x = min(max(x, lo), hi) in place (gradient value clipping; NaN stays NaN).
  virtual void clamp(Tensor x, float lo, float hi) = 0;
  // Sum of squares of all elements, accumulated in double (gradient norms).
  virtual double sum_squares(Tensor x) = 0;
  // True when any element is NaN or +-inf (fp16 overflow check).
  virtual bool has_inf_or_nan(Tensor x) = 0;
  // The same over several tensors, with one device synchronisation for all of them (gradient
  // norms and overflow checks over all parameter groups). The defaults call the ops above.
  virtual double sum_squares_of(std::span<const Tensor> xs);
  virtual bool has_inf_or_nan_in(std::span<const Tensor> xs);

  // ---- GEMM ---------------------------------------------------------------------------
  // C[M,N] = alpha * op(A) op(B) + beta * C, op(A) = A[M,K] or A[K,M]^T, op(B) = B[K,N] or B[N,K]^T.
  virtual void matmul(Tensor c, Tensor a, bool transpose_a, Tensor b, bool transpose_b,
                      float alpha, float beta) = 0;
  // A linear layer's forward with its bias: C[M,N] = A[M,K] B[N,K]^T + bias[N] broadcast over
  // rows (bias empty: none). The CUDA backend adds the bias in the GEMM's epilogue, saving a
  // pass over C; the default is matmul + add_bias.
  virtual void matmul_bias(Tensor c, Tensor a, Tensor b, Tensor bias);
  // y[N,C] += bias[C] broadcast over rows.
  virtual void add_bias(Tensor y, Tensor bias) = 0;
  // dbias[C] += sum over rows of dy[N,C].
  virtual void bias_backward(Tensor dbias, Tensor dy) = 0;

  // ---- embedding ----------------------------------------------------------------------
  // out[N,C] = table[ids[n], :]; ids int32[N], each in [0, V).
  virtual void embedding_forward(Tensor out, Tensor table, Tensor ids) = 0;
  // dtable[V,C] += scatter of dout[N,C] by ids (deterministic order).
  virtual void embedding_backward(Tensor dtable, Tensor dout, Tensor ids) = 0;

  // ---- normalisation ------------------------------------------------------------------
  // The norms' backward store dx as `dx_store` says: GradStore::Write (dx = ...; dx may alias
  // dy) or GradStore::Add (dx += ..., summed in fp32 and rounded once; dx must not alias dy).
  // Add is llm.c's rule for the residual stream: a pre-norm block's input gradient lands in the
  // residual gradient directly, without a temporary [N,C] and a pass to add it.
  // RMSNorm (LLaMA): y = x * rstd * weight, rstd[N] = 1/sqrt(mean(x^2) + eps), in fp32.
  virtual void rmsnorm_forward(Tensor y, Tensor rstd, Tensor x, Tensor weight, float eps) = 0;
  // dx[N,C] = or += (dx_store); dweight[C] += (empty: frozen).
  virtual void rmsnorm_backward(Tensor dx, GradStore dx_store, Tensor dweight, Tensor dy, Tensor x,
                                Tensor weight, Tensor rstd) = 0;
  // LayerNorm (OPT): y = (x - mean) * rstd * weight + bias; mean[N], rstd[N] saved.
  virtual void layernorm_forward(Tensor y, Tensor mean, Tensor rstd, Tensor x, Tensor weight,
                                 Tensor bias, float eps) = 0;
  // dx = or += (dx_store); dweight[C], dbias[C] += (empty: frozen).
  virtual void layernorm_backward(Tensor dx, GradStore dx_store, Tensor dweight, Tensor dbias,
                                  Tensor dy, Tensor x, Tensor weight, Tensor mean, Tensor rstd) = 0;

  // ---- positions within packed rows -----------------------------------------------------
  // rope and attention take positions int32[B*T] (on the backend's device): the position of
  // token (b,t) inside its sample. A row holds one or more samples back to back (`--packing`),
  // so positions count 0, 1, 2, ... from each sample's first token: positions[b,0] = 0 and
  // positions[b,t] is either 0 (a new sample starts) or positions[b,t-1] + 1 (HF's packed
  // position_ids, from which flash-attention derives cu_seqlens). Token t's sample starts at
  // t - positions[b,t]. An empty tensor means positions[b,t] = t: one sample per right-padded row.
  // The CPU backend checks the rule; the CUDA kernels trust it.

  // ---- rotary position embedding (HF half-split layout, `rotate_half`) -----------------
  // In place on x[B,T,H,D]: position of token (b,t) is positions[b*T+t] (see above), or any
  // absolute position >= 0: rope reads each position alone (a KV-cached generation step rotates
  // its tokens at positions P, P+1, ...), so only attention needs the packed-rows rule.
  // inv_freq[D/2] = 1 / theta^(2i/D) (divided by a linear scaling factor where configured);
  // angle = position * inv_freq[i]; (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin) for
  // x1 = x[..., i], x2 = x[..., i + D/2].
  virtual void rope_forward(Tensor x, Tensor inv_freq, Tensor positions) = 0;
  // In place on dx[B,T,H,D]: the transpose of the rotation (rotation by -angle).
  virtual void rope_backward(Tensor dx, Tensor inv_freq, Tensor positions) = 0;

  // ---- MLP activations ----------------------------------------------------------------
  // SwiGLU (LLaMA): h[N,F] = silu(gate) * up.
  virtual void swiglu_forward(Tensor h, Tensor gate, Tensor up) = 0;
  // dgate[N,F], dup[N,F] written from dh[N,F].
  virtual void swiglu_backward(Tensor dgate, Tensor dup, Tensor dh, Tensor gate, Tensor up) = 0;
  // ReLU (OPT): y = max(x, 0), in place allowed (y may alias x).
  virtual void relu_forward(Tensor y, Tensor x) = 0;
  // dx = dy * (y > 0) (dx may alias dy).
  virtual void relu_backward(Tensor dx, Tensor dy, Tensor y) = 0;

  // ---- attention ----------------------------------------------------------------------
  // Causal self-attention with grouped-query heads: q[B,T,H,D], k,v[B,T,Hkv,D] (H % Hkv == 0,
  // query head h reads kv head h / (H/Hkv)); out[B,T,H,D]; lse[B,H,T] = log-sum-exp of the
  // scaled scores of each query row, saved for backward. scale is usually 1/sqrt(D).
  // Query t of row b sees the keys [t - positions[b,t], t]: those of its own sample up to
  // itself (positions int32[B*T], see "positions within packed rows"; empty: keys [0, t]).
  virtual void attention_forward(Tensor out, Tensor lse, Tensor q, Tensor k, Tensor v,
                                 Tensor positions, float scale) = 0;
  // dq[B,T,H,D], dk, dv[B,T,Hkv,D] written.
  virtual void attention_backward(Tensor dq, Tensor dk, Tensor dv, Tensor dout, Tensor q,
                                  Tensor k, Tensor v, Tensor out, Tensor lse, Tensor positions,
                                  float scale) = 0;

  // ---- attention over a key/value cache (generation) ------------------------------------
  // The T newest queries of each row against all S cached keys and values of that row, which
  // end with the T new ones: q[B,T,H,D], k,v[B,S,Hkv,D] (T <= S), out[B,T,H,D]. Query t is at
  // position S - T + t and sees the keys [0, S - T + t]: causal with an offset, one sample per
  // row, grouped-query heads as attention_forward. No lse: nothing runs backward through a
  // generation step. (model/kv_cache.h writes the cache and calls this.)
  virtual void attention_cached_forward(Tensor out, Tensor q, Tensor k, Tensor v, float scale) = 0;

  // ---- loss ---------------------------------------------------------------------------
  // Fused softmax + cross-entropy over logits[N,V] for rows with mask[n] = 1 (uint8[N]),
  // targets int32[N]. Returns the SUM of the per-token losses over masked rows (in double).
  // When grad_scale != 0, overwrites logits with dlogits = (softmax - onehot) * grad_scale
  // on masked rows and 0 on the others (grad_scale is 1 / target tokens of the global batch).
  virtual double cross_entropy(Tensor logits, Tensor targets, Tensor mask, float grad_scale) = 0;
  // The same, but the sum is added to loss_sum (fp64 [1] on this backend's device) instead of
  // returned, so the device is not synchronised once per micro-batch: the trainer reads a
  // step's sum once. The default calls cross_entropy.
  virtual void cross_entropy_accumulate(Tensor logits, Tensor targets, Tensor mask, float grad_scale, Tensor loss_sum);

  // ---- regularisation -----------------------------------------------------------------
  // Inverted dropout: out[N,C] = in * keep / (1 - p), keep = uniform(key, row_ids[n]*C + c) >= p.
  // row_ids int64[N] are global token positions, so the mask does not depend on the batch
  // layout or the rank. The backward of dropout is the same call on the gradient.
  virtual void dropout(Tensor out, Tensor in, float p, RngKey key, Tensor row_ids) = 0;

  // ---- optimizer kernels ----------------------------------------------------------------
  // The fused per-element kernels of particular optimizers (adamw, sgd, lamb_direction, the sign
  // compression of 1-bit and 0/1 Adam, adalomo_*) live behind one accessor, not as virtuals of
  // Backend: a new optimizer's kernel widens OptimizerKernels (backend/optimizer_kernels.h) and
  // its implementations, and Backend stays as it is. The kernels run on this backend, in order
  // with its other ops; the object lives as long as the backend.
  virtual OptimizerKernels& optimizer_kernels() = 0;

  // ---- quantized weights ----------------------------------------------------------------
  // QLoRA's frozen base: out[n] (any float) = code[q_i] * absmax[i / blocksize], computed in fp32
  // and rounded to out's dtype; with double quantization absmax[b] = nested_code[absmax_q[b]] *
  // nested_absmax[b / 256] + offset (two fp32 roundings). Bit for bit on every backend.
  virtual void dequantize_4bit(Tensor out, const Quant4View& weight) = 0;

  // ---- block-quantized communication (ZeRO++: docs/zero-plus-plus.md) --------------------
  // Symmetric block quantization of in[n] (any float) to `bits` = 8 or 4 per value, one fp32
  // scale per block of `block` (even) consecutive values, by core/block_quant.h's rules:
  // q uint8 [n] (int8) or [ceil(n / 2)] (int4, two per byte), scales fp32 [ceil(n / block)].
  virtual void quantize_blocks(Tensor q, Tensor scales, Tensor in, int bits, int64_t block) = 0;
  // out[n] (any float) = q * scale in fp32, rounded to out's dtype; `accumulate`: out += it (one
  // fp32 add, one rounding). Both bit for bit on every backend.
  virtual void dequantize_blocks(Tensor out, Tensor q, Tensor scales, int bits, int64_t block, bool accumulate) = 0;
};

// Where a CPU backend's memory comes from: both set, or both empty for aligned_alloc/free.
struct HostAllocator {
  std::function<void*(size_t bytes)> allocate;  // throws a zt::Error on failure
  std::function<void(void* pointer)> release;
};

// The CPU reference backend (OpenBLAS + OpenMP).
std::unique_ptr<Backend> make_cpu_backend(HostAllocator allocator = {});

// Bytes the CPU backends of this process hold from their default allocator (malloc's usable
// size of each buffer), now and at most since the last reset: the measured counterpart of the
// memory model's host figures on the CPU (custom allocators, e.g. CUDA's pinned memory, are
// not counted).
struct CpuBackendMemory {
  int64_t in_use = 0;
  int64_t peak = 0;
};
CpuBackendMemory cpu_backend_memory();
void reset_cpu_backend_peak();  // peak := in use now

}  // namespace zt
