// Generation (model/generation.h, model/kv_cache.h) on the CPU backend: cached logits equal a
// full forward's for LLaMA (GQA), Qwen2 (biases, tied head) and OPT (learned positions); the
// attention over a cache against a direct softmax; the token choice (greedy, temperature, top-p,
// reproducible draws); the options' and --sample-prompts' errors (train/sampling.h).
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <set>

#include "generation_check.h"
#include "test_util.h"
#include "train/sampling.h"

using namespace zt;

BOOST_AUTO_TEST_SUITE(generation)

BOOST_AUTO_TEST_CASE(cached_logits_equal_a_full_forward) {
  std::unique_ptr<Backend> backend = make_cpu_backend();
  for (const char* family : {"llama", "qwen2", "opt"}) test::check_cached_generation_matches_full_forward(*backend, family);
}

BOOST_AUTO_TEST_CASE(cached_attention_sees_keys_up_to_its_position) {
  // One head, D = 1, keys 0..3; the 2 new queries sit at positions 2 and 3.
  std::unique_ptr<Backend> backend = make_cpu_backend();
  std::vector<float> q = {1.0f, 2.0f}, k = {0.5f, -1.0f, 2.0f, 1.0f}, v = {1.0f, 2.0f, 3.0f, 4.0f}, out(2, -9.0f);
  backend->attention_cached_forward(Tensor(out.data(), DType::F32, {1, 2, 1, 1}), Tensor(q.data(), DType::F32, {1, 2, 1, 1}),
                                    Tensor(k.data(), DType::F32, {1, 4, 1, 1}), Tensor(v.data(), DType::F32, {1, 4, 1, 1}),
                                    1.0f);
  for (int t = 0; t < 2; ++t) {
    double num = 0.0, den = 0.0;
    for (int j = 0; j <= 2 + t; ++j) {
      const double weight = std::exp(static_cast<double>(q[t]) * k[j]);
      num += weight * v[j];
      den += weight;
    }
    BOOST_TEST(std::fabs(out[t] - num / den) < 1e-5, "query " << t << ": " << out[t] << " vs " << num / den);
  }
  test::check_error_mentions([&] {
    backend->attention_cached_forward(Tensor(out.data(), DType::F32, {1, 2, 1, 1}), Tensor(q.data(), DType::F32, {1, 2, 1, 1}),
                                      Tensor(k.data(), DType::F32, {1, 1, 1, 1}), Tensor(v.data(), DType::F32, {1, 1, 1, 1}), 1.0f);
  }, {"attention_cached_forward", "T <= S"});
}

BOOST_AUTO_TEST_CASE(token_choice) {
  const std::vector<float> logits = {0.0f, 3.0f, 3.0f, 1.0f, -2.0f};
  BOOST_TEST(choose_token(logits, 0.0, 1.0, 0.99f) == 1);  // greedy: the first argmax
  // top_p 0.5: the nucleus is {1} or {1, 2} (tokens 1 and 2 hold 0.42 each): never 0, 3 or 4.
  std::set<int32_t> seen;
  for (int i = 0; i < 200; ++i) seen.insert(choose_token(logits, 1.0, 0.5, static_cast<float>(i) / 200.0f));
  BOOST_TEST((seen == std::set<int32_t>{1, 2}));
  // A tiny top_p keeps one token (at least one, as HF's TopPLogitsWarper).
  BOOST_TEST(choose_token(logits, 1.0, 1e-6, 0.999f) == 1);
  // Full nucleus at a high temperature reaches every token.
  seen.clear();
  for (int i = 0; i < 1000; ++i) seen.insert(choose_token(logits, 100.0, 1.0, static_cast<float>(i) / 1000.0f));
  BOOST_TEST(seen.size() == logits.size());
}

BOOST_AUTO_TEST_CASE(sampling_is_reproducible_by_seed) {
  std::unique_ptr<Backend> backend = make_cpu_backend();
  const ModelConfig config = test::generation_family_config("llama");
  const std::vector<ParamSpec> specs = model_param_specs(config);
  ParamStore store(*backend, specs, std::vector<bool>(specs.size(), false));
  test::randomise_store(store, 3);
  std::unique_ptr<CausalLM> model = make_causal_lm(config, store, *backend, ModelOptions{});
  GenerationOptions options;
  options.max_new_tokens = 12;
  options.temperature = 2.0;
  options.top_p = 0.95;
  auto run = [&](uint64_t seed) {
    options.seed = seed;
    return generate(*model, config, *backend, DType::F32, {1, 2, 3}, options).tokens;
  };
  const std::vector<int32_t> first = run(5);
  BOOST_TEST(run(5) == first);
  BOOST_TEST(run(6) != first, "another seed draws other tokens");
  options.stop_ids = {first[3]};  // stops before the first occurrence of that token
  options.seed = 5;
  const Generation stopped = generate(*model, config, *backend, DType::F32, {1, 2, 3}, options);
  BOOST_TEST(stopped.stopped);
  BOOST_TEST(stopped.tokens.size() <= 3u);
}

BOOST_AUTO_TEST_CASE(bad_options_name_the_flag) {
  GenerationOptions options;
  options.top_p = 0.0;
  test::check_error_mentions([&] { check_generation_options(options); }, {"--top-p", "(0, 1]"});
  options.top_p = 1.5;
  test::check_error_mentions([&] { check_generation_options(options); }, {"--top-p"});
  options.top_p = 1.0;
  options.temperature = -0.5;
  test::check_error_mentions([&] { check_generation_options(options); }, {"--temperature", ">= 0"});
  options.temperature = 0.0;
  options.max_new_tokens = 0;
  test::check_error_mentions([&] { check_generation_options(options); }, {"--max-new-tokens"});
  SampleOptions samples;
  samples.every = 5;
  test::check_error_mentions([&] { check_sample_options(samples, true); }, {"--sample-every needs --sample-prompts"});
}

BOOST_AUTO_TEST_CASE(sample_prompt_files) {
  test::TempDir dir;
  const std::string plain = dir.write("prompts.txt", "Human: hi\n\n  \nHuman: bye\n");
  const std::string jsonl = dir.write("prompts.jsonl", "{\"prompt\": \"Human: hi\", \"chosen\": \"x\"}\n{\"prompt\": \"Human: bye\"}\n");
  const std::string empty = dir.write("empty.txt", "\n  \n");
  const std::vector<std::string> expected = {"Human: hi", "Human: bye"};
  BOOST_TEST(read_sample_prompts(plain) == expected);
  BOOST_TEST(read_sample_prompts(jsonl) == expected);
  test::check_error_mentions([&] { read_sample_prompts(empty); }, {empty, "holds no prompt"});
  test::check_error_mentions([&] { read_sample_prompts(dir.file("missing")); }, {"cannot open"});
  const std::string bad = dir.write("bad.jsonl", "{\"prompt\": \"a\"}\n{\"text\": \"b\"}\n");
  test::check_error_mentions([&] { read_sample_prompts(bad); }, {":2:", "\"prompt\""});
}

BOOST_AUTO_TEST_SUITE_END()
