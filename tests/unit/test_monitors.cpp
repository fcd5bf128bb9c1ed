// Tests of the pieces of DeepSpeed's monitors (src/train/tensorboard_writer, csv_monitor): the
// CRC-32C and TFRecord framing against their published values, the CSV layout and its resume.
// tests/mpi/test_monitors.py reads whole runs' files with TensorBoard's own reader.
#include <boost/test/unit_test.hpp>

#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "train/csv_monitor.h"
#include "train/tensorboard_writer.h"
#include "test_util.h"

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

uint32_t le32(const std::string& bytes, size_t at) {
  uint32_t value = 0;
  std::memcpy(&value, bytes.data() + at, 4);  // x86 and ARM Linux: little-endian, as TFRecord
  return value;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(monitors)

// The check value of CRC-32C (RFC 3720 B.4 and every CRC catalogue: "123456789" -> E3069283),
// and the masked form TFRecord stores: rotate right by 15, add 0xA282EAD8.
BOOST_AUTO_TEST_CASE(crc32c_and_its_mask) {
  BOOST_CHECK_EQUAL(zt::crc32c("123456789", 9), 0xE3069283u);
  BOOST_CHECK_EQUAL(zt::crc32c("", 0), 0u);
  const uint32_t crc = 0xE3069283u;
  BOOST_CHECK_EQUAL(zt::masked_crc32c("123456789", 9), ((crc >> 15) | (crc << 17)) + 0xA282EAD8u);
  // RFC 3720 B.4: 32 bytes of zeros.
  const std::string zeros(32, '\0');
  BOOST_CHECK_EQUAL(zt::crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
}

BOOST_AUTO_TEST_CASE(tfrecord_framing) {
  const std::string payload = "hello";
  const std::string record = zt::tfrecord(payload);
  BOOST_REQUIRE_EQUAL(record.size(), 8u + 4u + payload.size() + 4u);
  BOOST_CHECK_EQUAL(record.substr(0, 8), std::string("\x05\0\0\0\0\0\0\0", 8));
  BOOST_CHECK_EQUAL(le32(record, 8), zt::masked_crc32c(record.data(), 8));
  BOOST_CHECK_EQUAL(record.substr(12, payload.size()), payload);
  BOOST_CHECK_EQUAL(le32(record, 12 + payload.size()), zt::masked_crc32c(payload.data(), payload.size()));
}

BOOST_AUTO_TEST_CASE(csv_layout_as_deepspeed) {
  BOOST_CHECK_EQUAL(zt::csv_monitor_file_name("Train/Samples/train_loss"), "Train_Samples_train_loss.csv");
  BOOST_CHECK_EQUAL(zt::csv_monitor_file_name("a b/c"), "a_b_c.csv");
  BOOST_CHECK_EQUAL(zt::csv_monitor_column("Train/Samples/train_loss"), "train_loss");
  BOOST_CHECK_EQUAL(zt::csv_monitor_column("lr"), "lr");

  zt::test::TempDir temp;
  const std::string dir = temp.file("logs/job");
  {
    zt::CsvMonitor csv(dir, "csv_monitor.output_path", std::nullopt);
    csv.write(8, {{"Train/Samples/lr", 0.1}, {"Train/Samples/train_loss", 2.5}});
    csv.write(16, {{"Train/Samples/lr", 0.0}, {"Train/Samples/train_loss", 1.0 / 3.0}});
    csv.write(24, {{"Train/Samples/lr", 1e-5}});
  }
  BOOST_CHECK_EQUAL(read_text(dir + "/Train_Samples_lr.csv"), "step,lr\n8,0.1\n16,0\n24,1e-05\n");
  BOOST_CHECK_EQUAL(read_text(dir + "/Train_Samples_train_loss.csv"),
                    "step,train_loss\n8,2.5\n16,0.3333333333333333\n");
  // Resumed after the checkpoint at 16: the row of 24 goes, then the run appends its own.
  {
    zt::CsvMonitor csv(dir, "csv_monitor.output_path", 16);
    csv.write(24, {{"Train/Samples/lr", 2e-5}});
  }
  BOOST_CHECK_EQUAL(read_text(dir + "/Train_Samples_lr.csv"), "step,lr\n8,0.1\n16,0\n24,2e-05\n");
  // A new run into the same directory starts each file it writes afresh.
  {
    zt::CsvMonitor csv(dir, "csv_monitor.output_path", std::nullopt);
    csv.write(8, {{"Train/Samples/lr", 0.5}});
  }
  BOOST_CHECK_EQUAL(read_text(dir + "/Train_Samples_lr.csv"), "step,lr\n8,0.5\n");
}

BOOST_AUTO_TEST_CASE(unwritable_directory_names_the_key) {
  zt::test::TempDir temp;
  std::ofstream(temp.file("file")) << "x";
  const std::string below_a_file = temp.file("file/sub");  // a directory cannot be made under a file
  zt::test::check_error([&] { zt::CsvMonitor(below_a_file, "csv_monitor.output_path", std::nullopt); },
                        "csv_monitor.output_path: cannot create the directory " + below_a_file);
  zt::test::check_error([&] { zt::TensorBoardWriter(below_a_file, "tensorboard.output_path"); },
                        "tensorboard.output_path: cannot create the directory " + below_a_file);
}

BOOST_AUTO_TEST_SUITE_END()
