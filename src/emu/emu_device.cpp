// Kernel execution on the emulated device: launch checks as the driver makes them, then each
// block's threads as fibers (Boost.Context's fcontext, on pooled stacks with a guard page)
// that a seeded schedule interleaves at every barrier and warp operation. The checks a GPU
// or compute-sanitizer would make at run time stop the grid with a message naming every
// thread's file:line:
//   - __syncthreads reached at different places by threads of one block (divergent barrier),
//     and threads that exit while others wait at a barrier;
//   - warp operations (shuffles, votes, __syncwarp) whose mask does not include the caller,
//     names lanes that do not exist or have exited, reads a lane outside the mask, or that
//     lanes of one mask reach with different operations;
//   - kernel pointer arguments to pageable host memory or freed device memory;
//   - static shared memory above 48 KiB, static + dynamic above 227 KiB.
// Shared memory is poisoned (0xFF bytes: NaN) before each block, so a read before the write
// that a barrier should have ordered reads NaN. With ZT_EMU_ASAN the fibers' stack switches are
// announced to AddressSanitizer; with ZT_EMU_TSAN each emulated thread is a ThreadSanitizer
// fiber and barriers are its only happens-before edges (shuffles are not: CUDA does not order
// memory between lanes without __syncwarp), so a missing __syncwarp is a reported race.
// This file itself is compiled without instrumentation: its bookkeeping is not the kernel's.
#include "emu/emu_device.h"

#include <sys/mman.h>

#include <array>
#include <atomic>
#include <algorithm>
#include <boost/context/detail/fcontext.hpp>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>

#include "emu/emu_internal.h"

#if ZT_EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#if ZT_EMU_TSAN
#include <sanitizer/tsan_interface.h>
extern "C" void __tsan_ignore_thread_begin();  // libtsan's, not in its public header
extern "C" void __tsan_ignore_thread_end();
#endif

namespace zt_emu {

namespace {
// The emulator's own record of a warp's pending operations (Block::pending_), written by each
// lane's fiber as it arrives. A block's fibers take turns on one OS thread, so these accesses are
// ordered; but fibers switch without synchronisation (no_sync: so that TSan finds races between
// a kernel's threads), so TSan cannot see that order and reported the record's own moves (erasing
// one of two pending operations moves the other) as a race. Within this scope a fiber's accesses
// are not recorded; its synchronisation (the warp tokens) still is. Nothing in it may yield.
struct BookkeepingScope {
#if ZT_EMU_TSAN
  BookkeepingScope() { __tsan_ignore_thread_begin(); }
  ~BookkeepingScope() { __tsan_ignore_thread_end(); }
#else
  BookkeepingScope() = default;
#endif
  BookkeepingScope(const BookkeepingScope&) = delete;
  BookkeepingScope& operator=(const BookkeepingScope&) = delete;
};
}  // namespace

namespace fcontext = boost::context::detail;

thread_local ThreadContext* current_thread = nullptr;

void used_outside_a_kernel() {
  std::fprintf(stderr, "zerotune emulated device: a device built-in (threadIdx, __syncthreads, "
                       "a shuffle ...) was used outside a kernel\n");
  std::abort();
}

namespace {

// ---- the schedule ---------------------------------------------------------------------------

enum class Schedule { InOrder, WarpSerial, Reversed, Random };

struct ScheduleChoice {
  Schedule kind = Schedule::InOrder;
  uint64_t seed = 1;
};

// ZT_EMU_SCHEDULE: in-order (default), warp-serial, reversed, random or random:SEED.
ScheduleChoice schedule_from_environment() {
  ScheduleChoice choice;
  const char* text = std::getenv("ZT_EMU_SCHEDULE");
  if (text == nullptr || *text == '\0') return choice;
  const std::string value = text;
  if (value == "in-order") return choice;
  if (value == "warp-serial") return {Schedule::WarpSerial, 1};
  if (value == "reversed") return {Schedule::Reversed, 1};
  if (value == "random") return {Schedule::Random, 1};
  if (value.rfind("random:", 0) == 0) {
    char* end = nullptr;
    const unsigned long long seed = std::strtoull(value.c_str() + 7, &end, 10);
    if (end != value.c_str() + 7 && *end == '\0') return {Schedule::Random, seed};
  }
  std::fprintf(stderr, "zerotune emulated device: ZT_EMU_SCHEDULE=%s is not one of in-order, "
                       "warp-serial, reversed, random, random:SEED\n", text);
  std::exit(2);
}

const ScheduleChoice& schedule() {
  static const ScheduleChoice choice = schedule_from_environment();
  return choice;
}

// A knob of two values: false for `off` (the default, also when unset or empty), true for `on`;
// anything else stops the process naming both.
bool two_way_choice_from_environment(const char* name, const char* off, const char* on) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0' || std::string(text) == off) return false;
  if (std::string(text) == on) return true;
  std::fprintf(stderr, "zerotune emulated device: %s=%s is not one of %s, %s\n", name, text, off, on);
  std::exit(2);
}

// ZT_EMU_ASYNC_COPIES: when a cp.async copy lands, at-wait (default) or at-issue: the latest and
// the earliest moment the PTX ISA allows. At its wait, a read before the wait (or before the
// barrier after another thread's wait) sees the poison; at its issue, a copy into memory that
// another thread still reads (a buffer refilled before the barrier that ends its readers' use)
// changes what that thread reads. A kernel right on a GPU is right under both.
bool copies_at_issue() {
  static const bool at_issue = two_way_choice_from_environment("ZT_EMU_ASYNC_COPIES", "at-wait", "at-issue");
  return at_issue;
}

// ---- fiber stacks ---------------------------------------------------------------------------

// Kernels keep small arrays in registers on a GPU; here they are on the fiber's stack, and
// AddressSanitizer's red zones make frames larger: 256 KiB each, only touched pages are real.
constexpr size_t kStackBytes = 256 * 1024;
constexpr size_t kGuardBytes = 4096;

// Stacks live for the process and are reused by every block (mmap per block would dominate).
// The lowest page is a guard: a kernel that overflows its stack faults instead of writing
// into another thread's stack.
class StackPool {
 public:
  char* take() {
    if (!free_.empty()) {
      char* stack = free_.back();
      free_.pop_back();
      return stack;
    }
    void* memory = mmap(nullptr, kStackBytes + kGuardBytes, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (memory == MAP_FAILED) {
      std::fprintf(stderr, "zerotune emulated device: cannot map a fiber stack\n");
      std::abort();
    }
    mprotect(memory, kGuardBytes, PROT_NONE);
    return static_cast<char*>(memory) + kGuardBytes;  // usable [stack, stack + kStackBytes)
  }
  void give_back(char* stack) { free_.push_back(stack); }

 private:
  std::vector<char*> free_;
};

StackPool& stack_pool() {
  static thread_local StackPool pool;
  return pool;
}

#if ZT_EMU_TSAN
// ThreadSanitizer fibers are reused like the stacks: creating and destroying one per thread per
// block costs system calls that made TSan runs of large grids take minutes.
std::vector<void*>& tsan_fiber_pool() {
  static thread_local std::vector<void*> pool;
  return pool;
}
void* take_tsan_fiber() {
  std::vector<void*>& pool = tsan_fiber_pool();
  if (pool.empty()) return __tsan_create_fiber(0);
  void* fiber = pool.back();
  pool.pop_back();
  return fiber;
}
#endif

// ---- threads and blocks ---------------------------------------------------------------------

enum class State { Runnable, AtBarrier, AtWarpOperation, Exited, Faulted };

// A cp.async copy a thread has issued and not yet completed.
struct AsyncCopy {
  void* target;
  const void* source;
  bool done;  // copied at issue (ZT_EMU_ASYNC_COPIES=at-issue)
};

struct EmuThread {
  ThreadContext context;
  std::vector<AsyncCopy> open_copies;               // issued since the last commit
  std::deque<std::vector<AsyncCopy>> copy_groups;   // committed, oldest first
  uint64_t exchanges = 0;                           // warp_exchange calls so far (buffer parity)
  const char* last_copy_file = "";                  // its last cp.async, for a fault at exit
  int last_copy_line = 0;
  fcontext::fcontext_t fiber = nullptr;      // where the fiber resumes
  fcontext::fcontext_t scheduler = nullptr;  // where it returns to
  char* stack = nullptr;
  State state = State::Runnable;
  const char* waiting_at = "";  // the barrier or warp operation it waits at
  const char* file = "";
  int line = 0;
  uint64_t warp_result = 0;
  void* tsan_fiber = nullptr;
};

// A warp operation some lanes of `mask` have reached; the others are awaited.
struct PendingWarpOperation {
  WarpOpKind kind;
  const char* name;
  unsigned mask;
  unsigned arrived = 0;
  uint64_t values[32] = {};
  int sources[32] = {};
};

struct StaticShared {
  const void* declaration;
  void* memory;
  size_t bytes;
};

std::string site_text(const char* file, int line) {
  const char* slash = std::strrchr(file, '/');
  return std::string(slash ? slash + 1 : file) + ":" + std::to_string(line);
}

}  // namespace

// The threads of a block that can run, as a list with each member's slot in it: adding, removing
// and picking one at random are O(1). The random schedule picks from it; scanning the threads for
// a runnable one instead costs O(block size) per pick once most threads wait at a barrier, which
// made the scheduler a quarter of an emulated training run's time.
class RunnableSet {
 public:
  void reset_all(int count) {
    members_.resize(static_cast<size_t>(count));
    slots_.resize(static_cast<size_t>(count));
    for (size_t linear = 0; linear < members_.size(); ++linear)
      members_[linear] = slots_[linear] = static_cast<int>(linear);
  }
  void add(int linear) {
    if (slots_[static_cast<size_t>(linear)] >= 0) return;
    slots_[static_cast<size_t>(linear)] = static_cast<int>(members_.size());
    members_.push_back(linear);
  }
  void remove(int linear) {
    const int slot = slots_[static_cast<size_t>(linear)];
    if (slot < 0) return;
    const int last = members_.back();
    members_[static_cast<size_t>(slot)] = last;
    slots_[static_cast<size_t>(last)] = slot;
    members_.pop_back();
    slots_[static_cast<size_t>(linear)] = -1;
  }
  bool empty() const { return members_.empty(); }
  // `random` uniform over 64 bits -> a member, by the high half of a 64x64-bit product (no division).
  int pick(uint64_t random) const {
    const auto index = static_cast<size_t>((static_cast<unsigned __int128>(random) * members_.size()) >> 64);
    return members_[index];
  }

 private:
  std::vector<int> members_;  // the runnable threads' linear indices, in no particular order
  std::vector<int> slots_;    // per thread: its index in members_, or -1
};

// One block of a grid being run: its threads, shared memory, barrier and pending warp
// operations. The threads vector and the stacks are reused from block to block.
class Block {
 public:
  Block(LaunchSite site, dim3 grid, dim3 block, size_t dynamic_bytes, std::function<void()>* body)
      : site_(site), grid_(grid), block_dim_(block), dynamic_bytes_(dynamic_bytes), body_(body) {
    const int count = static_cast<int>(block.x * block.y * block.z);
    threads_.resize(count);
    for (EmuThread& thread : threads_) {
      thread.stack = stack_pool().take();
#if ZT_EMU_TSAN
      thread.tsan_fiber = take_tsan_fiber();
#endif
    }
    warps_ = (count + kWarpSize - 1) / kWarpSize;
    pending_.resize(warps_);
    for (auto& warp : pending_) warp.reserve(2);
    exited_lanes_.assign(warps_, 0);
    syncwarp_generation_.assign(warps_, 0);
    exchange_.resize(warps_);
  }
  ~Block() {
    for (EmuThread& thread : threads_) {
#if ZT_EMU_ASAN
      // An abandoned fiber (after a fault) leaves its frames' poison on the stack.
      if (thread.state != State::Exited) ASAN_UNPOISON_MEMORY_REGION(thread.stack, kStackBytes);
#endif
      stack_pool().give_back(thread.stack);
#if ZT_EMU_TSAN
      tsan_fiber_pool().push_back(thread.tsan_fiber);
#endif
    }
  }
  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;

  // Runs block `index` to completion; a fault is thrown as a DeviceFault after clean-up.
  void run(uint3 index);

  // Called on the running fiber.
  void arrive_at_barrier(EmuThread& thread, const char* file, int line);
  uint64_t warp_operation(EmuThread& thread, WarpOpKind kind, const char* name, unsigned mask,
                          uint64_t value, int source_lane, const char* file, int line);
  void complete_if_ready(int warp, size_t index, EmuThread& reporter);
  std::string complete_operation(int warp, size_t index);
  void* dynamic_shared() { return dynamic_shared_; }
  unsigned char* exchange_buffer(int warp, uint64_t parity) { return exchange_[warp].bytes[parity % 2]; }
  std::optional<size_t> find_shared(const void* pointer, size_t bytes) const;
  bool holds_shared(const void* pointer, size_t bytes) const;
  size_t shared_offset(const void* pointer) const;
  void* static_shared(size_t bytes, size_t alignment, const void* declaration, const char* name,
                      const char* file, int line);
  EmuThread& thread_of(const ThreadContext& context) { return threads_[context.linear]; }
  [[noreturn]] void fault_on_fiber(EmuThread& thread, std::string message);
  // The fiber's whole life: the kernel, then back to the scheduler for good.
  [[noreturn]] void thread_main(EmuThread& thread);

 private:
  void start_threads(uint3 index);
  int pick_next(int previous);
  // Every change of a thread's state goes through here, which keeps runnable_ in step.
  void set_state(EmuThread& thread, State state);
  void resume(EmuThread& thread);
  void yield(EmuThread& thread);
  void check_barrier_sites();
  std::string describe_threads() const;
  std::string block_text() const;
  void release_shared_memory();

  LaunchSite site_;
  dim3 grid_;
  dim3 block_dim_;
  uint3 index_{};
  size_t dynamic_bytes_;
  std::function<void()>* body_;
  std::vector<EmuThread> threads_;
  RunnableSet runnable_;
  int warps_ = 0;
  int live_ = 0;  // threads not exited
  int at_barrier_ = 0;
  uint64_t barrier_generation_ = 0;
  std::vector<std::vector<PendingWarpOperation>> pending_;  // per warp
  std::vector<unsigned> exited_lanes_;                       // per warp: lanes that returned
  std::vector<uint64_t> syncwarp_generation_;
  // Per warp: the two buffers of warp_exchange (mma's and ldmatrix's register exchange).
  struct alignas(16) ExchangeBuffers {
    unsigned char bytes[2][kWarpSize * kExchangeBytes];
  };
  std::vector<ExchangeBuffers> exchange_;
  void* dynamic_shared_ = nullptr;
  std::vector<StaticShared> static_shared_;
  size_t static_bytes_ = 0;
  std::string fault_;
  // The random schedule's generator (xorshift64*: one pick per fiber switch must cost less than
  // the switch; the schedule needs variety, not statistical quality).
  struct XorShift64Star {
    uint64_t state = 1;
    void seed(uint64_t value) { state = value != 0 ? value : 0x9E3779B97F4A7C15ull; }
    uint64_t operator()() {
      state ^= state >> 12;
      state ^= state << 25;
      state ^= state >> 27;
      return state * 0x2545F4914F6CDD1Dull;
    }
  } random_;
  int cursor_ = -1;
  // ThreadSanitizer happens-before tokens: barrier generations alternate between two, so a
  // thread that leaves barrier g late never acquires what a fast thread released at g + 1.
  char barrier_token_[2] = {};
  std::vector<char> warp_tokens_ = std::vector<char>(64);
  void* scheduler_tsan_fiber_ = nullptr;
  const void* scheduler_stack_bottom_ = nullptr;
  size_t scheduler_stack_size_ = 0;
};

namespace {

void fiber_entry(fcontext::transfer_t transfer);

}  // namespace

// ---- running a block ---------------------------------------------------------------------------

std::string Block::block_text() const {
  std::ostringstream text;
  text << "block (" << index_.x << "," << index_.y << "," << index_.z << ") of the kernel launched at "
       << site_text(site_.file, static_cast<int>(site_.line)) << " (grid " << grid_.x << "x" << grid_.y
       << "x" << grid_.z << ", block " << block_dim_.x << "x" << block_dim_.y << "x" << block_dim_.z
       << ")";
  return text.str();
}

void Block::start_threads(uint3 index) {
  index_ = index;
  live_ = static_cast<int>(threads_.size());
  at_barrier_ = 0;
  fault_.clear();
  for (auto& warp : pending_) warp.clear();
  std::fill(exited_lanes_.begin(), exited_lanes_.end(), 0u);
  // Poisoned, so that reading shared memory nobody wrote (or that a missing barrier leaves
  // unwritten) gives NaN. Exactly the requested bytes: AddressSanitizer sees any overflow.
  dynamic_shared_ = std::malloc(dynamic_bytes_);
  if (dynamic_bytes_ > 0) std::memset(dynamic_shared_, 0xFF, dynamic_bytes_);
  for (int linear = 0; linear < static_cast<int>(threads_.size()); ++linear) {
    EmuThread& thread = threads_[linear];
    thread.state = State::Runnable;  // runnable_ is reset below, for all at once
    thread.waiting_at = "";
    thread.file = "";
    thread.line = 0;
    thread.open_copies.clear();
    thread.copy_groups.clear();
    thread.exchanges = 0;
    const unsigned plane = block_dim_.x * block_dim_.y;
    thread.context.thread_idx = {static_cast<unsigned>(linear) % block_dim_.x,
                                 (static_cast<unsigned>(linear) / block_dim_.x) % block_dim_.y,
                                 static_cast<unsigned>(linear) / plane};
    thread.context.block_idx = index;
    thread.context.block_dim = block_dim_;
    thread.context.grid_dim = grid_;
    thread.context.block = this;
    thread.context.linear = linear;
    thread.fiber = fcontext::make_fcontext(thread.stack + kStackBytes, kStackBytes, fiber_entry);
#if ZT_EMU_TSAN
    // The launch (host writes before it) happens before every thread of the block.
    __tsan_release(&thread);
#endif
  }
  runnable_.reset_all(static_cast<int>(threads_.size()));
}

void Block::set_state(EmuThread& thread, State state) {
  thread.state = state;
  if (state == State::Runnable)
    runnable_.add(thread.context.linear);
  else
    runnable_.remove(thread.context.linear);
}

void Block::release_shared_memory() {
  std::free(dynamic_shared_);
  dynamic_shared_ = nullptr;
  for (StaticShared& array : static_shared_) std::free(array.memory);
  static_shared_.clear();
  static_bytes_ = 0;
}

// The next thread to resume, or -1 when none can run. `previous` ran last.
int Block::pick_next(int previous) {
  const int count = static_cast<int>(threads_.size());
  auto runnable = [&](int linear) { return threads_[linear].state == State::Runnable; };
  switch (schedule().kind) {
    case Schedule::InOrder:
      for (int step = 1; step <= count; ++step) {
        const int linear = (previous + step) % count;
        if (runnable(linear)) return linear;
      }
      return -1;
    case Schedule::Reversed:
      for (int step = 1; step <= count; ++step) {
        const int linear = ((previous < 0 ? count : previous) - step + 2 * count) % count;
        if (runnable(linear)) return linear;
      }
      return -1;
    case Schedule::WarpSerial:
      // The lowest warp that can run goes on, lane after lane, as far as it can before any
      // later warp runs: the order in which a missing trailing barrier shows.
      for (int warp = 0; warp < warps_; ++warp) {
        const int first = warp * kWarpSize, end = std::min(count, first + kWarpSize);
        const int start = previous >= first && previous < end ? previous + 1 : first;
        for (int step = 0; step < end - first; ++step) {
          const int linear = first + (start - first + step) % (end - first);
          if (runnable(linear)) return linear;
        }
      }
      return -1;
    case Schedule::Random:
      return runnable_.empty() ? -1 : runnable_.pick(random_());
  }
  return -1;
}

void Block::resume(EmuThread& thread) {
  current_thread = &thread.context;
#if ZT_EMU_TSAN
  __tsan_switch_to_fiber(thread.tsan_fiber, __tsan_switch_to_fiber_no_sync);
#endif
#if ZT_EMU_ASAN
  void* fake_stack = nullptr;
  __sanitizer_start_switch_fiber(&fake_stack, thread.stack, kStackBytes);
#endif
  const fcontext::transfer_t back = fcontext::jump_fcontext(thread.fiber, &thread);
#if ZT_EMU_ASAN
  __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#endif
  thread.fiber = back.fctx;
  current_thread = nullptr;
}

// On the fiber: back to the scheduler until it resumes this thread.
void Block::yield(EmuThread& thread) {
#if ZT_EMU_TSAN
  __tsan_switch_to_fiber(scheduler_tsan_fiber_, __tsan_switch_to_fiber_no_sync);
#endif
#if ZT_EMU_ASAN
  void* fake_stack = nullptr;
  // A thread that will never run again says so (nullptr), so ASan drops its fake frames.
  const bool ends = thread.state == State::Exited || thread.state == State::Faulted;
  __sanitizer_start_switch_fiber(ends ? nullptr : &fake_stack, scheduler_stack_bottom_,
                                 scheduler_stack_size_);
#endif
  const fcontext::transfer_t back = fcontext::jump_fcontext(thread.scheduler, nullptr);
  thread.scheduler = back.fctx;
#if ZT_EMU_ASAN
  __sanitizer_finish_switch_fiber(fake_stack, &scheduler_stack_bottom_, &scheduler_stack_size_);
#endif
}

void Block::run(uint3 index) {
  start_threads(index);
  random_.seed(schedule().seed * 0x9E3779B97F4A7C15ull + index.x + 65536ull * (index.y + 65536ull * index.z));
  cursor_ = -1;
#if ZT_EMU_TSAN
  scheduler_tsan_fiber_ = __tsan_get_current_fiber();
#endif
  while (fault_.empty()) {
    const int next = pick_next(cursor_);
    if (next < 0) break;
    cursor_ = next;
    resume(threads_[next]);
  }
  if (fault_.empty() && live_ > 0) {
    fault_ = "no thread of " + block_text() + " can go on (a barrier or warp operation that "
             "some threads never reach):\n" + describe_threads();
  }
#if ZT_EMU_TSAN
  for (EmuThread& thread : threads_) {
    __tsan_acquire(&thread);  // every thread's writes happen before what the host does next
  }
#endif
  release_shared_memory();
  if (!fault_.empty()) device_fault(fault_);
}

void Block::thread_main(EmuThread& thread) {
#if ZT_EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &scheduler_stack_bottom_, &scheduler_stack_size_);
#endif
#if ZT_EMU_TSAN
  __tsan_acquire(&thread);
#endif
  (*body_)();
  if (!thread.open_copies.empty() || !thread.copy_groups.empty()) {
    thread.waiting_at = "its return; its last cp.async was issued at";
    thread.file = thread.last_copy_file;
    thread.line = thread.last_copy_line;
    fault_on_fiber(thread, "a thread exited with cp.async copies it never waited for "
                           "(cp.async.wait_group)");
  }
  set_state(thread, State::Exited);
  thread.waiting_at = "exited";
  const int warp = thread.context.linear / kWarpSize;
  exited_lanes_[warp] |= 1u << (thread.context.linear % kWarpSize);
  // Its warp's pending operations no longer wait for it.
  for (size_t index = pending_[warp].size(); index-- > 0;) complete_if_ready(warp, index, thread);
  --live_;
#if ZT_EMU_TSAN
  __tsan_release(&thread);
#endif
  yield(thread);
  std::fprintf(stderr, "zerotune emulated device: an exited thread was resumed\n");
  std::abort();
}

void Block::fault_on_fiber(EmuThread& thread, std::string message) {
  set_state(thread, State::Faulted);
  if (fault_.empty()) fault_ = message + "\nin " + block_text() + "\n" + describe_threads();
  yield(thread);
  std::fprintf(stderr, "zerotune emulated device: a faulted thread was resumed\n");
  std::abort();
}

// Every thread's state and place, consecutive threads in the same place on one line.
std::string Block::describe_threads() const {
  std::ostringstream text;
  auto place = [](const EmuThread& thread) {
    if (thread.state == State::Exited) return std::string("exited (returned from the kernel)");
    if (thread.state == State::Runnable) return std::string("runnable");
    if (thread.state == State::Faulted) return std::string("faulted at ") + thread.waiting_at + " (" +
                                               site_text(thread.file, thread.line) + ")";
    return std::string("waiting at ") + thread.waiting_at + " (" + site_text(thread.file, thread.line) + ")";
  };
  const int count = static_cast<int>(threads_.size());
  for (int first = 0; first < count;) {
    const std::string where = place(threads_[first]);
    int last = first;
    while (last + 1 < count && place(threads_[last + 1]) == where) ++last;
    text << "  threads " << first << "-" << last << ": " << where << "\n";
    first = last + 1;
  }
  return text.str();
}

// ---- barriers ----------------------------------------------------------------------------------

// All live threads are at the barrier: they must be at the same __syncthreads.
void Block::check_barrier_sites() {
  const EmuThread& first = threads_.front();
  for (const EmuThread& thread : threads_) {
    if (thread.line != first.line || std::strcmp(thread.file, first.file) != 0) {
      fault_ = "divergent __syncthreads: the threads of " + block_text() +
               " wait at different barriers (a barrier must be reached by every thread of the "
               "block at the same place):\n" + describe_threads();
      return;
    }
  }
}

void Block::arrive_at_barrier(EmuThread& thread, const char* file, int line) {
  set_state(thread, State::AtBarrier);
  thread.waiting_at = "__syncthreads";
  thread.file = file;
  thread.line = line;
  const uint64_t generation = barrier_generation_;
  (void)generation;
#if ZT_EMU_TSAN
  __tsan_release(&barrier_token_[generation % 2]);
#endif
  if (++at_barrier_ == static_cast<int>(threads_.size())) {
    check_barrier_sites();
    at_barrier_ = 0;
    ++barrier_generation_;
    for (EmuThread& other : threads_) set_state(other, State::Runnable);
  }
  yield(thread);  // also when last: the schedule decides who goes first after the barrier
#if ZT_EMU_TSAN
  __tsan_acquire(&barrier_token_[generation % 2]);
#endif
}

// ---- warp operations ---------------------------------------------------------------------------

uint64_t Block::warp_operation(EmuThread& thread, WarpOpKind kind, const char* name, unsigned mask,
                               uint64_t value, int source_lane, const char* file, int line) {
  const int lane = thread.context.linear % kWarpSize, warp = thread.context.linear / kWarpSize;
  thread.waiting_at = name;
  thread.file = file;
  thread.line = line;
  auto fail = [&](const std::string& why) {
    char mask_text[16];
    std::snprintf(mask_text, sizeof mask_text, "0x%08x", mask);
    fault_on_fiber(thread, std::string(name) + " at " + site_text(file, line) + ": lane " +
                               std::to_string(lane) + " of warp " + std::to_string(warp) +
                               " (mask " + mask_text + ") " + why);
  };
  if (!(mask & (1u << lane))) fail("is not in its own mask");
  if (kind == WarpOpKind::Shuffle && (source_lane < 0 || source_lane >= kWarpSize ||
                                      !(mask & (1u << source_lane)))) {
    fail("reads lane " + std::to_string(source_lane) + ", which is not in the mask");
  }
  size_t index = 0;
  std::string conflict;  // another operation of the same mask pending: its name
  {
    [[maybe_unused]] BookkeepingScope bookkeeping;
    std::vector<PendingWarpOperation>& pending = pending_[warp];
    auto operation = std::find_if(pending.begin(), pending.end(),
                                  [&](const PendingWarpOperation& op) { return op.mask == mask; });
    if (operation == pending.end()) {
      pending.push_back({kind, name, mask});
      operation = pending.end() - 1;
    } else if (operation->kind != kind ||
               (operation->name != name && std::strcmp(operation->name, name) != 0)) {
      conflict = operation->name;
    }
    operation->values[lane] = value;
    operation->sources[lane] = source_lane;
    operation->arrived |= 1u << lane;
    index = static_cast<size_t>(operation - pending.begin());
  }
  if (!conflict.empty()) fail("reaches it while other lanes of the mask are at " + conflict);
  set_state(thread, State::AtWarpOperation);
  const uint64_t generation = syncwarp_generation_[warp];
  (void)generation;
#if ZT_EMU_TSAN
  char* token = &warp_tokens_[(warp % 32) * 2 + generation % 2];
  if (orders_memory(kind)) __tsan_release(token);
#endif
  complete_if_ready(warp, index, thread);
  yield(thread);
#if ZT_EMU_TSAN
  if (orders_memory(kind)) __tsan_acquire(token);
#endif
  return thread.warp_result;
}

// The CUDA rule: every non-exited lane named in the mask takes part. Lanes that do not exist (a
// partial last warp) or have returned count as arrived; a shuffle that reads one of them reads
// an undefined value, which is a fault. Called at each arrival and when a lane of the warp exits.
void Block::complete_if_ready(int warp, size_t index, EmuThread& reporter) {
  std::string fault;
  {
    [[maybe_unused]] BookkeepingScope bookkeeping;
    fault = complete_operation(warp, index);
  }
  if (!fault.empty()) fault_on_fiber(reporter, fault);
}

// complete_if_ready's work, on the emulator's record only: "" or the fault to raise.
std::string Block::complete_operation(int warp, size_t index) {
  PendingWarpOperation& operation = pending_[warp][index];
  const int lanes = std::min<int>(kWarpSize, static_cast<int>(threads_.size()) - warp * kWarpSize);
  const unsigned existing = lanes == kWarpSize ? 0xFFFFFFFFu : (1u << lanes) - 1u;
  const unsigned participants = operation.mask & existing & ~exited_lanes_[warp];
  if ((operation.arrived & participants) != participants) return "";
  const unsigned arrived = operation.arrived;
  uint64_t ballot = 0;
  for (int other = 0; other < kWarpSize; ++other) {
    if (!(arrived & (1u << other))) continue;
    if (operation.values[other] != 0) ballot |= 1u << other;
    const int source = operation.sources[other];
    if (operation.kind == WarpOpKind::Shuffle && !(arrived & (1u << source))) {
      const char* why = (existing & (1u << source)) ? "has exited" : "does not exist (partial warp)";
      return std::string(operation.name) + ": lane " + std::to_string(other) + " of warp " + std::to_string(warp) +
             " reads lane " + std::to_string(source) + ", which " + why;
    }
  }
  const WarpOpKind kind = operation.kind;
  if (kind == WarpOpKind::Gather) {
    // A warp-wide matrix operation: every lane holds part of the fragments.
    if (arrived != 0xFFFFFFFFu) {
      return std::string(operation.name) + ": warp " + std::to_string(warp) +
             " has lanes that exited or do not exist; every lane of the warp must take part";
    }
  }
  for (int other = 0; other < kWarpSize; ++other) {
    if (!(arrived & (1u << other))) continue;
    EmuThread& partner = threads_[warp * kWarpSize + other];
    switch (kind) {
      case WarpOpKind::Shuffle: partner.warp_result = operation.values[operation.sources[other]]; break;
      case WarpOpKind::Ballot: partner.warp_result = ballot; break;
      case WarpOpKind::Any: partner.warp_result = ballot != 0; break;
      case WarpOpKind::All: partner.warp_result = ballot == arrived; break;
      case WarpOpKind::SyncWarp: partner.warp_result = 0; break;
      case WarpOpKind::Gather: partner.warp_result = 0; break;
    }
    if (partner.state == State::AtWarpOperation) set_state(partner, State::Runnable);
  }
  if (orders_memory(kind)) ++syncwarp_generation_[warp];
  pending_[warp].erase(pending_[warp].begin() + static_cast<std::ptrdiff_t>(index));
  return "";
}

// ---- shared memory -------------------------------------------------------------------------------

// The offset of [pointer, pointer + bytes) within the block's dynamic shared memory or the static
// array holding it; nullopt when it is not wholly inside one of them.
std::optional<size_t> Block::find_shared(const void* pointer, size_t bytes) const {
  const char* first = static_cast<const char*>(pointer);
  auto offset_within = [&](const void* base, size_t size) -> std::optional<size_t> {
    const char* begin = static_cast<const char*>(base);
    if (base == nullptr || first < begin || first + bytes > begin + size) return std::nullopt;
    return static_cast<size_t>(first - begin);
  };
  if (const auto offset = offset_within(dynamic_shared_, dynamic_bytes_)) return offset;
  for (const StaticShared& array : static_shared_) {
    if (const auto offset = offset_within(array.memory, array.bytes)) return offset;
  }
  return std::nullopt;
}

bool Block::holds_shared(const void* pointer, size_t bytes) const { return find_shared(pointer, bytes).has_value(); }

void* Block::static_shared(size_t bytes, size_t alignment, const void* declaration, const char* name,
                           const char* file, int line) {
  for (const StaticShared& array : static_shared_) {
    if (array.declaration == declaration) {
#if ZT_EMU_TSAN
      __tsan_acquire(array.memory);  // after the allocation and its poisoning (see below)
#endif
      return array.memory;
    }
  }
  void* memory = alignment <= alignof(std::max_align_t)
                     ? std::malloc(bytes)
                     : std::aligned_alloc(alignment, (bytes + alignment - 1) / alignment * alignment);
  std::memset(memory, 0xFF, bytes);
#if ZT_EMU_TSAN
  // On a GPU shared memory exists before the block starts: the first thread to reach the
  // declaration allocates and poisons it here, and every thread that gets it acquires that,
  // so ThreadSanitizer does not take the poisoning for a racing write.
  __tsan_release(memory);
#endif
  static_shared_.push_back({declaration, memory, bytes});
  static_bytes_ += bytes;
  EmuThread& thread = thread_of(this_thread());
  thread.waiting_at = "a __shared__ declaration";
  thread.file = file;
  thread.line = line;
  if (static_bytes_ > kDefaultSharedBytes) {
    fault_on_fiber(thread, "static shared memory of " + std::to_string(static_bytes_) + " bytes (with `" +
                               name + "`) exceeds the 48 KiB a kernel may declare statically");
  }
  if (static_bytes_ + dynamic_bytes_ > kMaxSharedBytesOptin) {
    fault_on_fiber(thread, "static (" + std::to_string(static_bytes_) + ") + dynamic (" +
                               std::to_string(dynamic_bytes_) + ") shared memory exceeds 227 KiB per block");
  }
  return memory;
}

namespace {

void fiber_entry(fcontext::transfer_t transfer) {
  EmuThread& thread = *static_cast<EmuThread*>(transfer.data);
  thread.scheduler = transfer.fctx;
  thread.context.block->thread_main(thread);
}

// A grid's blocks in the schedule's order: the GPU gives no order between blocks.
std::vector<uint3> block_order(dim3 grid) {
  std::vector<uint3> order;
  order.reserve(size_t{grid.x} * grid.y * grid.z);
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) order.push_back({x, y, z});
  if (schedule().kind == Schedule::Reversed) std::reverse(order.begin(), order.end());
  if (schedule().kind == Schedule::Random) {
    static thread_local uint64_t grids = 0;
    std::mt19937_64 random(schedule().seed + 0x51ED27ull * ++grids);
    std::shuffle(order.begin(), order.end(), random);
  }
  return order;
}

std::string launch_text(LaunchSite site) {
  return "the kernel launched at " + site_text(site.file, static_cast<int>(site.line));
}

// The driver's launch checks (sm_90 limits); an empty string when the configuration is valid.
std::string configuration_error(const void* kernel, dim3 grid, dim3 block, size_t dynamic_bytes,
                                cudaError_t* error) {
  *error = cudaErrorInvalidConfiguration;
  const unsigned long long threads = 1ull * block.x * block.y * block.z;
  auto dims = [](dim3 d) {
    return std::to_string(d.x) + "x" + std::to_string(d.y) + "x" + std::to_string(d.z);
  };
  if (block.x == 0 || block.y == 0 || block.z == 0 || grid.x == 0 || grid.y == 0 || grid.z == 0) {
    return "grid " + dims(grid) + " or block " + dims(block) + " has a zero dimension";
  }
  if (block.x > unsigned(kMaxBlockDimX) || block.y > unsigned(kMaxBlockDimY) ||
      block.z > unsigned(kMaxBlockDimZ) || threads > unsigned(kMaxThreadsPerBlock)) {
    return "block " + dims(block) + " exceeds the limits (x, y <= 1024, z <= 64, at most 1024 "
           "threads per block)";
  }
  if (grid.x > kMaxGridDimX || grid.y > kMaxGridDimY || grid.z > kMaxGridDimZ) {
    return "grid " + dims(grid) + " exceeds the limits (x < 2^31, y and z <= 65535)";
  }
  *error = cudaErrorInvalidValue;
  const size_t allowed = static_cast<size_t>(max_dynamic_shared_bytes(kernel));
  if (dynamic_bytes > kMaxSharedBytesOptin) {
    return "requests " + std::to_string(dynamic_bytes) + " bytes of dynamic shared memory; a block "
           "has at most 227 KiB (232448 bytes)";
  }
  if (dynamic_bytes > allowed) {
    return "requests " + std::to_string(dynamic_bytes) + " bytes of dynamic shared memory, above the "
           "kernel's limit of " + std::to_string(allowed) + " bytes; above 48 KiB a kernel needs "
           "cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) first";
  }
  return {};
}

void run_grid(dim3 grid, dim3 block, size_t dynamic_bytes, LaunchSite site,
              const std::vector<PointerArgument>& pointers, std::function<void()>& thread_body) {
  for (const PointerArgument& argument : pointers) {
    if (argument.pointer == nullptr) continue;  // an optional argument: fine until dereferenced
    check_kernel_operand(argument.pointer, 0,
                         "argument " + std::to_string(argument.index + 1) + " of " + launch_text(site));
  }
  Block runner(site, grid, block, dynamic_bytes, &thread_body);
  for (const uint3& index : block_order(grid)) runner.run(index);
}

}  // namespace

// ---- the kernel-facing API -------------------------------------------------------------------

void sync_threads(const char* file, int line) {
  ThreadContext& context = this_thread();
  context.block->arrive_at_barrier(context.block->thread_of(context), file, line);
}

void sync_warp(const char* file, int line, unsigned mask) {
  ThreadContext& context = this_thread();
  context.block->warp_operation(context.block->thread_of(context), WarpOpKind::SyncWarp,
                                "__syncwarp", mask, 0, 0, file, line);
}

const unsigned char* warp_exchange(const void* operands, size_t bytes, const char* name,
                                   const char* file, int line) {
  ThreadContext& context = this_thread();
  Block& block = *context.block;
  EmuThread& thread = block.thread_of(context);
  if (bytes > kExchangeBytes) instruction_fault(name, "more operand bytes than an exchange holds", file, line);
  unsigned char* lanes = block.exchange_buffer(context.linear / kWarpSize, thread.exchanges++);
  std::memcpy(lanes + (context.linear % kWarpSize) * kExchangeBytes, operands, bytes);
  // Every lane's operands are in place when the gather completes (it orders memory as a
  // __syncwarp does, which ThreadSanitizer sees).
  block.warp_operation(thread, WarpOpKind::Gather, name, 0xFFFFFFFFu, 0, 0, file, line);
  return lanes;
}

uint64_t warp_operation(WarpOpKind kind, const char* name, unsigned mask, uint64_t value,
                        int source_lane, const char* file, int line) {
  ThreadContext& context = this_thread();
  return context.block->warp_operation(context.block->thread_of(context), kind, name, mask, value,
                                       source_lane, file, line);
}

void* dynamic_shared_memory() { return this_thread().block->dynamic_shared(); }

namespace {
std::atomic<uint64_t> async_copy_count{0};
}  // namespace

uint64_t async_copies() { return async_copy_count.load(); }

void async_copy_16(void* target, const void* source, const char* file, int line) {
  ThreadContext& context = this_thread();
  const char* op = "cp.async";
  if (reinterpret_cast<uintptr_t>(target) % 16 != 0 || reinterpret_cast<uintptr_t>(source) % 16 != 0) {
    instruction_fault(op, "the target or the source is not 16-byte aligned", file, line);
  }
  if (!context.block->holds_shared(target, 16)) {
    instruction_fault(op, "the target is not in the block's shared memory", file, line);
  }
  if (context.block->holds_shared(source, 16)) {
    instruction_fault(op, "the source is in shared memory (cp.async copies from global memory)", file, line);
  }
  EmuThread& thread = context.block->thread_of(context);
  async_copy_count.fetch_add(1, std::memory_order_relaxed);
  const bool at_issue = copies_at_issue();
  if (at_issue) std::memcpy(target, source, 16);
  thread.open_copies.push_back({target, source, at_issue});
  thread.last_copy_file = file;
  thread.last_copy_line = line;
}

void async_copy_commit() {
  ThreadContext& context = this_thread();
  EmuThread& thread = context.block->thread_of(context);
  thread.copy_groups.push_back(std::move(thread.open_copies));
  thread.open_copies.clear();
}

void async_copy_wait(int pending_groups) {
  ThreadContext& context = this_thread();
  EmuThread& thread = context.block->thread_of(context);
  while (thread.copy_groups.size() > static_cast<size_t>(pending_groups)) {
    for (const AsyncCopy& copy : thread.copy_groups.front())
      if (!copy.done) std::memcpy(copy.target, copy.source, 16);
    thread.copy_groups.pop_front();
  }
}

bool in_shared_memory(const void* pointer, size_t bytes) {
  return this_thread().block->holds_shared(pointer, bytes);
}

size_t Block::shared_offset(const void* pointer) const {
  const std::optional<size_t> offset = find_shared(pointer, 1);
  if (!offset) throw std::logic_error("zt_emu::shared_offset: the pointer is not in the block's shared memory");
  return *offset;
}

size_t shared_offset(const void* pointer) { return this_thread().block->shared_offset(pointer); }

namespace {
std::atomic<uint64_t> mma_operation_count{0};
}  // namespace

uint64_t mma_operations() { return mma_operation_count.load(); }
bool mma_rounds_toward_zero() {
  static const bool toward_zero = two_way_choice_from_environment("ZT_EMU_MMA_ROUNDING", "nearest", "toward-zero");
  return toward_zero;
}
void count_mma_operation() { mma_operation_count.fetch_add(1, std::memory_order_relaxed); }

namespace {
std::atomic<uint64_t> ldmatrix_phase_count{0};
std::atomic<uint64_t> ldmatrix_wavefront_count{0};
}  // namespace

int phase_wavefronts(const size_t (&row_offsets)[8]) {
  constexpr int kBanks = 32, kWordsPerRow = 4;
  size_t words[kBanks][8 * kWordsPerRow];  // the distinct words each bank serves
  int distinct[kBanks] = {};
  int wavefronts = 1;
  for (size_t offset : row_offsets) {
    for (int w = 0; w < kWordsPerRow; ++w) {
      const size_t word = offset / 4 + static_cast<size_t>(w);
      const int bank = static_cast<int>(word % kBanks);
      bool seen = false;
      for (int i = 0; i < distinct[bank]; ++i) seen = seen || words[bank][i] == word;
      if (seen) continue;  // the same word: a broadcast, no extra wavefront
      words[bank][distinct[bank]++] = word;
      wavefronts = std::max(wavefronts, distinct[bank]);
    }
  }
  return wavefronts;
}

void count_ldmatrix_wavefronts(uint64_t phases, uint64_t wavefronts) {
  ldmatrix_phase_count.fetch_add(phases, std::memory_order_relaxed);
  ldmatrix_wavefront_count.fetch_add(wavefronts, std::memory_order_relaxed);
}

uint64_t ldmatrix_phases() { return ldmatrix_phase_count.load(); }
uint64_t ldmatrix_wavefronts() { return ldmatrix_wavefront_count.load(); }

void instruction_fault(const char* op, const std::string& why, const char* file, int line) {
  ThreadContext& context = this_thread();
  EmuThread& thread = context.block->thread_of(context);
  thread.waiting_at = op;  // where the fault's listing shows this thread
  thread.file = file;
  thread.line = line;
  context.block->fault_on_fiber(thread,
                                std::string(op) + " at " + site_text(file, line) + ": lane " +
                                    std::to_string(context.linear % kWarpSize) + " of warp " +
                                    std::to_string(context.linear / kWarpSize) + ": " + why);
}

void* static_shared_memory(size_t bytes, size_t alignment, const void* declaration,
                           const char* name, const char* file, int line) {
  return this_thread().block->static_shared(bytes, alignment, declaration, name, file, line);
}

void launch_grid(const void* kernel, dim3 grid, dim3 block, size_t dynamic_shared_bytes,
                 cudaStream_t stream, LaunchSite site, std::vector<PointerArgument> pointers,
                 std::function<void()> thread_body) {
  std::lock_guard<std::recursive_mutex> lock(device_lock());
  cudaError_t error = cudaSuccess;
  const std::string problem = configuration_error(kernel, grid, block, dynamic_shared_bytes, &error);
  if (!problem.empty()) {
    set_last_error(error, launch_text(site) + " " + problem);
    return;
  }
  Work work;
  work.what = launch_text(site);
  // A launch on a destroyed stream is the call's error, as the driver reports it.
  work.run = [grid, block, dynamic_shared_bytes, site, pointers = std::move(pointers),
              body = std::move(thread_body)]() mutable {
    run_grid(grid, block, dynamic_shared_bytes, site, pointers, body);
  };
  try {
    enqueue(stream, std::move(work));
  } catch (const DeviceFault& fault) {
    set_last_error(cudaErrorInvalidResourceHandle, launch_text(site) + ": " + fault.message);
  }
}

}  // namespace zt_emu
