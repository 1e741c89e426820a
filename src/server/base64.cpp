#include "server/base64.h"

#include <cstdint>

namespace voxd::server {

void append_base64(std::string_view bytes, std::string& out) {
  constexpr std::string_view kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  out.reserve(out.size() + (bytes.size() + 2) / 3 * 4);
  const auto byte = [&](size_t i) { return static_cast<uint32_t>(static_cast<uint8_t>(bytes[i])); };
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t group = byte(i) << 16 | byte(i + 1) << 8 | byte(i + 2);
    out += kAlphabet[group >> 18];
    out += kAlphabet[group >> 12 & 0x3F];
    out += kAlphabet[group >> 6 & 0x3F];
    out += kAlphabet[group & 0x3F];
  }
  const size_t left = bytes.size() - i;  // 0, 1 or 2
  if (left == 0) return;
  const uint32_t group = byte(i) << 16 | (left == 2 ? byte(i + 1) << 8 : 0);
  out += kAlphabet[group >> 18];
  out += kAlphabet[group >> 12 & 0x3F];
  out += left == 2 ? kAlphabet[group >> 6 & 0x3F] : '=';
  out += '=';
}

}  // namespace voxd::server
