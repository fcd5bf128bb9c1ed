// Tests of train/metrics: the metrics.jsonl record (every key DESIGN.md lists and the derived
// figures), the console line and the progress bar (exact text), ConsoleProgress in a batch log
// (plain lines only) and on a terminal (bar redrawn and erased), the ETA's mean step time.
#include <boost/test/unit_test.hpp>

#include <fcntl.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "test_util.h"
#include "train/memory_model.h"
#include "train/metrics.h"

namespace {

// A step with round numbers: 2 s, 16 samples, 4096 tokens, 8e12 FLOPs over 2 ranks.
zt::StepMetrics example_step() {
  zt::StepMetrics m;
  m.step = 25;
  m.total_steps = 100;
  m.epoch = 0.5;
  m.loss = 2.345678;
  m.lr = 3e-4;
  m.grad_norm = 0.8125;
  m.loss_scale = 65536.0;
  m.skipped = 1;
  m.samples = 16;
  m.tokens = 4096;
  m.target_tokens = 2000;
  m.padding_fraction = 0.25;
  m.step_seconds = 2.0;
  m.mean_step_seconds = 1.5;
  m.flops = 8e12;
  m.world_size = 2;
  m.host_memory = zt::HostMemory{512LL << 20, 600LL << 20};
  return m;
}

// Everything written to a temporary stream by `write`.
template <class Write>
std::string captured(Write write) {
  std::FILE* stream = std::tmpfile();
  BOOST_REQUIRE(stream != nullptr);
  write(stream);
  std::fflush(stream);
  std::string text;
  std::rewind(stream);
  for (int c = std::fgetc(stream); c != EOF; c = std::fgetc(stream)) text += static_cast<char>(c);
  std::fclose(stream);
  return text;
}

const std::string kErase = "\r\x1b[K";

}  // namespace

BOOST_AUTO_TEST_SUITE(metrics)

BOOST_AUTO_TEST_CASE(json_has_every_key_design_lists_and_the_derived_figures) {
  const nlohmann::json record = zt::metrics_json(example_step());
  for (const char* key : {"step", "epoch", "loss", "lr", "grad_norm", "loss_scale", "skipped", "samples", "tokens",
                          "samples_per_sec", "tokens_per_sec", "tflops_per_rank", "mfu", "mem_device_peak",
                          "mem_host_rss", "total_steps", "target_tokens", "padding_fraction", "step_time",
                          "mean_step_time", "eta_seconds", "mem_device", "mem_host_peak"})
    BOOST_TEST(record.contains(key), "metrics_json lacks " << key);
  BOOST_TEST(record["step"].get<int64_t>() == 25);
  BOOST_TEST(record["total_steps"].get<int64_t>() == 100);
  BOOST_TEST(record["loss_scale"].get<double>() == 65536.0);
  BOOST_TEST(record["samples_per_sec"].get<double>() == 8.0);       // 16 / 2 s
  BOOST_TEST(record["tokens_per_sec"].get<double>() == 2048.0);     // 4096 / 2 s
  BOOST_TEST(record["tflops_per_rank"].get<double>() == 2.0);       // 8e12 / 2 s / 2 ranks / 1e12
  BOOST_TEST(record["eta_seconds"].get<double>() == 112.5);         // 1.5 s x 75 steps left
  BOOST_TEST(record["mean_step_time"].get<double>() == 1.5);
  BOOST_TEST(record["mem_host_rss"].get<int64_t>() == (512LL << 20));
  BOOST_TEST(record["mem_host_peak"].get<int64_t>() == (600LL << 20));
  // No peak TFLOPS and no device: null, not 0 (0 would read as a measurement).
  BOOST_TEST(record["mfu"].is_null());
  BOOST_TEST(record["mem_device"].is_null());
  BOOST_TEST(record["mem_device_peak"].is_null());
}

BOOST_AUTO_TEST_CASE(json_mfu_and_device_memory_when_known) {
  zt::StepMetrics m = example_step();
  m.peak_tflops = 8.0;
  m.mem_device = 3LL << 30;
  m.mem_device_peak = 5LL << 30;
  const nlohmann::json record = zt::metrics_json(m);
  BOOST_TEST(record["mfu"].get<double>() == 0.25);  // 2 TFLOPS of 8
  BOOST_TEST(record["mem_device"].get<int64_t>() == (3LL << 30));
  BOOST_TEST(record["mem_device_peak"].get<int64_t>() == (5LL << 30));
}

BOOST_AUTO_TEST_CASE(json_reads_this_process_memory_when_not_given) {
  zt::StepMetrics m = example_step();
  m.host_memory.reset();
  const nlohmann::json record = zt::metrics_json(m);
  BOOST_TEST(record["mem_host_rss"].get<int64_t>() > 0);
  BOOST_TEST(record["mem_host_peak"].get<int64_t>() >= record["mem_host_rss"].get<int64_t>());
  const zt::HostMemory memory = zt::read_host_memory();
  BOOST_TEST(memory.rss_bytes > 1024 * 1024);  // a process with the test framework loaded
  BOOST_TEST(memory.peak_rss_bytes >= memory.rss_bytes);
}

BOOST_AUTO_TEST_CASE(eta_uses_the_step_time_when_there_is_no_mean_and_is_zero_at_the_end) {
  zt::StepMetrics m = example_step();
  m.mean_step_seconds = 0.0;
  BOOST_TEST(zt::derive_metrics(m).eta_seconds == 150.0);  // 2 s x 75
  m.step = m.total_steps;
  BOOST_TEST(zt::derive_metrics(m).eta_seconds == 0.0);
}

BOOST_AUTO_TEST_CASE(step_time_average_leaves_out_the_first_step) {
  zt::StepTimeAverage average;
  BOOST_TEST(average.mean() == 0.0);
  average.add(10.0);  // warm-up
  BOOST_TEST(average.mean() == 10.0);
  average.add(1.0);
  average.add(2.0);
  BOOST_TEST(average.mean() == 1.5);
}

BOOST_AUTO_TEST_CASE(console_line_exact_text) {
  BOOST_TEST(zt::metrics_console_line(example_step()) ==
             "step 25/100 | epoch 0.50 | loss 2.3457 | lr 3.000e-04 | grad_norm 0.812 | loss_scale 65536 | "
             "skipped 1 | 8.00 samples/s | 2048 tokens/s | 2.000 TFLOPS/rank | MFU - | device - | "
             "host 512 MiB (peak 600 MiB) | ETA 1m53s");
  zt::StepMetrics m = example_step();
  m.peak_tflops = 8.0;
  m.mem_device = 3LL << 30;
  m.mem_device_peak = 5LL << 30;
  const std::string line = zt::metrics_console_line(m);
  BOOST_TEST(line.find("| MFU 25.0% | device 3.00 GiB (peak 5.00 GiB) |") != std::string::npos, line);
  BOOST_TEST(line.find('\n') == std::string::npos);
}

BOOST_AUTO_TEST_CASE(objective_figures_follow_in_the_record_and_the_line) {
  zt::StepMetrics m = example_step();
  m.objective_figures = {{"rewards/chosen", 0.125}, {"rewards/accuracies", 0.75}};  // DPO's (train/dpo_objective.cpp)
  const nlohmann::json record = zt::metrics_json(m);
  BOOST_TEST(record["rewards/chosen"].get<double>() == 0.125);
  BOOST_TEST(record["rewards/accuracies"].get<double>() == 0.75);
  BOOST_TEST(zt::metrics_console_line(m) == zt::metrics_console_line(example_step()) +
                                                " | rewards/chosen 0.1250 | rewards/accuracies 0.7500");
  BOOST_TEST(!zt::metrics_json(example_step()).contains("rewards/chosen"));  // none without an objective's
}

BOOST_AUTO_TEST_CASE(progress_bar_exact_text) {
  BOOST_TEST(zt::progress_bar_line(example_step(), 20) ==
             "[=====>              ]  25% 25/100 | loss 2.3457 | 2048 tokens/s | ETA 1m53s");
  zt::StepMetrics done = example_step();
  done.step = 100;
  BOOST_TEST(zt::progress_bar_line(done, 10) == "[==========] 100% 100/100 | loss 2.3457 | 2048 tokens/s | ETA 0s");
}

BOOST_AUTO_TEST_CASE(human_readable_bytes_and_durations) {
  BOOST_TEST(zt::format_bytes(0) == "0 MiB");
  BOOST_TEST(zt::format_bytes(300LL << 20) == "300 MiB");
  BOOST_TEST(zt::format_bytes(3LL << 29) == "1.50 GiB");
  BOOST_TEST(zt::format_duration(0.4) == "0s");
  BOOST_TEST(zt::format_duration(59.0) == "59s");
  BOOST_TEST(zt::format_duration(192.0) == "3m12s");
  BOOST_TEST(zt::format_duration(3600.0 + 120.0) == "1h02m");
  BOOST_TEST(zt::format_duration(2 * 86400.0 + 3 * 3600.0) == "2d03h");
  BOOST_TEST(zt::format_duration(-1.0) == "-");
}

BOOST_AUTO_TEST_CASE(batch_log_gets_plain_lines_only) {
  const zt::StepMetrics m = example_step();
  const std::string text = captured([&](std::FILE* stream) {
    zt::ConsoleProgress console(stream, false);
    console.step(m, false);  // not a steps_per_print step: nothing
    console.step(m, true);
    console.message("eval at step 25");
    console.finish();
  });
  BOOST_TEST(text == zt::metrics_console_line(m) + "\neval at step 25\n");
  BOOST_TEST(text.find('\r') == std::string::npos);
  BOOST_TEST(text.find('\x1b') == std::string::npos);
}

BOOST_AUTO_TEST_CASE(terminal_gets_lines_above_a_progress_bar_that_is_erased_at_the_end) {
  const zt::StepMetrics m = example_step();
  const std::string bar = zt::progress_bar_line(m, 30);
  const std::string line = zt::metrics_console_line(m);
  const std::string text = captured([&](std::FILE* stream) {
    zt::ConsoleProgress console(stream, true);
    console.step(m, false);
    console.step(m, true);
    console.message("eval");
    console.finish();
    console.finish();  // a second finish does nothing
  });
  // bar; erase, line, bar; erase, message, bar again; erase at the end.
  BOOST_TEST(text == bar + kErase + line + "\n" + bar + kErase + "eval\n" + bar + kErase);
}

BOOST_AUTO_TEST_CASE(terminal_bar_is_erased_when_the_console_goes_away) {
  const zt::StepMetrics m = example_step();
  const std::string text = captured([&](std::FILE* stream) {
    zt::ConsoleProgress console(stream, true);
    console.step(m, false);
  });  // e.g. unwinding from an error: the message must start on a clean line
  BOOST_TEST(text == zt::progress_bar_line(m, 30) + kErase);
}

BOOST_AUTO_TEST_CASE(bar_on_terminals_only_unless_zt_progress_says) {
  std::FILE* stream = std::tmpfile();
  BOOST_REQUIRE(stream != nullptr);
  const char* saved = getenv("ZT_PROGRESS");
  const std::string saved_value = saved ? saved : "";
  unsetenv("ZT_PROGRESS");
  BOOST_TEST(!zt::ConsoleProgress::wants_bar(stream));  // a file is not a terminal
  setenv("ZT_PROGRESS", "bar", 1);
  BOOST_TEST(zt::ConsoleProgress::wants_bar(stream));
  setenv("ZT_PROGRESS", "lines", 1);
  BOOST_TEST(!zt::ConsoleProgress::wants_bar(stream));
  setenv("ZT_PROGRESS", "fancy", 1);
  zt::test::check_error_mentions([&] { zt::ConsoleProgress::wants_bar(stream); }, {"ZT_PROGRESS='fancy'", "bar", "lines"});
  if (saved) setenv("ZT_PROGRESS", saved_value.c_str(), 1);
  else unsetenv("ZT_PROGRESS");
  std::fclose(stream);
}

// Under mpirun a rank's stdout is a pseudo-terminal without a size, whatever mpirun's own output
// is (a log file, often): no bar there, so logs get no "\r\x1b[K". A terminal with a size gets it.
BOOST_AUTO_TEST_CASE(no_bar_on_a_pseudo_terminal_without_a_size) {
  const int master = posix_openpt(O_RDWR | O_NOCTTY);
  BOOST_REQUIRE(master >= 0);
  BOOST_REQUIRE(grantpt(master) == 0 && unlockpt(master) == 0);
  std::FILE* stream = std::fopen(ptsname(master), "w");
  BOOST_REQUIRE(stream != nullptr);
  const char* saved_progress = getenv("ZT_PROGRESS");
  const char* saved_term = getenv("TERM");
  const std::string progress_value = saved_progress ? saved_progress : "", term_value = saved_term ? saved_term : "";
  unsetenv("ZT_PROGRESS");
  setenv("TERM", "xterm", 1);
  BOOST_TEST(!zt::ConsoleProgress::wants_bar(stream));  // what mpirun's ranks see
  winsize size{};
  size.ws_row = 24;
  size.ws_col = 80;
  BOOST_REQUIRE(ioctl(master, TIOCSWINSZ, &size) == 0);
  BOOST_TEST(zt::ConsoleProgress::wants_bar(stream));  // a user's terminal
  setenv("ZT_PROGRESS", "lines", 1);
  BOOST_TEST(!zt::ConsoleProgress::wants_bar(stream));
  if (saved_progress) setenv("ZT_PROGRESS", progress_value.c_str(), 1);
  else unsetenv("ZT_PROGRESS");
  if (saved_term) setenv("TERM", term_value.c_str(), 1);
  else unsetenv("TERM");
  std::fclose(stream);
  close(master);
}

// The CPU backend predicts no device bytes: the banner gives the host figures, never "0 MiB".
BOOST_AUTO_TEST_CASE(memory_banner_line_on_cpu_and_gpu) {
  zt::MemoryPrediction cpu;
  cpu.host_setup = 3 << 20;
  cpu.host_peak = 7 << 20;
  const std::string cpu_line = zt::memory_banner_line(cpu, std::nullopt, 4, 24);
  BOOST_TEST(cpu_line.find("predicted 3 MiB of host memory after set-up, 7 MiB at the step's peak") != std::string::npos,
             cpu_line);
  BOOST_TEST(cpu_line.find("micro-batch 4 x 24 tokens") != std::string::npos, cpu_line);
  BOOST_TEST(cpu_line.find("predicted 0 MiB") == std::string::npos, cpu_line);
  zt::MemoryPrediction gpu;
  gpu.device_setup = 100 << 20;
  gpu.device_peak = 300 << 20;
  gpu.host_peak = 50 << 20;  // ZeRO-Offload's buffers
  const std::string gpu_line = zt::memory_banner_line(gpu, int64_t{120 << 20}, 1, 512);
  BOOST_TEST(gpu_line == "memory: rank 0 predicted 100 MiB after set-up, 300 MiB at the step's peak (micro-batch 1 x "
                         "512 tokens); the device reports 120 MiB in use after set-up; host 50 MiB",
             gpu_line);
}

BOOST_AUTO_TEST_SUITE_END()
