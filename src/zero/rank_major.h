// Rank-major packing for bucketed collectives over several units (param_store.h "Units").
// Partition r of a bucket of units is the concatenation of each unit's slice r; a
// reduce-scatter or all-gather over the bucket needs those W pieces laid out one after the
// other ("rank-major"). Because every unit's slices start at unit.begin / W in a partition
// buffer, rank r's pieces of consecutive units are also consecutive there.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "model/param_store.h"
#include "optim/optimizer.h"

namespace zt {

// Element count of one rank's slices of these units.
int64_t slice_numel(std::span<const UnitRange> units, int partitions);

// staging[W * S] (rank-major, S = slice_numel) <- the units' ranges of full[group numel].
void pack_rank_major(Backend& backend, Tensor staging, Tensor full, std::span<const UnitRange> units, int partitions);
// The units' ranges of full[group numel] <- staging[W * S].
void unpack_rank_major(Backend& backend, Tensor full, Tensor staging, std::span<const UnitRange> units, int partitions);

// The units' slices of a partition buffer [group numel / W] <-> a contiguous [S] buffer, in
// the units' order (which need not be the partition order).
void gather_slices(Backend& backend, Tensor contiguous, Tensor partition, std::span<const UnitRange> units,
                   int partitions);
void add_slices(Backend& backend, Tensor partition, Tensor contiguous, std::span<const UnitRange> units,
                int partitions);

// The parameter tensors of `group` inside the piece of partition `index` of `partitions` that
// covers `units` (consecutive, ascending; the piece starts at units.front().begin / partitions):
// each tensor's slice on this rank in piece coordinates (with its offset in the tensor, the
// tensor's shape and entry index), in the group's order. Every rank gets the same list (empty
// slices included), so per-tensor sums line up across ranks.
std::vector<TensorSlice> partition_tensor_slices(const ParamStore& store, ParamGroup group,
                                                 std::span<const UnitRange> units, int partitions, int index);

// Units cut into buckets of consecutive units holding at most `bucket_numel` elements (a unit
// larger than a bucket is a bucket of its own); units with no elements are left out.
std::vector<std::vector<UnitRange>> plan_buckets(const std::vector<UnitRange>& units, int64_t bucket_numel);

}  // namespace zt
