// `voxd serve`: the OpenAI-compatible speech server (docs/server.md). Every setting comes from a
// flag, from a VOXD_<FLAG> environment variable or from a TOML/INI config file (--config), in
// that order of precedence, then from its default. SIGTERM or SIGINT drains it gracefully.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>

namespace voxd {

class ServeCommand {
 public:
  // Adds the `serve` subcommand to `app`.
  explicit ServeCommand(CLI::App& app);
  ~ServeCommand();
  ServeCommand(const ServeCommand&) = delete;
  ServeCommand& operator=(const ServeCommand&) = delete;

  // Whether the command line chose `serve`.
  bool selected() const;
  // Runs the server until a signal ends it, once `app` has parsed the command line (global
  // --backend, --threads and --log-level apply unless serve's own settings say otherwise).
  // Returns the exit code: 0 after a graceful shutdown. Throws voxd::InputError for bad settings.
  int run(const CLI::App& app);

 private:
  struct Settings;
  std::unique_ptr<Settings> settings_;
  CLI::App* command_ = nullptr;
};

}  // namespace voxd
