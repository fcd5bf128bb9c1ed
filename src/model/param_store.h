// ParamStore: all parameters of a model in flat contiguous buffers, one per parameter group,
// so that optimizer updates and (later) collectives are single calls over a contiguous range.
// Groups: frozen (no gradient, e.g. LoRA base weights), trainable with weight decay, trainable
// without weight decay (norm weights and biases). Each parameter is a slice of its group.
//
// Units (ZeRO): the parameters a model reads together, as its architecture declares them
// (ParamSpec::unit): unit 0 holds what comes before the blocks (embeddings), unit l+1 block l,
// unit L+1 what comes after (final norm, head); a LoRA adapter belongs to its base weight's
// unit. A unit may also read another unit's parameters through a tie (a tied head reads the
// token embedding of unit 0): unit_reads() lists them, and ZeRO gathers them all when the unit
// is acquired and commits their gradients for its backward. A tied parameter has no storage of
// its own: its name resolves to its target (entries() holds only stored parameters).
// Within each group the buffer is laid out unit after unit, and each unit's range is padded to a multiple of 16 x `partitions` elements, so
// that partition r of a unit is the plain slice [begin + r*n/W, begin + (r+1)*n/W) and every
// rank's slices of consecutive units are consecutive in its partition buffer (at begin/W).
#pragma once
#include <array>
#include <map>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/buffer.h"
#include "core/quant4bit.h"
#include "model/param_spec.h"

namespace zt {

enum class ParamGroup : int { Frozen = 0, Decay = 1, NoDecay = 2 };
constexpr int kParamGroups = 3;
// The groups an optimizer updates (Frozen has no gradient, master or state).
constexpr ParamGroup kTrainableGroups[] = {ParamGroup::Decay, ParamGroup::NoDecay};
const char* param_group_name(ParamGroup group);

struct ParamEntry {
  ParamSpec spec;
  ParamGroup group;
  int64_t offset;  // element offset in its group's flat buffer (a multiple of 16: 64-byte aligned)
  int unit;        // see "Units" above
  QuantConfig quant;  // enabled: a frozen weight stored 4-bit (QLoRA); its slice of the group
                      // buffer holds the payload bytes (core/quant4bit.h), not param-dtype values
  int64_t storage = 0;  // param-dtype elements its slice spans: numel, or the payload's bytes rounded up
};

// The unit of every spec (same order): see "Units" above.
std::vector<int> param_units(const std::vector<ParamSpec>& specs);

// A unit's range in one group's flat buffer: [begin, begin + numel), numel a multiple of
// 16 x partitions (0 when the unit has no parameter of that group).
struct UnitRange {
  int64_t begin = 0;
  int64_t numel = 0;
};

struct FlatGroup {
  int64_t numel = 0;  // padded element count of the buffers below
  std::vector<UnitRange> units;  // [units]
  Buffer params;      // param dtype [numel]: the compute parameters the model reads
  Buffer grads;       // grad dtype [numel] (empty for the frozen group)
};

// Which flat buffers hold memory from the start (ZeRO decides: stage 3 never holds all the
// parameters, stages 2/3 never all the gradients, not even while loading). A buffer that starts
// empty gets memory unit by unit: commit_unit_params, or the engine's commits.
struct StoreResidency {
  bool params = true;  // false: commit_unit_params before writing a unit's parameters
  bool grads = true;   // false: zero_grads or the ZeRO engine commit what they write
};

class ParamStore {
 public:
  // `trainable` decides, per spec, whether it gets a gradient (LoRA: only adapters);
  // `partitions` is the ZeRO world size the unit ranges are padded for (1: no padding);
  // `param_dtype` is the storage of the parameters the model computes with: the compute dtype
  // (fp32, bf16 or fp16; mixed precision keeps its fp32 master weights in the ZeRO engine).
  // `grad_dtype` is the gradients' storage: fp32 (the default: micro-batches accumulate without
  // 16-bit rounding), or the parameters' 16-bit dtype (DeepSpeed's data_types.grad_accum_dtype:
  // half the bytes; each backward `+=` adds in fp32 and rounds once, as cuBLAS with beta 1 does).
  // `quant` (per spec, or empty: none) stores frozen weights 4-bit (QLoRA's base): the payload
  // bytes live in the frozen group, so ZeRO partitions, gathers and offloads them as they are.
  ParamStore(Backend& backend, const std::vector<ParamSpec>& specs, const std::vector<bool>& trainable,
             int partitions = 1, DType param_dtype = DType::F32, StoreResidency residency = {},
             const std::vector<QuantConfig>& quant = {}, DType grad_dtype = DType::F32);

  const std::vector<ParamEntry>& entries() const { return entries_; }
  const ParamEntry& entry(const std::string& name) const;
  bool contains(const std::string& name) const { return index_.count(name) > 0 || aliases_.count(name) > 0; }
  Tensor param(const std::string& name) const;  // param-dtype view with the spec's shape (not for 4-bit ones)
  bool quantized(const std::string& name) const { return entry(name).quant.enabled(); }
  Quant4View quant4_view(const std::string& name) const;  // the payload's pieces of a 4-bit weight
  // Param-dtype scratch of the largest 4-bit weight (empty when none): where a layer
  // dequantizes its base weight just before its GEMM (layers compute one at a time).
  Tensor dequant_workspace() const;
  Tensor grad(const std::string& name) const;   // grad dtype; empty view when the parameter is frozen
  DType param_dtype() const { return param_dtype_; }
  DType grad_dtype() const { return grad_dtype_; }
  bool trainable(const std::string& name) const;

  // Host <-> store copies of one parameter (the store may live on a device): loading weights,
  // dumping them. `host` holds the parameter's numel fp32 values (rounded to the param dtype
  // on the way in; quantized on the way in, dequantized on the way out for a 4-bit weight).
  void write_param(const std::string& name, const float* host);
  std::vector<float> read_param(const std::string& name) const;
  // A 4-bit weight's payload as it is (core/quant4bit.h layout): loading a bitsandbytes checkpoint.
  void write_payload(const std::string& name, const uint8_t* payload);

  FlatGroup& group(ParamGroup group) { return groups_[static_cast<size_t>(group)]; }
  const FlatGroup& group(ParamGroup group) const { return groups_[static_cast<size_t>(group)]; }
  Tensor group_params(ParamGroup group) const;  // param dtype [numel]
  Tensor group_grads(ParamGroup group) const;   // grad dtype [numel]; empty for Frozen

  int64_t count_parameters(bool trainable_only) const;  // unpadded element counts
  void zero_grads();  // commits the gradient buffers first
  // Gives a unit's parameter ranges (every group) memory and zeroes them, padding included, before
  // its weights are written (a store whose parameters started empty).
  void commit_unit_params(int unit);

  int num_units() const { return num_units_; }
  // The units whose parameters unit `unit` reads (itself first, then its ties' units).
  const std::vector<int>& unit_reads(int unit) const { return unit_reads_[static_cast<size_t>(unit)]; }
  // Whether the unit's backward reads parameter values (linear weights, norm scales) or only
  // writes gradients (lookup tables and biases only: an embedding unit).
  bool unit_backward_reads_params(int unit) const { return unit_backward_reads_[static_cast<size_t>(unit)]; }
  int unit_of(const std::string& name) const { return entry(name).unit; }
  int partitions() const { return partitions_; }
  UnitRange unit_range(ParamGroup g, int unit) const { return group(g).units[static_cast<size_t>(unit)]; }
  int64_t unit_numel(int unit) const;  // padded elements of the unit over all groups

 private:
  Tensor slice(const Buffer& buffer, DType dtype, const ParamEntry& entry) const;
  Tensor payload_bytes(const ParamEntry& entry) const;  // uint8 [payload bytes] of a 4-bit weight
  Backend& backend_;
  DType param_dtype_ = DType::F32;
  DType grad_dtype_ = DType::F32;
  std::vector<ParamEntry> entries_;
  Buffer dequant_workspace_;                     // param dtype [largest 4-bit weight]
  int64_t dequant_numel_ = 0;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> aliases_;   // tied name -> stored name
  std::vector<std::vector<int>> unit_reads_;     // [units]
  std::vector<bool> unit_backward_reads_;        // [units]
  std::array<FlatGroup, kParamGroups> groups_;
  int num_units_ = 0;
  int partitions_ = 1;
};

}  // namespace zt
