// The safetensors format (HF's weight files): reading one file, reading a model directory
// (model.safetensors or shards + model.safetensors.index.json), and writing both the way
// transformers' save_pretrained does.
//
// A file is: 8 bytes little-endian u64 header length N; N bytes of JSON
//   {"__metadata__": {str: str} (optional), NAME: {"dtype": "F32", "shape": [..],
//    "data_offsets": [begin, end]}, ...}
// then the data section; offsets are relative to its start, tensors are row-major.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace zt {

// One tensor's header entry.
struct SafetensorsTensorInfo {
  std::string dtype;           // safetensors' name: "F32", "BF16", "F16", "I64", ...
  std::vector<int64_t> shape;  // empty for a scalar
  size_t offset = 0;           // from the start of the data section
  size_t bytes = 0;            // end - begin of data_offsets
  int64_t numel() const;
};

// "[a, b]": how messages print shapes.
std::string shape_string(const std::vector<int64_t>& shape);

// safetensors' dtype name of a zt DType ("F32", "BF16", "F16", "I32", "I64", "U8").
const char* safetensors_dtype_name(DType dtype);

// Converts `count` elements from src_dtype to dst_dtype (F32/BF16/F16 among themselves,
// round-to-nearest-even; any dtype to itself is a copy). Pointers need no alignment.
void convert_float_array(const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t count);

// One open .safetensors file: the header is parsed and checked on open (every tensor's bytes
// lie inside the file and match dtype x shape); the data is memory-mapped, read on demand.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  const SafetensorsTensorInfo& info(const std::string& name) const;  // error names file and tensor
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // The tensor's bytes as stored (info(name).bytes of them, in info(name).dtype).
  const std::byte* raw_data(const std::string& name) const;
  // Reads the tensor converted to dst_dtype (numel elements into dst): F32/BF16/F16 convert to
  // each other; other dtypes can only be read as themselves.
  void read(const std::string& name, DType dst_dtype, void* dst) const;
  void read_as_f32(const std::string& name, float* dst) const { read(name, DType::F32, dst); }

 private:
  std::string path_;
  const std::byte* mapping_ = nullptr;  // the whole file, read-only
  size_t file_bytes_ = 0;
  size_t data_start_ = 0;               // 8 + header length
  std::map<std::string, SafetensorsTensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// The weights of a model directory in HF layout. Opens DIR/model.safetensors if present, else
// DIR/model.safetensors.index.json and every shard it names (as transformers does); a path to
// a .safetensors file or to an index file is also accepted.
class ModelWeights {
 public:
  explicit ModelWeights(const std::string& path);

  const std::string& source() const { return source_; }  // the file or index read, for messages
  std::vector<std::string> names() const;                 // sorted
  bool contains(const std::string& name) const { return file_of_.count(name) != 0; }
  // The key under which the model's parameter `name` is stored: `name` itself, or `name` without
  // the causal-LM wrapper's "model." prefix (checkpoints saved from the base model class, e.g.
  // facebook/opt-*'s "decoder.embed_tokens.weight", which transformers loads the same way);
  // "" when neither is there.
  std::string stored_name(const std::string& name) const;
  const SafetensorsTensorInfo& info(const std::string& name) const;
  std::vector<int64_t> shape(const std::string& name) const { return info(name).shape; }
  const SafetensorsFile& file_of(const std::string& name) const;

  // Reads a tensor converted to dst_dtype, after checking its shape is the one the model
  // config needs ("FILE: tensor NAME has shape [a, b] but the model config needs [c, d]").
  void read(const std::string& name, DType dst_dtype, void* dst, const std::vector<int64_t>& expected_shape) const;
  void read_f32(const std::string& name, float* dst, const std::vector<int64_t>& expected_shape) const {
    read(name, DType::F32, dst, expected_shape);
  }

 private:
  std::string source_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const SafetensorsFile*> file_of_;
};

// One tensor to write. The file stores it as stored_dtype, converted from data_dtype when the
// two differ (F32/BF16/F16 only), so fp32 master weights can be written as bf16 without a copy.
struct SafetensorsEntry {
  std::string name;
  std::vector<int64_t> shape;
  const void* data = nullptr;       // numel(shape) elements of data_dtype, row-major
  DType data_dtype = DType::F32;
  DType stored_dtype = DType::F32;
};

// The elements of an entry's shape.
size_t entry_numel(const SafetensorsEntry& entry);
// Refuses entries no weight file can hold (PATH names the file): empty or repeated names,
// negative extents, missing data, a non-float conversion.
void check_tensor_entries(const std::string& path, const std::vector<SafetensorsEntry>& entries);

// Writes one .safetensors file: header padded with spaces to a multiple of 8 bytes, data in
// entry order. Atomic: written to PATH.tmp, flushed, then renamed over PATH.
void write_safetensors(const std::string& path, const std::vector<SafetensorsEntry>& entries,
                       const std::map<std::string, std::string>& metadata = {});

// transformers' default max_shard_size ("5GB" = 5 * 10^9 bytes).
constexpr int64_t kHfMaxShardBytes = 5'000'000'000;

// A size as transformers' max_shard_size spells it: a byte count, or a number with KB/MB/GB
// (powers of 10) or KiB/MiB/GiB (powers of 2), case-insensitive: "5GB", "50KB", "2GiB".
// `what` names the value in messages ("--device-memory", "max shard size"); it must be > 0.
int64_t parse_byte_size(const std::string& text, const std::string& what);
// parse_byte_size for --max-shard-size.
int64_t parse_max_shard_size(const std::string& text);

// Writes a model's weights into DIR the way save_pretrained(safe_serialization=True) does:
// model.safetensors when everything fits in max_shard_bytes, else shards
// model-0000i-of-0000n.safetensors (filled in entry order, a new shard when the next tensor
// would go over the limit) + model.safetensors.index.json {"metadata": {"total_size"},
// "weight_map"}. Every file carries the metadata {"format": "pt"} transformers requires.
// Weight files of an earlier save in DIR that this one does not use are removed.
// Returns the file names written (relative to DIR).
std::vector<std::string> write_sharded_safetensors(const std::string& dir, const std::vector<SafetensorsEntry>& entries,
                                                   int64_t max_shard_bytes = kHfMaxShardBytes);

// Writes bytes to PATH.tmp, flushes it to disk and renames it over PATH; every step checked.
void write_file_atomic(const std::string& path, const std::string& bytes);

}  // namespace zt
