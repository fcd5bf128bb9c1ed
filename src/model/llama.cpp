// LLaMA (LlamaForCausalLM): embedding -> L x [RMSNorm -> attention (RoPE, GQA) -> residual ->
// RMSNorm -> SwiGLU MLP -> residual] -> RMSNorm -> untied head, with explicit forward and
// backward per block and optional activation checkpointing (recompute a block in backward).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "core/rng.h"
#include "model/causal_lm.h"

namespace zt {

namespace {

// Grows `buffer` to hold `elements` values of `dtype` (steady-state steps allocate nothing).
void ensure(Buffer& buffer, Backend& backend, int64_t elements, DType dtype) {
  size_t bytes = static_cast<size_t>(elements) * dtype_size(dtype);
  if (buffer.bytes() < bytes) buffer = Buffer(backend, bytes);
}

enum LlamaLinear { kQ, kK, kV, kO, kGate, kUp, kDown, kLinears };
const char* const kLinearPaths[kLinears] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                            "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
                                            "mlp.down_proj"};

struct LlamaBlock {
  Tensor input_norm, input_norm_grad;  // [C]
  Tensor post_norm, post_norm_grad;    // [C]
  LinearLayer linear[kLinears];
};

// What one block's forward keeps for its backward (all rows N = B*T). Activations are in the
// compute dtype; the norm and attention statistics (rstd, lse) in fp32.
struct BlockActivations {
  Buffer ln1, rstd1;        // [N, C], [N]
  Buffer q, k, v;           // [N, H*D], [N, Hkv*D], [N, Hkv*D]  (q, k after RoPE)
  Buffer att, lse;          // [N, H*D], [B, H, T]
  Buffer mid;               // [N, C]  x + o_proj(att)
  Buffer ln2, rstd2;        // [N, C], [N]
  Buffer gate, up, hidden;  // [N, F] each; hidden = silu(gate) * up
  LoraSaved lora[kLinears];
};

class LlamaModel final : public CausalLM {
 public:
  LlamaModel(const ModelConfig& config, ParamStore& store, Backend& backend, const ModelOptions& options)
      : c_(config), backend_(backend), options_(options), act_(store.param_dtype()) {
    embed_ = store.param("model.embed_tokens.weight");
    embed_grad_ = store.grad("model.embed_tokens.weight");
    final_norm_ = store.param("model.norm.weight");
    final_norm_grad_ = store.grad("model.norm.weight");
    ZT_CHECK(!c_.tie_word_embeddings, c_.path, ": tie_word_embeddings=true is not supported for llama yet");
    head_ = LinearLayer(store, "lm_head", options.lora_scaling, options.lora_dropout, 0);
    for (int64_t l = 0; l < c_.num_hidden_layers; ++l) {
      const std::string prefix = cat("model.layers.", l, ".");
      LlamaBlock block;
      block.input_norm = store.param(prefix + "input_layernorm.weight");
      block.input_norm_grad = store.grad(prefix + "input_layernorm.weight");
      block.post_norm = store.param(prefix + "post_attention_layernorm.weight");
      block.post_norm_grad = store.grad(prefix + "post_attention_layernorm.weight");
      for (int i = 0; i < kLinears; ++i) {
        uint32_t stream = rng_stream(RngPurpose::LoraDropout, static_cast<uint32_t>(l * 16 + i + 1));
        block.linear[i] = LinearLayer(store, prefix + kLinearPaths[i], options.lora_scaling, options.lora_dropout, stream);
      }
      blocks_.push_back(std::move(block));
    }
    // inv_freq[i] = 1 / theta^(2i/D) / linear_factor, computed in fp32 as transformers does.
    const int64_t half = c_.head_dim / 2;
    std::vector<float> inv_freq(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; ++i) {
      float exponent = static_cast<float>(2 * i) / static_cast<float>(c_.head_dim);
      inv_freq[static_cast<size_t>(i)] =
          1.0f / std::pow(static_cast<float>(c_.rope_theta), exponent) / static_cast<float>(c_.rope_linear_factor);
    }
    inv_freq_ = Buffer(backend, static_cast<size_t>(half) * sizeof(float));
    backend.copy(inv_freq_.view(DType::F32, {half}), Tensor(inv_freq.data(), DType::F32, {half}));
    activations_.resize(options.activation_checkpointing ? 1 : static_cast<size_t>(c_.num_hidden_layers));
    residual_.resize(static_cast<size_t>(c_.num_hidden_layers + 1));
  }

  Tensor forward(const BatchTensors& batch, const DropoutContext& dropout) override {
    reserve(batch.batch, batch.seq);
    const int64_t n = rows();
    hooks().acquire(kEmbedUnit, UnitUse::Forward);
    timed("embedding", 0.0, [&] { backend_.embedding_forward(residual(0), embed_, batch.input_ids); });
    hooks().release(kEmbedUnit);
    for (int64_t l = 0; l < c_.num_hidden_layers; ++l) {
      hooks().acquire(block_unit(l), UnitUse::Forward);
      block_forward(l, residual(l), block_activations(l), residual(l + 1), dropout);
      hooks().release(block_unit(l));
    }
    hooks().acquire(head_unit(), UnitUse::Forward);
    timed("norm", norm_flops(), [&] {
      backend_.rmsnorm_forward(matrix(final_ln_, n, c_.hidden_size), final_rstd_.view(DType::F32, {n}),
                               residual(c_.num_hidden_layers), final_norm_, static_cast<float>(c_.norm_eps));
    });
    Tensor logits = matrix(logits_, n, c_.vocab_size);
    timed("head", 2.0 * static_cast<double>(n) * head_.macs_per_token(),
          [&] { head_.forward(backend_, logits, matrix(final_ln_, n, c_.hidden_size), head_saved_, dropout); });
    hooks().release(head_unit());
    return logits;
  }

  double loss(const BatchTensors& batch) override {
    return backend_.cross_entropy(matrix(logits_, rows(), c_.vocab_size), batch.targets, batch.loss_mask, 0.0f);
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
    const int64_t n = rows(), hidden = c_.hidden_size;
    Tensor dlogits = matrix(logits_, n, c_.vocab_size);
    Tensor d_final_ln = matrix(grad_ln_, n, hidden);
    hooks().acquire(head_unit(), UnitUse::Backward);
    timed("head", 2.0 * static_cast<double>(n) * (head_.macs_per_token() + head_.trainable_macs_per_token()), [&] {
      backend_.cross_entropy_accumulate(dlogits, batch.targets, batch.loss_mask, grad_scale, loss_sum);
      head_.backward(backend_, d_final_ln, false, dlogits, matrix(final_ln_, n, hidden), head_saved_, dropout,
                     lora_dz(), lora_scratch());
    });
    Tensor d_residual = matrix(grad_residual_, n, hidden);  // gradient of the residual stream
    timed("norm", 2.0 * norm_flops(), [&] {
      backend_.rmsnorm_backward(d_residual, final_norm_grad_, d_final_ln, residual(c_.num_hidden_layers), final_norm_,
                                final_rstd_.view(DType::F32, {n}));
    });
    hooks().gradients_ready(head_unit());
    hooks().release(head_unit());
    for (int64_t l = c_.num_hidden_layers - 1; l >= 0; --l) {
      hooks().acquire(block_unit(l), UnitUse::Backward);
      if (options_.activation_checkpointing)  // recompute this block's forward from its saved input
        block_forward(l, residual(l), block_activations(l), matrix(recompute_out_, n, hidden), dropout);
      block_backward(l, residual(l), block_activations(l), d_residual, dropout);
      hooks().gradients_ready(block_unit(l));
      hooks().release(block_unit(l));
    }
    hooks().acquire(kEmbedUnit, UnitUse::GradientOnly);
    if (!embed_grad_.empty())
      timed("embedding", 0.0, [&] { backend_.embedding_backward(embed_grad_, d_residual, batch.input_ids); });
    hooks().gradients_ready(kEmbedUnit);
    hooks().release(kEmbedUnit);
  }

  double forward_flops(int64_t batch, int64_t seq) const override {
    double macs = head_.macs_per_token();
    for (const LlamaBlock& block : blocks_)
      for (const LinearLayer& linear : block.linear) macs += linear.macs_per_token();
    // Attention: QK^T and PV, T*D multiply-adds per token and head each, halved by the causal mask.
    macs += 2.0 * static_cast<double>(seq * c_.num_attention_heads * c_.head_dim) / 2.0 *
            static_cast<double>(c_.num_hidden_layers);
    return 2.0 * static_cast<double>(batch * seq) * macs;
  }

  double trainable_weight_flops(int64_t batch, int64_t seq) const override {
    double macs = head_.trainable_macs_per_token();
    for (const LlamaBlock& block : blocks_)
      for (const LinearLayer& linear : block.linear) macs += linear.trainable_macs_per_token();
    return 2.0 * static_cast<double>(batch * seq) * macs;
  }

 private:
  int64_t rows() const { return batch_ * seq_; }
  // An activation buffer seen as [rows, cols] of the compute dtype.
  Tensor matrix(const Buffer& buffer, int64_t rows, int64_t cols) const { return buffer.view(act_, {rows, cols}); }
  // Units (param_store.h): 0 = embedding, l+1 = block l, L+1 = final norm + head.
  static constexpr int kEmbedUnit = 0;
  static int block_unit(int64_t layer) { return static_cast<int>(layer) + 1; }
  int head_unit() const { return static_cast<int>(c_.num_hidden_layers) + 1; }
  Tensor residual(int64_t index) { return matrix(residual_[static_cast<size_t>(index)], rows(), c_.hidden_size); }
  BlockActivations& block_activations(int64_t layer) {
    return activations_[options_.activation_checkpointing ? 0 : static_cast<size_t>(layer)];
  }
  Tensor lora_dz() { return lora_dz_.view(act_, {lora_dz_elements_}); }
  Tensor lora_scratch() { return lora_scratch_.view(act_, {lora_scratch_elements_}); }

  // Sizes every activation buffer for B x T (grows only; steady state allocates nothing).
  void reserve(int64_t batch, int64_t seq) {
    batch_ = batch;
    seq_ = seq;
    const int64_t n = rows(), hidden = c_.hidden_size, ffn = c_.intermediate_size;
    const int64_t q_width = c_.num_attention_heads * c_.head_dim, kv_width = c_.num_key_value_heads * c_.head_dim;
    for (Buffer& buffer : residual_) ensure(buffer, backend_, n * hidden, act_);
    for (BlockActivations& a : activations_) {
      for (Buffer* buffer : {&a.ln1, &a.mid, &a.ln2}) ensure(*buffer, backend_, n * hidden, act_);
      for (Buffer* buffer : {&a.rstd1, &a.rstd2}) ensure(*buffer, backend_, n, DType::F32);
      for (Buffer* buffer : {&a.q, &a.att}) ensure(*buffer, backend_, n * q_width, act_);
      for (Buffer* buffer : {&a.k, &a.v}) ensure(*buffer, backend_, n * kv_width, act_);
      ensure(a.lse, backend_, n * c_.num_attention_heads, DType::F32);
      for (Buffer* buffer : {&a.gate, &a.up, &a.hidden}) ensure(*buffer, backend_, n * ffn, act_);
      for (int i = 0; i < kLinears; ++i) blocks_.front().linear[i].ensure_saved(backend_, a.lora[i], n);
    }
    head_.ensure_saved(backend_, head_saved_, n);
    for (Buffer* buffer : {&final_ln_, &grad_ln_, &grad_residual_, &grad_temp_, &recompute_out_})
      ensure(*buffer, backend_, n * hidden, act_);
    ensure(final_rstd_, backend_, n, DType::F32);
    ensure(logits_, backend_, n * c_.vocab_size, act_);
    for (Buffer* buffer : {&grad_q_, &grad_att_}) ensure(*buffer, backend_, n * q_width, act_);
    for (Buffer* buffer : {&grad_k_, &grad_v_}) ensure(*buffer, backend_, n * kv_width, act_);
    for (Buffer* buffer : {&grad_gate_, &grad_up_, &grad_hidden_}) ensure(*buffer, backend_, n * ffn, act_);
    int64_t max_rank = head_.lora_rank(), max_in = head_.in_features();
    for (const LinearLayer& linear : blocks_.front().linear) {
      max_rank = std::max(max_rank, linear.lora_rank());
      max_in = std::max(max_in, linear.in_features());
    }
    lora_dz_elements_ = std::max<int64_t>(1, n * max_rank);
    lora_scratch_elements_ = options_.lora_dropout > 0.0f ? n * max_in : 1;
    ensure(lora_dz_, backend_, lora_dz_elements_, act_);
    ensure(lora_scratch_, backend_, lora_scratch_elements_, act_);
  }

  // out[N,C] = block(x[N,C]); saves what backward needs in `a`.
  void block_forward(int64_t layer, Tensor x, BlockActivations& a, Tensor out, const DropoutContext& dropout) {
    const LlamaBlock& block = blocks_[static_cast<size_t>(layer)];
    const int64_t n = rows(), hidden = c_.hidden_size, ffn = c_.intermediate_size, d = c_.head_dim;
    const int64_t heads = c_.num_attention_heads, kv_heads = c_.num_key_value_heads;
    const float eps = static_cast<float>(c_.norm_eps);
    Tensor ln1 = matrix(a.ln1, n, hidden), q = matrix(a.q, n, heads * d), k = matrix(a.k, n, kv_heads * d),
           v = matrix(a.v, n, kv_heads * d), att = matrix(a.att, n, heads * d), mid = matrix(a.mid, n, hidden),
           ln2 = matrix(a.ln2, n, hidden), gate = matrix(a.gate, n, ffn), up = matrix(a.up, n, ffn),
           hidden_act = matrix(a.hidden, n, ffn);
    Tensor inv_freq = inv_freq_.view(DType::F32, {d / 2});
    // Attention branch: mid = x + o_proj(attention(rope(q_proj(ln1)), rope(k_proj(ln1)), v_proj(ln1)))
    timed("norm", norm_flops(), [&] { backend_.rmsnorm_forward(ln1, a.rstd1.view(DType::F32, {n}), x, block.input_norm, eps); });
    timed("attention", attention_flops(block, false), [&] {
    block.linear[kQ].forward(backend_, q, ln1, a.lora[kQ], dropout);
    block.linear[kK].forward(backend_, k, ln1, a.lora[kK], dropout);
    block.linear[kV].forward(backend_, v, ln1, a.lora[kV], dropout);
    backend_.rope_forward(q.reshaped({batch_, seq_, heads, d}), inv_freq);
    backend_.rope_forward(k.reshaped({batch_, seq_, kv_heads, d}), inv_freq);
    backend_.attention_forward(att.reshaped({batch_, seq_, heads, d}), a.lse.view(DType::F32, {batch_, heads, seq_}),
                               q.reshaped({batch_, seq_, heads, d}), k.reshaped({batch_, seq_, kv_heads, d}),
                               v.reshaped({batch_, seq_, kv_heads, d}), attention_scale());
    block.linear[kO].forward(backend_, mid, att, a.lora[kO], dropout);
    backend_.accumulate(mid, x, 1.0f);
    });
    // MLP branch: out = mid + down_proj(silu(gate_proj(ln2)) * up_proj(ln2))
    timed("norm", norm_flops(), [&] { backend_.rmsnorm_forward(ln2, a.rstd2.view(DType::F32, {n}), mid, block.post_norm, eps); });
    timed("mlp", mlp_flops(block, false), [&] {
    block.linear[kGate].forward(backend_, gate, ln2, a.lora[kGate], dropout);
    block.linear[kUp].forward(backend_, up, ln2, a.lora[kUp], dropout);
    backend_.swiglu_forward(hidden_act, gate, up);
    block.linear[kDown].forward(backend_, out, hidden_act, a.lora[kDown], dropout);
    backend_.accumulate(out, mid, 1.0f);
    });
  }

  // On entry d_residual[N,C] is the gradient of the block's output; on exit of its input x.
  void block_backward(int64_t layer, Tensor x, BlockActivations& a, Tensor d_residual, const DropoutContext& dropout) {
    const LlamaBlock& block = blocks_[static_cast<size_t>(layer)];
    const int64_t n = rows(), hidden = c_.hidden_size, ffn = c_.intermediate_size, d = c_.head_dim;
    const int64_t heads = c_.num_attention_heads, kv_heads = c_.num_key_value_heads;
    Tensor ln1 = matrix(a.ln1, n, hidden), q = matrix(a.q, n, heads * d), k = matrix(a.k, n, kv_heads * d),
           v = matrix(a.v, n, kv_heads * d), att = matrix(a.att, n, heads * d), mid = matrix(a.mid, n, hidden),
           ln2 = matrix(a.ln2, n, hidden), gate = matrix(a.gate, n, ffn), up = matrix(a.up, n, ffn),
           hidden_act = matrix(a.hidden, n, ffn);
    Tensor d_ln = matrix(grad_ln_, n, hidden), d_temp = matrix(grad_temp_, n, hidden);
    Tensor d_hidden = matrix(grad_hidden_, n, ffn), d_gate = matrix(grad_gate_, n, ffn), d_up = matrix(grad_up_, n, ffn);
    Tensor d_att = matrix(grad_att_, n, heads * d), d_q = matrix(grad_q_, n, heads * d);
    Tensor d_k = matrix(grad_k_, n, kv_heads * d), d_v = matrix(grad_v_, n, kv_heads * d);
    Tensor inv_freq = inv_freq_.view(DType::F32, {d / 2});
    // MLP branch (out = mid + down(hidden)): d_residual flows to mid unchanged, plus the norm's share.
    timed("mlp", mlp_flops(block, true), [&] {
    block.linear[kDown].backward(backend_, d_hidden, false, d_residual, hidden_act, a.lora[kDown], dropout, lora_dz(), lora_scratch());
    backend_.swiglu_backward(d_gate, d_up, d_hidden, gate, up);
    block.linear[kGate].backward(backend_, d_ln, false, d_gate, ln2, a.lora[kGate], dropout, lora_dz(), lora_scratch());
    block.linear[kUp].backward(backend_, d_ln, true, d_up, ln2, a.lora[kUp], dropout, lora_dz(), lora_scratch());
    });
    timed("norm", 2.0 * norm_flops(), [&] {
      backend_.rmsnorm_backward(d_temp, block.post_norm_grad, d_ln, mid, block.post_norm, a.rstd2.view(DType::F32, {n}));
      backend_.accumulate(d_residual, d_temp, 1.0f);  // now d(mid)
    });
    // Attention branch (mid = x + o_proj(att)).
    timed("attention", attention_flops(block, true), [&] {
    block.linear[kO].backward(backend_, d_att, false, d_residual, att, a.lora[kO], dropout, lora_dz(), lora_scratch());
    backend_.attention_backward(d_q.reshaped({batch_, seq_, heads, d}), d_k.reshaped({batch_, seq_, kv_heads, d}),
                                d_v.reshaped({batch_, seq_, kv_heads, d}), d_att.reshaped({batch_, seq_, heads, d}),
                                q.reshaped({batch_, seq_, heads, d}), k.reshaped({batch_, seq_, kv_heads, d}),
                                v.reshaped({batch_, seq_, kv_heads, d}), att.reshaped({batch_, seq_, heads, d}),
                                a.lse.view(DType::F32, {batch_, heads, seq_}), attention_scale());
    backend_.rope_backward(d_q.reshaped({batch_, seq_, heads, d}), inv_freq);
    backend_.rope_backward(d_k.reshaped({batch_, seq_, kv_heads, d}), inv_freq);
    block.linear[kQ].backward(backend_, d_ln, false, d_q, ln1, a.lora[kQ], dropout, lora_dz(), lora_scratch());
    block.linear[kK].backward(backend_, d_ln, true, d_k, ln1, a.lora[kK], dropout, lora_dz(), lora_scratch());
    block.linear[kV].backward(backend_, d_ln, true, d_v, ln1, a.lora[kV], dropout, lora_dz(), lora_scratch());
    });
    timed("norm", 2.0 * norm_flops(), [&] {
      backend_.rmsnorm_backward(d_temp, block.input_norm_grad, d_ln, x, block.input_norm, a.rstd1.view(DType::F32, {n}));
      backend_.accumulate(d_residual, d_temp, 1.0f);  // now d(x)
    });
  }

  // --profile-step: runs `work`, and when a timer is set reports its wall time (device
  // synchronised before and after) and FLOPs under `module`.
  template <class Work>
  void timed(const char* module, double flops, Work&& work) {
    if (!timer()) {
      work();
      return;
    }
    backend_.synchronize();
    const auto start = std::chrono::steady_clock::now();
    work();
    backend_.synchronize();
    timer()->record(module, flops, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  // FLOPs of one forward (backward: false) or backward (true) of a block's branches for the
  // current B x T: GEMMs 2 per multiply-add (backward: input gradients + trainable weight
  // gradients), causal attention half of T x T, its backward twice the forward's.
  double linear_flops(const LlamaBlock& block, std::initializer_list<int> linears, bool backward) const {
    double macs = 0.0;
    for (int i : linears)
      macs += block.linear[i].macs_per_token() + (backward ? block.linear[i].trainable_macs_per_token() : 0.0);
    return 2.0 * static_cast<double>(rows()) * macs;
  }
  double attention_flops(const LlamaBlock& block, bool backward) const {
    const double core = 2.0 * static_cast<double>(batch_ * seq_ * seq_ * c_.num_attention_heads * c_.head_dim);
    return linear_flops(block, {kQ, kK, kV, kO}, backward) + (backward ? 2.0 : 1.0) * core;
  }
  double mlp_flops(const LlamaBlock& block, bool backward) const {
    return linear_flops(block, {kGate, kUp, kDown}, backward);
  }
  double norm_flops() const { return 4.0 * static_cast<double>(rows() * c_.hidden_size); }  // square, sum, scale, weight

  float attention_scale() const { return 1.0f / std::sqrt(static_cast<float>(c_.head_dim)); }

  ModelConfig c_;
  Backend& backend_;
  ModelOptions options_;
  DType act_;  // the compute dtype: activations, their gradients and the parameters the model reads
  Tensor embed_, embed_grad_;            // [V, C]
  Tensor final_norm_, final_norm_grad_;  // [C]
  LinearLayer head_;                     // [V, C]
  std::vector<LlamaBlock> blocks_;
  Buffer inv_freq_;                      // [D/2]

  int64_t batch_ = 0, seq_ = 0;
  std::vector<Buffer> residual_;               // L+1 x [N, C]: embeddings, then each block's output
  std::vector<BlockActivations> activations_;  // L blocks, or 1 shared when checkpointing
  LoraSaved head_saved_;
  Buffer final_ln_, final_rstd_, logits_;      // [N, C], [N] fp32, [N, V] (logits become dlogits)
  Buffer grad_residual_, grad_ln_, grad_temp_, recompute_out_;  // [N, C]
  Buffer grad_q_, grad_att_, grad_k_, grad_v_;                  // [N, H*D], [N, Hkv*D]
  Buffer grad_gate_, grad_up_, grad_hidden_;                    // [N, F]
  Buffer lora_dz_, lora_scratch_;                               // [N, r_max], [N, in_max]
  Buffer loss_sum_;                                             // fp64 [1]: backward's returned sum
  int64_t lora_dz_elements_ = 1, lora_scratch_elements_ = 1;
};

}  // namespace

std::unique_ptr<CausalLM> make_causal_lm(const ModelConfig& config, ParamStore& store, Backend& backend,
                                         const ModelOptions& options) {
  if (config.model_type == "llama") return std::make_unique<LlamaModel>(config, store, backend, options);
  fail(config.path, ": model_type '", config.model_type, "' is not implemented (supported: llama)");
}

}  // namespace zt
