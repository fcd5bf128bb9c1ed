// ZeroConfig: DeepSpeed's "zero_optimization" section, as the ZeRO engine reads it.
#pragma once
#include <cstdint>
#include <string>

namespace zt {

// Whether stage 3 prefetches the next unit (`next` parameters not yet gathered) while `live` are
// gathered. DeepSpeed's coordinator adds the next parameters to a prefetch while fewer than
// stage3_prefetch_bucket_size are in flight, so a unit larger than the bucket still goes (nothing
// is in flight before it: opt-1.3b's 50.4M-parameter blocks against the 5e7 default); 0 turns
// prefetching off. Within stage3_max_live_parameters, which zerotune keeps strictly.
inline bool stage3_prefetches(int64_t next, int64_t live, int64_t prefetch_bucket_size, int64_t max_live_parameters) {
  return next > 0 && prefetch_bucket_size > 0 && live + next <= max_live_parameters;
}

struct ZeroConfig {  // DeepSpeed "zero_optimization"; the ZeRO issue gives these their effect
  int stage = 0;
  int64_t reduce_bucket_size = 500000000;
  int64_t allgather_bucket_size = 500000000;
  bool overlap_comm = false;
  bool contiguous_gradients = true;
  bool reduce_scatter = true;
  bool allgather_partitions = true;
  bool round_robin_gradients = false;
  int64_t sub_group_size = 1000000000;
  int64_t stage3_param_persistence_threshold = 100000;
  int64_t stage3_max_live_parameters = 1000000000;
  int64_t stage3_prefetch_bucket_size = 50000000;
  int64_t stage3_max_reuse_distance = 1000000000;
  int64_t stage3_model_persistence_threshold = INT64_MAX;  // DeepSpeed: sys.maxsize
  bool stage3_gather_16bit_weights_on_model_save = false;
  std::string offload_optimizer_device = "none";  // none | cpu
  bool offload_optimizer_pin_memory = false;
  // offload_optimizer.ratio (DeepSpeed's ZeRO-Offload++ "Twin-Flow", stage 3): the share of the optimizer
  // partition offloaded to the host; the rest (the first units' slices) keeps its fp32 master and
  // optimizer state on the device and is updated there, beside the CPU update (docs/zero-offload.md).
  double offload_optimizer_ratio = 1.0;
  std::string offload_param_device = "none";     // none | cpu (stage 3 only)
  bool offload_param_pin_memory = false;
  // ZeRO++ (stage 3; docs/zero-plus-plus.md):
  bool zero_quantized_weights = false;    // qwZ: stage 3's gathers send int8 blocks + fp32 scales
  int zero_hpz_partition_size = 1;        // hpZ: > 1 keeps a secondary partition over this many ranks (a node's)
  bool zero_quantized_gradients = false;  // qgZ: gradients reduced by two all-to-alls of int4 blocks
  // --delayed-param-update N (zerotune's; DeepSpeed's JSON has no key for it): ZeRO-Offload's one-step
  // delayed parameter update after N ordinary updates; -1: off (docs/zero-offload.md).
  int64_t delayed_update_after = -1;
  // --update-per-bucket (zerotune's): ZeRO-Offload's CPU optimizer updates each gradient bucket as the
  // step's last backward completes it, not after the backward (docs/zero-offload.md).
  bool update_per_bucket = false;
  int ranks_per_node = 0;                 // --ranks-per-node: the node layout (0: from the hosts the ranks run on)
  bool zeropp() const { return zero_quantized_weights || zero_hpz_partition_size > 1 || zero_quantized_gradients; }
};

}  // namespace zt
