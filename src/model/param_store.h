// ParamStore: all parameters of a model in flat contiguous buffers, one per parameter group,
// so that optimizer updates and (later) collectives are single calls over a contiguous range.
// Groups: frozen (no gradient, e.g. LoRA base weights), trainable with weight decay, trainable
// without weight decay (norm weights and biases). Each parameter is a slice of its group.
#pragma once
#include <array>
#include <map>
#include <string>
#include <vector>

#include "backend/buffer.h"
#include "model/param_spec.h"

namespace zt {

enum class ParamGroup : int { Frozen = 0, Decay = 1, NoDecay = 2 };
constexpr int kParamGroups = 3;
const char* param_group_name(ParamGroup group);

struct ParamEntry {
  ParamSpec spec;
  ParamGroup group;
  int64_t offset;  // element offset in its group's flat buffer (a multiple of 16: 64-byte aligned)
};

struct FlatGroup {
  int64_t numel = 0;  // padded element count of the buffers below
  Buffer params;      // fp32 [numel]
  Buffer grads;       // fp32 [numel] (empty for the frozen group)
};

class ParamStore {
 public:
  // `trainable` decides, per spec, whether it gets a gradient (LoRA: only adapters).
  ParamStore(Backend& backend, const std::vector<ParamSpec>& specs, const std::vector<bool>& trainable);

  const std::vector<ParamEntry>& entries() const { return entries_; }
  const ParamEntry& entry(const std::string& name) const;
  bool contains(const std::string& name) const { return index_.count(name) > 0; }
  Tensor param(const std::string& name) const;  // fp32 view with the spec's shape
  Tensor grad(const std::string& name) const;   // empty view when the parameter is frozen
  bool trainable(const std::string& name) const;

  FlatGroup& group(ParamGroup group) { return groups_[static_cast<size_t>(group)]; }
  const FlatGroup& group(ParamGroup group) const { return groups_[static_cast<size_t>(group)]; }
  Tensor group_params(ParamGroup group) const;  // fp32 [numel]
  Tensor group_grads(ParamGroup group) const;   // fp32 [numel]; empty for Frozen

  int64_t count_parameters(bool trainable_only) const;  // unpadded element counts
  void zero_grads();

 private:
  Tensor slice(const Buffer& buffer, const ParamEntry& entry) const;
  Backend& backend_;
  std::vector<ParamEntry> entries_;
  std::map<std::string, size_t> index_;
  std::array<FlatGroup, kParamGroups> groups_;
};

}  // namespace zt
