#include "core/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/file_write.h"

namespace voxd {

using json = nlohmann::json;

struct SafetensorsFile::Mapping {
  Mapping(void* address, size_t size) : address(address), size(size) {}
  ~Mapping() { ::munmap(address, size); }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  void* address;
  size_t size;
};

namespace {

constexpr uint64_t kMaxHeaderBytes = 100u * 1000u * 1000u;
constexpr uint64_t kMaxInt64 = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
// Valid headers nest three deep (header → entry → shape); anything much deeper is garbage.
constexpr int kMaxJsonDepth = 8;
constexpr const char* kMetadataKey = "__metadata__";
constexpr const char* kSupportedDtypes = "F32, F16, BF16, I32, I64";

// `text` with control characters (and, when `ascii_only`, all non-ASCII bytes) escaped, so a
// message built from file contents is printable.
std::string printable(const std::string& text, bool ascii_only) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f || (ascii_only && byte >= 0x80)) {
      out += "\\x";
      out += kHex[byte >> 4];
      out += kHex[byte & 0xf];
    } else {
      out += c;
    }
  }
  return out;
}

std::string quoted(const std::string& name) {
  std::string out = printable(name, false);
  out.insert(out.begin(), '\'');
  out.push_back('\'');
  return out;
}

class Validator {
 public:
  explicit Validator(const std::string& path) : where_("safetensors file " + path) {}

  [[noreturn]] void fail(const std::string& message) const { throw Error(where_ + ": " + message); }
  [[noreturn]] void fail(const std::string& tensor, const std::string& message) const {
    fail("tensor " + quoted(tensor) + ": " + message);
  }

  // Parses the header, rejecting invalid JSON, deep nesting and duplicate keys (which
  // nlohmann::json would otherwise resolve silently by keeping the last).
  json parse_header(const char* begin, const char* end) const {
    std::vector<std::set<std::string>> open_objects;
    std::string entry;
    auto callback = [&](int depth, json::parse_event_t event, json& parsed) {
      switch (event) {
        case json::parse_event_t::object_start:
        case json::parse_event_t::array_start:
          if (depth >= kMaxJsonDepth) fail("header JSON is nested too deeply");
          if (event == json::parse_event_t::object_start) open_objects.emplace_back();
          break;
        case json::parse_event_t::object_end:
          open_objects.pop_back();
          break;
        case json::parse_event_t::key: {
          const std::string& key = parsed.get_ref<const std::string&>();
          const bool fresh = open_objects.back().insert(key).second;
          if (depth == 1) {
            entry = key;
            if (!fresh) fail("duplicate tensor name " + quoted(key));
          } else if (!fresh && entry == kMetadataKey) {
            fail(std::string(kMetadataKey) + ": duplicate key " + quoted(key));
          } else if (!fresh) {
            fail(entry, "duplicate key " + quoted(key));
          }
          break;
        }
        default:
          break;
      }
      return true;
    };
    try {
      return json::parse(begin, end, callback);
    } catch (const json::exception& e) {
      fail("header is not valid UTF-8 JSON: " + printable(e.what(), true));
    }
  }

  std::map<std::string, std::string> parse_metadata(const json& value) const {
    if (!value.is_object()) fail(std::string(kMetadataKey) + " must be a JSON object");
    std::map<std::string, std::string> out;
    for (const auto& [key, item] : value.items()) {
      if (!item.is_string()) {
        fail(std::string(kMetadataKey) + " value for " + quoted(key) + " must be a string, got " +
             item.type_name());
      }
      out[key] = item.get<std::string>();
    }
    return out;
  }

  // Validates one entry against a data section of `data_size` bytes starting at file offset
  // `data_start`.
  TensorInfo parse_entry(const std::string& name, const json& entry, uint64_t data_start,
                         uint64_t data_size) const {
    if (!entry.is_object()) {
      fail(name, std::string("entry must be a JSON object, got ") + entry.type_name());
    }
    TensorInfo info;
    const json& dtype = field(name, entry, "dtype");
    if (!dtype.is_string())
      fail(name, std::string("dtype must be a string, got ") + dtype.type_name());
    const std::string& dtype_text = dtype.get_ref<const std::string&>();
    if (!parse_dtype(dtype_text, &info.dtype)) {
      fail(name, "unknown dtype " + quoted(dtype_text) + " (supported: " + kSupportedDtypes + ")");
    }

    const json& shape = field(name, entry, "shape");
    if (!shape.is_array())
      fail(name, std::string("shape must be an array, got ") + shape.type_name());
    // The product of the non-zero dimensions must fit too: tensor code multiplies them when
    // computing strides even for an empty tensor.
    uint64_t extent = 1;
    bool empty = false;
    bool overflow = false;
    for (const json& dim : shape) {
      const uint64_t size = non_negative(name, dim, "shape");
      info.shape.push_back(static_cast<int64_t>(std::min<uint64_t>(size, kMaxInt64)));
      empty = empty || size == 0;
      overflow = overflow || size > kMaxInt64 ||
                 __builtin_mul_overflow(extent, std::max<uint64_t>(size, 1), &extent);
    }
    uint64_t nbytes = 0;
    overflow = overflow || __builtin_mul_overflow(extent, dtype_size(info.dtype), &nbytes) ||
               nbytes > kMaxInt64;
    if (overflow) fail(name, "shape " + shape_to_string(info.shape) + " is too large");
    if (empty) nbytes = 0;

    const json& offsets = field(name, entry, "data_offsets");
    if (!offsets.is_array() || offsets.size() != 2) {
      fail(name, "data_offsets must be an array [begin, end]");
    }
    const uint64_t begin = non_negative(name, offsets[0], "data_offsets");
    const uint64_t end = non_negative(name, offsets[1], "data_offsets");
    const std::string range = "[" + std::to_string(begin) + ", " + std::to_string(end) + ")";
    if (begin > end) fail(name, "data_offsets " + range + " has begin > end");
    if (end > data_size) {
      fail("truncated: tensor " + quoted(name) + " needs bytes " + range +
           " but the file has only " + std::to_string(data_size) + " data bytes");
    }
    if (end - begin != nbytes) {
      fail(name, "data_offsets " + range + " hold " + std::to_string(end - begin) +
                     " bytes but shape " + shape_to_string(info.shape) + " of " + dtype_text +
                     " needs " + std::to_string(nbytes));
    }
    info.offset = static_cast<size_t>(data_start + begin);
    info.nbytes = static_cast<size_t>(nbytes);
    return info;
  }

  // Rejects tensors whose (non-empty) byte ranges overlap.
  void check_overlaps(const std::map<std::string, TensorInfo>& tensors) const {
    std::vector<std::pair<const std::string*, const TensorInfo*>> order;
    for (const auto& [name, info] : tensors) {
      if (info.nbytes > 0) order.emplace_back(&name, &info);
    }
    std::sort(order.begin(), order.end(),
              [](const auto& a, const auto& b) { return a.second->offset < b.second->offset; });
    for (size_t i = 1; i < order.size(); ++i) {
      const TensorInfo& prev = *order[i - 1].second;
      if (order[i].second->offset < prev.offset + prev.nbytes) {
        fail("tensors " + quoted(*order[i - 1].first) + " and " + quoted(*order[i].first) +
             " overlap");
      }
    }
  }

 private:
  const json& field(const std::string& name, const json& entry, const char* key) const {
    const auto it = entry.find(key);
    if (it == entry.end()) fail(name, std::string("missing field '") + key + "'");
    return *it;
  }

  uint64_t non_negative(const std::string& name, const json& value, const char* what) const {
    if (value.is_number_unsigned()) return value.get<uint64_t>();
    if (value.is_number_integer()) {
      fail(name,
           std::string("negative value ") + std::to_string(value.get<int64_t>()) + " in " + what);
    }
    fail(name, std::string(what) + " must hold non-negative integers, got " + value.type_name());
  }

  std::string where_;
};

uint64_t read_le64(const uint8_t* p) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | p[i];
  return value;
}

std::shared_ptr<const SafetensorsFile::Mapping> map_file(const std::string& path,
                                                         const Validator& check) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) check.fail(std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    check.fail(std::string("cannot stat: ") + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    check.fail("not a regular file");
  }
  const auto size = static_cast<size_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    check.fail("file is " + std::to_string(size) +
               " bytes, too short for the 8-byte header length");
  }
  void* address = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);
  if (address == MAP_FAILED) check.fail(std::string("cannot mmap: ") + std::strerror(err));
  return std::make_shared<const SafetensorsFile::Mapping>(address, size);
}

}  // namespace

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  const Validator check(path);
  std::shared_ptr<const Mapping> mapping = map_file(path, check);
  const auto* bytes = static_cast<const uint8_t*>(mapping->address);
  const uint64_t file_size = mapping->size;

  const uint64_t header_size = read_le64(bytes);
  if (header_size > kMaxHeaderBytes) {
    check.fail("header length " + std::to_string(header_size) + " exceeds the " +
               std::to_string(kMaxHeaderBytes) + "-byte limit");
  }
  if (header_size > file_size - 8) {
    check.fail("header length " + std::to_string(header_size) + " is larger than the " +
               std::to_string(file_size - 8) + " bytes after the length field");
  }
  const char* header_begin = reinterpret_cast<const char*>(bytes) + 8;
  const json header = check.parse_header(header_begin, header_begin + header_size);
  if (!header.is_object()) {
    check.fail(std::string("header is not a JSON object, got ") + header.type_name());
  }

  std::shared_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  const uint64_t data_start = 8 + header_size;
  const uint64_t data_size = file_size - data_start;
  for (const auto& [name, entry] : header.items()) {
    if (name == kMetadataKey) {
      file->metadata_ = check.parse_metadata(entry);
    } else {
      file->tensors_[name] = check.parse_entry(name, entry, data_start, data_size);
    }
  }
  check.check_overlaps(file->tensors_);
  file->mapping_ = std::move(mapping);
  return file;
}

TensorInfo SafetensorsFile::info(const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) throw Error(describe() + ": missing tensor " + quoted(name));
  return it->second;
}

Tensor SafetensorsFile::get(const std::string& name) const {
  const TensorInfo tensor = info(name);
  const auto* data = static_cast<const uint8_t*>(mapping_->address) + tensor.offset;
  if (reinterpret_cast<uintptr_t>(data) % dtype_size(tensor.dtype) == 0) {
    // The mapping is read-only; the const_cast only adapts to Tensor's mutable-pointer API.
    return Tensor::borrow(const_cast<uint8_t*>(data), tensor.shape, tensor.dtype, Device::cpu(),
                          mapping_);
  }
  Tensor copy = Tensor::empty(tensor.shape, tensor.dtype);
  if (tensor.nbytes > 0) std::memcpy(copy.raw_data(), data, tensor.nbytes);
  return copy;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& [name, tensor] : tensors_) out.push_back(name);
  return out;
}

size_t SafetensorsFile::total_bytes() const {
  size_t total = 0;
  for (const auto& [name, tensor] : tensors_) total += tensor.nbytes;
  return total;
}

std::span<const uint8_t> SafetensorsFile::file_bytes() const {
  return {static_cast<const uint8_t*>(mapping_->address), mapping_->size};
}

void write_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  const std::string where = "writing safetensors file " + path;
  std::vector<std::pair<std::string, Tensor>> order;
  for (const auto& [name, tensor] : tensors) {
    if (name == kMetadataKey) throw Error(where + ": tensor name " + quoted(name) + " is reserved");
    if (!tensor.defined()) throw Error(where + ": tensor " + quoted(name) + " is undefined");
    if (!tensor.device().is_cpu()) {
      throw Error(where + ": tensor " + quoted(name) + " is on " + tensor.device().to_string() +
                  ", not the host");
    }
    order.emplace_back(name,
                       tensor.is_contiguous() ? tensor : tensor.to_host_contiguous(tensor.dtype()));
  }
  // Larger elements first: every offset is then a multiple of its tensor's element size.
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return dtype_size(a.second.dtype()) > dtype_size(b.second.dtype());
  });

  json header = json::object();
  uint64_t offset = 0;
  for (const auto& [name, tensor] : order) {
    header[name] = {{"dtype", std::string(dtype_name(tensor.dtype()))},
                    {"shape", tensor.shape()},
                    {"data_offsets", {offset, offset + tensor.nbytes()}}};
    offset += tensor.nbytes();
  }
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception& e) {
    throw Error(where + ": " + printable(e.what(), true));
  }
  text.append((8 - text.size() % 8) % 8, ' ');

  uint8_t length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(text.size() >> (8 * i));
  std::vector<ByteChunk> chunks = {{length, sizeof(length)}, {text.data(), text.size()}};
  for (const auto& [name, tensor] : order) {
    if (tensor.nbytes() > 0) chunks.push_back({tensor.raw_data(), tensor.nbytes()});
  }
  write_file_atomically(path, chunks);
}

}  // namespace voxd
