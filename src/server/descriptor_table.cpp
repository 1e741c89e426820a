#include "server/descriptor_table.h"

#include <fcntl.h>
#include <unistd.h>

#include <fstream>
#include <string>

namespace voxd::server {

bool reserve_descriptor_table(int count) {
  if (count <= 0) return false;
  const int source = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (source < 0) return false;
  // The lowest free descriptor at or above count - 1: count - 1 itself unless it is taken, and
  // either way the table then holds it.
  const int placed = fcntl(source, F_DUPFD_CLOEXEC, count - 1);
  close(source);
  if (placed < 0) return false;
  close(placed);
  return true;
}

int descriptor_table_size() {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == "FDSize:") {
      int size = -1;
      status >> size;
      return status ? size : -1;
    }
    status.ignore(4096, '\n');
  }
  return -1;
}

}  // namespace voxd::server
