// safetensors reading (memory-mapped, header checked on open) and writing (atomic, sharded
// like transformers' save_pretrained). The format is in safetensors.h.
#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <regex>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/error.h"

namespace zt {

namespace fs = std::filesystem;
using nlohmann::json;

// ---------------------------------------------------------------------------------------------
// dtypes and conversion

namespace {

// Element sizes of every dtype the safetensors format defines (so a file holding, say, an F64
// buffer still opens; only reading it as a float is refused).
size_t safetensors_element_size(const std::string& dtype) {
  static const std::map<std::string, size_t> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
      {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4},     {"F64", 8},     {"I64", 8}, {"U64", 8}};
  auto found = sizes.find(dtype);
  return found == sizes.end() ? 0 : found->second;
}

// The zt DType of a safetensors dtype name, or false when zerotune has none for it.
bool dtype_from_safetensors(const std::string& name, DType& dtype) {
  for (DType candidate : {DType::F32, DType::BF16, DType::F16, DType::I32, DType::I64, DType::U8}) {
    if (name == safetensors_dtype_name(candidate)) {
      dtype = candidate;
      return true;
    }
  }
  return false;
}

inline float load_float(const std::byte* src, DType dtype, size_t i) {
  if (dtype == DType::F32) {
    float value;
    std::memcpy(&value, src + 4 * i, 4);
    return value;
  }
  uint16_t bits;
  std::memcpy(&bits, src + 2 * i, 2);
  return dtype == DType::BF16 ? bf16_to_float(bits) : fp16_to_float(bits);
}

inline void store_float(std::byte* dst, DType dtype, size_t i, float value) {
  if (dtype == DType::F32) {
    std::memcpy(dst + 4 * i, &value, 4);
    return;
  }
  uint16_t bits = dtype == DType::BF16 ? float_to_bf16(value) : float_to_fp16(value);
  std::memcpy(dst + 2 * i, &bits, 2);
}

}  // namespace

const char* safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32: return "F32";
    case DType::BF16: return "BF16";
    case DType::F16: return "F16";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
    case DType::U8: return "U8";
    case DType::F64: return "F64";
  }
  fail("safetensors: unknown dtype ", static_cast<int>(dtype));
}

void convert_float_array(const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t count) {
  if (src_dtype == dst_dtype) {
    std::memcpy(dst, src, count * dtype_size(src_dtype));
    return;
  }
  ZT_CHECK(is_float(src_dtype) && is_float(dst_dtype), "cannot convert ", dtype_name(src_dtype), " to ",
           dtype_name(dst_dtype), " (only fp32, bf16 and fp16 convert to each other)");
  const auto* in = static_cast<const std::byte*>(src);
  auto* out = static_cast<std::byte*>(dst);
  const auto n = static_cast<int64_t>(count);
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    const auto index = static_cast<size_t>(i);
    store_float(out, dst_dtype, index, load_float(in, src_dtype, index));
  }
}

int64_t SafetensorsTensorInfo::numel() const {
  int64_t count = 1;
  for (int64_t extent : shape) count *= extent;
  return count;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

// ---------------------------------------------------------------------------------------------
// reading one file

namespace {

// A non-negative integer of the header JSON, or an error naming the file, tensor and field.
uint64_t header_count(const json& value, const std::string& path, const std::string& name, const char* field) {
  if (!value.is_number_unsigned() && !(value.is_number_integer() && value.get<int64_t>() >= 0))
    fail(path, ": tensor ", name, ": ", field, " holds ", value.dump(), ", expected a non-negative integer");
  return value.get<uint64_t>();
}

SafetensorsTensorInfo parse_tensor_entry(const json& entry, const std::string& path, const std::string& name,
                                         size_t data_bytes) {
  if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") || !entry.contains("data_offsets"))
    fail(path, ": tensor ", name, ": header entry ", entry.dump(), " needs \"dtype\", \"shape\" and \"data_offsets\"");
  SafetensorsTensorInfo info;
  if (!entry.at("dtype").is_string()) fail(path, ": tensor ", name, ": dtype ", entry.at("dtype").dump(), " is not a string");
  info.dtype = entry.at("dtype").get<std::string>();
  const size_t element_size = safetensors_element_size(info.dtype);
  ZT_CHECK(element_size != 0, path, ": tensor ", name, " has unknown dtype '", info.dtype, "'");

  const json& shape = entry.at("shape");
  ZT_CHECK(shape.is_array(), path, ": tensor ", name, ": shape ", shape.dump(), " is not a list");
  uint64_t numel = 1;
  for (const json& extent : shape) {
    uint64_t n = header_count(extent, path, name, "shape");
    ZT_CHECK(n == 0 || numel <= std::numeric_limits<uint64_t>::max() / element_size / n, path, ": tensor ", name,
             ": shape ", shape.dump(), " is too large");
    numel *= n;
    info.shape.push_back(static_cast<int64_t>(n));
  }

  const json& offsets = entry.at("data_offsets");
  ZT_CHECK(offsets.is_array() && offsets.size() == 2, path, ": tensor ", name, ": data_offsets ", offsets.dump(),
           " is not a [begin, end] pair");
  const uint64_t begin = header_count(offsets[0], path, name, "data_offsets");
  const uint64_t end = header_count(offsets[1], path, name, "data_offsets");
  ZT_CHECK(begin <= end, path, ": tensor ", name, ": data_offsets [", begin, ", ", end, "] end before they begin");
  if (end > data_bytes)
    fail(path, ": truncated: tensor ", name, " needs bytes [", begin, ",", end, ") but the data section has only ",
         data_bytes, " bytes");
  ZT_CHECK(end - begin == numel * element_size, path, ": tensor ", name, ": dtype ", info.dtype, " and shape ",
           shape_string(info.shape), " need ", numel * element_size, " bytes but data_offsets [", begin, ", ", end,
           "] hold ", end - begin);
  info.offset = static_cast<size_t>(begin);
  info.bytes = static_cast<size_t>(end - begin);
  return info;
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, ": cannot open the safetensors file: ", std::strerror(errno));
  struct stat status {};
  if (::fstat(fd, &status) != 0) {
    int error = errno;
    ::close(fd);
    fail(path, ": cannot stat: ", std::strerror(error));
  }
  if (!S_ISREG(status.st_mode)) {
    ::close(fd);
    fail(path, ": not a regular file (expected a .safetensors file)");
  }
  file_bytes_ = static_cast<size_t>(status.st_size);
  if (file_bytes_ < 8) {
    ::close(fd);
    fail(path, ": ", file_bytes_, " bytes is too short for a safetensors file (the header length alone is 8 bytes)");
  }
  void* mapping = ::mmap(nullptr, file_bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
  int map_error = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (mapping == MAP_FAILED) fail(path, ": cannot map the file: ", std::strerror(map_error));
  mapping_ = static_cast<const std::byte*>(mapping);

  try {
    uint64_t header_bytes = 0;  // little-endian u64
    for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | static_cast<uint64_t>(mapping_[i]);
    if (header_bytes > file_bytes_ - 8)
      fail(path, ": the header length ", header_bytes, " (first 8 bytes) goes beyond the end of the file (",
           file_bytes_, " bytes): not a safetensors file, or truncated");
    data_start_ = 8 + static_cast<size_t>(header_bytes);
    const size_t data_bytes = file_bytes_ - data_start_;

    json header;
    try {
      header = json::parse(reinterpret_cast<const char*>(mapping_) + 8, reinterpret_cast<const char*>(mapping_) + data_start_);
    } catch (const json::parse_error& error) {
      fail(path, ": invalid safetensors header JSON: ", error.what());
    }
    ZT_CHECK(header.is_object(), path, ": the safetensors header is not a JSON object");
    for (const auto& [name, entry] : header.items()) {
      if (name == "__metadata__") {
        ZT_CHECK(entry.is_object(), path, ": __metadata__ is not an object of strings");
        for (const auto& [key, value] : entry.items()) {
          ZT_CHECK(value.is_string(), path, ": __metadata__ key '", key, "' = ", value.dump(), " is not a string");
          metadata_[key] = value.get<std::string>();
        }
        continue;
      }
      tensors_[name] = parse_tensor_entry(entry, path, name, data_bytes);
    }
    // Two tensors sharing bytes would read each other's values: the format forbids it.
    std::vector<std::pair<size_t, const std::string*>> by_offset;
    for (const auto& [name, info] : tensors_)
      if (info.bytes > 0) by_offset.push_back({info.offset, &name});
    std::sort(by_offset.begin(), by_offset.end());
    for (size_t i = 1; i < by_offset.size(); ++i) {
      const SafetensorsTensorInfo& before = tensors_.at(*by_offset[i - 1].second);
      ZT_CHECK(before.offset + before.bytes <= by_offset[i].first, path, ": tensors ", *by_offset[i - 1].second, " (data_offsets [",
               before.offset, ", ", before.offset + before.bytes, "]) and ", *by_offset[i].second, " (from ",
               by_offset[i].first, ") overlap: the header's data_offsets are damaged");
    }
  } catch (...) {
    ::munmap(const_cast<std::byte*>(mapping_), file_bytes_);
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (mapping_ != nullptr) ::munmap(const_cast<std::byte*>(mapping_), file_bytes_);
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> result;
  for (const auto& [name, info] : tensors_) result.push_back(name);
  return result;
}

const SafetensorsTensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto found = tensors_.find(name);
  if (found == tensors_.end()) fail(path_, ": no tensor named ", name);
  return found->second;
}

const std::byte* SafetensorsFile::raw_data(const std::string& name) const {
  return mapping_ + data_start_ + info(name).offset;
}

void SafetensorsFile::read(const std::string& name, DType dst_dtype, void* dst) const {
  const SafetensorsTensorInfo& tensor = info(name);
  DType stored;
  if (!dtype_from_safetensors(tensor.dtype, stored) ||
      (stored != dst_dtype && !(is_float(stored) && is_float(dst_dtype))))
    fail(path_, ": tensor ", name, " has dtype ", tensor.dtype, ", which zerotune cannot read as ",
         dtype_name(dst_dtype), " (floats must be F32, BF16 or F16)");
  convert_float_array(raw_data(name), stored, dst, dst_dtype, static_cast<size_t>(tensor.numel()));
}

// ---------------------------------------------------------------------------------------------
// reading a model directory

namespace {

json read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ZT_CHECK(in, path, ": cannot open: ", std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  try {
    return json::parse(text.str());
  } catch (const json::parse_error& error) {
    fail(path, ": invalid JSON: ", error.what());
  }
}

const char* kSingleWeightsName = "model.safetensors";
const char* kIndexName = "model.safetensors.index.json";

}  // namespace

ModelWeights::ModelWeights(const std::string& path) {
  std::string single, index;
  if (fs::is_directory(path)) {
    if (fs::exists(fs::path(path) / kSingleWeightsName)) {
      single = (fs::path(path) / kSingleWeightsName).string();
    } else if (fs::exists(fs::path(path) / kIndexName)) {
      index = (fs::path(path) / kIndexName).string();
    } else {
      const bool has_bin = fs::exists(fs::path(path) / "pytorch_model.bin") ||
                           fs::exists(fs::path(path) / "pytorch_model.bin.index.json");
      fail(path, ": no model weights: looked for ", kSingleWeightsName, " and ", kIndexName,
           has_bin ? " (pytorch_model.bin is not read: re-save with save_pretrained(safe_serialization=True))" : "");
    }
  } else if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0) {
    index = path;
  } else {
    single = path;
  }

  if (!single.empty()) {
    source_ = single;
    files_.push_back(std::make_unique<SafetensorsFile>(single));
    for (const std::string& name : files_.back()->names()) file_of_[name] = files_.back().get();
    return;
  }

  source_ = index;
  const json index_json = read_json_file(index);
  ZT_CHECK(index_json.is_object() && index_json.contains("weight_map") && index_json.at("weight_map").is_object(), index,
           ": expected an object with a \"weight_map\" object {tensor name: shard file}");
  const fs::path folder = fs::path(index).parent_path();
  std::map<std::string, const SafetensorsFile*> shard_by_name;
  for (const auto& [name, shard_value] : index_json.at("weight_map").items()) {
    ZT_CHECK(shard_value.is_string(), index, ": weight_map[\"", name, "\"] = ", shard_value.dump(), " is not a file name");
    const std::string shard = shard_value.get<std::string>();
    auto opened = shard_by_name.find(shard);
    if (opened == shard_by_name.end()) {
      const std::string shard_path = (folder / shard).string();
      if (!fs::exists(shard_path))
        fail(index, ": shard ", shard, " (holding tensor ", name, ") is missing: no file ", shard_path);
      files_.push_back(std::make_unique<SafetensorsFile>(shard_path));
      opened = shard_by_name.emplace(shard, files_.back().get()).first;
    }
    ZT_CHECK(opened->second->contains(name), index, ": tensor ", name, " is mapped to shard ", shard, " but ",
             opened->second->path(), " does not contain it");
    file_of_[name] = opened->second;
  }
}

std::vector<std::string> ModelWeights::names() const {
  std::vector<std::string> result;
  for (const auto& [name, file] : file_of_) result.push_back(name);
  return result;
}

const SafetensorsFile& ModelWeights::file_of(const std::string& name) const {
  auto found = file_of_.find(name);
  if (found == file_of_.end()) fail(source_, ": tensor ", name, " is not in the model's weights");
  return *found->second;
}

std::string ModelWeights::stored_name(const std::string& name) const {
  if (contains(name)) return name;
  const std::string prefix = "model.";
  if (name.rfind(prefix, 0) == 0 && contains(name.substr(prefix.size()))) return name.substr(prefix.size());
  return "";
}

const SafetensorsTensorInfo& ModelWeights::info(const std::string& name) const { return file_of(name).info(name); }

void ModelWeights::read(const std::string& name, DType dst_dtype, void* dst,
                        const std::vector<int64_t>& expected_shape) const {
  const SafetensorsFile& file = file_of(name);
  const std::vector<int64_t>& shape = file.info(name).shape;
  if (shape != expected_shape)
    fail(file.path(), ": tensor ", name, " has shape ", shape_string(shape), " but the model config needs ",
         shape_string(expected_shape));
  file.read(name, dst_dtype, dst);
}

// ---------------------------------------------------------------------------------------------
// writing

size_t entry_numel(const SafetensorsEntry& entry) {
  size_t count = 1;
  for (int64_t extent : entry.shape) count *= static_cast<size_t>(extent);
  return count;
}

namespace {

size_t stored_bytes(const SafetensorsEntry& entry) { return entry_numel(entry) * dtype_size(entry.stored_dtype); }

}  // namespace

void check_tensor_entries(const std::string& path, const std::vector<SafetensorsEntry>& entries) {
  std::set<std::string> seen;
  for (const SafetensorsEntry& entry : entries) {
    ZT_CHECK(!entry.name.empty() && entry.name != "__metadata__", path, ": cannot write a tensor named '", entry.name, "'");
    ZT_CHECK(seen.insert(entry.name).second, path, ": tensor ", entry.name, " is given twice");
    for (int64_t extent : entry.shape)
      ZT_CHECK(extent >= 0, path, ": tensor ", entry.name, " has a negative extent in shape ", shape_string(entry.shape));
    ZT_CHECK(entry.data != nullptr || entry_numel(entry) == 0, path, ": tensor ", entry.name, " has no data");
    ZT_CHECK(entry.data_dtype == entry.stored_dtype || (is_float(entry.data_dtype) && is_float(entry.stored_dtype)),
             path, ": tensor ", entry.name, ": cannot store ", dtype_name(entry.data_dtype), " data as ",
             dtype_name(entry.stored_dtype));
  }
}

void write_safetensors(const std::string& path, const std::vector<SafetensorsEntry>& entries,
                       const std::map<std::string, std::string>& metadata) {
  check_tensor_entries(path, entries);
  // ordered_json keeps __metadata__ first and the tensors in entry (= data) order.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  size_t offset = 0;
  for (const SafetensorsEntry& entry : entries) {
    const size_t bytes = stored_bytes(entry);
    header[entry.name] = {{"dtype", safetensors_dtype_name(entry.stored_dtype)},
                          {"shape", entry.shape},
                          {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string header_text = header.dump();
  header_text.append((8 - header_text.size() % 8) % 8, ' ');  // data starts 8-byte aligned

  AtomicFile file(path);
  unsigned char length[8];  // little-endian u64
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(static_cast<uint64_t>(header_text.size()) >> (8 * i));
  file.write(length, 8);
  file.write(header_text.data(), header_text.size());

  constexpr size_t kChunkElements = size_t{1} << 20;
  std::vector<std::byte> chunk;  // [kChunkElements * stored element size] converted values
  for (const SafetensorsEntry& entry : entries) {
    const size_t numel = entry_numel(entry);
    if (entry.data_dtype == entry.stored_dtype) {
      file.write(entry.data, numel * dtype_size(entry.data_dtype));
      continue;
    }
    chunk.resize(kChunkElements * dtype_size(entry.stored_dtype));
    const auto* source = static_cast<const std::byte*>(entry.data);
    for (size_t begin = 0; begin < numel; begin += kChunkElements) {
      const size_t count = std::min(kChunkElements, numel - begin);
      convert_float_array(source + begin * dtype_size(entry.data_dtype), entry.data_dtype, chunk.data(),
                          entry.stored_dtype, count);
      file.write(chunk.data(), count * dtype_size(entry.stored_dtype));
    }
  }
  file.commit();
}

void write_file_atomic(const std::string& path, const std::string& bytes) {
  AtomicFile file(path);
  file.write(bytes.data(), bytes.size());
  file.commit();
}

int64_t parse_byte_size(const std::string& text, const std::string& what) {
  static const std::regex pattern(R"(\s*([0-9]+)\s*([KMG]I?B|B)?\s*)", std::regex::icase);
  std::smatch match;
  ZT_CHECK(std::regex_match(text, match, pattern), what, " '", text,
           "' is not a size like 5GB, 500MB, 24GiB, 512MiB or a byte count (a positive number)");
  std::string unit = match[2].str();
  std::transform(unit.begin(), unit.end(), unit.begin(), [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  static const std::map<std::string, int64_t> scale = {{"", 1},          {"B", 1},          {"KB", 1000},
                                                       {"MB", 1000000}, {"GB", 1000000000}, {"KIB", 1 << 10},
                                                       {"MIB", 1 << 20}, {"GIB", 1 << 30}};
  const int64_t factor = scale.at(unit);
  // Digits beyond what int64 holds are too large, not a parse error (std::stoll would throw).
  std::string digits = match[1].str();
  digits.erase(0, std::min(digits.find_first_not_of('0'), digits.size() - 1));
  const bool too_long = digits.size() > 18;
  const int64_t number = too_long ? 0 : std::stoll(digits);
  ZT_CHECK(!too_long && number > 0 && number <= std::numeric_limits<int64_t>::max() / factor, what, " '", text,
           "' must be positive and below 2^63 bytes");
  return number * factor;
}

int64_t parse_max_shard_size(const std::string& text) { return parse_byte_size(text, "max shard size"); }

std::vector<std::string> write_sharded_safetensors(const std::string& dir, const std::vector<SafetensorsEntry>& entries,
                                                   int64_t max_shard_bytes) {
  ZT_CHECK(max_shard_bytes > 0, dir, ": max shard size must be positive, got ", max_shard_bytes);
  check_tensor_entries(dir, entries);
  std::error_code error;
  fs::create_directories(dir, error);
  ZT_CHECK(!error, dir, ": cannot create the directory: ", error.message());

  // transformers' shard_checkpoint: fill shards in order; start a new one when the next tensor
  // would go over the limit and the current one is not empty.
  std::vector<std::vector<SafetensorsEntry>> shards(1);
  size_t shard_bytes = 0, total_bytes = 0;
  for (const SafetensorsEntry& entry : entries) {
    const size_t bytes = stored_bytes(entry);
    if (shard_bytes + bytes > static_cast<size_t>(max_shard_bytes) && !shards.back().empty()) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(entry);
    shard_bytes += bytes;
    total_bytes += bytes;
  }

  const std::map<std::string, std::string> metadata = {{"format", "pt"}};
  std::vector<std::string> written;
  if (shards.size() == 1) {
    write_safetensors((fs::path(dir) / kSingleWeightsName).string(), entries, metadata);
    written.push_back(kSingleWeightsName);
  } else {
    json weight_map = json::object();
    for (size_t i = 0; i < shards.size(); ++i) {
      char name[64];
      std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
      write_safetensors((fs::path(dir) / name).string(), shards[i], metadata);
      for (const SafetensorsEntry& entry : shards[i]) weight_map[entry.name] = name;
      written.push_back(name);
    }
    json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
    write_file_atomic((fs::path(dir) / kIndexName).string(), index.dump(2) + "\n");
    written.push_back(kIndexName);
  }

  // An earlier save's weight files would shadow or contradict these (a model.safetensors is
  // read before an index): remove the ones this save did not write, as save_pretrained does.
  static const std::regex weight_file_pattern(R"(model(-\d{5}-of-\d{5})?\.safetensors(\.index\.json)?)");
  for (const fs::directory_entry& file : fs::directory_iterator(dir)) {
    const std::string name = file.path().filename().string();
    if (!std::regex_match(name, weight_file_pattern)) continue;
    if (std::find(written.begin(), written.end(), name) != written.end()) continue;
    fs::remove(file.path(), error);
    ZT_CHECK(!error, file.path().string(), ": cannot remove the stale weight file: ", error.message());
  }
  return written;
}

}  // namespace zt
