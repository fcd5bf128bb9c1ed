// Parameter lists: the architecture table's row decides them (architecture.h).
#include "model/param_spec.h"

#include "model/architecture.h"

namespace zt {

int64_t ParamSpec::numel() const {
  int64_t count = 1;
  for (int64_t extent : shape) count *= extent;
  return count;
}

std::vector<ParamSpec> stored_param_specs(const std::vector<ParamSpec>& specs) {
  std::vector<ParamSpec> stored;
  for (const ParamSpec& spec : specs)
    if (!spec.tied()) stored.push_back(spec);
  return stored;
}

std::vector<ParamSpec> model_param_specs(const ModelConfig& config) {
  return architecture(config.model_type, config.path).param_specs(config);
}

}  // namespace zt
