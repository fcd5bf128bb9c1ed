// Flat parameter/gradient buffers per group and the named views into them.
#include "model/param_store.h"

namespace zt {

namespace {
constexpr int64_t kAlignElements = 16;  // 64 bytes of fp32
int64_t align_up(int64_t value) { return (value + kAlignElements - 1) / kAlignElements * kAlignElements; }

Tensor shaped_view(void* data, const std::vector<int64_t>& shape, Device device) {
  switch (shape.size()) {
    case 1: return Tensor(data, DType::F32, {shape[0]}, device);
    case 2: return Tensor(data, DType::F32, {shape[0], shape[1]}, device);
    case 3: return Tensor(data, DType::F32, {shape[0], shape[1], shape[2]}, device);
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

ParamStore::ParamStore(Backend& backend, const std::vector<ParamSpec>& specs, const std::vector<bool>& trainable)
    : backend_(backend) {
  ZT_CHECK(specs.size() == trainable.size(), "ParamStore: ", specs.size(), " specs but ", trainable.size(), " flags");
  std::array<int64_t, kParamGroups> sizes{};
  for (size_t i = 0; i < specs.size(); ++i) {
    ParamGroup group = !trainable[i] ? ParamGroup::Frozen : specs[i].decays() ? ParamGroup::Decay : ParamGroup::NoDecay;
    int64_t& size = sizes[static_cast<size_t>(group)];
    ZT_CHECK(!index_.count(specs[i].name), "parameter ", specs[i].name, " is listed twice");
    index_[specs[i].name] = entries_.size();
    entries_.push_back({specs[i], group, size});
    size = align_up(size + specs[i].numel());
  }
  for (int g = 0; g < kParamGroups; ++g) {
    FlatGroup& flat = groups_[static_cast<size_t>(g)];
    flat.numel = sizes[static_cast<size_t>(g)];
    size_t bytes = static_cast<size_t>(flat.numel) * sizeof(float);
    flat.params = Buffer(backend, bytes);
    if (flat.numel) backend.fill(group_params(static_cast<ParamGroup>(g)), 0.0f);  // padding stays 0
    if (g != static_cast<int>(ParamGroup::Frozen)) flat.grads = Buffer(backend, bytes);
  }
  zero_grads();
}

const ParamEntry& ParamStore::entry(const std::string& name) const {
  auto found = index_.find(name);
  ZT_CHECK(found != index_.end(), "no parameter named '", name, "'");
  return entries_[found->second];
}

Tensor ParamStore::slice(const Buffer& buffer, const ParamEntry& e) const {
  return shaped_view(static_cast<float*>(buffer.data()) + e.offset, e.spec.shape, backend_.device());
}

Tensor ParamStore::param(const std::string& name) const {
  const ParamEntry& e = entry(name);
  return slice(group(e.group).params, e);
}

Tensor ParamStore::grad(const std::string& name) const {
  const ParamEntry& e = entry(name);
  if (e.group == ParamGroup::Frozen) return Tensor();
  return slice(group(e.group).grads, e);
}

bool ParamStore::trainable(const std::string& name) const { return entry(name).group != ParamGroup::Frozen; }

Tensor ParamStore::group_params(ParamGroup g) const {
  return Tensor(group(g).params.data(), DType::F32, {group(g).numel}, backend_.device());
}

Tensor ParamStore::group_grads(ParamGroup g) const {
  if (g == ParamGroup::Frozen) return Tensor();
  return Tensor(group(g).grads.data(), DType::F32, {group(g).numel}, backend_.device());
}

int64_t ParamStore::count_parameters(bool trainable_only) const {
  int64_t count = 0;
  for (const ParamEntry& e : entries_)
    if (!trainable_only || e.group != ParamGroup::Frozen) count += e.spec.numel();
  return count;
}

void ParamStore::zero_grads() {
  for (ParamGroup g : {ParamGroup::Decay, ParamGroup::NoDecay})
    if (group(g).numel) backend_.fill(group_grads(g), 0.0f);
}

}  // namespace zt
