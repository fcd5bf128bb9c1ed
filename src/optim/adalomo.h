// AdaLomo (Lv et al. 2023, "AdaLomo: Low-memory Optimization with Adaptive Learning Rate";
// OpenLMLab/LOMO's lomo_optim.AdaLomo): LOMO fused into backward, with Adafactor's factored
// second moment and update clipping, and a step size relative to the parameter's RMS. Per
// parameter tensor W, at update t (1 for the first):
//   beta2t = 1 - t^decay_rate,  s = g^2 + eps[0]
//   matrix [R, C]:  row = beta2t row + (1 - beta2t) mean(s, over columns)     row [R]
//                   col = beta2t col + (1 - beta2t) mean(s, over rows)        col [C]
//                   u = g rsqrt(row / mean(row))[:, None] rsqrt(col)[None, :]
//   vector [d]:     v = beta2t v + (1 - beta2t) s,  u = g rsqrt(v)            v [d]
//   u = u / max(1, RMS(u) / clip_threshold)
//   lr_t = lr max(eps[1], RMS(W))                (W before the update)
//   W = W (1 - lr_t wd) - lr_t u                 (decay on the decay group)
// g is the reduced gradient after LOMO's value clipping and clipping by the global norm. The
// state is per tensor (row and col, or v), held whole on every rank: under ZeRO each rank sums
// s over its slice's rows and columns, and u^2 and W^2 over its slice, and the sums are added
// over the ranks, so every rank holds the same state and a partitioned run updates as one rank.
#pragma once
#include <memory>

#include "optim/optimizer.h"

namespace zt {

std::unique_ptr<Optimizer> make_adalomo(const OptimizerConfig& config);

}  // namespace zt
