// Rank-major packing and bucket planning for the ZeRO collectives.
#include "zero/rank_major.h"

namespace zt {

namespace {
Tensor slice(Tensor flat, int64_t begin, int64_t numel) { return flat.rows(begin, numel); }
}  // namespace

int64_t slice_numel(std::span<const UnitRange> units, int partitions) {
  int64_t numel = 0;
  for (const UnitRange& unit : units) numel += unit.numel / partitions;
  return numel;
}

void pack_rank_major(Backend& backend, Tensor staging, Tensor full, std::span<const UnitRange> units, int partitions) {
  const int64_t per_rank = slice_numel(units, partitions);
  for (int r = 0; r < partitions; ++r) {
    int64_t at = r * per_rank;
    for (const UnitRange& unit : units) {
      const int64_t n = unit.numel / partitions;
      backend.copy(slice(staging, at, n), slice(full, unit.begin + r * n, n));
      at += n;
    }
  }
}

void unpack_rank_major(Backend& backend, Tensor full, Tensor staging, std::span<const UnitRange> units, int partitions) {
  const int64_t per_rank = slice_numel(units, partitions);
  for (int r = 0; r < partitions; ++r) {
    int64_t at = r * per_rank;
    for (const UnitRange& unit : units) {
      const int64_t n = unit.numel / partitions;
      backend.copy(slice(full, unit.begin + r * n, n), slice(staging, at, n));
      at += n;
    }
  }
}

void gather_slices(Backend& backend, Tensor contiguous, Tensor partition, std::span<const UnitRange> units,
                   int partitions) {
  int64_t at = 0;
  for (const UnitRange& unit : units) {
    const int64_t n = unit.numel / partitions;
    backend.copy(slice(contiguous, at, n), slice(partition, unit.begin / partitions, n));
    at += n;
  }
}

void add_slices(Backend& backend, Tensor partition, Tensor contiguous, std::span<const UnitRange> units,
                int partitions) {
  int64_t at = 0;
  for (const UnitRange& unit : units) {
    const int64_t n = unit.numel / partitions;
    backend.accumulate(slice(partition, unit.begin / partitions, n), slice(contiguous, at, n), 1.0f);
    at += n;
  }
}

std::vector<std::vector<UnitRange>> plan_buckets(const std::vector<UnitRange>& units, int64_t bucket_numel) {
  std::vector<std::vector<UnitRange>> buckets;
  int64_t filled = 0;
  for (const UnitRange& unit : units) {
    if (unit.numel == 0) continue;
    if (buckets.empty() || filled + unit.numel > bucket_numel) {
      buckets.emplace_back();
      filled = 0;
    }
    buckets.back().push_back(unit);
    filled += unit.numel;
  }
  return buckets;
}

}  // namespace zt
