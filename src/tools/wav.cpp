#include "tools/wav.h"

#include <bit>
#include <fstream>

#include "core/error.h"

namespace voxd::tools {
namespace {

void put_u32(uint8_t* at, uint32_t value) {
  for (int i = 0; i < 4; ++i) at[i] = static_cast<uint8_t>(value >> (8 * i));
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

}  // namespace voxd::tools
