// --comm auto's decision: ranks share a GPU when their (host, PCI bus id) are equal, whatever
// device index each sees (comm/gpu_sharing.h).
#include <boost/test/unit_test.hpp>

#include "comm/gpu_sharing.h"

namespace zt {
namespace {

BOOST_AUTO_TEST_SUITE(gpu_sharing)

BOOST_AUTO_TEST_CASE(per_task_visible_devices_are_distinct_gpus) {
  // Four ranks that each see "device 0" (per-task CUDA_VISIBLE_DEVICES) on two nodes.
  const GpuSharing sharing = ::zt::gpu_sharing({"node1|0000:41:00.0", "node1|0000:81:00.0", "node2|0000:41:00.0",
                                          "node2|0000:81:00.0"});
  BOOST_TEST(!sharing.shared);
  BOOST_TEST(sharing.reason == "every rank has its own GPU (4 GPUs on 2 hosts, told apart by PCI bus id)");
}

BOOST_AUTO_TEST_CASE(two_ranks_on_one_gpu_are_named) {
  const GpuSharing sharing = ::zt::gpu_sharing({"node1|0000:41:00.0", "node1|0000:81:00.0", "node1|0000:41:00.0"});
  BOOST_TEST(sharing.shared);
  BOOST_TEST(sharing.reason == "ranks 0 and 2 share GPU 0000:41:00.0 on node1");
}

BOOST_AUTO_TEST_CASE(the_same_bus_id_on_two_hosts_is_two_gpus) {
  BOOST_TEST(!::zt::gpu_sharing({"a|0000:01:00.0", "b|0000:01:00.0"}).shared);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
}  // namespace zt
