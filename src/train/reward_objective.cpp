// The reward objective (train/objective.h): DeepSpeed-Chat step 2's reward model
// (dschat/utils/model/reward_model.py, RewardModel), trained on pair micro-batches
// (data/pair_batch.h: rows [0, P) chosen, [P, 2P) rejected).
//   value head  v_head.weight [1, E], no bias (E: the decoder's output width, OPT's
//               word_embed_proj_dim), over the last hidden state: values[n] = h[n] . v
//   per pair    [d, e) = pair_loss_span: d the first position where chosen and rejected differ,
//               e the larger of their score ends (the end of the longer response)
//               loss_p = mean over t in [d, e) of -log sigmoid(values_c[t] - values_r[t])
//   loss        sum over pairs of loss_p / pairs of the global batch
//   scores      chosen score = values_c[score_end_c - 1], rejected likewise (chosen_end_scores)
// Evaluation: eval_reward_accuracy = the fraction of pairs with chosen score > rejected score,
// eval_chosen_score / eval_rejected_score their means, eval_loss the mean pair loss.
// The value head is in the head unit (ZeRO-3 gathers it with the final norm) and is trainable
// under LoRA too. Its values go to the host once per micro-batch (a few floats per row), where
// the pair loss and d(values) are computed; the head's GEMMs are backend ops like any other.
// The padded positions of the shorter side (between its end and the longer one's) are computed
// as zerotune pads every batch: pad ids attending causally to all positions before them.
// DeepSpeed-Chat masks padded keys instead, so its loss terms at those positions differ; the
// scores, the accuracy and every term at real positions are the same (docs/deepspeed-chat.md).
#include <algorithm>
#include <cmath>
#include <span>

#include "core/error.h"
#include "core/rng.h"
#include "data/pair_batch.h"
#include "model/linear.h"
#include "model/safetensors.h"
#include "model/value_head.h"
#include "train/batch_views.h"
#include "train/evaluation.h"
#include "train/objective.h"
#include "train/train_config.h"

namespace zt {

namespace {

// The value head as the model's HiddenStateHead: forward keeps the values on the host,
// backward uploads d(values) and runs the head's backward.
class ValueHead final : public HiddenStateHead {
 public:
  ValueHead(ParamStore& store, Backend& backend)
      : backend_(backend), act_(store.param_dtype()), head_(store, kValueHeadModule, 0.0f, 0.0f, 0) {}

  void forward(Tensor hidden) override {
    const int64_t n = hidden.dim(0);
    ensure_buffer(values_, backend_, n, act_);
    head_.ensure_saved(backend_, saved_, n);
    Tensor values = values_.view(act_, {n, 1});  // [N, 1]
    head_.forward(backend_, values, hidden, saved_, DropoutContext{});
    host_values.resize(static_cast<size_t>(n));
    backend_.copy(Tensor(host_values.data(), DType::F32, {n}), values.reshaped({n}));
  }

  void backward(Tensor hidden, Tensor d_hidden) override {
    const int64_t n = hidden.dim(0);
    ZT_CHECK(static_cast<int64_t>(host_d_values.size()) == n, "value head: d(values) for ", host_d_values.size(),
             " rows, the forward had ", n);
    Tensor d_values = values_.view(act_, {n, 1});  // [N, 1], reusing the values' buffer
    backend_.copy(d_values.reshaped({n}), Tensor(host_d_values.data(), DType::F32, {n}));
    head_.backward(backend_, d_hidden, false, d_values, hidden, saved_, DropoutContext{}, Tensor(), Tensor());
  }

  std::vector<float> host_values;    // [N] values of the last forward (rows x positions)
  std::vector<float> host_d_values;  // [N] d(loss * grad_scale)/d(values), set before backward

 private:
  Backend& backend_;
  DType act_;
  LinearLayer head_;  // [1, E]
  LoraSaved saved_;
  Buffer values_;     // [N] compute dtype: the values, then their gradient
};

// The pair loss of a pair micro-batch from the values [2P * T]: the loss sum, each pair's
// scores, and (when `d_values` is given) d(loss sum * grad_scale)/d(values).
struct PairResult {
  double loss_sum = 0.0;
  std::vector<double> chosen_scores, rejected_scores;  // [P]
};
PairResult pair_loss(const MicroBatch& micro, const std::vector<float>& values, float grad_scale,
                     std::vector<float>* d_values) {
  const int64_t pairs = micro.pairs, T = micro.seq;
  ZT_CHECK(pairs > 0 && static_cast<int64_t>(values.size()) == 2 * pairs * T,
           "--objective reward: the micro-batch holds no pairs (data from zerotune prep --pairs is needed)");
  PairResult result;
  if (d_values) d_values->assign(values.size(), 0.0f);
  for (int64_t p = 0; p < pairs; ++p) {
    const float* chosen = values.data() + p * T;             // [T]
    const float* rejected = values.data() + (pairs + p) * T;  // [T]
    const PairSpan span = pair_loss_span(micro, p);
    const double count = static_cast<double>(span.end - span.begin);
    for (int64_t t = span.begin; t < span.end; ++t) {
      const double margin = static_cast<double>(chosen[t]) - static_cast<double>(rejected[t]);
      result.loss_sum += neg_log_sigmoid(margin) / count;
      if (!d_values) continue;
      const float d_margin = static_cast<float>(-sigmoid(-margin) / count * grad_scale);  // d(-log sigmoid(m))/dm
      (*d_values)[static_cast<size_t>(p * T + t)] = d_margin;
      (*d_values)[static_cast<size_t>((pairs + p) * T + t)] = -d_margin;
    }
    result.chosen_scores.push_back(chosen[micro.score_ends[static_cast<size_t>(p)] - 1]);
    result.rejected_scores.push_back(rejected[micro.score_ends[static_cast<size_t>(pairs + p)] - 1]);
  }
  return result;
}

class RewardObjective final : public Objective {
 public:
  std::string name() const override { return "reward"; }

  void check_data(const TrainConfig& config, const TokenDataset& data, const std::string& path) const override {
    check_pair_data(name(), config, data, path);
    ZT_CHECK(config.dump_step0_path.empty(), "--dump-step0 writes the LM head's logits, which --objective reward does "
             "not compute (its value head replaces the LM head); leave --dump-step0 out");
  }

  std::vector<ParamSpec> added_params(const ModelConfig& config) const override {
    return {value_head_spec(config, name())};
  }

  void init_added_params(ParamStore& store, int unit, const std::string& model_dir, uint64_t seed) const override {
    const std::string name = kValueHeadWeight;
    if (store.unit_of(name) != unit) return;
    const std::vector<int64_t> shape = store.entry(name).spec.shape;  // [1, E]
    std::vector<float> weight(static_cast<size_t>(shape[1]));
    // A reward model's own head (DeepSpeed-Chat saves v_head.weight, transformers'
    // ...ForSequenceClassification score.weight), else nn.Linear's init: U(-1/sqrt(E), 1/sqrt(E)).
    const ModelWeights weights(model_dir);
    std::string stored = weights.stored_name(name);
    if (stored.empty()) stored = weights.stored_name(kSequenceClassificationScore);
    if (!stored.empty()) {
      weights.read_f32(stored, weight.data(), shape);
    } else {
      const float bound = static_cast<float>(1.0 / std::sqrt(static_cast<double>(shape[1])));
      const RngKey key{seed, static_cast<uint32_t>(RngPurpose::ValueHeadInit), 0};
      for (size_t i = 0; i < weight.size(); ++i) weight[i] = (2.0f * rng_uniform(key, i) - 1.0f) * bound;
    }
    store.write_param(name, weight.data());
  }

  void attach(CausalLM& model, ParamStore& store, Backend& backend) override {
    head_ = std::make_unique<ValueHead>(store, backend);
    model.set_hidden_head(head_.get());
  }

  void backward(CausalLM& model, const MicroBatch& micro, const BatchTensors& batch, float grad_scale,
                const DropoutContext& dropout, Tensor loss_sum) override {
    const PairResult result = pair_loss(micro, head_->host_values, grad_scale, &head_->host_d_values);
    model.backward(batch, grad_scale, dropout, loss_sum);
    host_loss_sum_ += result.loss_sum;
  }

  // Two rows (chosen, rejected) of seq_len tokens per pair.
  MicroBatch largest_micro_batch(const TrainConfig& config, int64_t seq_len) const override {
    const int64_t pairs = config.micro_batch_size;
    MicroBatch micro = padded_micro_batch(2 * pairs, seq_len, 0);
    micro.pairs = micro.target_tokens = pairs;
    micro.real_tokens = micro.batch * micro.seq;
    micro.score_ends.assign(static_cast<size_t>(2 * pairs), seq_len);
    micro.divergences.assign(static_cast<size_t>(pairs), 0);
    return micro;
  }

  // The evaluation walk of train/evaluation.h over pairs; the sums all-reduced.
  ObjectiveEval evaluate(CausalLM& model, const TokenDataset& data, int64_t micro_batch, Communicator& comm,
                         Backend& backend) override {
    double sums[5] = {0.0, 0.0, 0.0, 0.0, 0.0};  // loss sum, pairs, correct, chosen scores, rejected scores
    for_each_eval_micro_batch(
        model, data, micro_batch, comm, backend,
        [&](std::span<const int64_t> pairs) {
          return make_pair_micro_batch(data, pairs, static_cast<int32_t>(data.attributes().pad_id));
        },
        [&](const MicroBatch& micro, const BatchTensors&) {
          const PairResult result = pair_loss(micro, head_->host_values, 0.0f, nullptr);
          sums[0] += result.loss_sum;
          sums[1] += static_cast<double>(micro.pairs);
          for (size_t p = 0; p < result.chosen_scores.size(); ++p) {
            sums[2] += result.chosen_scores[p] > result.rejected_scores[p] ? 1.0 : 0.0;
            sums[3] += result.chosen_scores[p];
            sums[4] += result.rejected_scores[p];
          }
        });
    comm.all_reduce_scalars(sums);
    const double pairs = sums[1];
    const double loss = sums[0] / pairs, accuracy = sums[2] / pairs;
    const double chosen = sums[3] / pairs, rejected = sums[4] / pairs;
    return {{{"eval_loss", loss},
             {"eval_reward_accuracy", accuracy},
             {"eval_chosen_score", chosen},
             {"eval_rejected_score", rejected},
             {"eval_pairs", static_cast<int64_t>(pairs)}},
            cat("eval_loss ", loss, " | reward accuracy ", accuracy, " | chosen score ", chosen, " | rejected score ",
                rejected, " | ", static_cast<int64_t>(pairs), " pairs")};
  }

 private:
  std::unique_ptr<ValueHead> head_;
};

}  // namespace

std::unique_ptr<Objective> make_reward_objective() { return std::make_unique<RewardObjective>(); }

}  // namespace zt
