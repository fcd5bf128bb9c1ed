// Rank-major packing and bucket planning for the ZeRO collectives.
#include "zero/rank_major.h"

#include <algorithm>

namespace zt {

namespace {
Tensor slice(Tensor flat, int64_t begin, int64_t numel) { return flat.rows(begin, numel); }
}  // namespace

int64_t slice_numel(std::span<const UnitRange> units, int partitions) {
  int64_t numel = 0;
  for (const UnitRange& unit : units) numel += unit.numel / partitions;
  return numel;
}

// Calls piece(full_offset, staging_offset, n) for every (rank, unit) piece of the rank-major
// layout: unit u's slice r sits at unit.begin + r*n of the full buffer and at r*S + (the
// slices of the units before u) of the staging buffer.
template <class Piece>
void for_each_rank_major_piece(std::span<const UnitRange> units, int partitions, Piece&& piece) {
  const int64_t per_rank = slice_numel(units, partitions);
  for (int r = 0; r < partitions; ++r) {
    int64_t at = r * per_rank;
    for (const UnitRange& unit : units) {
      const int64_t n = unit.numel / partitions;
      piece(unit.begin + r * n, at, n);
      at += n;
    }
  }
}

// Calls piece(partition_offset, contiguous_offset, n) for every unit's slice in a partition
// buffer (at unit.begin / W) and in a contiguous buffer of the units' slices in their order.
template <class Piece>
void for_each_slice(std::span<const UnitRange> units, int partitions, Piece&& piece) {
  int64_t at = 0;
  for (const UnitRange& unit : units) {
    const int64_t n = unit.numel / partitions;
    piece(unit.begin / partitions, at, n);
    at += n;
  }
}

void pack_rank_major(Backend& backend, Tensor staging, Tensor full, std::span<const UnitRange> units, int partitions) {
  for_each_rank_major_piece(units, partitions, [&](int64_t in_full, int64_t in_staging, int64_t n) {
    backend.copy(slice(staging, in_staging, n), slice(full, in_full, n));
  });
}

void unpack_rank_major(Backend& backend, Tensor full, Tensor staging, std::span<const UnitRange> units, int partitions) {
  for_each_rank_major_piece(units, partitions, [&](int64_t in_full, int64_t in_staging, int64_t n) {
    backend.copy(slice(full, in_full, n), slice(staging, in_staging, n));
  });
}

void gather_slices(Backend& backend, Tensor contiguous, Tensor partition, std::span<const UnitRange> units,
                   int partitions) {
  for_each_slice(units, partitions, [&](int64_t in_partition, int64_t in_contiguous, int64_t n) {
    backend.copy(slice(contiguous, in_contiguous, n), slice(partition, in_partition, n));
  });
}

void add_slices(Backend& backend, Tensor partition, Tensor contiguous, std::span<const UnitRange> units,
                int partitions) {
  for_each_slice(units, partitions, [&](int64_t in_partition, int64_t in_contiguous, int64_t n) {
    backend.accumulate(slice(partition, in_partition, n), slice(contiguous, in_contiguous, n), 1.0f);
  });
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

std::vector<TensorSlice> partition_tensor_slices(const ParamStore& store, ParamGroup group,
                                                 std::span<const UnitRange> units, int partitions, int index) {
  std::vector<TensorSlice> slices;
  if (units.empty()) return slices;
  const int64_t piece_begin = units.front().begin / partitions;  // where the piece starts in the partition
  for (const UnitRange& unit : units) {
    const int64_t slice = unit.numel / partitions;
    const int64_t lo = unit.begin + index * slice, hi = lo + slice;  // this rank's slice, group coordinates
    const int64_t at = unit.begin / partitions - piece_begin;  // the slice's start in the piece
    for (size_t e = 0; e < store.entries().size(); ++e) {
      const ParamEntry& entry = store.entries()[e];
      if (entry.group != group || entry.offset < unit.begin || entry.offset >= unit.begin + unit.numel) continue;
      const int64_t first = std::max(entry.offset, lo), last = std::min(entry.offset + entry.spec.numel(), hi);
      TensorSlice tensor;
      if (last > first) {
        tensor.begin = at + (first - lo);
        tensor.numel = last - first;
        tensor.offset = first - entry.offset;
      }
      tensor.shape = entry.spec.shape;
      tensor.entry = static_cast<int>(e);
      slices.push_back(std::move(tensor));
    }
  }
  return slices;
}

}  // namespace zt
