// `voxd monitor`: a terminal view of a running `voxd serve`, refreshed every second like
// `nvidia-smi -l 1`: its memory by kind (weights, workspace, cache, free; NVML's reading on a
// GPU) from GET /debug/memory?format=json, and its load (requests per second, streams, queue,
// batch sizes, time to first audio, real-time factor) from GET /metrics.
#pragma once

#include <CLI/CLI.hpp>

namespace voxd {

// Adds the `monitor` subcommand to `app`. When a command line selects it, its callback shows
// frames until interrupted (one with --once) and ends the process: exit code 0, or 1 with a
// one-line error when the server cannot be read.
void add_monitor_command(CLI::App& app);

}  // namespace voxd
