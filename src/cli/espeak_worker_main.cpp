// voxd-espeak-worker: eSpeak NG for one voxd process, which starts it (text/espeak_workers.h) and
// talks to it over its standard input and output.
#include <signal.h>
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
  // A Ctrl-C or a service manager's SIGTERM reaches the server's whole process group: the
  // server drains, and its workers must go on answering until it closes their input.
  ::signal(SIGINT, SIG_IGN);
  ::signal(SIGTERM, SIG_IGN);
  // The answers go out on a copy of standard output, and standard output becomes standard
  // error: whatever the library prints cannot mix into them.
  const int answers = ::dup(STDOUT_FILENO);
  if (answers < 0 || ::dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
    std::perror("voxd-espeak-worker");
    return 1;
  }
  return voxd::text::serve_espeak_requests(STDIN_FILENO, answers);
}
