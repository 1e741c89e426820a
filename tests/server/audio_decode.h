// Decodes audio held in memory with libsndfile, and base64, for tests of what the server encodes.
#pragma once

#include <sndfile.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace voxd::server::test {

// The bytes that padded base64 `text` (RFC 4648, section 4) stands for; empty for text that is
// not that: a length not a multiple of 4, a character outside the alphabet, '=' but at the end.
inline std::string base64_decode(const std::string& text) {
  constexpr std::string_view kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  if (text.size() % 4 != 0) return {};
  const size_t padding = text.ends_with("==") ? 2 : text.ends_with('=') ? 1 : 0;
  std::string bytes;
  for (size_t at = 0; at < text.size(); at += 4) {
    uint32_t group = 0;
    for (size_t k = 0; k < 4; ++k) {
      const bool pad = at + k >= text.size() - padding;
      const size_t value = pad ? 0 : kAlphabet.find(text[at + k]);
      if (value == std::string_view::npos) return {};
      group = group << 6 | static_cast<uint32_t>(value);
    }
    for (int shift = 16; shift >= 0; shift -= 8) bytes.push_back(static_cast<char>(group >> shift));
  }
  bytes.resize(bytes.size() - padding);
  return bytes;
}

struct Decoded {
  bool ok = false;
  std::string error;
  int rate = 0;
  int channels = 0;
  std::vector<short> shorts;
  std::vector<float> floats;
};

// Reads a file held in memory with libsndfile.
class MemoryReader {
 public:
  explicit MemoryReader(const std::string& bytes) : bytes_(bytes) {}
  static SF_VIRTUAL_IO io() {
    SF_VIRTUAL_IO v{};
    v.get_filelen = [](void* s) { return static_cast<sf_count_t>(self(s).bytes_.size()); };
    v.seek = [](sf_count_t offset, int whence, void* s) -> sf_count_t {
      MemoryReader& r = self(s);
      sf_count_t target = offset;
      if (whence == SEEK_CUR) target += r.position_;
      if (whence == SEEK_END) target += static_cast<sf_count_t>(r.bytes_.size());
      if (target < 0 || target > static_cast<sf_count_t>(r.bytes_.size())) return -1;
      return r.position_ = target;
    };
    v.read = [](void* ptr, sf_count_t count, void* s) -> sf_count_t {
      MemoryReader& r = self(s);
      const sf_count_t n = std::min(count, static_cast<sf_count_t>(r.bytes_.size()) - r.position_);
      if (n <= 0) return 0;
      std::memcpy(ptr, r.bytes_.data() + r.position_, static_cast<size_t>(n));
      r.position_ += n;
      return n;
    };
    v.write = [](const void*, sf_count_t, void*) -> sf_count_t { return 0; };
    v.tell = [](void* s) { return self(s).position_; };
    return v;
  }

 private:
  static MemoryReader& self(void* s) { return *static_cast<MemoryReader*>(s); }
  const std::string& bytes_;
  sf_count_t position_ = 0;
};

// Decodes to floats, and to 16-bit integers when `as_shorts`, reading until the data ends
// (streamed files may not state their length). `raw_rate` > 0 reads headerless 16-bit PCM.
inline Decoded decode(const std::string& bytes, bool as_shorts, int raw_rate = 0) {
  Decoded d;
  MemoryReader reader(bytes);
  SF_VIRTUAL_IO io = MemoryReader::io();
  SF_INFO info{};
  if (raw_rate > 0) {
    info.samplerate = raw_rate;
    info.channels = 1;
    info.format = SF_FORMAT_RAW | SF_FORMAT_PCM_16 | SF_ENDIAN_LITTLE;
  }
  SNDFILE* file = sf_open_virtual(&io, SFM_READ, &info, &reader);
  if (file == nullptr) {
    d.error = sf_strerror(nullptr);
    return d;
  }
  d.rate = info.samplerate;
  d.channels = info.channels;
  constexpr sf_count_t kBlock = 4096;
  for (;;) {
    sf_count_t got = 0;
    if (as_shorts) {
      const size_t at = d.shorts.size();
      d.shorts.resize(at + kBlock);
      got = sf_readf_short(file, d.shorts.data() + at, kBlock);
      d.shorts.resize(at + static_cast<size_t>(std::max<sf_count_t>(got, 0)));
    } else {
      const size_t at = d.floats.size();
      d.floats.resize(at + kBlock);
      got = sf_readf_float(file, d.floats.data() + at, kBlock);
      d.floats.resize(at + static_cast<size_t>(std::max<sf_count_t>(got, 0)));
    }
    if (got <= 0) break;
  }
  sf_close(file);
  d.ok = true;
  return d;
}

}  // namespace voxd::server::test
