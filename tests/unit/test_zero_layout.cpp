// The ZeRO layout: units of a parameter list, unit ranges padded for W partitions, rank-major
// packing of a bucket and its inverse, and bucket planning.
#include <boost/test/unit_test.hpp>

#include <numeric>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "model/config.h"
#include "model/lora.h"
#include "model/param_store.h"
#include "zero/rank_major.h"

namespace zt {
namespace {

ModelConfig tiny_llama() {
  ModelConfig c;
  c.model_type = "llama";
  c.vocab_size = 32;
  c.hidden_size = 8;
  c.intermediate_size = 12;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 1;
  c.head_dim = 4;
  return c;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(zero_layout)

BOOST_AUTO_TEST_CASE(units_follow_blocks_and_adapters_follow_their_base) {
  std::vector<ParamSpec> specs = model_param_specs(tiny_llama());
  LoraConfig lora;
  lora.r = 2;
  lora.targets = {"all-linear"};
  for (ParamSpec& adapter : lora_param_specs(specs, lora)) specs.push_back(adapter);
  const std::vector<int> units = param_units(specs);
  for (size_t i = 0; i < specs.size(); ++i) {
    const std::string& name = specs[i].name;
    int expected = specs[i].layer + 1;
    if (name.rfind("model.embed_tokens", 0) == 0) expected = 0;
    if (name.rfind("model.norm", 0) == 0 || name.rfind("lm_head", 0) == 0) expected = 3;
    BOOST_TEST_INFO(name);
    BOOST_CHECK_EQUAL(units[i], expected);
  }
}

BOOST_AUTO_TEST_CASE(declared_units_reads_and_ties) {
  // OPT (opt-350m's shape) lists final_layer_norm and project_out before the blocks in its
  // state-dict order, but declares them in the head's unit; project_in sits in unit 0, whose
  // backward then reads parameters. The tied head reads unit 0 and has no storage of its own.
  const ModelConfig opt = parse_model_config(
      {{"model_type", "opt"}, {"vocab_size", 32}, {"hidden_size", 8}, {"ffn_dim", 12}, {"num_hidden_layers", 2},
       {"num_attention_heads", 2}, {"max_position_embeddings", 16}, {"word_embed_proj_dim", 4}},
      "opt.json");
  const std::vector<ParamSpec> specs = model_param_specs(opt);
  const std::vector<int> units = param_units(specs);
  for (size_t i = 0; i < specs.size(); ++i) {
    const std::string& name = specs[i].name;
    int expected = specs[i].layer + 1;
    if (name.find("embed_") != std::string::npos || name.find("project_in") != std::string::npos) expected = 0;
    if (name.find("project_out") != std::string::npos || name.rfind("model.decoder.final_layer_norm", 0) == 0 ||
        name == "lm_head.weight")
      expected = 3;
    BOOST_TEST_INFO(name);
    BOOST_CHECK_EQUAL(units[i], expected);
  }
  std::unique_ptr<Backend> backend = make_cpu_backend();
  ParamStore store(*backend, specs, std::vector<bool>(specs.size(), true), 2);
  BOOST_TEST((store.unit_reads(3) == std::vector<int>{3, 0}));
  BOOST_TEST((store.unit_reads(1) == std::vector<int>{1}));
  BOOST_TEST(store.unit_backward_reads_params(0));  // project_in's dx = dy W
  BOOST_TEST(!store.contains("nope"));
  BOOST_TEST(store.param("lm_head.weight").data == store.param("model.decoder.embed_tokens.weight").data);
  BOOST_TEST(store.grad("lm_head.weight").data == store.grad("model.decoder.embed_tokens.weight").data);
  for (const ParamEntry& entry : store.entries()) BOOST_TEST(entry.spec.name != "lm_head.weight");

  // LLaMA's embedding unit only writes gradients in backward; untied, the head reads only itself.
  ParamStore llama(*backend, model_param_specs(tiny_llama()), std::vector<bool>(model_param_specs(tiny_llama()).size(), true));
  BOOST_TEST(!llama.unit_backward_reads_params(0));
  BOOST_TEST((llama.unit_reads(3) == std::vector<int>{3}));
  ModelConfig tied = tiny_llama();
  tied.tie_word_embeddings = true;
  const std::vector<ParamSpec> tied_specs = model_param_specs(tied);
  ParamStore tied_store(*backend, tied_specs, std::vector<bool>(tied_specs.size(), true));
  BOOST_TEST((tied_store.unit_reads(3) == std::vector<int>{3, 0}));
  BOOST_CHECK_EQUAL(tied_store.count_parameters(false),
                    llama.count_parameters(false) - tied.vocab_size * tied.hidden_size);
  // A tie between a trainable and a frozen parameter cannot be one tensor.
  std::vector<bool> mixed(tied_specs.size(), true);
  mixed.back() = false;  // lm_head.weight frozen, the embedding trainable
  BOOST_CHECK_THROW(ParamStore(*backend, tied_specs, mixed), Error);
}

BOOST_AUTO_TEST_CASE(gradients_are_stored_in_the_grad_dtype) {
  std::unique_ptr<Backend> backend = make_cpu_backend();
  const std::vector<ParamSpec> specs = model_param_specs(tiny_llama());
  const std::vector<bool> trainable(specs.size(), true);
  ParamStore wide(*backend, specs, trainable, 2, DType::BF16);
  ParamStore narrow(*backend, specs, trainable, 2, DType::BF16, {}, {}, DType::BF16);
  BOOST_CHECK(wide.grad_dtype() == DType::F32 && narrow.grad_dtype() == DType::BF16);
  for (ParamGroup group : {ParamGroup::Decay, ParamGroup::NoDecay}) {
    BOOST_CHECK(narrow.group_grads(group).dtype == DType::BF16);
    BOOST_CHECK_EQUAL(2 * narrow.group(group).grads.bytes(), wide.group(group).grads.bytes());  // half the bytes
  }
  BOOST_CHECK(narrow.grad(specs.front().name).dtype == DType::BF16);
  // The backward GEMMs write their inputs' dtype or fp32: 16-bit gradients are the parameters' dtype.
  BOOST_CHECK_THROW(ParamStore(*backend, specs, trainable, 1, DType::F32, {}, {}, DType::BF16), Error);
  BOOST_CHECK_THROW(ParamStore(*backend, specs, trainable, 1, DType::BF16, {}, {}, DType::F16), Error);
}

BOOST_AUTO_TEST_CASE(unit_ranges_are_padded_for_partitions_and_contiguous) {
  std::unique_ptr<Backend> backend = make_cpu_backend();
  const std::vector<ParamSpec> specs = model_param_specs(tiny_llama());
  for (int partitions : {1, 2, 3, 4}) {
    ParamStore store(*backend, specs, std::vector<bool>(specs.size(), true), partitions);
    BOOST_CHECK_EQUAL(store.num_units(), 4);
    for (ParamGroup group : {ParamGroup::Decay, ParamGroup::NoDecay}) {
      int64_t next = 0;
      for (int unit = 0; unit < store.num_units(); ++unit) {
        const UnitRange range = store.unit_range(group, unit);
        BOOST_CHECK_EQUAL(range.begin, next);
        BOOST_CHECK_EQUAL(range.numel % (16 * partitions), 0);
        next += range.numel;
      }
      BOOST_CHECK_EQUAL(next, store.group(group).numel);
    }
    for (const ParamEntry& entry : store.entries()) {  // every parameter inside its unit's range
      const UnitRange range = store.unit_range(entry.group, entry.unit);
      BOOST_CHECK(entry.offset >= range.begin && entry.offset + entry.spec.numel() <= range.begin + range.numel);
    }
  }
}

BOOST_AUTO_TEST_CASE(rank_major_pack_is_the_inverse_of_unpack_and_slices_land_at_begin_over_w) {
  std::unique_ptr<Backend> backend = make_cpu_backend();
  const int world = 3;
  const std::vector<UnitRange> units = {{0, 6}, {6, 0}, {6, 12}, {18, 3}};
  std::vector<float> full(21);
  std::iota(full.begin(), full.end(), 0.0f);
  const int64_t per_rank = slice_numel(units, world);
  BOOST_CHECK_EQUAL(per_rank, 2 + 0 + 4 + 1);
  std::vector<float> staging(static_cast<size_t>(per_rank * world), -1.0f);
  pack_rank_major(*backend, f32_view(staging.data(), {per_rank * world}), f32_view(full.data(), {21}), units, world);
  // Rank 1's piece: unit 0 elements 2,3; unit 2 elements 6+4..6+7; unit 3 element 19.
  std::vector<float> rank1(staging.begin() + per_rank, staging.begin() + 2 * per_rank);
  BOOST_CHECK((rank1 == std::vector<float>{2, 3, 10, 11, 12, 13, 19}));
  std::vector<float> back(21, -1.0f);
  unpack_rank_major(*backend, f32_view(back.data(), {21}), f32_view(staging.data(), {per_rank * world}), units, world);
  BOOST_CHECK(back == full);
  // A partition buffer [21/3] gets unit u's slice at begin/W; add_slices accumulates there.
  std::vector<float> partition(7, 1.0f);
  add_slices(*backend, f32_view(partition.data(), {7}), f32_view(rank1.data(), {per_rank}), units, world);
  BOOST_CHECK((partition == std::vector<float>{3, 4, 11, 12, 13, 14, 20}));
  std::vector<float> gathered(static_cast<size_t>(per_rank));
  gather_slices(*backend, f32_view(gathered.data(), {per_rank}), f32_view(partition.data(), {7}), units, world);
  BOOST_CHECK(gathered == partition);
}

BOOST_AUTO_TEST_CASE(buckets_hold_consecutive_units_up_to_the_size) {
  const std::vector<UnitRange> units = {{0, 4}, {4, 0}, {4, 4}, {8, 10}, {18, 2}, {20, 2}};
  const auto buckets = plan_buckets(units, 8);
  BOOST_REQUIRE_EQUAL(buckets.size(), 3u);
  BOOST_CHECK_EQUAL(buckets[0].size(), 2u);  // 4 + 4 (the empty unit is left out)
  BOOST_CHECK_EQUAL(buckets[1].size(), 1u);  // 10 alone: larger than a bucket
  BOOST_CHECK_EQUAL(buckets[2].size(), 2u);  // 2 + 2
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace zt
