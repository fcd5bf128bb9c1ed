// Finding a checkpoint from what a user gives: the checkpoint directory itself, the run
// directory (OUT), OUT/checkpoints, or the `latest` file; and the fall-back to the newest
// complete checkpoint when `latest` is missing or names one that is not complete.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace zt {

// The complete checkpoints (directories global_step<N> holding manifest.json) under `root`
// (OUT/checkpoints), oldest first.
std::vector<std::string> list_complete_checkpoints(const std::string& root);

// The checkpoint directory `given` means: itself when it holds manifest.json; the one a
// `latest` file names; for a run directory or its checkpoints/, the one `latest` names, or the
// newest complete one when `latest` is missing or names no complete checkpoint (said on rank 0's
// stdout). Nothing when `given` is none of these. `option` ("--resume", "--checkpoint") is for
// the messages.
std::optional<std::string> locate_checkpoint(const std::string& given, const char* option);

}  // namespace zt
