// ZeRO++'s quantized collectives (see quantized_collectives.h).
#include "zero/quantized_collectives.h"

#include <functional>
#include <vector>

#include "backend/buffer.h"
#include "core/block_quant.h"
#include "core/error.h"

namespace zt {

int64_t quantized_wire_bytes(int64_t n, int bits, int64_t block) {
  return block_quant_bytes(n, bits) + block_quant_blocks(n, block) * static_cast<int64_t>(sizeof(float));
}

namespace {

// n values of each of `parts` ranks quantized one part at a time (every part's blocks start at
// its beginning, so a part can be dequantized alone): codes uint8 [parts * bytes], scales fp32
// [parts * blocks].
struct QuantizedParts {
  QuantizedParts(Backend& backend, int parts, int64_t values, int code_bits, int64_t block_values)
      : n(values), bits(code_bits), block(block_values), bytes(block_quant_bytes(values, code_bits)),
        blocks(block_quant_blocks(values, block_values)),
        codes_buffer(backend, static_cast<size_t>(parts * bytes)),
        scales_buffer(backend, static_cast<size_t>(parts * blocks) * sizeof(float)) {
    codes = flat_view(codes_buffer, DType::U8, parts * bytes);
    scales = flat_f32(scales_buffer, parts * blocks);
  }
  Tensor part_codes(int part) const { return codes.rows(part * bytes, bytes); }
  Tensor part_scales(int part) const { return scales.rows(part * blocks, blocks); }
  void quantize(Backend& backend, int part, Tensor values) const {
    backend.quantize_blocks(part_codes(part), part_scales(part), values, bits, block);
  }
  void dequantize(Backend& backend, int part, Tensor out, bool accumulate) const {
    backend.dequantize_blocks(out, part_codes(part), part_scales(part), bits, block, accumulate);
  }

  int64_t n;
  int bits;
  int64_t block, bytes, blocks;
  Buffer codes_buffer, scales_buffer;
  Tensor codes, scales;
};

// qwZ's gather in flight: its two all-gathers (codes, scales) and the buffers they fill.
class QuantizedGather final : public PendingCollective {
 public:
  QuantizedGather(Backend& backend, Communicator& comm, Tensor out, Tensor in)
      : backend_(backend), out_(out), rank_(comm.rank()), world_(comm.size()),
        mine_(backend, 1, in.numel(), 8, kQuantizedWeightBlock),
        all_(backend, world_, in.numel(), 8, kQuantizedWeightBlock) {
    const int64_t n = in.numel();
    ZT_CHECK(out.numel() == n * world_, "quantized all-gather: out has ", out.numel(), " elements, not ", world_, " x ", n);
    backend.copy(out.rows(rank_ * n, n), in);  // the owner keeps full precision
    mine_.quantize(backend, 0, in);
    codes_ = comm.all_gather_async(all_.codes, mine_.codes);
    scales_ = comm.all_gather_async(all_.scales, mine_.scales);
  }
  ~QuantizedGather() override {
    codes_.reset();  // each waits in its destructor, before the buffers go
    scales_.reset();
  }
  void wait() override {
    if (finished_) return;
    codes_->wait();
    scales_->wait();
    const int64_t n = all_.n;
    for (int rank = 0; rank < world_; ++rank)
      if (rank != rank_) all_.dequantize(backend_, rank, out_.rows(rank * n, n), false);
    finished_ = true;
  }
  bool done() const override { return finished_ || (codes_->done() && scales_->done()); }

 private:
  Backend& backend_;
  Tensor out_;  // compute dtype [W * n]
  int rank_, world_;
  QuantizedParts mine_, all_;
  Pending codes_, scales_;
  bool finished_ = false;
};

// One hop of qgZ over `comm` (P ranks): every rank sends rank p its k slices of S values,
// slice(p, j) (any float); sum [k S] fp32 = this rank's own slices at full precision + every other
// rank's slices for it, dequantized from int4 (each slice's blocks start with it).
void all_to_all_reduce_hop(Backend& backend, Communicator& comm, Tensor sum, int k,
                           const std::function<Tensor(int rank, int j)>& slice) {
  const int ranks = comm.size(), me = comm.rank();
  const int64_t S = sum.numel() / k;
  QuantizedParts outgoing(backend, ranks * k, S, 4, kQuantizedGradientBlock);
  QuantizedParts incoming(backend, ranks * k, S, 4, kQuantizedGradientBlock);
  for (int rank = 0; rank < ranks; ++rank)
    for (int j = 0; j < k && rank != me; ++j) outgoing.quantize(backend, rank * k + j, slice(rank, j));
  Pending codes = comm.all_to_all_async(incoming.codes, outgoing.codes);
  Pending scales = comm.all_to_all_async(incoming.scales, outgoing.scales);
  for (int j = 0; j < k; ++j) backend.copy(sum.rows(j * S, S), slice(me, j));
  codes->wait();
  scales->wait();
  for (int rank = 0; rank < ranks; ++rank)
    for (int j = 0; j < k && rank != me; ++j) incoming.dequantize(backend, rank * k + j, sum.rows(j * S, S), true);
}

}  // namespace

Pending quantized_all_gather_async(Backend& backend, Communicator& comm, Tensor out, Tensor in) {
  return std::make_unique<QuantizedGather>(backend, comm, out, in);
}

// World rank r = node m * R + local l; the input's slice r is for rank r. Hop 1 (intra, R ranks):
// local rank l' gets from every rank of its node the slices of ranks {m R + l' : every node m} and
// sums them: its node's partial sums [N][S] for place l' on every node. Hop 2 (inter, N ranks: the
// ranks with local index l, ranked by node): node m's rank gets every node's partial for it.
Pending hierarchical_quantized_reduce_scatter(Backend& backend, NodeGroups& nodes, Tensor out, Tensor in) {
  const int R = nodes.ranks_per_node, N = nodes.nodes;
  const int64_t S = out.numel();
  ZT_CHECK(in.numel() == S * R * N, "quantized reduce-scatter: in has ", in.numel(), " elements, not ", R * N, " x ", S);
  Buffer partial_buffer(backend, static_cast<size_t>(N * S) * sizeof(float));
  Tensor partial = flat_f32(partial_buffer, N * S);  // fp32 [N][S]: this node's sums for my place
  all_to_all_reduce_hop(backend, *nodes.intra, partial, N,
                        [&](int place, int node) { return in.rows((node * R + place) * S, S); });
  Buffer total_buffer(backend, static_cast<size_t>(S) * sizeof(float));
  Tensor total = flat_f32(total_buffer, S);
  all_to_all_reduce_hop(backend, *nodes.inter, total, 1, [&](int node, int) { return partial.rows(node * S, S); });
  backend.copy(out, total);
  return completed_collective();
}

}  // namespace zt
