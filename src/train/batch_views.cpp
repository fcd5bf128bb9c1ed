// Views of a MicroBatch's host vectors as the model's BatchTensors.
#include "train/batch_views.h"

namespace zt {

BatchTensors batch_views(MicroBatch& micro) {
  const int64_t n = micro.batch * micro.seq;
  BatchTensors batch;
  batch.batch = micro.batch;
  batch.seq = micro.seq;
  batch.input_ids = Tensor(micro.input_ids.data(), DType::I32, {n});   // [B*T]
  batch.targets = Tensor(micro.targets.data(), DType::I32, {n});       // [B*T]
  batch.loss_mask = Tensor(micro.loss_mask.data(), DType::U8, {n});    // [B*T]
  batch.row_ids = Tensor(micro.row_ids.data(), DType::I64, {n});       // [B*T]
  return batch;
}

}  // namespace zt
