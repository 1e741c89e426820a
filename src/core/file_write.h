// Writing a file so that readers only ever see the old file or the complete new one: the bytes go
// to a temporary file next to the target, are flushed to disk, and the temporary is renamed.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace voxd {

// A run of bytes to write; the memory is owned by the caller.
struct ByteChunk {
  const void* data;
  size_t size;
};

// Writes `chunks` in order to `path`, replacing it atomically; throws voxd::Error naming `path`
// when any step fails, and leaves no temporary file behind.
void write_file_atomically(const std::string& path, const std::vector<ByteChunk>& chunks);

}  // namespace voxd
