// Tests of train/profiler: rows accumulate per module in first-seen order; the table's exact
// text (FLOPs, time, TFLOPS, share, the unmeasured rest, the total); the JSON fields.
#include <boost/test/unit_test.hpp>

#include <string>

#include "train/profiler.h"

namespace {

// A 0.5 s step: attention twice (two layers), mlp, communication (no FLOPs); 0.05 s unmeasured.
zt::ProfileTable example_table() {
  zt::ProfileTable table;
  table.step = 5;
  table.rank = 0;
  table.step_seconds = 0.5;
  table.add("attention", 1e12, 0.1);
  table.add("mlp", 2e12, 0.2);
  table.add("attention", 1e12, 0.1);
  table.add("communication", 0.0, 0.05);
  return table;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(profiler)

BOOST_AUTO_TEST_CASE(rows_accumulate_per_module_in_first_seen_order) {
  const zt::ProfileTable table = example_table();
  BOOST_REQUIRE(table.rows.size() == 3u);
  BOOST_TEST(table.rows[0].module == "attention");
  BOOST_TEST(table.rows[0].flops == 2e12);
  BOOST_TEST(table.rows[0].seconds == 0.2);
  BOOST_TEST(table.rows[1].module == "mlp");
  BOOST_TEST(table.rows[2].module == "communication");
  BOOST_TEST(table.total_flops() == 4e12);
  BOOST_TEST(table.total_seconds() == 0.45, boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(table_exact_text) {
  const std::string expected =
      "profile of step 5 (rank 0): 0.500 s, 4.00 T FLOPs, 8.000 TFLOPS\n"
      "module                  FLOPs    time (ms)    TFLOPS   share\n"
      "attention              2.00 T      200.000    10.000   40.0%\n"
      "mlp                    2.00 T      200.000    10.000   40.0%\n"
      "communication               0       50.000         -   10.0%\n"
      "other (unmeasured)          -       50.000         -   10.0%\n"
      "total (step)           4.00 T      500.000     8.000  100.0%\n";
  BOOST_TEST(zt::format_profile_table(example_table()) == expected);
}

BOOST_AUTO_TEST_CASE(no_other_row_when_the_rows_cover_the_step) {
  zt::ProfileTable table = example_table();
  table.add("optimizer", 0.0, 0.1);  // rows now sum to 0.55 s > 0.5 s (overlap)
  const std::string text = zt::format_profile_table(table);
  BOOST_TEST(text.find("other") == std::string::npos, text);
  BOOST_TEST(text.find("optimizer") != std::string::npos, text);
  BOOST_TEST(zt::profile_json(table)["other_seconds"].get<double>() == 0.0);
}

BOOST_AUTO_TEST_CASE(json_fields) {
  const nlohmann::json json = zt::profile_json(example_table());
  BOOST_TEST(json["step"].get<int64_t>() == 5);
  BOOST_TEST(json["rank"].get<int>() == 0);
  BOOST_TEST(json["step_seconds"].get<double>() == 0.5);
  BOOST_TEST(json["total_flops"].get<double>() == 4e12);
  BOOST_TEST(json["tflops"].get<double>() == 8.0);
  BOOST_TEST(json["other_seconds"].get<double>() == 0.05, boost::test_tools::tolerance(1e-12));
  BOOST_REQUIRE(json["modules"].size() == 3u);
  const nlohmann::json& attention = json["modules"][0];
  BOOST_TEST(attention["module"].get<std::string>() == "attention");
  BOOST_TEST(attention["flops"].get<double>() == 2e12);
  BOOST_TEST(attention["seconds"].get<double>() == 0.2);
  BOOST_TEST(attention["tflops"].get<double>() == 10.0);
  BOOST_TEST(attention["share"].get<double>() == 0.4);
  BOOST_TEST(json["modules"][2]["tflops"].get<double>() == 0.0);  // communication: no FLOPs over 0.05 s

  zt::ProfileTable untimed;
  untimed.add("head", 1e9, 0.0);
  const nlohmann::json empty = zt::profile_json(untimed);
  BOOST_TEST(empty["modules"][0]["tflops"].is_null());  // nothing to divide by
  BOOST_TEST(empty["tflops"].is_null());
}

BOOST_AUTO_TEST_CASE(flop_counts_with_si_prefixes) {
  BOOST_TEST(zt::format_flops(0.0) == "0");
  BOOST_TEST(zt::format_flops(950.0) == "950");
  BOOST_TEST(zt::format_flops(1200.0) == "1.20 K");
  BOOST_TEST(zt::format_flops(3.4e9) == "3.40 G");
  BOOST_TEST(zt::format_flops(1.2e13) == "12.00 T");
  BOOST_TEST(zt::format_flops(5e18) == "5.00 E");
}

BOOST_AUTO_TEST_SUITE_END()
