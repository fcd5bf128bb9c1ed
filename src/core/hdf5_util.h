// Small, checked wrappers over the HDF5 C API shared by the token shards (src/data) and the
// checkpoints (src/ckpt): an owning handle per identifier, scalar attributes, 1-D datasets and
// hyperslab reads. Every failure is a zt::Error "<path>: HDF5 failed to <what>".
//
// HDF5 is only safe to call from two threads at once when it was built with its thread-safe
// option (Debian 12's libhdf5 1.10 is; many source, module and conda builds are not), so we do
// not rely on it: every HDF5 call holds hdf5_mutex(), one process-wide recursive lock (the batch
// prefetcher reads shards on its own thread while the main thread evaluates or checkpoints).
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <utility>

namespace zt {

std::recursive_mutex& hdf5_mutex();  // see above

namespace h5 {

// HDF5 prints its own error stack to stderr by default; our messages say what went wrong.
void silence_error_printing();

// Owns one HDF5 identifier and closes it with the matching H5?close function.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  Handle(Handle&& other) noexcept : id_(std::exchange(other.id_, H5I_INVALID_HID)), closer_(other.closer_) {}
  Handle& operator=(Handle&& other) noexcept {
    if (this != &other) {
      reset();
      id_ = std::exchange(other.id_, H5I_INVALID_HID);
      closer_ = other.closer_;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() { reset(); }

  hid_t get() const { return id_; }
  // Closes now and reports failure (closing a file flushes it: a failed close is a failed write).
  bool close() {
    if (id_ < 0) return true;
    return closer_(std::exchange(id_, H5I_INVALID_HID)) >= 0;
  }

 private:
  void reset() {
    if (id_ >= 0) closer_(std::exchange(id_, H5I_INVALID_HID));
  }
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

// Wrap a freshly returned identifier, failing with "<path>: HDF5 failed to <what>".
Handle owned(hid_t id, Handle::Closer closer, const std::string& path, const std::string& what);
inline Handle owned_file(hid_t id, const std::string& path, const std::string& what) { return owned(id, H5Fclose, path, what); }
inline Handle owned_dataset(hid_t id, const std::string& path, const std::string& what) { return owned(id, H5Dclose, path, what); }
inline Handle owned_space(hid_t id, const std::string& path, const std::string& what) { return owned(id, H5Sclose, path, what); }
inline Handle owned_type(hid_t id, const std::string& path, const std::string& what) { return owned(id, H5Tclose, path, what); }
inline Handle owned_plist(hid_t id, const std::string& path, const std::string& what) { return owned(id, H5Pclose, path, what); }
inline Handle owned_attribute(hid_t id, const std::string& path, const std::string& what) { return owned(id, H5Aclose, path, what); }
void check_status(herr_t status, const std::string& path, const std::string& what);

std::string describe_type(hid_t type);  // "int32", "float32", "string", ... for messages

void write_int64_attribute(hid_t object, const std::string& path, const char* name, int64_t value);
void write_string_attribute(hid_t object, const std::string& path, const char* name, const std::string& value);
bool has_attribute(hid_t object, const std::string& path, const char* name);
int64_t read_int64_attribute(hid_t object, const std::string& path, const char* name);
std::string read_string_attribute(hid_t object, const std::string& path, const char* name);

// A contiguous 1-D float32 dataset of n elements (checkpoint state: written once, read in ranges).
void write_f32_dataset(hid_t file, const std::string& path, const char* name, const float* data, hsize_t n);
// Opens a 1-D float32 dataset that must exist; sets `length`.
Handle open_f32_dataset(hid_t file, const std::string& path, const char* name, hsize_t& length);
// Reads elements [begin, begin + count) of a 1-D dataset (a hyperslab: only that range is read).
void read_1d_range(hid_t dataset, const std::string& path, const char* name, hid_t memory_type, hsize_t begin,
                   hsize_t count, void* out);

}  // namespace h5
}  // namespace zt
