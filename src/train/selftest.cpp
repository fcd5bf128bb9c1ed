// The preflight self-test (see selftest.h).
#include "train/selftest.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/buffer.h"
#include "backend/device_memory_limit.h"
#include "backend/make_backend.h"
#include "backend/op_checks.h"
#include "comm/device_communicator.h"
#include "comm/mpi/mpi_communicator.h"
#include "core/error.h"
#include "data/token_shards.h"
#include "model/config.h"
#include "model/parameter_plan.h"
#include "train/memory_model.h"
#include "train/metrics.h"

namespace zt {

namespace {

using Clock = std::chrono::steady_clock;

// One line of the table, from one rank.
struct Row {
  std::string check;   // "op rmsnorm", "gemm 4096x4096 <- 4096", "all_reduce", ...
  std::string dtype;   // "bf16", or "" where none applies
  bool ok = true;
  std::string value;   // what was measured ("busbw 180.2 GB/s", "worst 0.31 of bound")
  std::string detail;  // why it failed
};

nlohmann::json to_json(const Row& row) {
  return {{"check", row.check}, {"dtype", row.dtype}, {"ok", row.ok}, {"value", row.value}, {"detail", row.detail}};
}

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

std::string fixed(double value, int digits) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", digits, value);
  return text;
}

// ZT_SELFTEST_INJECT_FAULT=op:dtype (test-only): that op's device results are altered, so the
// failure path is exercised end to end.
bool injected(const std::string& op, DType dtype) {
  const char* fault = std::getenv("ZT_SELFTEST_INJECT_FAULT");
  return fault != nullptr && std::string(fault) == op + ":" + dtype_name(dtype);
}

void op_rows(Backend& backend, std::vector<Row>& rows, DType compute) {
  if (backend.device() == Device::CPU) {
    rows.push_back({"ops vs the CPU reference", "", true, "not run: the CPU backend is the reference", ""});
    return;
  }
  std::unique_ptr<Backend> reference = make_cpu_backend();
  for (const OpCheckResult& result : run_op_checks(backend, *reference, injected)) {
    // The run's compute dtype and fp32 (norm statistics, optimizer, fp32 parts of mixed precision).
    if (result.dtype != compute && result.dtype != DType::F32) continue;
    rows.push_back({"op " + result.op, dtype_name(result.dtype), result.ok,
                    cat("worst ", fixed(result.worst / result.bound, 3), " of bound"), result.detail});
  }
}

// Every linear layer's shape [out, in]: forward y[M,out] = x[M,in] W^T, backward dx = dy W and
// dW += dy^T x, in the compute dtype (dW in fp32), M = micro-batch x sequence length.
void gemm_rows(Backend& backend, const ModelConfig& model, const TrainConfig& config, int64_t tokens,
               std::vector<Row>& rows) {
  if (backend.device() == Device::CPU) {  // OpenBLAS has no plans to find; the throughput row times it
    rows.push_back({"gemm plans of the model's layers", "", true, "not run: the CPU backend needs no GEMM plans", ""});
    return;
  }
  std::set<std::pair<int64_t, int64_t>> shapes;
  for (const ParamSpec& spec : plan_parameters(model, config.lora).specs)
    if (spec.shape.size() == 2 && spec.name.find("embed_tokens") == std::string::npos)
      shapes.insert({spec.shape[0], spec.shape[1]});
  const DType dtype = config.compute_dtype;
  for (const auto& [out, in] : shapes) {
    Row row{cat("gemm ", tokens, "x", out, " <- ", in), dtype_name(dtype), true, "", ""};
    try {
      Buffer x(backend, static_cast<size_t>(tokens * in) * dtype_size(dtype));
      Buffer w(backend, static_cast<size_t>(out * in) * dtype_size(dtype));
      Buffer y(backend, static_cast<size_t>(tokens * out) * dtype_size(dtype));
      Buffer dw(backend, static_cast<size_t>(out * in) * sizeof(float));
      const Tensor xv = x.view(dtype, {tokens, in}), wv = w.view(dtype, {out, in}), yv = y.view(dtype, {tokens, out});
      for (const Tensor& t : {xv, wv}) backend.fill(t, 0.5f);
      backend.fill(dw.view(DType::F32, {out, in}), 0.0f);
      backend.matmul(yv, xv, false, wv, true, 1.0f, 0.0f);                           // forward
      backend.matmul(xv, yv, false, wv, false, 1.0f, 0.0f);                          // dx = dy W
      backend.matmul(dw.view(DType::F32, {out, in}), yv, true, xv, false, 1.0f, 1.0f);  // dW += dy^T x
      backend.synchronize();
      row.value = "planned and run (forward, dx, dW)";
    } catch (const std::exception& error) {
      row.ok = false;
      row.detail = error.what();
    }
    rows.push_back(row);
  }
}

// nccl-tests' figures: algbw = bytes / time; busbw = algbw x 2(n-1)/n (all-reduce) or (n-1)/n.
void collective_rows(Backend& backend, Communicator& comm, int64_t bytes, std::vector<Row>& rows) {
  const int world = comm.size(), rank = comm.rank();
  const int64_t per_rank = std::max<int64_t>(bytes / 4 / world, 1), n = per_rank * world;  // fp32 elements
  Buffer data(backend, static_cast<size_t>(n) * 4), out(backend, static_cast<size_t>(n) * 4);
  const Tensor all = data.view(DType::F32, {n}), slice = out.view(DType::F32, {per_rank});
  std::vector<float> host(static_cast<size_t>(n));
  const auto upload = [&](float value) {
    std::fill(host.begin(), host.end(), value);
    backend.copy(all, Tensor(host.data(), DType::F32, {n}));
  };
  const auto download = [&](Tensor tensor) {
    std::vector<float> values(static_cast<size_t>(tensor.numel()));
    backend.copy(Tensor(values.data(), DType::F32, {tensor.numel()}), tensor);
    return values;
  };
  const double share = static_cast<double>(world - 1) / world;
  struct Collective {
    const char* name;
    double bus_factor;
    std::function<void()> run;
    std::function<std::string()> check;  // empty when right
  };
  const double sum = world * (world + 1) / 2.0;  // of rank + 1 over the ranks
  const std::vector<Collective> collectives = {
      {"all_reduce", 2 * share, [&] { upload(static_cast<float>(rank + 1)); comm.all_reduce_sum(all); },
       [&]() -> std::string {
         for (float value : download(all))
           if (value != sum) return cat("an element is ", value, ", expected ", sum);
         return "";
       }},
      {"reduce_scatter", share, [&] { upload(static_cast<float>(rank + 1)); comm.reduce_scatter_sum(slice, all); },
       [&]() -> std::string {
         for (float value : download(slice))
           if (value != sum) return cat("an element is ", value, ", expected ", sum);
         return "";
       }},
      {"all_gather", share,
       [&] {
         std::vector<float> mine(static_cast<size_t>(per_rank), static_cast<float>(rank));
         backend.copy(slice, Tensor(mine.data(), DType::F32, {per_rank}));
         comm.all_gather(all, slice);
       },
       [&]() -> std::string {
         const std::vector<float> values = download(all);
         for (int64_t i = 0; i < n; ++i)
           if (values[static_cast<size_t>(i)] != static_cast<float>(i / per_rank))
             return cat("element ", i, " is ", values[static_cast<size_t>(i)], ", expected rank ", i / per_rank, "'s");
         return "";
       }},
  };
  for (const Collective& collective : collectives) {
    Row row{cat(collective.name, " ", format_bytes(n * 4)), "fp32", true, "", ""};
    try {
      collective.run();  // correctness (and warm-up)
      row.detail = collective.check();
      row.ok = row.detail.empty();
      constexpr int kRepeats = 5;
      backend.synchronize();
      comm.barrier();
      const Clock::time_point start = Clock::now();
      for (int i = 0; i < kRepeats; ++i) collective.run();
      backend.synchronize();
      const double seconds = seconds_since(start) / kRepeats;
      const double algbw = static_cast<double>(n) * 4 / seconds / 1e9;
      row.value = cat("busbw ", fixed(algbw * collective.bus_factor, 2), " GB/s (algbw ", fixed(algbw, 2), ")");
    } catch (const std::exception& error) {
      row.ok = false;
      row.detail = error.what();
    }
    rows.push_back(row);
  }
}

void bandwidth_rows(Backend& backend, std::vector<Row>& rows) {
  if (backend.device() == Device::CPU) return;
  constexpr int64_t kBytes = int64_t{64} << 20;
  std::unique_ptr<Backend> host = backend.make_host_backend();
  Buffer pinned(*host, kBytes), device(backend, kBytes);
  const Tensor h = pinned.view(DType::U8, {kBytes}), d = device.view(DType::U8, {kBytes});
  host->fill(h, 0.0f);
  for (const auto& [name, to_device] : {std::pair{"pinned host -> device", true}, std::pair{"device -> pinned host", false}}) {
    Row row{name, "", true, "", ""};
    try {
      // The link's speed: queued copies between pinned memory and the device, timed to their end.
      // (Not copy(): its host -> device uploads of up to 64 MiB go through the pinned staging
      // blocks, a host memcpy first (cuda_host_staging.h), and return before the transfer ends;
      // timing those read 1.69 GB/s on an H200 whose link moved 54 GB/s the other way.)
      backend.copy_async(to_device ? d : h, to_device ? h : d);  // warm-up
      backend.synchronize();
      const Clock::time_point start = Clock::now();
      for (int i = 0; i < 3; ++i) backend.copy_async(to_device ? d : h, to_device ? h : d);
      backend.synchronize();
      row.value = cat(fixed(3.0 * kBytes / seconds_since(start) / 1e9, 2), " GB/s");
    } catch (const std::exception& error) {
      row.ok = false;
      row.detail = error.what();
    }
    rows.push_back(row);
  }
}

void flops_row(Backend& backend, DType dtype, int64_t size, std::vector<Row>& rows) {
  Row row{cat("gemm ", size, "^3 throughput"), dtype_name(dtype), true, "", ""};
  try {
    Buffer a(backend, static_cast<size_t>(size * size) * dtype_size(dtype));
    Buffer b(backend, static_cast<size_t>(size * size) * dtype_size(dtype));
    Buffer c(backend, static_cast<size_t>(size * size) * dtype_size(dtype));
    const Tensor av = a.view(dtype, {size, size}), bv = b.view(dtype, {size, size}), cv = c.view(dtype, {size, size});
    backend.fill(av, 0.25f);
    backend.fill(bv, 0.5f);
    backend.matmul(cv, av, false, bv, false, 1.0f, 0.0f);  // warm-up (plan, clocks)
    backend.synchronize();
    constexpr int kRepeats = 3;
    const Clock::time_point start = Clock::now();
    for (int i = 0; i < kRepeats; ++i) backend.matmul(cv, av, false, bv, false, 1.0f, 0.0f);
    backend.synchronize();
    const double flops = 2.0 * std::pow(static_cast<double>(size), 3) * kRepeats;
    row.value = cat(fixed(flops / seconds_since(start) / 1e12, 3), " TFLOP/s");
  } catch (const std::exception& error) {
    row.ok = false;
    row.detail = error.what();
  }
  rows.push_back(row);
}

// The model's attention (micro-batch x seq, its heads, kv heads and head dim), forward then
// backward, timed once per variant on a GPU (ZT_CUDA_ATTENTION: cuDNN's fused SDPA and our
// tensor-core and CUDA-core kernels; src/backend/cuda/cuda_attention.cu), so that a slow
// fallback shows before the run does. TFLOP/s counts the causal half of the T x T products:
// 4 B H D T^2 / 2 forward, 2.5 times that backward.
void attention_rows(Backend& backend, const ModelConfig& model, DType dtype, int64_t batch, int64_t seq,
                    std::vector<Row>& rows) {
  const int64_t heads = model.num_attention_heads;
  const int64_t kv_heads = model.num_key_value_heads > 0 ? model.num_key_value_heads : heads;
  const int64_t head_dim = model.head_dim > 0 ? model.head_dim : model.hidden_size / heads;
  const bool gpu = backend.device() != Device::CPU;
  const char* previous = std::getenv("ZT_CUDA_ATTENTION");
  const std::string restore = previous ? previous : "";
  const std::vector<std::string> variants = gpu ? std::vector<std::string>{"cudnn", "tensor-cores", "cuda-cores"}
                                                : std::vector<std::string>{""};
  for (const std::string& variant : variants) {
    Row row{cat("attention ", variant.empty() ? "" : variant + " ", batch, "x", seq, " H", heads, "/", kv_heads,
                " D", head_dim, " fwd+bwd"), dtype_name(dtype), true, "", ""};
    try {
      if (gpu) setenv("ZT_CUDA_ATTENTION", variant.c_str(), 1);
      const std::initializer_list<int64_t> q_shape = {batch, seq, heads, head_dim};
      const std::initializer_list<int64_t> kv_shape = {batch, seq, kv_heads, head_dim};
      const size_t q_bytes = static_cast<size_t>(batch * seq * heads * head_dim) * dtype_size(dtype);
      const size_t kv_bytes = static_cast<size_t>(batch * seq * kv_heads * head_dim) * dtype_size(dtype);
      Buffer q(backend, q_bytes), k(backend, kv_bytes), v(backend, kv_bytes), out(backend, q_bytes),
          dout(backend, q_bytes), dq(backend, q_bytes), dk(backend, kv_bytes), dv(backend, kv_bytes),
          lse(backend, static_cast<size_t>(batch * heads * seq) * sizeof(float));
      for (Buffer* input : {&q, &dout}) backend.fill(input->view(dtype, q_shape), 0.01f);
      for (Buffer* input : {&k, &v}) backend.fill(input->view(dtype, kv_shape), 0.02f);
      const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
      const auto pass = [&] {
        backend.attention_forward(out.view(dtype, q_shape), lse.view(DType::F32, {batch, heads, seq}),
                                  q.view(dtype, q_shape), k.view(dtype, kv_shape), v.view(dtype, kv_shape), Tensor(), scale);
        backend.attention_backward(dq.view(dtype, q_shape), dk.view(dtype, kv_shape), dv.view(dtype, kv_shape),
                                   dout.view(dtype, q_shape), q.view(dtype, q_shape), k.view(dtype, kv_shape),
                                   v.view(dtype, kv_shape), out.view(dtype, q_shape),
                                   lse.view(DType::F32, {batch, heads, seq}), Tensor(), scale);
      };
      pass();  // warm-up: graphs, plans, shared-memory opt-in
      backend.synchronize();
      constexpr int kRepeats = 3;
      const Clock::time_point start = Clock::now();
      for (int i = 0; i < kRepeats; ++i) pass();
      backend.synchronize();
      const double flops = 3.5 * 4.0 * static_cast<double>(batch * heads * head_dim) * static_cast<double>(seq * seq) / 2.0;  // NOLINT
      row.value = cat(fixed(flops * kRepeats / seconds_since(start) / 1e12, 2), " TFLOP/s");
    } catch (const std::exception& error) {
      // A case cuDNN does not take is no fault of the allocation (the run falls back to our
      // kernels, as the row says); any other failure is.
      const bool not_taken = std::string(error.what()).find("cuDNN cannot run") != std::string::npos;
      row.ok = not_taken;
      row.value = not_taken ? "not taken by cuDNN: the run uses our kernels" : "";
      row.detail = error.what();
    }
    rows.push_back(row);
  }
  if (gpu) {
    if (previous) setenv("ZT_CUDA_ATTENTION", restore.c_str(), 1);
    else unsetenv("ZT_CUDA_ATTENTION");
  }
}

int64_t host_memory_available() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key, unit;
  int64_t kib = 0;
  while (meminfo >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return 0;
}

void memory_row(Backend& backend, const TrainConfig& config, const ModelConfig& model, int world, int rank,
                int64_t seq_len, std::vector<Row>& rows) {
  Row row{"memory: predicted need vs free", "", true, "", ""};
  try {
    const MemoryTarget target = memory_target_of(backend);
    const MemoryPrediction prediction = predict_memory(config, model, world, rank, seq_len, target);
    const std::optional<DeviceMemory> device_memory = backend.memory();
    // The backend already holds its fixed part; a CPU run's model states are host memory.
    const int64_t free = device_memory ? device_memory->device_free + target.fixed_bytes : host_memory_available();
    const int64_t need = prediction.device_needed() + (device_memory ? 0 : prediction.host_peak);
    row.value = cat(format_bytes(need), " needed, ", format_bytes(free), " free");
    // The limit a rehearsal sets and the chunk ZeRO-3 frees by: what the free figure and the need depend on.
    if (const std::optional<DeviceMemoryLimit> limit = device_memory_limit_setting(); limit && device_memory)
      row.value += cat(" (", limit->source, " ", format_bytes(static_cast<int64_t>(limit->bytes)), ")");
    if (device_memory && device_memory->discard_granularity > 0)
      row.value += cat("; discard chunk ", device_memory->discard_granularity / 1024, " KiB");
    if (need > free) {
      row.ok = false;
      const std::vector<std::string> fits = fitting_memory_choices(config, model, world, seq_len, target, free);
      row.detail = fits.empty() ? std::string("no ZeRO stage / offload / checkpointing choice fits")
                                : cat("choices that fit: ", fits.front(), fits.size() > 1 ? ", ..." : "");
    }
  } catch (const std::exception& error) {
    row.ok = false;
    row.detail = error.what();
  }
  rows.push_back(row);
}

// Rank 0's table: one line per check with the ranks' values (first and last rank's when they
// differ), then every failure with its rank and host.
void print_table(const std::vector<std::string>& per_rank, const std::vector<std::string>& hosts, int world) {
  std::vector<std::string> order;
  std::map<std::string, std::vector<std::pair<int, Row>>> by_check;
  for (int rank = 0; rank < world; ++rank) {
    for (const nlohmann::json& item : nlohmann::json::parse(per_rank[static_cast<size_t>(rank)])) {
      Row row{item["check"], item["dtype"], item["ok"], item["value"], item["detail"]};
      const std::string key = row.check + "|" + row.dtype;
      if (!by_check.count(key)) order.push_back(key);
      by_check[key].push_back({rank, row});
    }
  }
  std::printf("%-44s %-5s %-7s %s\n", "check", "dtype", "result", "rank 0 (and the last rank)");
  int failures = 0;
  for (const std::string& key : order) {
    const auto& entries = by_check[key];
    bool ok = true;
    for (const auto& [rank, row] : entries) ok = ok && row.ok;
    std::string values = entries.front().second.value;
    if (entries.size() > 1 && entries.back().second.value != values) values += " | " + entries.back().second.value;
    std::printf("%-44s %-5s %-7s %s\n", entries.front().second.check.c_str(), entries.front().second.dtype.c_str(),
                ok ? "ok" : "FAILED", values.c_str());
    failures += !ok;
  }
  for (const std::string& key : order)
    for (const auto& [rank, row] : by_check[key])
      if (!row.ok)
        std::printf("FAILED: %s%s on rank %d (host %s): %s\n", row.check.c_str(),
                    row.dtype.empty() ? "" : cat(" (", row.dtype, ")").c_str(), rank,
                    hosts[static_cast<size_t>(rank)].c_str(), row.detail.c_str());
  std::printf("selftest: %s (%d rank%s)\n", failures ? cat(failures, " check(s) FAILED").c_str() : "every check passed",
              world, world == 1 ? "" : "s");
  std::fflush(stdout);
}

}  // namespace

int run_selftest(TrainConfig config, const SelftestOptions& options) {
  std::unique_ptr<Communicator> host_comm = make_mpi_communicator(MPI_COMM_WORLD);
  host_comm->set_timeout(std::chrono::duration<double>(config.comm_timeout_seconds));
  const int world = host_comm->size(), rank = host_comm->rank();
  ZT_CHECK(!config.model_dir.empty(), "--model is required (the GEMM shapes and the memory check come from it)");
  if (config.micro_batch_size == 0 && config.train_batch_size == 0) config.micro_batch_size = 1;
  config.resolve_batch_sizes(world);
  const ModelConfig model = load_model_config(config.model_dir);
  int64_t seq_len = options.seq_len;
  if (seq_len <= 0 && !config.data_dir.empty()) seq_len = TokenDataset::open(config.data_dir).longest_sample();
  if (seq_len <= 0) seq_len = std::min<int64_t>(512, model.max_position_embeddings > 0 ? model.max_position_embeddings : 512);

  RunDevice run_device = set_up_run_device(config.device, config.comm, *host_comm);
  const DeviceChoice& device = run_device.choice;
  const std::string& communicator_reason = run_device.comm_reason;
  std::unique_ptr<Backend> backend = std::move(run_device.backend);
  std::unique_ptr<Communicator> device_comm = std::move(run_device.comm);
  Communicator& comm = device_comm ? *device_comm : *host_comm;
  run_device.control->set_timeout(std::chrono::duration<double>(config.comm_timeout_seconds));
  const bool gpu = backend->device() != Device::CPU;
  if (rank == 0)
    std::printf("selftest: %d rank%s; device %s (%s); communicator %s (%s); model %s, compute %s, micro-batch %lld x "
                "%lld tokens\n",
                world, world == 1 ? "" : "s", device.device.c_str(), device.reason.c_str(), comm.name().c_str(),
                communicator_reason.c_str(), config.model_dir.c_str(), dtype_name(config.compute_dtype),
                static_cast<long long>(config.micro_batch_size), static_cast<long long>(seq_len));

  std::vector<Row> rows;
  op_rows(*backend, rows, config.compute_dtype);
  gemm_rows(*backend, model, config, config.micro_batch_size * seq_len, rows);
  collective_rows(*backend, comm, options.comm_bytes > 0 ? options.comm_bytes : (gpu ? int64_t{8} << 20 : int64_t{1} << 20),
                  rows);
  bandwidth_rows(*backend, rows);
  flops_row(*backend, config.compute_dtype, options.gemm_size > 0 ? options.gemm_size : (gpu ? 4096 : 256), rows);
  attention_rows(*backend, model, config.compute_dtype, config.micro_batch_size, seq_len, rows);
  memory_row(*backend, config, model, world, rank, seq_len, rows);

  nlohmann::json mine = nlohmann::json::array();
  bool ok = true;
  for (const Row& row : rows) {
    mine.push_back(to_json(row));
    ok = ok && row.ok;
  }
  const std::vector<std::string> per_rank = host_comm->all_gather_strings(mine.dump());
  const std::vector<std::string> hosts = host_comm->all_gather_strings(this_host());
  if (rank == 0) print_table(per_rank, hosts, world);
  const bool all_ok = host_comm->all_reduce_max(ok ? 0.0 : 1.0) == 0.0;
  return all_ok ? 0 : 1;
}

}  // namespace zt
