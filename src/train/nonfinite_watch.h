// --report-nonfinite: where inf/NaN first appeared in a step, for the warning of a skipped step
// (fp16 overflow, or a non-finite gradient in bf16/fp32) - what DeepSpeed's "Overflow detected"
// does not say. Gradients appear in backward order (the last unit first), so the first unit
// whose gradient holds inf/NaN is where the overflow started; a non-finite loss says it started
// in the forward instead. It wraps the ZeRO engine's unit hooks: before the engine takes a
// unit's gradients (reduction, offload, a fused update), the unit's trainable gradients on this
// rank are checked, one has_inf_or_nan each. Each check waits for the device: a debugging aid,
// off by default.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "backend/backend.h"
#include "model/causal_lm.h"
#include "model/param_store.h"

namespace zt {

class NonFiniteWatch final : public UnitHooks {
 public:
  NonFiniteWatch(UnitHooks& engine, const ParamStore& store, Backend& backend);

  void begin_step();  // forgets the previous step's finding
  // The first gradient found non-finite in this step, e.g. "gradient of model.layers.1.mlp.down_proj.weight
  // (unit 2, backward of micro-batch 1; 3 of its 9 trainable tensors non-finite)"; empty when none.
  const std::optional<std::string>& finding() const { return finding_; }

  void acquire(int unit, UnitUse use) override { engine_.acquire(unit, use); }
  void release(int unit) override { engine_.release(unit); }
  void gradients_ready(int unit) override;

 private:
  UnitHooks& engine_;
  const ParamStore& store_;
  Backend& backend_;
  int64_t backward_passes_ = 0;  // in this step: unit 0 (the last of a backward) seen so often
  std::optional<std::string> finding_;
};

}  // namespace zt
