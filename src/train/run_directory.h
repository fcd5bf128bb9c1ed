// The output directory of `zerotune train` as one job's own: a lock so that a second job into
// the same --out refuses at start, a refusal to mix a new run into a directory that holds
// another one (unless --resume or --overwrite), and the removal of what a failed save left.
#pragma once
#include <cstdint>
#include <string>

#include "comm/communicator.h"

namespace zt {

// Collective (every rank calls it; rank 0 does the work, the others receive its verdict so the
// whole job fails with one message). Creates OUT, takes the lock OUT/.zerotune.lock for the
// process's lifetime (flock: released when the process ends, crashes included), refuses a
// directory that already holds a run (metrics records or checkpoints) unless `resuming`, empties
// it of the previous run's files when `overwrite`, and removes OUT/checkpoints/*.tmp.
void claim_run_directory(const std::string& out_dir, bool resuming, bool overwrite, Communicator& comm);

// On resume, metrics.jsonl keeps only the records up to the checkpoint's step (the steps after
// it run again and append theirs). Lines that are not JSON records (a write cut short by a full
// disk or a kill, two writers) are dropped too, with a warning, so that one damaged line cannot
// stop every later resume. Returns the number of damaged lines dropped.
int64_t trim_metrics_for_resume(const std::string& metrics_path, int64_t step);

// Writes `text` as the whole file `path` (run.json, profile.json); an error names the path.
void write_text_file(const std::string& path, const std::string& text);

}  // namespace zt
