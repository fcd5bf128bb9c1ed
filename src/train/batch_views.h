// The Tensor views the model reads of a host micro-batch. The CPU backend reads host memory
// directly; the CUDA backend will copy these to the device here.
#pragma once
#include "data/batch.h"
#include "model/causal_lm.h"

namespace zt {

BatchTensors batch_views(MicroBatch& micro);

}  // namespace zt
