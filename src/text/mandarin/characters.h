// UTF-8 text as characters: the code point of each and the bytes it was written with, and the
// classes the Mandarin front end tells apart.
#pragma once

#include <string_view>
#include <vector>

namespace voxd::text::mandarin {

struct Character {
  char32_t code;           // U+FFFD for a malformed sequence
  std::string_view bytes;  // as written, into the text
};

// The characters of `text`, malformed sequences each one U+FFFD of the bytes they took.
std::vector<Character> characters(std::string_view text);

// CJK unified ideographs (the basic block, extensions A-F, compatibility ideographs) and 〇.
bool is_hanzi(char32_t code);

// ASCII letters.
bool is_latin_letter(char32_t code);

// Whether `text` has something a Mandarin voice reads: a hanzi, or a digit (2024: 二〇二四).
bool has_chinese(std::string_view text);

}  // namespace voxd::text::mandarin
