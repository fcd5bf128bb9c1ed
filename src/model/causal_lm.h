// CausalLM: what the trainer sees of a model, whatever its architecture (LLaMA, Mistral, Qwen2,
// OPT: architecture.h): a forward pass to the logits, and a fused loss + explicit backward that
// accumulates gradients into the ParamStore. Nothing in the trainer depends on the block
// structure. The one implementation is the shared decoder skeleton (decoder.cpp).
#pragma once
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"
#include "model/decoder_blocks.h"
#include "model/kv_cache.h"
#include "model/linear.h"
#include "model/param_store.h"

namespace zt {

// One micro-batch on the backend's device. All [B*T], row-major by (b, t); right-padded. A row
// holds one sample, or several back to back under --packing (data/packing.h).
struct BatchTensors {
  int64_t batch = 0;  // B
  int64_t seq = 0;    // T: longest row of the micro-batch
  Tensor input_ids;   // int32 [B*T]
  Tensor targets;     // int32 [B*T]: the next token (pad where none)
  Tensor loss_mask;   // uint8 [B*T]: 1 where targets[n] counts in the loss
  Tensor row_ids;     // int64 [B*T]: global token positions (dropout masks)
  // int32 [B*T]: the token's position within its sample (RoPE, learned positions, attention
  // confined to the sample: backend.h "positions within packed rows"). Empty: t, one sample per row.
  Tensor positions;
  // Causal (query, key) pairs the attention computes (causal_attention_pairs of data/batch.h), for
  // FLOP counts; batch_views sets it. 0: B * T^2 / 2, one sample per row.
  double attention_pairs = 0.0;
};

// The automatic LM-head chunk's smallest row count (ModelOptions::head_chunk_rows).
constexpr int64_t kMinHeadChunkRows = 256;

struct ModelOptions {
  bool activation_checkpointing = false;  // keep only block inputs; recompute blocks in backward
  // With checkpointing: the block inputs wait in pinned host memory between forward and backward
  // (3 on the device at a time, copied on the transfer queue, prefetched one block ahead).
  bool offload_activations = false;
  // Rows per chunk of the LM head + cross-entropy (the [N, V] logits never exist whole, only
  // [chunk, V]); 0: automatic, ceil(N / ceil(V / E)) rows, so a chunk's logits are about as large
  // as one [N, E] activation (Liger's fused linear cross-entropy rule), but at least
  // kMinHeadChunkRows (or N) rows, which keeps the head's weight-gradient GEMM deep enough to run
  // at GEMM speed. At least N: one chunk.
  int64_t head_chunk_rows = 0;
  float lora_scaling = 0.0f;
  float lora_dropout = 0.0f;
  // A pipeline stage's units [first_unit, end_unit) of the model's (param_store.h "Units": 0 the
  // stem, l+1 block l, L+1 the head; end_unit -1: through the head). The store holds only those
  // units' parameters, numbered from 0 (unit u of the model is the store's u - first_unit).
  int first_unit = 0;
  int end_unit = -1;
  // The store's number of first_unit: 0, or where an interleaved pipeline's later chunk starts in a
  // store that holds several chunks one after the other.
  int store_first_unit = 0;
  // A model that only runs forward passes (DPO's frozen reference: train/frozen_reference.h): no
  // buffer for backward, and the residual stream in two buffers that the blocks write in turn, so
  // nothing of a pass outlives it but the head's input. backward() is an error.
  bool forward_only = false;
};

// What a model tells the ZeRO engine as it runs, unit by unit, forward 0..U-1 and backward
// U-1..0 (units and the units each one reads: param_store.h). Stage 3 gathers what a unit reads
// on acquire and may free it on release;
// stage 2/3 reduce-scatter a unit's gradients once they are complete. The default does
// nothing: every parameter is resident and gradients wait for the optimizer step.
enum class UnitUse {
  Forward,       // the unit's parameters will be read
  Backward,      // its parameters will be read and its gradients written (accumulated)
  GradientOnly,  // only its gradients will be written (e.g. the embedding's backward)
};
class UnitHooks {
 public:
  virtual ~UnitHooks() = default;
  virtual void acquire(int unit, UnitUse use) { (void)unit, (void)use; }
  virtual void release(int unit) { (void)unit; }
  // Every gradient contribution of this micro-batch to the unit has been written.
  virtual void gradients_ready(int unit) { (void)unit; }
};

// A head over the decoder's last hidden state in place of the LM head and its cross-entropy
// (an objective's: the reward model's value head, train/reward_objective.cpp). The model calls it
// inside its head unit, so under ZeRO-3 the head's parameters (in that unit) are gathered.
class HiddenStateHead {
 public:
  virtual ~HiddenStateHead() = default;
  // In forward: hidden [N, E], the LM head's input (after the final norm and project_out).
  virtual void forward(Tensor hidden) = 0;
  // In backward: writes d_hidden [N, E] (compute dtype) and accumulates its own parameters'
  // gradients, for the batch of the last forward.
  virtual void backward(Tensor hidden, Tensor d_hidden) = 0;
};

class CausalLM {
 public:
  // Replaces the LM head by `head` (not owned; nullptr: the LM head again). With a head set,
  // forward() runs it and backward() starts from its d_hidden (grad_scale and loss_sum unused:
  // the head has its own); loss() is not available.
  void set_hidden_head(HiddenStateHead* head) { hidden_head_ = head; }
  // Times every module from now on (nullptr: off, the default; timing synchronises the device).
  void set_module_timer(ModuleTimer* timer) { timer_ = timer; }
  // The hooks the model calls around each unit (not owned; must outlive the model's use).
  void set_unit_hooks(UnitHooks* hooks) { hooks_ = hooks ? hooks : &no_hooks_; }

  virtual ~CausalLM() = default;
  // Runs the model on the batch up to the LM head's input. The head itself runs chunk by chunk
  // of rows inside loss() and backward() (ModelOptions::head_chunk_rows), so the returned
  // tensor is empty, unless keep_logits(true) asked for the whole logits [B*T, V] (in the
  // compute dtype, a buffer of their own: --dump-step0), valid until the next forward.
  virtual Tensor forward(const BatchTensors& batch, const DropoutContext& dropout) = 0;
  void keep_logits(bool keep) { keep_logits_ = keep; }
  // Generation (model/generation.h): runs the model over `input_ids` (int32 [T] on the model's
  // device: one sequence's next T tokens, at absolute positions P .. P+T-1, P = cache.length())
  // with the keys and values of the earlier positions from `cache`, to which the new ones are
  // appended (cache.length() becomes P + T). Returns the logits [1, V] of the last of them (the
  // compute dtype, valid until the next call). No dropout; the unit hooks run as in forward
  // (ZeRO-3 gathers each unit, so every rank must make the same calls).
  virtual Tensor forward_cached(Tensor input_ids, KvCache& cache) = 0;
  // After forward on the same batch: per chunk of rows, the LM head, the fused
  // softmax-cross-entropy (logits widened to fp32, as HF's logits.float()) and the head's
  // backward; then the full backward.
  // Gradients of d(sum of masked token losses * grad_scale) accumulate into the ParamStore.
  // Adds the sum of the masked token losses to loss_sum (fp64 [1] on the model's device)
  // without synchronising the device (the trainer reads a step's sum once).
  virtual void backward(const BatchTensors& batch, float grad_scale, const DropoutContext& dropout, Tensor loss_sum) = 0;
  // A pipeline stage's forward and backward (ModelOptions::first_unit, end_unit). forward_stage
  // runs the stage's units on `input` [B*T, C] (the previous stage's output; empty on the stage
  // that holds the stem, which reads batch.input_ids) and returns the last block's output
  // [B*T, C] (compute dtype, valid until the next forward) when the stage has no head; with the
  // head it returns what forward() does. backward_stage, after forward_stage on the same batch,
  // starts from `d_output` [B*T, C] (the next stage's gradient of this stage's output; empty on
  // the head's stage, which starts from the loss as backward() does) and returns the gradient of
  // `input` [B*T, C] (valid until the next backward; empty on the stem's stage). The whole model
  // is the one stage whose forward and backward are forward() and backward().
  virtual Tensor forward_stage(const BatchTensors& batch, const DropoutContext& dropout, Tensor input) = 0;
  virtual Tensor backward_stage(const BatchTensors& batch, float grad_scale, const DropoutContext& dropout,
                                Tensor loss_sum, Tensor d_output) = 0;
  // The same, returning the sum (one device synchronisation: tests and benchmarks).
  virtual double backward(const BatchTensors& batch, float grad_scale, const DropoutContext& dropout) = 0;
  // After forward: the sum of the masked token losses, no gradients (evaluation).
  virtual double loss(const BatchTensors& batch) = 0;
  // After forward: per row b of the batch, the sum of its masked token losses, no gradients
  // ([B] fp64): -log p(row b's targets), DPO's log-probabilities. Queued behind the forward and
  // copied to host memory; read() waits for the copy (one device synchronisation, or none where a
  // later read waited already: DPO queues the reference's, runs the policy's forward, reads the
  // policy's, then the reference's). At most two queued at a time per model (two host slots):
  // read() names a result a third queue_row_losses overwrote.
  class QueuedRowLosses {
   public:
    QueuedRowLosses(Backend& host, Tensor sums, std::unique_ptr<BackendEvent> copied, const uint64_t* slot_generation,
                    uint64_t generation)
        : host_(&host), sums_(sums), copied_(std::move(copied)), slot_generation_(slot_generation),
          generation_(generation) {}
    std::vector<double> read();

   private:
    Backend* host_;
    Tensor sums_;  // fp64 [B], host memory
    std::unique_ptr<BackendEvent> copied_;
    const uint64_t* slot_generation_;  // the slot's current generation (the model's)
    uint64_t generation_;              // this result's
  };
  virtual QueuedRowLosses queue_row_losses(const BatchTensors& batch) = 0;
  std::vector<double> row_losses(const BatchTensors& batch) { return queue_row_losses(batch).read(); }
  // The next backward() weights row b's token losses by row_weights[b] (times grad_scale) in the
  // LM head's gradient, and adds nothing to loss_sum (the objective adds its own loss): the chain
  // rule through a loss of the rows' log-probabilities (train/dpo_objective.cpp). One backward
  // uses them; the one after is unweighted again.
  void weight_rows_once(std::vector<float> row_weights) { row_weights_ = std::move(row_weights); }
  // After forward: the buffer the head's logits are computed in ([chunk, V], or null before
  // the first forward), so that the memory model names it (train/memory_model.cpp).
  virtual const void* logits_storage() const = 0;
  // Matmul FLOPs of one forward pass over `tokens` rows (B*T, padding included) whose attention
  // computes `attention_pairs` causal (query, key) pairs (BatchTensors::attention_pairs); 2 per
  // multiply-add.
  virtual double forward_flops(int64_t tokens, double attention_pairs) const = 0;
  // The subset of forward_flops spent in GEMMs whose weights are trainable (they need a second
  // backward GEMM for the weight gradient).
  virtual double trainable_weight_flops(int64_t tokens) const = 0;

 protected:
  UnitHooks& hooks() { return *hooks_; }
  ModuleTimer* timer() { return timer_; }
  bool keeps_logits() const { return keep_logits_; }
  HiddenStateHead* hidden_head() const { return hidden_head_; }
  // weight_rows_once's weights for this backward ([B], or empty: unweighted), cleared.
  std::vector<float> take_row_weights() { return std::exchange(row_weights_, {}); }

 private:
  std::vector<float> row_weights_;
  HiddenStateHead* hidden_head_ = nullptr;
  UnitHooks no_hooks_;
  UnitHooks* hooks_ = &no_hooks_;
  ModuleTimer* timer_ = nullptr;
  bool keep_logits_ = false;
};

// Builds the decoder of config.model_type (its architecture row's blocks) over the parameters in `store`.
std::unique_ptr<CausalLM> make_causal_lm(const ModelConfig& config, ParamStore& store, Backend& backend,
                                         const ModelOptions& options);

}  // namespace zt
