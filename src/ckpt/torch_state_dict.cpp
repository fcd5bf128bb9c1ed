// write_torch_state_dict (ckpt/torch_state_dict.h). The pickle opcodes are those of Python's
// pickletools (protocol 2); each one is written by the method named after it.
#include "ckpt/torch_state_dict.h"

#include <cstdint>
#include <filesystem>

#include "ckpt/zip_writer.h"
#include "core/error.h"

namespace zt {

namespace {

// The pickle of a state dict, opcode by opcode.
class Pickle {
 public:
  Pickle() { bytes_ += "\x80\x02"; }  // PROTO 2

  void mark() { bytes_ += '('; }
  void tuple() { bytes_ += 't'; }             // TUPLE: the items since the mark
  void empty_tuple() { bytes_ += ')'; }
  void reduce() { bytes_ += 'R'; }            // REDUCE: callable(*args)
  void binpersid() { bytes_ += 'Q'; }         // the persistent id on the stack
  void setitems() { bytes_ += 'u'; }          // SETITEMS: key/value pairs since the mark
  void newfalse() { bytes_ += '\x89'; }
  void stop() { bytes_ += '.'; }
  void global(const std::string& module, const std::string& name) { bytes_ += "c" + module + "\n" + name + "\n"; }
  void unicode(const std::string& text) {     // BINUNICODE: u32 length, UTF-8
    bytes_ += 'X';
    put_le(static_cast<uint64_t>(text.size()), 4);
    bytes_ += text;
  }
  void integer(int64_t value) {
    if (value >= 0 && value < 256) {           // BININT1
      bytes_ += 'K';
      put_le(static_cast<uint64_t>(value), 1);
    } else if (value >= INT32_MIN && value <= INT32_MAX) {  // BININT: signed 32-bit
      bytes_ += 'J';
      put_le(static_cast<uint64_t>(static_cast<uint32_t>(value)), 4);
    } else {                                   // LONG1: 8 bytes two's complement
      bytes_ += "\x8a\x08";
      put_le(static_cast<uint64_t>(value), 8);
    }
  }
  void int_tuple(const std::vector<int64_t>& values) {
    mark();
    for (int64_t value : values) integer(value);
    tuple();
  }
  // collections.OrderedDict() on the stack.
  void empty_ordered_dict() {
    global("collections", "OrderedDict");
    empty_tuple();
    reduce();
  }
  const std::string& bytes() const { return bytes_; }

 private:
  void put_le(uint64_t value, int bytes) {
    for (int i = 0; i < bytes; ++i) bytes_.push_back(static_cast<char>(value >> (8 * i)));
  }
  std::string bytes_;
};

const char* storage_class(DType dtype) {
  switch (dtype) {
    case DType::F32: return "FloatStorage";
    case DType::F16: return "HalfStorage";
    case DType::BF16: return "BFloat16Storage";
    default: fail("torch state dict: cannot store ", dtype_name(dtype), " tensors (fp32, fp16 and bf16 only)");
  }
}

// Row-major strides of SHAPE, in elements.
std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) strides[i - 1] = strides[i] * shape[i];
  return strides;
}

// Entry KEY's tensor: _rebuild_tensor_v2(persistent storage KEY, 0, size, stride, False, OrderedDict()).
void pickle_tensor(Pickle& pickle, const SafetensorsEntry& entry, const std::string& key) {
  pickle.global("torch._utils", "_rebuild_tensor_v2");
  pickle.mark();
  pickle.mark();  // the storage's persistent id
  pickle.unicode("storage");
  pickle.global("torch", storage_class(entry.stored_dtype));
  pickle.unicode(key);
  pickle.unicode("cpu");
  pickle.integer(static_cast<int64_t>(entry_numel(entry)));
  pickle.tuple();
  pickle.binpersid();
  pickle.integer(0);  // storage offset
  pickle.int_tuple(entry.shape);
  pickle.int_tuple(contiguous_strides(entry.shape));
  pickle.newfalse();  // requires_grad
  pickle.empty_ordered_dict();  // backward hooks
  pickle.tuple();
  pickle.reduce();
}

}  // namespace

void write_torch_state_dict(const std::string& path, const std::vector<SafetensorsEntry>& entries) {
  check_tensor_entries(path, entries);
  for (const SafetensorsEntry& entry : entries) storage_class(entry.stored_dtype);  // refuse before writing
  const std::string archive = std::filesystem::path(path).stem().string() + "/";
  Pickle pickle;
  pickle.empty_ordered_dict();
  pickle.mark();
  for (size_t i = 0; i < entries.size(); ++i) {
    pickle.unicode(entries[i].name);
    pickle_tensor(pickle, entries[i], std::to_string(i));
  }
  pickle.setitems();
  pickle.stop();

  StoredZipWriter zip(path);
  zip.add(archive + "data.pkl", pickle.bytes().data(), pickle.bytes().size());
  const std::string byteorder = "little";
  zip.add(archive + "byteorder", byteorder.data(), byteorder.size());
  std::vector<std::byte> stored;  // [numel * stored element size] one tensor, converted
  for (size_t i = 0; i < entries.size(); ++i) {
    const SafetensorsEntry& entry = entries[i];
    stored.resize(entry_numel(entry) * dtype_size(entry.stored_dtype));
    convert_float_array(entry.data, entry.data_dtype, stored.data(), entry.stored_dtype, entry_numel(entry));
    zip.add(archive + "data/" + std::to_string(i), stored.data(), stored.size());
  }
  const std::string version = "3\n";
  zip.add(archive + "version", version.data(), version.size());
  zip.finish();
}

}  // namespace zt
