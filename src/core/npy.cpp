#include "core/npy.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>

#include "core/error.h"
#include "core/file_write.h"

namespace voxd {

static_assert(std::endian::native == std::endian::little, "voxd assumes a little-endian host");

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;
// numpy itself refuses headers over 10 000 bytes by default; this only bounds garbage.
constexpr uint32_t kMaxHeaderBytes = 1u << 20;
constexpr const char* kSupported =
    "supported: little-endian '<f4' float32, '<f2' float16, '<f8' float64 (read as F32), "
    "'<i4' int32, '<i8' int64";

// The parsed dictionary of a .npy header.
struct Header {
  std::string descr;
  bool fortran_order = false;
  Shape shape;
};

// Parser for the Python dict literal numpy writes, e.g.
// {'descr': '<f4', 'fortran_order': False, 'shape': (80, 10), }
class HeaderParser {
 public:
  HeaderParser(const std::string& text, const std::string& where) : text_(text), where_(where) {}

  Header parse() {
    Header header;
    bool seen_descr = false, seen_order = false, seen_shape = false;
    expect('{');
    while (!consume('}')) {
      const std::string key = string_literal();
      expect(':');
      if (key == "descr") {
        if (peek() == '[')
          fail("structured dtypes are not supported (" + std::string(kSupported) + ")");
        mark(seen_descr, key);
        header.descr = string_literal();
      } else if (key == "fortran_order") {
        mark(seen_order, key);
        header.fortran_order = boolean();
      } else if (key == "shape") {
        mark(seen_shape, key);
        header.shape = tuple();
      } else {
        fail("unexpected key '" + key + "'");
      }
      if (!consume(',')) {
        expect('}');
        break;
      }
    }
    skip_space();
    if (pos_ != text_.size()) fail("unexpected text after the header dictionary");
    if (!seen_descr || !seen_order || !seen_shape) {
      fail("header lacks one of 'descr', 'fortran_order', 'shape'");
    }
    return header;
  }

 private:
  [[noreturn]] void fail(const std::string& message) const {
    throw Error(where_ + ": malformed header: " + message);
  }

  void mark(bool& seen, const std::string& key) const {
    if (seen) fail("duplicate key '" + key + "'");
    seen = true;
  }

  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  char peek() {
    skip_space();
    return pos_ < text_.size() ? text_[pos_] : '\0';
  }
  bool consume(char c) {
    if (peek() != c) return false;
    ++pos_;
    return true;
  }
  void expect(char c) {
    if (!consume(c)) fail(std::string("expected '") + c + "' at byte " + std::to_string(pos_));
  }

  std::string string_literal() {
    const char quote = peek();
    if (quote != '\'' && quote != '"') fail("expected a string at byte " + std::to_string(pos_));
    const size_t end = text_.find(quote, pos_ + 1);
    if (end == std::string::npos) fail("unterminated string");
    std::string out = text_.substr(pos_ + 1, end - pos_ - 1);
    pos_ = end + 1;
    return out;
  }

  bool boolean() {
    skip_space();
    for (const auto& [word, value] : {std::pair{"True", true}, std::pair{"False", false}}) {
      const size_t n = std::strlen(word);
      if (text_.compare(pos_, n, word) == 0) {
        pos_ += n;
        return value;
      }
    }
    fail("fortran_order must be True or False");
  }

  Shape tuple() {
    Shape shape;
    expect('(');
    while (!consume(')')) {
      skip_space();
      uint64_t value = 0;
      size_t digits = 0;
      while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
        if (__builtin_mul_overflow(value, 10u, &value) ||
            __builtin_add_overflow(value, static_cast<uint64_t>(text_[pos_] - '0'), &value) ||
            value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          fail("shape dimension too large");
        }
        ++pos_;
        ++digits;
      }
      if (digits == 0) fail("shape must be a tuple of non-negative integers");
      if (pos_ < text_.size() && text_[pos_] == 'L') ++pos_;
      shape.push_back(static_cast<int64_t>(value));
      if (!consume(',')) {
        expect(')');
        break;
      }
    }
    return shape;
  }

  const std::string& text_;
  const std::string& where_;
  size_t pos_ = 0;
};

// How a descr is stored in the file and what it becomes in memory.
struct Element {
  size_t file_size;
  DType dtype;
  bool from_f64;
};

Element element_for(const std::string& descr, const std::string& where) {
  if (descr.size() >= 2 && descr[0] == '>') {
    throw Error(where + ": big-endian data ('" + descr + "') is not supported; save it with " +
                "arr.astype(arr.dtype.newbyteorder('<')) (" + kSupported + ")");
  }
  if (descr == "<f4") return {4, DType::F32, false};
  if (descr == "<f2") return {2, DType::F16, false};
  if (descr == "<f8") return {8, DType::F32, true};
  if (descr == "<i4") return {4, DType::I32, false};
  if (descr == "<i8") return {8, DType::I64, false};
  throw Error(where + ": unsupported dtype '" + descr + "' (" + kSupported + ")");
}

void read_exact(std::ifstream& in, void* dst, size_t bytes, const std::string& where,
                const char* what) {
  if (bytes > 0 && !in.read(static_cast<char*>(dst), static_cast<std::streamsize>(bytes))) {
    throw Error(where + ": truncated while reading " + what);
  }
}

}  // namespace

Tensor read_npy(const std::string& path) {
  const std::string where = "npy file " + path;
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) {
    throw Error(where + ": cannot open: not a readable regular file");
  }
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw Error(where + ": cannot open");
  const auto file_size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);

  char magic[kMagicSize + 2];
  if (file_size < sizeof(magic)) {
    throw Error(where + ": file is " + std::to_string(file_size) + " bytes, too short for a .npy");
  }
  read_exact(in, magic, sizeof(magic), where, "the magic");
  if (std::memcmp(magic, kMagic, kMagicSize) != 0) {
    throw Error(where + ": bad magic, not a .npy file");
  }
  const int major = static_cast<unsigned char>(magic[6]);
  const int minor = static_cast<unsigned char>(magic[7]);
  if (major < 1 || major > 3) {
    throw Error(where + ": unsupported .npy format version " + std::to_string(major) + "." +
                std::to_string(minor) + " (supported: 1, 2, 3)");
  }
  uint8_t length_bytes[4] = {0, 0, 0, 0};
  const size_t length_size = major == 1 ? 2 : 4;
  read_exact(in, length_bytes, length_size, where, "the header length");
  uint32_t header_size = 0;
  for (size_t i = length_size; i-- > 0;) header_size = (header_size << 8) | length_bytes[i];
  const uint64_t data_start = sizeof(magic) + length_size + header_size;
  if (header_size > kMaxHeaderBytes) {
    throw Error(where + ": header length " + std::to_string(header_size) + " is implausible");
  }
  if (data_start > file_size) {
    throw Error(where + ": truncated: header needs " + std::to_string(header_size) +
                " bytes but the file ends first");
  }
  std::string text(header_size, '\0');
  read_exact(in, text.data(), header_size, where, "the header");
  const Header header = HeaderParser(text, where).parse();
  const Element element = element_for(header.descr, where);

  // Shapes whose non-zero dimensions multiply past int64 are rejected even when empty, since
  // stride computations multiply them.
  uint64_t extent = 1;
  bool overflow = false;
  for (const int64_t d : header.shape) {
    overflow = overflow || __builtin_mul_overflow(extent, std::max<uint64_t>(d, 1), &extent);
  }
  uint64_t data_bytes = 0;
  overflow = overflow || __builtin_mul_overflow(extent, element.file_size, &data_bytes) ||
             data_bytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  if (overflow) {
    throw Error(where + ": malformed header: shape " + shape_to_string(header.shape) +
                " is too large");
  }
  const uint64_t numel = static_cast<uint64_t>(shape_numel(header.shape));
  data_bytes = numel * element.file_size;
  const uint64_t available = file_size - data_start;
  if (available < data_bytes) {
    throw Error(where + ": truncated: shape " + shape_to_string(header.shape) + " of '" +
                header.descr + "' needs " + std::to_string(data_bytes) +
                " data bytes but the file has only " + std::to_string(available));
  }
  if (available > data_bytes) {
    throw Error(where + ": " + std::to_string(available - data_bytes) +
                " unexpected bytes after the array data");
  }

  // Fortran order stores the transpose in C order: read it as such, then permute back.
  Shape stored = header.shape;
  if (header.fortran_order) std::reverse(stored.begin(), stored.end());
  Tensor tensor = Tensor::empty(stored, element.dtype);
  if (element.from_f64) {
    std::vector<double> values(numel);
    read_exact(in, values.data(), data_bytes, where, "the data");
    float* out = tensor.data<float>();
    for (size_t i = 0; i < numel; ++i) out[i] = static_cast<float>(values[i]);
  } else {
    read_exact(in, tensor.raw_data(), data_bytes, where, "the data");
  }
  if (!header.fortran_order || tensor.dim() < 2) return tensor;
  std::vector<int64_t> order(static_cast<size_t>(tensor.dim()));
  std::iota(order.rbegin(), order.rend(), 0);
  return tensor.permute(order).to_host_contiguous(element.dtype);
}

void write_npy(const std::string& path, const Tensor& tensor) {
  const std::string where = "writing npy file " + path;
  if (!tensor.defined()) throw Error(where + ": tensor is undefined");
  if (!tensor.device().is_cpu()) {
    throw Error(where + ": tensor is on " + tensor.device().to_string() + ", not the host");
  }
  if (tensor.dtype() != DType::F32 && tensor.dtype() != DType::I64) {
    throw Error(where + ": dtype " + std::string(dtype_name(tensor.dtype())) +
                " is not supported (supported: F32, I64)");
  }
  const Tensor data = tensor.is_contiguous() ? tensor : tensor.to_host_contiguous(tensor.dtype());

  std::string shape = "(";
  for (size_t i = 0; i < data.shape().size(); ++i) {
    shape += (i ? ", " : "") + std::to_string(data.shape()[i]);
  }
  shape += data.shape().size() == 1 ? ",)" : ")";
  std::string text = std::string("{'descr': '") + (data.dtype() == DType::F32 ? "<f4" : "<i8") +
                     "', 'fortran_order': False, 'shape': " + shape + ", }";

  // Pad with spaces and a final newline so the data starts on a 64-byte boundary.
  const size_t length_size = text.size() + 64 <= std::numeric_limits<uint16_t>::max() ? 2 : 4;
  const size_t preamble = kMagicSize + 2 + length_size;
  text.append((64 - (preamble + text.size() + 1) % 64) % 64, ' ');
  text += '\n';

  std::string prefix(kMagic, kMagicSize);
  prefix += static_cast<char>(length_size == 2 ? 1 : 2);
  prefix += '\0';
  for (size_t i = 0; i < length_size; ++i) prefix += static_cast<char>(text.size() >> (8 * i));
  write_file_atomically(path, {{prefix.data(), prefix.size()},
                               {text.data(), text.size()},
                               {data.raw_data(), data.nbytes()}});
}

}  // namespace voxd
