// UTF-8 to code points and back, for the ChatTTS text and speaker-string code; invalid input is
// the user's error, named by its byte offset.
#pragma once

#include <string>
#include <string_view>

namespace voxd::chattts {

// The code points of UTF-8 `text`. Throws voxd::InputError "<what> is not valid UTF-8: byte 0x..
// at byte offset N" (surrogates and overlong forms count as invalid), and for text over 2 GiB.
std::u32string decode_utf8(std::string_view text, std::string_view what);

// Appends code point `c` (a valid scalar value) to `out` as UTF-8.
void append_utf8(std::string& out, char32_t c);

}  // namespace voxd::chattts
