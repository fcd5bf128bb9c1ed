// The HDF5 token-shard writer and reader (format in token_shards.h and DESIGN.md). Every HDF5
// call is checked; every handle is owned by an H5Handle so it is closed on error paths too.
// Every public function that reaches HDF5 (opening, reading, writing, closing) holds
// hdf5_mutex() for its whole duration, so the prefetch thread and the main thread can read.
#include "data/token_shards.h"

#include <hdf5.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <utility>

#include "core/error.h"
#include "core/hdf5_util.h"

namespace zt {

namespace {

namespace fs = std::filesystem;
using Hdf5Lock = std::lock_guard<std::recursive_mutex>;

using h5::check_status;
using h5::describe_type;
using h5::has_attribute;
using h5::owned_attribute;
using h5::owned_dataset;
using h5::owned_file;
using h5::owned_plist;
using h5::owned_space;
using h5::owned_type;
using h5::read_1d_range;
using h5::read_int64_attribute;
using h5::read_string_attribute;
using h5::write_int64_attribute;
using h5::write_string_attribute;
using H5Handle = h5::Handle;

// ---------------------------------------------------------------------------------------------
// Writing

// Writes a 1-D dataset of `count` elements, chunked (at most 4Ki elements per chunk, so reading
// one sample decompresses little) with byte-shuffle + deflate, and no timestamps.
void write_1d_dataset(hid_t file, const std::string& path, const char* name, hid_t file_type, hid_t memory_type,
                      const void* data, hsize_t count) {
  constexpr hsize_t kChunkElements = 4096;
  const hsize_t chunk = std::min(count, kChunkElements);
  H5Handle space = owned_space(H5Screate_simple(1, &count, nullptr), path, cat("create the dataspace of '", name, "'"));
  H5Handle create_props = owned_plist(H5Pcreate(H5P_DATASET_CREATE), path, "create a dataset property list");
  check_status(H5Pset_chunk(create_props.get(), 1, &chunk), path, cat("set the chunk size of '", name, "'"));
  check_status(H5Pset_shuffle(create_props.get()), path, cat("set the shuffle filter of '", name, "'"));
  check_status(H5Pset_deflate(create_props.get(), 4), path, cat("set the deflate filter of '", name, "'"));
  check_status(H5Pset_obj_track_times(create_props.get(), 0), path, "turn off object timestamps");
  H5Handle dataset = owned_dataset(
      H5Dcreate2(file, name, file_type, space.get(), H5P_DEFAULT, create_props.get(), H5P_DEFAULT), path,
      cat("create dataset '", name, "'"));
  check_status(H5Dwrite(dataset.get(), memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), path,
               cat("write dataset '", name, "'"));
}

void check_attribute_values(const std::string& path, const ShardAttributes& attrs) {
  ZT_CHECK(attrs.vocab_size > 0, path, ": vocab_size must be positive, not ", attrs.vocab_size);
  ZT_CHECK(attrs.max_seq_len > 0, path, ": max_seq_len must be positive, not ", attrs.max_seq_len);
  ZT_CHECK(attrs.pad_id >= 0 && attrs.pad_id < attrs.vocab_size, path, ": pad_id ", attrs.pad_id,
           " is outside [0, vocab_size=", attrs.vocab_size, ")");
  ZT_CHECK(attrs.bos_id >= -1 && attrs.bos_id < attrs.vocab_size, path, ": bos_id ", attrs.bos_id,
           " is outside [-1, vocab_size=", attrs.vocab_size, ")");
  ZT_CHECK(attrs.eos_id >= -1 && attrs.eos_id < attrs.vocab_size, path, ": eos_id ", attrs.eos_id,
           " is outside [-1, vocab_size=", attrs.vocab_size, ")");
}

// ---------------------------------------------------------------------------------------------
// Reading

// The integer element type a dataset of the format must have.
struct IntegerType {
  size_t bytes;
  bool is_signed;
  std::string describe() const { return cat(is_signed ? "int" : "uint", bytes * 8); }
};

// Opens a 1-D integer dataset and checks its type; returns the handle and sets `length`.
H5Handle open_1d_dataset(hid_t file, const std::string& path, const char* name, IntegerType expected,
                         hsize_t& length) {
  const htri_t exists = H5Lexists(file, name, H5P_DEFAULT);
  check_status(exists, path, cat("look up dataset '", name, "'"));
  ZT_CHECK(exists > 0, path, ": dataset '", name, "' is missing (a token shard holds tokens, loss_mask and offsets)");
  H5Handle dataset = owned_dataset(H5Dopen2(file, name, H5P_DEFAULT), path, cat("open '", name, "' as a dataset"));
  H5Handle type = owned_type(H5Dget_type(dataset.get()), path, cat("get the type of dataset '", name, "'"));
  const bool type_ok = H5Tget_class(type.get()) == H5T_INTEGER && H5Tget_size(type.get()) == expected.bytes &&
                       (H5Tget_sign(type.get()) != H5T_SGN_NONE) == expected.is_signed;
  ZT_CHECK(type_ok, path, ": dataset '", name, "' has type ", describe_type(type.get()), ", expected ",
           expected.describe());
  H5Handle space = owned_space(H5Dget_space(dataset.get()), path, cat("get the dataspace of '", name, "'"));
  const int rank = H5Sget_simple_extent_ndims(space.get());
  ZT_CHECK(rank == 1, path, ": dataset '", name, "' has rank ", rank, ", expected 1");
  check_status(H5Sget_simple_extent_dims(space.get(), &length, nullptr), path, cat("get the size of '", name, "'"));
  return dataset;
}

struct Shard {
  std::string path;
  H5Handle file;                 // declared first: closed last
  H5Handle tokens;               // int32 [T]
  H5Handle loss_mask;            // uint8 [T]
  std::vector<int64_t> offsets;  // [N+1]
  std::vector<int64_t> prompt_lengths, chosen_lengths;  // [N] each: pair shards only
  ShardAttributes attrs;
  int64_t num_samples() const { return static_cast<int64_t>(offsets.size()) - 1; }
  bool holds_pairs() const { return !prompt_lengths.empty(); }
  int64_t record_length(size_t i) const { return offsets[i + 1] - offsets[i]; }
  // The longer side's sequence of pair i: prompt + the longer response.
  int64_t longer_side(size_t i) const {
    return std::max(prompt_lengths[i] + chosen_lengths[i], record_length(i) - chosen_lengths[i]);
  }
};

// ---------------------------------------------------------------------------------------------

// The per-record datasets of a pair shard (empty vectors for a sample shard).
struct PairColumns {
  std::vector<int64_t> prompt_lengths;  // [N]
  std::vector<int64_t> chosen_lengths;  // [N]
  bool empty() const { return prompt_lengths.empty(); }
};

// Writes the records of a sample shard (pairs empty) or a pair shard (records up to
// 2 * max_seq_len tokens; each side was checked by write_pair_shard).
void write_shard_file(const std::string& path, std::span<const TokenSample> samples, const ShardAttributes& attrs,
                      const PairColumns& pairs) {
  const Hdf5Lock lock(hdf5_mutex());
  h5::silence_error_printing();
  check_attribute_values(path, attrs);
  ZT_CHECK(!samples.empty(), path, ": a token shard must hold at least one sample");
  const int64_t longest_record = pairs.empty() ? attrs.max_seq_len : 2 * attrs.max_seq_len;

  // Concatenate the samples, checking each against the attributes.
  std::vector<int64_t> offsets(samples.size() + 1, 0);  // [N+1]
  for (size_t i = 0; i < samples.size(); ++i) {
    const TokenSample& sample = samples[i];
    const int64_t length = static_cast<int64_t>(sample.tokens.size());
    ZT_CHECK(sample.loss_mask.size() == sample.tokens.size(), path, ": sample ", i, " has ", sample.tokens.size(),
             " tokens but ", sample.loss_mask.size(), " loss_mask values");
    ZT_CHECK(length >= 1, path, ": sample ", i, " is empty");
    ZT_CHECK(length <= longest_record, path, ": sample ", i, " has ", length, " tokens, more than max_seq_len=",
             attrs.max_seq_len);
    for (size_t t = 0; t < sample.tokens.size(); ++t) {
      ZT_CHECK(sample.tokens[t] >= 0 && sample.tokens[t] < attrs.vocab_size, path, ": sample ", i, " has token id ",
               sample.tokens[t], " at position ", t, ", outside [0, vocab_size=", attrs.vocab_size, ")");
      ZT_CHECK(sample.loss_mask[t] <= 1, path, ": sample ", i, " has loss_mask value ", int(sample.loss_mask[t]),
               " at position ", t, ", expected 0 or 1");
    }
    offsets[i + 1] = offsets[i] + length;
  }
  std::vector<int32_t> tokens;     // [T]
  std::vector<uint8_t> loss_mask;  // [T]
  tokens.reserve(static_cast<size_t>(offsets.back()));
  loss_mask.reserve(static_cast<size_t>(offsets.back()));
  for (const TokenSample& sample : samples) {
    tokens.insert(tokens.end(), sample.tokens.begin(), sample.tokens.end());
    loss_mask.insert(loss_mask.end(), sample.loss_mask.begin(), sample.loss_mask.end());
  }

  const std::string temporary_path = path + ".tmp";
  {
    // No timestamps on the root group either, so the same samples give the same bytes.
    H5Handle create_props = owned_plist(H5Pcreate(H5P_FILE_CREATE), temporary_path, "create a file property list");
    check_status(H5Pset_obj_track_times(create_props.get(), 0), temporary_path, "turn off object timestamps");
    H5Handle file = owned_file(H5Fcreate(temporary_path.c_str(), H5F_ACC_TRUNC, create_props.get(), H5P_DEFAULT),
                               temporary_path, "create the file (does its directory exist and is it writable?)");
    const hid_t id = file.get();
    write_1d_dataset(id, temporary_path, "tokens", H5T_STD_I32LE, H5T_NATIVE_INT32, tokens.data(), tokens.size());
    write_1d_dataset(id, temporary_path, "loss_mask", H5T_STD_U8LE, H5T_NATIVE_UINT8, loss_mask.data(),
                     loss_mask.size());
    write_1d_dataset(id, temporary_path, "offsets", H5T_STD_I64LE, H5T_NATIVE_INT64, offsets.data(), offsets.size());
    if (!pairs.empty()) {
      write_1d_dataset(id, temporary_path, "prompt_lengths", H5T_STD_I64LE, H5T_NATIVE_INT64, pairs.prompt_lengths.data(),
                       pairs.prompt_lengths.size());
      write_1d_dataset(id, temporary_path, "chosen_lengths", H5T_STD_I64LE, H5T_NATIVE_INT64, pairs.chosen_lengths.data(),
                       pairs.chosen_lengths.size());
    }
    write_string_attribute(id, temporary_path, "format", kTokenShardFormat);
    write_int64_attribute(id, temporary_path, "version", pairs.empty() ? kTokenShardVersion : kPairShardVersion);
    if (!pairs.empty()) write_string_attribute(id, temporary_path, "record", "pair");
    write_int64_attribute(id, temporary_path, "vocab_size", attrs.vocab_size);
    write_int64_attribute(id, temporary_path, "bos_id", attrs.bos_id);
    write_int64_attribute(id, temporary_path, "eos_id", attrs.eos_id);
    write_int64_attribute(id, temporary_path, "pad_id", attrs.pad_id);
    write_string_attribute(id, temporary_path, "tokenizer_sha256", attrs.tokenizer_sha256);
    write_int64_attribute(id, temporary_path, "max_seq_len", attrs.max_seq_len);
    write_string_attribute(id, temporary_path, "split", attrs.split);
    write_string_attribute(id, temporary_path, "source", attrs.source);
    ZT_CHECK(file.close(), temporary_path, ": HDF5 failed to close (flush) the file");
  }
  std::error_code error;
  fs::rename(temporary_path, path, error);
  if (error) {
    fs::remove(temporary_path, error);
    fail(path, ": cannot rename ", temporary_path, " to it: ", error.message());
  }
}

// Scored tokens (loss_mask 1) of a response.
int64_t scored_tokens(const TokenSample& response) {
  int64_t count = 0;
  for (uint8_t value : response.loss_mask) count += value;
  return count;
}

}  // namespace

void write_token_shard(const std::string& path, std::span<const TokenSample> samples, const ShardAttributes& attrs) {
  write_shard_file(path, samples, attrs, PairColumns{});
}

TokenSample TokenPair::chosen_sequence() const {
  TokenSample sequence{prompt, std::vector<uint8_t>(prompt.size(), 0)};
  sequence.tokens.insert(sequence.tokens.end(), chosen.tokens.begin(), chosen.tokens.end());
  sequence.loss_mask.insert(sequence.loss_mask.end(), chosen.loss_mask.begin(), chosen.loss_mask.end());
  return sequence;
}

TokenSample TokenPair::rejected_sequence() const {
  return TokenPair{prompt, rejected, chosen}.chosen_sequence();
}

void write_pair_shard(const std::string& path, std::span<const TokenPair> pairs, const ShardAttributes& attrs) {
  std::vector<TokenSample> records;  // [N] prompt | chosen | rejected
  PairColumns columns;
  for (size_t i = 0; i < pairs.size(); ++i) {
    const TokenPair& pair = pairs[i];
    const int64_t prompt = static_cast<int64_t>(pair.prompt.size());
    for (const TokenSample* side : {&pair.chosen, &pair.rejected}) {
      const char* name = side == &pair.chosen ? "chosen" : "rejected";
      ZT_CHECK(side->loss_mask.size() == side->tokens.size(), path, ": pair ", i, ": the ", name,
               " response's loss_mask and tokens differ in length");
      ZT_CHECK(prompt + static_cast<int64_t>(side->tokens.size()) <= attrs.max_seq_len, path, ": pair ", i, ": the ", name,
               " sequence has ", prompt + static_cast<int64_t>(side->tokens.size()), " tokens, more than max_seq_len=",
               attrs.max_seq_len);
      ZT_CHECK(scored_tokens(*side) > 0, path, ": pair ", i, ": the ", name, " response has no scored token");
    }
    TokenSample record = pair.chosen_sequence();
    record.tokens.insert(record.tokens.end(), pair.rejected.tokens.begin(), pair.rejected.tokens.end());
    record.loss_mask.insert(record.loss_mask.end(), pair.rejected.loss_mask.begin(), pair.rejected.loss_mask.end());
    records.push_back(std::move(record));
    columns.prompt_lengths.push_back(prompt);
    columns.chosen_lengths.push_back(static_cast<int64_t>(pair.chosen.tokens.size()));
  }
  ZT_CHECK(!records.empty(), path, ": a pair shard must hold at least one pair");
  write_shard_file(path, records, attrs, columns);
}

std::string shard_split_from_file_name(const std::string& file_name) {
  std::string stem = file_name;
  if (stem.size() > 3 && stem.compare(stem.size() - 3, 3, ".h5") == 0) stem.resize(stem.size() - 3);
  const size_t dash = stem.rfind('-');
  if (dash == std::string::npos || dash == 0 || dash + 1 == stem.size()) return stem;
  const bool digits_after_dash =
      std::all_of(stem.begin() + static_cast<std::ptrdiff_t>(dash) + 1, stem.end(), [](char c) { return c >= '0' && c <= '9'; });
  return digits_after_dash ? stem.substr(0, dash) : stem;
}

struct TokenDataset::Impl {
  std::string description;           // the path the dataset was opened from, for messages
  std::vector<Shard> shards;         // in file-name order
  std::vector<int64_t> first_sample; // [shards+1] global index of each shard's first sample
  std::vector<std::string> paths;    // [shards]
  ShardAttributes attrs;
  int64_t longest = 0;

  // The shard holding global sample `index` and the sample's index inside it.
  std::pair<const Shard*, int64_t> locate(int64_t index) const {
    ZT_CHECK(index >= 0 && index < first_sample.back(), description, ": sample index ", index, " is outside [0, ",
             first_sample.back(), ")");
    const auto next = std::upper_bound(first_sample.begin(), first_sample.end(), index);
    const size_t shard = static_cast<size_t>(next - first_sample.begin()) - 1;
    return {&shards[shard], index - first_sample[shard]};
  }
};

namespace {

// Every token id in [0, vocab_size), checked when the data is opened rather than at the step
// that reads a bad sample (hours into a run). Blocks of ids, min/max per block (a loop the
// compiler vectorises); only a block that fails is searched for the first bad id.
void check_token_ids(const Shard& shard, hsize_t token_count) {
  constexpr hsize_t kBlock = hsize_t{1} << 20;  // elements read at once: bounded memory on big shards
  const int64_t vocab_size = shard.attrs.vocab_size;
  std::vector<int32_t> block(static_cast<size_t>(std::min(kBlock, token_count)));
  for (hsize_t begin = 0; begin < token_count; begin += kBlock) {
    const hsize_t count = std::min(kBlock, token_count - begin);
    read_1d_range(shard.tokens.get(), shard.path, "tokens", H5T_NATIVE_INT32, begin, count, block.data());
    int32_t low = block[0], high = block[0];
    for (hsize_t t = 0; t < count; ++t) {
      low = std::min(low, block[t]);
      high = std::max(high, block[t]);
    }
    if (low >= 0 && high < vocab_size) continue;
    for (hsize_t t = 0; t < count; ++t) {
      if (block[t] >= 0 && block[t] < vocab_size) continue;
      const int64_t at = static_cast<int64_t>(begin + t);
      const auto next = std::upper_bound(shard.offsets.begin(), shard.offsets.end(), at);
      const int64_t sample = static_cast<int64_t>(next - shard.offsets.begin()) - 1;
      fail(shard.path, ": sample ", sample, " has token id ", block[t], " at position ", at - shard.offsets[static_cast<size_t>(sample)],
           ", outside [0, vocab_size=", vocab_size, ") (the data was tokenized with another vocabulary, or the file is damaged)");
    }
  }
}

// A pair shard's prompt_lengths and chosen_lengths, checked against the records: each side
// prompt + response within max_seq_len, each response non-empty.
void read_pair_columns(hid_t file_id, Shard& shard) {
  const std::string& path = shard.path;
  const hsize_t records = shard.offsets.size() - 1;
  for (auto [name, column] : {std::pair{"prompt_lengths", &shard.prompt_lengths}, std::pair{"chosen_lengths", &shard.chosen_lengths}}) {
    hsize_t count = 0;
    H5Handle dataset = open_1d_dataset(file_id, path, name, {8, true}, count);
    ZT_CHECK(count == records, path, ": dataset '", name, "' has ", count, " values for ", records, " pairs");
    column->resize(count);
    read_1d_range(dataset.get(), path, name, H5T_NATIVE_INT64, 0, count, column->data());
  }
  for (size_t i = 0; i < records; ++i) {
    const int64_t prompt = shard.prompt_lengths[i], chosen = shard.chosen_lengths[i];
    const int64_t rejected = shard.record_length(i) - prompt - chosen;
    ZT_CHECK(prompt >= 0 && chosen >= 1 && rejected >= 1, path, ": pair ", i, " has prompt ", prompt, ", chosen ", chosen,
             " and rejected ", rejected, " tokens (each response needs at least one)");
    ZT_CHECK(shard.longer_side(i) <= shard.attrs.max_seq_len, path, ": pair ", i, " has a side of ", shard.longer_side(i),
             " tokens, more than max_seq_len=", shard.attrs.max_seq_len);
  }
}

Shard open_shard(const std::string& path) {
  Shard shard;
  shard.path = path;
  H5Handle access_props = owned_plist(H5Pcreate(H5P_FILE_ACCESS), path, "create a file access property list");
#if H5_VERSION_GE(1, 10, 7)
  // Shards are only read (and are written under another name, then renamed), so no lock is
  // needed; skipping it avoids "unable to lock file" on cluster file systems without flock.
  check_status(H5Pset_file_locking(access_props.get(), false, true), path, "turn off file locking");
#endif
  const hid_t file_id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, access_props.get());
  ZT_CHECK(file_id >= 0, path, ": cannot open as an HDF5 file (not an HDF5 file, unreadable, or being written)");
  shard.file = H5Handle(file_id, H5Fclose);

  // The format attribute first: a file that is not a shard gets that message, not a missing dataset.
  if (!has_attribute(file_id, path, "format")) {
    fail(path, ": not a zerotune token shard (attribute 'format' is missing, expected '", kTokenShardFormat, "')");
  }
  H5Handle format_attribute = owned_attribute(H5Aopen(file_id, "format", H5P_DEFAULT), path, "open attribute 'format'");
  H5Handle format_type = owned_type(H5Aget_type(format_attribute.get()), path, "get the type of attribute 'format'");
  ZT_CHECK(H5Tget_class(format_type.get()) == H5T_STRING, path,
           ": not a zerotune token shard (attribute 'format' is ", describe_type(format_type.get()),
           ", expected the string '", kTokenShardFormat, "')");
  const std::string format = read_string_attribute(file_id, path, "format");
  ZT_CHECK(format == kTokenShardFormat, path, ": not a zerotune token shard (attribute 'format' is '", format,
           "', expected '", kTokenShardFormat, "')");
  const int64_t version = read_int64_attribute(file_id, path, "version");
  ZT_CHECK(version == kTokenShardVersion || version == kPairShardVersion, path, ": token shard version ", version,
           " is not supported (this zerotune reads version ", kTokenShardVersion, ", and ", kPairShardVersion,
           " for pairs)");
  const bool pairs = version == kPairShardVersion;
  ZT_CHECK(!pairs || (has_attribute(file_id, path, "record") && read_string_attribute(file_id, path, "record") == "pair"),
           path, ": a version-", kPairShardVersion, " token shard must have the attribute record=\"pair\"");

  ShardAttributes& attrs = shard.attrs;
  attrs.vocab_size = read_int64_attribute(file_id, path, "vocab_size");
  attrs.bos_id = read_int64_attribute(file_id, path, "bos_id");
  attrs.eos_id = read_int64_attribute(file_id, path, "eos_id");
  attrs.pad_id = read_int64_attribute(file_id, path, "pad_id");
  attrs.tokenizer_sha256 = read_string_attribute(file_id, path, "tokenizer_sha256");
  attrs.max_seq_len = read_int64_attribute(file_id, path, "max_seq_len");
  attrs.split = read_string_attribute(file_id, path, "split");
  attrs.source = read_string_attribute(file_id, path, "source");
  check_attribute_values(path, attrs);  // the value ranges the writer enforces

  hsize_t token_count = 0, mask_count = 0, offset_count = 0;
  shard.tokens = open_1d_dataset(file_id, path, "tokens", {4, true}, token_count);
  shard.loss_mask = open_1d_dataset(file_id, path, "loss_mask", {1, false}, mask_count);
  H5Handle offsets = open_1d_dataset(file_id, path, "offsets", {8, true}, offset_count);
  ZT_CHECK(mask_count == token_count, path, ": dataset 'loss_mask' has ", mask_count,
           " values but 'tokens' has ", token_count);
  ZT_CHECK(offset_count >= 2, path, ": dataset 'offsets' has ", offset_count,
           " values; a shard holds at least one sample (N+1 >= 2 offsets)");
  shard.offsets.resize(offset_count);
  read_1d_range(offsets.get(), path, "offsets", H5T_NATIVE_INT64, 0, offset_count, shard.offsets.data());
  ZT_CHECK(shard.offsets[0] == 0, path, ": offsets[0] is ", shard.offsets[0], ", expected 0");
  for (size_t i = 0; i + 1 < shard.offsets.size(); ++i) {
    const int64_t length = shard.offsets[i + 1] - shard.offsets[i];
    ZT_CHECK(length > 0, path, ": offsets are not strictly increasing (offsets[", i, "]=", shard.offsets[i],
             ", offsets[", i + 1, "]=", shard.offsets[i + 1], ")");
    ZT_CHECK(length <= (pairs ? 2 : 1) * attrs.max_seq_len, path, ": sample ", i, " has ", length,
             " tokens, more than max_seq_len=", attrs.max_seq_len);
  }
  ZT_CHECK(shard.offsets.back() == static_cast<int64_t>(token_count), path, ": the last offset is ",
           shard.offsets.back(), " but dataset 'tokens' has ", token_count, " values");
  if (pairs) read_pair_columns(file_id, shard);
  check_token_ids(shard, token_count);
  return shard;
}

// The shard files a dataset path names: the file itself, or the directory's *.h5 of one split.
// Rows of text (JSONL, JSON, parquet, CSV) where token shards are expected: the step missing is
// `zerotune prep`.
bool is_text_data_file(const fs::path& file) {
  const std::string extension = file.extension().string();
  return extension == ".jsonl" || extension == ".json" || extension == ".parquet" || extension == ".csv";
}

std::string prep_hint(const std::string& input) {
  return cat("tokenize it into shards first: zerotune prep --input ", input, " --tokenizer MODEL_DIR --out DATA_DIR");
}

std::vector<std::string> list_shard_files(const std::string& path, const std::string& split) {
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  ZT_CHECK(!error && fs::exists(status), path, ": no such file or directory");
  if (fs::is_regular_file(status)) {
    ZT_CHECK(!is_text_data_file(path), path, ": rows of text, not token shards (HDF5): ", prep_hint(path));
    return {path};
  }
  ZT_CHECK(fs::is_directory(status), path, ": not a file or directory");

  std::map<std::string, std::vector<std::string>> files_by_split;  // split -> file names (sorted)
  for (const fs::directory_entry& entry : fs::directory_iterator(path)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file() || name.size() <= 3 || name.compare(name.size() - 3, 3, ".h5") != 0) continue;
    files_by_split[shard_split_from_file_name(name)].push_back(name);
  }
  if (files_by_split.empty()) {
    for (const fs::directory_entry& entry : fs::directory_iterator(path))
      if (entry.is_regular_file() && is_text_data_file(entry.path()))
        fail(path, ": holds no token shards (*.h5 files) but rows of text (", entry.path().filename().string(), "): ",
             prep_hint(entry.path().string()));
    fail(path, ": holds no token shards (*.h5 files)");
  }
  std::string splits_present;
  for (const auto& [name, files] : files_by_split) splits_present += (splits_present.empty() ? "" : ", ") + name;

  std::string chosen = split;
  if (chosen.empty()) {
    ZT_CHECK(files_by_split.size() == 1, path, ": holds shards of several splits (", splits_present,
             "); name the split to use (zerotune train: --split NAME, --eval-split NAME)");
    chosen = files_by_split.begin()->first;
  }
  const auto found = files_by_split.find(chosen);
  ZT_CHECK(found != files_by_split.end(), path, ": holds no shards of split '", chosen, "' (splits present: ",
           splits_present, ")");
  std::vector<std::string> names = found->second;
  std::sort(names.begin(), names.end());
  std::vector<std::string> paths;
  for (const std::string& name : names) paths.push_back((fs::path(path) / name).string());
  return paths;
}

// Shards of one dataset must come from one tokenizer: fail naming both files otherwise.
template <class Value>
void check_shards_agree(const Shard& first, const Shard& other, const char* key, const Value& first_value,
                        const Value& other_value) {
  ZT_CHECK(first_value == other_value, first.path, " and ", other.path, " disagree on '", key, "' (", first_value,
           " vs ", other_value, "): the shards of one dataset must come from one tokenizer");
}

}  // namespace

TokenDataset TokenDataset::open(const std::string& path, const std::string& split) {
  const Hdf5Lock lock(hdf5_mutex());  // also while a failed open closes what it opened
  h5::silence_error_printing();
  auto impl = std::make_unique<Impl>();
  impl->description = path;
  impl->first_sample.push_back(0);
  for (const std::string& shard_path : list_shard_files(path, split)) {
    Shard shard = open_shard(shard_path);
    if (!impl->shards.empty()) {
      const Shard& first = impl->shards.front();
      check_shards_agree(first, shard, "vocab_size", first.attrs.vocab_size, shard.attrs.vocab_size);
      check_shards_agree(first, shard, "tokenizer_sha256", first.attrs.tokenizer_sha256, shard.attrs.tokenizer_sha256);
      check_shards_agree(first, shard, "bos_id", first.attrs.bos_id, shard.attrs.bos_id);
      check_shards_agree(first, shard, "eos_id", first.attrs.eos_id, shard.attrs.eos_id);
      check_shards_agree(first, shard, "pad_id", first.attrs.pad_id, shard.attrs.pad_id);
      ZT_CHECK(first.holds_pairs() == shard.holds_pairs(), first.path, " and ", shard.path,
               " disagree on what they hold (pairs from prep --pairs vs samples): one dataset holds one kind");
    }
    for (size_t i = 0; i + 1 < shard.offsets.size(); ++i) {
      impl->longest = std::max(impl->longest, shard.holds_pairs() ? shard.longer_side(i) : shard.record_length(i));
    }
    impl->first_sample.push_back(impl->first_sample.back() + shard.num_samples());
    impl->paths.push_back(shard_path);
    impl->shards.push_back(std::move(shard));
  }
  impl->attrs = impl->shards.front().attrs;
  for (const Shard& shard : impl->shards) impl->attrs.max_seq_len = std::max(impl->attrs.max_seq_len, shard.attrs.max_seq_len);
  return TokenDataset(std::move(impl));
}

TokenDataset::TokenDataset(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TokenDataset::TokenDataset(TokenDataset&&) noexcept = default;
// Assigning and destroying close the HDF5 handles of the old shards: under the lock.
TokenDataset& TokenDataset::operator=(TokenDataset&& other) noexcept {
  const Hdf5Lock lock(hdf5_mutex());
  impl_ = std::move(other.impl_);
  return *this;
}
TokenDataset::~TokenDataset() {
  const Hdf5Lock lock(hdf5_mutex());
  impl_.reset();
}

bool TokenDataset::holds_pairs() const { return impl_->shards.front().holds_pairs(); }
int64_t TokenDataset::num_samples() const { return impl_->first_sample.back(); }
int64_t TokenDataset::longest_sample() const { return impl_->longest; }
const ShardAttributes& TokenDataset::attributes() const { return impl_->attrs; }
const std::vector<std::string>& TokenDataset::shard_paths() const { return impl_->paths; }

std::vector<ShardInfo> TokenDataset::shard_infos() const {
  std::vector<ShardInfo> infos;
  for (size_t i = 0; i < impl_->shards.size(); ++i) {
    const Shard& shard = impl_->shards[i];
    infos.push_back({shard.path, impl_->first_sample[i], shard.num_samples(), shard.offsets.back()});
  }
  return infos;
}

int64_t TokenDataset::sample_length(int64_t index) const {
  const auto [shard, local] = impl_->locate(index);
  return shard->holds_pairs() ? shard->longer_side(static_cast<size_t>(local)) : shard->record_length(static_cast<size_t>(local));
}

std::vector<uint8_t> TokenDataset::read_loss_mask(int64_t index) const {
  const Hdf5Lock lock(hdf5_mutex());
  const auto [shard, local] = impl_->locate(index);
  const hsize_t begin = static_cast<hsize_t>(shard->offsets[static_cast<size_t>(local)]);
  const hsize_t length = static_cast<hsize_t>(shard->offsets[static_cast<size_t>(local) + 1]) - begin;
  std::vector<uint8_t> loss_mask(length);  // [L]
  read_1d_range(shard->loss_mask.get(), shard->path, "loss_mask", H5T_NATIVE_UINT8, begin, length, loss_mask.data());
  for (size_t t = 0; t < loss_mask.size(); ++t) {
    ZT_CHECK(loss_mask[t] <= 1, shard->path, ": sample ", local, " (global index ", index, ") has loss_mask value ",
             int(loss_mask[t]), " at position ", t, ", expected 0 or 1");
  }
  return loss_mask;
}

TokenSample TokenDataset::read_sample(int64_t index) const {
  ZT_CHECK(!holds_pairs(), impl_->description, ": holds preference pairs (zerotune prep --pairs), not samples: train "
           "them with --objective reward, or prep the data without --pairs for a language-model objective");
  return read_record(index);
}

TokenPair TokenDataset::read_pair(int64_t index) const {
  ZT_CHECK(holds_pairs(), impl_->description, ": holds samples, not preference pairs: --objective reward needs data "
           "from zerotune prep --pairs (rows with prompt, chosen and rejected)");
  const TokenSample record = read_record(index);
  const auto [shard, local] = impl_->locate(index);
  const auto prompt = static_cast<std::ptrdiff_t>(shard->prompt_lengths[static_cast<size_t>(local)]);
  const auto chosen_end = prompt + static_cast<std::ptrdiff_t>(shard->chosen_lengths[static_cast<size_t>(local)]);
  const auto part = [&](std::ptrdiff_t begin, std::ptrdiff_t end) {
    return TokenSample{{record.tokens.begin() + begin, record.tokens.begin() + end},
                       {record.loss_mask.begin() + begin, record.loss_mask.begin() + end}};
  };
  TokenPair pair;
  pair.prompt.assign(record.tokens.begin(), record.tokens.begin() + prompt);
  pair.chosen = part(prompt, chosen_end);
  pair.rejected = part(chosen_end, static_cast<std::ptrdiff_t>(record.tokens.size()));
  return pair;
}

TokenSample TokenDataset::read_record(int64_t index) const {
  const Hdf5Lock lock(hdf5_mutex());
  const auto [shard, local] = impl_->locate(index);
  const hsize_t begin = static_cast<hsize_t>(shard->offsets[static_cast<size_t>(local)]);
  const hsize_t length = static_cast<hsize_t>(shard->offsets[static_cast<size_t>(local) + 1]) - begin;
  TokenSample sample;
  sample.tokens.resize(length);  // [L]
  read_1d_range(shard->tokens.get(), shard->path, "tokens", H5T_NATIVE_INT32, begin, length, sample.tokens.data());
  const int64_t vocab_size = shard->attrs.vocab_size;
  for (size_t t = 0; t < sample.tokens.size(); ++t) {
    ZT_CHECK(sample.tokens[t] >= 0 && sample.tokens[t] < vocab_size, shard->path, ": sample ", local,
             " (global index ", index, ") has token id ", sample.tokens[t], " at position ", t,
             ", outside [0, vocab_size=", vocab_size, ")");
  }
  sample.loss_mask = read_loss_mask(index);
  return sample;
}

int64_t TokenDataset::total_target_tokens() const {
  constexpr hsize_t kBlock = hsize_t{1} << 20;  // elements read at once: bounded memory on big shards
  const Hdf5Lock lock(hdf5_mutex());
  int64_t targets = 0;
  std::vector<uint8_t> block(kBlock);  // [<= kBlock] loss_mask values of one read
  for (const Shard& shard : impl_->shards) {
    const hsize_t total = static_cast<hsize_t>(shard.offsets.back());
    size_t next_start = 0;  // index into offsets of the next sample start not yet passed
    for (hsize_t begin = 0; begin < total; begin += kBlock) {
      const hsize_t count = std::min(kBlock, total - begin);
      read_1d_range(shard.loss_mask.get(), shard.path, "loss_mask", H5T_NATIVE_UINT8, begin, count, block.data());
      for (hsize_t t = 0; t < count; ++t) {
        const uint8_t value = block[t];
        ZT_CHECK(value <= 1, shard.path, ": loss_mask value ", int(value), " at token ", begin + t, ", expected 0 or 1");
        // A sample's first token is never a target (nothing predicts it): skip it as the batch does.
        if (next_start < shard.offsets.size() && static_cast<hsize_t>(shard.offsets[next_start]) == begin + t) {
          ++next_start;
          continue;
        }
        targets += value;
      }
    }
  }
  return targets;
}

}  // namespace zt
