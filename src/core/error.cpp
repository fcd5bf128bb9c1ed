// Storage for the process rank used in error messages.
#include "core/error.h"

namespace zt {

int& process_rank() {
  static int rank = 0;
  return rank;
}

}  // namespace zt
