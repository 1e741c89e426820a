#include "cli/command_exit.h"

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>

#include "core/error.h"

namespace voxd {

void exit_after(const std::function<int()>& command) {
  int code = 0;
  try {
    code = command();
  } catch (const Error& e) {
    std::cerr << "voxd: error: " << e.what() << "\n";
    code = 2;
  } catch (const std::exception& e) {
    std::cerr << "voxd: internal error: " << e.what() << "\n";
    code = 1;
  }
  std::cout.flush();
  std::fflush(stdout);
  std::exit(code);
}

}  // namespace voxd
