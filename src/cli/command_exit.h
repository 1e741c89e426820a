// How a subcommand that runs in its CLI11 callback ends the process.
#pragma once

#include <functional>

namespace voxd {

// Runs `command` and exits with its code; a voxd::Error (bad input: a missing file, a bad
// value) prints "voxd: error: ..." and exits 2, any other exception "voxd: internal error: ..."
// and exits 1. Standard output is flushed first.
[[noreturn]] void exit_after(const std::function<int()>& command);

}  // namespace voxd
