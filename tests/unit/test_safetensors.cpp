// Tests of the safetensors reader/writer (model/safetensors.h): round trips in F32/BF16/F16,
// metadata, HF-style sharding with the index, and a clear error naming the file for every
// damaged input (truncated data, bad header length, bad JSON, wrong shape, missing shard...).
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/error.h"
#include "model/safetensors.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;

using zt::test::TempDir;

using zt::test::check_error_mentions;

// A file with a hand-made header: declared_length (8 bytes LE), header text, then data bytes.
void write_raw(const std::string& path, uint64_t declared_length, const std::string& header, size_t data_bytes) {
  std::ofstream out(path, std::ios::binary);
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>(declared_length >> (8 * i)));
  out << header << std::string(data_bytes, '\0');
}

void write_raw(const std::string& path, const std::string& header, size_t data_bytes) {
  write_raw(path, header.size(), header, data_bytes);
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Values exact in bf16 and fp16 (small integers and quarters).
std::vector<float> exact_values(size_t count) {
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i) values[i] = (static_cast<float>(i % 37) - 18.0f) * 0.25f;
  return values;
}

// Encodes fp32 values as the 16-bit patterns of `dtype` (the way a caller holding bf16 data has it).
std::vector<uint16_t> to_half(const std::vector<float>& values, zt::DType dtype) {
  std::vector<uint16_t> bits(values.size());
  for (size_t i = 0; i < values.size(); ++i)
    bits[i] = dtype == zt::DType::BF16 ? zt::float_to_bf16(values[i]) : zt::float_to_fp16(values[i]);
  return bits;
}

nlohmann::json read_json(const std::string& path) { return nlohmann::json::parse(read_bytes(path)); }

}  // namespace

BOOST_AUTO_TEST_SUITE(safetensors)

BOOST_AUTO_TEST_CASE(round_trip_f32_bf16_f16_with_metadata) {
  TempDir dir;
  const std::vector<float> values = exact_values(6 * 5);
  const std::vector<uint16_t> bf16 = to_half(values, zt::DType::BF16);
  const std::vector<uint16_t> fp16 = to_half(values, zt::DType::F16);
  const float scalar = 3.5f;
  const std::string path = dir.file("t.safetensors");
  zt::write_safetensors(path,
                        {{"a.f32", {6, 5}, values.data(), zt::DType::F32, zt::DType::F32},
                         {"b.bf16", {5, 6}, bf16.data(), zt::DType::BF16, zt::DType::BF16},
                         {"c.f16", {30}, fp16.data(), zt::DType::F16, zt::DType::F16},
                         {"d.scalar", {}, &scalar, zt::DType::F32, zt::DType::F32},
                         {"e.empty", {0, 4}, nullptr, zt::DType::F32, zt::DType::F32}},
                        {{"format", "pt"}, {"note", "zerotune"}});
  BOOST_TEST(!fs::exists(path + ".tmp"));

  // Layout: the header length is a multiple of 8 and the offsets follow entry order.
  const std::string bytes = read_bytes(path);
  uint64_t header_length = 0;
  for (int i = 7; i >= 0; --i) header_length = header_length << 8 | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  BOOST_TEST(header_length % 8 == 0);
  BOOST_TEST(bytes.size() == 8 + header_length + 30 * 4 + 30 * 2 + 30 * 2 + 4);

  zt::SafetensorsFile file(path);
  BOOST_TEST(file.names() == (std::vector<std::string>{"a.f32", "b.bf16", "c.f16", "d.scalar", "e.empty"}));
  BOOST_TEST(file.metadata().at("format") == "pt");
  BOOST_TEST(file.metadata().at("note") == "zerotune");
  BOOST_TEST(file.info("a.f32").dtype == "F32");
  BOOST_TEST(file.info("a.f32").shape == (std::vector<int64_t>{6, 5}));
  BOOST_TEST(file.info("a.f32").offset == 0u);
  BOOST_TEST(file.info("b.bf16").dtype == "BF16");
  BOOST_TEST(file.info("b.bf16").offset == 120u);
  BOOST_TEST(file.info("b.bf16").bytes == 60u);
  BOOST_TEST(file.info("c.f16").dtype == "F16");
  BOOST_TEST(file.info("d.scalar").shape.empty());
  BOOST_TEST(file.info("e.empty").bytes == 0u);

  for (const char* name : {"a.f32", "b.bf16", "c.f16"}) {
    std::vector<float> back(values.size(), -99.0f);
    file.read_as_f32(name, back.data());
    BOOST_TEST(back == values, name);
  }
  std::vector<uint16_t> bf16_back(values.size());
  file.read("b.bf16", zt::DType::BF16, bf16_back.data());
  BOOST_TEST(bf16_back == bf16);
  std::vector<uint16_t> f32_as_f16(values.size());
  file.read("a.f32", zt::DType::F16, f32_as_f16.data());
  BOOST_TEST(f32_as_f16 == fp16);
  float scalar_back = 0.0f;
  file.read_as_f32("d.scalar", &scalar_back);
  BOOST_TEST(scalar_back == 3.5f);
}

BOOST_AUTO_TEST_CASE(fp32_data_stored_as_bf16_and_fp16_rounds_to_nearest_even) {
  TempDir dir;
  std::vector<float> values(3000);  // more than one conversion chunk is not needed: values vary widely
  for (size_t i = 0; i < values.size(); ++i) values[i] = std::sin(static_cast<float>(i) * 0.37f) * static_cast<float>(i);
  const std::string path = dir.file("conv.safetensors");
  zt::write_safetensors(path, {{"x", {3000}, values.data(), zt::DType::F32, zt::DType::BF16},
                               {"y", {3000}, values.data(), zt::DType::F32, zt::DType::F16}});
  zt::SafetensorsFile file(path);
  BOOST_TEST(file.info("x").dtype == "BF16");
  BOOST_TEST(file.info("y").dtype == "F16");
  std::vector<float> x(values.size()), y(values.size());
  file.read_as_f32("x", x.data());
  file.read_as_f32("y", y.data());
  for (size_t i = 0; i < values.size(); ++i) {
    BOOST_TEST(x[i] == zt::round_to(zt::DType::BF16, values[i]));
    BOOST_TEST(y[i] == zt::round_to(zt::DType::F16, values[i]));
  }
}

BOOST_AUTO_TEST_CASE(sharded_round_trip_through_the_index_like_transformers) {
  TempDir dir;
  // Sizes in bytes 24, 24, 8, 24, 8, 8 with a 40-byte limit: transformers' rule gives the shards
  // [a], [b c], [d e f] (a new shard only when the next tensor would go over the limit).
  const std::vector<float> data = exact_values(6);
  std::vector<zt::SafetensorsEntry> entries;
  const std::vector<std::pair<std::string, int64_t>> sizes = {{"a", 6}, {"b", 6}, {"c", 2}, {"d", 6}, {"e", 2}, {"f", 2}};
  for (const auto& [name, count] : sizes) entries.push_back({name, {count}, data.data(), zt::DType::F32, zt::DType::F32});
  entries[0].shape = {6, 1};
  std::vector<std::string> files = zt::write_sharded_safetensors(dir.path.string(), entries, 40);
  BOOST_TEST(files == (std::vector<std::string>{"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                                                "model-00003-of-00003.safetensors", "model.safetensors.index.json"}));
  const nlohmann::json index = read_json(dir.file("model.safetensors.index.json"));
  BOOST_TEST(index["metadata"]["total_size"].get<int64_t>() == 24 + 24 + 8 + 24 + 8 + 8);
  BOOST_TEST(index["weight_map"]["a"] == "model-00001-of-00003.safetensors");
  BOOST_TEST(index["weight_map"]["c"] == "model-00002-of-00003.safetensors");
  BOOST_TEST(index["weight_map"]["f"] == "model-00003-of-00003.safetensors");
  BOOST_TEST(zt::SafetensorsFile(dir.file("model-00002-of-00003.safetensors")).metadata().at("format") == "pt");

  zt::ModelWeights weights(dir.path.string());
  BOOST_TEST(weights.source() == dir.file("model.safetensors.index.json"));
  BOOST_TEST(weights.names() == (std::vector<std::string>{"a", "b", "c", "d", "e", "f"}));
  BOOST_TEST(weights.shape("a") == (std::vector<int64_t>{6, 1}));
  BOOST_TEST(weights.file_of("e").path() == dir.file("model-00003-of-00003.safetensors"));
  std::vector<float> back(6);
  weights.read_f32("d", back.data(), {6});
  BOOST_TEST(back == data);
  std::vector<float> two(2);
  weights.read_f32("f", two.data(), {2});
  BOOST_TEST(two == (std::vector<float>{data[0], data[1]}));

  // A later save that fits in one file replaces the shards and the index (as save_pretrained).
  files = zt::write_sharded_safetensors(dir.path.string(), {entries[1]}, 1000);
  BOOST_TEST(files == (std::vector<std::string>{"model.safetensors"}));
  BOOST_TEST(!fs::exists(dir.file("model.safetensors.index.json")));
  BOOST_TEST(!fs::exists(dir.file("model-00001-of-00003.safetensors")));
  zt::ModelWeights single(dir.path.string());
  BOOST_TEST(single.source() == dir.file("model.safetensors"));
  BOOST_TEST(single.names() == (std::vector<std::string>{"b"}));
  BOOST_TEST(zt::SafetensorsFile(dir.file("model.safetensors")).metadata().at("format") == "pt");
}

BOOST_AUTO_TEST_CASE(wrong_shape_and_missing_tensor_name_the_file) {
  TempDir dir;
  const std::vector<float> data = exact_values(12);
  zt::write_sharded_safetensors(dir.path.string(), {{"w", {3, 4}, data.data(), zt::DType::F32, zt::DType::F32}});
  zt::ModelWeights weights(dir.path.string());
  std::vector<float> out(12);
  const std::string file = dir.file("model.safetensors");
  check_error_mentions([&] { weights.read_f32("w", out.data(), {4, 3}); },
              {file, ": tensor w has shape [3, 4] but the model config needs [4, 3]"});
  check_error_mentions([&] { weights.read_f32("lm_head.weight", out.data(), {3, 4}); }, {file, "lm_head.weight"});
  check_error_mentions([&] { weights.info("nope"); }, {file, "nope"});
}

BOOST_AUTO_TEST_CASE(base_model_keys_without_the_causal_lm_prefix) {
  // facebook/opt-* files hold "decoder.embed_tokens.weight" (saved from OPTModel); transformers
  // loads them into OPTForCausalLM's "model.decoder.embed_tokens.weight", and so does zerotune.
  TempDir dir;
  const std::vector<float> data = exact_values(4);
  zt::write_sharded_safetensors(dir.path.string(), {{"decoder.x", {4}, data.data(), zt::DType::F32, zt::DType::F32},
                                                    {"model.y", {4}, data.data(), zt::DType::F32, zt::DType::F32}});
  zt::ModelWeights weights(dir.path.string());
  BOOST_TEST(weights.stored_name("model.decoder.x") == "decoder.x");
  BOOST_TEST(weights.stored_name("model.y") == "model.y");
  BOOST_TEST(weights.stored_name("model.z").empty());
  BOOST_TEST(weights.stored_name("decoder.y").empty());
}

BOOST_AUTO_TEST_CASE(truncated_file) {
  TempDir dir;
  const std::vector<float> data = exact_values(16);
  const std::string path = dir.file("model.safetensors");
  zt::write_safetensors(path, {{"x", {4, 4}, data.data(), zt::DType::F32, zt::DType::F32}});
  fs::resize_file(path, fs::file_size(path) - 10);
  check_error_mentions([&] { zt::SafetensorsFile file(path); },
              {path, ": truncated: tensor x needs bytes [0,64) but the data section has only 54 bytes"});
  check_error_mentions([&] { zt::ModelWeights weights(dir.path.string()); }, {path, "truncated"});
}

BOOST_AUTO_TEST_CASE(bad_header_length_json_and_entries) {
  TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  write_raw(path, 1000, "{}", 0);
  check_error_mentions([&] { zt::SafetensorsFile file(path); }, {path, "header length 1000", "beyond the end of the file"});
  { std::ofstream(path, std::ios::binary) << "abc"; }
  check_error_mentions([&] { zt::SafetensorsFile file(path); }, {path, "too short"});
  write_raw(path, "{\"x\": {\"dtype\": ", 0);
  check_error_mentions([&] { zt::SafetensorsFile file(path); }, {path, "invalid safetensors header JSON"});
  write_raw(path, "[1, 2]", 0);
  check_error_mentions([&] { zt::SafetensorsFile file(path); }, {path, "not a JSON object"});
  write_raw(path, R"({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})", 8);
  check_error_mentions([&] { zt::SafetensorsFile file(path); }, {path, "tensor x", "need 8 bytes", "[0, 4]"});
  write_raw(path, R"({"x": {"dtype": "Q7", "shape": [2], "data_offsets": [0, 8]}})", 8);
  check_error_mentions([&] { zt::SafetensorsFile file(path); }, {path, "tensor x", "unknown dtype 'Q7'"});
  write_raw(path, R"({"x": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", 8);
  check_error_mentions([&] { zt::SafetensorsFile file(path); }, {path, "tensor x", "shape"});
  write_raw(path, R"({"x": {"dtype": "F32", "shape": [2]}})", 8);
  check_error_mentions([&] { zt::SafetensorsFile file(path); }, {path, "tensor x", "data_offsets"});
  write_raw(path, R"({"__metadata__": {"format": 1}})", 0);
  check_error_mentions([&] { zt::SafetensorsFile file(path); }, {path, "__metadata__", "format"});

  // A dtype the format defines but zerotune does not read as floats: the file opens, reading fails.
  write_raw(path, R"({"x": {"dtype": "F64", "shape": [2], "data_offsets": [0, 16]}})", 16);
  zt::SafetensorsFile f64(path);
  BOOST_TEST(f64.info("x").bytes == 16u);
  std::vector<float> out(2);
  check_error_mentions([&] { f64.read_as_f32("x", out.data()); }, {path, "tensor x", "F64"});
}

BOOST_AUTO_TEST_CASE(broken_model_directories) {
  TempDir dir;
  check_error_mentions([&] { zt::ModelWeights weights(dir.path.string()); },
              {dir.path.string(), "model.safetensors", "model.safetensors.index.json"});

  const std::vector<float> data = exact_values(8);
  zt::write_sharded_safetensors(dir.path.string(),
                                {{"a", {8}, data.data(), zt::DType::F32, zt::DType::BF16},
                                 {"b", {8}, data.data(), zt::DType::F32, zt::DType::BF16}},
                                16);
  const std::string index_path = dir.file("model.safetensors.index.json");
  const nlohmann::json index = read_json(index_path);

  // A name in the index that its shard does not hold.
  nlohmann::json extra = index;
  extra["weight_map"]["c"] = "model-00001-of-00002.safetensors";
  std::ofstream(index_path) << extra.dump();
  check_error_mentions([&] { zt::ModelWeights weights(dir.path.string()); },
              {index_path, "tensor c", "model-00001-of-00002.safetensors"});

  // Invalid index JSON.
  std::ofstream(index_path) << "{\"weight_map\": ";
  check_error_mentions([&] { zt::ModelWeights weights(dir.path.string()); }, {index_path, "invalid JSON"});

  // A shard named in the index is gone.
  std::ofstream(index_path) << index.dump();
  fs::remove(dir.file("model-00002-of-00002.safetensors"));
  check_error_mentions([&] { zt::ModelWeights weights(dir.path.string()); },
              {index_path, "model-00002-of-00002.safetensors", "tensor b", "missing"});
}

BOOST_AUTO_TEST_CASE(writer_refuses_bad_entries) {
  TempDir dir;
  const std::string path = dir.file("w.safetensors");
  const std::vector<float> data = exact_values(4);
  check_error_mentions([&] {
    zt::write_safetensors(path, {{"x", {4}, data.data(), zt::DType::F32, zt::DType::F32},
                                 {"x", {4}, data.data(), zt::DType::F32, zt::DType::F32}});
  }, {path, "tensor x", "twice"});
  check_error_mentions([&] { zt::write_safetensors(path, {{"x", {4}, nullptr, zt::DType::F32, zt::DType::F32}}); },
              {path, "tensor x", "no data"});
  check_error_mentions([&] { zt::write_safetensors(path, {{"x", {4}, data.data(), zt::DType::F32, zt::DType::I32}}); },
              {path, "tensor x", "fp32", "int32"});
  check_error_mentions([&] { zt::write_safetensors(dir.file("no/such/dir/w.safetensors"), {}); }, {"no/such/dir/w.safetensors"});
  BOOST_TEST(!fs::exists(path));
  BOOST_TEST(!fs::exists(path + ".tmp"));
}

BOOST_AUTO_TEST_CASE(max_shard_size_spelled_as_transformers_does) {
  BOOST_TEST(zt::parse_max_shard_size("5GB") == 5'000'000'000);
  BOOST_TEST(zt::parse_max_shard_size("50KB") == 50'000);
  BOOST_TEST(zt::parse_max_shard_size("500mb") == 500'000'000);
  BOOST_TEST(zt::parse_max_shard_size("2GiB") == int64_t{2} << 30);
  BOOST_TEST(zt::parse_max_shard_size("4KiB") == 4096);
  BOOST_TEST(zt::parse_max_shard_size("1234") == 1234);
  check_error_mentions([] { zt::parse_max_shard_size("5 parsecs"); }, {"5 parsecs"});
  check_error_mentions([] { zt::parse_max_shard_size("0GB"); }, {"0GB", "positive"});
  check_error_mentions([] { zt::parse_max_shard_size("-1"); }, {"-1"});
}

BOOST_AUTO_TEST_SUITE_END()
