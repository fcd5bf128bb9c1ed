// Objectives: what `train --objective NAME` fits the model to, one file each:
//   sft     train/sft_objective.cpp     token-level cross-entropy on the loss-masked tokens
//                                       (DeepSpeed-Chat step 1, the default)
//   reward  train/reward_objective.cpp  DeepSpeed-Chat step 2's reward model: a value head and
//                                       the pairwise loss over preference pairs
//   dpo     train/dpo_objective.cpp     TRL's DPO: the sigmoid loss on the policy's and the
//                                       reference's log-probabilities of preference pairs
// An objective may add parameters to the model (the value head): they join the parameter plan
// like any other (ZeRO partitions them; LoRA leaves them trainable, as PEFT's modules_to_save).
// The step runner calls backward() after the model's forward on each micro-batch; its loss
// units (MicroBatch::target_tokens: tokens, or pairs) are what the loss is averaged over.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/communicator.h"
#include "data/batch.h"
#include "data/token_shards.h"
#include "model/causal_lm.h"
#include "model/param_spec.h"
#include "train/evaluation.h"

namespace zt {

struct TrainConfig;

// An evaluation's result: the fields of its metrics.jsonl record and its console line.
struct ObjectiveEval {
  nlohmann::json record;  // eval_* fields
  std::string line;       // "eval_loss 2.1 | ..."
};

class Objective {
 public:
  virtual ~Objective() = default;
  virtual std::string name() const = 0;
  // Refuses data (and options) it cannot train or evaluate on; `path` names the data.
  virtual void check_data(const TrainConfig& config, const TokenDataset& data, const std::string& path) const = 0;
  // The parameters it adds to the model (ParamSpec::owner = name()), in the head unit.
  virtual std::vector<ParamSpec> added_params(const ModelConfig& config) const {
    (void)config;
    return {};
  }
  // Writes its added parameters of `unit` into the store: from the model directory when that
  // holds them (a model trained with this objective), else freshly initialised from `seed`.
  virtual void init_added_params(ParamStore& store, int unit, const std::string& model_dir, uint64_t seed) const {
    (void)store, (void)unit, (void)model_dir, (void)seed;
  }
  // Whether the run needs a frozen copy of the model's initial weights (DPO under full fine-tuning:
  // its reference model, train/frozen_reference.h); the assembly then builds one and gives its
  // model to attach_reference.
  virtual bool needs_frozen_reference(const TrainConfig& config) const {
    (void)config;
    return false;
  }
  virtual void attach_reference(CausalLM& reference) { (void)reference; }
  // Binds to the built model (an objective with its own head sets it there).
  virtual void attach(CausalLM& model, ParamStore& store, Backend& backend) { (void)model, (void)store, (void)backend; }
  // The micro-batch's forward pass (the step runner's; its result as CausalLM::forward's). An
  // objective that needs more than the model's forward (DPO: the reference's) runs it here.
  virtual Tensor forward(CausalLM& model, const MicroBatch& micro, const BatchTensors& batch,
                         const DropoutContext& dropout) {
    (void)micro;
    return model.forward(batch, dropout);
  }
  // After forward(): the backward of d(loss sum * grad_scale), gradients accumulated
  // into the store; the micro-batch's loss sum added to loss_sum (fp64 [1] on the device), or, for
  // a loss computed on the host (reward, DPO), to host_loss_sum_.
  virtual void backward(CausalLM& model, const MicroBatch& micro, const BatchTensors& batch, float grad_scale,
                        const DropoutContext& dropout, Tensor loss_sum) = 0;
  // The largest micro-batch of config.micro_batch_size samples of seq_len tokens, laid out as this
  // objective's batches are, every position a target (the memory model steps on it).
  virtual MicroBatch largest_micro_batch(const TrainConfig& config, int64_t seq_len) const = 0;
  // The objective's own figures of the step just run (DPO's rewards/chosen, ...), all-reduced
  // over the ranks (every rank calls it after every step), for metrics.jsonl and the console
  // line; none by default (no collective).
  virtual std::vector<std::pair<std::string, double>> step_figures(Communicator& comm) {
    (void)comm;
    return {};
  }
  // Evaluation over a whole split, samples divided over the ranks, sums all-reduced.
  virtual ObjectiveEval evaluate(CausalLM& model, const TokenDataset& data, int64_t micro_batch, Communicator& comm,
                                 Backend& backend) = 0;

  // The step's loss computed on the host so far, handed over (and reset) when the step runner
  // reads the device's sum, once per step: adding it to the device's sum per micro-batch would
  // wait for that micro-batch's backward (issue 30, a step that never waits).
  double take_host_loss_sum() {
    const double sum = host_loss_sum_;
    host_loss_sum_ = 0.0;
    return sum;
  }

 protected:
  double host_loss_sum_ = 0.0;
};

// The objective config.objective names (sft, reward, dpo), with its options (--dpo-beta, ...);
// any other name is an error listing them.
std::unique_ptr<Objective> make_objective(const TrainConfig& config);
// The sft objective (train/sft_objective.cpp), the reward objective (train/reward_objective.cpp)
// and the DPO objective (train/dpo_objective.cpp).
std::unique_ptr<Objective> make_sft_objective();
std::unique_ptr<Objective> make_reward_objective();
std::unique_ptr<Objective> make_dpo_objective(double beta, double label_smoothing);
// The sft objective's record and line of an evaluation (its evaluate(), and a pipeline's, which
// trains sft only: PipeEngine::evaluate).
ObjectiveEval sft_eval_of(const EvalResult& eval);

// Helpers the objectives share:
// The pair objectives' (reward, dpo) check_data: `data` holds preference pairs and --packing is
// off (each pair's sides keep rows of their own).
void check_pair_data(const std::string& objective, const TrainConfig& config, const TokenDataset& data,
                     const std::string& path);
// -log sigmoid(x) and sigmoid(x), without overflow for large |x|.
double neg_log_sigmoid(double x);
double sigmoid(double x);

}  // namespace zt
