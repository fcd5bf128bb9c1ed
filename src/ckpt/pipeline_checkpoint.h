// A pipeline rank's part in a checkpoint (issue 32, docs/pipeline.md "Checkpoints"). The checkpoint
// is the whole model's, as a run without stages writes it: partition r of every array is the
// model's units' slices r one after the other, and a unit's padded range and its slices depend on
// the unit alone, so partition r is the concatenation of every virtual stage's partition r in
// virtual-stage order (1F1B, GPipe: the stages; interleaved: virtual stage chunk x P + stage, a
// rank's chunks far apart). A rank's store holds its chunks' units one after the other, each with
// the whole model's layout, then (the last stage of a model whose trainable head is tied to the
// first stage's token table) a unit of tied copies, which is not saved: the first stage's table is
// the one copy in the checkpoint, and a load fills a copy from it (ckpt/checkpoint.h).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/communicator.h"
#include "model/param_store.h"

namespace zt {

struct PipelineCheckpoint {
  Communicator* world = nullptr;  // every rank, on host buffers (MPI): the parts go to stage 0
  int stage = 0, stages = 1, replicas = 1, replica = 0;
  // The model's units [first, end) of each chunk the rank holds, in the store's order (one chunk
  // but under the interleaved schedule); store units after them (tied copies) are not saved.
  std::vector<std::array<int, 2>> chunks;
  nlohmann::json layout;          // what the manifest records under "pipeline"
  int rank_of(int of_stage) const { return of_stage * replicas + replica; }  // pipe/pipeline_topology.h
  int virtual_stage(int chunk) const { return chunk * stages + stage; }
};

// What one rank file holds, on the host: the partition's arrays per trainable group ("decay",
// "master"), and on partition 0 the per-tensor state (group: the parameter, name: the state's).
struct RankFileContent {
  struct Array {
    std::string group, name;
    std::vector<float> values;
  };
  std::vector<Array> arrays, tensor_state;
  uint64_t bytes() const {  // what the file writes (fp32 arrays; the HDF5 overhead is small beside them)
    uint64_t elements = 0;
    for (const auto* list : {&arrays, &tensor_state})
      for (const Array& array : *list) elements += array.values.size();
    return elements * sizeof(float);
  }
};

// The manifest's layout of store units [first, first + count) (count < 0: to the last unit), as if
// they were a store of their own: offsets from the first unit's, units numbered from 0.
nlohmann::json store_layout_json(const ParamStore& store, int first = 0, int count = -1);

// Collective over pipeline.world. A holder (a rank that owns partition `partition` of `partitions`
// of its stage's arrays) passes its partition's `content`; stage 0's holder of each partition gets
// back the whole model's partition (every virtual stage's slices in order, per-tensor state of every
// stage's own parameters); the others' content is left as it is.
void gather_pipeline_partition(RankFileContent& content, const ParamStore& store, int partitions,
                               const PipelineCheckpoint& pipeline, bool holder);

// Collective over pipeline.world: the whole model's layout from every stage's replica 0
// (`speaks`), its chunks' units in virtual-stage order (the copies' unit left out).
nlohmann::json gather_pipeline_layout(const ParamStore& store, const PipelineCheckpoint& pipeline, bool speaks);

}  // namespace zt
