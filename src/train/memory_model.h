// The memory model: how many bytes one rank holds on its device (and in host memory) after
// set-up and at the peak of a training step, for a run's model, ZeRO configuration, LoRA,
// dtype, micro-batch and sequence length. It is not a formula: it builds the run with the
// trainer's own assembly (train/run_assembly.h, without weights) and runs one step of the
// trainer's StepRunner and schedule on the counting backend (backend/counting_backend.h) with a
// null communicator, so every buffer the run allocates is counted by the code that allocates it,
// with the real backend's allocator rounding and virtual-memory chunks
// (tests/mpi/test_allocation_drift.py checks it allocation by allocation). The trainer checks its prediction against the device's free memory
// before it allocates anything; `zerotune estimate --model` and `zerotune selftest` print it,
// `zerotune autotune` prunes with it. Each byte is counted under a term (what it is: below), so
// the prediction comes broken down the same way whoever prints it.
//
// The CUDA backend's attention scratch (cuDNN's workspace, our kernels' delta) is counted, by
// the rule backend/attention_scratch_rules.h gives it (cuda_attention_scratch; README.md, "How much
// memory a rank holds"); under --packing for the worst packed micro-batch the data allows
// (DataLengths below: cuDNN's bucketed graph of B' sequences, not one per row).
// Not counted: what communication libraries allocate on their own (NCCL's buffers), the CUDA
// backend's other op scratch (CudaBackendImpl::scratch: partial sums, conversion staging, a few
// bytes to a few KiB, freed within the op) and memory other processes hold on the device.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "backend/counting_backend.h"  // kTermAllocatorSlack, kTermBackendFixed
#include "data/token_shards.h"
#include "model/config.h"
#include "train/train_config.h"

namespace zt {

// What the real backend would do with an allocation.
struct MemoryTarget {
  Device device = Device::CUDA;
  std::function<int64_t(int64_t bytes)> allocation_size;  // empty: exact
  int64_t discard_chunk_bytes = 0;  // virtual-memory granularity (0: discard frees nothing)
  int64_t fixed_bytes = 0;          // the backend's own buffers (cuBLASLt workspace, status words)
  // What its attention takes for the op (cuDNN's workspace: backend/attention_scratch_rules.h);
  // null: nothing.
  AttentionScratch (*attention_scratch)(const AttentionCallShape& call, bool backward) = nullptr;
  // Whether a pipeline run posts its messages ahead (Communicator::exchanges_independent: MPI,
  // host-staged MPI), which holds a stage input, a received gradient and the sent activation and
  // gradient more (train/pipe_engine.h); false: NCCL, whose engine runs the interleaved schedule
  // and GPipe overlapped (the sent activation and gradient in send buffers; GPipe two received
  // gradients) and 1F1B grouped (pipe/pipe_schedule.h pipe_exchange_form picks the form from this
  // flag and the schedule).
  bool pipeline_posts_ahead = false;
};
// The target of a live backend: the CUDA backend's rounding, granularity and fixed buffers
// (what it holds right after construction) and its attention's scratch; the CPU backend's exact
// bytes.
MemoryTarget memory_target_of(const Backend& backend);
// A GPU like the ones zerotune runs on when there is none to ask (estimate): the caching
// allocator's size classes, 2 MiB chunks, the 32 MiB cuBLASLt workspace, the attention's scratch
// (cuDNN's workspace) as the CUDA backend takes it.
MemoryTarget typical_gpu_target();

// The terms a prediction's bytes are broken down into (MemoryPrediction::device_terms), each
// counted by the code that allocates it: the memory model names what it sets up and steps
// (CountingBackend::set_term, move_to_term) and the counting backend adds the allocator's share.
// A new kind of buffer (activation offload, a chunked loss, a 4-bit base) is a new term here
// plus the set_term/move_to_term that names it in predict_memory; every printer lists the terms
// of kMemoryTerms in this order and any other term after them.
inline constexpr const char* kTermParameters = "parameters";  // the store's compute-dtype buffers after set-up
inline constexpr const char* kTermGathered = "gathered parameters";  // stage 3: units gathered (and prefetched)
                                                                     // during the step; offload_param's uploads
inline constexpr const char* kTermGradients = "gradients";
inline constexpr const char* kTermMaster = "master weights";         // fp32 partition
inline constexpr const char* kTermOptimizerState = "optimizer state";
inline constexpr const char* kTermZeroBuffers = "communication buckets";  // the engine's other buffers: reduce
                                                                          // bucket, staging, host gradient copy
inline constexpr const char* kTermReference = "reference model";  // a frozen copy's parameters (DPO under full
                                                                   // fine-tuning; stage 3: its partition)
inline constexpr const char* kTermActivations = "activations";  // the model's saved tensors and workspaces
inline constexpr const char* kTermLogits = "logits";            // [B*T, V] in the compute dtype
inline constexpr const char* kTermModelOther = "other";         // anything else (the model's small buffers)
const std::vector<std::string>& memory_terms();                 // the order printers use

struct MemoryPrediction {
  int64_t device_setup = 0;   // held before the first step
  int64_t device_setup_peak = 0;  // the most held while setting up (loading unit by unit)
  int64_t device_peak = 0;    // the most held during a step
  int64_t host_setup = 0, host_peak = 0;  // ZeRO-Offload's host buffers
  int64_t store_setup = 0, store_peak = 0;  // of which: the flat parameter and gradient buffers
  // device_peak and host_peak by term (kTerm*, kTermAllocatorSlack, kTermBackendFixed): what was
  // held when the step's peak was reached. Zero terms are left out; each sums to its peak.
  std::map<std::string, int64_t> device_terms, host_terms;
  int64_t device_needed() const { return device_peak > device_setup_peak ? device_peak : device_setup_peak; }
  nlohmann::json to_json() const;
};

// What the data a run reads tells the memory model beyond its longest sample (the seq_len the
// model is asked about); data_lengths_of(dataset) for a run on it.
struct DataLengths {
  // A step of micro-batches that long runs first (0: none), so that the step at seq_len grows
  // the model's activation buffers, holding each old buffer beside its new one for a moment, as
  // the trainer does when a longer micro-batch comes (for data of varied lengths: seq_len - 1,
  // the worst case; activation_regrowth_from).
  int64_t grown_from_seq_len = 0;
  // --packing: the shortest sample, which bounds how many samples share a row and so how many
  // sequences cuDNN's ragged graph gets (packed_rows_bound, backend/attention_scratch_rules.h).
  // 0: unknown (no data given): any data, down to samples of one token.
  int64_t shortest_sample = 0;
};
DataLengths data_lengths_of(const TokenDataset& dataset);

// What --packing's rows of `config` can hold on data of `data` and longest sample `seq_len`
// (packed_rows_bound; unknown data: samples of 1 to seq_len tokens); without --packing one sample per row.
PackedRows packed_rows_of(const TrainConfig& config, int64_t seq_len, const DataLengths& data);

// What the model counts under --packing, in words (estimate prints it): cuDNN's packed graph of
// up to B' sequences x S' tokens and the samples that bound it, saying when their shortest is
// assumed (no data); "" without --packing.
std::string packed_rows_text(const TrainConfig& config, int64_t seq_len, const DataLengths& data);
// --packing's share of a prediction for the start-of-run refusal: the attention workspace term
// and packed_rows_text ("" without --packing or without that term).
std::string packed_attention_note(const TrainConfig& config, int64_t seq_len, const DataLengths& data,
                                  const MemoryPrediction& prediction);

// One rank (`rank` of `world_size`) of the run `config` on `model`, with micro-batches of
// config.micro_batch_size x seq_len tokens, on data of `data` (above).
MemoryPrediction predict_memory(const TrainConfig& config, const ModelConfig& model, int world_size, int rank,
                                int64_t seq_len, const MemoryTarget& target, const DataLengths& data = {});

// The job's figures under a pipeline (config.pipeline.stages = P > 1): predict_memory of every
// stage's first rank (s x D; the D ranks of a stage hold the same), in stage order; without a
// pipeline, rank 0's alone. A stage holds its units' parameters, gradients and optimizer state
// and the stage inputs of its micro-batches in flight (pipe_engine.h), so the stages differ.
std::vector<MemoryPrediction> predict_stage_memory(const TrainConfig& config, const ModelConfig& model, int world_size,
                                                   int64_t seq_len, const MemoryTarget& target,
                                                   const DataLengths& data = {});
// The stage whose need is the job's: the largest device_needed() (on_host: the largest host_peak,
// the CPU backend's buffers), the first of equals.
size_t heaviest_stage(const std::vector<MemoryPrediction>& stages, bool on_host);

// What DataLengths::grown_from_seq_len is for training on `dataset`: its longest sample - 1
// when some sample is shorter (a micro-batch may be shorter than a later one), else 0.
int64_t activation_regrowth_from(const TokenDataset& dataset);

// The longest sequence (1..max_seq_len) whose predicted device peak (device_needed) fits
// `device_bytes` for `config` on `world_size` ranks (binary search over predict_memory: the
// peak grows with the sequence); 0 when not even one token fits.
int64_t longest_fitting_sequence(const TrainConfig& config, const ModelConfig& model, int world_size,
                                 const MemoryTarget& target, int64_t device_bytes, int64_t max_seq_len);

// The ZeRO stage / offload / activation-checkpointing variants of `config` whose predicted
// device peak (under a pipeline: the heaviest stage's) fits `free_bytes`, as DeepSpeed JSON/flag
// text ("stage 3 + offload_optimizer cpu + --activation-checkpointing: 5.2 GiB"), smallest first.
std::vector<std::string> fitting_memory_choices(const TrainConfig& config, const ModelConfig& model, int world_size,
                                                int64_t seq_len, const MemoryTarget& target, int64_t free_bytes,
                                                const DataLengths& data = {});

}  // namespace zt
