// `zerotune inspect` on checkpoints: a checkpoint directory (manifest.json + rank files), or a
// run's OUT or OUT/checkpoints directory (every checkpoint found, `latest` marked): step, world
// size, ZeRO stage, dtype, LoRA, files with sizes and whether each checksum is OK.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace zt {

// True when DIR is a checkpoint, a checkpoints directory or a run directory that has one.
bool holds_checkpoints(const std::string& dir);

nlohmann::ordered_json inspect_checkpoints(const std::string& dir);
std::string format_checkpoint_report(const nlohmann::ordered_json& report);

}  // namespace zt
