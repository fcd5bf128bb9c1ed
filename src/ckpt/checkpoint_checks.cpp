// Manifest value ranges and rank-file attributes (checkpoint_checks.h).
#include "ckpt/checkpoint_checks.h"

#include <sys/statvfs.h>

#include <cmath>
#include <limits>
#include <mutex>

#include "core/error.h"
#include "core/hdf5_util.h"

namespace zt {

namespace {

int64_t integer_at(const nlohmann::json& manifest, const std::string& path, const char* key, int64_t low, int64_t high) {
  ZT_CHECK(manifest.contains(key) && manifest.at(key).is_number_integer(), path, ": key '", key, "' = ",
           manifest.contains(key) ? manifest.at(key).dump() : std::string("(missing)"), ": expected an integer");
  const int64_t value = manifest.at(key).get<int64_t>();
  ZT_CHECK(value >= low && value <= high, path, ": key '", key, "' = ", value, " is outside [", low, ", ", high,
           "] (the manifest is damaged or was edited)");
  return value;
}

}  // namespace

void check_manifest_values(const nlohmann::json& manifest, const std::string& manifest_path) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  const int64_t step = integer_at(manifest, manifest_path, "step", 0, kMax);
  integer_at(manifest, manifest_path, "skipped", 0, step);
  integer_at(manifest, manifest_path, "samples_consumed", 0, kMax);
  integer_at(manifest, manifest_path, "world_size", 1, kMax);
  integer_at(manifest, manifest_path, "partitions", 1, kMax);
  integer_at(manifest, manifest_path, "zero_stage", 0, 3);
}

void check_free_space(const std::string& dir, uint64_t bytes, const std::string& what) {
  struct statvfs fs {};
  if (::statvfs(dir.c_str(), &fs) != 0) return;  // nothing known: the write itself will say
  const uint64_t free_bytes = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
  ZT_CHECK(free_bytes >= bytes, what, ": No space left on device: it needs about ", bytes, " bytes in ", dir, ", the file system has ",
           free_bytes, " free (free space, or save elsewhere with another --out)");
}

void check_rank_file_attributes(const std::string& path, int64_t partition, int64_t partitions, int64_t step) {
  std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
  h5::silence_error_printing();
  const h5::Handle file = h5::owned_file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), path, "open the checkpoint file");
  const auto expect = [&](const char* key, int64_t wanted) {
    const int64_t value = h5::read_int64_attribute(file.get(), path, key);
    ZT_CHECK(value == wanted, path, ": attribute '", key, "' is ", value, " but the manifest needs ", wanted,
             " (a rank file from another checkpoint or partition was copied here)");
  };
  expect("partition", partition);
  expect("partitions", partitions);
  expect("step", step);
}

bool master_weights_finite(ZeroEngine& engine, Communicator& comm) {
  bool finite = true;
  for (const ZeroEngine::PartitionViews& views : engine.partition_views()) {
    for (const ZeroEngine::PartitionViews::Part& part : views.parts) {
      const Tensor& master = part.master;
      if (master.device == Device::CPU) {  // host memory (the CPU backend, optimizer offload): read in place
        const float* values = master.f32();
        for (int64_t i = 0; i < master.numel() && finite; ++i) finite = std::isfinite(values[i]);
      } else {
        finite = !engine.backend().has_inf_or_nan(master);
      }
      if (!finite) break;
    }
    if (!finite) break;
  }
  return comm.all_reduce_max(finite ? 0.0 : 1.0) == 0.0;
}

}  // namespace zt
