// The null communicator: rank r of W ranks that never talk. Collectives complete at once and
// leave their buffers as they are; scalar reductions return this rank's values. The memory
// model (train/memory_model.h) runs a rank's set-up and step on the counting backend with it,
// where only the buffers the collectives need matter, not their contents. split() is refused
// (it cannot know the other ranks' colors).
#pragma once
#include <memory>

#include "comm/communicator.h"

namespace zt {

std::unique_ptr<Communicator> make_null_communicator(int rank, int size, int local_size = 1, int nodes = 1);

}  // namespace zt
