// Parsing of raw symbol-id input, for feeding a voice ids directly instead of text.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace voxd::text {

// Non-negative integer ids separated by whitespace and/or commas, optionally inside [ ]
// ("12 5 7", "12,5,7", "[12, 5, 7]"). InputError naming the offset on anything else, and on
// input with no ids.
std::vector<int64_t> parse_ids(std::string_view text);

}  // namespace voxd::text
