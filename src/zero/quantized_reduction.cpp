// The quantized strategy (ZeRO++'s qgZ, stage 3 on several ranks): the reduce-scatter strategy,
// every micro-batch, with each bucket reduced by hierarchical_quantized_reduce_scatter (two
// all-to-alls of int4 blocks, within the node then across nodes: quantized_collectives.h)
// instead of one exact reduce-scatter over all ranks.
#include "core/error.h"
#include "zero/gradient_reduction.h"
#include "zero/quantized_collectives.h"

namespace zt {

std::unique_ptr<GradientReduction> make_quantized_reduction(const ReductionContext& context, bool partitions) {
  ZT_CHECK(context.nodes, "zero_optimization.zero_quantized_gradients: the node groups were not set up");
  Backend* backend = context.backend;
  NodeGroups* nodes = context.nodes;
  return make_reduce_scatter_reduction(context, true, partitions, [backend, nodes](Tensor out, Tensor in) {
    return hierarchical_quantized_reduce_scatter(*backend, *nodes, out, in);
  });
}

}  // namespace zt
