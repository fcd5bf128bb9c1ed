// The versions of zerotune and of the libraries it runs on, recorded in run.json so a result
// can be traced to the software that produced it.
#pragma once
#include <nlohmann/json.hpp>

namespace zt {

nlohmann::json software_versions();

}  // namespace zt
