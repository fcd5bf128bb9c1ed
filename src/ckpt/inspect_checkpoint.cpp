// Checkpoint reports for `zerotune inspect`.
#include "ckpt/inspect_checkpoint.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/sha256.h"

namespace zt {

namespace fs = std::filesystem;
using ordered = nlohmann::ordered_json;

namespace {

// The checkpoint directories DIR stands for, and the `latest` tag when there is one.
std::vector<fs::path> checkpoint_dirs(const fs::path& dir, std::string& latest) {
  const bool single = fs::exists(dir / "manifest.json");
  const fs::path root = single ? dir.parent_path() : fs::exists(dir / "checkpoints") ? dir / "checkpoints" : dir;
  std::ifstream in(root / "latest");
  if (in) std::getline(in, latest);
  if (single) return {dir};
  std::vector<fs::path> found;
  if (fs::is_directory(root))
    for (const fs::directory_entry& entry : fs::directory_iterator(root))
      if (entry.is_directory() && entry.path().filename().string().rfind("global_step", 0) == 0) found.push_back(entry.path());
  std::sort(found.begin(), found.end(), [](const fs::path& a, const fs::path& b) {
    const auto step = [](const fs::path& p) {
      const std::string name = p.filename().string().substr(11);
      return std::atoll(name.c_str());
    };
    return step(a) < step(b);
  });
  return found;
}

ordered describe(const fs::path& dir, const std::string& latest) {
  ordered entry = {{"path", dir.string()}, {"tag", dir.filename().string()},
                   {"latest", dir.filename().string() == latest}};
  const fs::path manifest_path = dir / "manifest.json";
  if (!fs::exists(manifest_path)) {
    entry["complete"] = false;
    entry["problem"] = dir.filename().string().ends_with(".tmp") ? "an interrupted save (no manifest)" : "no manifest.json";
    return entry;
  }
  nlohmann::json manifest;
  try {
    std::ifstream in(manifest_path);
    manifest = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& error) {
    entry["complete"] = false;
    entry["problem"] = cat("manifest.json is not valid JSON: ", error.what());
    return entry;
  }
  for (const char* key : {"step", "skipped", "world_size", "zero_stage", "partitions", "compute_dtype", "loss_scale"})
    if (manifest.contains(key)) entry[key] = manifest[key];
  if (manifest.contains("run")) {
    entry["model_dir"] = manifest["run"].value("model_dir", "");
    entry["lora"] = manifest["run"].value("lora", nlohmann::json());
  }
  bool all_ok = true;
  ordered files = ordered::array();
  for (const nlohmann::json& file : manifest.value("files", nlohmann::json::array())) {
    const fs::path path = dir / file.value("name", "");
    std::string status = "ok";
    if (!fs::exists(path)) status = "missing";
    else if (fs::file_size(path) != file.value("bytes", uintmax_t{0})) status = "wrong size";
    else if (sha256_file_hex(path.string()) != file.value("sha256", "")) status = "checksum mismatch";
    all_ok = all_ok && status == "ok";
    files.push_back({{"name", file.value("name", "")}, {"bytes", file.value("bytes", uintmax_t{0})}, {"status", status}});
  }
  entry["files"] = files;
  entry["complete"] = all_ok;
  return entry;
}

}  // namespace

bool holds_checkpoints(const std::string& dir) {
  std::string latest;
  return !checkpoint_dirs(dir, latest).empty();
}

ordered inspect_checkpoints(const std::string& dir) {
  std::string latest;
  const std::vector<fs::path> dirs = checkpoint_dirs(dir, latest);
  ZT_CHECK(!dirs.empty(), dir, ": holds no checkpoint (checkpoints/global_stepN/manifest.json)");
  ordered report = {{"kind", "checkpoints"}, {"directory", dir}, {"latest", latest}, {"checkpoints", ordered::array()}};
  for (const fs::path& path : dirs) report["checkpoints"].push_back(describe(path, latest));
  return report;
}

std::string format_checkpoint_report(const ordered& report) {
  std::ostringstream out;
  out << "checkpoints in " << report["directory"].get<std::string>() << " (latest: "
      << (report["latest"].get<std::string>().empty() ? "none" : report["latest"].get<std::string>()) << ")\n";
  for (const ordered& c : report["checkpoints"]) {
    out << "\n" << c["tag"].get<std::string>() << (c["latest"].get<bool>() ? "  <- latest" : "") << ": "
        << (c["complete"].get<bool>() ? "complete, checksums OK" : "NOT usable") << "\n";
    if (c.contains("problem")) out << "  problem: " << c["problem"].get<std::string>() << "\n";
    if (c.contains("step"))
      out << "  step " << c["step"] << " (" << c.value("skipped", 0) << " skipped), " << c["world_size"]
          << " rank(s), ZeRO stage " << c["zero_stage"] << ", " << c["partitions"] << " partition file(s), compute "
          << c["compute_dtype"].get<std::string>() << ", loss scale " << c["loss_scale"] << "\n";
    if (c.contains("model_dir"))
      out << "  base model " << c["model_dir"].get<std::string>()
          << (c["lora"].is_null() ? ", full fine-tuning" : ", LoRA " + c["lora"].dump()) << "\n";
    if (c.contains("files"))
      for (const ordered& file : c["files"])
        out << "  " << file["name"].get<std::string>() << "  " << file["bytes"] << " bytes  "
            << file["status"].get<std::string>() << "\n";
  }
  return out.str();
}

}  // namespace zt
