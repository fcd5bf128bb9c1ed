// OPT (OPTForCausalLM): its config keys, parameter list and block. The decoder skeleton
// (decoder.cpp) adds the learned positions (offset 2), project_in/out when word_embed_proj_dim
// differs from hidden_size, the final LayerNorm and the tied head. The block, pre-LN
// (do_layer_norm_before, every OPT but 350m):
//   mid = x + dropout(out_proj(attention(q, k, v of LN1(x))));  out = mid + dropout(fc2(relu(fc1(LN2(mid)))))
// post-LN (opt-350m):
//   a = x + dropout(out_proj(attention(q, k, v of x)));  mid = LN1(a)
//   b = mid + dropout(fc2(relu(fc1(mid))));              out = LN2(b)
// LayerNorms with bias (eps 1e-5, nn.LayerNorm's), ReLU, biases on every projection
// (enable_bias), no GQA, no RoPE; dropout is config "dropout" in training, the identity in
// evaluation.
#include <cmath>

#include "core/rng.h"
#include "model/architecture.h"
#include "model/attention_bias.h"
#include "model/norm.h"

namespace zt {

namespace {

void parse_opt(const ConfigReader& reader, ModelConfig& config) {  // transformers.OPTConfig (4.40)
  config.vocab_size = reader.positive_integer("vocab_size", 50272);
  config.hidden_size = reader.positive_integer("hidden_size", 768);
  config.intermediate_size = reader.positive_integer("ffn_dim", 3072);
  config.num_hidden_layers = reader.positive_integer("num_hidden_layers", 12);
  config.num_attention_heads = reader.positive_integer("num_attention_heads", 12);
  config.num_key_value_heads = config.num_attention_heads;  // OPT has no GQA
  if (config.hidden_size % config.num_attention_heads != 0)
    reader.bad("num_attention_heads", cat("hidden_size = ", config.hidden_size, " is not divisible by it"));
  config.head_dim = config.hidden_size / config.num_attention_heads;
  config.max_position_embeddings = reader.positive_integer("max_position_embeddings", 2048);
  config.positions = PositionKind::Learned;
  config.position_offset = 2;  // OPTLearnedPositionalEmbedding: row = position + 2
  config.norm = NormKind::LayerNorm;
  config.norm_eps = 1e-5;  // nn.LayerNorm's default; OPTConfig has no key for it
  config.norm_affine = reader.boolean("layer_norm_elementwise_affine", true);
  config.pre_norm = reader.boolean("do_layer_norm_before", true);
  // OPTDecoder keeps a final LayerNorm only for pre-LN models (and not with _remove_final_layer_norm).
  config.final_norm = config.pre_norm && !reader.boolean("_remove_final_layer_norm", false);
  config.word_embed_proj_dim = reader.positive_integer("word_embed_proj_dim", config.hidden_size);
  const bool bias = reader.boolean("enable_bias", true);
  config.qkv_bias = config.o_bias = config.mlp_bias = bias;

  const std::string act = reader.string("activation_function", "relu");
  if (act != "relu") reader.bad("activation_function", "OPT models in zerotune use 'relu'; this activation is not implemented");
  config.hidden_act = "relu";
  config.residual_dropout = reader.number("dropout", 0.1);
  if (!(config.residual_dropout >= 0.0 && config.residual_dropout < 1.0)) reader.bad("dropout", "expected a probability in [0, 1)");
  // Randomness zerotune does not draw: dropout of attention probabilities, after the ReLU, and
  // whole layers skipped.
  for (const char* key : {"attention_dropout", "activation_dropout", "layerdrop"})
    if (reader.number(key, 0.0) != 0.0) reader.bad(key, "not implemented (use 0.0)");
  config.tie_word_embeddings = reader.boolean("tie_word_embeddings", true);  // PretrainedConfig's default
  config.initializer_range = reader.number("init_std", 0.02);
  if (config.initializer_range < 0.0) reader.bad("init_std", "expected a number >= 0");
  config.bos_token_id = first_id(reader.token_ids("bos_token_id", 2));
  config.eos_token_ids = reader.token_ids("eos_token_id", 2);
  config.eos_token_id = first_id(config.eos_token_ids);
  config.pad_token_id = first_id(reader.token_ids("pad_token_id", 1));
}

// HF OPTForCausalLM keys in state-dict order (OPTDecoder's modules in __init__ order: embed_tokens,
// embed_positions, project_out, project_in, final_layer_norm, layers; a layer's: k, v, q, out_proj,
// self_attn_layer_norm, fc1, fc2, final_layer_norm). Units: what comes before the blocks (0:
// token and position tables, project_in), block l (l+1), what comes after (L+1: final norm,
// project_out, the head, which reads unit 0 when tied).
std::vector<ParamSpec> opt_param_specs(const ModelConfig& c) {
  const int head_unit = static_cast<int>(c.num_hidden_layers) + 1;
  const int64_t hidden = c.hidden_size, embed = c.embed_dim();
  std::vector<ParamSpec> specs;
  auto norm = [&](const std::string& path, int layer, int unit) {
    if (!c.norm_affine) return;
    specs.push_back({path + ".weight", {hidden}, ParamRole::NormWeight, layer, "", unit, ""});
    specs.push_back({path + ".bias", {hidden}, ParamRole::Bias, layer, "", unit, ""});
  };
  specs.push_back({"model.decoder.embed_tokens.weight", {c.vocab_size, embed}, ParamRole::Embedding, -1, "embed_tokens", 0, ""});
  specs.push_back({"model.decoder.embed_positions.weight", {c.max_position_embeddings + c.position_offset, hidden},
                   ParamRole::Embedding, -1, "embed_positions", 0, ""});
  if (c.projects_embeddings()) {
    specs.push_back({"model.decoder.project_out.weight", {embed, hidden}, ParamRole::Linear, -1, "project_out", head_unit, ""});
    specs.push_back({"model.decoder.project_in.weight", {hidden, embed}, ParamRole::Linear, -1, "project_in", 0, ""});
  }
  if (c.final_norm) norm("model.decoder.final_layer_norm", -1, head_unit);
  for (int layer = 0; layer < c.num_hidden_layers; ++layer) {
    const std::string prefix = cat("model.decoder.layers.", layer, ".");
    const int unit = layer + 1;
    auto linear = [&](const std::string& module, int64_t out, int64_t in) {
      specs.push_back({prefix + module + ".weight", {out, in}, ParamRole::Linear, layer, module.substr(module.rfind('.') + 1), unit, ""});
      if (c.mlp_bias)
        specs.push_back({prefix + module + ".bias", {out}, ParamRole::Bias, layer, module.substr(module.rfind('.') + 1), unit, ""});
    };
    for (const char* projection : {"self_attn.k_proj", "self_attn.v_proj", "self_attn.q_proj", "self_attn.out_proj"})
      linear(projection, hidden, hidden);
    norm(prefix + "self_attn_layer_norm", layer, unit);
    linear("fc1", c.intermediate_size, hidden);
    linear("fc2", hidden, c.intermediate_size);
    norm(prefix + "final_layer_norm", layer, unit);
  }
  specs.push_back({"lm_head.weight", {c.vocab_size, embed}, ParamRole::Linear, -1, "lm_head", head_unit,
                   c.tie_word_embeddings ? "model.decoder.embed_tokens.weight" : ""});
  return specs;
}

enum OptLinear { kQ, kK, kV, kOut, kFc1, kFc2, kLinears };
const char* const kLinearPaths[kLinears] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                            "self_attn.out_proj", "fc1", "fc2"};

struct OptBlock {
  NormLayer attn_norm, mlp_norm;  // self_attn_layer_norm, final_layer_norm
  LinearLayer linear[kLinears];
  uint32_t attn_dropout_stream = 0, mlp_dropout_stream = 0;  // residual dropout masks
};

// What one block's forward keeps (N = B*T rows, compute dtype; statistics fp32).
struct OptSaved final : BlockSaved {
  Buffer ln1;              // [N, C] LN1(x) (pre-LN; unused post-LN, where q/k/v read x)
  NormSaved norm1, norm2;  // [N] each
  Buffer q, k, v, att;     // [N, C] each
  Buffer lse;              // [B, H, T]
  Buffer pre1;             // [N, C] post-LN: a = x + attention branch (LN1's input)
  Buffer mid;              // [N, C] the MLP branch's residual input
  Buffer ln2;              // [N, C] LN2(mid) (pre-LN; unused post-LN)
  Buffer h;                // [N, F] relu(fc1(.))
  Buffer pre2;             // [N, C] post-LN: b = mid + MLP branch (LN2's input)
  LoraSaved lora[kLinears];
};

class OptBlocks final : public DecoderBlocks {
 public:
  OptBlocks(const ModelConfig& config, const ParamStore& store, Backend& backend, const BlockOptions& options)
      : c_(config), backend_(backend), act_(store.param_dtype()) {
    first_layer_ = options.first_layer;
    const int64_t end_layer = options.end_layer < 0 ? c_.num_hidden_layers : options.end_layer;
    for (int64_t l = first_layer_; l < end_layer; ++l) {
      const std::string prefix = cat("model.decoder.layers.", l, ".");
      OptBlock block;
      block.attn_norm = NormLayer(store, backend, prefix + "self_attn_layer_norm", c_, c_.hidden_size);
      block.mlp_norm = NormLayer(store, backend, prefix + "final_layer_norm", c_, c_.hidden_size);
      for (int i = 0; i < kLinears; ++i) block.linear[i] = block_linear(store, prefix, kLinearPaths[i], options, l, i);
      block.linear[kV].defer_bias();  // added after the attention (model/attention_bias.h)
      // k_proj's bias adds q . b_k to every score of a query row: softmax ignores it, and its
      // gradient (the sum over keys of dK = the row sums of dS times q) is exactly zero. Left
      // out, it cannot leak the rounding of dS into dQ = dS K (a row of dS sums to zero only in
      // exact arithmetic): 6.3% of a gradient's norm on a tiny OPT with cuDNN on an H100.
      // (LLaMA-family keys are rotated after the bias, by position: there it matters.)
      block.linear[kK].defer_bias();
      block.attn_dropout_stream = rng_stream(RngPurpose::ModelDropout, static_cast<uint32_t>(l * 4 + 1));
      block.mlp_dropout_stream = rng_stream(RngPurpose::ModelDropout, static_cast<uint32_t>(l * 4 + 2));
      blocks_.push_back(std::move(block));
    }
  }

  std::unique_ptr<BlockSaved> make_saved() const override { return std::make_unique<OptSaved>(); }

  void reserve(BlockSaved& saved_base, int64_t batch, int64_t seq) override {
    OptSaved& a = static_cast<OptSaved&>(saved_base);
    const int64_t n = batch * seq, hidden = c_.hidden_size;
    for (Buffer* buffer : {&a.q, &a.k, &a.v, &a.att, &a.mid}) ensure_buffer(*buffer, backend_, n * hidden, act_);
    // The norms' inputs or outputs that backward reads: LN1(x), LN2(mid) pre-LN; a, b post-LN.
    ensure_buffer(c_.pre_norm ? a.ln1 : a.pre1, backend_, n * hidden, act_);
    ensure_buffer(c_.pre_norm ? a.ln2 : a.pre2, backend_, n * hidden, act_);
    ensure_buffer(a.h, backend_, n * c_.intermediate_size, act_);
    ensure_buffer(a.lse, backend_, n * c_.num_attention_heads, DType::F32);
    const OptBlock& first = blocks_.front();
    first.attn_norm.ensure_saved(backend_, a.norm1, n);
    first.mlp_norm.ensure_saved(backend_, a.norm2, n);
    for (int i = 0; i < kLinears; ++i) first.linear[i].ensure_saved(backend_, a.lora[i], n);
    for (Buffer* buffer : {&grad_att_, &grad_q_, &grad_k_, &grad_v_}) ensure_buffer(*buffer, backend_, n * hidden, act_);
    // d_ln only carries a pre-LN branch's input gradient to its norm (post-LN adds into d_residual);
    // d_branch needs its own buffer only where residual dropout masks it.
    if (c_.pre_norm) ensure_buffer(grad_ln_, backend_, n * hidden, act_);
    if (c_.residual_dropout > 0.0) ensure_buffer(grad_drop_, backend_, n * hidden, act_);
    ensure_buffer(grad_h_, backend_, n * c_.intermediate_size, act_);
  }

  std::vector<const LinearLayer*> linears(int64_t layer) const override {
    std::vector<const LinearLayer*> all;
    for (const LinearLayer& linear : blocks_[static_cast<size_t>(layer - first_layer_)].linear) all.push_back(&linear);
    return all;
  }

  void forward(int64_t layer, const BlockPass& pass, Tensor x, BlockSaved& saved, Tensor out) override {
    const auto [a, block, dropout, n, mid, h] = block_views(layer, pass, saved);
    const int64_t hidden = c_.hidden_size;
    // Attention branch. Pre-LN: mid = x + branch(LN1(x)); post-LN: mid = LN1(x + branch(x)).
    Tensor attn_in = x;
    if (c_.pre_norm) {
      attn_in = matrix(a.ln1, n, hidden);
      time_module(backend_, pass.timer, "norm", block.attn_norm.flops(n), [&] { block.attn_norm.forward(backend_, attn_in, x, a.norm1); });
    }
    Tensor attn_sum = c_.pre_norm ? mid : matrix(a.pre1, n, hidden);  // x + branch
    time_module(backend_, pass.timer, "attention", attention_flops(block, pass, false), [&] {
      attention(layer, block, pass, a, attn_in, attn_sum);
      residual_dropout(attn_sum, block.attn_dropout_stream, dropout);
      backend_.accumulate(attn_sum, x, 1.0f);
    });
    if (!c_.pre_norm)
      time_module(backend_, pass.timer, "norm", block.attn_norm.flops(n), [&] { block.attn_norm.forward(backend_, mid, attn_sum, a.norm1); });
    // MLP branch. Pre-LN: out = mid + fc2(relu(fc1(LN2(mid)))); post-LN: out = LN2(mid + fc2(relu(fc1(mid)))).
    Tensor mlp_in = mid;
    if (c_.pre_norm) {
      mlp_in = matrix(a.ln2, n, hidden);
      time_module(backend_, pass.timer, "norm", block.mlp_norm.flops(n), [&] { block.mlp_norm.forward(backend_, mlp_in, mid, a.norm2); });
    }
    Tensor mlp_sum = c_.pre_norm ? out : matrix(a.pre2, n, hidden);
    time_module(backend_, pass.timer, "mlp", mlp_flops(block, pass, false), [&] {
      block.linear[kFc1].forward(backend_, h, mlp_in, a.lora[kFc1], dropout);
      backend_.relu_forward(h, h);
      block.linear[kFc2].forward(backend_, mlp_sum, h, a.lora[kFc2], dropout);
      residual_dropout(mlp_sum, block.mlp_dropout_stream, dropout);
      backend_.accumulate(mlp_sum, mid, 1.0f);
    });
    if (!c_.pre_norm)
      time_module(backend_, pass.timer, "norm", block.mlp_norm.flops(n), [&] { block.mlp_norm.forward(backend_, out, mlp_sum, a.norm2); });
  }

  void backward(int64_t layer, const BlockPass& pass, Tensor x, BlockSaved& saved, Tensor d_residual) override {
    const auto [a, block, dropout, n, mid, h] = block_views(layer, pass, saved);
    const int64_t hidden = c_.hidden_size;
    Tensor d_ln = c_.pre_norm ? matrix(grad_ln_, n, hidden) : Tensor();  // [N, C] pre-LN only
    Tensor d_h = matrix(grad_h_, n, c_.intermediate_size);
    Tensor dz = pass.lora_dz, scratch = pass.lora_scratch;
    // MLP branch: d_residual is d(out) on entry and d(mid) after it.
    if (!c_.pre_norm)  // out = LN2(b): d(b)
      time_module(backend_, pass.timer, "norm", 2.0 * block.mlp_norm.flops(n), [&] {
        // In place: the norms read dy[c] before they write dx[c].
        block.mlp_norm.backward(backend_, d_residual, GradStore::Write, d_residual, matrix(a.pre2, n, hidden), a.norm2);
      });
    // Pre-LN: fc1's input gradient goes to d_ln, then through LN2 into d_residual. Post-LN: fc1's
    // input is mid itself, so its gradient adds straight into d_residual (the residual stream +=;
    // d_branch, which may be d_residual itself, is used up by fc2 before fc1 writes).
    Tensor mlp_in = c_.pre_norm ? matrix(a.ln2, n, hidden) : mid;
    time_module(backend_, pass.timer, "mlp", mlp_flops(block, pass, true), [&] {
      Tensor d_branch = residual_dropout_grad(d_residual, block.mlp_dropout_stream, dropout);
      block.linear[kFc2].backward(backend_, d_h, false, d_branch, h, a.lora[kFc2], dropout, dz, scratch);
      backend_.relu_backward(d_h, d_h, h);
      block.linear[kFc1].backward(backend_, c_.pre_norm ? d_ln : d_residual, !c_.pre_norm, d_h, mlp_in,
                                  a.lora[kFc1], dropout, dz, scratch);  // post-LN: now d(mid)
    });
    if (c_.pre_norm) {
      time_module(backend_, pass.timer, "norm", 2.0 * block.mlp_norm.flops(n), [&] {
        block.mlp_norm.backward(backend_, d_residual, GradStore::Add, d_ln, mid, a.norm2);  // now d(mid)
      });
    } else {
      time_module(backend_, pass.timer, "norm", 2.0 * block.attn_norm.flops(n), [&] {  // mid = LN1(a): d(a)
        block.attn_norm.backward(backend_, d_residual, GradStore::Write, d_residual, matrix(a.pre1, n, hidden),
                                 a.norm1);
      });
    }
    // Attention branch: d_residual is d(x + branch) here. Pre-LN: the branch's input gradient goes
    // to d_ln, then through LN1 into d_residual; post-LN: the branch reads x, so q/k/v add theirs
    // straight into d_residual (after out_proj has used d_branch up).
    Tensor attn_in = c_.pre_norm ? matrix(a.ln1, n, hidden) : x;
    time_module(backend_, pass.timer, "attention", attention_flops(block, pass, true), [&] {
      Tensor d_branch = residual_dropout_grad(d_residual, block.attn_dropout_stream, dropout);
      if (c_.pre_norm) attention_backward(block, pass, a, attn_in, d_branch, d_ln, GradStore::Write);
      else attention_backward(block, pass, a, attn_in, d_branch, d_residual, GradStore::Add);  // now d(x)
    });
    if (c_.pre_norm) {
      time_module(backend_, pass.timer, "norm", 2.0 * block.attn_norm.flops(n), [&] {
        block.attn_norm.backward(backend_, d_residual, GradStore::Add, d_ln, x, a.norm1);  // now d(x)
      });
    }
  }

 private:
  // What forward and backward of block `layer` work on: its saved tensors and weights, the
  // dropout context, N rows, and mid [N, C] and h [N, F] among the saved tensors.
  struct BlockViews {
    OptSaved& a;
    const OptBlock& block;
    const DropoutContext& dropout;
    int64_t n;
    Tensor mid, h;
  };
  BlockViews block_views(int64_t layer, const BlockPass& pass, BlockSaved& saved) const {
    OptSaved& a = static_cast<OptSaved&>(saved);
    const int64_t n = pass.rows();
    return BlockViews{a, blocks_[static_cast<size_t>(layer - first_layer_)], *pass.dropout, n, matrix(a.mid, n, c_.hidden_size),
                      matrix(a.h, n, c_.intermediate_size)};
  }
  Tensor matrix(const Buffer& buffer, int64_t rows, int64_t cols) const { return buffer.view(act_, {rows, cols}); }
  Tensor heads_view(Tensor t, const BlockPass& pass) const {
    return t.reshaped({pass.batch, pass.seq, c_.num_attention_heads, c_.head_dim});
  }
  float attention_scale() const { return 1.0f / std::sqrt(static_cast<float>(c_.head_dim)); }
  bool dropping(const DropoutContext& dropout) const { return c_.residual_dropout > 0.0 && dropout.training; }

  // out[N,C] = out_proj(attention(q_proj(in), k_proj(in), v_proj(in))).
  void attention(int64_t layer, const OptBlock& block, const BlockPass& pass, OptSaved& a, Tensor in, Tensor out) {
    const int64_t n = pass.rows(), hidden = c_.hidden_size;
    const DropoutContext& dropout = *pass.dropout;
    Tensor q = matrix(a.q, n, hidden), k = matrix(a.k, n, hidden), v = matrix(a.v, n, hidden), att = matrix(a.att, n, hidden);
    block.linear[kQ].forward(backend_, q, in, a.lora[kQ], dropout);
    block.linear[kK].forward(backend_, k, in, a.lora[kK], dropout);
    block.linear[kV].forward(backend_, v, in, a.lora[kV], dropout);
    block_attention(backend_, pass.attention(), layer, heads_view(att, pass),
                    a.lse.view(DType::F32, {pass.batch, c_.num_attention_heads, pass.seq}), heads_view(q, pass),
                    heads_view(k, pass), heads_view(v, pass), attention_scale());
    // V's bias after the attention (model/attention_bias.h); grad_q_ is free until backward.
    const int64_t heads = c_.num_attention_heads;
    const Tensor out_in = with_value_bias(backend_, matrix(grad_q_, n, hidden), att, block.linear[kV].bias(), heads,
                                          heads, c_.head_dim);
    block.linear[kOut].forward(backend_, out, out_in, a.lora[kOut], dropout);
  }

  // d_in[N,C] = the gradient of attention(...)'s input from d_out[N,C] (written).
  // d_in = (store Write) or += (store Add) the branch's input gradient, from d_out = d(branch).
  void attention_backward(const OptBlock& block, const BlockPass& pass, OptSaved& a, Tensor in, Tensor d_out, Tensor d_in,
                          GradStore store) {
    const int64_t n = pass.rows(), hidden = c_.hidden_size;
    const DropoutContext& dropout = *pass.dropout;
    Tensor dz = pass.lora_dz, scratch = pass.lora_scratch;
    Tensor q = matrix(a.q, n, hidden), k = matrix(a.k, n, hidden), v = matrix(a.v, n, hidden), att = matrix(a.att, n, hidden);
    Tensor d_att = matrix(grad_att_, n, hidden), d_q = matrix(grad_q_, n, hidden), d_k = matrix(grad_k_, n, hidden),
           d_v = matrix(grad_v_, n, hidden);
    // out_proj read att + V's bias (forward); d_q's buffer holds it until attention_backward writes d_q.
    const int64_t heads = c_.num_attention_heads;
    const Tensor out_in = with_value_bias(backend_, d_q, att, block.linear[kV].bias(), heads, heads, c_.head_dim);
    block.linear[kOut].backward(backend_, d_att, false, d_out, out_in, a.lora[kOut], dropout, dz, scratch);
    if (!block.linear[kV].bias_grad().empty())
      value_bias_backward(backend_, block.linear[kV].bias_grad(), d_att, heads, heads, c_.head_dim);
    backend_.attention_backward(heads_view(d_q, pass), heads_view(d_k, pass), heads_view(d_v, pass), heads_view(d_att, pass),
                                heads_view(q, pass), heads_view(k, pass), heads_view(v, pass), heads_view(att, pass),
                                a.lse.view(DType::F32, {pass.batch, c_.num_attention_heads, pass.seq}), pass.positions,
                                attention_scale());
    block.linear[kQ].backward(backend_, d_in, store == GradStore::Add, d_q, in, a.lora[kQ], dropout, dz, scratch);
    block.linear[kK].backward(backend_, d_in, true, d_k, in, a.lora[kK], dropout, dz, scratch);
    block.linear[kV].backward(backend_, d_in, true, d_v, in, a.lora[kV], dropout, dz, scratch);
  }

  // x = dropout(x) in place (training with config dropout > 0), mask keyed by (seed, stream, step, token).
  void residual_dropout(Tensor x, uint32_t stream, const DropoutContext& dropout) {
    if (!dropping(dropout)) return;
    backend_.dropout(x, x, static_cast<float>(c_.residual_dropout), RngKey{dropout.seed, stream, dropout.step}, dropout.row_ids);
  }
  // The branch's output gradient: dropout's backward is the same mask applied to the gradient
  // (into a workspace, since d_out itself stays the residual stream's gradient).
  Tensor residual_dropout_grad(Tensor d_out, uint32_t stream, const DropoutContext& dropout) {
    if (!dropping(dropout)) return d_out;
    Tensor d_branch = matrix(grad_drop_, d_out.shape[0], d_out.shape[1]);
    backend_.dropout(d_branch, d_out, static_cast<float>(c_.residual_dropout), RngKey{dropout.seed, stream, dropout.step},
                     dropout.row_ids);
    return d_branch;
  }

  double attention_flops(const OptBlock& block, const BlockPass& pass, bool backward) const {
    const double core = attention_core_flops(pass.attention_pairs, c_.num_attention_heads, c_.head_dim);
    return linear_flops({&block.linear[kQ], &block.linear[kK], &block.linear[kV], &block.linear[kOut]}, pass.rows(),
                        backward) +
           (backward ? 2.0 : 1.0) * core;
  }
  double mlp_flops(const OptBlock& block, const BlockPass& pass, bool backward) const {
    return linear_flops({&block.linear[kFc1], &block.linear[kFc2]}, pass.rows(), backward);
  }

  ModelConfig c_;
  Backend& backend_;
  DType act_;
  std::vector<OptBlock> blocks_;  // layers [first_layer_, first_layer_ + size)
  int64_t first_layer_ = 0;
  Buffer grad_ln_, grad_drop_;                  // [N, C] (workspace shared by all blocks)
  Buffer grad_att_, grad_q_, grad_k_, grad_v_;  // [N, C]
  Buffer grad_h_;                               // [N, F]
};

std::unique_ptr<DecoderBlocks> make_opt_blocks(const ModelConfig& config, const ParamStore& store, Backend& backend,
                                               const BlockOptions& options) {
  return std::make_unique<OptBlocks>(config, store, backend, options);
}

}  // namespace

Architecture opt_architecture() {
  return {"opt", parse_opt, opt_param_specs, make_opt_blocks, {"q_proj", "v_proj"},
          {"model.decoder.", "model.decoder.final_layer_norm", "ffn_dim"}};
}

}  // namespace zt
