// OUT's lock, the refusal to mix two runs in one directory, leftovers of failed saves, and the
// trimming of metrics.jsonl on resume.
#include "train/run_directory.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/safetensors.h"

namespace zt {

namespace {

namespace fs = std::filesystem;

constexpr const char* kLockName = ".zerotune.lock";
// The previous run's files that --overwrite removes (nothing else in OUT is touched).
constexpr const char* kRunFiles[] = {"checkpoints", "metrics.jsonl", "run.json", "profile.json", "report.html"};

// The lock's descriptor stays open until the process ends: the kernel drops the flock then,
// also after a crash or kill -9, so a stale lock never blocks the next job.
int held_lock_fd = -1;

void take_lock(const fs::path& out) {
  const fs::path path = out / kLockName;
  if (held_lock_fd >= 0) return;  // this process holds it already
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ZT_CHECK(fd >= 0, path.string(), ": cannot create the lock file of --out: ", std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    char holder[256] = {0};
    const ssize_t got = ::pread(fd, holder, sizeof(holder) - 1, 0);
    ::close(fd);
    std::string who = got > 0 ? std::string(holder, static_cast<size_t>(got)) : std::string();
    while (!who.empty() && (who.back() == '\n' || who.back() == ' ')) who.pop_back();
    if (error == EWOULDBLOCK)
      fail("--out ", out.string(), " is in use by another zerotune job (", who.empty() ? "lock " : who + "; lock ",
           path.string(), "): wait for it to end or give another --out");
    if (error == ENOLCK || error == EOPNOTSUPP || error == ENOSYS) {  // a file system without locks
      std::printf("warning: %s: cannot lock (%s): nothing stops a second job from writing into --out %s\n",
                  path.c_str(), std::strerror(error), out.c_str());
      return;
    }
    fail(path.string(), ": cannot lock the file: ", std::strerror(error));
  }
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  const std::string text = cat("pid ", ::getpid(), " on ", host, "\n");
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()))
    fail(path.string(), ": cannot write the lock file: ", std::strerror(errno));
  held_lock_fd = fd;
}

// What of a previous run OUT holds ("" when none): metrics records or checkpoints.
std::string previous_run(const fs::path& out) {
  std::vector<std::string> found;
  std::error_code error;
  if (fs::file_size(out / "metrics.jsonl", error) > 0 && !error) found.push_back("metrics.jsonl");
  const fs::path root = out / "checkpoints";
  if (fs::is_directory(root, error)) {
    int64_t checkpoints = 0;
    for (const fs::directory_entry& entry : fs::directory_iterator(root, error))
      if (fs::exists(entry.path() / "manifest.json")) ++checkpoints;
    if (checkpoints > 0) found.push_back(cat(checkpoints, " checkpoint(s) in checkpoints/"));
    else if (fs::exists(root / "latest")) found.push_back("checkpoints/latest");
  }
  std::string text;
  for (const std::string& item : found) text += (text.empty() ? "" : ", ") + item;
  return text;
}

void claim_on_leader(const fs::path& out, bool resuming, bool overwrite) {
  ZT_CHECK(!(resuming && overwrite), "--overwrite starts the run over and --resume continues it: give one of them");
  std::error_code error;
  fs::create_directories(out, error);
  ZT_CHECK(!error, out.string(), ": cannot create the output directory (--out): ", error.message());
  ZT_CHECK(fs::is_directory(out), "--out ", out.string(), " is not a directory");
  take_lock(out);
  const std::string previous = previous_run(out);
  if (!previous.empty() && !resuming) {
    ZT_CHECK(overwrite, "--out ", out.string(), " already holds a run (", previous,
             "): continue it with --resume auto, start over with --overwrite (removes its checkpoints and metrics), "
             "or give another --out");
    for (const char* name : kRunFiles) {
      fs::remove_all(out / name, error);
      ZT_CHECK(!error, (out / name).string(), ": cannot remove it for --overwrite: ", error.message());
    }
    std::printf("--overwrite: removed the previous run in %s (%s)\n", out.c_str(), previous.c_str());
  }
  // A save that failed (disk full, a kill) leaves <tag>.tmp: it is never read, and keeping it
  // would keep the disk full for the retry.
  const fs::path root = out / "checkpoints";
  if (fs::is_directory(root, error))
    for (const fs::directory_entry& entry : fs::directory_iterator(root, error)) {
      if (entry.path().extension() != ".tmp") continue;
      fs::remove_all(entry.path(), error);
      ZT_CHECK(!error, entry.path().string(), ": cannot remove the leftover of a failed save: ", error.message());
      std::printf("removed %s (the leftover of a save that did not complete)\n", entry.path().c_str());
    }
  std::fflush(stdout);
}

}  // namespace

void claim_run_directory(const std::string& out_dir, bool resuming, bool overwrite, Communicator& comm) {
  std::string verdict;  // rank 0's error message, empty when the directory is ours
  if (comm.rank() == 0) {
    try {
      claim_on_leader(out_dir, resuming, overwrite);
    } catch (const Error& error) {
      verdict = error.what();
    }
  }
  if (comm.size() > 1) verdict = comm.all_gather_strings(verdict).front();
  if (!verdict.empty()) throw Error(verdict);
}

int64_t trim_metrics_for_resume(const std::string& metrics_path, int64_t step) {
  std::ifstream in(metrics_path);
  if (!in) return 0;
  std::string kept, line;
  int64_t damaged = 0, line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, false);
    if (record.is_discarded() || !record.is_object() || !record.contains("step") || !record["step"].is_number_integer()) {
      ++damaged;
      std::printf("warning: %s:%lld is not a metrics record (a write cut short?): dropped\n", metrics_path.c_str(),
                  static_cast<long long>(line_number));
      continue;
    }
    if (record["step"].get<int64_t>() > step) continue;
    kept += line + "\n";
  }
  in.close();
  write_file_atomic(metrics_path, kept);
  return damaged;
}

void write_text_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  ZT_CHECK(out, path, ": cannot write: ", std::strerror(errno));
}

}  // namespace zt
