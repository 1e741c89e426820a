#include "text/mandarin/characters.h"

#include <unicode/utf8.h>

#include <cstdint>

namespace voxd::text::mandarin {

std::vector<Character> characters(std::string_view text) {
  std::vector<Character> out;
  out.reserve(text.size() / 3 + 1);
  const auto* bytes = reinterpret_cast<const uint8_t*>(text.data());
  const auto length = static_cast<int32_t>(text.size());
  int32_t at = 0;
  while (at < length) {
    const int32_t start = at;
    UChar32 code = 0;
    U8_NEXT(bytes, at, length, code);
    out.push_back(
        {.code = code < 0 ? U'\uFFFD' : static_cast<char32_t>(code),
         .bytes = text.substr(static_cast<size_t>(start), static_cast<size_t>(at - start))});
  }
  return out;
}

bool is_hanzi(char32_t code) {
  return (code >= 0x4E00 && code <= 0x9FFF) || (code >= 0x3400 && code <= 0x4DBF) ||
         (code >= 0x20000 && code <= 0x2FA1F) || (code >= 0xF900 && code <= 0xFAFF) ||
         code == 0x3007;
}

bool is_latin_letter(char32_t code) {
  return (code >= 'a' && code <= 'z') || (code >= 'A' && code <= 'Z');
}

bool has_chinese(std::string_view text) {
  for (const Character& c : characters(text)) {
    if (is_hanzi(c.code) || (c.code >= '0' && c.code <= '9')) return true;
  }
  return false;
}

}  // namespace voxd::text::mandarin
