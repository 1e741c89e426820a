#include "tools/wav.h"

#include <bit>
#include <cstring>
#include <fstream>
#include <iterator>

#include "core/error.h"

namespace voxd::tools {
namespace {

void put_u32(uint8_t* at, uint32_t value) {
  for (int i = 0; i < 4; ++i) at[i] = static_cast<uint8_t>(value >> (8 * i));
}

uint32_t get_u32(const std::string& bytes, size_t at) {
  uint32_t value = 0;
  for (int i = 3; i >= 0; --i) value = value << 8 | static_cast<uint8_t>(bytes[at + i]);
  return value;
}

uint16_t get_u16(const std::string& bytes, size_t at) {
  return static_cast<uint16_t>(static_cast<uint8_t>(bytes[at]) | static_cast<uint8_t>(bytes[at + 1])
                                                                     << 8);
}

void put_u16(uint8_t* at, uint16_t value) {
  at[0] = static_cast<uint8_t>(value);
  at[1] = static_cast<uint8_t>(value >> 8);
}

}  // namespace

std::array<uint8_t, 44> wav_header(size_t samples, int sample_rate) {
  constexpr uint16_t kChannels = 1, kBits = 16, kBlockAlign = kChannels * kBits / 8;
  if (samples > (UINT32_MAX - 36) / kBlockAlign) {
    throw Error("WAV data of " + std::to_string(samples) + " samples exceeds 4 GiB");
  }
  const auto data_bytes = static_cast<uint32_t>(samples * kBlockAlign);
  std::array<uint8_t, 44> header{
      'R', 'I', 'F', 'F', 0, 0, 0, 0, 'W', 'A', 'V', 'E', 'f', 'm', 't', ' ', 0,   0,   0, 0, 0, 0,
      0,   0,   0,   0,   0, 0, 0, 0, 0,   0,   0,   0,   0,   0,   'd', 'a', 't', 'a', 0, 0, 0, 0};
  put_u32(&header[4], 36 + data_bytes);
  put_u32(&header[16], 16);
  put_u16(&header[20], 1);  // PCM
  put_u16(&header[22], kChannels);
  put_u32(&header[24], static_cast<uint32_t>(sample_rate));
  put_u32(&header[28], static_cast<uint32_t>(sample_rate) * kBlockAlign);
  put_u16(&header[32], kBlockAlign);
  put_u16(&header[34], kBits);
  put_u32(&header[40], data_bytes);
  return header;
}

void write_wav(const std::string& path, const std::vector<int16_t>& audio, int sample_rate) {
  static_assert(std::endian::native == std::endian::little, "samples are written as stored");
  const std::array<uint8_t, 44> header = wav_header(audio.size(), sample_rate);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(header.data()), header.size());
  out.write(reinterpret_cast<const char*>(audio.data()),
            static_cast<std::streamsize>(audio.size() * sizeof(int16_t)));
  out.close();
  if (!out) throw Error(path + ": cannot write the WAV file");
}

std::vector<int16_t> read_wav(const std::string& path, int& sample_rate) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.eof() && !in) throw Error(path + ": cannot read the WAV file");
  const auto not_wav = [&](const std::string& why) {
    return Error(path + ": not a mono 16-bit PCM WAV file (" + why + ")");
  };
  if (bytes.size() < 12 || bytes.compare(0, 4, "RIFF") != 0 || bytes.compare(8, 4, "WAVE") != 0) {
    throw not_wav("no RIFF/WAVE header");
  }
  bool format_seen = false;
  for (size_t at = 12; at + 8 <= bytes.size();) {
    const std::string id = bytes.substr(at, 4);
    const uint32_t size = get_u32(bytes, at + 4);
    const size_t body = at + 8;
    if (size > bytes.size() - body) throw not_wav("chunk '" + id + "' runs past the end");
    if (id == "fmt ") {
      if (size < 16) throw not_wav("short fmt chunk");
      if (get_u16(bytes, body) != 1 || get_u16(bytes, body + 2) != 1 ||
          get_u16(bytes, body + 14) != 16) {
        throw not_wav("format " + std::to_string(get_u16(bytes, body)) + ", " +
                      std::to_string(get_u16(bytes, body + 2)) + " channels, " +
                      std::to_string(get_u16(bytes, body + 14)) + " bits");
      }
      const uint32_t rate = get_u32(bytes, body + 4);
      if (rate < 1000 || rate > 384000)
        throw not_wav("sample rate " + std::to_string(rate) + " Hz");
      sample_rate = static_cast<int>(rate);
      format_seen = true;
    } else if (id == "data") {
      if (!format_seen) throw not_wav("data before fmt");
      std::vector<int16_t> samples(size / 2);
      static_assert(std::endian::native == std::endian::little, "samples are read as stored");
      std::memcpy(samples.data(), bytes.data() + body, samples.size() * sizeof(int16_t));
      return samples;
    }
    at = body + size + (size & 1);
  }
  throw not_wav("no data chunk");
}

}  // namespace voxd::tools
