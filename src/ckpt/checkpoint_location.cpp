// Checkpoint lookup from a checkpoint, run or checkpoints/ directory or a `latest` file, and
// --resume's choice (checkpoint.h's resolve_resume_checkpoint).
#include "ckpt/checkpoint_location.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include <mpi.h>

#include "ckpt/checkpoint.h"
#include "comm/mpi/mpi_communicator.h"
#include "comm/null_communicator.h"
#include "core/error.h"

namespace zt {

namespace {

namespace fs = std::filesystem;

bool is_checkpoint(const fs::path& dir) { return fs::exists(dir / "manifest.json"); }

std::string read_tag(const fs::path& latest) {
  std::ifstream in(latest, std::ios::binary);
  ZT_CHECK(in, latest.string(), ": cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  std::string tag = text.str();
  tag.erase(tag.find_last_not_of(" \n\r\t") + 1);
  return tag;
}

void say(const std::string& line) {
  if (process_rank() != 0) return;
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

// Under OUT/checkpoints: what `latest` names, or (a save that died before `latest` was written,
// a `latest` lost or damaged) the newest complete checkpoint. Nothing when there is none.
std::optional<std::string> checkpoint_in_root(const fs::path& root, const char* option) {
  const fs::path latest = root / "latest";
  std::string why;
  if (fs::exists(latest)) {
    const std::string tag = read_tag(latest);
    if (!tag.empty() && tag.find('/') == std::string::npos && is_checkpoint(root / tag)) return (root / tag).string();
    why = cat(latest.string(), " names '", tag, "', which is not a complete checkpoint");
  } else {
    why = cat(latest.string(), " is missing");
  }
  const std::vector<std::string> tags = list_complete_checkpoints(root.string());
  if (tags.empty()) {
    ZT_CHECK(!fs::exists(latest), why, " and ", root.string(), " holds no complete checkpoint");
    return std::nullopt;
  }
  say(cat(option, ": ", why, "; using the newest complete checkpoint, ", tags.back()));
  return (root / tags.back()).string();
}

// --resume auto: `chosen` (what `latest` names) when its files are intact, else the newest older
// complete checkpoint that is, said on rank 0. A damaged save must not end a job that has an
// intact one before it (a disk error, a file truncated by a full disk after the save).
std::string newest_intact_checkpoint(const fs::path& root, const std::string& chosen, Communicator& comm) {
  const std::string first_damage = checkpoint_damage(chosen, comm);
  if (first_damage.empty()) return chosen;
  const std::vector<std::string> tags = list_complete_checkpoints(root.string());
  const std::string chosen_tag = fs::path(chosen).filename().string();
  const auto at = std::find(tags.begin(), tags.end(), chosen_tag);
  for (auto older = std::make_reverse_iterator(at); older != tags.rend(); ++older) {
    const std::string candidate = (root / *older).string();
    const std::string damage = checkpoint_damage(candidate, comm);
    if (!damage.empty()) {
      say(cat("--resume auto: ", candidate, " is damaged too (", damage, ")"));
      continue;
    }
    say(cat("--resume auto: ", chosen, " is damaged (", first_damage, "); resuming from ", candidate,
            ", the newest intact checkpoint"));
    return candidate;
  }
  fail("--resume auto: ", chosen, " is damaged (", first_damage, ") and no older checkpoint under ", root.string(),
       " is intact: start over with --overwrite, or restore the damaged file");
}

}  // namespace

std::vector<std::string> list_complete_checkpoints(const std::string& root) {
  std::vector<std::pair<int64_t, std::string>> found;
  const std::regex pattern("global_step([0-9]+)");
  std::smatch match;
  std::error_code error;
  if (fs::is_directory(root, error))
    for (const fs::directory_entry& entry : fs::directory_iterator(root, error)) {
      const std::string name = entry.path().filename().string();
      if (entry.is_directory() && std::regex_match(name, match, pattern) && is_checkpoint(entry.path()))
        found.push_back({std::stoll(match[1].str()), name});
    }
  std::sort(found.begin(), found.end());
  std::vector<std::string> tags;
  for (auto& [step, name] : found) tags.push_back(name);
  return tags;
}

std::optional<std::string> locate_checkpoint(const std::string& given, const char* option) {
  const fs::path path(given);
  if (is_checkpoint(path)) return given;
  if (fs::is_regular_file(path))  // a `latest` file: its directory's choice, fall-back included
    return path.filename() == "latest" ? checkpoint_in_root(path.parent_path(), option) : std::nullopt;
  if (!fs::is_directory(path)) return std::nullopt;
  if (fs::is_directory(path / "checkpoints")) return checkpoint_in_root(path / "checkpoints", option);
  if (fs::exists(path / "latest") || !list_complete_checkpoints(given).empty()) return checkpoint_in_root(path, option);
  return std::nullopt;
}

std::optional<std::string> resolve_resume_checkpoint(const std::string& resume, const std::string& out_dir,
                                                     Communicator& comm) {
  if (resume.empty()) return std::nullopt;
  if (resume != "auto") {
    const std::optional<std::string> found = locate_checkpoint(resume, "--resume");
    ZT_CHECK(found, "--resume ", resume,
             ": not a complete checkpoint (no manifest.json; incomplete saves end in .tmp), nor a run directory, "
             "its checkpoints/ or a `latest` file that leads to one");
    return found;
  }
  const fs::path root = fs::path(out_dir) / "checkpoints";
  const std::optional<std::string> chosen = checkpoint_in_root(root, "--resume auto");
  if (!chosen) return std::nullopt;
  return newest_intact_checkpoint(root, *chosen, comm);
}

std::optional<std::string> resolve_resume_checkpoint(const std::string& resume, const std::string& out_dir) {
  if (resume != "auto") return resolve_resume_checkpoint(resume, out_dir, *make_null_communicator(0, 1));
  const std::unique_ptr<Communicator> world = make_mpi_communicator(MPI_COMM_WORLD);
  return resolve_resume_checkpoint(resume, out_dir, *world);
}

}  // namespace zt
