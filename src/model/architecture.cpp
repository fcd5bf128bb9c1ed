// The architecture table (architecture.h).
#include "model/architecture.h"

#include "core/error.h"

namespace zt {

const std::vector<Architecture>& architectures() {
  static const std::vector<Architecture> table = {
      llama_architecture(),
      mistral_architecture(),
      qwen2_architecture(),
      opt_architecture(),
  };
  return table;
}

std::string supported_model_types() {
  std::string names;
  for (const Architecture& row : architectures()) names += (names.empty() ? "" : ", ") + row.model_type;
  return names;
}

const Architecture& architecture(const std::string& model_type, const std::string& where) {
  for (const Architecture& row : architectures())
    if (row.model_type == model_type) return row;
  fail(where, ": key 'model_type' = \"", model_type, "\": not supported (supported: ", supported_model_types(), ")");
}

}  // namespace zt
