// Splits normalised text into sentences short enough to synthesise one at a time.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace voxd::text {

// Sentences of `text`, trimmed, none empty: a sentence ends at . ! ? (with any closing quotes or
// brackets) followed by whitespace, at full-width 。！？ (with any closing ”」』）), or at a line
// break. A sentence longer than `max_chars` bytes is cut at the last , ; : ，、；： in its second
// half, else at the last whitespace, else between UTF-8 characters, so no piece exceeds
// `max_chars` (unless one character does). Linear time.
// Error if `max_chars` is 0. Run normalize first so abbreviations and decimals hold no periods.
std::vector<std::string> split_sentences(std::string_view text, size_t max_chars = 400);

}  // namespace voxd::text
