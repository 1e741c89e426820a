#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/npy.h"

namespace voxd {
namespace {

namespace fs = std::filesystem;

std::string fixture(const std::string& name) {
  return std::string(VOXD_SOURCE_DIR) + "/tests/fixtures/core/" + name;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// Writes a fresh file: replacing rather than truncating avoids ext4's flush-on-truncate, which
// would make the corruption loops crawl.
void write_bytes(const std::string& path, const std::string& bytes) {
  std::filesystem::remove(path);
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

// A version 1 .npy file with `header` used verbatim followed by `data`.
std::string npy_file(const std::string& header, const std::string& data) {
  std::string out("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  return out + header + data;
}

void expect_error(const std::string& path, const std::vector<std::string>& parts) {
  try {
    read_npy(path);
    ADD_FAILURE() << "read without error; expected " << ::testing::PrintToString(parts);
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(path), std::string::npos) << message;
    for (const std::string& part : parts) {
      EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
    }
  }
}

std::vector<float> f32_fixture_values(size_t n) {
  std::vector<float> values(n);
  for (size_t i = 0; i < n; ++i) values[i] = static_cast<float>(i) * 0.5f - 100.0f;
  return values;
}

class NpyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static int counter = 0;
    dir_ = fs::temp_directory_path() /
           ("voxd-npy-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  void expect_bytes_error(const std::string& bytes, const std::vector<std::string>& parts) {
    const std::string file = path("bad.npy");
    write_bytes(file, bytes);
    expect_error(file, parts);
  }

  fs::path dir_;
};

TEST_F(NpyTest, ReadsNumpyFloat32Fixtures) {
  const Tensor a = read_npy(fixture("f32_80x10.npy"));
  EXPECT_EQ(a.dtype(), DType::F32);
  EXPECT_EQ(a.shape(), (Shape{80, 10}));
  EXPECT_TRUE(a.is_contiguous());
  EXPECT_EQ(a.to_float_vector(), f32_fixture_values(800));

  const Tensor b = read_npy(fixture("f32_1x80x10.npy"));
  EXPECT_EQ(b.shape(), (Shape{1, 80, 10}));
  EXPECT_EQ(b.to_float_vector(), f32_fixture_values(800));

  for (const char* name : {"f32_v2.npy", "f32_v3.npy"}) {
    const Tensor v = read_npy(fixture(name));
    EXPECT_EQ(v.shape(), (Shape{2, 10})) << name;
    EXPECT_EQ(v.to_float_vector(), f32_fixture_values(20)) << name;
  }

  const Tensor scalar = read_npy(fixture("f32_scalar.npy"));
  EXPECT_EQ(scalar.shape(), Shape{});
  EXPECT_EQ(scalar.to_float_vector(), std::vector<float>{7.0f});
}

TEST_F(NpyTest, TransposesFortranOrderIntoCOrder) {
  const Tensor t = read_npy(fixture("f32_fortran.npy"));
  EXPECT_EQ(t.shape(), (Shape{2, 3, 4}));
  EXPECT_TRUE(t.is_contiguous());
  std::vector<float> expected(24);
  for (size_t i = 0; i < expected.size(); ++i) expected[i] = static_cast<float>(i);
  EXPECT_EQ(t.to_float_vector(), expected);
}

TEST_F(NpyTest, ReadsOtherNumpyDtypes) {
  const Tensor f64 = read_npy(fixture("f64.npy"));
  EXPECT_EQ(f64.dtype(), DType::F32);
  EXPECT_EQ(f64.shape(), (Shape{3, 4}));
  const std::vector<float> values = f64.to_float_vector();
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(values[i], static_cast<float>(static_cast<double>(i) / 3.0)) << i;
  }

  const Tensor f16 = read_npy(fixture("f16.npy"));
  EXPECT_EQ(f16.dtype(), DType::F16);
  EXPECT_EQ(f16.to_float_vector(), (std::vector<float>{0.5f, -2.0f, 1024.0f, -0.125f, 0.0f}));

  const Tensor i32 = read_npy(fixture("i32.npy"));
  EXPECT_EQ(i32.dtype(), DType::I32);
  EXPECT_EQ(i32.to_int_vector(), (std::vector<int64_t>{-2, -1, 0, 1, 2}));

  const Tensor i64 = read_npy(fixture("i64.npy"));
  EXPECT_EQ(i64.dtype(), DType::I64);
  EXPECT_EQ(i64.shape(), (Shape{2, 2}));
  EXPECT_EQ(i64.to_int_vector(), (std::vector<int64_t>{INT64_MIN, 0, 1, INT64_MAX}));
}

TEST_F(NpyTest, RejectsBigEndianAndUnsupportedDtypes) {
  expect_error(fixture("f32_bigendian.npy"), {"big-endian", "'>f4'"});
  expect_error(fixture("u8.npy"), {"unsupported dtype '|u1'", "'<f4'", "'<i8'"});
  const std::string header = "{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }\n";
  expect_bytes_error(npy_file(header, std::string(8, '\0')), {"unsupported dtype '<c8'"});
  const std::string structured =
      "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }\n";
  expect_bytes_error(npy_file(structured, std::string(4, '\0')), {"structured"});
}

TEST_F(NpyTest, RoundTripsThroughWriteNpy) {
  const std::vector<Tensor> tensors = {
      Tensor::from_vector({}, std::vector<float>{1.25f}),
      Tensor::from_vector({3}, std::vector<float>{1, -2, 3}),
      Tensor::from_vector({2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6}),
      Tensor::from_vector({2, 1, 2}, std::vector<float>{1, 2, 3, 4}),
      Tensor::from_vector({1, 2, 1, 2}, std::vector<float>{-1, -2, -3, -4}),
      Tensor::zeros({0, 4}, DType::F32),
      Tensor::from_vector({2, 2}, std::vector<int64_t>{INT64_MIN, -1, 0, INT64_MAX}),
      Tensor::from_vector({2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6}).transpose(0, 1),
  };
  for (size_t i = 0; i < tensors.size(); ++i) {
    SCOPED_TRACE(i);
    const std::string file = path(std::to_string(i) + ".npy");
    write_npy(file, tensors[i]);
    const std::string bytes = read_bytes(file);
    const size_t header_size = static_cast<uint8_t>(bytes[8]) | static_cast<uint8_t>(bytes[9]) << 8;
    EXPECT_EQ((10 + header_size) % 64, 0u);
    EXPECT_EQ(bytes[10 + header_size - 1], '\n');
    const Tensor back = read_npy(file);
    EXPECT_EQ(back.dtype(), tensors[i].dtype());
    EXPECT_EQ(back.shape(), tensors[i].shape());
    if (back.dtype() == DType::F32) {
      EXPECT_EQ(back.to_float_vector(), tensors[i].to_float_vector());
    } else {
      EXPECT_EQ(back.to_int_vector(), tensors[i].to_int_vector());
    }
  }
}

TEST_F(NpyTest, NumpyReadsOurFiles) {
  ASSERT_EQ(std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1"), 0)
      << "these tests need /usr/bin/python3 with numpy (make deps installs python3-numpy)";
  const std::string f = path("f.npy");
  const std::string i = path("i.npy");
  write_npy(f, Tensor::from_vector({2, 1, 2}, std::vector<float>{1, 2, 3, 4.5f}));
  write_npy(i, Tensor::from_vector({3}, std::vector<int64_t>{-1, 0, INT64_MAX}));
  const std::string command =
      "/usr/bin/python3 -c \"import numpy as np; a = np.load('" + f + "'); b = np.load('" + i +
      "'); assert a.dtype == np.float32 and a.shape == (2, 1, 2) and "
      "a.ravel().tolist() == [1, 2, 3, 4.5], a; "
      "assert b.dtype == np.int64 and b.tolist() == [-1, 0, 2**63 - 1], b\"";
  EXPECT_EQ(std::system(command.c_str()), 0);
}

TEST_F(NpyTest, WriteRejectsOtherDtypes) {
  const std::string file = path("h.npy");
  try {
    write_npy(file, Tensor::zeros({2}, DType::F16));
    ADD_FAILURE() << "wrote F16";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("F16"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(file));
}

TEST_F(NpyTest, RejectsBadMagicVersionAndShortFiles) {
  expect_bytes_error("", {"too short"});
  expect_bytes_error("\x93NUM", {"too short"});
  expect_bytes_error("hello world, not numpy at all", {"bad magic"});
  std::string bytes = read_bytes(fixture("f32_80x10.npy"));
  bytes[6] = 4;
  expect_bytes_error(bytes, {"unsupported .npy format version 4.0"});
  expect_error(path("missing.npy"), {"cannot open"});
  expect_error(dir_.string(), {"cannot open"});
}

TEST_F(NpyTest, RejectsEveryTruncation) {
  const std::string bytes = read_bytes(fixture("f32_80x10.npy"));
  const size_t header_end =
      10 + (static_cast<uint8_t>(bytes[8]) | static_cast<uint8_t>(bytes[9]) << 8);
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    SCOPED_TRACE(cut);
    std::vector<std::string> parts;
    if (cut >= 10) parts = {"truncated"};
    if (cut >= header_end) parts = {"truncated", "needs 3200 data bytes"};
    expect_bytes_error(bytes.substr(0, cut), parts);
  }
  expect_bytes_error(bytes + "x", {"1 unexpected bytes after the array data"});
}

TEST_F(NpyTest, RejectsMalformedHeaders) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{'descr': '<f4', 'shape': (1,), }", "lacks"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'extra': 1}",
       "unexpected key 'extra'"},
      {"{'descr': '<f4', 'fortran_order': Maybe, 'shape': (1,), }", "True or False"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (a,), }", "non-negative integers"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }", "non-negative integers"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", "too large"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }",
       "too large"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (0, 4294967296, 4294967296), }",
       "too large"},
      {"{'descr': '<f4, 'fortran_order': False, 'shape': (1,), }", "expected '}'"},
      {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,), }",
       "duplicate key 'descr'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,), } trailing", "after the header"},
      {"['descr', '<f4']", "expected '{'"},
      {"{'descr': '<f4", "unterminated string"},
      {"", "expected '{'"},
  };
  for (const auto& [header, part] : cases) {
    SCOPED_TRACE(header);
    expect_bytes_error(npy_file(header + "\n", std::string(4, '\0')), {"malformed header", part});
  }
  std::string huge = std::string("\x93NUMPY\x02\x00", 8) + std::string("\xff\xff\xff\x7f", 4);
  expect_bytes_error(huge + "{}", {"implausible"});
  std::string v2 = std::string("\x93NUMPY\x02\x00", 8) + std::string("\x00\x10\x00\x00", 4);
  expect_bytes_error(v2 + "{}", {"truncated", "header needs 4096 bytes"});
}

TEST_F(NpyTest, RandomCorruptionNeverCrashes) {
  const std::string original = read_bytes(fixture("f32_1x80x10.npy"));
  const std::string file = path("fuzz.npy");
  std::mt19937_64 rng(99);
  int read = 0, rejected = 0;
  for (int variant = 0; variant < 2000; ++variant) {
    std::string bytes = original;
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int i = 0; i < flips; ++i) {
      const size_t at = rng() % 128;
      const int mode = static_cast<int>(rng() % 2);
      if (mode == 0) bytes[at] = static_cast<char>(rng());
      if (mode == 1) bytes[at] = "0123456789(),:' <>fi248TrueFalse"[rng() % 32];
    }
    if (rng() % 5 == 0) bytes.resize(rng() % (bytes.size() + 1));
    write_bytes(file, bytes);
    try {
      const Tensor t = read_npy(file);
      ++read;
      ASSERT_TRUE(t.is_contiguous());
      ASSERT_EQ(t.to_float_vector().size(), static_cast<size_t>(t.numel()));
    } catch (const Error& e) {
      ++rejected;
      ASSERT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
    }
  }
  EXPECT_GT(read, 0);
  EXPECT_GT(rejected, 0);
}

}  // namespace
}  // namespace voxd
