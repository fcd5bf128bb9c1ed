// ZeroConfig: DeepSpeed's "zero_optimization" section, as the ZeRO engine reads it.
#pragma once
#include <cstdint>
#include <string>

namespace zt {

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
  std::string offload_param_device = "none";     // none | cpu (stage 3 only)
  bool offload_param_pin_memory = false;
};

}  // namespace zt
