// Checks of a checkpoint's contents beyond sizes and checksums: a manifest whose values are out
// of range (a hand edit, another tool) and a rank file that is not the partition or the step the
// manifest says (files copied between checkpoints) are errors naming the file and the key.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace zt {

// step, skipped, samples_consumed >= 0, skipped <= step, world_size and partitions >= 1,
// zero_stage 0-3, each an integer.
void check_manifest_values(const nlohmann::json& manifest, const std::string& manifest_path);

// The rank file's attributes partition, partitions and step against the manifest's.
void check_rank_file_attributes(const std::string& path, int64_t partition, int64_t partitions, int64_t step);

}  // namespace zt
