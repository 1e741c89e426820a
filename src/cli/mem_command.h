// `voxd mem`: the memory plan of a voice for given batch shapes (its weights, the workspace of
// each step, the total), made by a planning pass that runs nothing, so it needs no GPU
// (docs/memory.md).
#pragma once

#include <CLI/CLI.hpp>

namespace voxd {

// Adds the `mem` subcommand to `app`. When a command line selects it, its callback prints the plan
// on standard output and ends the process with exit code 0, or prints a one-line error on
// standard error and ends it with exit code 2 for bad input (a missing voice, a shape out of
// range, a dtype the device cannot run).
void add_mem_command(CLI::App& app);

}  // namespace voxd
