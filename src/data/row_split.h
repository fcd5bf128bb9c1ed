// DeepSpeed-Chat's row splits (dschat/utils/data/data_utils.py, get_raw_dataset_split_index),
// for `zerotune prep --eval-fraction`: the rows 0..N-1 of a dataset are permuted by
// numpy.random.RandomState(seed).shuffle and the permutation is cut into consecutive portions
// in proportion to a list of weights ("9,1": 90% then 10%). zerotune draws the same permutation
// (MT19937 seeded as numpy seeds it from an integer, Fisher-Yates from the end with numpy's
// masked rejection sampling), so with the same seed and weights the same rows land in the same
// portion as in DeepSpeed-Chat.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace zt {

// numpy.random.RandomState(seed).shuffle(numpy.arange(rows)): [rows] row indices.
std::vector<int64_t> numpy_shuffled_rows(int64_t rows, uint32_t seed);

// The portion boundaries DeepSpeed-Chat computes for `rows` rows and `weights`: [weights + 1],
// starting at 0 and ending at `rows`; boundary k is the running sum of round(weight_i / total *
// rows) (Python's round: half to even), all moved by the same amount so that the last is `rows`.
std::vector<int64_t> split_boundaries(int64_t rows, const std::vector<double>& weights);

// Portion `portion` (0-based) of the shuffled rows: [boundary[p+1] - boundary[p]] row indices in
// permutation order.
std::vector<int64_t> deepspeed_chat_portion(int64_t rows, const std::vector<double>& weights, size_t portion,
                                            uint32_t seed);

// What becomes of each row of a dataset in DeepSpeed-Chat's create_dataset for one training phase.
enum class RowRole : uint8_t { Unused, Kept, HeldOut };

// The role of each of `rows` rows [rows]: with `held_out_fraction` F > 0 the rows are first cut
// into a kept part and a held-out part as the "9,1" train_eval split cuts them (weights 1-F, F);
// then, with a non-empty `data_split` ("2,4,4": three phases), each part keeps only its portion
// `phase` (0-based) of a second permutation of that part, as DeepSpeed-Chat's --data_split does
// (Subset of a Subset: positions in the part's permutation order). All with the same seed.
std::vector<RowRole> deepspeed_chat_row_roles(int64_t rows, double held_out_fraction,
                                              const std::vector<double>& data_split, size_t phase, uint32_t seed);

}  // namespace zt
