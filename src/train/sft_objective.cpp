// The sft objective (train/objective.h): the model's own LM head and fused cross-entropy, the loss
// averaged over the loss-masked target tokens (DESIGN.md's loss contract), evaluated as eval_loss
// and eval_ppl (train/evaluation.h). Also the place that names every objective (make_objective)
// and holds the helpers they share.
#include "train/objective.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "train/evaluation.h"
#include "train/train_config.h"

namespace zt {

namespace {

class SftObjective final : public Objective {
 public:
  std::string name() const override { return "sft"; }

  void check_data(const TrainConfig& config, const TokenDataset& data, const std::string& path) const override {
    (void)config;
    ZT_CHECK(!data.holds_pairs(), path, ": holds preference pairs (zerotune prep --pairs): train a reward model on "
             "them with --objective reward or DPO with --objective dpo, or prep the rows without --pairs for "
             "--objective sft");
  }

  void backward(CausalLM& model, const MicroBatch& micro, const BatchTensors& batch, float grad_scale,
                const DropoutContext& dropout, Tensor loss_sum) override {
    (void)micro;
    model.backward(batch, grad_scale, dropout, loss_sum);
  }

  // One sample per row, or packed rows with their positions (--packing).
  MicroBatch largest_micro_batch(const TrainConfig& config, int64_t seq_len) const override {
    MicroBatch micro = padded_micro_batch(config.micro_batch_size, seq_len, 0);
    std::fill(micro.loss_mask.begin(), micro.loss_mask.end(), uint8_t{1});
    micro.target_tokens = micro.real_tokens = micro.batch * micro.seq;
    if (config.packing) micro.positions.assign(micro.input_ids.size(), 0);
    return micro;
  }

  ObjectiveEval evaluate(CausalLM& model, const TokenDataset& data, int64_t micro_batch, Communicator& comm,
                         Backend& backend) override {
    return sft_eval_of(zt::evaluate(model, data, micro_batch, comm, backend));
  }
};

}  // namespace

std::unique_ptr<Objective> make_sft_objective() { return std::make_unique<SftObjective>(); }

ObjectiveEval sft_eval_of(const EvalResult& eval) {
  return {{{"eval_loss", eval.loss},
           {"eval_ppl", eval.perplexity},
           {"eval_tokens", eval.target_tokens},
           {"eval_samples", eval.samples}},
          // The perplexity the way DeepSpeed-Chat's step 1 prints it ("ppl: P, loss: L").
          cat("ppl: ", eval.perplexity, ", loss: ", eval.loss, " | ", eval.target_tokens, " target tokens in ",
              eval.samples, " samples")};
}

std::unique_ptr<Objective> make_objective(const TrainConfig& config) {
  const std::string& name = config.objective;
  if (name == "sft") return make_sft_objective();
  if (name == "reward") return make_reward_objective();
  if (name == "dpo") return make_dpo_objective(config.dpo_beta, config.dpo_label_smoothing);
  fail("--objective '", name, "': unknown objective; use sft (next-token cross-entropy, the default), reward "
       "(DeepSpeed-Chat step 2's reward model on pairs from zerotune prep --pairs) or dpo (TRL's DPO on those pairs)");
}

void check_pair_data(const std::string& objective, const TrainConfig& config, const TokenDataset& data,
                     const std::string& path) {
  ZT_CHECK(data.holds_pairs(), path, ": holds samples, not preference pairs: --objective ", objective, " trains on "
           "pairs; make them with zerotune prep --pairs (rows with prompt, chosen and rejected)");
  ZT_CHECK(!config.packing, "--packing: --objective ", objective, " keeps each pair's sides in rows of their own; "
           "leave --packing out");
}

double neg_log_sigmoid(double x) { return x >= 0 ? std::log1p(std::exp(-x)) : -x + std::log1p(std::exp(x)); }
double sigmoid(double x) { return x >= 0 ? 1.0 / (1.0 + std::exp(-x)) : std::exp(x) / (1.0 + std::exp(x)); }

}  // namespace zt
