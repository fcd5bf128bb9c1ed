// make_optimizer: the one place that maps an optimizer type to its implementation.
#include "optim/optimizer.h"

#include "core/error.h"
#include "optim/adalomo.h"
#include "optim/adamw.h"
#include "optim/lamb.h"
#include "optim/lomo.h"
#include "optim/onebit_adam.h"
#include "optim/sgd.h"
#include "optim/zero_one_adam.h"

namespace zt {

namespace {

struct OptimizerRow {
  std::string type;
  std::unique_ptr<Optimizer> (*make)(const OptimizerConfig&);
};

const std::vector<OptimizerRow>& optimizer_rows() {
  static const std::vector<OptimizerRow> rows = {
      {"adamw", make_adamw},
      {"sgd", make_sgd},
      {"lamb", make_lamb},
      {"lomo", make_lomo},
      {"onebitadam", make_onebit_adam},
      {"adalomo", make_adalomo},
      {"zerooneadam", make_zero_one_adam},
  };
  return rows;
}

}  // namespace

const std::vector<std::string>& optimizer_types() {
  static const std::vector<std::string> types = [] {
    std::vector<std::string> names;
    for (const OptimizerRow& row : optimizer_rows()) names.push_back(row.type);
    return names;
  }();
  return types;
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config) {
  for (const OptimizerRow& row : optimizer_rows())
    if (row.type == config.type) return row.make(config);
  std::string known;
  for (const std::string& type : optimizer_types()) known += (known.empty() ? "" : ", ") + type;
  fail("optimizer '", config.type, "' is not one zerotune implements (", known, ")");
}

}  // namespace zt
