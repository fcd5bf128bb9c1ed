// ZeRO++'s quantized collectives (docs/zero-plus-plus.md; arXiv 2306.10209), on the block
// quantization of Backend::quantize_blocks (core/block_quant.h):
//   qwZ: an all-gather of weights that sends int8 blocks and fp32 scales instead of the compute
//        dtype, dequantized on arrival; each rank keeps its own slice at full precision.
//   qgZ: a reduce-scatter of gradients as two all-to-alls of int4 blocks, first among the ranks
//        of a node, then among the ranks with the same place on every node, each hop summing
//        what arrived (dequantize-reduce) before sending on; each rank adds its own share at
//        full precision.
// Block sizes (zerotune's choice): 2048 weights per scale (DeepSpeed's CUDAQuantizer sizes its qwZ
// groups per tensor, at most 8000 values); gradients 512 per scale, smaller because int4's 15
// levels per block lose more than int8's 255.
#pragma once
#include <cstdint>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "comm/node_groups.h"

namespace zt {

constexpr int64_t kQuantizedWeightBlock = 2048;   // qwZ: values per fp32 scale (int8)
constexpr int64_t kQuantizedGradientBlock = 512;  // qgZ: values per fp32 scale (int4)

// Bytes one rank's n values take on the wire: the codes and their scales.
int64_t quantized_wire_bytes(int64_t n, int bits, int64_t block);

// in [S] (compute dtype) -> out [W*S]: slice r of out = rank r's in, dequantized (this rank's
// own: copied). The dequantization runs in the handle's wait(), so the handle must be waited.
Pending quantized_all_gather_async(Backend& backend, Communicator& comm, Tensor out, Tensor in);

// in [W*S] rank-major (any float) -> out [S] (its dtype) = the sum over ranks of their in's slice
// `rank`, approximately (each hop's int4 blocks). Both hops complete before it returns.
Pending hierarchical_quantized_reduce_scatter(Backend& backend, NodeGroups& nodes, Tensor out, Tensor in);

}  // namespace zt
