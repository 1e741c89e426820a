// Base64 (RFC 4648, with padding) for the audio in server-sent events.
#pragma once

#include <string>
#include <string_view>

namespace voxd::server {

// `bytes` as base64 text.
std::string base64_encode(std::string_view bytes);

}  // namespace voxd::server
