// Writing to the pipes between voxd-dataset's processes (its per-sentence children, Festival).
#pragma once

#include <string_view>

namespace voxd::tools {

// Writes all of `text` to file descriptor `fd`, across short writes and interrupted calls; false
// when the other end is gone or the write fails.
bool write_all(int fd, std::string_view text);

}  // namespace voxd::tools
