// Tests of train/report_html: metrics.jsonl reading (replayed steps after a resume, eval
// records, bad lines named by file:line, a line cut off by a kill), the summary's figures, and
// OUT/report.html: written, one <svg> per curve, text escaped, no scripts or remote resources.
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "test_util.h"
#include "train/report_html.h"

namespace {

using zt::test::TempDir;

// Three steps of 2 s each; step 2 was replayed after a resume with another loss; two
// evaluations; host memory grows; no device.
const char* const kMetrics =
    R"({"step":1,"total_steps":4,"epoch":0.25,"loss":6.5,"lr":0.001,"grad_norm":1.0,"loss_scale":1.0,"skipped":0,"samples":8,"tokens":1000,"step_time":2.0,"samples_per_sec":4.0,"tokens_per_sec":500.0,"tflops_per_rank":0.5,"mfu":null,"mem_device":null,"mem_device_peak":null,"mem_host_rss":104857600,"mem_host_peak":104857600}
{"step":2,"total_steps":4,"epoch":0.5,"loss":9.0,"lr":0.001,"grad_norm":1.0,"loss_scale":1.0,"skipped":0,"samples":8,"tokens":1000,"step_time":2.0,"samples_per_sec":4.0,"tokens_per_sec":500.0,"tflops_per_rank":0.5,"mfu":null,"mem_device":null,"mem_device_peak":null,"mem_host_rss":209715200,"mem_host_peak":209715200}
{"step":2,"epoch":0.5,"eval_loss":7.0,"eval_ppl":1096.6}
{"step":2,"total_steps":4,"epoch":0.5,"loss":6.0,"lr":0.001,"grad_norm":1.0,"loss_scale":1.0,"skipped":0,"samples":8,"tokens":3000,"step_time":2.0,"samples_per_sec":4.0,"tokens_per_sec":1500.0,"tflops_per_rank":1.5,"mfu":null,"mem_device":null,"mem_device_peak":null,"mem_host_rss":209715200,"mem_host_peak":209715200}
{"step":3,"total_steps":4,"epoch":0.75,"loss":null,"lr":0.001,"grad_norm":null,"loss_scale":1.0,"skipped":1,"samples":8,"tokens":2000,"step_time":2.0,"samples_per_sec":4.0,"tokens_per_sec":1000.0,"tflops_per_rank":1.0,"mfu":null,"mem_device":null,"mem_device_peak":null,"mem_host_rss":314572800,"mem_host_peak":314572800}
{"step":3,"epoch":0.75,"eval_loss":5.5,"eval_ppl":244.7}
)";

int count(const std::string& text, const std::string& part) {
  int found = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++found;
  return found;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(report_html)

BOOST_AUTO_TEST_CASE(history_keeps_the_last_record_of_each_step) {
  TempDir dir;
  const zt::MetricsHistory history = zt::read_metrics_history(dir.write("metrics.jsonl", kMetrics));
  BOOST_REQUIRE(history.steps.size() == 3u);
  BOOST_TEST(history.steps[1]["loss"].get<double>() == 6.0);  // the replayed step 2
  BOOST_REQUIRE(history.evals.size() == 2u);
  BOOST_TEST(history.evals[1]["eval_loss"].get<double>() == 5.5);
}

BOOST_AUTO_TEST_CASE(summary_figures) {
  TempDir dir;
  const zt::RunSummary s = zt::summarize_run(zt::read_metrics_history(dir.write("metrics.jsonl", kMetrics)));
  BOOST_TEST(s.steps == 3);
  BOOST_TEST(s.last_step == 3);
  BOOST_TEST(s.total_steps == 4);
  BOOST_TEST(s.skipped == 1);
  BOOST_TEST(*s.first_loss == 6.5);
  BOOST_TEST(*s.final_loss == 6.0);  // step 3's loss is null (skipped): the last finite one
  BOOST_TEST(*s.min_loss == 6.0);
  BOOST_TEST(*s.final_eval_loss == 5.5);
  BOOST_TEST(*s.final_eval_ppl == 244.7);
  BOOST_TEST(s.train_seconds == 6.0);
  BOOST_TEST(s.samples_per_sec == 4.0);        // 24 samples / 6 s
  BOOST_TEST(s.tokens_per_sec == 1000.0);      // 6000 tokens / 6 s
  BOOST_TEST(s.tflops_per_rank == 1.0, boost::test_tools::tolerance(1e-12));  // (0.5 + 1.5 + 1.0) x 2 s / 6 s
  BOOST_TEST(!s.mfu.has_value());
  BOOST_TEST(s.peak_host_bytes == 314572800);
  BOOST_TEST(!s.peak_device_bytes.has_value());
  const std::string text = zt::format_run_summary(s);
  BOOST_TEST(text.find("steps        3 of 4 (1 skipped) in 6s\n") != std::string::npos, text);
  BOOST_TEST(text.find("loss         6.5000 -> 6.0000 (min 6.0000)\n") != std::string::npos, text);
  BOOST_TEST(text.find("eval loss    5.5000 (ppl 244.70)\n") != std::string::npos, text);
  BOOST_TEST(text.find("4.00 samples/s, 1000 tokens/s, 1.000 TFLOPS/rank, MFU -\n") != std::string::npos, text);
  BOOST_TEST(text.find("peak memory  host 300 MiB, device -\n") != std::string::npos, text);
}

BOOST_AUTO_TEST_CASE(report_is_written_with_an_svg_per_curve_and_escaped_text) {
  TempDir dir;
  dir.write("metrics.jsonl", kMetrics);
  dir.write("run.json", R"({"model_dir": "/models/<script>alert('x')</script>&co", "world_size": 2,
                            "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}},
                            "parameters": {"total": 1000, "trainable": 10}})");
  const std::string path = zt::write_report(dir.path.string());
  BOOST_TEST(path == dir.file("report.html"));
  BOOST_REQUIRE(std::filesystem::exists(path));
  BOOST_TEST(!std::filesystem::exists(dir.file("report.html.tmp")));
  const std::string html = read_file(path);
  BOOST_TEST(html.rfind("<!DOCTYPE html>", 0) == 0u);
  BOOST_TEST(html.find("</html>") != std::string::npos);
  // Loss, eval loss, throughput, memory.
  BOOST_TEST(count(html, "<svg") == 4);
  BOOST_TEST(count(html, "</svg>") == 4);
  BOOST_TEST(html.find("aria-label=\"eval loss\"") != std::string::npos);
  BOOST_TEST(html.find("aria-label=\"tokens per second (all ranks)\"") != std::string::npos);
  BOOST_TEST(count(html, "<polyline") == 5);  // loss, eval loss, tokens/s, host RSS, host peak
  // run.json's text, escaped: no markup from a path gets into the page.
  BOOST_TEST(html.find("/models/&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;co") != std::string::npos);
  BOOST_TEST(html.find("<script") == std::string::npos);
  BOOST_TEST(html.find("<tr><th>ZeRO stage</th><td>3</td></tr>") != std::string::npos);
  BOOST_TEST(html.find("<tr><th>optimizer offload</th><td>cpu</td></tr>") != std::string::npos);
  // Self-contained: nothing fetched from elsewhere.
  BOOST_TEST(html.find("http://") == html.find("http://www.w3.org/2000/svg"));  // only the SVG namespace
  BOOST_TEST(html.find("https://") == std::string::npos);
  BOOST_TEST(html.find("src=") == std::string::npos);
  // The summary's numbers are in the page.
  BOOST_TEST(html.find("<tr><th>tokens/s</th><td>1000</td></tr>") != std::string::npos);

  // `zerotune report` again over the same directory replaces the page.
  std::filesystem::remove(dir.file("run.json"));
  zt::write_report(dir.path.string());
  const std::string again = read_file(path);
  BOOST_TEST(again.find("run.json was not found") != std::string::npos);
  BOOST_TEST(again.find("&lt;script&gt;") == std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_run_without_evaluation_says_so_instead_of_an_empty_chart) {
  TempDir dir;
  dir.write("metrics.jsonl",
            R"({"step":1,"loss":3.0,"step_time":1.0,"samples":4,"tokens":100,"tokens_per_sec":100.0,"mem_host_rss":1048576})"
            "\n");
  const std::string html = read_file(zt::write_report(dir.path.string()));
  BOOST_TEST(count(html, "<svg") == 3);
  BOOST_TEST(html.find("No evaluation in this run") != std::string::npos);
  BOOST_TEST(count(html, "<circle") == 3);  // one point per curve, marked
}

BOOST_AUTO_TEST_CASE(large_tick_values_are_written_in_full) {
  TempDir dir;
  dir.write("metrics.jsonl",
            "{\"step\":1,\"loss\":3.0,\"tokens_per_sec\":20000.0}\n{\"step\":2,\"loss\":2.0,\"tokens_per_sec\":40000.0}\n");
  const std::string html = read_file(zt::write_report(dir.path.string()));
  BOOST_TEST(html.find(">20000</text>") != std::string::npos);
  BOOST_TEST(html.find(">40000</text>") != std::string::npos);
  BOOST_TEST(html.find("e+04") == std::string::npos);
}

BOOST_AUTO_TEST_CASE(bad_records_are_named_by_file_and_line) {
  TempDir dir;
  const std::string path = dir.write("metrics.jsonl", "{\"step\":1,\"loss\":2.0}\n{not json\n{\"step\":2,\"loss\":1.0}\n");
  zt::test::check_error_mentions([&] { zt::read_metrics_history(path); }, {path + ":2", "not a JSON object"});
  const std::string no_step = dir.write("no_step.jsonl", "{\"loss\":2.0}\n");
  zt::test::check_error_mentions([&] { zt::read_metrics_history(no_step); }, {no_step + ":1", "\"step\""});
  const std::string neither = dir.write("neither.jsonl", "{\"step\":1}\n");
  zt::test::check_error_mentions([&] { zt::read_metrics_history(neither); }, {neither + ":1", "eval_loss"});
  zt::test::check_error_mentions([&] { zt::write_report(dir.file("missing")); }, {"missing/metrics.jsonl", "cannot open"});
  dir.write("metrics.jsonl", "{\"step\":1,\"loss\":2.0}\n");
  dir.write("run.json", "{oops");
  zt::test::check_error_mentions([&] { zt::write_report(dir.path.string()); }, {"run.json", "not valid JSON"});
}

BOOST_AUTO_TEST_CASE(a_last_line_cut_off_by_a_kill_is_left_out) {
  TempDir dir;
  const std::string path = dir.write("metrics.jsonl", "{\"step\":1,\"loss\":2.0}\n{\"step\":2,\"lo");
  const zt::MetricsHistory history = zt::read_metrics_history(path);
  BOOST_TEST(history.steps.size() == 1u);
}

BOOST_AUTO_TEST_CASE(html_escape_every_special_character) {
  BOOST_TEST(zt::html_escape("a<b>&\"c'") == "a&lt;b&gt;&amp;&quot;c&#39;");
  BOOST_TEST(zt::html_escape("plain") == "plain");
}

BOOST_AUTO_TEST_SUITE_END()
