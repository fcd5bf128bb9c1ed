// The Tensor views the model reads of a host micro-batch: the host vectors themselves on the
// CPU backend, device copies (in `storage`, grown as needed) on a device backend.
#pragma once
#include "backend/buffer.h"
#include "data/batch.h"
#include "model/causal_lm.h"

namespace zt {

struct DeviceBatchStorage {
  Buffer input_ids, targets, loss_mask, row_ids;  // int32, int32, uint8, int64 [B*T] on the device
  Buffer positions;                               // int32 [B*T] (packed micro-batches)
};

BatchTensors batch_views(MicroBatch& micro, Backend& backend, DeviceBatchStorage& storage);

}  // namespace zt
