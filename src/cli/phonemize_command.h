// `voxd phonemize`: what the text front end makes of a text for a voice — the normalised text,
// the sentences with their pauses and rates, their phonemes and symbol ids — without loading
// any model (docs/text-frontend.md).
#pragma once

#include <CLI/CLI.hpp>

namespace voxd {

// Adds the `phonemize` subcommand to `app`. When a command line selects it, its callback prints
// the analysis on standard output and ends the process with exit code 0, or prints a one-line
// error on standard error and ends it with exit code 2 for bad input (a missing voice, text the
// voice cannot speak, malformed SSML values).
void add_phonemize_command(CLI::App& app);

}  // namespace voxd
