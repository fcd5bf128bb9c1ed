// TensorBoard event files: TFRecord-framed Event protos (train/tensorboard_event.proto) carrying
// scalar summaries, the files TensorBoard's SummaryWriter writes and `tensorboard --logdir DIR`
// reads. Rank 0 writes them for the DeepSpeed "tensorboard" section (train/monitors.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace zt {

// CRC-32C (Castagnoli, the polynomial 0x1EDC6F41 bit-reflected), as TFRecord uses it.
uint32_t crc32c(const void* data, size_t size);
// TFRecord's masked CRC: the CRC rotated right by 15 bits plus a constant, so that a CRC of
// data that itself holds CRCs stays a good check.
uint32_t masked_crc32c(const void* data, size_t size);

// One TFRecord: the length (uint64, little-endian), the masked CRC of those 8 bytes, the
// bytes, the masked CRC of the bytes.
std::string tfrecord(const std::string& bytes);

class TensorBoardWriter {
 public:
  // Creates `dir` (with its parents) and a new event file in it,
  // events.out.tfevents.<seconds since the epoch, 10 digits>.<host>.<pid> (TensorBoard reads
  // every file whose name holds "tfevents", in name order), which starts with the file_version
  // event. `key` names the config key in errors ("tensorboard.output_path").
  TensorBoardWriter(const std::string& dir, const std::string& key);

  // One Event holding the scalars `values` (tag, value; stored as float32, TensorBoard's
  // simple_value) at `step`; flushed, so that a killed job keeps what it wrote and a running
  // TensorBoard shows it at once.
  void write_scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values);

  // A SessionLog START at `step`: TensorBoard drops the events it read before it (earlier files)
  // at `step` and later, as after a restart from a checkpoint.
  void write_session_start(int64_t step, const std::string& checkpoint);

  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& bytes);

  std::string path_;
  std::ofstream out_;
};

}  // namespace zt
