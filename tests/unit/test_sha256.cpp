// Tests of SHA-256 (core/sha256.h) against the FIPS 180-2/180-4 example vectors, split and
// whole updates, and a file hash against coreutils' sha256sum.
#include <boost/test/unit_test.hpp>

#include <cstdio>
#include <string>

#include "core/sha256.h"
#include "test_util.h"

BOOST_AUTO_TEST_SUITE(sha256)

BOOST_AUTO_TEST_CASE(fips_vectors) {
  BOOST_TEST(zt::sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  BOOST_TEST(zt::sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  BOOST_TEST(zt::sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
             "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  BOOST_TEST(zt::sha256_hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmno"
                            "ijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu") ==
             "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  BOOST_TEST(zt::sha256_hex(std::string(1000000, 'a')) ==
             "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// The same digest whatever the update boundaries (partial blocks, exact blocks, single bytes).
BOOST_AUTO_TEST_CASE(split_updates) {
  std::string message;
  for (int i = 0; i < 300; ++i) message += static_cast<char>('a' + i % 26);
  const std::string whole = zt::sha256_hex(message);
  for (size_t step : {1u, 3u, 55u, 56u, 63u, 64u, 65u, 129u}) {
    zt::Sha256 hasher;
    for (size_t at = 0; at < message.size(); at += step) hasher.update(std::string_view(message).substr(at, step));
    BOOST_TEST(hasher.hex_digest() == whole, "update step " << step);
  }
}

BOOST_AUTO_TEST_CASE(file_matches_sha256sum) {
  zt::test::TempDir dir;
  std::string content;
  for (int i = 0; i < 200000; ++i) content += static_cast<char>((i * 7919) % 251);
  const std::string path = dir.write("blob.bin", content);
  BOOST_TEST(zt::sha256_file_hex(path) == zt::sha256_hex(content));
  std::FILE* pipe = popen(("sha256sum '" + path + "'").c_str(), "r");
  BOOST_REQUIRE(pipe != nullptr);
  char digest[65] = {};
  BOOST_REQUIRE(std::fread(digest, 1, 64, pipe) == 64);
  pclose(pipe);
  BOOST_TEST(zt::sha256_file_hex(path) == std::string(digest));
  zt::test::check_error([&] { zt::sha256_file_hex(dir.file("missing.model")); }, "missing.model");
}

BOOST_AUTO_TEST_CASE(sampled_file_digest) {
  zt::test::TempDir dir;
  // Small files: the whole file's sha256.
  const std::string small = dir.write("small.bin", std::string(200, 'x'));  // <= 4 x 64
  BOOST_TEST(zt::sha256_file_sampled_hex(small, 64, 4) == zt::sha256_file_hex(small));
  // 10000 bytes sampled as 4 blocks of 64 at 0, 3312, 6624 and 9936: a change inside a sampled
  // block (and the last byte) changes the digest, one between blocks does not, nor does the
  // digest depend on anything but the content.
  std::string content;
  for (int i = 0; i < 10000; ++i) content += static_cast<char>((i * 7919) % 251);
  const std::string a = dir.write("a.bin", content), same = dir.write("same.bin", content);
  const std::string digest = zt::sha256_file_sampled_hex(a, 64, 4);
  BOOST_TEST(digest != zt::sha256_file_hex(a));
  BOOST_TEST(zt::sha256_file_sampled_hex(same, 64, 4) == digest);
  for (const size_t at : {size_t{10}, size_t{3320}, size_t{9999}}) {
    std::string changed = content;
    changed[at] = static_cast<char>(changed[at] ^ 1);
    BOOST_TEST(zt::sha256_file_sampled_hex(dir.write("changed.bin", changed), 64, 4) != digest, "byte " << at);
  }
  std::string between = content;
  between[2000] = static_cast<char>(between[2000] ^ 1);
  BOOST_TEST(zt::sha256_file_sampled_hex(dir.write("between.bin", between), 64, 4) == digest);
  zt::test::check_error([&] { zt::sha256_file_sampled_hex(dir.file("missing.bin")); }, "missing.bin");
}

BOOST_AUTO_TEST_SUITE_END()
