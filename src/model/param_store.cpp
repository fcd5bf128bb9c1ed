// Flat parameter/gradient buffers per group and the named views into them.
#include "model/param_store.h"

#include <algorithm>

namespace zt {

namespace {
constexpr int64_t kAlignElements = 16;  // 64 bytes of fp32, 32 of bf16/fp16 (whole 16-byte vectors)
int64_t align_up(int64_t value) { return (value + kAlignElements - 1) / kAlignElements * kAlignElements; }

Tensor shaped_view(void* data, DType dtype, const std::vector<int64_t>& shape, Device device) {
  switch (shape.size()) {
    case 1: return Tensor(data, dtype, {shape[0]}, device);
    case 2: return Tensor(data, dtype, {shape[0], shape[1]}, device);
    case 3: return Tensor(data, dtype, {shape[0], shape[1], shape[2]}, device);
    default: fail("parameter with ", shape.size(), " dimensions is not supported");
  }
}
}  // namespace

const char* param_group_name(ParamGroup group) {
  switch (group) {
    case ParamGroup::Frozen: return "frozen";
    case ParamGroup::Decay: return "decay";
    case ParamGroup::NoDecay: return "no_decay";
  }
  return "unknown";
}

std::vector<int> param_units(const std::vector<ParamSpec>& specs) {
  std::map<std::string, int> unit_of_name;
  std::vector<int> units;
  for (const ParamSpec& spec : specs) {
    int unit = spec.unit;
    const size_t lora = spec.name.find(".lora_");
    if (lora != std::string::npos && unit_of_name.count(spec.name.substr(0, lora) + ".weight"))
      unit = unit_of_name[spec.name.substr(0, lora) + ".weight"];  // an adapter lives with its base weight
    ZT_CHECK(unit >= 0, "parameter ", spec.name, " has no ZeRO unit (its architecture's parameter list must declare one)");
    unit_of_name[spec.name] = unit;
    units.push_back(unit);
  }
  return units;
}

ParamStore::ParamStore(Backend& backend, const std::vector<ParamSpec>& specs, const std::vector<bool>& trainable,
                       int partitions, DType param_dtype, StoreResidency residency, const std::vector<QuantConfig>& quant,
                       DType grad_dtype)
    : backend_(backend), param_dtype_(param_dtype), grad_dtype_(grad_dtype), partitions_(partitions) {
  ZT_CHECK(param_dtype == DType::F32 || param_dtype == DType::BF16 || param_dtype == DType::F16,
           "ParamStore: parameters are stored in fp32, bf16 or fp16, not ", dtype_name(param_dtype));
  // A backward GEMM writes a weight gradient in its inputs' dtype or in fp32 (backend.h "matmul").
  ZT_CHECK(grad_dtype == DType::F32 || grad_dtype == param_dtype, "ParamStore: gradients are stored in fp32 or in the ",
           "parameters' dtype (", dtype_name(param_dtype), "), not ", dtype_name(grad_dtype));
  ZT_CHECK(specs.size() == trainable.size(), "ParamStore: ", specs.size(), " specs but ", trainable.size(), " flags");
  ZT_CHECK(partitions >= 1, "ParamStore: partitions = ", partitions);
  ZT_CHECK(quant.empty() || quant.size() == specs.size(), "ParamStore: ", specs.size(), " specs but ", quant.size(),
           " quantization settings");
  const std::vector<int> units = param_units(specs);
  for (int unit : units) num_units_ = std::max(num_units_, unit + 1);
  for (size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].tied()) continue;  // resolved below, after every stored parameter has its entry
    ParamGroup group = !trainable[i] ? ParamGroup::Frozen : specs[i].decays() ? ParamGroup::Decay : ParamGroup::NoDecay;
    ZT_CHECK(!index_.count(specs[i].name), "parameter ", specs[i].name, " is listed twice");
    index_[specs[i].name] = entries_.size();
    const QuantConfig stored_as = quant.empty() ? QuantConfig{} : quant[i];
    ZT_CHECK(!stored_as.enabled() || (group == ParamGroup::Frozen && specs[i].role == ParamRole::Linear), "parameter ",
             specs[i].name, ": only frozen linear weights can be stored 4-bit");
    const int64_t payload_bytes =
        stored_as.enabled() ? static_cast<int64_t>(quant4_layout(specs[i].numel(), stored_as).bytes) : 0;
    const int64_t element = static_cast<int64_t>(dtype_size(param_dtype));
    const int64_t storage = stored_as.enabled() ? (payload_bytes + element - 1) / element : specs[i].numel();
    if (stored_as.enabled()) dequant_numel_ = std::max(dequant_numel_, specs[i].numel());
    entries_.push_back({specs[i], group, 0, units[i], stored_as, storage});
  }
  // Ties: the name reads its target's storage; the unit holding the tie reads the target's unit.
  unit_reads_.resize(static_cast<size_t>(num_units_));
  unit_backward_reads_.assign(static_cast<size_t>(num_units_), false);
  for (int unit = 0; unit < num_units_; ++unit) unit_reads_[static_cast<size_t>(unit)] = {unit};
  for (size_t i = 0; i < specs.size(); ++i) {
    const ParamSpec& spec = specs[i];
    // A backward reads the values of weights it multiplies by (linear dx = dy W, a norm's
    // scale), not of lookup tables or biases.
    if (spec.role == ParamRole::Linear || spec.role == ParamRole::NormWeight)
      unit_backward_reads_[static_cast<size_t>(units[i])] = true;
    if (!spec.tied()) continue;
    ZT_CHECK(!index_.count(spec.name) && !aliases_.count(spec.name), "parameter ", spec.name, " is listed twice");
    auto target = index_.find(spec.tied_to);
    ZT_CHECK(target != index_.end(), "parameter ", spec.name, " is tied to '", spec.tied_to, "', which is not a stored parameter");
    const ParamEntry& stored = entries_[target->second];
    ZT_CHECK(stored.spec.shape == spec.shape, "parameter ", spec.name, " is tied to ", spec.tied_to, " of another shape");
    ZT_CHECK(trainable[i] == (stored.group != ParamGroup::Frozen), "parameter ", spec.name, " is tied to ", spec.tied_to,
             " but one is trainable and the other not");
    aliases_[spec.name] = spec.tied_to;
    std::vector<int>& reads = unit_reads_[static_cast<size_t>(units[i])];
    if (std::find(reads.begin(), reads.end(), stored.unit) == reads.end()) reads.push_back(stored.unit);
  }
  // Offsets: unit by unit within each group, each unit padded to whole 16-element slices per partition.
  const int64_t unit_alignment = kAlignElements * partitions;
  for (int g = 0; g < kParamGroups; ++g) {
    FlatGroup& flat = groups_[static_cast<size_t>(g)];
    flat.units.assign(static_cast<size_t>(num_units_), UnitRange());
    int64_t size = 0;
    for (int unit = 0; unit < num_units_; ++unit) {
      const int64_t begin = size;
      for (ParamEntry& e : entries_) {
        if (static_cast<int>(e.group) != g || e.unit != unit) continue;
        e.offset = size;
        size = align_up(size + e.storage);
      }
      size = (size - begin + unit_alignment - 1) / unit_alignment * unit_alignment + begin;
      flat.units[static_cast<size_t>(unit)] = {begin, size - begin};
    }
    flat.numel = size;
    // Discardable: ZeRO-3 gives back the pages of units it released, ZeRO-2/3 those of reduced
    // gradients (Backend::allocate_discardable).
    flat.params = Buffer(backend, static_cast<size_t>(flat.numel) * dtype_size(param_dtype),
                         Buffer::Discardable{residency.params});
    if (flat.numel && residency.params) backend.fill(group_params(static_cast<ParamGroup>(g)), 0.0f);  // padding stays 0
    if (g != static_cast<int>(ParamGroup::Frozen))
      flat.grads = Buffer(backend, static_cast<size_t>(flat.numel) * dtype_size(grad_dtype), Buffer::Discardable{residency.grads});
  }
  if (residency.grads) zero_grads();
  if (dequant_numel_) dequant_workspace_ = Buffer(backend, static_cast<size_t>(dequant_numel_) * dtype_size(param_dtype));
}

void ParamStore::commit_unit_params(int unit) {
  for (int g = 0; g < kParamGroups; ++g) {
    const UnitRange range = unit_range(static_cast<ParamGroup>(g), unit);
    if (!range.numel) continue;
    Tensor params = group_params(static_cast<ParamGroup>(g)).rows(range.begin, range.numel);
    backend_.commit(params);
    backend_.fill(params, 0.0f);  // padding stays 0
  }
}

int64_t ParamStore::unit_numel(int unit) const {
  int64_t numel = 0;
  for (const FlatGroup& flat : groups_) numel += flat.units[static_cast<size_t>(unit)].numel;
  return numel;
}

const ParamEntry& ParamStore::entry(const std::string& name) const {
  auto alias = aliases_.find(name);
  auto found = index_.find(alias == aliases_.end() ? name : alias->second);
  ZT_CHECK(found != index_.end(), "no parameter named '", name, "'");
  return entries_[found->second];
}

Tensor ParamStore::slice(const Buffer& buffer, DType dtype, const ParamEntry& e) const {
  return shaped_view(static_cast<char*>(buffer.data()) + static_cast<size_t>(e.offset) * dtype_size(dtype), dtype,
                     e.spec.shape, backend_.device());
}

Tensor ParamStore::param(const std::string& name) const {
  const ParamEntry& e = entry(name);
  ZT_CHECK(!e.quant.enabled(), "parameter ", name, " is stored 4-bit (", describe(e.quant),
           "): read it through quant4_view");
  return slice(group(e.group).params, param_dtype_, e);
}

Quant4View ParamStore::quant4_view(const std::string& name) const {
  const ParamEntry& e = entry(name);
  ZT_CHECK(e.quant.enabled(), "parameter ", name, " is not stored 4-bit");
  const Quant4Layout layout = quant4_layout(e.spec.numel(), e.quant);
  char* payload = static_cast<char*>(group(e.group).params.data()) + static_cast<size_t>(e.offset) * dtype_size(param_dtype_);
  const Device device = backend_.device();
  auto piece = [&](size_t offset, DType dtype, int64_t count) { return Tensor(payload + offset, dtype, {count}, device); };
  Quant4View view;
  view.packed = piece(layout.packed, DType::U8, static_cast<int64_t>(layout.packed_bytes()));
  view.absmax = piece(layout.absmax, layout.nested ? DType::U8 : DType::F32, layout.blocks);
  view.code = piece(layout.code, DType::F32, 16);
  if (layout.nested) {
    view.nested_absmax = piece(layout.nested_absmax, DType::F32, layout.nested_blocks);
    view.nested_code = piece(layout.nested_code, DType::F32, 256);
    view.nested_offset = piece(layout.nested_offset, DType::F32, 1);
  }
  view.blocksize = e.quant.blocksize;
  return view;
}

Tensor ParamStore::dequant_workspace() const {
  if (!dequant_numel_) return Tensor();
  return Tensor(dequant_workspace_.data(), param_dtype_, {dequant_numel_}, backend_.device());
}

Tensor ParamStore::payload_bytes(const ParamEntry& e) const {
  const int64_t bytes = static_cast<int64_t>(quant4_layout(e.spec.numel(), e.quant).bytes);
  char* payload = static_cast<char*>(group(e.group).params.data()) + static_cast<size_t>(e.offset) * dtype_size(param_dtype_);
  return Tensor(payload, DType::U8, {bytes}, backend_.device());
}

Tensor ParamStore::grad(const std::string& name) const {
  const ParamEntry& e = entry(name);
  if (e.group == ParamGroup::Frozen) return Tensor();
  return slice(group(e.group).grads, grad_dtype_, e);
}

void ParamStore::write_param(const std::string& name, const float* host) {
  const ParamEntry& e = entry(name);
  if (e.quant.enabled()) {  // quantized on the host (one tensor's payload), then copied as bytes
    const Tensor target = payload_bytes(e);
    std::vector<uint8_t> payload(static_cast<size_t>(target.numel()));
    quantize_4bit(host, e.spec.numel(), e.quant, payload.data());
    backend_.copy(target, Tensor(payload.data(), DType::U8, {target.numel()}));
    return;
  }
  Tensor target = param(name);
  backend_.copy(target, Tensor(const_cast<float*>(host), DType::F32, {target.numel()}).reshaped({target.numel()}));
}

void ParamStore::write_payload(const std::string& name, const uint8_t* payload) {
  const Tensor target = payload_bytes(entry(name));
  backend_.copy(target, Tensor(const_cast<uint8_t*>(payload), DType::U8, {target.numel()}));
}

std::vector<float> ParamStore::read_param(const std::string& name) const {
  const ParamEntry& e = entry(name);
  if (e.quant.enabled()) {
    const Tensor source = payload_bytes(e);
    std::vector<uint8_t> payload(static_cast<size_t>(source.numel()));
    backend_.copy(Tensor(payload.data(), DType::U8, {source.numel()}), source);
    return dequantize_payload(payload.data(), e.spec.numel(), e.quant);
  }
  Tensor source = param(name);
  std::vector<float> host(static_cast<size_t>(source.numel()));
  backend_.copy(Tensor(host.data(), DType::F32, {source.numel()}), source.reshaped({source.numel()}));
  return host;
}

bool ParamStore::trainable(const std::string& name) const { return entry(name).group != ParamGroup::Frozen; }

Tensor ParamStore::group_params(ParamGroup g) const {
  return Tensor(group(g).params.data(), param_dtype_, {group(g).numel}, backend_.device());
}

Tensor ParamStore::group_grads(ParamGroup g) const {
  if (g == ParamGroup::Frozen) return Tensor();
  return Tensor(group(g).grads.data(), grad_dtype_, {group(g).numel}, backend_.device());
}

int64_t ParamStore::count_parameters(bool trainable_only) const {
  int64_t count = 0;
  for (const ParamEntry& e : entries_)
    if (!trainable_only || e.group != ParamGroup::Frozen) count += e.spec.numel();
  return count;
}

void ParamStore::zero_grads() {
  for (ParamGroup g : {ParamGroup::Decay, ParamGroup::NoDecay}) {
    if (!group(g).numel) continue;
    backend_.commit(group_grads(g));
    backend_.fill(group_grads(g), 0.0f);
  }
}

}  // namespace zt
