// The CUDA runtime API of the emulated device (the functions of cuda_runtime_api.h the project
// calls), and the emulator's streams, events, errors and environment knobs (emu_internal.h).
//
// Streams execute deferred: work queued on a stream (a kernel, a copy, a memset, a collective)
// runs only when the host waits for it, in stream order. So a host read of a copy's destination
// before the synchronisation sees the old bytes, and a pinned staging buffer reused before its
// copy ran sends the new bytes, as on a GPU that has not got there yet; tests that forget a
// synchronisation fail here instead of passing by luck on a fast GPU.
//
// Errors follow the runtime: a call's own error is returned and kept as the host thread's last
// error (cudaGetLastError); a fault inside queued work (an illegal address, a divergent barrier)
// is sticky: printed once, returned by every later call, as after a GPU's illegal address.
#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

#include <cuda_profiler_api.h>

#include "emu/emu_internal.h"
#include "emu/emu_runtime_memory.h"

namespace zt_emu {

// ---- environment and the device lock -----------------------------------------------------------

namespace {

[[noreturn]] void bad_environment(const char* name, const char* value, const char* expected) {
  std::fprintf(stderr, "zerotune emulated device: %s='%s' is not %s\n", name, value, expected);
  std::abort();
}

// The multiplier of a size suffix ("", "B", "KiB" ... "TiB", any case), 0 when unknown. Only
// binary units: "4GB" would be ambiguous (10^9 or 2^30), so it is refused rather than guessed.
double unit_bytes(std::string unit) {
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (unit.empty() || unit == "b") return 1.0;
  if (unit == "kib") return 1024.0;
  if (unit == "mib") return 1024.0 * 1024.0;
  if (unit == "gib") return 1024.0 * 1024.0 * 1024.0;
  if (unit == "tib") return 1024.0 * 1024.0 * 1024.0 * 1024.0;
  return 0.0;
}

bool verbose() {
  static const bool enabled = env_int("ZT_EMU_VERBOSE", 0) != 0;
  return enabled;
}

}  // namespace

size_t env_bytes(const char* name, size_t fallback) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return fallback;
  const char* expected = "a size: bytes (65536) or a number with KiB, MiB, GiB or TiB (512MiB, 1.5GiB)";
  char* unit = nullptr;
  const double number = std::strtod(value, &unit);
  if (unit == value || !(number >= 0.0)) bad_environment(name, value, expected);
  const double multiplier = unit_bytes(unit);
  if (multiplier == 0.0) bad_environment(name, value, expected);
  const double bytes = number * multiplier;
  if (bytes >= 18446744073709551616.0) bad_environment(name, value, "a size below 2^64 bytes");
  return static_cast<size_t>(bytes);
}

int env_int(const char* name, int fallback) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  const long number = std::strtol(value, &end, 10);
  if (end == value || *end != '\0' || errno != 0 || number < INT32_MIN || number > INT32_MAX)
    bad_environment(name, value, "an integer");
  return static_cast<int>(number);
}

// Never destroyed: queued work and static destructors elsewhere may still use it at exit.
std::recursive_mutex& device_lock() {
  static auto* const lock = new std::recursive_mutex();
  return *lock;
}

// ---- errors ------------------------------------------------------------------------------------

namespace {

// The host thread's last error, as the runtime keeps it per thread. `pending` is what
// cudaGetLastError returns and clears; the code and message stay after it is cleared, because
// callers format an error after clearing it (cuda_check.cpp: cudaGetLastError(), then
// cudaGetErrorString(status)) and should still get this call's message.
struct LastError {
  cudaError_t pending = cudaSuccess;
  cudaError_t code = cudaSuccess;
  std::string message;
};
thread_local LastError last_error;

// The sticky error: set once by the first fault, never cleared (the process's device is lost).
std::atomic<cudaError_t> sticky_code{cudaSuccess};
std::string& sticky_message() {
  static auto* const message = new std::string();
  return *message;
}

void make_sticky(const std::string& message) {
  if (sticky_code.load() != cudaSuccess) {
    if (verbose()) std::fprintf(stderr, "zerotune emulated device: (after the sticky fault) %s\n", message.c_str());
    return;
  }
  sticky_message() = message;
  sticky_code.store(cudaErrorLaunchFailure);
  std::fprintf(stderr, "zerotune emulated device: %s\n", message.c_str());
  std::fflush(stderr);
}

// A call's error: recorded as the last error and returned.
cudaError_t fail(cudaError_t error, std::string message) {
  set_last_error(error, std::move(message));
  return error;
}

struct ErrorText {
  cudaError_t code;
  const char* name;
  const char* text;
};

// The standard names and strings of the codes this emulator returns (as libcudart has them).
constexpr ErrorText kErrorTexts[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInvalidConfiguration, "cudaErrorInvalidConfiguration", "invalid configuration argument"},
    {cudaErrorInvalidMemcpyDirection, "cudaErrorInvalidMemcpyDirection", "invalid copy direction for memcpy"},
    {cudaErrorInvalidDeviceFunction, "cudaErrorInvalidDeviceFunction", "invalid device function"},
    {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {cudaErrorNotReady, "cudaErrorNotReady", "device not ready"},
    {cudaErrorLaunchFailure, "cudaErrorLaunchFailure", "unspecified launch failure"},
    {cudaErrorNotSupported, "cudaErrorNotSupported", "operation not supported"},
    {cudaErrorCudartUnloading, "cudaErrorCudartUnloading", "driver shutting down"},
};

const ErrorText* error_text(cudaError_t error) {
  for (const ErrorText& entry : kErrorTexts)
    if (entry.code == error) return &entry;
  return nullptr;
}

}  // namespace

[[noreturn]] void device_fault(std::string message) { throw DeviceFault{std::move(message)}; }

void set_last_error(cudaError_t error, std::string message) {
  last_error.pending = error;
  last_error.code = error;
  last_error.message = std::move(message);
  if (verbose()) {
    const ErrorText* text = error_text(error);
    std::fprintf(stderr, "zerotune emulated device: %s: %s\n", text ? text->name : "cudaError",
                 last_error.message.c_str());
  }
}

cudaError_t sticky_error() { return sticky_code.load(); }

// ---- kernel attributes ---------------------------------------------------------------------------

namespace {
std::unordered_map<const void*, int>& max_dynamic_shared() {
  static auto* const limits = new std::unordered_map<const void*, int>();
  return *limits;
}
}  // namespace

int max_dynamic_shared_bytes(const void* kernel) {
  std::lock_guard<std::recursive_mutex> lock(device_lock());
  const auto found = max_dynamic_shared().find(kernel);
  return found == max_dynamic_shared().end() ? static_cast<int>(kDefaultSharedBytes) : found->second;
}

void set_max_dynamic_shared_bytes(const void* kernel, int bytes) {
  std::lock_guard<std::recursive_mutex> lock(device_lock());
  max_dynamic_shared()[kernel] = bytes;
}

// ---- streams and events ------------------------------------------------------------------------

namespace {

struct Stream;

// Queued work may run only once `stream` has executed `position` items.
struct Dependency {
  std::shared_ptr<Stream> stream;
  uint64_t position;
};

struct Item {
  Work work;
  std::vector<Dependency> after;  // the legacy stream's implicit orderings, cudaStreamWaitEvent
  bool started = false;           // run() has returned; `done` is polled
};

struct Stream {
  uint64_t id = 0;        // 0: the legacy default stream
  bool blocking = true;   // created without cudaStreamNonBlocking: ordered with the legacy stream
  bool destroyed = false; // its handle is invalid; queued work still runs (as cudaStreamDestroy says)
  bool busy = false;      // its head item is being run further up the call stack
  bool computes = false;  // a kernel, library call or collective was queued on it (enqueue)
  std::deque<Item> queue;
  uint64_t queued = 0;    // items ever queued
  uint64_t executed = 0;  // items run to completion (or discarded after a fault)

  bool legacy() const { return id == 0; }
  bool idle() const { return executed == queued; }
  std::string name() const { return legacy() ? "the legacy default stream" : "stream " + std::to_string(id); }
};

struct Timestamp {
  bool taken = false;
  std::chrono::steady_clock::time_point when;
};

struct Event {
  unsigned flags = 0;
  bool recorded = false;
  std::shared_ptr<Stream> stream;        // of the last cudaEventRecord
  uint64_t position = 0;                 // complete once stream->executed >= position
  std::shared_ptr<Timestamp> timestamp;  // taken when the record's marker runs
};

// Stream and event handles are opaque numbers that are never reused, so a destroyed handle is
// always recognised as destroyed (a reused address would silently name a new stream).
constexpr uintptr_t kStreamHandleBase = 0x5e0000000000;
constexpr uintptr_t kEventHandleBase = 0x5f0000000000;
constexpr uintptr_t kHandleStride = 0x40;

struct Streams {
  std::shared_ptr<Stream> legacy = std::make_shared<Stream>();
  std::unordered_map<uintptr_t, std::shared_ptr<Stream>> live;  // by handle
  std::vector<std::shared_ptr<Stream>> all;  // legacy, live, and destroyed ones with queued work
  std::unordered_map<uintptr_t, Event> events;
  uint64_t next_stream = 1;
  uint64_t next_event = 1;
  size_t next_to_poll = 0;  // round robin over `all` while waiting for a collective

  Streams() { all.push_back(legacy); }
};

// Never destroyed (work may be queued or drained from static destructors at exit).
Streams& streams() {
  static auto* const instance = new Streams();
  return *instance;
}

uintptr_t handle_value(const void* handle) { return reinterpret_cast<uintptr_t>(handle); }

// The stream a handle names; the legacy stream for 0, cudaStreamLegacy and cudaStreamPerThread
// (per-thread default streams are not compiled in; treating it as the legacy stream is the
// stricter ordering); nullptr for an unknown or destroyed handle.
std::shared_ptr<Stream> find_stream(cudaStream_t handle) {
  if (handle == nullptr || handle == cudaStreamLegacy || handle == cudaStreamPerThread) return streams().legacy;
  const auto found = streams().live.find(handle_value(handle));
  return found == streams().live.end() ? nullptr : found->second;
}

Event* find_event(cudaEvent_t handle) {
  const auto found = streams().events.find(handle_value(handle));
  return found == streams().events.end() ? nullptr : &found->second;
}

std::string stream_text(cudaStream_t handle) { return "stream " + pointer_text(handle); }

// Drops destroyed streams whose work has all run.
void forget_finished_streams() {
  auto& all = streams().all;
  std::erase_if(all, [](const std::shared_ptr<Stream>& stream) { return stream->destroyed && stream->idle(); });
}

// Queues `item` on `stream` with the legacy default stream's implicit ordering (CUDA's
// "legacy default stream" semantics): work on the legacy stream waits for all work queued
// before it on blocking streams, and work on a blocking stream waits for all work queued before
// it on the legacy stream; non-blocking streams are ordered with neither. Returns the position
// at which the item is complete.
void run_out_of_order(Stream& pushed);

uint64_t push(Stream& stream, Item item) {
  Streams& state = streams();
  if (stream.legacy()) {
    for (const auto& other : state.all)
      if (!other->legacy() && other->blocking && !other->idle()) item.after.push_back({other, other->queued});
  } else if (stream.blocking && !state.legacy->idle()) {
    item.after.push_back({state.legacy, state.legacy->queued});
  }
  stream.queue.push_back(std::move(item));
  const uint64_t position = ++stream.queued;
  run_out_of_order(stream);
  return position;
}

enum class Mode {
  Wait,    // the host blocks until the work is done (synchronisations, blocking copies)
  NoWait,  // run what can run without waiting for another process (queries, polling)
};

bool advance(Stream& stream, uint64_t target, Mode mode);
bool step(Stream& stream, Mode mode);
bool dependencies_met(const Item& item);

// ---- the streams' schedule (ZT_EMU_STREAMS) -----------------------------------------------------
//
// deferred (the default): queued work runs only when the host waits for it (the file's first
// comment). That catches a host that reads too early, but not a stream that forgot to wait for
// another: when the host finally waits, the other stream's work has usually run already (the
// host waited for it first), so a transfer that ignores its `after` event still copies the
// finished data. A GPU gives no such luck: a side stream starts its copy as soon as it is queued.
// random[:SEED]: after each item is queued, a coin decides whether its stream runs now as far as
// its dependencies allow (eager, as an idle GPU), and another stream chosen at random runs its
// next item if that can run (late work catching up, in an order no program may rely on). Work
// still runs only after what it waits for (stream order, events, the legacy stream's ordering),
// so a correct program computes the same; one that misses a wait between streams reads data
// before or after its producer ran, depending on the seed. Collectives are left to the waits
// (they need the other ranks). Read at every queuing, so a test may set it in-process.

struct StreamSchedule {
  std::string text;  // the value it was made from
  bool random = false;
  std::mt19937_64 coin;
};

StreamSchedule& stream_schedule() {
  constexpr const char* kStreamsExpected = "deferred, random or random:SEED";
  static StreamSchedule schedule;
  const char* value = std::getenv("ZT_EMU_STREAMS");
  const std::string text = value == nullptr ? "" : value;
  if (text == schedule.text) return schedule;
  schedule.text = text;
  schedule.random = false;
  if (text.empty() || text == "deferred") return schedule;
  uint64_t seed = 1;
  if (text.rfind("random:", 0) == 0) {
    char* end = nullptr;
    seed = std::strtoull(text.c_str() + 7, &end, 10);
    if (end == text.c_str() + 7 || *end != '\0') bad_environment("ZT_EMU_STREAMS", value, kStreamsExpected);
  } else if (text != "random") {
    bad_environment("ZT_EMU_STREAMS", value, kStreamsExpected);
  }
  schedule.random = true;
  schedule.coin.seed(seed);
  return schedule;
}

// Runs the head item of `stream` if nothing holds it back (its dependencies have run, it is no
// collective, nothing runs further up the stack); true when it ran.
bool run_ready_head(Stream& stream) {
  if (stream.busy || stream.queue.empty()) return false;
  const Item& head = stream.queue.front();
  if (head.work.done || head.started || !dependencies_met(head)) return false;
  return step(stream, Mode::NoWait);
}

void run_out_of_order(Stream& pushed) {
  StreamSchedule& schedule = stream_schedule();
  if (!schedule.random || sticky_error() != cudaSuccess) return;
  const std::vector<std::shared_ptr<Stream>> all = streams().all;  // stable while work runs
  for (const auto& stream : all)
    if (stream->busy) return;  // queued from inside running work: that work finishes first
  if (schedule.coin() % 2 == 0)
    while (run_ready_head(pushed)) {
    }
  run_ready_head(*all[schedule.coin() % all.size()]);
}

// A fault ends the stream: its remaining work is discarded (a GPU's context is lost after an
// illegal address), so waiters on it go on and return the sticky error.
void discard(Stream& stream) {
  stream.queue.clear();
  stream.executed = stream.queued;
}

bool dependencies_met(const Item& item) {
  for (const Dependency& dependency : item.after)
    if (dependency.stream->executed < dependency.position) return false;
  return true;
}

// While a collective of `waiting` has not completed: runs one item of another stream whose
// head can run now (a GPU runs streams concurrently; two ranks draining their streams in
// different orders would otherwise wait for each other forever). False when none could.
bool run_another_stream(const Stream& waiting) {
  Streams& state = streams();
  const std::vector<std::shared_ptr<Stream>> candidates = state.all;  // stable while work runs
  for (size_t i = 0; i < candidates.size(); ++i) {
    Stream& other = *candidates[(state.next_to_poll + i) % candidates.size()];
    if (&other == &waiting || other.busy || other.queue.empty() || !dependencies_met(other.queue.front())) continue;
    state.next_to_poll = (state.next_to_poll + i + 1) % candidates.size();
    if (advance(other, other.executed + 1, Mode::NoWait)) return true;
  }
  return false;
}

// Polls `item.done` (in Wait mode until it is true, running other streams between polls).
bool wait_until_done(const Stream& stream, Item& item, Mode mode) {
  while (!item.work.done()) {
    if (mode == Mode::NoWait) return false;
    if (sticky_error() != cudaSuccess) return true;  // the device is lost: nothing more completes
    if (!run_another_stream(stream)) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  return true;
}

// Runs the head item of `stream` (after its dependencies); true when it completed.
bool step(Stream& stream, Mode mode) {
  // Busy: this stream's head is being run further up the stack (a wait that reached back to
  // it). The queues are ordered by the time of queuing, so this cannot be a cycle of waits;
  // the caller up the stack finishes the item (and must find it still there).
  if (stream.busy) return false;
  if (sticky_error() != cudaSuccess) {
    discard(stream);
    return true;
  }
  stream.busy = true;
  Item& item = stream.queue.front();  // a reference into a deque stays valid across push_back
  bool completed = false;
  try {
    completed = [&] {
      for (const Dependency& dependency : item.after)
        if (!advance(*dependency.stream, dependency.position, mode)) return false;
      if (sticky_error() != cudaSuccess) return true;
      if (!item.started) {
        if (item.work.run) item.work.run();
        item.started = true;
      }
      return !item.work.done || wait_until_done(stream, item, mode);
    }();
  } catch (const DeviceFault& fault) {
    make_sticky(fault.message);
    completed = true;
  } catch (const std::exception& error) {
    make_sticky(item.work.what + " failed: " + error.what());
    completed = true;
  } catch (...) {
    make_sticky(item.work.what + " failed with an exception that is not a std::exception");
    completed = true;
  }
  stream.busy = false;
  if (!completed) return false;
  if (sticky_error() != cudaSuccess) {
    discard(stream);
  } else {
    stream.queue.pop_front();
    ++stream.executed;
  }
  return true;
}

// Runs `stream` until `target` items have executed; false when that was not reached (NoWait:
// a collective still waits for another process; or the stream is busy up the stack).
bool advance(Stream& stream, uint64_t target, Mode mode) {
  while (stream.executed < target)
    if (!step(stream, mode)) return false;
  return true;
}

// Runs every stream to its end (Mode::Wait) or as far as it can (Mode::NoWait). Repeated while
// it makes progress: a stream may be behind a busy one (when called from queued work) and
// get free once another stream has run.
void advance_all(Mode mode) {
  for (bool progressed = true; progressed;) {
    progressed = false;
    const std::vector<std::shared_ptr<Stream>> all = streams().all;
    for (const auto& stream : all) {
      if (stream->busy || stream->idle()) continue;
      const uint64_t before = stream->executed;
      advance(*stream, stream->queued, mode);
      if (stream->executed != before) progressed = true;
    }
  }
}

}  // namespace

void enqueue(cudaStream_t stream, Work work) {
  std::lock_guard<std::recursive_mutex> lock(device_lock());
  const std::shared_ptr<Stream> target = find_stream(stream);
  if (!target)
    device_fault(stream_text(stream) + " is not a stream of the emulated device (never created, or destroyed)");
  target->computes = true;
  push(*target, Item{std::move(work), {}, false});
}

void drain_all() {
  std::lock_guard<std::recursive_mutex> lock(device_lock());
  advance_all(Mode::Wait);
}

}  // namespace zt_emu

// ---- the CUDA runtime API --------------------------------------------------------------------------

using namespace zt_emu;

namespace {

using Guard = std::lock_guard<std::recursive_mutex>;

constexpr int kMaxDevices = 255;  // two hex digits of the PCI bus id

// The machine's devices (ZT_EMU_DEVICES), and which of them this process sees: as the real
// runtime, CUDA_VISIBLE_DEVICES lists physical indices and the list ends at the first entry that
// is not one (an empty value hides every device). Read once.
const std::vector<int>& visible_devices() {
  static const std::vector<int> visible = [] {
    const int devices = env_int("ZT_EMU_DEVICES", 8);
    if (devices < 0 || devices > kMaxDevices) {
      std::fprintf(stderr, "zerotune emulated device: ZT_EMU_DEVICES=%d is not between 0 and %d\n", devices,
                   kMaxDevices);
      std::abort();
    }
    std::vector<int> list;
    const char* mask = std::getenv("CUDA_VISIBLE_DEVICES");
    if (mask == nullptr) {
      for (int device = 0; device < devices; ++device) list.push_back(device);
      return list;
    }
    std::string text = mask;
    size_t start = 0;
    while (start <= text.size() && !text.empty()) {
      const size_t comma = std::min(text.find(',', start), text.size());
      const std::string item = text.substr(start, comma - start);
      char* end = nullptr;
      const long physical = std::strtol(item.c_str(), &end, 10);
      if (item.empty() || *end != '\0' || physical < 0 || physical >= devices) break;
      list.push_back(static_cast<int>(physical));
      start = comma + 1;
    }
    return list;
  }();
  return visible;
}

int device_count() { return static_cast<int>(visible_devices().size()); }

// The current device is per host thread, as in the runtime.
thread_local int current_device = 0;

cudaError_t invalid_device(const char* call, int device) {
  return fail(cudaErrorInvalidDevice, std::string(call) + ": device " + std::to_string(device) +
                                          " does not exist (the emulated machine has " +
                                          std::to_string(device_count()) + " devices, ZT_EMU_DEVICES)");
}

bool valid_device(int device) { return device >= 0 && device < device_count(); }

// The state after the host waited: the sticky error if the wait hit a fault, else success.
cudaError_t after_wait() { return sticky_error(); }

// ---- copies --------------------------------------------------------------------------------

const char* kind_name(cudaMemcpyKind kind) {
  switch (kind) {
    case cudaMemcpyHostToHost: return "cudaMemcpyHostToHost";
    case cudaMemcpyHostToDevice: return "cudaMemcpyHostToDevice";
    case cudaMemcpyDeviceToHost: return "cudaMemcpyDeviceToHost";
    case cudaMemcpyDeviceToDevice: return "cudaMemcpyDeviceToDevice";
    case cudaMemcpyDefault: return "cudaMemcpyDefault";
  }
  return "an unknown cudaMemcpyKind";
}

// Whether memory of this kind may be the side of a copy that `kind` calls device / host.
// Pinned memory may be either: it is host memory, and under unified addressing the device
// reads and writes it (the driver copies it by DMA whichever way the kind names it).
bool fits_device_side(Memory memory) { return memory == Memory::Device || memory == Memory::Pinned; }
bool fits_host_side(Memory memory) { return memory == Memory::Pageable || memory == Memory::Pinned; }

// Why `kind` contradicts the operands' memory, or empty. cudaMemcpyDefault infers the
// direction from the pointers (unified addressing), so it contradicts nothing.
std::string kind_problem(cudaMemcpyKind kind, Memory dst, Memory src) {
  const bool src_device = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  const bool dst_device = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  if (kind == cudaMemcpyDefault) return "";
  auto problem = [&](const char* side, Memory memory, bool device_side) -> std::string {
    if (device_side ? fits_device_side(memory) : fits_host_side(memory)) return "";
    return std::string(kind_name(kind)) + " names " + side + " " + (device_side ? "device" : "host") +
           " memory, but it points to " + memory_name(memory);
  };
  if (std::string text = problem("the source as", src, src_device); !text.empty()) return text;
  return problem("the destination as", dst, dst_device);
}

// Why an operand cannot take part in a copy, or empty: device and pinned memory must hold the
// bytes; pageable memory is the host's own business (the host copies it).
std::string operand_problem(const void* pointer, Memory memory, size_t bytes, const std::string& what) {
  if (memory == Memory::Pageable) return "";
  return device_access_problem(pointer, bytes, what);
}

struct CopyRequest {
  void* dst;
  const void* src;
  size_t count;
  cudaMemcpyKind kind;
  cudaStream_t stream;
  bool blocking;  // cudaMemcpy: the host waits for the copy (unless device to device)
  const char* call;
};

// The queued part of a copy that reads device-accessible memory: both operands are checked
// again when it runs (one may have been freed since), then copied.
Work device_copy_work(const CopyRequest& request, Memory dst_memory, const std::string& what) {
  void* dst = request.dst;
  const void* src = request.src;
  const size_t count = request.count;
  const bool check_dst = dst_memory != Memory::Pageable;
  return Work{what,
              [=] {
                check_device_accessible(src, count, "the source of " + what);
                if (check_dst) check_device_accessible(dst, count, "the destination of " + what);
                std::memmove(dst, src, count);
              },
              {}};
}

// The queued part of a copy from pageable memory: the source was staged when the call was
// made ("returns once the pageable buffer has been copied to the staging memory"), so later
// host writes to it do not reach the device.
Work staged_copy_work(const CopyRequest& request, const std::string& what) {
  auto staged = std::make_shared<std::vector<std::byte>>(static_cast<const std::byte*>(request.src),
                                                         static_cast<const std::byte*>(request.src) + request.count);
  void* dst = request.dst;
  const size_t count = request.count;
  return Work{what,
              [=] {
                check_device_accessible(dst, count, "the destination of " + what);
                std::memcpy(dst, staged->data(), count);
              },
              {}};
}

// The bytes a copy moves between the host and the device, by direction and by whether its stream
// also runs compute (ZT_EMU_CALL_REPORT's "copy_bytes"): a GPU's compute waits for a copy queued
// among its kernels, not for one on a copy-only stream (tests/emu/test_step_syncs.py).
void count_crossing_bytes(const Stream& stream, Memory dst, Memory src, size_t bytes) {
  const bool to_host = dst != Memory::Device && src == Memory::Device;
  const bool to_device = dst == Memory::Device && src != Memory::Device;
  if (!to_host && !to_device) return;
  const char* direction = to_host ? (stream.computes ? "device to host, on a compute stream" : "device to host, on a copy stream")
                                  : (stream.computes ? "host to device, on a compute stream" : "host to device, on a copy stream");
  count_call("copy_bytes", direction, bytes);
}

cudaError_t copy(const CopyRequest& request) {
  if (const cudaError_t sticky = sticky_error()) return sticky;
  const std::string call = request.call;
  const std::shared_ptr<Stream> stream = find_stream(request.stream);
  if (!stream)
    return fail(cudaErrorInvalidResourceHandle, call + ": " + stream_text(request.stream) + " is not a stream");
  if (request.kind < cudaMemcpyHostToHost || request.kind > cudaMemcpyDefault)
    return fail(cudaErrorInvalidMemcpyDirection,
                call + ": kind " + std::to_string(static_cast<int>(request.kind)) + " is not a cudaMemcpyKind");
  if (request.count == 0) return cudaSuccess;
  const Memory dst_memory = classify(request.dst), src_memory = classify(request.src);
  const std::string what = call + " of " + std::to_string(request.count) + " bytes from " + memory_name(src_memory) +
                           " to " + memory_name(dst_memory) + " (" + kind_name(request.kind) + ")";
  if (std::string problem = kind_problem(request.kind, dst_memory, src_memory); !problem.empty())
    return fail(cudaErrorInvalidValue, call + ": " + problem);
  for (const auto& [pointer, memory, side] :
       {std::tuple{static_cast<const void*>(request.dst), dst_memory, "the destination"},
        std::tuple{request.src, src_memory, "the source"}}) {
    if (std::string problem = operand_problem(pointer, memory, request.count, std::string(side) + " of " + what);
        !problem.empty())
      return fail(cudaErrorInvalidValue, problem);
  }
  // Pageable to pageable: no device involved; the host copies at once.
  if (dst_memory == Memory::Pageable && src_memory == Memory::Pageable) {
    std::memmove(request.dst, request.src, request.count);
    return cudaSuccess;
  }
  count_crossing_bytes(*stream, dst_memory, src_memory, request.count);
  Work work = src_memory == Memory::Pageable ? staged_copy_work(request, what)
                                             : device_copy_work(request, dst_memory, what);
  const uint64_t position = push(*stream, Item{std::move(work), {}, false});
  // Into pageable memory the copy is synchronous, as CUDA documents for cudaMemcpyAsync too:
  // the host's buffer is written before the call returns. A blocking cudaMemcpy waits, except
  // between device buffers: "for transfers from device memory to device memory, no host-side
  // synchronization is performed" (CUDA's API synchronisation rules), so it stays queued on the
  // legacy stream, and work on a non-blocking stream is not ordered after it.
  const bool device_to_device = src_memory == Memory::Device && dst_memory == Memory::Device;
  if ((request.blocking && !device_to_device) || dst_memory == Memory::Pageable) {
    count_host_wait(request.blocking ? request.call : "cudaMemcpyAsync into pageable memory");
    advance(*stream, position, Mode::Wait);
    return after_wait();
  }
  return cudaSuccess;
}

cudaError_t fill(void* dst, int value, size_t count, cudaStream_t stream_handle, const char* call) {
  if (const cudaError_t sticky = sticky_error()) return sticky;
  const std::shared_ptr<Stream> stream = find_stream(stream_handle);
  if (!stream)
    return fail(cudaErrorInvalidResourceHandle,
                std::string(call) + ": " + stream_text(stream_handle) + " is not a stream");
  if (count == 0) return cudaSuccess;
  const std::string what = std::string(call) + " of " + std::to_string(count) + " bytes";
  if (std::string problem = device_access_problem(dst, count, "the destination of " + what); !problem.empty())
    return fail(cudaErrorInvalidValue, problem);
  const Memory memory = classify(dst);
  const auto byte = static_cast<unsigned char>(value);
  Work work{what,
            [=] {
              check_device_accessible(dst, count, "the destination of " + what);
              std::memset(dst, byte, count);
            },
            {}};
  const uint64_t position = push(*stream, Item{std::move(work), {}, false});
  // cudaMemset is asynchronous with the host for device memory (CUDA's API synchronisation
  // rules), but synchronous when the target is pinned host memory: the host may read it next.
  if (std::string(call) == "cudaMemset" && memory == Memory::Pinned) {
    count_host_wait(call);
    advance(*stream, position, Mode::Wait);
    return after_wait();
  }
  return cudaSuccess;
}

// ---- queries ---------------------------------------------------------------------------------

// For cudaEventQuery / cudaStreamQuery: `stream` has reached `target` (cudaSuccess), or it runs
// towards it without waiting for other processes and answers cudaErrorNotReady this once, so
// that a polling loop makes progress and its not-ready path is still exercised.
cudaError_t query(Stream& stream, uint64_t target) {
  if (stream.executed >= target) return cudaSuccess;
  advance(stream, target, Mode::NoWait);
  if (const cudaError_t sticky = sticky_error()) return sticky;
  return cudaErrorNotReady;
}

std::string event_text(cudaEvent_t event) { return "event " + pointer_text(event); }

cudaError_t create_stream(cudaStream_t* handle, unsigned flags, const char* call) {
  if (const cudaError_t sticky = sticky_error()) return sticky;
  if (handle == nullptr) return fail(cudaErrorInvalidValue, std::string(call) + ": pStream is null");
  if ((flags & ~static_cast<unsigned>(cudaStreamNonBlocking)) != 0)
    return fail(cudaErrorInvalidValue, std::string(call) + ": flags " + std::to_string(flags) +
                                           " are not cudaStreamDefault or cudaStreamNonBlocking");
  Streams& state = streams();
  forget_finished_streams();
  auto stream = std::make_shared<Stream>();
  stream->id = state.next_stream++;
  stream->blocking = (flags & cudaStreamNonBlocking) == 0;
  const uintptr_t value = kStreamHandleBase + stream->id * kHandleStride;
  state.live[value] = stream;
  state.all.push_back(stream);
  *handle = reinterpret_cast<cudaStream_t>(value);
  return cudaSuccess;
}

cudaError_t create_event(cudaEvent_t* handle, unsigned flags, const char* call) {
  if (const cudaError_t sticky = sticky_error()) return sticky;
  if (handle == nullptr) return fail(cudaErrorInvalidValue, std::string(call) + ": event is null");
  const unsigned known = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
  if ((flags & ~known) != 0)
    return fail(cudaErrorInvalidValue, std::string(call) + ": unknown flags " + std::to_string(flags));
  Streams& state = streams();
  const uintptr_t value = kEventHandleBase + state.next_event++ * kHandleStride;
  state.events[value].flags = flags;
  *handle = reinterpret_cast<cudaEvent_t>(value);
  return cudaSuccess;
}

}  // namespace

extern "C" {

// ---- errors ----------------------------------------------------------------------------------------

cudaError_t cudaGetLastError(void) {
  Guard lock(device_lock());
  if (const cudaError_t sticky = sticky_error()) return sticky;  // a sticky error is never cleared
  const cudaError_t error = last_error.pending;
  last_error.pending = cudaSuccess;
  return error;
}

cudaError_t cudaPeekAtLastError(void) {
  Guard lock(device_lock());
  if (const cudaError_t sticky = sticky_error()) return sticky;
  return last_error.pending;
}

const char* cudaGetErrorName(cudaError_t error) {
  const ErrorText* text = error_text(error);
  return text ? text->name : "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t error) {
  Guard lock(device_lock());
  if (error == cudaErrorLaunchFailure && sticky_error() == cudaErrorLaunchFailure) return sticky_message().c_str();
  if (error != cudaSuccess && error == last_error.code && !last_error.message.empty())
    return last_error.message.c_str();
  const ErrorText* text = error_text(error);
  return text ? text->text : "unrecognized error code";
}

// ---- devices -------------------------------------------------------------------------------------

cudaError_t cudaGetDeviceCount(int* count) {
  Guard lock(device_lock());
  if (count == nullptr) return fail(cudaErrorInvalidValue, "cudaGetDeviceCount: count is null");
  *count = device_count();
  if (*count == 0) return fail(cudaErrorNoDevice, "no CUDA-capable device is detected (ZT_EMU_DEVICES=0)");
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  Guard lock(device_lock());
  if (const cudaError_t sticky = sticky_error()) return sticky;
  if (!valid_device(device)) return invalid_device("cudaSetDevice", device);
  current_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  Guard lock(device_lock());
  if (const cudaError_t sticky = sticky_error()) return sticky;
  if (device == nullptr) return fail(cudaErrorInvalidValue, "cudaGetDevice: device is null");
  *device = current_device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  Guard lock(device_lock());
  if (const cudaError_t sticky = sticky_error()) return sticky;
  if (prop == nullptr) return fail(cudaErrorInvalidValue, "cudaGetDeviceProperties: prop is null");
  if (!valid_device(device)) return invalid_device("cudaGetDeviceProperties", device);
  std::memset(prop, 0, sizeof(*prop));
  std::snprintf(prop->name, sizeof(prop->name), "zerotune emulated device (sm_90)");
  prop->uuid.bytes[0] = static_cast<char>(device + 1);
  prop->totalGlobalMem = device_capacity();
  prop->sharedMemPerBlock = kDefaultSharedBytes;
  prop->sharedMemPerBlockOptin = kMaxSharedBytesOptin;
  prop->sharedMemPerMultiprocessor = 228 * 1024;
  prop->reservedSharedMemPerBlock = 1024;
  prop->regsPerBlock = 65536;
  prop->regsPerMultiprocessor = 65536;
  prop->warpSize = kWarpSize;
  prop->memPitch = 2147483647;
  prop->maxThreadsPerBlock = kMaxThreadsPerBlock;
  prop->maxThreadsDim[0] = kMaxBlockDimX;
  prop->maxThreadsDim[1] = kMaxBlockDimY;
  prop->maxThreadsDim[2] = kMaxBlockDimZ;
  prop->maxGridSize[0] = static_cast<int>(kMaxGridDimX);
  prop->maxGridSize[1] = static_cast<int>(kMaxGridDimY);
  prop->maxGridSize[2] = static_cast<int>(kMaxGridDimZ);
  prop->totalConstMem = 64 * 1024;
  prop->major = 9;
  prop->minor = 0;
  prop->textureAlignment = 512;
  prop->texturePitchAlignment = 32;
  prop->multiProcessorCount = kMultiprocessors;
  prop->maxThreadsPerMultiProcessor = 2048;
  prop->maxBlocksPerMultiProcessor = 32;
  prop->canMapHostMemory = 1;
  prop->concurrentKernels = 1;
  prop->ECCEnabled = 1;
  prop->pciBusID = device + 1;
  prop->pciDeviceID = 0;
  prop->pciDomainID = 0;
  prop->asyncEngineCount = 2;
  prop->unifiedAddressing = 1;
  prop->memoryBusWidth = 5120;
  prop->l2CacheSize = 50 * 1024 * 1024;
  prop->persistingL2CacheMaxSize = 30 * 1024 * 1024;
  prop->streamPrioritiesSupported = 1;
  prop->globalL1CacheSupported = 1;
  prop->localL1CacheSupported = 1;
  prop->managedMemory = 1;
  prop->computePreemptionSupported = 1;
  prop->cooperativeLaunch = 1;
  prop->hostRegisterSupported = 1;
  prop->memoryPoolsSupported = 1;
  prop->clusterLaunch = 1;
  prop->hostNumaId = -1;
  prop->deviceNumaId = -1;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char* pciBusId, int len, int device) {
  Guard lock(device_lock());
  if (const cudaError_t sticky = sticky_error()) return sticky;
  if (!valid_device(device)) return invalid_device("cudaDeviceGetPCIBusId", device);
  char text[32];
  // The physical device's bus: two ranks that see "device 0" through different
  // CUDA_VISIBLE_DEVICES have different GPUs.
  const int length = std::snprintf(text, sizeof(text), "0000:%02X:00.0", visible_devices()[static_cast<size_t>(device)] + 1);
  if (pciBusId == nullptr || len <= length)
    return fail(cudaErrorInvalidValue, "cudaDeviceGetPCIBusId: the buffer of " + std::to_string(len) +
                                           " chars cannot hold the bus id and its terminating null");
  std::memcpy(pciBusId, text, static_cast<size_t>(length) + 1);
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  Guard lock(device_lock());
  if (const cudaError_t sticky = sticky_error()) return sticky;
  count_host_wait("cudaDeviceSynchronize");
  advance_all(Mode::Wait);
  return after_wait();
}

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  Guard lock(device_lock());
  if (const cudaError_t sticky = sticky_error()) return sticky;
  if (func == nullptr) return fail(cudaErrorInvalidDeviceFunction, "cudaFuncSetAttribute: func is null");
  switch (attr) {
    case cudaFuncAttributeMaxDynamicSharedMemorySize:
      if (value < 0 || static_cast<size_t>(value) > kMaxSharedBytesOptin)
        return fail(cudaErrorInvalidValue,
                    "cudaFuncSetAttribute: " + std::to_string(value) +
                        " bytes of dynamic shared memory (cudaFuncAttributeMaxDynamicSharedMemorySize) are not "
                        "between 0 and the " + std::to_string(kMaxSharedBytesOptin) +
                        " bytes (227 KiB) a block of an sm_90 device can opt in to");
      set_max_dynamic_shared_bytes(func, value);
      return cudaSuccess;
    case cudaFuncAttributePreferredSharedMemoryCarveout:
      // A performance hint the emulator has no use for; the range is the driver's.
      if (value < -1 || value > 100)
        return fail(cudaErrorInvalidValue, "cudaFuncSetAttribute: a shared memory carveout of " +
                                               std::to_string(value) + " is not -1 or a percentage");
      return cudaSuccess;
    default:
      return fail(cudaErrorInvalidValue, "cudaFuncSetAttribute: attribute " + std::to_string(static_cast<int>(attr)) +
                                             " is not supported by the emulated device");
  }
}

// ---- memory --------------------------------------------------------------------------------------

cudaError_t cudaMalloc(void** devPtr, size_t size) {
  Guard lock(device_lock());
  if (const cudaError_t sticky = sticky_error()) return sticky;
  if (devPtr == nullptr) return fail(cudaErrorInvalidValue, "cudaMalloc: devPtr is null");
  *devPtr = nullptr;
  if (size == 0) return cudaSuccess;  // as the runtime: success, and a null pointer
  std::string problem;
  void* pointer = allocate_device(size, current_device, &problem);
  // Recorded as the last error too, as the runtime does: a caller that handles the failure
  // must clear it (cudaGetLastError) or the next launch check reports it.
  if (pointer == nullptr) return fail(cudaErrorMemoryAllocation, "cudaMalloc: " + problem);
  *devPtr = pointer;
  return cudaSuccess;
}

cudaError_t cudaFree(void* devPtr) {
  Guard lock(device_lock());
  if (const cudaError_t sticky = sticky_error()) return sticky;
  // cudaFree synchronises the device: queued work that uses the memory runs first.
  count_host_wait("cudaFree");
  advance_all(Mode::Wait);
  if (const cudaError_t sticky = sticky_error()) return sticky;
  if (devPtr == nullptr) return cudaSuccess;
  if (!release_device(devPtr))
    return fail(cudaErrorInvalidValue, "cudaFree(" + pointer_text(devPtr) + "): the pointer is not the base of a "
                                           "live cudaMalloc allocation (it points to " +
                                           memory_name(classify(devPtr)) + ")");
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** pHost, size_t size, unsigned int flags) {
  Guard lock(device_lock());
  if (const cudaError_t sticky = sticky_error()) return sticky;
  if (pHost == nullptr) return fail(cudaErrorInvalidValue, "cudaHostAlloc: pHost is null");
  *pHost = nullptr;
  const unsigned known = cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined;
  if ((flags & ~known) != 0)
    return fail(cudaErrorInvalidValue, "cudaHostAlloc: unknown flags " + std::to_string(flags));
  void* pointer = allocate_pinned(size, (flags & cudaHostAllocMapped) != 0);
  if (pointer == nullptr)
    return fail(cudaErrorMemoryAllocation, "cudaHostAlloc: the host cannot allocate " + std::to_string(size) +
                                               " bytes of pinned memory");
  *pHost = pointer;
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** ptr, size_t size) { return cudaHostAlloc(ptr, size, cudaHostAllocDefault); }

cudaError_t cudaFreeHost(void* ptr) {
  Guard lock(device_lock());
  if (const cudaError_t sticky = sticky_error()) return sticky;
  count_host_wait("cudaFreeHost");
  advance_all(Mode::Wait);  // synchronises the device, as cudaFree
  if (const cudaError_t sticky = sticky_error()) return sticky;
  if (ptr == nullptr) return cudaSuccess;
  if (!release_pinned(ptr))
    return fail(cudaErrorInvalidValue, "cudaFreeHost(" + pointer_text(ptr) + "): the pointer is not the base of a "
                                           "live cudaHostAlloc/cudaMallocHost allocation (it points to " +
                                           memory_name(classify(ptr)) + ")");
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  Guard lock(device_lock());
  if (const cudaError_t sticky = sticky_error()) return sticky;
  if (free == nullptr || total == nullptr) return fail(cudaErrorInvalidValue, "cudaMemGetInfo: a null argument");
  *total = device_capacity();
  *free = *total - device_used();
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* ptr) {
  Guard lock(device_lock());
  if (const cudaError_t sticky = sticky_error()) return sticky;
  if (attributes == nullptr) return fail(cudaErrorInvalidValue, "cudaPointerGetAttributes: attributes is null");
  std::memset(attributes, 0, sizeof(*attributes));
  switch (classify(ptr)) {
    case Memory::Device:
      attributes->type = cudaMemoryTypeDevice;
      attributes->device = allocation_device(ptr);
      attributes->devicePointer = const_cast<void*>(ptr);
      break;
    case Memory::Pinned:
      attributes->type = cudaMemoryTypeHost;
      attributes->device = current_device;
      attributes->devicePointer = const_cast<void*>(ptr);
      attributes->hostPointer = const_cast<void*>(ptr);
      break;
    default:  // CUDA >= 11: memory the runtime does not know is "unregistered", not an error
      attributes->type = cudaMemoryTypeUnregistered;
      attributes->device = cudaInvalidDeviceId;
      break;
  }
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  Guard lock(device_lock());
  // On the legacy stream, and the host waits for it (not for non-blocking streams: their
  // unsynchronised work stays queued, as on a GPU).
  return copy({dst, src, count, kind, nullptr, true, "cudaMemcpy"});
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t stream) {
  Guard lock(device_lock());
  return copy({dst, src, count, kind, stream, false, "cudaMemcpyAsync"});
}

cudaError_t cudaMemset(void* devPtr, int value, size_t count) {
  Guard lock(device_lock());
  return fill(devPtr, value, count, nullptr, "cudaMemset");
}

cudaError_t cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t stream) {
  Guard lock(device_lock());
  return fill(devPtr, value, count, stream, "cudaMemsetAsync");
}

// ---- streams -------------------------------------------------------------------------------------

cudaError_t cudaStreamCreate(cudaStream_t* pStream) {
  Guard lock(device_lock());
  return create_stream(pStream, cudaStreamDefault, "cudaStreamCreate");
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* pStream, unsigned int flags) {
  Guard lock(device_lock());
  return create_stream(pStream, flags, "cudaStreamCreateWithFlags");
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  Guard lock(device_lock());
  if (const cudaError_t sticky = sticky_error()) return sticky;
  const auto found = streams().live.find(handle_value(stream));
  if (found == streams().live.end())
    return fail(cudaErrorInvalidResourceHandle,
                "cudaStreamDestroy: " + stream_text(stream) + " is not a stream (the legacy default stream cannot "
                                                              "be destroyed; a destroyed one cannot be again)");
  // Its queued work still runs when something waits for it (cudaStreamDestroy returns at once
  // and the resources are released once the device has completed the work).
  found->second->destroyed = true;
  streams().live.erase(found);
  forget_finished_streams();
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  Guard lock(device_lock());
  if (const cudaError_t sticky = sticky_error()) return sticky;
  const std::shared_ptr<Stream> target = find_stream(stream);
  if (!target)
    return fail(cudaErrorInvalidResourceHandle, "cudaStreamSynchronize: " + stream_text(stream) + " is not a stream");
  if (target->executed < target->queued) count_host_wait("cudaStreamSynchronize");  // work left: a real wait
  advance(*target, target->queued, Mode::Wait);
  return after_wait();
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  // Only tried: a watchdog thread must not block behind a drain waiting for another rank.
  std::unique_lock<std::recursive_mutex> lock(device_lock(), std::try_to_lock);
  if (!lock.owns_lock()) return cudaErrorNotReady;
  if (const cudaError_t sticky = sticky_error()) return sticky;
  const std::shared_ptr<Stream> target = find_stream(stream);
  if (!target)
    return fail(cudaErrorInvalidResourceHandle, "cudaStreamQuery: " + stream_text(stream) + " is not a stream");
  return query(*target, target->queued);
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  Guard lock(device_lock());
  if (const cudaError_t sticky = sticky_error()) return sticky;
  const std::shared_ptr<Stream> target = find_stream(stream);
  if (!target)
    return fail(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent: " + stream_text(stream) + " is not a stream");
  const Event* waited = find_event(event);
  if (waited == nullptr)
    return fail(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent: " + event_text(event) + " is not an event");
  if (flags != 0) return fail(cudaErrorInvalidValue, "cudaStreamWaitEvent: flags must be 0 (cudaEventWaitDefault)");
  if (!waited->recorded) return cudaSuccess;  // never recorded: nothing to wait for, as CUDA says
  // The wait is for the event's record at the time of this call: a later record of the same
  // event does not move it.
  Item wait{Work{"cudaStreamWaitEvent(" + target->name() + ", " + event_text(event) + ")", {}, {}},
            {Dependency{waited->stream, waited->position}},
            false};
  push(*target, std::move(wait));
  return cudaSuccess;
}

// ---- events --------------------------------------------------------------------------------------

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  Guard lock(device_lock());
  return create_event(event, cudaEventDefault, "cudaEventCreate");
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  Guard lock(device_lock());
  return create_event(event, flags, "cudaEventCreateWithFlags");
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  Guard lock(device_lock());
  if (const cudaError_t sticky = sticky_error()) return sticky;
  // A pending record needs nothing of the event: its marker holds its own timestamp.
  if (streams().events.erase(handle_value(event)) == 0)
    return fail(cudaErrorInvalidResourceHandle, "cudaEventDestroy: " + event_text(event) + " is not an event");
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  Guard lock(device_lock());
  if (const cudaError_t sticky = sticky_error()) return sticky;
  Event* recorded = find_event(event);
  if (recorded == nullptr)
    return fail(cudaErrorInvalidResourceHandle, "cudaEventRecord: " + event_text(event) + " is not an event");
  const std::shared_ptr<Stream> target = find_stream(stream);
  if (!target)
    return fail(cudaErrorInvalidResourceHandle, "cudaEventRecord: " + stream_text(stream) + " is not a stream");
  // A marker item: it completes when everything queued before it on the stream has (and, on
  // the legacy stream, the blocking streams' earlier work), and takes the time for
  // cudaEventElapsedTime.
  auto timestamp = std::make_shared<Timestamp>();
  Work marker{"cudaEventRecord(" + event_text(event) + ", " + target->name() + ")",
              [timestamp] {
                timestamp->when = std::chrono::steady_clock::now();
                timestamp->taken = true;
              },
              {}};
  recorded->position = push(*target, Item{std::move(marker), {}, false});
  recorded->stream = target;
  recorded->timestamp = std::move(timestamp);
  recorded->recorded = true;
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  std::unique_lock<std::recursive_mutex> lock(device_lock(), std::try_to_lock);
  if (!lock.owns_lock()) return cudaErrorNotReady;
  if (const cudaError_t sticky = sticky_error()) return sticky;
  const Event* queried = find_event(event);
  if (queried == nullptr)
    return fail(cudaErrorInvalidResourceHandle, "cudaEventQuery: " + event_text(event) + " is not an event");
  if (!queried->recorded) return cudaSuccess;  // nothing recorded: complete, as CUDA says
  const std::shared_ptr<Stream> stream = queried->stream;  // the query may run work: keep it
  return query(*stream, queried->position);
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  Guard lock(device_lock());
  if (const cudaError_t sticky = sticky_error()) return sticky;
  const Event* waited = find_event(event);
  if (waited == nullptr)
    return fail(cudaErrorInvalidResourceHandle, "cudaEventSynchronize: " + event_text(event) + " is not an event");
  if (!waited->recorded) return cudaSuccess;
  const std::shared_ptr<Stream> stream = waited->stream;
  if (stream->executed < waited->position) count_host_wait("cudaEventSynchronize");  // not complete yet: a real wait
  advance(*stream, waited->position, Mode::Wait);
  return after_wait();
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  Guard lock(device_lock());
  if (const cudaError_t sticky = sticky_error()) return sticky;
  if (ms == nullptr) return fail(cudaErrorInvalidValue, "cudaEventElapsedTime: ms is null");
  const Event* first = find_event(start);
  const Event* last = find_event(end);
  if (first == nullptr || last == nullptr)
    return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: " + event_text(first ? end : start) +
                                                    " is not an event");
  if (((first->flags | last->flags) & cudaEventDisableTiming) != 0)
    return fail(cudaErrorInvalidResourceHandle,
                "cudaEventElapsedTime: an event created with cudaEventDisableTiming has no time");
  if (!first->recorded || !last->recorded)
    return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: an event was never recorded");
  // Not an error worth recording: the events' work has not run yet.
  if (!first->timestamp->taken || !last->timestamp->taken) return cudaErrorNotReady;
  // Wall-clock time between the markers' execution: meaningless as a GPU timing, but ordered.
  *ms = std::chrono::duration<float, std::milli>(last->timestamp->when - first->timestamp->when).count();
  return cudaSuccess;
}

// ---- profiler capture ranges -----------------------------------------------------------------------

// What Nsight records between these calls, the emulator counts apart ("captured <category>" in
// ZT_EMU_CALL_REPORT), so that a test can hold the steps between them to a budget of host waits.
cudaError_t cudaProfilerStart(void) {
  Guard lock(device_lock());
  if (const cudaError_t sticky = sticky_error()) return sticky;
  set_capturing(true);
  return cudaSuccess;
}

cudaError_t cudaProfilerStop(void) {
  Guard lock(device_lock());
  if (const cudaError_t sticky = sticky_error()) return sticky;
  set_capturing(false);
  return cudaSuccess;
}

}  // extern "C"
