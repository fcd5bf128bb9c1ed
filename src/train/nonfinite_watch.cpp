// NonFiniteWatch (see nonfinite_watch.h).
#include "train/nonfinite_watch.h"

#include <vector>

#include "core/error.h"

namespace zt {

NonFiniteWatch::NonFiniteWatch(UnitHooks& engine, const ParamStore& store, Backend& backend)
    : engine_(engine), store_(store), backend_(backend) {}

void NonFiniteWatch::begin_step() {
  backward_passes_ = 0;
  finding_.reset();
}

void NonFiniteWatch::gradients_ready(int unit) {
  if (!finding_) {
    std::vector<std::string> bad;
    int64_t checked = 0;
    for (const ParamEntry& entry : store_.entries()) {
      if (entry.unit != unit || entry.group == ParamGroup::Frozen) continue;
      ++checked;
      if (backend_.has_inf_or_nan(store_.grad(entry.spec.name))) bad.push_back(entry.spec.name);
    }
    if (!bad.empty())
      finding_ = cat("gradient of ", bad.front(), " (unit ", unit, ", backward of micro-batch ", backward_passes_ + 1,
                     "; ", bad.size(), " of the unit's ", checked, " trainable tensors hold inf/NaN)");
  }
  if (unit == 0) ++backward_passes_;
  engine_.gradients_ready(unit);
}

}  // namespace zt
