// The DPO objective (train/objective.h): TRL's DPOTrainer with loss_type "sigmoid"
// (trl/trainer/dpo_trainer.py, dpo_loss), on pair micro-batches (data/pair_batch.h: rows [0, P)
// chosen, [P, 2P) rejected, one forward for both sides as TRL's concatenated_forward).
//   log-probs   logp(row) = sum over the row's loss-masked targets (its response tokens) of
//               log p(target | tokens before it) = -CausalLM::row_losses, for the policy and for
//               the reference: under LoRA the same base with the adapters disabled (PEFT's
//               disable_adapter(), TRL's null_ref_context; no second copy of the weights); under
//               full fine-tuning a frozen copy of the initial weights (TRL's ref_model, a copy of
//               the policy at the start: train/frozen_reference.h), partitioned like the policy's
//   per pair    z = beta * ((logp_c - ref_c) - (logp_r - ref_r))
//               loss_p = -(1 - ls) * log sigmoid(z) - ls * log sigmoid(-z)   (ls: label smoothing)
//   loss        sum over pairs of loss_p / pairs of the global batch
//   backward    d(loss_p)/dz = -(1 - ls) * sigmoid(-z) + ls * sigmoid(z); logp_c's is beta times
//               that, logp_r's minus it; through the LM head it is the rows' cross-entropy
//               gradient weighted by -d(loss)/d(logp) (CausalLM::weight_rows_once)
//   figures     rewards/chosen = mean beta * (logp_c - ref_c), rewards/rejected likewise,
//               rewards/accuracies = the fraction with chosen reward > rejected reward,
//               rewards/margins = their mean difference, logps/chosen, logps/rejected the means
//               (TRL's names; eval_ before each in evaluation)
// The reference forward runs first (no dropout, no gradients; under LoRA its activations are
// overwritten by the policy's forward that follows, a frozen copy's model is forward-only), so a
// step runs three passes: reference forward, policy forward, policy backward. Under ZeRO-3 each
// forward gathers its weights once. --dump-step0 writes the policy's logits (the last forward).
#include <algorithm>
#include <array>
#include <span>

#include "core/error.h"
#include "data/pair_batch.h"
#include "train/evaluation.h"
#include "train/objective.h"
#include "train/train_config.h"

namespace zt {

namespace {

// The figures' sums over pairs (all-reduced as one array).
enum DpoSum { kLoss, kPairs, kChosenRewards, kRejectedRewards, kCorrect, kChosenLogps, kRejectedLogps, kDpoSums };

class DpoObjective final : public Objective {
 public:
  DpoObjective(double beta, double label_smoothing) : beta_(beta), label_smoothing_(label_smoothing) {}

  std::string name() const override { return "dpo"; }

  void check_data(const TrainConfig& config, const TokenDataset& data, const std::string& path) const override {
    check_pair_data(name(), config, data, path);
    ZT_CHECK(beta_ > 0.0, "--dpo-beta = ", beta_, ": must be > 0");
    ZT_CHECK(label_smoothing_ >= 0.0 && label_smoothing_ < 0.5, "--dpo-label-smoothing = ", label_smoothing_,
             ": must be in [0, 0.5) (the probability that a preference is flipped)");
  }

  // Full fine-tuning: the reference is a frozen copy of the initial weights (LoRA: none, the base).
  bool needs_frozen_reference(const TrainConfig& config) const override { return !config.lora.enabled(); }
  void attach_reference(CausalLM& reference) override { frozen_reference_ = &reference; }

  // The reference's log-probabilities, then the policy's forward (kept for backward) and its.
  Tensor forward(CausalLM& model, const MicroBatch& micro, const BatchTensors& batch,
                 const DropoutContext& dropout) override {
    ZT_CHECK(micro.pairs > 0 && batch.batch == 2 * micro.pairs,
             "--objective dpo: the micro-batch holds no pairs (data from zerotune prep --pairs is needed)");
    DropoutContext no_dropout = dropout;
    no_dropout.training = false;
    no_dropout.adapters = false;  // the base alone (LoRA); a frozen copy has no adapters
    CausalLM& reference = frozen_reference_ ? *frozen_reference_ : model;
    reference.forward(batch, no_dropout);
    // Queued, read after the policy's: the host issues the policy's forward without waiting for
    // the reference's (one host wait per micro-batch, not two).
    CausalLM::QueuedRowLosses reference_rows = reference.queue_row_losses(batch);
    Tensor logits = model.forward(batch, dropout);
    policy_logps_ = log_probs(model.row_losses(batch));
    reference_logps_ = log_probs(reference_rows.read());
    return logits;
  }

  void backward(CausalLM& model, const MicroBatch& micro, const BatchTensors& batch, float grad_scale,
                const DropoutContext& dropout, Tensor loss_sum) override {
    std::vector<float> row_weights;  // [2P]
    const double loss = pair_losses(micro.pairs, step_sums_, &row_weights);
    model.weight_rows_once(std::move(row_weights));
    model.backward(batch, grad_scale, dropout, loss_sum);
    host_loss_sum_ += loss;
  }

  // Two rows (chosen, rejected) of seq_len tokens per pair, every position a target.
  MicroBatch largest_micro_batch(const TrainConfig& config, int64_t seq_len) const override {
    const int64_t pairs = config.micro_batch_size;
    MicroBatch micro = padded_micro_batch(2 * pairs, seq_len, 0);
    std::fill(micro.loss_mask.begin(), micro.loss_mask.end(), uint8_t{1});
    micro.pairs = micro.target_tokens = pairs;
    micro.real_tokens = micro.batch * micro.seq;
    micro.score_ends.assign(static_cast<size_t>(2 * pairs), seq_len);
    micro.divergences.assign(static_cast<size_t>(pairs), 0);
    return micro;
  }

  // A fused optimizer's second pass runs the micro-batches again and adds their sums twice:
  // every figure is a ratio of sums, which doubling leaves as it was.
  std::vector<std::pair<std::string, double>> step_figures(Communicator& comm) override {
    std::array<double, kDpoSums> sums = step_sums_;
    step_sums_.fill(0.0);
    comm.all_reduce_scalars(sums);
    return figures(sums, "");
  }

  ObjectiveEval evaluate(CausalLM& model, const TokenDataset& data, int64_t micro_batch, Communicator& comm,
                         Backend& backend) override {
    std::array<double, kDpoSums> sums{};
    for_each_eval_micro_batch(
        model, data, micro_batch, comm, backend,
        [&](std::span<const int64_t> pairs) {
          return make_pair_micro_batch(data, pairs, static_cast<int32_t>(data.attributes().pad_id));
        },
        [&](const MicroBatch& micro, const BatchTensors&) { pair_losses(micro.pairs, sums, nullptr); },
        [&](const MicroBatch& micro, const BatchTensors& batch, const DropoutContext& no_dropout) {
          forward(model, micro, batch, no_dropout);
        });
    comm.all_reduce_scalars(sums);
    ObjectiveEval eval;
    eval.record = {{"eval_loss", sums[kLoss] / sums[kPairs]}, {"eval_pairs", static_cast<int64_t>(sums[kPairs])}};
    eval.line = cat("eval_loss ", sums[kLoss] / sums[kPairs]);
    for (const auto& [name, value] : figures(sums, "eval_")) {
      eval.record[name] = value;
      eval.line += cat(" | ", name, " ", value);
    }
    eval.line += cat(" | ", static_cast<int64_t>(sums[kPairs]), " pairs");
    return eval;
  }

 private:
  // log p of each row from its summed token losses.
  static std::vector<double> log_probs(std::vector<double> row_losses) {
    for (double& value : row_losses) value = -value;
    return row_losses;
  }

  // The last forward's pairs: their loss sum, their figures added to `sums`, and (when given)
  // each row's weight on its token losses' gradient, -d(loss sum)/d(logp(row)).
  double pair_losses(int64_t pairs, std::array<double, kDpoSums>& sums, std::vector<float>* row_weights) const {
    ZT_CHECK(static_cast<int64_t>(policy_logps_.size()) == 2 * pairs &&
                 static_cast<int64_t>(reference_logps_.size()) == 2 * pairs,
             "--objective dpo: log-probabilities of ", policy_logps_.size(), " rows for ", pairs, " pairs");
    if (row_weights) row_weights->assign(static_cast<size_t>(2 * pairs), 0.0f);
    double loss_sum = 0.0;
    for (int64_t p = 0; p < pairs; ++p) {
      const size_t c = static_cast<size_t>(p), r = static_cast<size_t>(pairs + p);
      const double chosen_reward = beta_ * (policy_logps_[c] - reference_logps_[c]);    // TRL's chosen_rewards
      const double rejected_reward = beta_ * (policy_logps_[r] - reference_logps_[r]);  // and rejected_rewards
      const double z = chosen_reward - rejected_reward;                                 // TRL's logits * beta
      const double loss = (1.0 - label_smoothing_) * neg_log_sigmoid(z) + label_smoothing_ * neg_log_sigmoid(-z);
      loss_sum += loss;
      sums[kLoss] += loss;
      sums[kPairs] += 1.0;
      sums[kChosenRewards] += chosen_reward;
      sums[kRejectedRewards] += rejected_reward;
      sums[kCorrect] += chosen_reward > rejected_reward ? 1.0 : 0.0;
      sums[kChosenLogps] += policy_logps_[c];
      sums[kRejectedLogps] += policy_logps_[r];
      if (!row_weights) continue;
      const double d_z = -(1.0 - label_smoothing_) * sigmoid(-z) + label_smoothing_ * sigmoid(z);  // d(loss)/dz
      // A row's token losses sum to -logp: their weight is -d(loss)/d(logp) = -(+-beta) * d_z.
      (*row_weights)[c] = static_cast<float>(-beta_ * d_z);
      (*row_weights)[r] = static_cast<float>(beta_ * d_z);
    }
    return loss_sum;
  }

  // TRL's logged means (prefix "" in training, "eval_" in evaluation); none without pairs.
  static std::vector<std::pair<std::string, double>> figures(const std::array<double, kDpoSums>& sums,
                                                             const std::string& prefix) {
    const double pairs = sums[kPairs];
    if (pairs <= 0.0) return {};
    const double chosen = sums[kChosenRewards] / pairs, rejected = sums[kRejectedRewards] / pairs;
    return {{prefix + "rewards/chosen", chosen},
            {prefix + "rewards/rejected", rejected},
            {prefix + "rewards/accuracies", sums[kCorrect] / pairs},
            {prefix + "rewards/margins", chosen - rejected},
            {prefix + "logps/chosen", sums[kChosenLogps] / pairs},
            {prefix + "logps/rejected", sums[kRejectedLogps] / pairs}};
  }

  double beta_ = 0.1;
  double label_smoothing_ = 0.0;
  CausalLM* frozen_reference_ = nullptr;  // full fine-tuning's reference model (not owned), or null: the base
  std::vector<double> policy_logps_, reference_logps_;  // [2P] of the last forward: chosen rows, then rejected
  std::array<double, kDpoSums> step_sums_{};            // this step's figures' sums (this rank)
};

}  // namespace

std::unique_ptr<Objective> make_dpo_objective(double beta, double label_smoothing) {
  return std::make_unique<DpoObjective>(beta, label_smoothing);
}

}  // namespace zt
