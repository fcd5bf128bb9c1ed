// UploadMirror: host copies of the small int32 arrays uploaded to the device (the positions of
// packed rows among them), so that an op can read their values on the host without waiting for
// the GPU: cuDNN's attention needs each packed sample's start and length to size its graph and
// its ragged offsets (cuda_attention.cu). Positions reach the device only through copy(),
// copy_async() or transfer_async() from the host; any other write into a mirrored range (a
// device-side copy, a fill, a release of the buffer) forgets the mirror, so a stale copy is never
// used. At most kEntries arrays of at most kMaxCount values are kept, the newest first.
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

namespace zt::cuda {

class UploadMirror {
 public:
  static constexpr size_t kEntries = 8;
  static constexpr int64_t kMaxCount = int64_t{1} << 22;  // 16 MiB of int32

  // `count` int32 at `host` were queued for copying to `device` (the bytes are copied now).
  void note_upload(const void* device, const int32_t* host, int64_t count) {
    note_write(device, static_cast<size_t>(count) * sizeof(int32_t));
    if (count <= 0 || count > kMaxCount) return;
    entries_.push_front(Entry{static_cast<const char*>(device), std::vector<int32_t>(host, host + count)});
    if (entries_.size() > kEntries) entries_.pop_back();
  }
  // Something other than a mirrored upload wrote [device, device + bytes): forget what overlaps.
  void note_write(const void* device, size_t bytes) {
    const char* begin = static_cast<const char*>(device);
    const char* end = begin + bytes;
    std::erase_if(entries_, [&](const Entry& entry) {
      const char* entry_end = entry.device + entry.values.size() * sizeof(int32_t);
      return entry.device < end && begin < entry_end;
    });
  }
  // A buffer starting at `device` was released: forget it.
  void note_release(const void* device) {
    std::erase_if(entries_, [&](const Entry& entry) { return entry.device == device; });
  }
  // The host copy of exactly `count` int32 uploaded to `device`, or null.
  const std::vector<int32_t>* find(const void* device, int64_t count) const {
    for (const Entry& entry : entries_) {
      if (entry.device == device && static_cast<int64_t>(entry.values.size()) == count) return &entry.values;
    }
    return nullptr;
  }

 private:
  struct Entry {
    const char* device;
    std::vector<int32_t> values;
  };
  std::deque<Entry> entries_;
};

}  // namespace zt::cuda
