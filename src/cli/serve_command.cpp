#include "cli/serve_command.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "cli/dtype_option.h"
#include "cli/finite_number.h"
#include "cli/voice_search.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/memory_limit.h"
#include "families/registry.h"
#include "scheduler/engine_service.h"
#include "server/http_api.h"
#include "server/leak_watchdog.h"
#include "server/logging.h"
#include "server/metrics.h"
#include "server/periodic_task.h"
#include "server/speech_request.h"
#include "text/espeak_workers.h"
#ifdef VOXD_HAVE_CUDA
#include "backends/cuda/cuda_check.h"
#endif

namespace voxd {

using Clock = std::chrono::steady_clock;

struct ServeCommand::Settings {
  std::vector<std::string> voices;
  std::vector<std::string> voice_aliases;  // ALIAS=VOICE
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string device;  // empty: cuda when there is a CUDA device, else cpu
  int threads = 0;
  std::string dtype;  // empty: f16 on cuda, f32 elsewhere
  std::optional<std::string> gpu_memory_limit;
  std::optional<std::string> max_split_size;
  std::optional<std::string> kv_cache;
  int64_t max_batch = 16;
  size_t max_queue = 256;
  int64_t chunk_frames = 64;
  int64_t first_chunk_frames = 32;
  bool first_clause_alone = false;
  double request_timeout_s = 300;
  bool lazy = false;
  bool no_cuda_graphs = false;
  bool step_overlap = false;
  std::optional<std::string> acoustic_graph_memory;
  double acoustic_length_band = scheduler::SchedulerOptions{}.acoustic_length_band;
  int64_t prefill_chunk_tokens = scheduler::SchedulerOptions{}.prefill_chunk_tokens;
  std::vector<std::string> api_keys;
  std::optional<std::string> api_key_file;
  std::vector<std::string> cors_origins;
  size_t max_body_bytes = server::HttpConfig{}.max_body_bytes;
  size_t max_header_bytes = server::HttpConfig{}.max_header_bytes;
  size_t max_input_chars = server::HttpConfig{}.max_input_chars;
  size_t max_connections = server::HttpConfig{}.max_connections;
  int http_threads = server::HttpConfig{}.threads;
  int admission_threads = server::HttpConfig{}.admission_threads;
  std::optional<int> espeak_processes;
  double header_timeout_s = server::HttpConfig{}.header_timeout_s;
  double read_timeout_s = server::HttpConfig{}.read_timeout_s;
  double write_timeout_s = server::HttpConfig{}.write_timeout_s;
  double keep_alive_timeout_s = server::HttpConfig{}.keep_alive_timeout_s;
  double grace_period_s = 30;
  std::string log_format = "text";
  std::string log_level = "info";
  double leak_check_interval_s = 10;
  double release_cached_after_s = 60;
  std::optional<std::string> config;
  bool print_config = false;

  // The settings as a config file that gives them back (API keys left out).
  std::string as_config_file() const;
  scheduler::EngineConfig engine_config() const;
  // Reads --api-key-file.
  server::HttpConfig http_config() const;
};

namespace {

// The process's eSpeak NG calls sent to worker processes while it lives (--espeak-processes):
// `requested` of them, or one per admission thread when not given, in which case a missing
// worker program means eSpeak NG in this process and a warning. InputError if a requested count
// has no program, Error if the workers cannot start. A worker replaced (crashed, hung) is logged
// and counted in `metrics`, which must outlive it.
class EspeakWorkersInUse {
 public:
  EspeakWorkersInUse(std::optional<int> requested, int admission_threads,
                     server::MetricsRegistry& metrics) {
    const int count = requested.value_or(admission_threads);
    if (count == 0) return;
    const std::optional<std::filesystem::path> program = text::find_espeak_worker_program();
    if (!program) {
      const std::string missing = "voxd-espeak-worker is neither beside this program nor installed";
      if (requested)
        throw InputError("--espeak-processes " + std::to_string(count) + ": " + missing);
      server::log_event(
          spdlog::level::warn, "espeak in process",
          {{"reason", missing + "; eSpeak NG runs in the server, one sentence at a time"}});
      return;
    }
    server::Counter& replaced = metrics.counter(
        "voxd_espeak_workers_replaced_total",
        "eSpeak NG worker processes that crashed, hung or answered nonsense, and were "
        "replaced, and replacements that could not start.");
    text::EspeakWorkers::Options options;
    options.program = *program;
    options.count = count;
    options.on_replaced = [&replaced](const std::string& what) {
      replaced.inc();
      server::log_event(spdlog::level::warn, "espeak worker replaced", {{"what", what}});
    };
    text::use_espeak_workers(std::make_shared<text::EspeakWorkers>(options));
    count_ = count;
  }
  ~EspeakWorkersInUse() { text::use_espeak_workers(nullptr); }
  EspeakWorkersInUse(const EspeakWorkersInUse&) = delete;
  EspeakWorkersInUse& operator=(const EspeakWorkersInUse&) = delete;

  int count() const { return count_; }

 private:
  int count_ = 0;
};

// VOXD_MAX_QUEUE for "max-queue".
std::string variable_name(const std::string& flag) {
  std::string name = "VOXD_" + flag;
  std::transform(name.begin(), name.end(), name.begin(),
                 [](char c) { return c == '-' ? '_' : static_cast<char>(std::toupper(c)); });
  return name;
}

// Adds `--name` with VOXD_NAME as its variable (a finite number, when it is real-valued).
template <typename T>
CLI::Option* add_setting(CLI::App& command, const std::string& name, T& value,
                         const std::string& help) {
  CLI::Option* option = command.add_option("--" + name, value, help)->envname(variable_name(name));
  if constexpr (std::is_floating_point_v<T>) option->check(finite_number());
  return option;
}

CLI::Option* add_switch(CLI::App& command, const std::string& name, bool& value,
                        const std::string& help) {
  return command.add_flag("--" + name, value, help)->envname(variable_name(name));
}

// Gives the options of `command` that neither a flag nor a variable set the values of the config
// file at `path` (TOML or INI: `port = 8080`, `voice = ["a", "b"]`, keys are the long flags
// without their dashes, `_` or `-` between words, at the top or in a [serve] section).
void apply_config_file(CLI::App& command, const std::string& path) {
  std::vector<CLI::ConfigItem> items;
  CLI::ConfigTOML reader;
  try {
    items = reader.from_file(path);
  } catch (const CLI::ParseError& e) {
    throw InputError("cannot read the config file " + path + ": " + e.what());
  }
  for (const CLI::ConfigItem& item : items) {
    if (item.name == "++" || item.name == "--") continue;  // a section's start or end
    const bool in_section = !item.parents.empty();
    if (in_section && (item.parents.size() != 1 || item.parents[0] != "serve")) {
      throw InputError("config file " + path + ": unknown section '" + item.fullname() +
                       "' (put settings at the top or under [serve])");
    }
    std::string name = item.name;
    std::replace(name.begin(), name.end(), '_', '-');
    CLI::Option* option = command.get_option_no_throw("--" + name);
    if (option == nullptr || name == "config" || name == "help") {
      throw InputError("config file " + path + ": unknown setting '" + item.name +
                       "' (settings are voxd serve's long flags without the dashes, e.g. "
                       "port = 8080; see voxd serve --help)");
    }
    // Set by a flag or a variable, or an empty list (the default).
    if (option->count() > 0 || item.inputs.empty()) continue;
    try {
      if (option->get_expected_min() == 0) {
        option->add_result(option->get_flag_value(name, reader.to_flag(item)));
      } else {
        option->add_result(item.inputs);
      }
      option->run_callback();
    } catch (const CLI::Error& e) {
      throw InputError("config file " + path + ": setting '" + item.name + "': " + e.what());
    }
  }
}

// Seconds since `start`, to the millisecond, for log lines.
double seconds_since(Clock::time_point start) {
  const auto millis = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
  return static_cast<double>(millis.count()) / 1000.0;
}

std::chrono::milliseconds to_millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

std::string default_device() {
#ifdef VOXD_HAVE_CUDA
  try {
    cuda::require_device(0);
    return "cuda";
  } catch (const Error&) {
  }
#endif
  return "cpu";
}

// The first SIGTERM or SIGINT, written to a pipe by the handler; a second one ends the process
// at once. A handler (not sigwait) because any thread may receive the signal, OpenBLAS's
// threads included, which start before main() and so cannot inherit a blocked mask.
std::atomic<int> g_shutdown_signal{0};
int g_signal_pipe[2] = {-1, -1};

void on_shutdown_signal(int signal_number) {
  if (g_shutdown_signal.exchange(signal_number) != 0) _exit(128 + signal_number);
  const char byte = 1;
  [[maybe_unused]] const ssize_t written = write(g_signal_pipe[1], &byte, 1);
}

void watch_shutdown_signals() {
  if (pipe(g_signal_pipe) != 0) throw Error("cannot create the signal pipe");
  struct sigaction action {};
  action.sa_handler = on_shutdown_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
}

// Blocks until the first SIGTERM or SIGINT; returns it.
int wait_for_shutdown_signal() {
  char byte = 0;
  while (read(g_signal_pipe[0], &byte, 1) != 1) {
  }
  return g_shutdown_signal.load();
}

// Lines of `path` that are neither blank nor comments (#), trimmed.
std::vector<std::string> read_key_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError("cannot read --api-key-file " + path);
  std::vector<std::string> keys;
  std::string line;
  while (std::getline(in, line)) {
    const size_t start = line.find_first_not_of(" \t\r");
    if (start == std::string::npos || line[start] == '#') continue;
    const size_t end = line.find_last_not_of(" \t\r");
    keys.push_back(line.substr(start, end - start + 1));
  }
  if (keys.empty()) throw InputError("--api-key-file " + path + " holds no key");
  return keys;
}

// ["a", "b"]: a TOML array of strings.
std::string toml_list(const std::vector<std::string>& values) {
  std::string text = "[";
  for (const std::string& value : values) {
    text += (text.size() > 1 ? ", " : "") + nlohmann::json(value).dump();
  }
  return text + "]";
}

}  // namespace

std::string ServeCommand::Settings::as_config_file() const {
  std::ostringstream out;
  out << "voice = " << toml_list(voices) << "\n"
      << "voice-alias = " << toml_list(voice_aliases) << "\n"
      << "host = " << nlohmann::json(host).dump() << "\nport = " << port << "\n"
      << "device = " << nlohmann::json(device).dump() << "\nthreads = " << threads << "\n"
      << "dtype = " << nlohmann::json(dtype).dump() << "\n";
  if (gpu_memory_limit)
    out << "gpu-memory-limit = " << nlohmann::json(*gpu_memory_limit).dump() << "\n";
  if (max_split_size) out << "max-split-size = " << nlohmann::json(*max_split_size).dump() << "\n";
  if (kv_cache) out << "kv-cache = " << nlohmann::json(*kv_cache).dump() << "\n";
  out << "max-batch = " << max_batch << "\nmax-queue = " << max_queue
      << "\nchunk-frames = " << chunk_frames << "\nfirst-chunk-frames = " << first_chunk_frames
      << "\nfirst-clause-alone = " << (first_clause_alone ? "true" : "false")
      << "\nacoustic-length-band = " << acoustic_length_band
      << "\nprefill-chunk-tokens = " << prefill_chunk_tokens
      << "\nrequest-timeout = " << request_timeout_s << "\nlazy = " << (lazy ? "true" : "false")
      << "\nno-cuda-graphs = " << (no_cuda_graphs ? "true" : "false")
      << "\nstep-overlap = " << (step_overlap ? "true" : "false") << "\n";
  if (acoustic_graph_memory) {
    out << "acoustic-graph-memory = " << nlohmann::json(*acoustic_graph_memory).dump() << "\n";
  }
  if (!api_keys.empty()) out << "# api-key: " << api_keys.size() << " key(s), not shown\n";
  if (api_key_file) out << "api-key-file = " << nlohmann::json(*api_key_file).dump() << "\n";
  out << "cors-origin = " << toml_list(cors_origins) << "\n"
      << "max-body-bytes = " << max_body_bytes << "\nmax-header-bytes = " << max_header_bytes
      << "\nmax-input-chars = " << max_input_chars << "\nmax-connections = " << max_connections
      << "\nhttp-threads = " << http_threads << "\nadmission-threads = " << admission_threads
      << (espeak_processes ? "\nespeak-processes = " + std::to_string(*espeak_processes) : "")
      << "\nheader-timeout = " << header_timeout_s << "\nread-timeout = " << read_timeout_s
      << "\nwrite-timeout = " << write_timeout_s
      << "\nkeep-alive-timeout = " << keep_alive_timeout_s << "\ngrace-period = " << grace_period_s
      << "\nlog-format = " << nlohmann::json(log_format).dump()
      << "\nlog-level = " << nlohmann::json(log_level).dump()
      << "\nleak-check-interval = " << leak_check_interval_s
      << "\nrelease-cached-after = " << release_cached_after_s << "\n";
  return out.str();
}

scheduler::EngineConfig ServeCommand::Settings::engine_config() const {
  scheduler::EngineConfig config;
  config.families = &families::registry();
  config.voice_dirs = resolve_voices(voices);
  config.runtime.backend = device;
  config.runtime.threads = threads;
  if (gpu_memory_limit) {
    config.runtime.memory_limit =
        MemoryAmount::parse(*gpu_memory_limit, "--gpu-memory-limit (or VOXD_GPU_MEMORY_LIMIT)");
  }
  if (max_split_size) {
    config.runtime.max_split_size =
        MemoryAmount::parse(*max_split_size, "--max-split-size (or VOXD_MAX_SPLIT_SIZE)");
  }
  if (kv_cache) {
    const MemoryAmount amount = MemoryAmount::parse(*kv_cache, "--kv-cache (or VOXD_KV_CACHE)");
    if (amount.is_fraction()) {
      throw InputError("--kv-cache (or VOXD_KV_CACHE): give bytes (\"2GiB\"), not a fraction");
    }
    config.kv_cache_bytes = amount.resolve(0);
  }
  config.dtype = parse_dtype_option(dtype, "--dtype (or VOXD_DTYPE)");
  config.max_batch = max_batch;
  config.max_queue = max_queue;
  config.chunk_frames = chunk_frames;
  config.first_chunk_frames = first_chunk_frames;
  config.first_clause_alone = first_clause_alone;
  config.acoustic_length_band = acoustic_length_band;
  config.prefill_chunk_tokens = prefill_chunk_tokens;
  config.request_timeout = to_millis(request_timeout_s);
  config.lazy_voices = lazy;
  config.cuda_graphs = !no_cuda_graphs;
  config.overlap_steps = step_overlap;
  if (acoustic_graph_memory) {
    const MemoryAmount amount = MemoryAmount::parse(
        *acoustic_graph_memory, "--acoustic-graph-memory (or VOXD_ACOUSTIC_GRAPH_MEMORY)",
        MemoryAmount::Zero::kAllowed);
    if (amount.is_fraction()) {
      throw InputError(
          "--acoustic-graph-memory (or VOXD_ACOUSTIC_GRAPH_MEMORY): give bytes (\"256MiB\") or 0, "
          "not a fraction");
    }
    config.acoustic_graph_bytes = amount.resolve(0);
  }
  return config;
}

server::HttpConfig ServeCommand::Settings::http_config() const {
  server::HttpConfig config;
  config.host = host;
  config.port = port;
  config.api_keys = api_keys;
  if (api_key_file) {
    for (std::string& key : read_key_file(*api_key_file)) {
      config.api_keys.push_back(std::move(key));
    }
  }
  config.cors_origins = cors_origins;
  config.max_body_bytes = max_body_bytes;
  config.max_header_bytes = max_header_bytes;
  config.max_input_chars = max_input_chars;
  config.max_connections = max_connections;
  config.threads = http_threads;
  config.admission_threads = admission_threads;
  // A burst the engine's queue takes is not refused while it waits for the front end.
  config.max_awaiting_admission = max_queue;
  config.header_timeout_s = header_timeout_s;
  config.read_timeout_s = read_timeout_s;
  config.write_timeout_s = write_timeout_s;
  config.keep_alive_timeout_s = keep_alive_timeout_s;
  return config;
}

ServeCommand::ServeCommand(CLI::App& app) : settings_(std::make_unique<Settings>()) {
  Settings& s = *settings_;
  CLI::App& c = *app.add_subcommand(
      "serve",
      "Serve speech over HTTP (OpenAI's /v1/audio/speech; docs/server.md). Settings: flag > "
      "VOXD_<FLAG> variable > --config file > default");
  command_ = &c;
  add_setting(c, "voice", s.voices,
              "Voice directory to serve (repeat for more; its id is its name)")
      ->delimiter(',');
  add_setting(c, "voice-alias", s.voice_aliases,
              "ALIAS=VOICE: accept ALIAS as the name of a served voice, e.g. alloy=en-demo for "
              "OpenAI's voice names (repeat for more)")
      ->delimiter(',');
  add_setting(c, "host", s.host, "Address to listen on")->capture_default_str();
  add_setting(c, "port", s.port, "Port to listen on (0: any free port, logged at start)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  add_setting(c, "device", s.device, "cpu, cuda or cuda:N (default: cuda when there is a GPU)");
  add_setting(c, "threads", s.threads, "CPU threads (0: all cores)")->check(CLI::NonNegativeNumber);
  add_setting(c, "dtype", s.dtype, "f32, f16 or bf16 (default: f16 on cuda, f32 on cpu)")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}));
  add_setting(c, "gpu-memory-limit", s.gpu_memory_limit,
              "Most memory the server may reserve on the device: bytes, 8GiB, or a fraction "
              "such as 0.5");
  add_setting(c, "max-split-size", s.max_split_size,
              "Cached blocks this large are never split (PyTorch's max_split_size_mb)");
  add_setting(c, "kv-cache", s.kv_cache,
              "Device memory for each ChatTTS voice's KV cache pool: bytes or 2GiB (default: "
              "--max-batch streams of every GPT position)");
  add_setting(c, "max-batch", s.max_batch,
              "Most sentences per acoustic step, chunks per vocoder step, streams per GPT step")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1024}));
  add_setting(c, "max-queue", s.max_queue,
              "Requests admitted and not finished; beyond that 503 with Retry-After")
      ->capture_default_str()
      ->check(CLI::Range(size_t{1}, size_t{1} << 20));
  add_setting(c, "chunk-frames", s.chunk_frames, "Vocoder chunk in mel frames")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  add_setting(c, "first-chunk-frames", s.first_chunk_frames,
              "A stream's first vocoder chunk in mel frames (at most --chunk-frames): less work "
              "before the first audio")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  add_switch(c, "first-clause-alone", s.first_clause_alone,
             "Speak a request's first sentence as its first clause, then the rest, where it has a "
             "clause mark past its first few phonemes: its first audio waits for the clause "
             "only (FastSpeech2 voices)");
  add_setting(c, "acoustic-length-band", s.acoustic_length_band,
              "A FastSpeech2 acoustic step batches sentences up to this factor longer or "
              "shorter than its most urgent one's (wider: fewer steps, more padding)")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 16.0));
  add_setting(c, "prefill-chunk-tokens", s.prefill_chunk_tokens,
              "The most positions of one stream a ChatTTS GPT prefill step runs; a longer "
              "prefill (a preempted stream recomputed) goes in pieces, so that a step's memory "
              "does not grow with the stream's position")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  add_setting(c, "request-timeout", s.request_timeout_s,
              "Seconds from admission to the last audio; past it the request fails (504)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  add_switch(c, "lazy", s.lazy,
             "Load each voice on first use; unload idle ones when memory is needed");
  add_switch(c, "no-cuda-graphs", s.no_cuda_graphs,
             "Run every step without CUDA graphs (the vocoder's, the acoustic model's of small "
             "batches, ChatTTS's decode steps)");
  add_switch(c, "step-overlap", s.step_overlap,
             "Run FastSpeech2 acoustic steps on a CUDA stream of their own while a vocoder step "
             "is still on the device (off: each step alone)");
  add_setting(c, "acoustic-graph-memory", s.acoustic_graph_memory,
              "Device memory each FastSpeech2 voice's recorded acoustic steps may hold, e.g. "
              "256MiB (the default; 0: record none)");
  add_setting(c, "api-key", s.api_keys,
              "Accept this bearer token (repeat for more); with none, no authentication")
      ->delimiter(',');
  add_setting(c, "api-key-file", s.api_key_file, "File of accepted keys, one a line (# comments)");
  add_setting(c, "cors-origin", s.cors_origins,
              "Origin a browser may call from (repeat; * for any); none: CORS off")
      ->delimiter(',');
  add_setting(c, "max-body-bytes", s.max_body_bytes, "Largest request body (413 beyond)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  add_setting(c, "max-header-bytes", s.max_header_bytes, "Largest request headers (431 beyond)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  add_setting(c, "max-input-chars", s.max_input_chars,
              "Longest `input`, in characters (413 beyond)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  add_setting(c, "max-connections", s.max_connections,
              "Connections open at once; beyond that 503 and closed")
      ->capture_default_str()
      ->check(CLI::Range(size_t{1}, size_t{1} << 20));
  add_setting(c, "http-threads", s.http_threads,
              "Threads serving every connection (0: min(4, cores))")
      ->capture_default_str()
      ->check(CLI::Range(0, 256));
  add_setting(c, "admission-threads", s.admission_threads,
              "Threads that parse speech requests and run the text front end (0: min(8, cores))")
      ->capture_default_str()
      ->check(CLI::Range(0, 1024));
  add_setting(c, "espeak-processes", s.espeak_processes,
              "Worker processes running eSpeak NG for the text front end, so that requests are "
              "phonemised at once and a crash on hostile text costs a worker, not the server "
              "(0: in the server, one sentence at a time; default: one per admission thread)")
      ->check(CLI::Range(0, 256));
  add_setting(c, "header-timeout", s.header_timeout_s,
              "Seconds from a request's first byte to its last header; then 408 and closed")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 3600.0));
  add_setting(c, "read-timeout", s.read_timeout_s,
              "Seconds from a request's last header to the end of its body; then 408 and closed")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 3600.0));
  add_setting(c, "write-timeout", s.write_timeout_s,
              "Seconds one write may wait for a client that does not read; then it is cut off")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 3600.0));
  add_setting(c, "keep-alive-timeout", s.keep_alive_timeout_s,
              "Seconds an idle kept-alive connection stays open")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 3600.0));
  add_setting(c, "grace-period", s.grace_period_s,
              "Seconds in-flight requests get to finish after SIGTERM/SIGINT")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  add_setting(c, "log-format", s.log_format, "text, or json (one object per line)")
      ->capture_default_str()
      ->check(CLI::IsMember({"text", "json"}));
  add_setting(c, "log-level", s.log_level, "trace, debug, info, warn, error or off")
      ->capture_default_str()
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
  add_setting(c, "leak-check-interval", s.leak_check_interval_s,
              "Seconds between the leak watchdog's checks (0: off)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  add_setting(c, "release-cached-after", s.release_cached_after_s,
              "Give cached device memory unused this many seconds back (0: never)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  add_setting(c, "config", s.config, "TOML or INI file of settings (keys: the flags' names)");
  c.add_flag("--print-config", s.print_config,
             "Print the settings in effect (as a config file) and exit");
}

ServeCommand::~ServeCommand() = default;

bool ServeCommand::selected() const {
  return command_->parsed();
}

int ServeCommand::run(const CLI::App& app) {
  Settings& s = *settings_;
  if (s.config) apply_config_file(*command_, *s.config);
  // serve's own settings first, then the global flags, then the defaults.
  const auto given = [&](const char* name) { return command_->get_option(name)->count() > 0; };
  const auto global = [&](const char* name) -> const CLI::Option* {
    const CLI::Option* option = app.get_option(name);
    return option->count() > 0 ? option : nullptr;
  };
  if (!given("--device")) {
    s.device = global("--backend") ? global("--backend")->as<std::string>() : default_device();
  }
  if (!given("--threads") && global("--threads")) s.threads = global("--threads")->as<int>();
  if (!given("--log-level") && global("--log-level")) {
    s.log_level = global("--log-level")->as<std::string>();
  }
  if (!given("--gpu-memory-limit") && global("--gpu-memory-limit")) {
    s.gpu_memory_limit = global("--gpu-memory-limit")->as<std::string>();
  }
  if (!given("--max-split-size") && global("--max-split-size")) {
    s.max_split_size = global("--max-split-size")->as<std::string>();
  }
  const bool on_cuda = s.device.rfind("cuda", 0) == 0;
  if (s.dtype.empty()) s.dtype = on_cuda ? "f16" : "f32";
  if (!on_cuda && s.dtype != "f32") {
    throw InputError("--dtype " + s.dtype +
                     " needs --device cuda: the CPU backend computes in f32");
  }

  if (s.print_config) {
    std::cout << s.as_config_file();
    return 0;
  }

  if (s.voices.empty()) {
    throw InputError(
        "voxd serve needs at least one --voice DIR (or VOXD_VOICE, or voice = [...] "
        "in the config file)");
  }
  server::configure_logging(server::parse_log_format(s.log_format));
  spdlog::set_level(spdlog::level::from_str(s.log_level));

  watch_shutdown_signals();
  const auto load_start = Clock::now();
  server::HttpConfig http_config = s.http_config();
  // Before the engine: its device thread records into the registry until the engine is gone.
  server::MetricsRegistry metrics;
  // Before the engine, whose voices' front ends phonemise from their first sentence; the last to
  // go, after the engine and the HTTP server.
  const EspeakWorkersInUse espeak(s.espeak_processes, server::admission_thread_count(http_config),
                                  metrics);
  const scheduler::EngineConfig engine_config = s.engine_config();
  scheduler::EngineService engine(engine_config);
  std::vector<std::string> voice_ids;
  for (const server::VoiceInfo& voice : engine.voices()) voice_ids.push_back(voice.id);
  const std::map<std::string, std::string> voice_aliases =
      server::parse_voice_aliases(s.voice_aliases, voice_ids);
  http_config.voice_aliases = voice_aliases;
  server::HttpApi http(http_config, engine, metrics);
  http.start();
  server::log_event(
      spdlog::level::info, "listening",
      {{"url", "http://" + s.host + ":" + std::to_string(http.port())},
       {"device", s.device},
       {"dtype", s.dtype},
       {"voices", voice_ids},
       {"voice_aliases", voice_aliases},
       {"auth", !http_config.api_keys.empty()},
       {"espeak_processes", espeak.count()},
       {"acoustic_graph_bytes", engine_config.cuda_graphs ? engine_config.acoustic_graph_bytes : 0},
       {"startup_s", seconds_since(load_start)}});

  std::optional<server::LeakWatchdog> watchdog;
  std::optional<server::PeriodicTask> leak_checks;
  if (s.leak_check_interval_s > 0) {
    watchdog.emplace(
        [&engine] {
          const scheduler::EngineService::IdleMemory memory = engine.idle_memory();
          return server::IdleMemoryReading{memory.idle, memory.unexplained_bytes, memory.summary};
        },
        metrics);
    leak_checks.emplace("leak watchdog", to_millis(s.leak_check_interval_s),
                        [&watchdog] { watchdog->check(); });
  }
  std::optional<server::PeriodicTask> cache_release;
  if (s.release_cached_after_s > 0) {
    const auto idle = to_millis(s.release_cached_after_s);
    cache_release.emplace(
        "cache release", std::max(idle / 4, std::chrono::milliseconds(1000)), [&engine, idle] {
          const uint64_t bytes = engine.runtime().release_cached_idle(idle);
          if (bytes > 0) {
            server::log_event(spdlog::level::debug, "released idle cache", {{"bytes", bytes}});
          }
        });
  }

  const int signal_number = wait_for_shutdown_signal();
  const auto drain_start = Clock::now();
  const auto grace = to_millis(s.grace_period_s);
  const size_t in_progress = http.speech_in_progress();
  // Logged once the listening socket is closed: a client that reads the line is refused.
  http.stop_accepting();
  server::log_event(spdlog::level::info, "shutting down",
                    {{"signal", signal_number == SIGTERM ? "SIGTERM" : "SIGINT"},
                     {"grace_s", s.grace_period_s},
                     {"in_progress", in_progress}});
  // The speech past the door finishes within the grace, those still being admitted (a burst
  // queued for the front end) too: the engine takes them until the HTTP layer has none left.
  http.wait_for_speech(grace);
  const auto left = [&] {
    return grace -
           std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - drain_start);
  };
  const size_t cancelled = engine.drain(std::max(left(), std::chrono::milliseconds(0)));
  // What the engine finished may still be on its way to the clients.
  const size_t cut_off = http.shutdown(std::max(left(), std::chrono::milliseconds(1000)));
  cache_release.reset();
  leak_checks.reset();
  server::log_event(
      spdlog::level::info, "stopped",
      {{"cancelled", cancelled}, {"cut_off", cut_off}, {"drain_s", seconds_since(drain_start)}});
  return 0;
}

}  // namespace voxd
