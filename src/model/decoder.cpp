// The shared decoder skeleton: every architecture's CausalLM (architecture.h gives the blocks)
//   stem:   embed_tokens(ids) [-> project_in] [+ embed_positions(position + offset)]   (unit 0)
//   blocks: L x the family's block over the residual stream                          (units 1..L)
//   head:   [final norm] [-> project_out] -> lm_head (own weight, or the token table) (unit L+1)
// with explicit forward and backward, activation checkpointing (keep only each block's input,
// recompute the block before its backward) with the inputs optionally offloaded to pinned host
// memory, the ZeRO unit hooks around each unit, the LM head and the fused cross-entropy over
// chunks of rows (the [N, V] logits never whole), FLOP counts and --profile-step timing.
#include <algorithm>
#include <vector>

#include "core/rng.h"
#include "model/architecture.h"
#include "model/causal_lm.h"
#include "model/norm.h"

namespace zt {

std::vector<double> CausalLM::QueuedRowLosses::read() {
  ZT_CHECK(*slot_generation_ == generation_, "CausalLM::queue_row_losses: a result read after two more were queued "
           "(its host slot was written again)");
  copied_->wait();
  std::vector<double> values(static_cast<size_t>(sums_.numel()));  // [B]
  host_->copy(Tensor(values.data(), DType::F64, {sums_.numel()}), sums_);
  return values;
}

namespace {

// Calls work(b, begin, count) for each batch row b's part [begin, begin + count) of the token
// rows [first, first + rows) (row b holds tokens [b * seq, (b + 1) * seq)).
template <class Work>
void for_each_row_part(int64_t seq, int64_t first, int64_t rows, Work&& work) {
  for (int64_t begin = first; begin < first + rows;) {
    const int64_t b = begin / seq, end = std::min((b + 1) * seq, first + rows);
    work(b, begin, end - begin);
    begin = end;
  }
}

class DecoderModel final : public CausalLM {
 public:
  DecoderModel(const ModelConfig& config, ParamStore& store, Backend& backend, const ModelOptions& options)
      : c_(config), backend_(backend), options_(options), act_(store.param_dtype()) {
    const Architecture& row = architecture(c_.model_type, c_.path);
    const std::string& decoder = row.naming.decoder_prefix;
    set_stage_units(options);
    if (has_stem_) {
      embed_ = store.param(decoder + "embed_tokens.weight");
      embed_grad_ = store.grad(decoder + "embed_tokens.weight");
    }
    if (has_stem_ && c_.positions == PositionKind::Learned) {
      positions_ = store.param(decoder + "embed_positions.weight");
      positions_grad_ = store.grad(decoder + "embed_positions.weight");
    }
    // Adapters of the stem/head projections draw dropout streams after every block's (16 per layer).
    const auto stream = [&](uint32_t index) {
      return rng_stream(RngPurpose::LoraDropout, static_cast<uint32_t>(c_.num_hidden_layers * 16 + index));
    };
    if (has_stem_ && c_.projects_embeddings())
      project_in_ = LinearLayer(store, decoder + "project_in", options.lora_scaling, options.lora_dropout, stream(1));
    if (has_head_ && c_.projects_embeddings())
      project_out_ = LinearLayer(store, decoder + "project_out", options.lora_scaling, options.lora_dropout, stream(2));
    if (has_head_ && c_.final_norm)
      final_norm_ = NormLayer(store, backend, row.naming.final_norm, c_, c_.hidden_size);
    // A tied head's lm_head.weight is the token table itself (ParamStore resolves the tie), so
    // its gradient accumulates into the embedding's.
    if (has_head_) head_ = LinearLayer(store, "lm_head", options.lora_scaling, options.lora_dropout, 0);
    blocks_ = row.make_blocks(c_, store, backend,
                              BlockOptions{options.lora_scaling, options.lora_dropout, first_layer_, end_layer_});
    const int64_t layers = end_layer_ - first_layer_;
    saved_.resize(layers == 0 ? 0 : shares_saved() ? 1 : static_cast<size_t>(layers));
    for (auto& saved : saved_) saved = blocks_->make_saved();
    ZT_CHECK(!options.offload_activations || options.activation_checkpointing,
             "--offload-activations needs --activation-checkpointing: it moves the block inputs that "
             "checkpointing keeps to host memory");
    // Offloading pays only when some block input would leave the device ring.
    offloading_ = options.offload_activations && !options.forward_only && c_.num_hidden_layers + 1 > kResidentResiduals;
    ZT_CHECK(!offloading_ || (has_stem_ && has_head_), "--offload-activations: not with pipeline stages (a stage keeps "
             "only its input per micro-batch and recomputes the rest)");
    residual_.resize(static_cast<size_t>(offloading_            ? kResidentResiduals
                                         : options.forward_only ? kForwardOnlyResiduals
                                                                : layers + 1));
    if (offloading_) {
      host_ = backend.make_host_backend();
      host_residual_.resize(static_cast<size_t>(c_.num_hidden_layers + 1));
      transfers_.resize(static_cast<size_t>(c_.num_hidden_layers + 1));
    }
  }

  Tensor forward(const BatchTensors& batch, const DropoutContext& dropout) override {
    return forward_stage(batch, dropout, Tensor());
  }

  Tensor forward_stage(const BatchTensors& batch, const DropoutContext& dropout, Tensor input) override {
    check_sequence_length(c_, batch.seq, "the micro-batch");
    reserve(batch.batch, batch.seq);
    const BlockPass pass = block_pass(batch, dropout);
    const int64_t n = rows();
    forward_dropout_ = dropout;
    if (has_stem_) {
      hooks().acquire(kStemUnit, UnitUse::Forward);
      make_room_for(0);
      time_module(backend_, timer(), "embedding", stem_flops(false), [&] { stem_forward(batch, pass, dropout); });
      offload(0);
      hooks().release(kStemUnit);
    } else {
      ZT_CHECK(input.numel() == n * c_.hidden_size, "forward_stage: the stage's input has ", input.numel(),
               " elements, not B*T*C = ", n * c_.hidden_size);
      backend_.copy(residual(first_layer_), input.reshaped({n, c_.hidden_size}));
    }
    for (int64_t l = first_layer_; l < end_layer_; ++l) {
      hooks().acquire(block_unit(l), UnitUse::Forward);
      make_room_for(l + 1);
      blocks_->forward(l, pass, residual(l), saved(l), residual(l + 1));
      offload(l + 1);
      hooks().release(block_unit(l));
    }
    if (!has_head_) return residual(end_layer_);
    hooks().acquire(head_unit(), UnitUse::Forward);
    head_input_forward(dropout);
    Tensor logits;  // only for keep_logits: the head runs in loss() and backward()
    if (hidden_head()) {
      hidden_head()->forward(head_input());
    } else if (keeps_logits()) {
      ensure_buffer(whole_logits_, backend_, n * c_.vocab_size, act_);
      logits = matrix(whole_logits_, n, c_.vocab_size);
      for_each_head_chunk(dropout, [&](int64_t first, int64_t count, Tensor chunk_logits, const DropoutContext&) {
        backend_.copy(logits.rows(first, count), chunk_logits);
      });
    }
    hooks().release(head_unit());
    return logits;
  }

  Tensor forward_cached(Tensor input_ids, KvCache& cache) override {
    const int64_t first = cache.length(), count = input_ids.numel();
    ZT_CHECK(count > 0, "forward_cached: no new tokens");
    ZT_CHECK(has_stem_ && has_head_, "forward_cached: the whole model is needed (not one pipeline stage)");
    check_sequence_length(c_, first + count, "the generated sequence");
    reserve(1, count);
    BatchTensors batch;
    batch.batch = 1;
    batch.seq = count;
    batch.input_ids = input_ids;
    batch.positions = absolute_positions(first, count);  // RoPE and learned positions: P .. P+T-1
    DropoutContext no_dropout;
    no_dropout.training = false;
    BlockPass pass = block_pass(batch, no_dropout);
    pass.cache = &cache;
    hooks().acquire(kStemUnit, UnitUse::Forward);
    stem_forward(batch, pass, no_dropout);
    hooks().release(kStemUnit);
    for (int64_t l = 0; l < c_.num_hidden_layers; ++l) {
      hooks().acquire(block_unit(l), UnitUse::Forward);
      blocks_->forward(l, pass, residual(l), saved(l), residual(l + 1));
      hooks().release(block_unit(l));
    }
    cache.advance(count);
    hooks().acquire(head_unit(), UnitUse::Forward);
    head_input_forward(no_dropout);
    Tensor logits = matrix(logits_, 1, c_.vocab_size);  // [1, V]: the last token's
    head_.forward(backend_, logits, head_input().rows(rows() - 1, 1), head_saved_, no_dropout);
    hooks().release(head_unit());
    return logits;
  }

  double loss(const BatchTensors& batch) override {
    ZT_CHECK(!hidden_head(), "CausalLM::loss: the model runs another head (its objective computes the loss)");
    ZT_CHECK(has_head_, "CausalLM::loss: this pipeline stage does not hold the head");
    hooks().acquire(head_unit(), UnitUse::Forward);
    double sum = 0.0;
    for_each_head_chunk(forward_dropout_, [&](int64_t first, int64_t count, Tensor chunk_logits, const DropoutContext&) {
      sum += backend_.cross_entropy(chunk_logits, batch.targets.rows(first, count), batch.loss_mask.rows(first, count), 0.0f);
    });
    hooks().release(head_unit());
    return sum;
  }

  QueuedRowLosses queue_row_losses(const BatchTensors& batch) override {
    ZT_CHECK(!hidden_head(), "CausalLM::row_losses: the model runs another head (its objective computes the loss)");
    ensure_buffer(row_sums_, backend_, batch.batch, DType::F64);
    Tensor sums = row_sums_.view(DType::F64, {batch.batch});  // [B] on the device
    backend_.fill(sums, 0.0f);
    hooks().acquire(head_unit(), UnitUse::Forward);
    for_each_head_chunk(forward_dropout_, [&](int64_t first, int64_t count, Tensor chunk_logits, const DropoutContext&) {
      for_each_row_part(batch.seq, first, count, [&](int64_t b, int64_t begin, int64_t part) {
        backend_.cross_entropy_accumulate(chunk_logits.rows(begin - first, part), batch.targets.rows(begin, part),
                                          batch.loss_mask.rows(begin, part), 0.0f, sums.rows(b, 1));
      });
    });
    hooks().release(head_unit());
    // Into the next of two host slots (pinned where the backend has it), behind the forward: the
    // device's sums buffer is reused by the next queue, in stream order after this copy.
    if (!row_host_) row_host_ = backend_.make_host_backend();
    const int slot = static_cast<int>(row_queued_++ % 2);
    ensure_buffer(row_sums_host_[slot], *row_host_, batch.batch, DType::F64);
    const Tensor host = row_sums_host_[slot].view(DType::F64, {batch.batch});  // [B], host memory
    backend_.copy_async(host, sums);
    const uint64_t generation = ++row_slot_generation_[slot];
    return QueuedRowLosses(*row_host_, host, backend_.record_event(), &row_slot_generation_[slot], generation);
  }

  double backward(const BatchTensors& batch, float grad_scale, const DropoutContext& dropout) override {
    if (!loss_sum_.data()) loss_sum_ = Buffer(backend_, sizeof(double));
    double sum = 0.0;  // [1]
    Tensor host(&sum, DType::F64, {1});
    backend_.copy(loss_sum_.view(DType::F64, {1}), host);
    backward(batch, grad_scale, dropout, loss_sum_.view(DType::F64, {1}));
    backend_.copy(host, loss_sum_.view(DType::F64, {1}));
    return sum;
  }

  void backward(const BatchTensors& batch, float grad_scale, const DropoutContext& dropout, Tensor loss_sum) override {
    backward_stage(batch, grad_scale, dropout, loss_sum, Tensor());
  }

  Tensor backward_stage(const BatchTensors& batch, float grad_scale, const DropoutContext& dropout, Tensor loss_sum,
                        Tensor d_output) override {
    ZT_CHECK(!options_.forward_only, "CausalLM::backward: the model was built forward-only (a frozen reference)");
    const BlockPass pass = block_pass(batch, dropout);
    const int64_t n = rows(), hidden = c_.hidden_size;
    Tensor d_residual = matrix(grad_residual_, n, hidden);  // the residual stream's gradient
    if (has_head_) {
      head_backward(batch, grad_scale, dropout, loss_sum, pass, d_residual);
    } else {
      ZT_CHECK(d_output.numel() == n * hidden, "backward_stage: the output gradient has ", d_output.numel(),
               " elements, not B*T*C = ", n * hidden);
      backend_.copy(d_residual, d_output.reshaped({n, hidden}));
    }
    for (int64_t l = end_layer_ - 1; l >= first_layer_; --l) {
      hooks().acquire(block_unit(l), UnitUse::Backward);
      bring_back(l);      // this block's input (prefetched during the block above)
      prefetch(l - 1);    // the next one's, during this block
      if (options_.activation_checkpointing)  // recompute this block's forward from its saved input
        blocks_->forward(l, pass, residual(l), saved(l), matrix(recompute_out_, n, hidden));
      blocks_->backward(l, pass, residual(l), saved(l), d_residual);
      hooks().gradients_ready(block_unit(l));
      hooks().release(block_unit(l));
    }
    if (!has_stem_) return d_residual;
    // The token table's backward reads no parameters; project_in's reads its weight.
    hooks().acquire(kStemUnit, c_.projects_embeddings() ? UnitUse::Backward : UnitUse::GradientOnly);
    time_module(backend_, timer(), "embedding", stem_flops(true), [&] { stem_backward(batch, dropout, pass, d_residual); });
    hooks().gradients_ready(kStemUnit);
    hooks().release(kStemUnit);
    return Tensor();
  }

 private:
  // The head chain backwards, from the loss to d_residual [N, C] (the last block's output gradient):
  // lm_head (or an objective's head) <- [project_out] <- [final norm].
  void head_backward(const BatchTensors& batch, float grad_scale, const DropoutContext& dropout, Tensor loss_sum,
                     const BlockPass& pass, Tensor d_residual) {
    const int64_t n = rows(), hidden = c_.hidden_size, embed = c_.embed_dim();
    hooks().acquire(head_unit(), UnitUse::Backward);
    // The head chain backwards: lm_head <- [project_out] <- [final norm] <- residual stream.
    Tensor final_out = residual(c_.num_hidden_layers);                              // [N, C]
    Tensor normed = c_.final_norm ? matrix(final_ln_, n, hidden) : final_out;        // [N, C]
    Tensor head_input = c_.projects_embeddings() ? matrix(projected_, n, embed) : normed;
    Tensor d_normed = c_.final_norm ? matrix(grad_ln_, n, hidden) : d_residual;     // [N, C]
    Tensor d_head_input = c_.projects_embeddings() ? matrix(grad_projected_, n, embed) : d_normed;
    const std::vector<float> row_weights = take_row_weights();  // [B] or empty
    if (hidden_head()) {  // an objective's head gives d_head_input; the LM head does not run
      ZT_CHECK(row_weights.empty(), "CausalLM::backward: row weights are for the LM head's loss, not another head's");
      time_module(backend_, timer(), "head", 0.0, [&] { hidden_head()->backward(head_input, d_head_input); });
    } else {
      // Per chunk of rows: logits, their loss and dlogits (in place), d_head_input's rows
      // (written) and the head's weight gradients (accumulated).
      time_module(backend_, timer(), "head", linear_flops({&head_}, n, false) + linear_flops({&head_}, n, true), [&] {
        for_each_head_chunk(dropout, [&](int64_t first, int64_t count, Tensor dlogits, const DropoutContext& chunk_dropout) {
          if (row_weights.empty())
            backend_.cross_entropy_accumulate(dlogits, batch.targets.rows(first, count),
                                              batch.loss_mask.rows(first, count), grad_scale, loss_sum);
          else
            weighted_dlogits(batch, row_weights, grad_scale, first, count, dlogits);
          head_.backward(backend_, d_head_input.rows(first, count), false, dlogits, head_input.rows(first, count),
                         head_saved_, chunk_dropout, pass.lora_dz, pass.lora_scratch);
        });
      });
    }
    if (c_.projects_embeddings())
      time_module(backend_, timer(), "head", linear_flops({&project_out_}, n, true), [&] {
        project_out_.backward(backend_, d_normed, false, d_head_input, normed, project_out_saved_, dropout, pass.lora_dz,
                              pass.lora_scratch);
      });
    if (c_.final_norm)
      time_module(backend_, timer(), "norm", 2.0 * final_norm_.flops(n),
                  [&] { final_norm_.backward(backend_, d_residual, GradStore::Write, d_normed, final_out, final_saved_); });
    hooks().gradients_ready(head_unit());
    hooks().release(head_unit());
  }

 public:
  const void* logits_storage() const override { return logits_.data(); }

  double forward_flops(int64_t tokens, double attention_pairs) const override {
    double macs = 0.0;
    for (const LinearLayer* linear : all_linears()) macs += linear->macs_per_token();
    return 2.0 * static_cast<double>(tokens) * macs +
           static_cast<double>(end_layer_ - first_layer_) *
               attention_core_flops(attention_pairs, c_.num_attention_heads, c_.head_dim);
  }

  double trainable_weight_flops(int64_t tokens) const override {
    double macs = 0.0;
    for (const LinearLayer* linear : all_linears()) macs += linear->trainable_macs_per_token();
    return 2.0 * static_cast<double>(tokens) * macs;
  }

 private:
  // Units (param_store.h): 0 = the stem, l+1 = block l, L+1 = the head; in the store (and to
  // the hooks) a pipeline stage's are numbered from its first (ModelOptions::first_unit).
  static constexpr int kStemUnit = 0;  // only on the stage that holds it, whose first unit it is
  int block_unit(int64_t layer) const { return static_cast<int>(layer) + 1 - unit_shift_; }
  int head_unit() const { return static_cast<int>(c_.num_hidden_layers) + 1 - unit_shift_; }
  // The stage's units [first_unit, end_unit) as the parts it holds: the stem, the layers
  // [first_layer_, end_layer_), the head.
  void set_stage_units(const ModelOptions& options) {
    const int units = static_cast<int>(c_.num_hidden_layers) + 2;
    const int end_unit = options.end_unit < 0 ? units : options.end_unit;
    ZT_CHECK(options.first_unit >= 0 && options.first_unit < end_unit && end_unit <= units, "the model's units [",
             options.first_unit, ", ", end_unit, ") are not a range of its ", units, " units");
    first_unit_ = options.first_unit;
    unit_shift_ = options.first_unit - options.store_first_unit;
    has_stem_ = first_unit_ == 0;
    has_head_ = end_unit == units;
    first_layer_ = std::max(first_unit_ - 1, 0);
    end_layer_ = std::max<int64_t>(std::min<int64_t>(end_unit - 1, c_.num_hidden_layers), first_layer_);
  }
  int64_t rows() const { return batch_ * seq_; }
  // An activation buffer seen as [rows, cols] of the compute dtype.
  Tensor matrix(const Buffer& buffer, int64_t rows, int64_t cols) const { return buffer.view(act_, {rows, cols}); }
  Tensor residual(int64_t index) {
    const int64_t slot = offloading_            ? index % kResidentResiduals
                         : options_.forward_only ? index % kForwardOnlyResiduals
                                                 : index - first_layer_;
    return matrix(residual_[static_cast<size_t>(slot)], rows(), c_.hidden_size);
  }
  // One BlockSaved for every block: recomputed before each backward, or never read (forward-only).
  bool shares_saved() const { return options_.activation_checkpointing || options_.forward_only; }

  // ---- activation offload: residual(i) lives in device slot i % 3 and, when a later one will
  // take that slot, also in host_residual_[i] (pinned). Copies run on the transfer queue;
  // events order them against compute without the host waiting. ----
  // Whether residual(index) leaves the device before backward needs it.
  bool evicted(int64_t index) const { return offloading_ && index + kResidentResiduals <= c_.num_hidden_layers; }
  Tensor host_residual(int64_t index) {
    return host_residual_[static_cast<size_t>(index)].view(act_, {rows(), c_.hidden_size});
  }
  // Before residual(index) is written: the residual that held its slot has reached the host.
  void make_room_for(int64_t index) {
    if (!offloading_ || index < kResidentResiduals) return;
    auto& transfer = transfers_[static_cast<size_t>(index - kResidentResiduals)];
    if (transfer) backend_.wait_for(*transfer);
    transfer.reset();
  }
  // Once residual(index) is complete: its copy to the host, behind the compute that wrote it.
  void offload(int64_t index) {
    if (!evicted(index)) return;
    transfers_[static_cast<size_t>(index)] = backend_.transfer_async(host_residual(index), residual(index));
  }
  // Its copy back into its slot, behind the compute that last read the slot's previous content.
  void prefetch(int64_t index) {
    if (index < 0 || !evicted(index)) return;
    transfers_[static_cast<size_t>(index)] = backend_.transfer_async(residual(index), host_residual(index));
  }
  // Before residual(index) is read in backward: it is back on the device.
  void bring_back(int64_t index) {
    if (!evicted(index)) return;
    auto& transfer = transfers_[static_cast<size_t>(index)];
    if (!transfer) prefetch(index);  // the top evicted block: nobody prefetched it
    backend_.wait_for(*transfers_[static_cast<size_t>(index)]);
    transfers_[static_cast<size_t>(index)].reset();
  }
  BlockSaved& saved(int64_t layer) {
    return *saved_[shares_saved() ? 0 : static_cast<size_t>(layer - first_layer_)];
  }
  BlockPass block_pass(const BatchTensors& batch, const DropoutContext& dropout) {
    BlockPass pass;
    pass.batch = batch_;
    pass.seq = seq_;
    pass.attention_pairs = batch.attention_pairs > 0.0 ? batch.attention_pairs
                                                        : 0.5 * static_cast<double>(batch_ * seq_) * static_cast<double>(seq_);
    pass.positions = batch.positions.empty() ? row_positions_.view(DType::I32, {rows()}) : batch.positions;
    pass.dropout = &dropout;
    pass.lora_dz = lora_dz_.view(act_, {lora_dz_elements_});
    pass.lora_scratch = lora_scratch_.view(act_, {lora_scratch_elements_});
    pass.timer = timer();
    return pass;
  }
  std::vector<const LinearLayer*> all_linears() const {
    std::vector<const LinearLayer*> all;
    if (has_head_) all.push_back(&head_);
    if (has_stem_ && c_.projects_embeddings()) all.push_back(&project_in_);
    if (has_head_ && c_.projects_embeddings()) all.push_back(&project_out_);
    for (int64_t l = first_layer_; l < end_layer_; ++l)
      for (const LinearLayer* linear : blocks_->linears(l)) all.push_back(linear);
    return all;
  }
  double stem_flops(bool backward) const {
    return has_stem_ && c_.projects_embeddings() ? linear_flops({&project_in_}, rows(), backward) : 0.0;
  }

  // After the blocks (the head unit acquired): the final norm and project_out, where the family
  // has them, into the buffers head_input() returns.
  void head_input_forward(const DropoutContext& dropout) {
    const int64_t n = rows();
    Tensor input = residual(c_.num_hidden_layers);  // [N, C], then [N, E] after project_out
    if (c_.final_norm) {
      Tensor normed = matrix(final_ln_, n, c_.hidden_size);
      time_module(backend_, timer(), "norm", final_norm_.flops(n), [&] { final_norm_.forward(backend_, normed, input, final_saved_); });
      input = normed;
    }
    if (c_.projects_embeddings()) {
      Tensor projected = matrix(projected_, n, c_.embed_dim());
      time_module(backend_, timer(), "head", linear_flops({&project_out_}, n, false),
                  [&] { project_out_.forward(backend_, projected, input, project_out_saved_, dropout); });
    }
  }

  // int32 [count] on the device: first, first + 1, ... (a generation step's absolute positions).
  Tensor absolute_positions(int64_t first, int64_t count) {
    std::vector<int32_t> host(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) host[static_cast<size_t>(i)] = static_cast<int32_t>(first + i);
    ensure_buffer(absolute_positions_, backend_, count, DType::I32);
    Tensor positions = absolute_positions_.view(DType::I32, {count});
    backend_.copy(positions, Tensor(host.data(), DType::I32, {count}));
    return positions;
  }

  // The LM head's input [N, E] after forward: the last block's output, after the final norm and
  // project_out where the family has them.
  Tensor head_input() {
    const int64_t n = rows();
    if (c_.projects_embeddings()) return matrix(projected_, n, c_.embed_dim());
    return c_.final_norm ? matrix(final_ln_, n, c_.hidden_size) : residual(c_.num_hidden_layers);
  }

  // dlogits [count, V] of the token rows [first, first + count): row b's cross-entropy gradient
  // times grad_scale * row_weights[b] (a row weighted 0 gets zeros: the op reads a 0 scale as
  // "no gradient" and would leave the logits); its loss goes to a scratch sum, unused.
  void weighted_dlogits(const BatchTensors& batch, const std::vector<float>& row_weights, float grad_scale,
                        int64_t first, int64_t count, Tensor dlogits) {
    ZT_CHECK(static_cast<int64_t>(row_weights.size()) == batch.batch, "CausalLM::backward: ", row_weights.size(),
             " row weights for a batch of ", batch.batch, " rows");
    if (!loss_sum_.data()) loss_sum_ = Buffer(backend_, sizeof(double));
    for_each_row_part(batch.seq, first, count, [&](int64_t b, int64_t begin, int64_t part) {
      const float scale = grad_scale * row_weights[static_cast<size_t>(b)];
      Tensor rows = dlogits.rows(begin - first, part);  // [part, V]
      if (scale == 0.0f) {
        backend_.fill(rows, 0.0f);
        return;
      }
      backend_.cross_entropy_accumulate(rows, batch.targets.rows(begin, part), batch.loss_mask.rows(begin, part), scale,
                                        loss_sum_.view(DType::F64, {1}));
    });
  }

  // Runs the LM head over the rows chunk by chunk (head_chunk_rows_ each, the last one shorter):
  // logits[count, V] = head(head_input rows [first, first + count)) into the chunk buffer, then
  // work(first, count, logits, dropout of those rows). The head unit must be acquired.
  template <class Work>
  void for_each_head_chunk(const DropoutContext& dropout, Work&& work) {
    const int64_t n = rows();
    Tensor input = head_input();
    for (int64_t first = 0; first < n; first += head_chunk_rows_) {
      const int64_t count = std::min(head_chunk_rows_, n - first);
      DropoutContext chunk_dropout = dropout;  // LoRA dropout masks keyed by the chunk's row ids
      if (!dropout.row_ids.empty()) chunk_dropout.row_ids = dropout.row_ids.rows(first, count);
      Tensor logits = matrix(logits_, count, c_.vocab_size);
      head_.forward(backend_, logits, input.rows(first, count), head_saved_, chunk_dropout);
      work(first, count, logits, chunk_dropout);
    }
  }

  // The learned position table from row `offset` on: row p holds position p's embedding.
  Tensor position_rows(Tensor table) const {
    return table.rows(c_.position_offset, table.dim(0) - c_.position_offset);
  }

  // residual(0)[N,C] = embed_tokens(ids) [projected to C] [+ embed_positions(position + offset)].
  void stem_forward(const BatchTensors& batch, const BlockPass& pass, const DropoutContext& dropout) {
    const int64_t n = rows();
    Tensor x0 = residual(0);
    if (c_.projects_embeddings()) {
      Tensor embedded = matrix(embedded_, n, c_.embed_dim());
      backend_.embedding_forward(embedded, embed_, batch.input_ids);
      project_in_.forward(backend_, x0, embedded, project_in_saved_, dropout);
    } else {
      backend_.embedding_forward(x0, embed_, batch.input_ids);
    }
    if (c_.positions == PositionKind::Learned) {
      Tensor embedded_positions = matrix(position_embedded_, n, c_.hidden_size);
      backend_.embedding_forward(embedded_positions, position_rows(positions_), pass.positions);
      backend_.accumulate(x0, embedded_positions, 1.0f);
    }
  }

  // The stem's parameter gradients from d_residual[N,C] = d(residual(0)).
  void stem_backward(const BatchTensors& batch, const DropoutContext& dropout, const BlockPass& pass, Tensor d_residual) {
    const int64_t n = rows();
    if (c_.positions == PositionKind::Learned && !positions_grad_.empty())
      backend_.embedding_backward(position_rows(positions_grad_), d_residual, pass.positions);
    Tensor d_embedded = d_residual;
    if (c_.projects_embeddings()) {
      d_embedded = matrix(grad_projected_, n, c_.embed_dim());
      project_in_.backward(backend_, d_embedded, false, d_residual, matrix(embedded_, n, c_.embed_dim()), project_in_saved_,
                           dropout, pass.lora_dz, pass.lora_scratch);
    }
    if (!embed_grad_.empty()) backend_.embedding_backward(embed_grad_, d_embedded, batch.input_ids);
  }

  // Sizes every activation buffer for B x T (grows only; steady state allocates nothing).
  void reserve(int64_t batch, int64_t seq) {
    const bool new_shape = batch != batch_ || seq != seq_;
    batch_ = batch;
    seq_ = seq;
    const int64_t n = rows(), hidden = c_.hidden_size, embed = c_.embed_dim();
    for (Buffer& buffer : residual_) ensure_buffer(buffer, backend_, n * hidden, act_);
    if (offloading_) {
      backend_.synchronize();  // no transfer may still use a host buffer that grows
      for (auto& transfer : transfers_) transfer.reset();
      for (int64_t i = 0; i <= c_.num_hidden_layers; ++i)
        if (evicted(i)) ensure_buffer(host_residual_[static_cast<size_t>(i)], *host_, n * hidden, act_);
    }
    for (auto& saved : saved_) blocks_->reserve(*saved, batch, seq);
    const bool backward = !options_.forward_only;  // the gradients' buffers
    if (backward)
      for (Buffer* buffer : {&grad_residual_, &recompute_out_}) ensure_buffer(*buffer, backend_, n * hidden, act_);
    if (has_head_ && c_.final_norm) {
      ensure_buffer(final_ln_, backend_, n * hidden, act_);
      if (backward) ensure_buffer(grad_ln_, backend_, n * hidden, act_);
      final_norm_.ensure_saved(backend_, final_saved_, n);
    }
    if (c_.projects_embeddings()) {
      for (Buffer* buffer : {&embedded_, &projected_}) ensure_buffer(*buffer, backend_, n * embed, act_);
      if (backward) ensure_buffer(grad_projected_, backend_, n * embed, act_);
      if (has_stem_) project_in_.ensure_saved(backend_, project_in_saved_, n);
      if (has_head_) project_out_.ensure_saved(backend_, project_out_saved_, n);
    }
    if (c_.positions == PositionKind::Learned) ensure_buffer(position_embedded_, backend_, n * hidden, act_);
    if (new_shape || !row_positions_.data()) upload_row_positions();
    if (has_head_) reserve_head(n, embed);
    int64_t max_rank = 0, max_in = 0;
    for (const LinearLayer* linear : all_linears()) {
      max_rank = std::max(max_rank, linear->lora_rank());
      max_in = std::max(max_in, linear->in_features());
    }
    lora_dz_elements_ = std::max<int64_t>(1, n * max_rank);
    lora_scratch_elements_ = options_.lora_dropout > 0.0f ? std::max<int64_t>(1, n * max_in) : 1;
    ensure_buffer(lora_dz_, backend_, lora_dz_elements_, act_);
    ensure_buffer(lora_scratch_, backend_, lora_scratch_elements_, act_);
  }
  // The head's chunk size and its buffers for N rows.
  void reserve_head(int64_t n, int64_t embed) {
    const int64_t chunks = (c_.vocab_size + embed - 1) / embed;  // automatic: ceil(V / E) chunks
    // ... of at least kMinHeadChunkRows rows: each chunk adds dlogits^T x into the head's [V, E]
    // weight gradient, a GEMM whose depth is the chunk's rows, so a shallow chunk reads and writes
    // all of dW for little work (a hidden-512 LLaMA at vocab 32000 got 17-row chunks, and its CPU
    // step took twice as long as with one chunk; 256 rows are within noise of one).
    const int64_t automatic = std::max((n + chunks - 1) / chunks, std::min(n, kMinHeadChunkRows));
    head_chunk_rows_ = std::max<int64_t>(1, options_.head_chunk_rows > 0 ? std::min(options_.head_chunk_rows, n) : automatic);
    head_.ensure_saved(backend_, head_saved_, head_chunk_rows_);
    ensure_buffer(logits_, backend_, head_chunk_rows_ * c_.vocab_size, act_);
  }
  // The positions of a batch without its own (one sample per row) [B*T]: t for token (b, t).
  // Batches are right-padded, so a sample's tokens sit at t = 0..len-1 (HF's positions from the
  // attention mask); rows past a sample's end are padding, which nothing real attends to and
  // which has no target.
  void upload_row_positions() {
    std::vector<int32_t> host(static_cast<size_t>(rows()));  // [B*T]
    for (int64_t b = 0; b < batch_; ++b)
      for (int64_t t = 0; t < seq_; ++t) host[static_cast<size_t>(b * seq_ + t)] = static_cast<int32_t>(t);
    ensure_buffer(row_positions_, backend_, rows(), DType::I32);
    backend_.copy(row_positions_.view(DType::I32, {rows()}), Tensor(host.data(), DType::I32, {rows()}));
  }

  ModelConfig c_;
  Backend& backend_;
  ModelOptions options_;
  DType act_;  // the compute dtype: activations, their gradients and the parameters the model reads
  Tensor embed_, embed_grad_;          // [V, E]
  Tensor positions_, positions_grad_;  // [P + offset, C] (learned positions)
  LinearLayer project_in_;             // [C, E] (E != C)
  LinearLayer project_out_;            // [E, C]
  NormLayer final_norm_;               // [C]
  LinearLayer head_;                   // [V, E] (the token table when tied)
  std::unique_ptr<DecoderBlocks> blocks_;
  // The pipeline stage's share (set_stage_units): the whole model unless a stage.
  int first_unit_ = 0;
  int unit_shift_ = 0;  // the model's unit u is the store's u - unit_shift_
  bool has_stem_ = true, has_head_ = true;
  int64_t first_layer_ = 0, end_layer_ = 0;  // blocks [first_layer_, end_layer_)

  int64_t batch_ = 0, seq_ = 0;
  std::vector<Buffer> residual_;                 // L+1 x [N, C]: the stem's output, then each block's (3 when offloading,
                                                 // 2 forward-only)
  static constexpr int64_t kResidentResiduals = 3;  // device slots when offloading: in, out, and one in flight
  static constexpr int64_t kForwardOnlyResiduals = 2;  // forward-only: a block's input and its output
  bool offloading_ = false;
  std::unique_ptr<Backend> host_;                 // pinned host memory of the backend
  std::vector<Buffer> host_residual_;             // L+1 x [N, C] on the host (the evicted ones only)
  std::vector<std::unique_ptr<BackendEvent>> transfers_;  // L+1: the pending copy of residual(i), if any
  std::vector<std::unique_ptr<BlockSaved>> saved_;  // L blocks, or 1 shared when checkpointing
  Buffer embedded_, projected_, grad_projected_;  // [N, E]: token rows before project_in; project_out's output; grads
  Buffer position_embedded_;                      // [N, C]: position rows
  Buffer row_positions_;                          // int32 [N]: t, for batches without positions
  Buffer absolute_positions_;                     // int32 [T]: a generation step's positions
  LoraSaved project_in_saved_, project_out_saved_, head_saved_;
  Buffer final_ln_;                               // [N, C]
  NormSaved final_saved_;                         // [N]
  Buffer logits_;                                 // [chunk, V]: one chunk's logits, then its dlogits
  Buffer whole_logits_;                           // [N, V], only for keep_logits (--dump-step0)
  DropoutContext forward_dropout_;                // forward's, for loss()
  int64_t head_chunk_rows_ = 1;                   // rows per LM-head chunk for the current B x T
  Buffer grad_residual_, grad_ln_, recompute_out_;  // [N, C]
  Buffer lora_dz_, lora_scratch_;                 // [N, r_max], [N, in_max]
  Buffer loss_sum_;                               // fp64 [1]: backward's returned sum; weighted rows' scratch
  Buffer row_sums_;                               // fp64 [B]: row_losses' sums
  std::unique_ptr<Backend> row_host_;             // host memory for the queued row sums
  Buffer row_sums_host_[2];                       // fp64 [B] each: two queued results at a time
  uint64_t row_slot_generation_[2] = {0, 0};      // bumped when a slot is written again
  uint64_t row_queued_ = 0;
  int64_t lora_dz_elements_ = 1, lora_scratch_elements_ = 1;
};

}  // namespace

std::unique_ptr<CausalLM> make_causal_lm(const ModelConfig& config, ParamStore& store, Backend& backend,
                                         const ModelOptions& options) {
  return std::make_unique<DecoderModel>(config, store, backend, options);
}

}  // namespace zt
