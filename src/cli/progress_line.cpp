#include "cli/progress_line.h"

#include <unistd.h>

#include <cstdio>
#include <string>

namespace voxd {

ProgressLine::ProgressLine() : enabled_(isatty(STDERR_FILENO) == 1) {}

ProgressLine::~ProgressLine() {
  clear();
}

void ProgressLine::update(int64_t done, int64_t total, double audio_seconds) {
  if (!enabled_ || total < 2) return;
  char line[96];
  const int n =
      std::snprintf(line, sizeof line, "voxd: sentence %lld/%lld, %.1f s of audio",
                    static_cast<long long>(done), static_cast<long long>(total), audio_seconds);
  const size_t length = n > 0 ? static_cast<size_t>(n) : 0;
  const std::string padding(shown_chars_ > length ? shown_chars_ - length : 0, ' ');
  std::fprintf(stderr, "\r%s%s", line, padding.c_str());
  std::fflush(stderr);
  shown_chars_ = length;
}

void ProgressLine::clear() {
  if (shown_chars_ == 0) return;
  std::fprintf(stderr, "\r%s\r", std::string(shown_chars_, ' ').c_str());
  std::fflush(stderr);
  shown_chars_ = 0;
}

}  // namespace voxd
