// The null communicator (see null_communicator.h).
#include "comm/null_communicator.h"

#include <algorithm>

#include "core/error.h"

namespace zt {

namespace {

class NullCommunicator final : public Communicator {
 public:
  NullCommunicator(int rank, int size, int local_size, int nodes)
      : rank_(rank), size_(size), local_size_(local_size), nodes_(nodes) {
    ZT_CHECK(size >= 1 && rank >= 0 && rank < size, "null communicator: rank ", rank, " of ", size);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return rank_ % local_size_; }
  int local_size() const override { return local_size_; }
  int nodes() const override { return nodes_; }
  std::string name() const override { return "null"; }
  Pending all_reduce_sum_async(Tensor) override { return completed_collective(); }
  Pending reduce_scatter_sum_async(Tensor, Tensor) override { return completed_collective(); }
  Pending all_gather_async(Tensor, Tensor) override { return completed_collective(); }
  Pending all_to_all_async(Tensor, Tensor) override { return completed_collective(); }
  void broadcast(Tensor, int) override {}
  void barrier() override {}
  void all_reduce_scalars(std::span<double>) override {}
  double all_reduce_max(double value) override { return value; }
  std::vector<std::string> all_gather_strings(const std::string& mine) override {
    return std::vector<std::string>(static_cast<size_t>(size_), mine);
  }
  // The peers exist only as a count: what is received keeps its contents.
  Pending exchange_async(std::span<const Transfer> transfers) override {
    check_point_to_point(transfers);
    return completed_collective();
  }
  // The other ranks' colors are unknown here: a group's null communicator is made with its size.
  std::unique_ptr<Communicator> split_uniform(int, int key, int group_size) override {
    return std::make_unique<NullCommunicator>(key, group_size, std::min(local_size_, group_size), 1);
  }
  std::unique_ptr<Communicator> split(int, int) override {
    fail("split: the null communicator (rank ", rank_, " of ", size_, ", the memory model's) does not know the other "
         "ranks' colors; make the group's null communicator with the group's size instead");
  }

 private:
  int rank_, size_, local_size_, nodes_;
};

}  // namespace

std::unique_ptr<Communicator> make_null_communicator(int rank, int size, int local_size, int nodes) {
  return std::make_unique<NullCommunicator>(rank, size, local_size, nodes);
}

}  // namespace zt
