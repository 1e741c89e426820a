#include "families/chattts/utf8.h"

#include <unicode/utf8.h>

#include <cstdint>
#include <limits>

#include "core/error.h"

namespace voxd::chattts {

std::u32string decode_utf8(std::string_view text, std::string_view what) {
  if (text.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    throw InputError(std::string(what) + " is too long (" + std::to_string(text.size()) +
                     " bytes)");
  }
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const auto length = static_cast<int32_t>(text.size());
  std::u32string out;
  out.reserve(text.size());
  for (int32_t i = 0; i < length;) {
    const int32_t start = i;
    UChar32 c = 0;
    U8_NEXT(s, i, length, c);
    if (c < 0) {
      static constexpr char kHex[] = "0123456789abcdef";
      const uint8_t byte = s[start];
      throw InputError(std::string(what) + " is not valid UTF-8: byte 0x" + kHex[byte >> 4] +
                       kHex[byte & 15] + " at byte offset " + std::to_string(start));
    }
    out.push_back(static_cast<char32_t>(c));
  }
  return out;
}

void append_utf8(std::string& out, char32_t c) {
  uint8_t buf[U8_MAX_LENGTH];
  int32_t length = 0;
  U8_APPEND_UNSAFE(buf, length, static_cast<UChar32>(c));
  out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(length));
}

}  // namespace voxd::chattts
