// Evaluation: token-weighted loss and perplexity of a model over a whole evaluation split,
// with the samples divided over the ranks and the sums all-reduced, so the result does not
// depend on the number of ranks or the micro-batch size (up to float reassociation).
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <span>

#include "comm/communicator.h"
#include "data/token_shards.h"
#include "data/batch.h"
#include "model/causal_lm.h"

namespace zt {

struct EvalResult {
  double loss = 0.0;          // sum of target-token losses / target tokens
  double perplexity = 0.0;    // exp(loss)
  int64_t target_tokens = 0;
  int64_t samples = 0;
};

// The walk every objective's evaluation makes: rank r takes records (samples, or pairs) r, r+W,
// r+2W, ... in micro-batches of `micro_batch` built by `make` from their indices, and runs the
// model's forward on each (no dropout); `visit` sees each micro-batch this rank counts after its
// forward. Every rank runs the same number of forward passes (a rank out of records runs record
// 0 and does not visit it), because ZeRO-3 gathers parameters collectively inside them.
// `forward`, when given, runs in place of the model's forward (with the no-dropout context; an
// objective with more than one pass, as DPO's reference and policy), on fillers too.
void for_each_eval_micro_batch(
    CausalLM& model, const TokenDataset& data, int64_t micro_batch, Communicator& comm, Backend& backend,
    const std::function<MicroBatch(std::span<const int64_t>)>& make,
    const std::function<void(const MicroBatch&, const BatchTensors&)>& visit,
    const std::function<void(const MicroBatch&, const BatchTensors&, const DropoutContext&)>& forward = nullptr);

// The SFT evaluation's sums of this rank's records (for_each_eval_micro_batch), not yet summed
// over the ranks: [loss sum, target tokens, samples]. `forward` as there; the losses are read
// from `head` after it, and a rank without the head (a pipeline stage before the last, which still
// runs every forward) passes nullptr and counts nothing.
std::array<double, 3> eval_sums(
    CausalLM& model, CausalLM* head, const TokenDataset& data, int64_t micro_batch, Communicator& comm,
    Backend& backend,
    const std::function<void(const MicroBatch&, const BatchTensors&, const DropoutContext&)>& forward = nullptr);

// Rank r evaluates samples r, r+W, r+2W, ... in micro-batches of `micro_batch` (no dropout).
// Every rank runs the same number of forward passes (a rank that has run out of samples runs
// one that it does not count), because ZeRO-3 gathers parameters collectively inside them.
EvalResult evaluate(CausalLM& model, const TokenDataset& data, int64_t micro_batch, Communicator& comm,
                    Backend& backend);

// The result from the sums over every rank: [loss sum, target tokens, samples].
EvalResult eval_result_of(std::span<const double, 3> sums);

}  // namespace zt
