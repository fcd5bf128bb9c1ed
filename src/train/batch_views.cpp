// Views (or device copies) of a MicroBatch's host vectors as the model's BatchTensors.
#include "train/batch_views.h"

namespace zt {

namespace {
// `host` copied into `buffer` on the backend's device (grown as needed); the device view.
Tensor to_device(Backend& backend, Tensor host, Buffer& buffer) {
  ensure_buffer(buffer, backend, host.numel(), host.dtype);
  Tensor device(buffer.data(), host.dtype, {host.numel()}, backend.device());
  backend.copy(device, host);
  return device;
}
}  // namespace

BatchTensors batch_views(MicroBatch& micro, Backend& backend, DeviceBatchStorage& storage) {
  const int64_t n = micro.batch * micro.seq;
  BatchTensors batch;
  batch.batch = micro.batch;
  batch.seq = micro.seq;
  batch.attention_pairs = causal_attention_pairs(micro);
  batch.input_ids = Tensor(micro.input_ids.data(), DType::I32, {n});   // [B*T]
  batch.targets = Tensor(micro.targets.data(), DType::I32, {n});       // [B*T]
  batch.loss_mask = Tensor(micro.loss_mask.data(), DType::U8, {n});    // [B*T]
  batch.row_ids = Tensor(micro.row_ids.data(), DType::I64, {n});       // [B*T]
  if (!micro.positions.empty()) batch.positions = Tensor(micro.positions.data(), DType::I32, {n});  // [B*T]
  if (backend.device() == Device::CPU) return batch;
  batch.input_ids = to_device(backend, batch.input_ids, storage.input_ids);
  batch.targets = to_device(backend, batch.targets, storage.targets);
  batch.loss_mask = to_device(backend, batch.loss_mask, storage.loss_mask);
  batch.row_ids = to_device(backend, batch.row_ids, storage.row_ids);
  if (!batch.positions.empty()) batch.positions = to_device(backend, batch.positions, storage.positions);
  return batch;
}

}  // namespace zt
