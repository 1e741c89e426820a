// Base64 (RFC 4648, section 4: the standard alphabet, padded with '='), for the audio that
// server-sent events carry as text.
#pragma once

#include <string>
#include <string_view>

namespace voxd::server {

// Appends the base64 of `bytes` to `out`: 4 characters for every 3 bytes, the last group padded.
void append_base64(std::string_view bytes, std::string& out);

}  // namespace voxd::server
