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
#include "core/safetensors.h"

namespace voxd {
namespace {

namespace fs = std::filesystem;

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

std::string le64(uint64_t value) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(value >> (8 * i));
  return out;
}

// A safetensors file with `header` used verbatim (no padding) followed by `data`.
std::string raw_file(const std::string& header, const std::string& data) {
  return le64(header.size()) + header + data;
}

// Contiguous bytes of a host tensor.
std::string tensor_bytes(const Tensor& t) {
  const Tensor c = t.to_host_contiguous(t.dtype());
  return std::string(static_cast<const char*>(c.raw_data()), c.nbytes());
}

bool points_into(const SafetensorsFile& file, const Tensor& t) {
  const auto* p = static_cast<const uint8_t*>(t.raw_data());
  const auto bytes = file.file_bytes();
  return p >= bytes.data() && p <= bytes.data() + bytes.size();
}

Tensor iota(const Shape& shape, DType dtype, float scale = 1.0f) {
  std::vector<float> values(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < values.size(); ++i) values[i] = (static_cast<float>(i) - 3.0f) * scale;
  return Tensor::from_vector(shape, values).to_host_contiguous(dtype);
}

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static int counter = 0;
    dir_ = fs::temp_directory_path() /
           ("voxd-safetensors-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // Writes `bytes` to a file, opens it and expects a voxd::Error whose message contains the path
  // and every one of `parts`.
  void expect_open_error(const std::string& bytes, const std::vector<std::string>& parts,
                         const std::string& name = "bad.safetensors") {
    const std::string file = path(name);
    write_bytes(file, bytes);
    try {
      SafetensorsFile::open(file);
      ADD_FAILURE() << "opened without error; expected " << ::testing::PrintToString(parts);
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(file), std::string::npos) << message;
      for (const std::string& part : parts) {
        EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
      }
    }
  }

  fs::path dir_;
};

TEST_F(SafetensorsTest, RoundTripsEveryDtypeRankAndMetadata) {
  std::map<std::string, Tensor> tensors = {
      {"rank0", iota({}, DType::F32)},
      {"rank1", iota({5}, DType::F32)},
      {"rank2", iota({2, 3}, DType::F32, 0.5f)},
      {"rank3", iota({2, 1, 3}, DType::F32)},
      {"rank4", iota({2, 2, 1, 3}, DType::F32)},
      {"half", iota({3}, DType::F16, 0.25f)},
      {"bfloat", iota({7}, DType::BF16)},
      {"int32", iota({2, 2}, DType::I32)},
      {"int64", Tensor::from_vector({3}, std::vector<int64_t>{INT64_MIN, 0, INT64_MAX})},
      {"empty", Tensor::empty({0}, DType::F32)},
      {"empty_middle", Tensor::empty({3, 0, 2}, DType::I64)},
  };
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"note", "ünïcode"}};
  const std::string file = path("all.safetensors");
  write_safetensors(file, tensors, metadata);

  const std::string bytes = read_bytes(file);
  uint64_t header_size = 0;
  std::memcpy(&header_size, bytes.data(), 8);
  EXPECT_EQ(header_size % 8, 0u);

  const auto st = SafetensorsFile::open(file);
  EXPECT_EQ(st->describe(), "safetensors file " + file);
  EXPECT_EQ(st->metadata(), metadata);
  std::vector<std::string> expected_names;
  size_t expected_total = 0;
  for (const auto& [name, tensor] : tensors) {
    expected_names.push_back(name);
    expected_total += tensor.nbytes();
  }
  EXPECT_EQ(st->names(), expected_names);
  EXPECT_EQ(st->total_bytes(), expected_total);
  for (const auto& [name, tensor] : tensors) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(st->contains(name));
    const TensorInfo info = st->info(name);
    EXPECT_EQ(info.dtype, tensor.dtype());
    EXPECT_EQ(info.shape, tensor.shape());
    EXPECT_EQ(info.nbytes, tensor.nbytes());
    EXPECT_EQ(info.offset % dtype_size(info.dtype), 0u);
    EXPECT_GE(info.offset, 8 + header_size);
    const Tensor got = st->get(name);
    EXPECT_EQ(got.dtype(), tensor.dtype());
    EXPECT_EQ(got.shape(), tensor.shape());
    EXPECT_TRUE(got.device().is_cpu());
    EXPECT_TRUE(points_into(*st, got)) << "expected a zero-copy view";
    EXPECT_EQ(tensor_bytes(got), tensor_bytes(tensor));
  }
  EXPECT_FALSE(st->contains("missing"));
}

TEST_F(SafetensorsTest, WritesNonContiguousTensorsContiguously) {
  const Tensor base = iota({3, 4}, DType::F32);
  const Tensor transposed = base.transpose(0, 1);
  const Tensor narrowed = base.narrow(1, 1, 2);
  const std::string file = path("strided.safetensors");
  write_safetensors(file, {{"t", transposed}, {"n", narrowed}});
  const auto st = SafetensorsFile::open(file);
  EXPECT_EQ(st->get("t").shape(), (Shape{4, 3}));
  EXPECT_EQ(st->get("t").to_float_vector(), transposed.to_float_vector());
  EXPECT_EQ(st->get("n").to_float_vector(), narrowed.to_float_vector());
}

TEST_F(SafetensorsTest, OverwritesExistingFileAndLeavesNoTemporaries) {
  const std::string file = path("w.safetensors");
  write_safetensors(file, {{"a", iota({4}, DType::F32)}});
  write_safetensors(file, {{"b", iota({2}, DType::I32)}});
  const auto st = SafetensorsFile::open(file);
  EXPECT_EQ(st->names(), std::vector<std::string>{"b"});
  size_t entries = 0;
  for (const auto& entry : fs::directory_iterator(dir_)) {
    (void)entry;
    ++entries;
  }
  EXPECT_EQ(entries, 1u);
}

TEST_F(SafetensorsTest, WriteErrorsNameTheFileAndTensor) {
  const std::string missing_dir = path("no/such/dir/x.safetensors");
  try {
    write_safetensors(missing_dir, {{"a", iota({4}, DType::F32)}});
    ADD_FAILURE() << "wrote into a missing directory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(missing_dir), std::string::npos) << e.what();
  }
  const std::string file = path("x.safetensors");
  for (const auto& [name, tensor] : std::vector<std::pair<std::string, Tensor>>{
           {"__metadata__", iota({1}, DType::F32)}, {"undefined", Tensor()}}) {
    try {
      write_safetensors(file, {{name, tensor}});
      ADD_FAILURE() << "accepted " << name;
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(file), std::string::npos) << message;
      EXPECT_NE(message.find("'" + name + "'"), std::string::npos) << message;
    }
  }
  EXPECT_FALSE(fs::exists(file));
}

TEST_F(SafetensorsTest, ReadsFileWrittenByPythonTool) {
  const auto st = SafetensorsFile::open(std::string(VOXD_SOURCE_DIR) +
                                        "/tests/fixtures/core/python_written.safetensors");
  EXPECT_EQ(st->metadata(),
            (std::map<std::string, std::string>{{"format", "pt"}, {"voice", "tiny"}}));
  EXPECT_EQ(st->names(), (std::vector<std::string>{"empty", "f16", "f32", "i32", "i64", "one"}));

  const Tensor f32 = st->get("f32");
  EXPECT_EQ(f32.dtype(), DType::F32);
  EXPECT_EQ(f32.shape(), (Shape{2, 3, 4}));
  const std::vector<float> values = f32.to_float_vector();
  for (size_t i = 0; i < values.size(); ++i)
    EXPECT_EQ(values[i], static_cast<float>(i) * 0.25f - 1);

  const Tensor f16 = st->get("f16");
  EXPECT_EQ(f16.dtype(), DType::F16);
  EXPECT_EQ(f16.to_float_vector(), (std::vector<float>{0.5f, -2.0f, 1024.0f, -0.125f}));
  const Tensor i32 = st->get("i32");
  EXPECT_EQ(i32.dtype(), DType::I32);
  EXPECT_EQ(i32.to_int_vector(), (std::vector<int64_t>{1, -2, 3, 2147483647}));
  EXPECT_EQ(st->get("i64").to_int_vector(), (std::vector<int64_t>{INT64_MIN, 0, INT64_MAX}));
  EXPECT_EQ(st->get("one").to_float_vector(), std::vector<float>{3.5f});
  EXPECT_EQ(st->get("empty").shape(), (Shape{0, 3}));
  for (const std::string& name : st->names()) EXPECT_TRUE(points_into(*st, st->get(name))) << name;
}

TEST_F(SafetensorsTest, PythonToolReadsOurFile) {
  ASSERT_EQ(std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1"), 0)
      << "these tests need /usr/bin/python3 with numpy (make deps installs python3-numpy)";
  const std::string file = path("for_python.safetensors");
  write_safetensors(file, {{"a", iota({2, 3}, DType::F32)},
                           {"b", iota({3}, DType::F16)},
                           {"c", Tensor::from_vector({2}, std::vector<int64_t>{-5, 7})}});
  const std::string command =
      "/usr/bin/python3 -c \"import sys; sys.path.insert(0, '" + std::string(VOXD_SOURCE_DIR) +
      "/tools'); import safetensors_io as s; d = s.load('" + file +
      "'); assert d['a'].tolist() == [[-3, -2, -1], [0, 1, 2]], d; "
      "assert d['b'].tolist() == [-3, -2, -1], d; assert d['c'].tolist() == [-5, 7], d\"";
  EXPECT_EQ(std::system(command.c_str()), 0);
}

TEST_F(SafetensorsTest, TensorsOutliveTheFileObject) {
  const std::string file = path("keep.safetensors");
  write_safetensors(file, {{"w", iota({64}, DType::F32)}});
  Tensor w;
  {
    const auto st = SafetensorsFile::open(file);
    w = st->get("w");
  }
  fs::remove(file);
  EXPECT_EQ(w.to_float_vector(), iota({64}, DType::F32).to_float_vector());
}

TEST_F(SafetensorsTest, ZeroCopyViewsPointIntoTheMapping) {
  const std::string file = path("view.safetensors");
  write_safetensors(file, {{"a", iota({3}, DType::F16)}, {"b", iota({5}, DType::F32)}});
  const auto st = SafetensorsFile::open(file);
  for (const std::string& name : st->names()) {
    const Tensor t = st->get(name);
    EXPECT_EQ(static_cast<const uint8_t*>(t.raw_data()),
              st->file_bytes().data() + st->info(name).offset);
    EXPECT_EQ(t.raw_data(), st->get(name).raw_data());
  }
}

TEST_F(SafetensorsTest, MisalignedDataIsReturnedAsAlignedCopy) {
  std::string data(4 * 3 + 2, '\0');
  const float values[3] = {1.5f, -2.25f, 1e30f};
  std::memcpy(data.data() + 2, values, sizeof(values));
  // Offsets [2, 14) with an 8-aligned header put the floats 2 bytes off alignment.
  std::string header = R"({"f":{"dtype":"F32","shape":[3],"data_offsets":[2,14]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  const std::string file = path("misaligned.safetensors");
  write_bytes(file, raw_file(header, data));
  const auto st = SafetensorsFile::open(file);
  const Tensor f = st->get("f");
  EXPECT_FALSE(points_into(*st, f));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(f.raw_data()) % alignof(float), 0u);
  EXPECT_EQ(f.to_float_vector(), std::vector<float>(values, values + 3));

  // An odd header length misaligns everything after it.
  std::string odd = R"({"i":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})";
  if (odd.size() % 2 == 0) odd += ' ';
  const int64_t ints[2] = {INT64_MIN, 42};
  write_bytes(file, raw_file(odd, std::string(reinterpret_cast<const char*>(ints), 16)));
  const auto st2 = SafetensorsFile::open(file);
  const Tensor i = st2->get("i");
  EXPECT_FALSE(points_into(*st2, i));
  EXPECT_EQ(i.to_int_vector(), (std::vector<int64_t>{INT64_MIN, 42}));
}

TEST_F(SafetensorsTest, MissingTensorNamesFileAndTensor) {
  const std::string file = path("m.safetensors");
  write_safetensors(file, {{"w", iota({2}, DType::F32)}});
  const auto st = SafetensorsFile::open(file);
  for (int which = 0; which < 2; ++which) {
    try {
      if (which == 0) st->get("nope");
      if (which == 1) st->info("nope");
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("'nope'"), std::string::npos) << e.what();
    }
  }
}

TEST_F(SafetensorsTest, RejectsShortAndGarbageFiles) {
  expect_open_error("", {"0 bytes", "too short"});
  expect_open_error(std::string("\x05\0\0\0\0\0\0", 7), {"7 bytes", "too short"});
  expect_open_error(le64(1000) + "{}", {"header length 1000", "larger than"});
  expect_open_error(le64(uint64_t{1} << 40), {"exceeds"});
  expect_open_error(le64(~uint64_t{0}), {"exceeds"});
  expect_open_error(le64(100000001) + std::string(64, ' '), {"exceeds"});
  std::mt19937 rng(7);
  std::string garbage(256, '\0');
  for (char& c : garbage) c = static_cast<char>(rng());
  expect_open_error(garbage, {});
  expect_open_error(raw_file("\x01\x02\xff\xfe garbage!!", ""), {"not valid UTF-8 JSON"});
  expect_open_error(raw_file("", ""), {"not valid UTF-8 JSON"});
  const std::string dir_path = path("a_directory");
  fs::create_directories(dir_path);
  try {
    SafetensorsFile::open(dir_path);
    ADD_FAILURE() << "opened a directory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir_path), std::string::npos) << e.what();
  }
  try {
    SafetensorsFile::open(path("does_not_exist"));
    ADD_FAILURE() << "opened a missing file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path("does_not_exist")), std::string::npos);
  }
}

TEST_F(SafetensorsTest, RejectsMalformedHeaders) {
  const std::string f32x2 = R"("dtype":"F32","shape":[2],"data_offsets":[0,8])";
  const std::string data8(8, '\0');
  struct Case {
    std::string header;
    std::string data;
    std::vector<std::string> parts;
  };
  const std::vector<Case> cases = {
      {"{garbage", "", {"not valid UTF-8 JSON"}},
      {"{\"a\xff\":1}", "", {"not valid UTF-8 JSON"}},
      {"[1, 2]", "", {"not a JSON object", "array"}},
      {"42", "", {"not a JSON object"}},
      {"\"text\"", "", {"not a JSON object"}},
      {"null", "", {"not a JSON object"}},
      {R"({"w": 5})", "", {"tensor 'w'", "must be a JSON object"}},
      {R"({"w": {"shape":[2],"data_offsets":[0,8]}})",
       data8,
       {"tensor 'w'", "missing field 'dtype'"}},
      {R"({"w": {"dtype":"F32","data_offsets":[0,8]}})",
       data8,
       {"tensor 'w'", "missing field 'shape'"}},
      {R"({"w": {"dtype":"F32","shape":[2]}})",
       data8,
       {"tensor 'w'", "missing field 'data_offsets'"}},
      {R"({"w": {"dtype":3,"shape":[2],"data_offsets":[0,8]}})",
       data8,
       {"tensor 'w'", "dtype must be a string"}},
      {R"({"w": {"dtype":"F64","shape":[1],"data_offsets":[0,8]}})",
       data8,
       {"tensor 'w'", "unknown dtype 'F64'", "F32, F16, BF16, I32, I64"}},
      {R"({"w": {"dtype":"f32","shape":[2],"data_offsets":[0,8]}})",
       data8,
       {"tensor 'w'", "unknown dtype 'f32'"}},
      {R"({"w": {"dtype":"F32","shape":2,"data_offsets":[0,8]}})",
       data8,
       {"tensor 'w'", "shape must be an array"}},
      {R"({"w": {"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})",
       data8,
       {"tensor 'w'", "negative value -2 in shape"}},
      {R"({"w": {"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})",
       data8,
       {"tensor 'w'", "non-negative integers"}},
      {R"({"w": {"dtype":"F32","shape":["2"],"data_offsets":[0,8]}})",
       data8,
       {"tensor 'w'", "non-negative integers"}},
      {R"({"w": {"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})",
       data8,
       {"tensor 'w'", "too large"}},
      {R"({"w": {"dtype":"F32","shape":[9223372036854775808],"data_offsets":[0,8]}})",
       data8,
       {"tensor 'w'", "too large"}},
      {R"({"w": {"dtype":"F32","shape":[0,4294967296,4294967296],"data_offsets":[0,0]}})",
       "",
       {"tensor 'w'", "too large"}},
      {R"({"w": {"dtype":"F32","shape":[2],"data_offsets":[0]}})",
       data8,
       {"tensor 'w'", "data_offsets must be an array [begin, end]"}},
      {R"({"w": {"dtype":"F32","shape":[2],"data_offsets":{"a":1}}})",
       data8,
       {"tensor 'w'", "data_offsets must be"}},
      {R"({"w": {"dtype":"F32","shape":[2],"data_offsets":[8,0]}})",
       data8,
       {"tensor 'w'", "begin > end"}},
      {R"({"w": {"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})",
       data8,
       {"tensor 'w'", "negative value -8 in data_offsets"}},
      {R"({"w": {"dtype":"F32","shape":[4],"data_offsets":[0,16]}})",
       data8,
       {"truncated: tensor 'w' needs bytes [0, 16) but the file has only 8 data bytes"}},
      {R"({"w": {"dtype":"F32","shape":[2],"data_offsets":[18446744073709551607,18446744073709551615]}})",
       data8,
       {"truncated: tensor 'w' needs bytes"}},
      {R"({"w": {"dtype":"F32","shape":[3],"data_offsets":[0,8]}})",
       data8,
       {"tensor 'w'", "hold 8 bytes", "needs 12"}},
      {R"({"w": {"dtype":"F32","shape":[1],"data_offsets":[0,8]}})",
       data8,
       {"tensor 'w'", "hold 8 bytes", "needs 4"}},
      {R"({"a": {"dtype":"F32","shape":[2],"data_offsets":[0,8]}, "b": {"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
       std::string(12, '\0'),
       {"tensors 'a' and 'b' overlap"}},
      {R"({"a": {"dtype":"F32","shape":[2],"data_offsets":[0,8]}, "b": {"dtype":"I64","shape":[1],"data_offsets":[0,8]}})",
       data8,
       {"tensors 'a' and 'b' overlap"}},
      {"{\"w\": {" + f32x2 + "}, \"w\": {" + f32x2 + "}}", data8, {"duplicate tensor name 'w'"}},
      {R"({"w": {"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
       data8,
       {"tensor 'w'", "duplicate key 'dtype'"}},
      {R"({"__metadata__": [1]})", "", {"__metadata__ must be a JSON object"}},
      {R"({"__metadata__": {"k": "a", "k": "b"}})", "", {"__metadata__: duplicate key 'k'"}},
      {R"({"__metadata__": {"k": 1}})", "", {"__metadata__ value for 'k' must be a string"}},
      {"{\"w\": {" + f32x2 + ",\"x\":[[[[[[[[[[[[1]]]]]]]]]]]]}}", data8, {"nested too deeply"}},
      {"{\"w\\n\\u001b[31m\": 5}", "", {"tensor 'w\\x0a\\x1b[31m'"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.header);
    expect_open_error(raw_file(c.header, c.data), c.parts);
  }
}

TEST_F(SafetensorsTest, AcceptsEdgeCasesTheFormatAllows) {
  // Gaps between tensors, trailing data, whitespace, zero-length tensors anywhere, unknown
  // fields, and an empty header object are all fine.
  const std::string header =
      R"( { "b": {"dtype":"I32","shape":[1],"data_offsets":[8,12],"extra":{"x":1}},
            "z": {"dtype":"F16","shape":[0,5],"data_offsets":[4,4]},
            "a": {"dtype":"F32","shape":[],"data_offsets":[0,4]} } )";
  const std::string file = path("edge.safetensors");
  std::string data(20, '\0');
  const float a = 2.5f;
  const int32_t b = -7;
  std::memcpy(data.data(), &a, 4);
  std::memcpy(data.data() + 8, &b, 4);
  write_bytes(file, raw_file(header, data));
  const auto st = SafetensorsFile::open(file);
  EXPECT_EQ(st->get("a").shape(), Shape{});
  EXPECT_EQ(st->get("a").to_float_vector(), std::vector<float>{2.5f});
  EXPECT_EQ(st->get("b").to_int_vector(), std::vector<int64_t>{-7});
  EXPECT_EQ(st->get("z").numel(), 0);
  EXPECT_TRUE(st->metadata().empty());

  write_bytes(file, raw_file("{}", ""));
  EXPECT_TRUE(SafetensorsFile::open(file)->names().empty());
}

TEST_F(SafetensorsTest, RejectsEveryTruncation) {
  const std::string file = path("full.safetensors");
  write_safetensors(file, {{"first", iota({3, 4}, DType::F32)}, {"last", iota({5}, DType::F16)}},
                    {{"k", "v"}});
  const std::string bytes = read_bytes(file);
  uint64_t header_size = 0;
  std::memcpy(&header_size, bytes.data(), 8);
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    SCOPED_TRACE(cut);
    std::vector<std::string> parts;
    if (cut < 8) parts = {"too short"};
    if (cut >= 8 && cut < 8 + header_size) parts = {"larger than"};
    if (cut >= 8 + header_size) parts = {"truncated: tensor '"};
    expect_open_error(bytes.substr(0, cut), parts, "cut.safetensors");
  }
}

// Corrupts a valid file thousands of ways: every variant must open into self-consistent tensors
// or throw voxd::Error naming the file. Under ASan this catches any out-of-bounds read.
TEST_F(SafetensorsTest, RandomCorruptionNeverCrashes) {
  const std::string source = path("source.safetensors");
  write_safetensors(source,
                    {{"a", iota({2, 3}, DType::F32)},
                     {"b", iota({4}, DType::F16)},
                     {"c", Tensor::from_vector({2}, std::vector<int64_t>{1, 2})},
                     {"d", iota({0, 2}, DType::BF16)},
                     {"e", iota({}, DType::I32)}},
                    {{"format", "pt"}});
  const std::string original = read_bytes(source);
  uint64_t header_size = 0;
  std::memcpy(&header_size, original.data(), 8);
  const std::string file = path("fuzz.safetensors");
  std::mt19937_64 rng(20240611);
  int opened = 0, rejected = 0;
  for (int variant = 0; variant < 4000; ++variant) {
    std::string bytes = original;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < flips; ++i) {
      // Mostly hit the length and header, where the parsing is.
      const size_t limit = rng() % 4 != 0 ? 8 + header_size : bytes.size();
      const size_t at = rng() % limit;
      const int mode = static_cast<int>(rng() % 3);
      if (mode == 0) bytes[at] = static_cast<char>(rng());
      if (mode == 1) bytes[at] = static_cast<char>(bytes[at] ^ (1 << (rng() % 8)));
      if (mode == 2) bytes[at] = "0123456789[]{},:\"-eE. "[rng() % 22];
    }
    if (rng() % 5 == 0) bytes.resize(rng() % (bytes.size() + 1));
    write_bytes(file, bytes);
    try {
      const auto st = SafetensorsFile::open(file);
      ++opened;
      for (const std::string& name : st->names()) {
        const TensorInfo info = st->info(name);
        ASSERT_EQ(info.nbytes,
                  static_cast<size_t>(shape_numel(info.shape)) * dtype_size(info.dtype));
        ASSERT_LE(info.offset + info.nbytes, bytes.size());
        const Tensor t = st->get(name);
        ASSERT_EQ(t.shape(), info.shape);
        ASSERT_EQ(t.dtype(), info.dtype);
        const std::string copy = tensor_bytes(t);
        ASSERT_EQ(copy, bytes.substr(info.offset, info.nbytes));
      }
    } catch (const Error& e) {
      ++rejected;
      ASSERT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
    }
  }
  EXPECT_GT(opened, 0);
  EXPECT_GT(rejected, 0);
}

}  // namespace
}  // namespace voxd
