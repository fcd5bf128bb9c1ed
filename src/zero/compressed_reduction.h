// The compressed strategy of gradient reduction (1-bit Adam, 0/1 Adam; gradient_reduction.h): in
// the steps where the optimizer asks for it, instead of reducing the gradients the ranks average
// a vector the optimizer names, compressed to signs with error feedback (zero/sign_exchange.h),
// one exchange per trainable group; the other steps reduce as the stage's exact strategy does:
//   momentum exchange (Optimizer::momentum_exchange): every rank's
//     momentum_weight m + gradient_weight W g_local / grad_divisor; this rank's share of the average
//     is what the update takes in place of reduced gradients;
//   local steps (Optimizer::local_step): no communication; each rank updates a whole replica of
//     the parameters and optimizer state of its own from its local gradient, and on synchronising
//     steps the ranks average Optimizer::synchronisation_input; the synchronised replica is
//     written back to the ZeRO partitions.
// Vectors are rank-major (chunk c = rank c's partition, param_store.h) at every stage, so every
// stage computes the same exchange. The buffers live where the exchange runs: the device with
// comm_backend_name "nccl", host memory with "mpi" on a GPU.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/buffer.h"
#include "comm/communicator.h"
#include "model/param_store.h"
#include "optim/optimizer.h"
#include "zero/gradient_reduction.h"
#include "zero/sign_exchange.h"

namespace zt {

class CompressedReduction final : public GradientReduction {
 public:
  // `exact`: the stage's strategy for the steps that reduce gradients. host_comm: MPI over host
  // buffers (for "mpi" from a GPU).
  CompressedReduction(const ReductionContext& context, std::unique_ptr<GradientReduction> exact,
                      const Optimizer& optimizer, const std::string& comm_backend_name, Communicator* host_comm);
  ~CompressedReduction() override;

  void begin_step(int64_t update_number) override;
  void begin_micro_batch(bool last) override;
  void unit_ready(int unit) override;
  void end_micro_batch() override;
  bool finish() override;
  Tensor reduced(ParamGroup group) override { return exact_->reduced(group); }
  double gradient_norm() override;
  bool overflow() override;
  UpdateSource prepare_update(const OptimizerStep& step, std::span<const GroupPartitions> groups) override;
  Tensor reduce_unit(Tensor grads, Tensor scratch) override { return exact_->reduce_unit(grads, scratch); }
  int64_t gradient_bytes() const override { return exact_->gradient_bytes(); }
  std::vector<const void*> gradient_buffers() const override { return exact_->gradient_buffers(); }
  int64_t staging_bytes() const override { return exact_->staging_bytes(); }
  CompressedReduction* compressed() override { return this; }

  // Checkpoints: this rank's buffers per group by name (error feedback, the replica), and the
  // scalars that go with them. After loading them with a replica in use, the compute parameters
  // are the replica's (replica_to_params).
  struct Views {
    ParamGroup group;
    std::vector<std::string> names;
    std::vector<Tensor> buffers;
  };
  std::vector<Views> views();
  struct Scalars {
    bool replica = false;  // the replica is in use (local steps began)
    double lr_sum = 0.0;   // lr summed over the local steps since the last synchronisation
  };
  Scalars scalars() const { return {replica_valid_, lr_sum_}; }
  void restore_scalars(const Scalars& scalars);
  // params [N] (the store's compute parameters of `group`) = the replica's, rounded.
  void replica_to_params(ParamGroup group, Tensor params);

  int64_t bytes() const;  // every buffer, on whichever backend it lives
  bool in_host_memory() const { return host_ != nullptr; }

 private:
  struct Group;
  Group& group(ParamGroup group);
  bool keeps_local() const { return exchange_.has_value() || local_.has_value(); }
  std::vector<Tensor> local_gradients();  // this rank's gradient sums of the groups with elements
  // Puts into `reduced` (this rank's share: the whole group at stage 0, else partition [P]) the
  // average over the ranks of  momentum_weight m + gradient_weight W grads / grad_divisor.
  // grads: this rank's gradient sums [N] (device, natural order); momentum: the optimizer's m
  // partition (its state buffer, maybe in host memory).
  void exchange_momentum(ParamGroup group, Tensor grads, Tensor momentum, Tensor reduced, const OptimizerStep& step,
                         const MomentumExchange& exchange);
  // One local step of a group: its replica updated from grads [N] (this rank's sums, device,
  // natural order); when the step synchronises, the partitions' master and state are written
  // back; params [N] (the store's compute parameters) become the replica's, rounded.
  void local_step(const GroupPartitions& partitions, Tensor grads, const OptimizerStep& step, const LocalStep& local);
  Backend& work();  // where the vectors live
  Communicator& work_comm();
  void to_rank_major(Group& g, Tensor out, Tensor natural);      // device natural [N] -> work rank-major [N]
  void from_rank_major(Group& g, Tensor natural, Tensor rank_major);  // work rank-major -> device natural
  void gather_whole(Group& g, Tensor out, Tensor partition);     // the engine's partitions -> work rank-major [N]
  void scatter_whole(Group& g, Tensor partition, Tensor whole);  // this rank's share of a rank-major [N]
  void enter_replica(Group& g, const GroupPartitions& partitions);

  ReductionContext context_;
  std::unique_ptr<GradientReduction> exact_;
  Backend& device_;
  Communicator& comm_;
  Communicator* host_comm_;
  const ParamStore& store_;
  const Optimizer& optimizer_;
  int stage_, world_, rank_;
  std::optional<MomentumExchange> exchange_;  // this step exchanges momentum instead of reducing gradients
  std::optional<LocalStep> local_;            // this step is a local step (no reduction at all)
  std::unique_ptr<Backend> host_;  // "mpi" from a GPU: the exchange's host memory
  std::vector<std::unique_ptr<Group>> groups_;  // [kParamGroups]
  bool replica_valid_ = false;
  double lr_sum_ = 0.0;
};

}  // namespace zt
