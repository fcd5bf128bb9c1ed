// Checks of a checkpoint's contents beyond sizes and checksums: a manifest whose values are out
// of range (a hand edit, another tool) and a rank file that is not the partition or the step the
// manifest says (files copied between checkpoints) are errors naming the file and the key.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "comm/communicator.h"
#include "zero/zero_engine.h"

namespace zt {

// step, skipped, samples_consumed >= 0, skipped <= step, world_size and partitions >= 1,
// zero_stage 0-3, each an integer.
void check_manifest_values(const nlohmann::json& manifest, const std::string& manifest_path);

// Before a save: the file system of `dir` has room for `bytes` (the rank file about to be
// written), else "No space left on device" with the bytes needed and free, before anything is
// written (a save that fails half-way leaves a .tmp that the next start removes).
void check_free_space(const std::string& dir, uint64_t bytes, const std::string& what);

// Whether every rank's fp32 master partitions hold only finite values (collective: every rank
// calls it and gets the same answer). A run whose weights turned NaN or inf (a diverged update)
// must not save them as `latest` nor keep skipping steps (train/step_runner.h).
bool master_weights_finite(ZeroEngine& engine, Communicator& comm);

// The rank file's attributes partition, partitions and step against the manifest's.
void check_rank_file_attributes(const std::string& path, int64_t partition, int64_t partitions, int64_t step);

}  // namespace zt
