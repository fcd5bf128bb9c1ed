// Checkpoint save / verify / load with re-slicing onto another world size or ZeRO stage.
#include "ckpt/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <sstream>

#include "ckpt/checkpoint_checks.h"
#include "ckpt/checkpoint_location.h"
#include "ckpt/pipeline_checkpoint.h"
#include "core/fault_injection.h"
#include "core/hdf5_util.h"
#include "core/sha256.h"
#include "model/config.h"
#include "model/safetensors.h"

namespace zt {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* kFormat = "zerotune-checkpoint";
constexpr int kVersion = 1;
// Checkpoints without an "optimizer" entry (written before the optimizer seam) hold AdamW's.
const json kAdamWOptimizer = {{"type", "adamw"}, {"state", {"exp_avg", "exp_avg_sq"}}};

// The optimizer and the names of its state: per element ("state") and, when it has any, per
// tensor ("tensor_state": the distinct names over the trainable tensors).
json optimizer_json(ZeroEngine& engine) {
  json entry = {{"type", engine.optimizer().name()}, {"state", engine.optimizer().state_names()}};
  std::vector<std::string> tensor_state;
  for (const ZeroEngine::TensorStateViews& views : engine.tensor_state_views())
    for (const std::string& name : views.names)
      if (std::find(tensor_state.begin(), tensor_state.end(), name) == tensor_state.end()) tensor_state.push_back(name);
  if (!tensor_state.empty()) entry["tensor_state"] = tensor_state;
  return entry;
}

// Per-tensor state is whole and identical on every rank: partition 0's file holds one copy, as
// datasets "tensor_state/<parameter>/<state name>", read by every rank whatever the world size.
constexpr const char* kTensorStateGroup = "tensor_state";
std::string tensor_state_dataset(const std::string& parameter, const std::string& name) {
  return cat(kTensorStateGroup, "/", parameter, "/", name);
}

std::string rank_file_name(int partition) {
  char name[32];
  std::snprintf(name, sizeof(name), "rank-%05d.h5", partition);
  return name;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  ZT_CHECK(in, path.string(), ": cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// fsync a file or directory so a rename that follows is durable after a crash.
void fsync_path(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  ZT_CHECK(fd >= 0, path.string(), ": cannot open to flush it to disk");
  const int status = ::fsync(fd);
  ::close(fd);
  ZT_CHECK(status == 0, path.string(), ": fsync failed");
}

json lora_json(const LoraConfig& lora) {
  if (!lora.enabled()) return nullptr;
  return {{"r", lora.r}, {"alpha", lora.alpha}, {"dropout", lora.dropout}, {"targets", lora.targets},
          {"rslora", lora.rslora}};
}

// The old layout's unit ranges of one group.
std::vector<UnitRange> manifest_units(const json& manifest, ParamGroup group) {
  std::vector<UnitRange> units;
  for (const json& unit : manifest.at("layout").at("groups").at(param_group_name(group)).at("units"))
    units.push_back({unit.at(0).get<int64_t>(), unit.at(1).get<int64_t>()});
  return units;
}

// Copies a tensor (host or device) into a host vector through the backend.
std::vector<float> to_host(Backend& backend, Tensor tensor) {
  std::vector<float> host(static_cast<size_t>(tensor.numel()));
  if (!host.empty()) backend.copy(f32_view(host.data(), {tensor.numel()}), tensor);
  return host;
}

RankFileContent rank_file_content(ZeroEngine& engine) {
  RankFileContent content;
  const std::vector<std::string> state_names = engine.optimizer().state_names();
  for (const ZeroEngine::PartitionViews& views : engine.partition_views())
    for (size_t a = 0; a <= state_names.size(); ++a) {  // the parts one after the other: the partition as saved
      std::vector<float> whole;
      for (const ZeroEngine::PartitionViews::Part& part : views.parts) {
        std::vector<float> values = to_host(engine.backend(), a == 0 ? part.master : part.state[a - 1]);
        if (whole.empty()) whole = std::move(values);  // (one part, the usual case: no second copy)
        else whole.insert(whole.end(), values.begin(), values.end());
      }
      content.arrays.push_back({param_group_name(views.group), a == 0 ? "master" : state_names[a - 1], std::move(whole)});
    }
  if (engine.partition_index() == 0)
    for (const ZeroEngine::TensorStateViews& views : engine.tensor_state_views())
      for (size_t k = 0; k < views.state.size(); ++k)
        content.tensor_state.push_back({views.parameter, views.names[k], to_host(engine.backend(), views.state[k])});
  return content;
}

void write_rank_file(const fs::path& path, const RankFileContent& content, int partition, int partitions,
                     int64_t step) {
  std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
  h5::silence_error_printing();
  const std::string name = path.string();
  h5::Handle file = h5::owned_file(H5Fcreate(name.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), name, "create the file");
  h5::write_string_attribute(file.get(), name, "format", kFormat);
  h5::write_int64_attribute(file.get(), name, "version", kVersion);
  h5::write_int64_attribute(file.get(), name, "partition", partition);
  h5::write_int64_attribute(file.get(), name, "partitions", partitions);
  h5::write_int64_attribute(file.get(), name, "step", step);
  std::map<std::string, h5::Handle> groups;  // by path: "decay", "tensor_state", "tensor_state/<parameter>"
  const auto group_at = [&](hid_t parent, const std::string& key, const std::string& group_name) -> hid_t {
    auto found = groups.find(key);
    if (found == groups.end())
      found = groups.emplace(key, h5::owned(H5Gcreate2(parent, group_name.c_str(), H5P_DEFAULT, H5P_DEFAULT,
                                                       H5P_DEFAULT), H5Gclose, name, cat("create group '", key, "'")))
                  .first;
    return found->second.get();
  };
  for (const RankFileContent::Array& array : content.arrays)
    h5::write_f32_dataset(group_at(file.get(), array.group, array.group), name, array.name.c_str(),
                          array.values.data(), array.values.size());
  for (const RankFileContent::Array& array : content.tensor_state) {
    const hid_t all = group_at(file.get(), kTensorStateGroup, kTensorStateGroup);
    h5::write_f32_dataset(group_at(all, cat(kTensorStateGroup, "/", array.group), array.group), name,
                          array.name.c_str(), array.values.data(), array.values.size());
  }
  groups.clear();
  h5::check_status(H5Fflush(file.get(), H5F_SCOPE_GLOBAL), name, "flush the file");
  ZT_CHECK(file.close(), name, ": HDF5 failed to close (write) the file");
  fsync_path(path);
}

// The compressed strategy's buffers (1-bit Adam's error feedback; 0/1 Adam's, and its replica
// during local steps): this rank's own, whatever the stage, in a file of its own
// (exchange_rank_<r>.h5), one dataset per group and name, with the scalars as attributes. They
// mean something only to the same rank of the same world size: another world size starts the
// error feedback from zero, as DeepSpeed always does, and 0/1 Adam's local steps from the last
// synchronised state (the partitions).
std::string exchange_file_name(int rank) { return cat("exchange_rank_", rank, ".h5"); }

uint64_t exchange_file_bytes(ZeroEngine& engine) {
  uint64_t elements = 0;
  for (const ZeroEngine::ExchangeViews& views : engine.exchange_views())
    for (const Tensor& buffer : views.buffers) elements += static_cast<uint64_t>(buffer.numel());
  return elements * sizeof(float);
}

void write_exchange_file(const fs::path& path, ZeroEngine& engine, int rank, int world, int64_t step) {
  std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
  h5::silence_error_printing();
  const std::string name = path.string();
  h5::Handle file = h5::owned_file(H5Fcreate(name.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), name, "create the file");
  h5::write_string_attribute(file.get(), name, "format", kFormat);
  h5::write_int64_attribute(file.get(), name, "rank", rank);
  h5::write_int64_attribute(file.get(), name, "world_size", world);
  h5::write_int64_attribute(file.get(), name, "step", step);
  const ZeroEngine::ExchangeScalars scalars = engine.exchange_scalars();
  h5::write_int64_attribute(file.get(), name, "replica", scalars.replica ? 1 : 0);
  char lr_sum[64];
  std::snprintf(lr_sum, sizeof lr_sum, "%.17g", scalars.lr_sum);  // a double, exactly
  h5::write_string_attribute(file.get(), name, "lr_sum", lr_sum);
  for (const ZeroEngine::ExchangeViews& views : engine.exchange_views()) {
    const std::string group_name = param_group_name(views.group);
    h5::Handle group = h5::owned(H5Gcreate2(file.get(), group_name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                                 H5Gclose, name, cat("create group '", group_name, "'"));
    for (size_t k = 0; k < views.names.size(); ++k) {
      const std::vector<float> host = to_host(engine.backend(), views.buffers[k]);
      h5::write_f32_dataset(group.get(), name, views.names[k].c_str(), host.data(), host.size());
    }
  }
  h5::check_status(H5Fflush(file.get(), H5F_SCOPE_GLOBAL), name, "flush the file");
  ZT_CHECK(file.close(), name, ": HDF5 failed to close (write) the file");
  fsync_path(path);
}

void read_exchange_file(const fs::path& path, ZeroEngine& engine) {
  std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
  h5::silence_error_printing();
  const std::string name = path.string();
  h5::Handle file = h5::owned_file(H5Fopen(name.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), name, "open the file");
  for (const ZeroEngine::ExchangeViews& views : engine.exchange_views()) {
    for (size_t k = 0; k < views.names.size(); ++k) {
      const Tensor& tensor = views.buffers[k];
      const std::string dataset_name = cat(param_group_name(views.group), "/", views.names[k]);
      hsize_t length = 0;
      h5::Handle dataset = h5::open_f32_dataset(file.get(), name, dataset_name.c_str(), length);
      ZT_CHECK(length == static_cast<hsize_t>(tensor.numel()), name, ": dataset '", dataset_name, "' has ", length,
               " elements, this run's exchange has ", tensor.numel());
      std::vector<float> host(static_cast<size_t>(length));
      h5::read_1d_range(dataset.get(), name, dataset_name.c_str(), H5T_NATIVE_FLOAT, 0, length, host.data());
      engine.backend().copy(tensor, f32_view(host.data(), {tensor.numel()}));
    }
  }
  ZeroEngine::ExchangeScalars scalars;  // files of 1-bit Adam before 0/1 Adam have none: no replica
  if (h5::has_attribute(file.get(), name, "replica")) {
    scalars.replica = h5::read_int64_attribute(file.get(), name, "replica") != 0;
    const std::string lr_sum = h5::read_string_attribute(file.get(), name, "lr_sum");
    try {
      scalars.lr_sum = std::stod(lr_sum);
    } catch (const std::exception&) {
      fail(name, ": attribute lr_sum \"", lr_sum, "\" is not a number (the file is damaged)");
    }
  }
  engine.exchange_loaded(scalars);
}

// Reading the old partitions of a checkpoint, re-sliced for a new layout.
class PartitionReader {
 public:
  PartitionReader(fs::path dir, const json& manifest) : dir_(std::move(dir)), manifest_(manifest) {
    partitions_ = manifest.at("partitions").get<int>();
  }

  // out[new numel / divisor] = partition `index` of `divisor` of the new layout `new_units`.
  // The new layout's unit u is the checkpoint's unit model_units[u] (a pipeline rank's), or u when
  // model_units is empty (the whole model); a unit of -1 (tied copies: read_copies) is left as it is.
  void read(ParamGroup group, const char* array, const std::vector<UnitRange>& new_units, int divisor, int index,
            float* out, const std::vector<int>& model_units = {}) {
    const std::vector<UnitRange> old_units = manifest_units(manifest_, group);
    ZT_CHECK(!model_units.empty() || old_units.size() == new_units.size(), dir_.string(), ": the checkpoint has ",
             old_units.size(), " units, this model ", new_units.size());
    for (size_t u = 0; u < new_units.size(); ++u) {
      const int model_unit = model_units.empty() ? static_cast<int>(u) : model_units.at(u);
      if (model_unit < 0) continue;
      ZT_CHECK(static_cast<size_t>(model_unit) < old_units.size(), dir_.string(), ": the checkpoint has ",
               old_units.size(), " units, this model's stage holds unit ", model_unit);
      const int64_t slice = new_units[u].numel / divisor;
      read_unit(group, array, old_units[static_cast<size_t>(model_unit)], index * slice, slice,
                out + new_units[u].begin / divisor);
    }
  }

  // The slice `index` of `divisor` of the store's unit `unit` of `group`, which holds copies of
  // parameters the checkpoint holds elsewhere (a pipeline's tied copies, pipeline_checkpoint.h):
  // each copy's elements read from its original's place, the unit's padding zero.
  void read_copies(ParamGroup group, const char* array, const ParamStore& store, int unit, int divisor, int index,
                   float* out) {
    const UnitRange range = store.unit_range(group, unit);
    const int64_t slice = range.numel / divisor, first = index * slice;  // the slice's elements of the unit
    float* target = out + range.begin / divisor;
    std::fill(target, target + slice, 0.0f);
    const std::vector<UnitRange> old_units = manifest_units(manifest_, group);
    for (const ParamEntry& entry : store.entries()) {
      if (entry.unit != unit || entry.group != group) continue;
      const json& saved = saved_parameter(entry.spec.name);
      const UnitRange old_unit = old_units.at(saved.at("unit").get<size_t>());
      const int64_t in_unit = entry.offset - range.begin, saved_in_unit = saved.at("offset").get<int64_t>() - old_unit.begin;
      const int64_t begin = std::max(first, in_unit), end = std::min(first + slice, in_unit + entry.spec.numel());
      if (begin < end)
        read_unit(group, array, old_unit, saved_in_unit + (begin - in_unit), end - begin, target + (begin - first));
    }
  }

 private:
  // out[count] = elements [from, from + count) of the checkpoint's unit `old_unit` (0 past its end:
  // padding the old layout did not have), from the partitions that hold them.
  void read_unit(ParamGroup group, const char* array, UnitRange old_unit, int64_t from, int64_t count, float* out) {
    const int64_t old_numel = old_unit.numel, old_slice = old_numel / partitions_;
    for (int64_t k = from, end = from + count; k < end;) {
      if (k >= old_numel) {
        std::fill(out + (k - from), out + count, 0.0f);
        break;
      }
      const int64_t old_partition = k / old_slice;
      const int64_t run = std::min({end, (old_partition + 1) * old_slice, old_numel}) - k;
      const int64_t at = old_unit.begin / partitions_ + (k - old_partition * old_slice);
      read_range(static_cast<int>(old_partition), group, array, at, run, out + (k - from));
      k += run;
    }
  }

  const json& saved_parameter(const std::string& name) const {
    for (const json& parameter : manifest_.at("layout").at("parameters"))
      if (parameter.at("name") == name) return parameter;
    fail(dir_.string(), ": the checkpoint has no parameter '", name, "'");
  }

 private:
  void read_range(int partition, ParamGroup group, const char* array, int64_t begin, int64_t count, float* out) {
    std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
    h5::silence_error_printing();
    const std::string path = (dir_ / rank_file_name(partition)).string();
    const std::string dataset_name = cat(param_group_name(group), "/", array);
    hsize_t length = 0;
    h5::Handle dataset = h5::open_f32_dataset(file(partition).get(), path, dataset_name.c_str(), length);
    ZT_CHECK(static_cast<hsize_t>(begin + count) <= length, path, ": dataset '", dataset_name, "' has ", length,
             " elements, the manifest's layout needs ", begin + count);
    h5::read_1d_range(dataset.get(), path, dataset_name.c_str(), H5T_NATIVE_FLOAT, static_cast<hsize_t>(begin),
                      static_cast<hsize_t>(count), out);
  }

 public:
  // out[count] = the whole dataset `dataset_name` of partition 0's file (per-tensor state).
  void read_whole(const std::string& dataset_name, int64_t count, float* out) {
    std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
    h5::silence_error_printing();
    const std::string path = (dir_ / rank_file_name(0)).string();
    hsize_t length = 0;
    h5::Handle dataset = h5::open_f32_dataset(file(0).get(), path, dataset_name.c_str(), length);
    ZT_CHECK(static_cast<int64_t>(length) == count, path, ": dataset '", dataset_name, "' has ", length,
             " elements, this run's optimizer state has ", count);
    h5::read_1d_range(dataset.get(), path, dataset_name.c_str(), H5T_NATIVE_FLOAT, 0, length, out);
  }

 private:
  // The open file of `partition` (opened once).
  const h5::Handle& file(int partition) {
    auto found = files_.find(partition);
    if (found == files_.end()) {
      const std::string path = (dir_ / rank_file_name(partition)).string();
      found = files_.emplace(partition, h5::owned_file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), path,
                                                       "open the checkpoint file")).first;
    }
    return found->second;
  }

  fs::path dir_;
  const json& manifest_;
  int partitions_ = 1;
  std::map<int, h5::Handle> files_;
};

void check_identity(const json& manifest, const RunIdentity& identity, const ParamStore& store, const std::string& dir,
                    const std::vector<int>& model_units) {
  const json& saved = manifest.at("run");
  const auto mismatch = [&](const char* what, const json& then, const json& now) {
    fail(dir, ": the checkpoint was made with ", what, " ", then.dump(), ", this run has ", now.dump(),
         " (resume with the same ", what, ", or start a new run in another --out)");
  };
  if (saved.at("model_checksum") != identity.model_checksum)
    fail(dir, ": the checkpoint was made from the model ", saved.at("model_dir").get<std::string>(),
         " (structure checksum ", saved.at("model_checksum").get<std::string>(), "), this run's --model ",
         identity.model_dir, " differs (checksum ", identity.model_checksum, ")");
  if (saved.at("train_batch_size") != identity.train_batch_size)
    mismatch("train_batch_size", saved.at("train_batch_size"), identity.train_batch_size);
  if (saved.at("dataset_samples") != identity.dataset_samples)
    mismatch("number of training samples", saved.at("dataset_samples"), identity.dataset_samples);
  if (saved.at("seed") != identity.seed) mismatch("seed", saved.at("seed"), identity.seed);
  if (saved.at("shuffle") != identity.shuffle) mismatch("shuffle setting", saved.at("shuffle"), identity.shuffle);
  if (saved.at("lora") != lora_json(identity.lora)) mismatch("LoRA configuration", saved.at("lora"), lora_json(identity.lora));
  if (quant_config_from_json(saved.contains("quantize") ? saved.at("quantize") : json(), dir) != identity.quantize)
    mismatch("4-bit base (--quantize)", saved.contains("quantize") ? saved.at("quantize") : json(),
             quant_config_json(identity.quantize));
  // A LoRA checkpoint holds only the adapters: they mean nothing on another base of the same
  // shape. (Full fine-tuning restores every weight from the checkpoint.) Checkpoints from before
  // the digests were recorded have none to compare.
  if (identity.lora.enabled() && saved.contains("model_weights_digest") &&
      saved.at("model_weights_digest") != identity.model_weights_digest)
    fail(dir, ": the LoRA adapters were trained on the base weights of ", saved.at("model_dir").get<std::string>(),
         " (sampled digest ", saved.at("model_weights_digest").get<std::string>(), "); this run's --model ",
         identity.model_dir, " has other weights of the same shape (digest ", identity.model_weights_digest,
         "): resume on the same base model");
  // A frozen reference (DPO under full fine-tuning) is rebuilt from --model: the initial weights.
  if (identity.reference_from_model_dir && saved.contains("model_weights_digest") &&
      saved.at("model_weights_digest") != identity.model_weights_digest)
    fail(dir, ": the run's reference model is a frozen copy of the initial weights of ",
         saved.at("model_dir").get<std::string>(), " (sampled digest ", saved.at("model_weights_digest").get<std::string>(),
         "); this run's --model ", identity.model_dir, " has other weights of the same shape (digest ",
         identity.model_weights_digest, "): resume on the same model, which the reference is rebuilt from");
  if (saved.contains("data_digest") && saved.at("data_digest") != identity.data_digest && !identity.allow_data_change)
    fail(dir, ": the checkpoint was trained on other data (shards' sampled digest ", saved.at("data_digest").get<std::string>(),
         ", this run's ", identity.data_digest, ") with the same number of samples: resume with the same --data, or "
         "pass --allow-data-change to continue on this data");
  // Every trainable parameter with the same shape, group and offset inside its unit (a tied copy:
  // its original's shape and group, wherever that is).
  std::map<std::string, const json*> saved_parameters;
  for (const json& parameter : manifest.at("layout").at("parameters"))
    saved_parameters[parameter.at("name").get<std::string>()] = &parameter;
  size_t trainable = 0;
  for (const ParamEntry& entry : store.entries()) {
    if (entry.group == ParamGroup::Frozen) continue;
    auto found = saved_parameters.find(entry.spec.name);
    ZT_CHECK(found != saved_parameters.end(), dir, ": the checkpoint has no parameter '", entry.spec.name, "'");
    const json& p = *found->second;
    const std::vector<UnitRange> old_units = manifest_units(manifest, entry.group);
    const int unit = model_units.empty() ? entry.unit : model_units.at(static_cast<size_t>(entry.unit));  // the model's
    const bool copy = unit < 0;
    trainable += copy ? 0 : 1;
    ZT_CHECK(p.at("shape") == json(entry.spec.shape) && p.at("group") == param_group_name(entry.group) &&
                 (copy || p.at("unit") == unit),
             dir, ": parameter '", entry.spec.name, "' is ", p.dump(), " in the checkpoint, not shape ",
             json(entry.spec.shape).dump(), " in group ", param_group_name(entry.group),
             copy ? std::string(" (a tied copy)") : cat(" of unit ", unit));
    if (copy) continue;
    const int64_t old_in_unit = p.at("offset").get<int64_t>() - old_units.at(static_cast<size_t>(unit)).begin;
    const int64_t new_in_unit = entry.offset - store.unit_range(entry.group, entry.unit).begin;
    ZT_CHECK(old_in_unit == new_in_unit, dir, ": parameter '", entry.spec.name, "' sits at offset ", old_in_unit,
             " of its unit in the checkpoint, ", new_in_unit, " here (a different layout version)");
  }
  ZT_CHECK(!model_units.empty() || trainable == saved_parameters.size(), dir, ": the checkpoint has ",
           saved_parameters.size(), " trainable parameters, this run ", trainable);
}

// The optimizer state a checkpoint holds must be the state this run's optimizer reads.
void check_optimizer(const json& manifest, ZeroEngine& engine, const std::string& dir) {
  const Optimizer& optimizer = engine.optimizer();
  const json saved = manifest.value("optimizer", kAdamWOptimizer);
  const json mine = optimizer_json(engine);
  if (saved == mine) return;
  ZT_CHECK(saved.is_object() && saved.contains("type") && saved["type"].is_string() && saved.contains("state") &&
               saved["state"].is_array(),
           dir, "/manifest.json: key 'optimizer' = ", saved.dump(), " is not {\"type\": NAME, \"state\": [NAMES]}");
  if (saved.at("type") == optimizer.name())  // the same optimizer with other state: SGD with and without momentum
    fail(dir, ": the checkpoint's ", optimizer.name(), " state is ", saved.at("state").dump(), ", this run's is ",
         mine.at("state").dump(), " (SGD keeps a momentum_buffer only with momentum > 0): resume "
         "with the checkpoint's settings");
  fail(dir, ": the checkpoint holds the state of optimizer ", saved.at("type").get<std::string>(), " (",
       saved.at("state").dump(), "), this run uses ", optimizer.name(), " (", mine.at("state").dump(),
       "): resume with the same optimizer, or start a new run from exported weights (zerotune export)");
}

}  // namespace

std::string model_structure_checksum(const std::string& model_dir) {
  Sha256 hash;
  hash.update(read_text(fs::path(model_dir) / "config.json"));
  std::vector<fs::path> files;
  for (const fs::directory_entry& entry : fs::directory_iterator(model_dir))
    if (entry.path().extension() == ".safetensors") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  for (const fs::path& file : files) {
    std::ifstream in(file, std::ios::binary);
    ZT_CHECK(in, file.string(), ": cannot open");
    uint64_t header_bytes = 0;
    in.read(reinterpret_cast<char*>(&header_bytes), 8);
    ZT_CHECK(in && header_bytes < (uint64_t{1} << 27), file.string(), ": not a safetensors file");
    std::string header(header_bytes, '\0');
    in.read(header.data(), static_cast<std::streamsize>(header_bytes));
    ZT_CHECK(in, file.string(), ": truncated safetensors header");
    hash.update(cat(file.filename().string(), "\n", fs::file_size(file), "\n", header, "\n"));
  }
  return hash.hex_digest();
}

namespace {
std::string digest_of_files(const std::vector<fs::path>& files) {
  Sha256 hash;
  for (const fs::path& file : files)
    hash.update(cat(file.filename().string(), " ", sha256_file_sampled_hex(file.string()), "\n"));
  return hash.hex_digest();
}
}  // namespace

std::string model_weights_digest(const std::string& model_dir) {
  std::vector<fs::path> files;
  for (const fs::directory_entry& entry : fs::directory_iterator(model_dir))
    if (entry.path().extension() == ".safetensors") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  return digest_of_files(files);
}

std::string data_digest(const std::vector<std::string>& shard_paths) {
  return digest_of_files(std::vector<fs::path>(shard_paths.begin(), shard_paths.end()));
}

namespace {

// Every rank's error-feedback file when the optimizer exchanges momentum (1-bit/0-1 Adam): the
// manifest's "exchange" entry (every rank's file), or null for other optimizers.
json write_exchange_files(const fs::path& temporary, ZeroEngine& engine, Communicator& comm, int64_t step) {
  if (engine.exchange_views().empty()) return nullptr;
  const fs::path path = temporary / exchange_file_name(comm.rank());
  check_free_space(temporary.string(), exchange_file_bytes(engine), path.string());
  write_exchange_file(path, engine, comm.rank(), comm.size(), step);
  const json mine = {{"name", exchange_file_name(comm.rank())}, {"bytes", fs::file_size(path)},
                     {"sha256", sha256_file_hex(path.string())}};
  json exchange = {{"world_size", comm.size()}, {"files", json::array()}};
  for (const std::string& entry : comm.all_gather_strings(mine.dump())) exchange["files"].push_back(json::parse(entry));
  return exchange;
}

// The checkpoint's manifest.json: what was saved (files, layout), where the run stood (step,
// scaler, scheduler, RNG) and what it was (the run's identity and config).
json checkpoint_manifest(const std::string& tag, const TrainingState& state, const RunIdentity& identity,
                         const json& run_config, ZeroEngine& engine, const ParamStore& store, int world_size,
                         const json& files, const json& layout, const json& exchange,
                         const PipelineCheckpoint* pipeline) {
  json manifest = {
      {"format", kFormat}, {"version", kVersion}, {"tag", tag},
      {"step", state.step}, {"skipped", state.skipped}, {"updates", state.step - state.skipped},
      {"samples_consumed", state.samples_consumed},
      {"world_size", world_size}, {"zero_stage", engine.stage()}, {"partitions", engine.partition_count()},
      {"compute_dtype", dtype_name(store.param_dtype())},
      {"optimizer", optimizer_json(engine)},
      {"loss_scale", state.loss_scale}, {"loss_scaler", state.loss_scaler},
      {"lr_scheduler", {{"type", run_config.at("scheduler").at("type")}, {"updates", state.step - state.skipped}}},
      {"rng", {{"seed", identity.seed}, {"generator", "philox4x32-10 keyed by (seed, purpose, step, position)"},
               {"next_step", state.step}}},
      {"run", {{"model_dir", identity.model_dir}, {"model_checksum", identity.model_checksum},
               {"model_weights_digest", identity.model_weights_digest}, {"data_digest", identity.data_digest},
               {"train_batch_size", identity.train_batch_size}, {"dataset_samples", identity.dataset_samples},
               {"seed", identity.seed}, {"shuffle", identity.shuffle}, {"lora", lora_json(identity.lora)},
               {"quantize", quant_config_json(identity.quantize)}}},
      {"config", run_config},
      {"layout", layout},
      {"files", files}};
  if (pipeline) manifest["pipeline"] = pipeline->layout;
  if (!exchange.is_null()) manifest["exchange"] = exchange;
  if (identity.reference_from_model_dir)
    manifest["reference_model"] = {{"model_dir", identity.model_dir},
                                   {"model_weights_digest", identity.model_weights_digest}};
  return manifest;
}

}  // namespace

std::string save_checkpoint(const std::string& out_dir, const TrainingState& state, const RunIdentity& identity,
                            const json& run_config, ZeroEngine& engine, const ParamStore& store,
                            Communicator& comm, int64_t keep_last, const PipelineCheckpoint* pipeline) {
  const fs::path root = fs::path(out_dir) / "checkpoints";
  const std::string tag = cat("global_step", state.step);
  const fs::path final_dir = root / tag, temporary = root / (tag + ".tmp");
  Communicator& world = pipeline ? *pipeline->world : comm;  // every rank
  const bool leader = world.rank() == 0;
  fault_point("save.begin", state.step);
  // Weights that are NaN or inf would become `latest`, and --resume auto would continue from them.
  ZT_CHECK(master_weights_finite(engine, world), "checkpoint ", tag, " not saved: the weights are not finite (NaN or "
           "inf) after step ", state.step, ", the run diverged; `latest` still names the last finite checkpoint. Lower "
           "the learning rate or set gradient_clipping, then --resume auto");
  ZT_CHECK(!pipeline || engine.exchange_views().empty(), "checkpoint ", tag, ": optimizer ", engine.optimizer().name(),
           " keeps per-rank exchange buffers, which pipeline checkpoints do not save yet");
  if (leader) {
    fs::create_directories(root);
    fs::remove_all(temporary);  // a crashed earlier attempt
    fs::create_directories(temporary);
  }
  world.barrier();

  // Each partition's file, its size and checksum (under a pipeline: the whole model's partition,
  // written by stage 0's rank of the replica with the other stages' parts appended).
  json file_entry = nullptr;
  const bool holder = engine.partition_index() == comm.rank();  // stage 0: rank 0 holds the one partition
  RankFileContent content;
  if (holder) content = rank_file_content(engine);
  if (pipeline) gather_pipeline_partition(content, store, engine.partition_count(), *pipeline, holder);
  if (holder && (!pipeline || pipeline->stage == 0)) {
    const fs::path path = temporary / rank_file_name(engine.partition_index());
    check_free_space(temporary.string(), content.bytes(), path.string());
    write_rank_file(path, content, engine.partition_index(), engine.partition_count(), state.step);
    file_entry = {{"name", rank_file_name(engine.partition_index())}, {"bytes", fs::file_size(path)},
                  {"sha256", sha256_file_hex(path.string())}};
  }
  fault_point("save.rank_file_written", state.step);
  const std::vector<std::string> entries = world.all_gather_strings(file_entry.dump());
  // Under a pipeline: every stage's chunks' layouts, from its replica 0.
  const json layout = pipeline ? gather_pipeline_layout(store, *pipeline, comm.rank() == 0) : store_layout_json(store);
  const json exchange = write_exchange_files(temporary, engine, comm, state.step);

  if (leader) {
    json files = json::array();
    for (const std::string& entry : entries)
      if (entry != "null") files.push_back(json::parse(entry));
    const json manifest = checkpoint_manifest(tag, state, identity, run_config, engine, store, world.size(), files,
                                              layout, exchange, pipeline);
    write_file_atomic((temporary / "manifest.json").string(), manifest.dump(2) + "\n");
    fsync_path(temporary);
  }
  fault_point("save.manifest_written", state.step);
  world.barrier();
  if (leader) {
    fs::remove_all(final_dir);  // an older save of the same step (e.g. a rerun)
    fs::rename(temporary, final_dir);
    fsync_path(root);
    fault_point("save.renamed", state.step);
    write_file_atomic((root / "latest").string(), tag + "\n");
    fsync_path(root);
    if (keep_last > 0) {
      std::vector<std::string> tags = list_complete_checkpoints(root.string());
      for (size_t i = 0; i + static_cast<size_t>(keep_last) < tags.size(); ++i)
        if (tags[i] != tag) fs::remove_all(root / tags[i]);
    }
  }
  world.barrier();
  return final_dir.string();
}

namespace {

// One file a manifest lists ({"name", "bytes", "sha256"}): present, of its size, and (when
// `verify_sha256`) of its checksum. Returns its path.
std::string verify_checkpoint_file(const std::string& checkpoint_dir, const json& file, bool verify_sha256) {
  const fs::path path = fs::path(checkpoint_dir) / file.at("name").get<std::string>();
  ZT_CHECK(fs::exists(path), path.string(), ": missing (the checkpoint is incomplete)");
  ZT_CHECK(fs::file_size(path) == file.at("bytes").get<uintmax_t>(), path.string(), ": ", fs::file_size(path),
           " bytes, the manifest says ", file.at("bytes").get<uintmax_t>(), " (the file is damaged or truncated)");
  if (verify_sha256)
    ZT_CHECK(sha256_file_hex(path.string()) == file.at("sha256").get<std::string>(), path.string(),
             ": sha256 does not match the manifest (the file is damaged)");
  return path.string();
}

// The manifest as JSON, not yet checked beyond that.
json parse_manifest(const std::string& checkpoint_dir) {
  const fs::path manifest_path = fs::path(checkpoint_dir) / "manifest.json";
  ZT_CHECK(fs::exists(manifest_path), manifest_path.string(), ": missing (not a complete checkpoint)");
  try {
    return json::parse(read_text(manifest_path));
  } catch (const json::exception& error) {
    fail(manifest_path.string(), ": not valid JSON (", error.what(), ")");
  }
}

// The files a manifest lists (rank files, then exchange files), or none when it lists them in
// another shape (an edited manifest: read_checkpoint_manifest says what is wrong with it).
std::vector<json> listed_files(const json& manifest) {
  std::vector<json> files;
  try {
    for (const json& file : manifest.at("files")) files.push_back(file);
    if (manifest.contains("exchange"))
      for (const json& file : manifest.at("exchange").at("files")) files.push_back(file);
    for (const json& file : files) {
      file.at("name").get<std::string>();
      file.at("bytes").get<uintmax_t>();
      file.at("sha256").get<std::string>();
    }
  } catch (const json::exception&) {
    return {};
  }
  return files;
}

}  // namespace

LoraConfig checkpoint_lora(const json& manifest) {
  LoraConfig lora;
  const json& saved = manifest.at("run").at("lora");
  if (saved.is_null()) return lora;
  lora.r = saved.at("r").get<int>();
  lora.alpha = saved.at("alpha").get<double>();
  lora.dropout = saved.at("dropout").get<double>();
  lora.targets = saved.at("targets").get<std::vector<std::string>>();
  lora.rslora = saved.at("rslora").get<bool>();
  return lora;
}

json read_checkpoint_manifest(const std::string& checkpoint_dir, bool verify_files) {
  const fs::path manifest_path = fs::path(checkpoint_dir) / "manifest.json";
  const json manifest = parse_manifest(checkpoint_dir);
  ZT_CHECK(manifest.value("format", "") == kFormat, manifest_path.string(), ": format is not '", kFormat, "'");
  ZT_CHECK(manifest.value("version", 0) == kVersion, manifest_path.string(), ": version ", manifest.value("version", 0),
           " (this zerotune reads version ", kVersion, ")");
  check_manifest_values(manifest, manifest_path.string());
  const int partitions = manifest.at("partitions").get<int>();
  ZT_CHECK(manifest.at("files").size() == static_cast<size_t>(partitions), manifest_path.string(), ": lists ",
           manifest.at("files").size(), " files for ", partitions, " partitions");
  int64_t partition = 0;  // files are listed in partition order
  for (const json& file : manifest.at("files")) {
    const std::string path = verify_checkpoint_file(checkpoint_dir, file, verify_files);
    if (verify_files) check_rank_file_attributes(path, partition, partitions, manifest.at("step").get<int64_t>());
    ++partition;
  }
  return manifest;
}

std::string checkpoint_damage(const std::string& checkpoint_dir, Communicator& comm) {
  // Damage is what the save did not write: a manifest that is not JSON, files missing or of other
  // sizes or checksums. A manifest that parses but says something wrong was edited: loading it
  // refuses it, naming the key.
  std::string damage;
  try {
    const std::vector<json> files = listed_files(parse_manifest(checkpoint_dir));
    // Each file hashed by one rank: the job reads the checkpoint once, not once per rank.
    for (size_t i = static_cast<size_t>(comm.rank()); i < files.size(); i += static_cast<size_t>(comm.size()))
      verify_checkpoint_file(checkpoint_dir, files[i], true);
  } catch (const Error& error) {
    damage = error.what();
  }
  for (const std::string& found : comm.all_gather_strings(damage))
    if (!found.empty()) return found;
  return "";
}

TrainingState load_checkpoint(const std::string& checkpoint_dir, const RunIdentity& identity, ZeroEngine& engine,
                              const ParamStore& store, Communicator& comm, const std::vector<int>& model_units) {
  // Rank 0 verifies every checksum; the others check sizes. A failure anywhere ends the job.
  const json manifest = read_checkpoint_manifest(checkpoint_dir, comm.rank() == 0);
  ZT_CHECK(model_units.empty() || model_units.size() == static_cast<size_t>(store.num_units()),
           "load_checkpoint: ", model_units.size(), " model units for a store of ", store.num_units());
  check_identity(manifest, identity, store, checkpoint_dir, model_units);
  check_optimizer(manifest, engine, checkpoint_dir);
  PartitionReader reader(checkpoint_dir, manifest);
  const std::vector<std::string> state_names = engine.optimizer().state_names();
  for (const ZeroEngine::PartitionViews& views : engine.partition_views()) {
    for (size_t a = 0; a <= state_names.size(); ++a) {
      std::vector<float> host(static_cast<size_t>(views.numel()));
      const char* array = a == 0 ? "master" : state_names[a - 1].c_str();
      reader.read(views.group, array, store.group(views.group).units, engine.partition_count(),
                  engine.partition_index(), host.data(), model_units);
      for (size_t unit = 0; unit < model_units.size(); ++unit)
        if (model_units[unit] < 0)
          reader.read_copies(views.group, array, store, static_cast<int>(unit), engine.partition_count(),
                             engine.partition_index(), host.data());
      for (const ZeroEngine::PartitionViews::Part& part : views.parts) {  // into the part that holds each element
        const Tensor tensor = a == 0 ? part.master : part.state[a - 1];
        engine.backend().copy(tensor, f32_view(host.data() + part.begin, {tensor.numel()}));
      }
    }
  }
  for (const ZeroEngine::TensorStateViews& views : engine.tensor_state_views()) {
    for (size_t k = 0; k < views.state.size(); ++k) {
      std::vector<float> host(static_cast<size_t>(views.state[k].numel()));
      reader.read_whole(tensor_state_dataset(views.parameter, views.names[k]), views.state[k].numel(), host.data());
      engine.backend().copy(views.state[k], f32_view(host.data(), {views.state[k].numel()}));
    }
  }
  engine.refresh_params_from_master();
  TrainingState state;
  if (!engine.exchange_views().empty()) {
    const json* saved = manifest.contains("exchange") ? &manifest.at("exchange") : nullptr;
    if (saved && saved->at("world_size").get<int>() == comm.size()) {
      const json& file = saved->at("files").at(static_cast<size_t>(comm.rank()));
      read_exchange_file(verify_checkpoint_file(checkpoint_dir, file, true), engine);
    } else {
      state.notes.push_back(saved ? cat("the 1-bit error feedback was saved on ", saved->at("world_size").get<int>(),
                                        " ranks and this run has ", comm.size(), ": it starts from zero (as DeepSpeed's does "
                                        "on every load)")
                                  : std::string("the checkpoint holds no 1-bit error feedback: it starts from zero"));
      if (!engine.optimizer().local_state_names().empty())
        state.notes.push_back("local steps (0/1 Adam) restart from the last synchronised state of the checkpoint: the "
                              "ranks' replicas since then are per rank and not carried to another world size");
    }
  }
  state.step = manifest.at("step").get<int64_t>();
  state.skipped = manifest.at("skipped").get<int64_t>();
  state.samples_consumed = manifest.at("samples_consumed").get<int64_t>();
  state.loss_scale = manifest.at("loss_scale").get<double>();
  state.loss_scaler = manifest.at("loss_scaler");
  return state;
}

void load_full_master(const std::string& checkpoint_dir, const json& manifest, ParamStore& store) {
  ZT_CHECK(store.partitions() == 1, "load_full_master: the store must be laid out for one partition");
  PartitionReader reader(checkpoint_dir, manifest);
  for (ParamGroup group : kTrainableGroups) {
    if (!store.group(group).numel) continue;
    reader.read(group, "master", store.group(group).units, 1, 0, store.group_params(group).f32());
  }
}

}  // namespace zt
