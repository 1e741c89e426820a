// voxd-espeak-worker: eSpeak NG for one voxd process, which starts it (text/espeak_workers.h) and
// talks to it over its standard input and output.
#include <unistd.h>

#include <cstdio>

#include "text/espeak_workers.h"

int main() {
  if (::isatty(STDIN_FILENO)) {
    std::fprintf(stderr,
                 "voxd-espeak-worker: voxd serve starts this program (--espeak-processes); it is "
                 "not for use by hand\n");
    return 2;
  }
  return voxd::text::serve_espeak_requests(STDIN_FILENO, STDOUT_FILENO);
}
