// LLaMA (LlamaForCausalLM): its config keys, parameter list and block
//   x -> RMSNorm -> attention (RoPE, GQA) -> + x -> RMSNorm -> SwiGLU MLP -> + (residual)
// with explicit forward and backward. Mistral and Qwen2 rows reuse the block (llama.h).
#include "model/llama.h"

#include <algorithm>
#include <cmath>

#include "model/architecture.h"
#include "model/attention_bias.h"
#include "model/norm.h"

namespace zt {

namespace {

using nlohmann::json;

// rope_scaling: null; {"type"|"rope_type": "default"}; {"linear", "factor": f > 0} (positions
// divided by f); {"llama3", factor, low_freq_factor, high_freq_factor,
// original_max_position_embeddings} (Llama 3.1+). dynamic, yarn and longrope change the
// frequencies with the sequence length or per dimension in ways zerotune does not implement.
RopeScaling parse_rope_scaling(const ConfigReader& reader) {
  const std::string key = "rope_scaling";
  RopeScaling scaling;
  if (!reader.has(key)) return scaling;
  const json& object = reader.value(key);
  if (!object.is_object()) reader.bad(key, "expected null or an object like {\"rope_type\": \"linear\", \"factor\": 2.0}");
  const char* type_key = object.contains("rope_type") ? "rope_type" : "type";
  if (!object.contains(type_key) || !object.at(type_key).is_string())
    reader.bad(key, "expected a string field \"rope_type\" (or \"type\")");
  scaling.type = object.at(type_key).get<std::string>();
  auto positive = [&](const char* field) {
    if (!object.contains(field) || !object.at(field).is_number() || !(object.at(field).get<double>() > 0.0))
      reader.bad(key, cat(scaling.type, " rope scaling needs a numeric \"", field, "\" > 0"));
    return object.at(field).get<double>();
  };
  if (scaling.type == "default") return scaling;
  if (scaling.type == "linear") {
    scaling.factor = positive("factor");
    return scaling;
  }
  if (scaling.type == "llama3") {
    scaling.factor = positive("factor");
    scaling.low_freq_factor = positive("low_freq_factor");
    scaling.high_freq_factor = positive("high_freq_factor");
    scaling.original_max_position_embeddings = positive("original_max_position_embeddings");
    if (!(scaling.high_freq_factor > scaling.low_freq_factor))
      reader.bad(key, "llama3 rope scaling needs high_freq_factor > low_freq_factor");
    return scaling;
  }
  reader.bad(key, cat("rope scaling type '", scaling.type,
                      "' is not implemented (zerotune implements default, linear and llama3)"));
}

void parse_llama(const ConfigReader& reader, ModelConfig& config) {
  parse_llama_family(reader, config, LlamaFamilyDefaults{});
  config.qkv_bias = config.o_bias = reader.boolean("attention_bias", false);
  config.mlp_bias = reader.boolean("mlp_bias", false);
  // pretraining_tp > 1 only splits the projections into slices whose results are summed: the
  // same math up to float reassociation, so it is accepted (and must be a positive integer).
  reader.positive_integer("pretraining_tp", 1);
}

enum LlamaLinear { kQ, kK, kV, kO, kGate, kUp, kDown, kLinears };
const char* const kLinearPaths[kLinears] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                            "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
                                            "mlp.down_proj"};

struct LlamaBlock {
  NormLayer input_norm, post_norm;  // [C] weights
  LinearLayer linear[kLinears];
};

// What one block's forward keeps for its backward (all rows N = B*T). Activations are in the
// compute dtype; the norm and attention statistics in fp32.
struct LlamaSaved final : BlockSaved {
  Buffer ln1;               // [N, C]
  NormSaved norm1, norm2;   // [N] each
  Buffer q, k, v;           // [N, H*D], [N, Hkv*D], [N, Hkv*D]  (q, k after RoPE)
  Buffer att, lse;          // [N, H*D], [B, H, T]
  Buffer mid;               // [N, C]  x + o_proj(att)
  Buffer ln2;               // [N, C]
  Buffer gate, up, hidden;  // [N, F] each; hidden = silu(gate) * up
  LoraSaved lora[kLinears];
};

class LlamaBlocks final : public DecoderBlocks {
 public:
  LlamaBlocks(const ModelConfig& config, const ParamStore& store, Backend& backend, const BlockOptions& options)
      : c_(config), backend_(backend), act_(store.param_dtype()) {
    first_layer_ = options.first_layer;
    const int64_t end_layer = options.end_layer < 0 ? c_.num_hidden_layers : options.end_layer;
    for (int64_t l = first_layer_; l < end_layer; ++l) {
      const std::string prefix = cat("model.layers.", l, ".");
      LlamaBlock block;
      block.input_norm = NormLayer(store, backend, prefix + "input_layernorm", c_, c_.hidden_size);
      block.post_norm = NormLayer(store, backend, prefix + "post_attention_layernorm", c_, c_.hidden_size);
      for (int i = 0; i < kLinears; ++i) block.linear[i] = block_linear(store, prefix, kLinearPaths[i], options, l, i);
      block.linear[kV].defer_bias();  // added after the attention (model/attention_bias.h)
      blocks_.push_back(std::move(block));
    }
    const std::vector<float> inv_freq = rope_inv_freq(c_);
    const int64_t half = static_cast<int64_t>(inv_freq.size());
    inv_freq_ = Buffer(backend, inv_freq.size() * sizeof(float));
    backend.copy(inv_freq_.view(DType::F32, {half}), Tensor(const_cast<float*>(inv_freq.data()), DType::F32, {half}));
  }

  std::unique_ptr<BlockSaved> make_saved() const override { return std::make_unique<LlamaSaved>(); }

  void reserve(BlockSaved& saved_base, int64_t batch, int64_t seq) override {
    LlamaSaved& a = static_cast<LlamaSaved&>(saved_base);
    const int64_t n = batch * seq, hidden = c_.hidden_size, ffn = c_.intermediate_size;
    const int64_t q_width = c_.num_attention_heads * c_.head_dim, kv_width = c_.num_key_value_heads * c_.head_dim;
    for (Buffer* buffer : {&a.ln1, &a.mid, &a.ln2}) ensure_buffer(*buffer, backend_, n * hidden, act_);
    const LlamaBlock& first = blocks_.front();
    first.input_norm.ensure_saved(backend_, a.norm1, n);
    first.post_norm.ensure_saved(backend_, a.norm2, n);
    for (Buffer* buffer : {&a.q, &a.att}) ensure_buffer(*buffer, backend_, n * q_width, act_);
    for (Buffer* buffer : {&a.k, &a.v}) ensure_buffer(*buffer, backend_, n * kv_width, act_);
    ensure_buffer(a.lse, backend_, n * c_.num_attention_heads, DType::F32);
    for (Buffer* buffer : {&a.gate, &a.up, &a.hidden}) ensure_buffer(*buffer, backend_, n * ffn, act_);
    for (int i = 0; i < kLinears; ++i) first.linear[i].ensure_saved(backend_, a.lora[i], n);
    ensure_buffer(grad_ln_, backend_, n * hidden, act_);
    for (Buffer* buffer : {&grad_q_, &grad_att_}) ensure_buffer(*buffer, backend_, n * q_width, act_);
    for (Buffer* buffer : {&grad_k_, &grad_v_}) ensure_buffer(*buffer, backend_, n * kv_width, act_);
    for (Buffer* buffer : {&grad_gate_, &grad_up_, &grad_hidden_}) ensure_buffer(*buffer, backend_, n * ffn, act_);
  }

  std::vector<const LinearLayer*> linears(int64_t layer) const override {
    std::vector<const LinearLayer*> all;
    for (const LinearLayer& linear : blocks_[static_cast<size_t>(layer - first_layer_)].linear) all.push_back(&linear);
    return all;
  }

  void forward(int64_t layer, const BlockPass& pass, Tensor x, BlockSaved& saved, Tensor out) override {
    LlamaSaved& a = static_cast<LlamaSaved&>(saved);
    const LlamaBlock& block = blocks_[static_cast<size_t>(layer - first_layer_)];
    const DropoutContext& dropout = *pass.dropout;
    const int64_t n = pass.rows(), b = pass.batch, t = pass.seq;
    const int64_t d = c_.head_dim, heads = c_.num_attention_heads, kv_heads = c_.num_key_value_heads;
    const SavedViews views = saved_views(a, n);
    const Tensor &ln1 = views.ln1, &q = views.q, &k = views.k, &v = views.v, &att = views.att, &mid = views.mid,
                 &ln2 = views.ln2, &gate = views.gate, &up = views.up, &hidden_act = views.hidden_act;
    Tensor inv_freq = inv_freq_.view(DType::F32, {d / 2});
    // Attention branch: mid = x + o_proj(attention(rope(q_proj(ln1)), rope(k_proj(ln1)), v_proj(ln1)))
    time_module(backend_, pass.timer, "norm", block.input_norm.flops(n),
                [&] { block.input_norm.forward(backend_, ln1, x, a.norm1); });
    time_module(backend_, pass.timer, "attention", attention_flops(block, pass, false), [&] {
      block.linear[kQ].forward(backend_, q, ln1, a.lora[kQ], dropout);
      block.linear[kK].forward(backend_, k, ln1, a.lora[kK], dropout);
      block.linear[kV].forward(backend_, v, ln1, a.lora[kV], dropout);
      backend_.rope_forward(q.reshaped({b, t, heads, d}), inv_freq, pass.positions);
      backend_.rope_forward(k.reshaped({b, t, kv_heads, d}), inv_freq, pass.positions);
      block_attention(backend_, pass.attention(), layer, att.reshaped({b, t, heads, d}),
                      a.lse.view(DType::F32, {b, heads, t}), q.reshaped({b, t, heads, d}),
                      k.reshaped({b, t, kv_heads, d}), v.reshaped({b, t, kv_heads, d}), attention_scale());
      // V's bias after the attention (model/attention_bias.h); grad_q_ is free until backward.
      const Tensor o_in = with_value_bias(backend_, matrix(grad_q_, n, heads * d), att, block.linear[kV].bias(), heads,
                                          kv_heads, d);
      block.linear[kO].forward(backend_, mid, o_in, a.lora[kO], dropout);
      backend_.accumulate(mid, x, 1.0f);
    });
    // MLP branch: out = mid + down_proj(silu(gate_proj(ln2)) * up_proj(ln2))
    time_module(backend_, pass.timer, "norm", block.post_norm.flops(n),
                [&] { block.post_norm.forward(backend_, ln2, mid, a.norm2); });
    time_module(backend_, pass.timer, "mlp", mlp_flops(block, pass, false), [&] {
      block.linear[kGate].forward(backend_, gate, ln2, a.lora[kGate], dropout);
      block.linear[kUp].forward(backend_, up, ln2, a.lora[kUp], dropout);
      backend_.swiglu_forward(hidden_act, gate, up);
      block.linear[kDown].forward(backend_, out, hidden_act, a.lora[kDown], dropout);
      backend_.accumulate(out, mid, 1.0f);
    });
  }

  void backward(int64_t layer, const BlockPass& pass, Tensor x, BlockSaved& saved, Tensor d_residual) override {
    LlamaSaved& a = static_cast<LlamaSaved&>(saved);
    const LlamaBlock& block = blocks_[static_cast<size_t>(layer - first_layer_)];
    const DropoutContext& dropout = *pass.dropout;
    const int64_t n = pass.rows(), b = pass.batch, t = pass.seq, hidden = c_.hidden_size, ffn = c_.intermediate_size;
    const int64_t d = c_.head_dim, heads = c_.num_attention_heads, kv_heads = c_.num_key_value_heads;
    const SavedViews views = saved_views(a, n);
    const Tensor &ln1 = views.ln1, &q = views.q, &k = views.k, &v = views.v, &att = views.att, &mid = views.mid,
                 &ln2 = views.ln2, &gate = views.gate, &up = views.up, &hidden_act = views.hidden_act;
    Tensor d_ln = matrix(grad_ln_, n, hidden);
    Tensor d_hidden = matrix(grad_hidden_, n, ffn), d_gate = matrix(grad_gate_, n, ffn), d_up = matrix(grad_up_, n, ffn);
    Tensor d_att = matrix(grad_att_, n, heads * d), d_q = matrix(grad_q_, n, heads * d);
    Tensor d_k = matrix(grad_k_, n, kv_heads * d), d_v = matrix(grad_v_, n, kv_heads * d);
    Tensor inv_freq = inv_freq_.view(DType::F32, {d / 2});
    Tensor dz = pass.lora_dz, scratch = pass.lora_scratch;
    // MLP branch (out = mid + down(hidden)): d_residual flows to mid unchanged, plus the norm's share.
    time_module(backend_, pass.timer, "mlp", mlp_flops(block, pass, true), [&] {
      block.linear[kDown].backward(backend_, d_hidden, false, d_residual, hidden_act, a.lora[kDown], dropout, dz, scratch);
      backend_.swiglu_backward(d_gate, d_up, d_hidden, gate, up);
      block.linear[kGate].backward(backend_, d_ln, false, d_gate, ln2, a.lora[kGate], dropout, dz, scratch);
      block.linear[kUp].backward(backend_, d_ln, true, d_up, ln2, a.lora[kUp], dropout, dz, scratch);
    });
    time_module(backend_, pass.timer, "norm", 2.0 * block.post_norm.flops(n), [&] {
      block.post_norm.backward(backend_, d_residual, GradStore::Add, d_ln, mid, a.norm2);  // now d(mid)
    });
    // Attention branch (mid = x + o_proj(att)).
    time_module(backend_, pass.timer, "attention", attention_flops(block, pass, true), [&] {
      // o_proj read att + V's bias (forward); d_q's buffer holds it until attention_backward writes d_q.
      const Tensor o_in = with_value_bias(backend_, d_q, att, block.linear[kV].bias(), heads, kv_heads, d);
      block.linear[kO].backward(backend_, d_att, false, d_residual, o_in, a.lora[kO], dropout, dz, scratch);
      if (!block.linear[kV].bias_grad().empty())
        value_bias_backward(backend_, block.linear[kV].bias_grad(), d_att, heads, kv_heads, d);
      backend_.attention_backward(d_q.reshaped({b, t, heads, d}), d_k.reshaped({b, t, kv_heads, d}),
                                  d_v.reshaped({b, t, kv_heads, d}), d_att.reshaped({b, t, heads, d}),
                                  q.reshaped({b, t, heads, d}), k.reshaped({b, t, kv_heads, d}),
                                  v.reshaped({b, t, kv_heads, d}), att.reshaped({b, t, heads, d}),
                                  a.lse.view(DType::F32, {b, heads, t}), pass.positions, attention_scale());
      backend_.rope_backward(d_q.reshaped({b, t, heads, d}), inv_freq, pass.positions);
      backend_.rope_backward(d_k.reshaped({b, t, kv_heads, d}), inv_freq, pass.positions);
      block.linear[kQ].backward(backend_, d_ln, false, d_q, ln1, a.lora[kQ], dropout, dz, scratch);
      block.linear[kK].backward(backend_, d_ln, true, d_k, ln1, a.lora[kK], dropout, dz, scratch);
      block.linear[kV].backward(backend_, d_ln, true, d_v, ln1, a.lora[kV], dropout, dz, scratch);
    });
    time_module(backend_, pass.timer, "norm", 2.0 * block.input_norm.flops(n), [&] {
      block.input_norm.backward(backend_, d_residual, GradStore::Add, d_ln, x, a.norm1);  // now d(x)
    });
  }

 private:
  Tensor matrix(const Buffer& buffer, int64_t rows, int64_t cols) const { return buffer.view(act_, {rows, cols}); }
  // The saved tensors of a block as [N, ...] matrices, for its forward (which writes them) and
  // its backward (which reads them).
  struct SavedViews {
    Tensor ln1, q, k, v, att, mid, ln2, gate, up, hidden_act;
  };
  SavedViews saved_views(const LlamaSaved& a, int64_t n) const {
    const int64_t hidden = c_.hidden_size, ffn = c_.intermediate_size, d = c_.head_dim;
    const int64_t heads = c_.num_attention_heads, kv_heads = c_.num_key_value_heads;
    return SavedViews{matrix(a.ln1, n, hidden),   matrix(a.q, n, heads * d),   matrix(a.k, n, kv_heads * d),
                      matrix(a.v, n, kv_heads * d), matrix(a.att, n, heads * d), matrix(a.mid, n, hidden),
                      matrix(a.ln2, n, hidden),   matrix(a.gate, n, ffn),      matrix(a.up, n, ffn),
                      matrix(a.hidden, n, ffn)};
  }
  float attention_scale() const { return 1.0f / std::sqrt(static_cast<float>(c_.head_dim)); }
  double attention_flops(const LlamaBlock& block, const BlockPass& pass, bool backward) const {
    const double core = attention_core_flops(pass.attention_pairs, c_.num_attention_heads, c_.head_dim);
    return linear_flops({&block.linear[kQ], &block.linear[kK], &block.linear[kV], &block.linear[kO]}, pass.rows(),
                        backward) +
           (backward ? 2.0 : 1.0) * core;
  }
  double mlp_flops(const LlamaBlock& block, const BlockPass& pass, bool backward) const {
    return linear_flops({&block.linear[kGate], &block.linear[kUp], &block.linear[kDown]}, pass.rows(), backward);
  }

  ModelConfig c_;
  Backend& backend_;
  DType act_;  // the compute dtype: activations, their gradients and the parameters the blocks read
  std::vector<LlamaBlock> blocks_;  // layers [first_layer_, first_layer_ + size)
  int64_t first_layer_ = 0;
  Buffer inv_freq_;                              // fp32 [D/2]
  Buffer grad_ln_;                               // [N, C]   (workspace shared by all blocks)
  Buffer grad_q_, grad_att_, grad_k_, grad_v_;   // [N, H*D], [N, Hkv*D]
  Buffer grad_gate_, grad_up_, grad_hidden_;     // [N, F]
};

}  // namespace

void parse_llama_family(const ConfigReader& reader, ModelConfig& config, const LlamaFamilyDefaults& defaults) {
  config.vocab_size = reader.positive_integer("vocab_size", defaults.vocab_size);
  config.hidden_size = reader.positive_integer("hidden_size", defaults.hidden_size);
  config.intermediate_size = reader.positive_integer("intermediate_size", defaults.intermediate_size);
  config.num_hidden_layers = reader.positive_integer("num_hidden_layers", defaults.num_hidden_layers);
  config.num_attention_heads = reader.positive_integer("num_attention_heads", defaults.num_attention_heads);
  config.num_key_value_heads = reader.positive_integer(
      "num_key_value_heads", defaults.num_key_value_heads > 0 ? defaults.num_key_value_heads : config.num_attention_heads);
  resolve_attention_shape(reader, config);
  if (config.head_dim % 2 != 0) reader.bad("head_dim", cat("RoPE needs an even head dimension, got ", config.head_dim));
  config.max_position_embeddings = reader.positive_integer("max_position_embeddings", defaults.max_position_embeddings);
  config.norm = NormKind::RMSNorm;
  config.norm_eps = reader.positive_number("rms_norm_eps", 1e-6);
  config.positions = PositionKind::Rotary;
  config.rope_theta = reader.positive_number("rope_theta", 10000.0);
  config.rope_scaling = parse_rope_scaling(reader);

  // transformers maps both names to SiLU (ACT2FN); the LLaMA MLP is SwiGLU with it.
  const std::string act = reader.string("hidden_act", "silu");
  if (act != "silu" && act != "swish")
    reader.bad("hidden_act", cat(config.model_type, " models in zerotune use SwiGLU with 'silu'; this activation is not implemented"));
  config.hidden_act = "silu";

  config.tie_word_embeddings = reader.boolean("tie_word_embeddings", false);
  config.initializer_range = reader.number("initializer_range", 0.02);
  if (config.initializer_range < 0.0) reader.bad("initializer_range", "expected a number >= 0");
  // Attention dropout would add randomness to the forward pass that zerotune does not draw.
  if (reader.number("attention_dropout", 0.0) != 0.0)
    reader.bad("attention_dropout", "attention dropout is not implemented (use 0.0)");

  config.bos_token_id = first_id(reader.token_ids("bos_token_id", defaults.bos_token_id));
  config.eos_token_ids = reader.token_ids("eos_token_id", defaults.eos_token_id);
  config.eos_token_id = first_id(config.eos_token_ids);
  config.pad_token_id = first_id(reader.token_ids("pad_token_id", std::nullopt));
}

std::vector<ParamSpec> llama_param_specs(const ModelConfig& c) {
  const int64_t q_out = c.num_attention_heads * c.head_dim;
  const int64_t kv_out = c.num_key_value_heads * c.head_dim;
  const int head_unit = static_cast<int>(c.num_hidden_layers) + 1;
  std::vector<ParamSpec> specs;
  specs.push_back({"model.embed_tokens.weight", {c.vocab_size, c.hidden_size}, ParamRole::Embedding, -1, "embed_tokens", 0, ""});
  for (int layer = 0; layer < c.num_hidden_layers; ++layer) {
    const std::string prefix = cat("model.layers.", layer, ".");
    const int unit = layer + 1;
    auto linear = [&](const std::string& block, const std::string& module, int64_t out, int64_t in, bool bias) {
      specs.push_back({prefix + block + module + ".weight", {out, in}, ParamRole::Linear, layer, module, unit, ""});
      if (bias) specs.push_back({prefix + block + module + ".bias", {out}, ParamRole::Bias, layer, module, unit, ""});
    };
    linear("self_attn.", "q_proj", q_out, c.hidden_size, c.qkv_bias);
    linear("self_attn.", "k_proj", kv_out, c.hidden_size, c.qkv_bias);
    linear("self_attn.", "v_proj", kv_out, c.hidden_size, c.qkv_bias);
    linear("self_attn.", "o_proj", c.hidden_size, q_out, c.o_bias);
    linear("mlp.", "gate_proj", c.intermediate_size, c.hidden_size, c.mlp_bias);
    linear("mlp.", "up_proj", c.intermediate_size, c.hidden_size, c.mlp_bias);
    linear("mlp.", "down_proj", c.hidden_size, c.intermediate_size, c.mlp_bias);
    specs.push_back({prefix + "input_layernorm.weight", {c.hidden_size}, ParamRole::NormWeight, layer, "", unit, ""});
    specs.push_back({prefix + "post_attention_layernorm.weight", {c.hidden_size}, ParamRole::NormWeight, layer, "", unit, ""});
  }
  specs.push_back({"model.norm.weight", {c.hidden_size}, ParamRole::NormWeight, -1, "", head_unit, ""});
  specs.push_back({"lm_head.weight", {c.vocab_size, c.hidden_size}, ParamRole::Linear, -1, "lm_head", head_unit,
                   c.tie_word_embeddings ? "model.embed_tokens.weight" : ""});
  return specs;
}

std::unique_ptr<DecoderBlocks> make_llama_blocks(const ModelConfig& config, const ParamStore& store, Backend& backend,
                                                 const BlockOptions& options) {
  return std::make_unique<LlamaBlocks>(config, store, backend, options);
}

std::vector<float> rope_inv_freq(const ModelConfig& c) {
  // inv_freq[i] = 1 / theta^(2i/D), in fp32 as transformers computes it (base ** (arange / dim)).
  const int64_t half = c.head_dim / 2;
  std::vector<float> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(c.head_dim);
    inv_freq[static_cast<size_t>(i)] = 1.0f / std::pow(static_cast<float>(c.rope_theta), exponent);
  }
  const RopeScaling& s = c.rope_scaling;
  if (s.type == "linear") {
    for (float& f : inv_freq) f /= static_cast<float>(s.factor);
  } else if (s.type == "llama3") {
    // transformers' _compute_llama3_parameters: wavelengths longer than the original context /
    // low_freq_factor are divided by factor, shorter than context / high_freq_factor kept, and
    // those between interpolated smoothly (fp32 tensors with Python-float scalars, as there).
    const float factor = static_cast<float>(s.factor);
    const double old_context = s.original_max_position_embeddings;
    const double low_wavelen = old_context / s.low_freq_factor, high_wavelen = old_context / s.high_freq_factor;
    for (float& f : inv_freq) {
      const float wavelen = static_cast<float>(2.0 * M_PI) / f;
      float scaled = wavelen > static_cast<float>(low_wavelen) ? f / factor : f;
      const bool medium = !(wavelen < static_cast<float>(high_wavelen)) && !(wavelen > static_cast<float>(low_wavelen));
      if (medium) {
        const float smooth = (static_cast<float>(old_context) / wavelen - static_cast<float>(s.low_freq_factor)) /
                             static_cast<float>(s.high_freq_factor - s.low_freq_factor);
        scaled = (1.0f - smooth) * scaled / factor + smooth * scaled;
      }
      f = scaled;
    }
  }
  return inv_freq;
}

HfNaming llama_hf_naming() { return {"model.", "model.norm", "intermediate_size"}; }

Architecture llama_architecture() {
  return {"llama", parse_llama, llama_param_specs, make_llama_blocks, {"q_proj", "v_proj"}, llama_hf_naming()};
}

}  // namespace zt
