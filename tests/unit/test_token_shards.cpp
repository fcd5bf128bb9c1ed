// Tests of the HDF5 token shards (data/token_shards.h): write/read round trip over several shards
// (global index, hyperslab reads across shard and chunk boundaries, attributes), deterministic
// bytes, split selection, every bad input's error naming the file and the problem, per-shard
// counts and target totals, and that reads hold the process-wide HDF5 lock.
#include <boost/test/unit_test.hpp>

#include <hdf5.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "data/token_shards.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;
using zt::ShardAttributes;
using zt::TokenDataset;
using zt::TokenSample;

// A fresh directory under the system temp dir, removed with everything in it at the end.
using zt::test::TempDir;

ShardAttributes test_attributes() {
  ShardAttributes attrs;
  attrs.vocab_size = 1000;
  attrs.bos_id = 1;
  attrs.eos_id = 2;
  attrs.pad_id = 0;
  attrs.tokenizer_sha256 = std::string(64, 'a');
  attrs.max_seq_len = 40000;
  attrs.split = "train";
  attrs.source = "unit-test.jsonl";
  return attrs;
}

// A sample of `length` tokens whose values encode (seed, position), mask 0 on the first third.
TokenSample make_sample(int seed, int length) {
  TokenSample sample;
  for (int t = 0; t < length; ++t) {
    sample.tokens.push_back((seed * 131 + t * 7) % 997 + 3);
    sample.loss_mask.push_back(t >= length / 3 ? 1 : 0);
  }
  return sample;
}

std::vector<TokenSample> make_samples(int first_seed, const std::vector<int>& lengths) {
  std::vector<TokenSample> samples;
  for (size_t i = 0; i < lengths.size(); ++i) samples.push_back(make_sample(first_seed + int(i), lengths[i]));
  return samples;
}

// Writes a one-shard dataset of three short samples at `path`.
void write_small_shard(const std::string& path, ShardAttributes attrs = test_attributes()) {
  zt::write_token_shard(path, make_samples(0, {5, 3, 8}), attrs);
}

// The message of the zt::Error `action` throws; fails the test when it throws none.
std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const zt::Error& error) {
    return error.what();
  }
  BOOST_ERROR("expected a zt::Error, none was thrown");
  return "";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

#define CHECK_MESSAGE_HAS(message, part) \
  BOOST_TEST(contains(message, part), "message '" << (message) << "' lacks '" << (part) << "'")

// --- HDF5 surgery on a written shard, to make each kind of bad file -------------------------

// Opens a shard read-write; closes it at the end of the scope.
struct OpenForEdit {
  hid_t file;
  explicit OpenForEdit(const std::string& path) : file(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT)) {
    BOOST_REQUIRE(file >= 0);
  }
  ~OpenForEdit() { H5Fclose(file); }
};

void delete_object(const std::string& path, const char* name, bool is_attribute) {
  OpenForEdit edit(path);
  BOOST_REQUIRE((is_attribute ? H5Adelete(edit.file, name) : H5Ldelete(edit.file, name, H5P_DEFAULT)) >= 0);
}

void replace_string_attribute(const std::string& path, const char* name, const std::string& value) {
  OpenForEdit edit(path);
  BOOST_REQUIRE(H5Adelete(edit.file, name) >= 0);
  const hid_t type = H5Tcopy(H5T_C_S1);
  BOOST_REQUIRE(H5Tset_size(type, value.size() + 1) >= 0);  // a fixed-length string this time
  const hid_t space = H5Screate(H5S_SCALAR);
  const hid_t attribute = H5Acreate2(edit.file, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  BOOST_REQUIRE(attribute >= 0);
  BOOST_REQUIRE(H5Awrite(attribute, type, value.c_str()) >= 0);
  H5Aclose(attribute);
  H5Sclose(space);
  H5Tclose(type);
}

void replace_int_attribute(const std::string& path, const char* name, int64_t value) {
  OpenForEdit edit(path);
  BOOST_REQUIRE(H5Adelete(edit.file, name) >= 0);
  const hid_t space = H5Screate(H5S_SCALAR);
  const hid_t attribute = H5Acreate2(edit.file, name, H5T_STD_I32LE, space, H5P_DEFAULT, H5P_DEFAULT);
  BOOST_REQUIRE(attribute >= 0);
  BOOST_REQUIRE(H5Awrite(attribute, H5T_NATIVE_INT64, &value) >= 0);
  H5Aclose(attribute);
  H5Sclose(space);
}

// Replaces dataset `name` by a 1-D dataset of `values` stored as `file_type`.
template <class Value>
void replace_dataset(const std::string& path, const char* name, hid_t file_type, hid_t memory_type,
                     const std::vector<Value>& values) {
  OpenForEdit edit(path);
  BOOST_REQUIRE(H5Ldelete(edit.file, name, H5P_DEFAULT) >= 0);
  const hsize_t count = values.size();
  const hid_t space = H5Screate_simple(1, &count, nullptr);
  const hid_t dataset = H5Dcreate2(edit.file, name, file_type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  BOOST_REQUIRE(dataset >= 0);
  BOOST_REQUIRE(H5Dwrite(dataset, memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()) >= 0);
  H5Dclose(dataset);
  H5Sclose(space);
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

BOOST_AUTO_TEST_SUITE(token_shards)

BOOST_AUTO_TEST_CASE(round_trip_over_several_shards) {
  TempDir dir;
  // Three shards; sample 4 (20000 tokens) spans several 4Ki-element chunks.
  const std::vector<std::vector<int>> lengths = {{5, 1, 17}, {20000}, {2, 9, 4, 33}};
  std::vector<TokenSample> all;
  for (size_t s = 0; s < lengths.size(); ++s) {
    const std::vector<TokenSample> samples = make_samples(int(all.size()), lengths[s]);
    zt::write_token_shard(dir.file("train-0000" + std::to_string(s) + ".h5"), samples, test_attributes());
    all.insert(all.end(), samples.begin(), samples.end());
  }
  BOOST_TEST(!fs::exists(dir.file("train-00000.h5.tmp")));

  const TokenDataset dataset = TokenDataset::open(dir.path.string());
  BOOST_TEST(dataset.num_samples() == 8);
  BOOST_TEST(dataset.longest_sample() == 20000);
  BOOST_TEST(dataset.shard_paths().size() == 3u);
  BOOST_TEST(dataset.shard_paths()[2] == dir.file("train-00002.h5"));
  const ShardAttributes& attrs = dataset.attributes();
  BOOST_TEST(attrs.vocab_size == 1000);
  BOOST_TEST(attrs.bos_id == 1);
  BOOST_TEST(attrs.eos_id == 2);
  BOOST_TEST(attrs.pad_id == 0);
  BOOST_TEST(attrs.tokenizer_sha256 == std::string(64, 'a'));
  BOOST_TEST(attrs.max_seq_len == 40000);
  BOOST_TEST(attrs.split == "train");
  BOOST_TEST(attrs.source == "unit-test.jsonl");

  // Read in reverse so every read is a random access (also across shard boundaries).
  for (int64_t i = dataset.num_samples() - 1; i >= 0; --i) {
    const TokenSample sample = dataset.read_sample(i);
    BOOST_TEST(dataset.sample_length(i) == int64_t(all[size_t(i)].tokens.size()));
    BOOST_TEST(sample.tokens == all[size_t(i)].tokens, "tokens of sample " << i);
    BOOST_TEST(sample.loss_mask == all[size_t(i)].loss_mask, "loss_mask of sample " << i);
    BOOST_TEST(dataset.read_loss_mask(i) == all[size_t(i)].loss_mask);
  }
  CHECK_MESSAGE_HAS(error_of([&] { dataset.read_sample(8); }), "sample index 8 is outside [0, 8)");
  CHECK_MESSAGE_HAS(error_of([&] { dataset.sample_length(-1); }), dir.path.string());

  // A single shard file opens on its own too.
  const TokenDataset single = TokenDataset::open(dir.file("train-00001.h5"));
  BOOST_TEST(single.num_samples() == 1);
  BOOST_TEST(single.read_sample(0).tokens == all[3].tokens);
}

BOOST_AUTO_TEST_CASE(same_samples_give_the_same_bytes) {
  TempDir dir;
  const std::vector<TokenSample> samples = make_samples(3, {10, 300, 7});
  zt::write_token_shard(dir.file("a.h5"), samples, test_attributes());
  // Past a one-second boundary, so a timestamp would differ.
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  zt::write_token_shard(dir.file("b.h5"), samples, test_attributes());
  const std::string first = read_bytes(dir.file("a.h5"));
  BOOST_TEST(first.size() > 0u);
  BOOST_TEST((first == read_bytes(dir.file("b.h5"))));
}

BOOST_AUTO_TEST_CASE(split_names_from_file_names) {
  BOOST_TEST(zt::shard_split_from_file_name("train-00003.h5") == "train");
  BOOST_TEST(zt::shard_split_from_file_name("my-eval-00000.h5") == "my-eval");
  BOOST_TEST(zt::shard_split_from_file_name("extra.h5") == "extra");
  BOOST_TEST(zt::shard_split_from_file_name("train-final.h5") == "train-final");
}

BOOST_AUTO_TEST_CASE(split_selection) {
  TempDir dir;
  write_small_shard(dir.file("train-00000.h5"));
  write_small_shard(dir.file("train-00001.h5"));
  ShardAttributes test_split = test_attributes();
  test_split.split = "test";
  zt::write_token_shard(dir.file("test-00000.h5"), make_samples(9, {4}), test_split);
  { std::ofstream(dir.file("notes.txt")) << "not a shard, ignored"; }

  const std::string ambiguous = error_of([&] { TokenDataset::open(dir.path.string()); });
  CHECK_MESSAGE_HAS(ambiguous, dir.path.string());
  CHECK_MESSAGE_HAS(ambiguous, "several splits (test, train)");
  BOOST_TEST(TokenDataset::open(dir.path.string(), "train").num_samples() == 6);
  BOOST_TEST(TokenDataset::open(dir.path.string(), "test").num_samples() == 1);
  const std::string missing = error_of([&] { TokenDataset::open(dir.path.string(), "eval"); });
  CHECK_MESSAGE_HAS(missing, "no shards of split 'eval'");
  CHECK_MESSAGE_HAS(missing, "splits present: test, train");
}

BOOST_AUTO_TEST_CASE(empty_or_missing_directory) {
  TempDir dir;
  const std::string empty = error_of([&] { TokenDataset::open(dir.path.string()); });
  CHECK_MESSAGE_HAS(empty, dir.path.string());
  CHECK_MESSAGE_HAS(empty, "holds no token shards");
  const std::string missing = dir.file("nowhere");
  CHECK_MESSAGE_HAS(error_of([&] { TokenDataset::open(missing); }), missing + ": no such file or directory");
}

BOOST_AUTO_TEST_CASE(not_an_hdf5_file) {
  TempDir dir;
  const std::string path = dir.file("train-00000.h5");
  { std::ofstream(path) << "this is text, not HDF5\n"; }
  const std::string message = error_of([&] { TokenDataset::open(dir.path.string()); });
  CHECK_MESSAGE_HAS(message, path + ": cannot open as an HDF5 file");
}

BOOST_AUTO_TEST_CASE(wrong_or_missing_format_attribute) {
  TempDir dir;
  const std::string path = dir.file("train-00000.h5");
  write_small_shard(path);
  replace_string_attribute(path, "format", "some-other-format");
  CHECK_MESSAGE_HAS(error_of([&] { TokenDataset::open(path); }),
                    path + ": not a zerotune token shard (attribute 'format' is 'some-other-format', "
                           "expected 'zerotune-tokens')");
  delete_object(path, "format", true);
  CHECK_MESSAGE_HAS(error_of([&] { TokenDataset::open(path); }),
                    path + ": not a zerotune token shard (attribute 'format' is missing, expected 'zerotune-tokens')");
}

BOOST_AUTO_TEST_CASE(fixed_length_string_attributes_are_read) {
  // h5py writes numpy bytes as fixed-length strings; the reader accepts them as well.
  TempDir dir;
  const std::string path = dir.file("train-00000.h5");
  write_small_shard(path);
  replace_string_attribute(path, "format", "zerotune-tokens");
  replace_string_attribute(path, "source", "fixed.jsonl");
  BOOST_TEST(TokenDataset::open(path).attributes().source == "fixed.jsonl");
}

BOOST_AUTO_TEST_CASE(unsupported_version_and_missing_attribute) {
  TempDir dir;
  const std::string path = dir.file("train-00000.h5");
  write_small_shard(path);
  replace_int_attribute(path, "version", 3);
  CHECK_MESSAGE_HAS(error_of([&] { TokenDataset::open(path); }), path + ": token shard version 3 is not supported");
  replace_int_attribute(path, "version", 2);  // version 2 is a pair shard (record="pair"): this one is not
  CHECK_MESSAGE_HAS(error_of([&] { TokenDataset::open(path); }), path + ": a version-2 token shard must have the "
                    "attribute record=\"pair\"");
  replace_int_attribute(path, "version", 1);  // an int32 attribute is read as well
  BOOST_TEST(TokenDataset::open(path).num_samples() == 3);
  delete_object(path, "vocab_size", true);
  CHECK_MESSAGE_HAS(error_of([&] { TokenDataset::open(path); }), path + ": attribute 'vocab_size' is missing");
}

BOOST_AUTO_TEST_CASE(missing_or_mistyped_datasets) {
  TempDir dir;
  const std::string path = dir.file("train-00000.h5");
  write_small_shard(path);
  delete_object(path, "loss_mask", false);
  CHECK_MESSAGE_HAS(error_of([&] { TokenDataset::open(path); }), path + ": dataset 'loss_mask' is missing");

  write_small_shard(path);
  replace_dataset(path, "tokens", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, std::vector<float>(16, 1.0f));
  CHECK_MESSAGE_HAS(error_of([&] { TokenDataset::open(path); }),
                    path + ": dataset 'tokens' has type float32, expected int32");

  write_small_shard(path);
  replace_dataset(path, "offsets", H5T_STD_I32LE, H5T_NATIVE_INT32, std::vector<int32_t>{0, 5, 8, 16});
  CHECK_MESSAGE_HAS(error_of([&] { TokenDataset::open(path); }),
                    path + ": dataset 'offsets' has type int32, expected int64");

  write_small_shard(path);
  replace_dataset(path, "loss_mask", H5T_STD_U8LE, H5T_NATIVE_UINT8, std::vector<uint8_t>(15, 1));
  CHECK_MESSAGE_HAS(error_of([&] { TokenDataset::open(path); }),
                    path + ": dataset 'loss_mask' has 15 values but 'tokens' has 16");
}

BOOST_AUTO_TEST_CASE(inconsistent_offsets) {
  TempDir dir;
  const std::string path = dir.file("train-00000.h5");
  write_small_shard(path);  // lengths 5, 3, 8: offsets 0, 5, 8, 16
  replace_dataset(path, "offsets", H5T_STD_I64LE, H5T_NATIVE_INT64, std::vector<int64_t>{0, 9, 8, 16});
  CHECK_MESSAGE_HAS(error_of([&] { TokenDataset::open(path); }),
                    path + ": offsets are not strictly increasing (offsets[1]=9, offsets[2]=8)");
  replace_dataset(path, "offsets", H5T_STD_I64LE, H5T_NATIVE_INT64, std::vector<int64_t>{0, 5, 8, 15});
  CHECK_MESSAGE_HAS(error_of([&] { TokenDataset::open(path); }),
                    path + ": the last offset is 15 but dataset 'tokens' has 16 values");
  replace_dataset(path, "offsets", H5T_STD_I64LE, H5T_NATIVE_INT64, std::vector<int64_t>{1, 5, 8, 16});
  CHECK_MESSAGE_HAS(error_of([&] { TokenDataset::open(path); }), path + ": offsets[0] is 1, expected 0");
  replace_int_attribute(path, "max_seq_len", 4);
  replace_dataset(path, "offsets", H5T_STD_I64LE, H5T_NATIVE_INT64, std::vector<int64_t>{0, 5, 8, 16});
  CHECK_MESSAGE_HAS(error_of([&] { TokenDataset::open(path); }),
                    path + ": sample 0 has 5 tokens, more than max_seq_len=4");
}

BOOST_AUTO_TEST_CASE(shards_that_disagree) {
  TempDir dir;
  const std::string first = dir.file("train-00000.h5"), second = dir.file("train-00001.h5");
  write_small_shard(first);
  ShardAttributes other = test_attributes();
  other.vocab_size = 1001;
  write_small_shard(second, other);
  const std::string vocab = error_of([&] { TokenDataset::open(dir.path.string()); });
  CHECK_MESSAGE_HAS(vocab, first + " and " + second + " disagree on 'vocab_size' (1000 vs 1001)");

  other = test_attributes();
  other.tokenizer_sha256 = std::string(64, 'b');
  write_small_shard(second, other);
  CHECK_MESSAGE_HAS(error_of([&] { TokenDataset::open(dir.path.string()); }),
                    first + " and " + second + " disagree on 'tokenizer_sha256'");

  other = test_attributes();
  other.pad_id = 5;
  write_small_shard(second, other);
  CHECK_MESSAGE_HAS(error_of([&] { TokenDataset::open(dir.path.string()); }),
                    first + " and " + second + " disagree on 'pad_id' (0 vs 5)");
}

// Found when the data is opened (a scan of every id), not at the step that reads the sample.
BOOST_AUTO_TEST_CASE(token_ids_out_of_range_are_reported_at_open) {
  TempDir dir;
  const std::string path = dir.file("train-00000.h5");
  write_small_shard(path);  // samples of 5, 3, 8 tokens
  std::vector<int32_t> tokens(16, 7);
  tokens[6] = 1000;   // sample 1, position 1: == vocab_size
  tokens[15] = -3;    // sample 2, position 7
  replace_dataset(path, "tokens", H5T_STD_I32LE, H5T_NATIVE_INT32, tokens);
  CHECK_MESSAGE_HAS(error_of([&] { TokenDataset::open(path); }),
                    path + ": sample 1 has token id 1000 at position 1, outside [0, vocab_size=1000)");
  tokens[6] = 7;
  replace_dataset(path, "tokens", H5T_STD_I32LE, H5T_NATIVE_INT32, tokens);
  CHECK_MESSAGE_HAS(error_of([&] { TokenDataset::open(path); }), ": sample 2 has token id -3 at position 7");
}

BOOST_AUTO_TEST_CASE(writer_rejects_bad_samples) {
  TempDir dir;
  const std::string path = dir.file("train-00000.h5");
  std::vector<TokenSample> samples = make_samples(0, {4, 4});
  samples[1].tokens[2] = 1000;
  CHECK_MESSAGE_HAS(error_of([&] { zt::write_token_shard(path, samples, test_attributes()); }),
                    path + ": sample 1 has token id 1000 at position 2, outside [0, vocab_size=1000)");
  samples = make_samples(0, {4, 4});
  samples[0].loss_mask.pop_back();
  CHECK_MESSAGE_HAS(error_of([&] { zt::write_token_shard(path, samples, test_attributes()); }),
                    path + ": sample 0 has 4 tokens but 3 loss_mask values");
  samples = make_samples(0, {4, 0});
  CHECK_MESSAGE_HAS(error_of([&] { zt::write_token_shard(path, samples, test_attributes()); }),
                    path + ": sample 1 is empty");
  ShardAttributes short_limit = test_attributes();
  short_limit.max_seq_len = 3;
  CHECK_MESSAGE_HAS(error_of([&] { zt::write_token_shard(path, make_samples(0, {4}), short_limit); }),
                    path + ": sample 0 has 4 tokens, more than max_seq_len=3");
  CHECK_MESSAGE_HAS(error_of([&] { zt::write_token_shard(path, {}, test_attributes()); }),
                    path + ": a token shard must hold at least one sample");
  ShardAttributes bad_pad = test_attributes();
  bad_pad.pad_id = -1;
  CHECK_MESSAGE_HAS(error_of([&] { zt::write_token_shard(path, make_samples(0, {4}), bad_pad); }),
                    path + ": pad_id -1 is outside [0, vocab_size=1000)");
  BOOST_TEST(!fs::exists(path));
  CHECK_MESSAGE_HAS(error_of([&] { zt::write_token_shard(dir.file("no/such/dir.h5"), make_samples(0, {4}),
                                                         test_attributes()); }),
                    dir.file("no/such/dir.h5.tmp") + ": HDF5 failed to create the file");
}

// shard_infos and total_target_tokens: per-shard counts from the offsets, and the training
// targets (loss_mask[1:] of every sample; a first-position 1 is not a target), also across the
// 1Mi-element blocks total_target_tokens reads at a time.
BOOST_AUTO_TEST_CASE(shard_infos_and_target_counts) {
  TempDir dir;
  // make_sample: mask 1 from position length/3 on. Sample lengths 6 (targets 4), 1 (0),
  // 1200000 (800000) | 9 (6); plus a sample whose mask[0] is 1 (not counted): 3 tokens, 2 targets.
  zt::write_token_shard(dir.file("train-00000.h5"), make_samples(0, {6, 1, 1200000}), [] {
    ShardAttributes attrs = test_attributes();
    attrs.max_seq_len = 2000000;
    return attrs;
  }());
  std::vector<TokenSample> second = make_samples(5, {9});
  second.push_back({{5, 6, 7}, {1, 1, 1}});
  zt::write_token_shard(dir.file("train-00001.h5"), second, test_attributes());

  const TokenDataset dataset = TokenDataset::open(dir.path.string());
  const std::vector<zt::ShardInfo> infos = dataset.shard_infos();
  BOOST_REQUIRE(infos.size() == 2u);
  BOOST_TEST(infos[0].path == dir.file("train-00000.h5"));
  BOOST_TEST(infos[0].first_sample == 0);
  BOOST_TEST(infos[0].num_samples == 3);
  BOOST_TEST(infos[0].num_tokens == 1200007);
  BOOST_TEST(infos[1].first_sample == 3);
  BOOST_TEST(infos[1].num_samples == 2);
  BOOST_TEST(infos[1].num_tokens == 12);
  BOOST_TEST(dataset.total_target_tokens() == 4 + 0 + 800000 + 6 + 2);
}

// Every HDF5 call of the reader holds hdf5_mutex(): while another thread holds it, a read (and
// an open) waits, and goes on once it is released.
BOOST_AUTO_TEST_CASE(hdf5_calls_hold_the_process_wide_lock) {
  TempDir dir;
  write_small_shard(dir.file("train-00000.h5"));
  const TokenDataset dataset = TokenDataset::open(dir.path.string());
  for (const bool opening : {false, true}) {
    std::atomic<bool> done{false};
    int64_t result = 0;  // samples opened or tokens read (Boost.Test checks stay on this thread)
    std::unique_lock<std::recursive_mutex> held(zt::hdf5_mutex());
    std::thread reader([&] {
      result = opening ? TokenDataset::open(dir.path.string()).num_samples()
                       : static_cast<int64_t>(dataset.read_sample(2).tokens.size());
      done = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    BOOST_TEST(!done.load(), (opening ? "open" : "read_sample") << " did not wait for the HDF5 lock");
    held.unlock();
    reader.join();
    BOOST_TEST(done.load());
    BOOST_TEST(result == (opening ? 3 : 8));
  }
}

BOOST_AUTO_TEST_SUITE_END()
