// The optimizer seam: what an optimizer is to the ZeRO engine, the checkpoints and the trainer.
//
// An optimizer names its state buffers (fp32, one element per trainable element of the
// partition, zero at the start); the engine allocates, partitions, offloads and checkpoints them
// by those names, so an optimizer never sees ranks, stages or host/device placement. An
// optimizer may also keep per-tensor state (AdaLomo's factored second moment: a row and a column
// vector per matrix), sized by each trainable tensor's shape: small, so every rank holds all of
// it, identical everywhere (the update sums over the ranks what it needs), and checkpoints keep
// one copy by parameter and state name, whatever the world size. Its update
// is an ordinary backend op sequence over one contiguous piece of a partition (ggml's optimizer
// step: its parameters are passed in), run on the device or, with ZeRO-Offload, on the host
// backend. The step's scalars (lr, divisor, update number) are known when the step starts, so an
// optimizer that fuses its update into backward (LOMO) has them there.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "optim/optimizer_config.h"

namespace zt {

// The scalars of one optimizer step.
struct OptimizerStep {
  double lr = 0.0;
  float grad_divisor = 1.0f;  // the engine divides the gradients by it first: loss scale x clip coefficient
  int64_t update_number = 1;  // 1 for the first applied update (bias corrections, SGD's first momentum)
  float clip_coefficient = 1.0f;  // the global-norm clipping part of grad_divisor (>= 1)
  double local_lr_sum = 0.0;  // local steps (0/1 Adam): the sum of lr over the local updates since the
                              // ranks last synchronised, this one included
};

// A parameter tensor's elements inside a piece (per-tensor optimizers: LAMB's trust ratio,
// AdaLomo's factored moments). On ZeRO partitions a tensor may be split over ranks: each rank sees
// its slice, a contiguous run of the tensor's row-major elements (rows may be cut at both ends),
// possibly empty.
struct TensorSlice {
  int64_t begin = 0;            // within the piece
  int64_t numel = 0;            // elements of the slice (0: none of the tensor is on this rank)
  int64_t offset = 0;           // the slice's first element within the tensor (row-major)
  std::vector<int64_t> shape;   // the whole tensor's shape
  int entry = -1;               // the tensor's index in ParamStore::entries() (for the engine)
  std::vector<Tensor> state;    // fp32, the tensor's whole per-tensor state, tensor_state(shape) order
};

// One per-tensor state buffer: its name and element count.
struct TensorStateSpec {
  std::string name;
  int64_t numel = 0;
};

// One contiguous piece of a trainable group on this rank, updated in place.
struct OptimizerPiece {
  bool decay = false;          // the group takes weight decay (linear and embedding weights)
  Tensor param;                // fp32 [n] master weights
  Tensor grad;                 // fp32 [n] reduced gradients, already divided by grad_divisor; the
                               // optimizer may overwrite them (scratch)
  std::vector<Tensor> state;   // fp32 [n] each, in state_names() order
  // Only for fuses_offload_passes(backend): then grad may be bf16/fp16 [n] and is not yet divided:
  // the update reads float(grad) * grad_scale; and param_out, when it has data (bf16/fp16 [n]),
  // receives the updated param rounded (RNE) in the same pass. Otherwise grad_scale is 1 and
  // param_out without data.
  float grad_scale = 1.0f;
  Tensor param_out;
  // Only for needs_tensor_slices(): the parameter tensors of the piece (every tensor of the
  // piece's units, also those with no element on this rank), and collectives that sum per-tensor
  // partial values over the ranks holding slices of the same tensors (every rank calls update on
  // the same pieces in the same order; identity when a rank holds them whole): host doubles, or
  // an fp32 tensor on the backend the update runs on.
  std::vector<TensorSlice> tensors;
  std::function<void(std::span<double>)> sum_over_ranks;
  std::function<void(Tensor)> sum_tensor_over_ranks;
};

// A 1-bit optimizer's exchange (1-bit Adam): instead of reducing the gradients, every rank forms
// its local momentum  momentum_weight * m + gradient_weight * g_local  (g_local scaled to the
// global gradient's size: the engine multiplies it by the world size, since zerotune sums
// gradients over ranks) and the ranks average it compressed to signs with error feedback
// (zero/sign_exchange.h). update() then gets the average as piece.grad.
struct MomentumExchange {
  size_t state_index = 0;  // which state buffer holds m (the whole of it is needed on every rank)
  float momentum_weight = 0.0f;
  float gradient_weight = 0.0f;
};

// A local step (0/1 Adam after its variance froze): no rank reduces anything; each updates a
// whole replica of its own (the parameters and state_names() + local_state_names(), rank-major)
// from its local gradient, so the ranks' replicas drift apart until a synchronising step averages
// what synchronisation_input() gives (compressed to signs with error feedback, as the momentum
// exchange) and synchronise() applies the average: the replicas are the same again.
struct LocalStep {
  bool first = false;        // the first local step: the error feedback of earlier exchanges is dropped
  bool synchronise = false;  // the ranks synchronise after this step's local update
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // As run.json, checkpoints and messages name it: "adamw", "sgd", "lamb", ...
  virtual std::string name() const = 0;
  // The state buffers per trainable element, e.g. {"exp_avg", "exp_avg_sq"}; checkpoints store
  // them as datasets of these names.
  virtual std::vector<std::string> state_names() const = 0;
  // The per-tensor state of a trainable tensor of this shape (fp32 buffers, zero at the start),
  // e.g. AdaLomo's {"exp_avg_sq_row" [rows], "exp_avg_sq_col" [cols]}; none by default. An
  // optimizer with per-tensor state needs_tensor_slices().
  virtual std::vector<TensorStateSpec> tensor_state(std::span<const int64_t> shape) const {
    (void)shape;
    return {};
  }
  // Whether the update needs the piece's parameter tensors (OptimizerPiece::tensors).
  virtual bool needs_tensor_slices() const { return false; }
  // Whether the update runs inside backward, unit by unit as each unit's gradient is reduced,
  // with no gradient buffer beyond the unit in flight (LOMO). The step's scalars are then given
  // before backward; clipping by the global norm needs a first backward that only measures it.
  virtual bool fuses_into_backward() const { return false; }
  // Whether the optimizer ever exchanges its momentum instead of gradients (1-bit Adam): the
  // engine then keeps each rank's whole local gradient and the exchange's error buffers.
  virtual bool exchanges_momentum() const { return false; }
  // The exchange of the update numbered `update_number` (1 for the first), or none when that
  // update takes reduced gradients as every other optimizer does (1-bit Adam's warm-up).
  virtual std::optional<MomentumExchange> momentum_exchange(int64_t update_number) const {
    (void)update_number;
    return std::nullopt;
  }
  // Local steps (0/1 Adam): the extra state of a replica (beside state_names()), and whether the
  // update numbered `update_number` is one; none by default.
  virtual std::vector<std::string> local_state_names() const { return {}; }
  virtual std::optional<LocalStep> local_step(int64_t update_number) const {
    (void)update_number;
    return std::nullopt;
  }
  // A synchronising local step, after update(): out [n] = what this rank contributes to the
  // average (the piece is the replica); then, given the ranks' average [n], synchronise() makes
  // the replica the synchronised one.
  virtual void synchronisation_input(Backend& backend, OptimizerPiece& piece, Tensor out) const {
    (void)backend, (void)piece, (void)out;
  }
  virtual void synchronise(Backend& backend, OptimizerPiece& piece, Tensor average, const OptimizerStep& step) const {
    (void)backend, (void)piece, (void)average, (void)step;
  }
  // Whether update() on `backend` takes the piece's gradient in its stored dtype with grad_scale
  // and writes param_out itself (OptimizerPiece): ZeRO-Offload's widen, divide and round passes
  // fused into the update's one pass over memory. Otherwise the engine runs them around it.
  virtual bool fuses_offload_passes(Backend& backend) const {
    (void)backend;
    return false;
  }
  // Whether each element's update reads nothing but that element's parameter, gradient and state
  // and the step's scalars, so that any split of a partition into pieces gives the same bits
  // (ZeRO-Offload's per-bucket update, docs/zero-offload.md). AdamW and SGD; not Lamb (per-tensor
  // norms), nor the fused or compressed ones.
  virtual bool updates_elementwise() const { return false; }
  // About how many FLOPs the update does per element (the profiler's optimizer row).
  virtual double flops_per_element() const = 0;
  // One update of `piece` on `backend` (where its buffers live).
  virtual void update(Backend& backend, OptimizerPiece& piece, const OptimizerStep& step) const = 0;
};

// The optimizer a config names; a clear error for a type zerotune does not implement or for
// hyper-parameters it cannot take.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config);

// The types make_optimizer accepts, in the order messages list them.
const std::vector<std::string>& optimizer_types();

}  // namespace zt
