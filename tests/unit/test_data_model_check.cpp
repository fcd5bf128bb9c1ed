// Tests of the data-vs-model check (data/data_model_check.h): a matching tokenizer file passes, a
// different one fails showing both hashes and both paths, a model without tokenizer.model (a
// random `zerotune init` model) is accepted, and a data vocabulary larger than the model's fails
// naming both directories and both sizes.
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <string>

#include "core/sha256.h"
#include "data/data_model_check.h"
#include "data/token_shards.h"
#include "test_util.h"

namespace {

using zt::test::TempDir;

// Data attributes as `zerotune prep` writes them for a tokenizer file holding `tokenizer_bytes`.
zt::ShardAttributes attributes_for(const std::string& tokenizer_bytes, int64_t vocab_size) {
  zt::ShardAttributes attrs;
  attrs.vocab_size = vocab_size;
  attrs.tokenizer_sha256 = zt::sha256_hex(tokenizer_bytes);
  attrs.max_seq_len = 512;
  return attrs;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(data_model_check)

BOOST_AUTO_TEST_CASE(matching_tokenizer_passes) {
  TempDir dir;
  std::filesystem::create_directories(dir.path / "model");
  dir.write("model/tokenizer.model", "tokenizer bytes v1");
  const zt::ShardAttributes attrs = attributes_for("tokenizer bytes v1", 32000);
  BOOST_CHECK_NO_THROW(zt::check_data_matches_model(attrs, dir.file("data"), dir.file("model"), 32000));
  BOOST_CHECK_NO_THROW(zt::check_data_matches_model(attrs, dir.file("data"), dir.file("model"), 32064));  // padded vocab
}

BOOST_AUTO_TEST_CASE(other_tokenizer_fails_with_both_hashes_and_paths) {
  TempDir dir;
  std::filesystem::create_directories(dir.path / "model");
  dir.write("model/tokenizer.model", "tokenizer bytes v2");
  const zt::ShardAttributes attrs = attributes_for("tokenizer bytes v1", 32000);
  zt::test::check_error_mentions(
      [&] { zt::check_data_matches_model(attrs, dir.file("data"), dir.file("model"), 32000); },
      {dir.file("data"), dir.file("model/tokenizer.model"), zt::sha256_hex("tokenizer bytes v1"),
       zt::sha256_hex("tokenizer bytes v2"), "another tokenizer"});
}

BOOST_AUTO_TEST_CASE(model_without_tokenizer_is_accepted) {
  TempDir dir;
  std::filesystem::create_directories(dir.path / "model");
  dir.write("model/config.json", "{}");
  const zt::ShardAttributes attrs = attributes_for("whatever tokenizer", 256);
  BOOST_CHECK_NO_THROW(zt::check_data_matches_model(attrs, dir.file("data"), dir.file("model"), 256));
}

BOOST_AUTO_TEST_CASE(larger_data_vocabulary_fails_naming_both) {
  TempDir dir;
  std::filesystem::create_directories(dir.path / "model");
  const zt::ShardAttributes attrs = attributes_for("t", 512);
  zt::test::check_error_mentions([&] { zt::check_data_matches_model(attrs, dir.file("data"), dir.file("model"), 256); },
                                 {dir.file("data"), dir.file("model"), "vocab_size 512", "vocab_size 256"});
}

BOOST_AUTO_TEST_CASE(tokenizer_hash_check_alone) {
  const zt::ShardAttributes attrs = attributes_for("abc", 100);
  BOOST_CHECK_NO_THROW(zt::check_tokenizer_matches_data(attrs, "/d", "/m/tokenizer.model", zt::sha256_hex("abc")));
  zt::test::check_error_mentions(
      [&] { zt::check_tokenizer_matches_data(attrs, "/d", "/m/tokenizer.model", std::string(64, 'f')); },
      {"/d", "/m/tokenizer.model", zt::sha256_hex("abc"), std::string(64, 'f')});
}

BOOST_AUTO_TEST_SUITE_END()
