// Keeping a checkpoint's global batch on another number of ranks (resume_batch.h).
#include "train/resume_batch.h"

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "core/error.h"

namespace zt {

namespace {

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> found;
  for (int64_t d = 1; d <= n; ++d)
    if (n % d == 0) found.push_back(d);
  return found;
}

// "1 rank", "4 ranks".
std::string ranks_text(int64_t count) { return cat(count, count == 1 ? " rank" : " ranks"); }

std::string joined_alternatives(const std::vector<std::string>& items) {
  std::string text;
  for (size_t i = 0; i < items.size(); ++i) text += (i == 0 ? "" : i + 1 == items.size() ? " or " : ", ") + items[i];
  return text;
}

// " (2 ranks x micro-batch 2 x gradient_accumulation_steps 1)": how the checkpoint's run made it.
std::string saved_arithmetic(const CheckpointBatch& saved) {
  if (saved.micro_batch_size <= 0 || saved.gradient_accumulation_steps <= 0)
    return cat(" on ", ranks_text(saved.world_size));
  return cat(" (", ranks_text(saved.world_size), " x micro-batch ", saved.micro_batch_size, " x gradient_accumulation_steps ",
             saved.gradient_accumulation_steps, ")");
}

// What differs from the checkpoint's run: "4 ranks instead of 8", "micro-batch 4 instead of 2".
std::string what_changed(const CheckpointBatch& saved, int world_size, int64_t micro) {
  std::vector<std::string> changes;
  if (saved.world_size != world_size) changes.push_back(cat(ranks_text(world_size), " instead of ", saved.world_size));
  if (saved.micro_batch_size > 0 && saved.micro_batch_size != micro)
    changes.push_back(cat("micro-batch ", micro, " instead of ", saved.micro_batch_size));
  if (changes.empty()) return "another batch arithmetic";
  return changes.size() == 1 ? changes[0] : changes[0] + " and " + changes[1];
}

}  // namespace

std::string flags_for_batch(int64_t train_batch_size, int world_size, int64_t preferred_micro) {
  ZT_CHECK(train_batch_size >= 1 && world_size >= 1, "flags_for_batch: train_batch_size ", train_batch_size,
           " on ", world_size, " ranks");
  if (train_batch_size % world_size != 0) {
    // The rank counts nearest this one that divide the global batch.
    std::vector<int64_t> ranks = divisors(train_batch_size);
    std::stable_sort(ranks.begin(), ranks.end(),
                     [&](int64_t a, int64_t b) { return std::llabs(a - world_size) < std::llabs(b - world_size); });
    ranks.resize(std::min<size_t>(ranks.size(), 3));
    std::sort(ranks.begin(), ranks.end());
    std::vector<std::string> counts;
    for (int64_t count : ranks) counts.push_back(cat(count));
    return cat("no micro-batch and accumulation split train_batch_size ", train_batch_size, " over ",
               ranks_text(world_size), ": resume on a number of ranks that divides it (mpirun -np ",
               joined_alternatives(counts), ")");
  }
  // Micro-batch x accumulation = the samples of each rank per step: the preferred micro-batch
  // first, then the largest (fewest micro-batches per step).
  const int64_t per_rank = train_batch_size / world_size;
  std::vector<int64_t> micros = divisors(per_rank);
  std::reverse(micros.begin(), micros.end());
  const auto preferred = std::find(micros.begin(), micros.end(), preferred_micro);
  if (preferred != micros.end()) std::rotate(micros.begin(), preferred, preferred + 1);
  micros.resize(std::min<size_t>(micros.size(), 3));
  std::vector<std::string> flags;
  for (int64_t micro : micros) flags.push_back(cat("--micro-batch-size ", micro, " --grad-accum ", per_rank / micro));
  return "use " + joined_alternatives(flags);
}

std::optional<ResumeBatchDecision> keep_checkpoint_batch(TrainConfig& config, int world_size, bool accumulation_fixed,
                                                         const CheckpointBatch& saved,
                                                         const std::string& checkpoint_dir) {
  ZT_CHECK(world_size >= 1, "keep_checkpoint_batch: world size ", world_size, " must be >= 1");
  ZT_CHECK(saved.train_batch_size >= 1 && saved.world_size >= 1, checkpoint_dir, ": the manifest records train_batch_size ",
           saved.train_batch_size, " on ", saved.world_size, " ranks");
  const int64_t wanted = saved.train_batch_size, world = world_size;
  const std::string made = cat(checkpoint_dir, ": the checkpoint was made with train_batch_size ", wanted,
                               saved_arithmetic(saved));
  // A train_batch_size given (the DeepSpeed JSON) is DeepSpeed's to split; it must be the checkpoint's.
  if (config.train_batch_size > 0) {
    ZT_CHECK(config.train_batch_size == wanted, made, ", this run sets train_batch_size ", config.train_batch_size,
             " (", config.deepspeed_config_path.empty() ? "given" : config.deepspeed_config_path, "): set it to ", wanted,
             " to resume, or start a new run in another --out");
    return std::nullopt;
  }
  // What resolve_batch_sizes would make of the given numbers (zerotune's defaults: 1 and 1).
  const int64_t micro = config.micro_batch_size > 0 ? config.micro_batch_size : 1;
  const int64_t accumulation = config.gradient_accumulation_steps > 0 ? config.gradient_accumulation_steps : 1;
  const int64_t would = micro * accumulation * world;
  if (would == wanted) return std::nullopt;
  const std::string arithmetic = cat("this run's micro-batch ", micro, " x gradient_accumulation_steps ", accumulation,
                                     " x ", ranks_text(world), " = ", would);
  ZT_CHECK(!accumulation_fixed, made, "; ", arithmetic, ", and gradient_accumulation_steps ", accumulation,
           " is given (--grad-accum or the DeepSpeed JSON), so zerotune does not choose it: to keep train_batch_size ",
           wanted, " on ", ranks_text(world), ", ", flags_for_batch(wanted, world_size, micro),
           ", or start a new run in another --out");
  ZT_CHECK(wanted % (micro * world) == 0, made, "; ", arithmetic, ", and no gradient_accumulation_steps keeps ", wanted,
           " with micro-batch ", micro, " on ", ranks_text(world), ": ", flags_for_batch(wanted, world_size, micro),
           ", or start a new run in another --out");
  ResumeBatchDecision decision;
  decision.gradient_accumulation_steps = wanted / (micro * world);
  const std::string before = saved.gradient_accumulation_steps > 0 ? cat(saved.gradient_accumulation_steps, " ") : "";
  decision.text = cat(what_changed(saved, world_size, micro), ": gradient_accumulation_steps ", before, "-> ",
                      decision.gradient_accumulation_steps, " keeps train_batch_size ", wanted);
  decision.record = {{"checkpoint", checkpoint_dir},
                     {"train_batch_size", wanted},
                     {"checkpoint_world_size", saved.world_size},
                     {"checkpoint_micro_batch_size", saved.micro_batch_size},
                     {"checkpoint_gradient_accumulation_steps", saved.gradient_accumulation_steps},
                     {"world_size", world_size},
                     {"micro_batch_size", micro},
                     {"gradient_accumulation_steps", decision.gradient_accumulation_steps},
                     {"decision", decision.text}};
  config.gradient_accumulation_steps = decision.gradient_accumulation_steps;
  return decision;
}

}  // namespace zt
