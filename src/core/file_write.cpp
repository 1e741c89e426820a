#include "core/file_write.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace voxd {

namespace {

std::string temp_name(const std::string& path) {
  static std::atomic<unsigned> counter{0};
  return path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
}

[[noreturn]] void fail(const std::string& path, const std::string& what, int err) {
  throw Error("cannot write " + path + ": " + what + ": " + std::strerror(err));
}

void write_all(int fd, const ByteChunk& chunk, const std::string& path) {
  const char* p = static_cast<const char*>(chunk.data);
  size_t left = chunk.size;
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail(path, "write failed", errno);
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
}

}  // namespace

void write_file_atomically(const std::string& path, const std::vector<ByteChunk>& chunks) {
  const std::string temp = temp_name(path);
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) fail(path, "cannot create temporary file " + temp, errno);
  try {
    for (const ByteChunk& chunk : chunks) write_all(fd, chunk, path);
    if (::fsync(fd) != 0) fail(path, "fsync failed", errno);
  } catch (...) {
    ::close(fd);
    ::unlink(temp.c_str());
    throw;
  }
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    fail(path, "close failed", err);
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    fail(path, "cannot rename " + temp + " into place", err);
  }
}

}  // namespace voxd
