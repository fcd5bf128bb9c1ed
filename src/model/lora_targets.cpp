// PEFT-style target_modules matching (lora_targets.h).
#include "model/lora_targets.h"

#include <algorithm>
#include <map>
#include <regex>
#include <set>

#include "core/error.h"

namespace zt {

namespace {

// "model.layers.0.self_attn.q_proj.weight" -> "model.layers.0.self_attn.q_proj"
std::string module_path_of(const ParamSpec& spec) {
  const std::string suffix = ".weight";
  const std::string& name = spec.name;
  return name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0
             ? name.substr(0, name.size() - suffix.size())
             : name;
}

bool adaptable(const ParamSpec& spec) {
  return spec.role == ParamRole::Linear && spec.module != "lm_head" && !spec.tied();
}

bool selects(const std::string& target, const std::string& path, bool regex, const std::regex& pattern) {
  if (regex) return std::regex_match(path, pattern);
  return path == target || (path.size() > target.size() && path.compare(path.size() - target.size(), target.size(), target) == 0 &&
                            path[path.size() - target.size() - 1] == '.');
}

std::string join(const std::vector<std::string>& names) {
  std::string text;
  for (const std::string& name : names) text += (text.empty() ? "" : ", ") + name;
  return text;
}

}  // namespace

bool is_lora_target_regex(const std::string& target) {
  return target.find_first_of("*()[]|\\^$+?{}") != std::string::npos;
}

std::vector<std::string> parse_lora_targets(const std::string& text) {
  if (is_lora_target_regex(text)) return {text};
  std::vector<std::string> names;
  std::string name;
  for (char c : text + ",") {
    if (c == ',' || c == ' ' || c == '\t') {
      if (!name.empty()) names.push_back(name);
      name.clear();
    } else {
      name += c;
    }
  }
  return names;
}

std::vector<std::string> match_lora_targets(const std::vector<ParamSpec>& specs, const std::vector<std::string>& targets) {
  ZT_CHECK(!targets.empty(), "--lora-targets is empty: name modules (e.g. q_proj,v_proj), all-linear or a regular expression");
  std::vector<std::string> module_names;  // adaptable module names, model order
  std::map<std::string, int> instances;   // module name -> how many layers have it
  for (const ParamSpec& spec : specs) {
    if (!adaptable(spec)) continue;
    if (!instances.count(spec.module)) module_names.push_back(spec.module);
    ++instances[spec.module];
  }
  std::set<std::string> chosen;
  for (const std::string& target : targets) {
    if (target == "all-linear") return {"all-linear"};
    const bool regex = is_lora_target_regex(target);
    std::regex pattern;
    if (regex) {
      try {
        pattern = std::regex(target, std::regex::ECMAScript);
      } catch (const std::regex_error& error) {
        fail("LoRA target '", target, "' is not a valid regular expression: ", error.what());
      }
    }
    std::map<std::string, int> hits;  // module name -> instances selected
    for (const ParamSpec& spec : specs) {
      if (spec.role != ParamRole::Linear && spec.role != ParamRole::Embedding) continue;
      if (!selects(target, module_path_of(spec), regex, pattern)) continue;
      if (!adaptable(spec))
        fail("LoRA target '", target, "' selects ", module_path_of(spec), ": ",
             spec.role == ParamRole::Embedding ? "an embedding" : spec.tied() ? "the tied output head" : "the output head",
             ", which PEFT can adapt but zerotune does not (it adapts linear layers inside the model: ",
             join(module_names), ")");
      ++hits[spec.module];
    }
    if (hits.empty())
      fail("LoRA target '", target, "' matches no linear module of this model (modules: ", join(module_names),
           ", or all-linear)");
    for (const auto& [name, count] : hits) {
      ZT_CHECK(count == instances[name], "LoRA target '", target, "' selects ", count, " of the ", instances[name], " ",
               name, " modules: zerotune adapts a module in every layer or in none (name it as '", name,
               "' for all layers)");
      chosen.insert(name);
    }
  }
  std::vector<std::string> modules;
  for (const std::string& name : module_names)
    if (chosen.count(name)) modules.push_back(name);
  return modules;
}

}  // namespace zt
