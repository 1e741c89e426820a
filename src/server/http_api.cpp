#include "server/http_api.h"

#include <httplib.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string_view>
#include <utility>

#include "core/error.h"
#include "server/api_error.h"
#include "server/audio_encoder.h"
#include "server/connection_queue.h"
#include "server/logging.h"

namespace voxd::server {
namespace {

using Clock = std::chrono::steady_clock;
using httplib::Request;
using httplib::Response;
using HandlerResponse = httplib::Server::HandlerResponse;
using nlohmann::json;

constexpr const char* kSpeechPath = "/v1/audio/speech";
// cpp-httplib 0.11's own limits (compiled into the library).
constexpr size_t kLibraryUriLimit = 8192;
constexpr size_t kLibraryFormBodyLimit = 8192;

// The request being handled on this thread (a connection's requests run on one thread, its
// streamed response included), for the latency histogram and the access log.
struct RequestState {
  bool started = false;
  Clock::time_point start;
  std::string id;
  // Added to the access log line (voice, chars, ttfa_ms, ...), in this order.
  nlohmann::ordered_json fields = nlohmann::ordered_json::object();
};
thread_local RequestState t_request;

// "<8 hex digits of this process>-<counter>": unique within a run, different across restarts.
std::string new_request_id() {
  static const std::string prefix = [] {
    std::random_device device;
    char text[16];
    std::snprintf(text, sizeof text, "%08x", device());
    return std::string(text);
  }();
  static std::atomic<uint64_t> next{1};
  return prefix + "-" + std::to_string(next.fetch_add(1));
}

// A client's X-Request-Id when it is short and printable, else a new one.
std::string request_id(const Request& req) {
  const std::string given = req.get_header_value("X-Request-Id");
  const bool usable =
      !given.empty() && given.size() <= 64 &&
      std::all_of(given.begin(), given.end(), [](char c) { return c > ' ' && c < 127; });
  return usable ? given : new_request_id();
}

// The characters (Unicode code points) of valid UTF-8 text.
size_t code_points(const std::string& text) {
  return static_cast<size_t>(std::count_if(text.begin(), text.end(), [](char c) {
    return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  }));
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string json_text(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

void send_json(Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(json_text(body), "application/json");
}

void send_error(Response& res, const ApiError& error) {
  send_json(res, error.status, error.body());
  if (error.retry_after_s) res.set_header("Retry-After", std::to_string(*error.retry_after_s));
  if (error.status == 401) res.set_header("WWW-Authenticate", "Bearer");
}

ApiError error(int status, std::string message, std::string type,
               std::optional<std::string> code = {}) {
  ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.type = std::move(type);
  e.code = std::move(code);
  return e;
}

// Equal without an early exit, so the time taken does not tell how much of a key matched.
bool same_key(std::string_view given, std::string_view key) {
  unsigned diff = given.size() == key.size() ? 0u : 1u;
  for (size_t i = 0; i < given.size(); ++i) {
    diff |= static_cast<unsigned char>(given[i]) ^
            static_cast<unsigned char>(key.empty() ? 0 : key[i % key.size()]);
  }
  return diff == 0;
}

// A request path as shown in messages: at most 200 bytes.
std::string shown_path(const std::string& path) {
  return path.size() <= 200 ? path : path.substr(0, 200) + "...";
}

// Sends a job's audio as chunks of a chunked response, encoding as it goes.
class ChunkedSink final : public SpeechSink {
 public:
  ChunkedSink(AudioEncoder& encoder, httplib::DataSink& sink, CancelToken& cancel,
              std::function<void(size_t)> on_audio)
      : encoder_(encoder), sink_(sink), cancel_(cancel), on_audio_(std::move(on_audio)) {}

  bool write(std::span<const float> samples) override {
    if (cancel_.cancelled()) return false;
    if (samples.empty()) return true;
    on_audio_(samples.size());
    bytes_.clear();
    encoder_.write(samples, bytes_);
    // An empty write would end cpp-httplib's chunked stream.
    if (!bytes_.empty() && !sink_.write(bytes_.data(), bytes_.size())) {
      cancel_.cancel();
      return false;
    }
    return true;
  }

  bool connected() override {
    if (!cancel_.cancelled() && !sink_.is_writable()) cancel_.cancel();
    return !cancel_.cancelled();
  }

  // Sends the encoder's last bytes and the end of the stream; false when the client has gone.
  bool finish() {
    bytes_.clear();
    encoder_.finish(bytes_);
    if (!bytes_.empty() && !sink_.write(bytes_.data(), bytes_.size())) return false;
    sink_.done();
    return true;
  }

 private:
  AudioEncoder& encoder_;
  httplib::DataSink& sink_;
  CancelToken& cancel_;
  std::function<void(size_t)> on_audio_;
  std::string bytes_;
};

// Collects a job's audio into one file.
class FileSink final : public SpeechSink {
 public:
  FileSink(AudioEncoder& encoder, const CancelToken& cancel, std::function<void(size_t)> on_audio)
      : encoder_(encoder), cancel_(cancel), on_audio_(std::move(on_audio)) {}

  bool write(std::span<const float> samples) override {
    if (cancel_.cancelled()) return false;
    if (samples.empty()) return true;
    on_audio_(samples.size());
    encoder_.write(samples, file_);
    return true;
  }

  bool connected() override { return !cancel_.cancelled(); }

  // The complete file.
  std::string finish() {
    encoder_.finish(file_);
    return std::move(file_);
  }

 private:
  AudioEncoder& encoder_;
  const CancelToken& cancel_;
  std::function<void(size_t)> on_audio_;
  std::string file_;
};

}  // namespace

class HttpApi::Impl {
 public:
  Impl(HttpConfig config, SpeechService& service, MetricsRegistry& metrics)
      : config_(std::move(config)), service_(service), metrics_(metrics) {
    install();
  }

  httplib::Server server;
  // The socket the server listens on, once bound (the last one set_socket_options saw).
  std::atomic<socket_t> listening_socket{INVALID_SOCKET};

  const HttpConfig& config() const { return config_; }

  // From now on requests are answered 503 shutting_down (see HttpApi::stop_accepting).
  void start_draining() { draining_.store(true); }

  // Waits up to `grace` for every speech request to end; true when they all did.
  bool wait_for_speech(Clock::duration grace) {
    std::unique_lock lock(running_mutex_);
    return speech_ended_.wait_for(lock, grace, [this] { return running_.empty(); });
  }

  // Cancels every running job and any started from now on; returns how many were running.
  size_t cancel_all() {
    std::lock_guard lock(running_mutex_);
    stopping_ = true;
    for (CancelToken* token : running_) token->cancel();
    return running_.size();
  }

  size_t speech_in_progress() const {
    std::lock_guard lock(running_mutex_);
    return running_.size();
  }

 private:
  using Handler = std::function<void(const Request&, Response&)>;

  // One speech request from its parsing to the end of its response; registered for
  // cancellation while it lives. A streamed one lives as long as cpp-httplib holds the
  // response's content provider.
  struct SpeechCall {
    explicit SpeechCall(Impl& owner) : api(owner) { api.register_job(cancel); }
    ~SpeechCall() { api.unregister(cancel); }
    SpeechCall(const SpeechCall&) = delete;
    SpeechCall& operator=(const SpeechCall&) = delete;

    Impl& api;
    std::unique_ptr<SpeechJob> job;
    std::unique_ptr<AudioEncoder> encoder;
    CancelToken cancel;
    Clock::time_point started = Clock::now();
    bool first_audio = true;
    double ttfa_s = 0.0;
    double audio_s = 0.0;

    // ttfa_ms, audio_s and `outcome` for the access log line.
    void log_outcome(const std::string& outcome) const {
      if (!first_audio) t_request.fields["ttfa_ms"] = std::round(ttfa_s * 10000.0) / 10.0;
      t_request.fields["audio_s"] = std::round(audio_s * 1000.0) / 1000.0;
      t_request.fields["outcome"] = outcome;
    }
  };

  void install();
  void add_route(const std::string& method, const std::string& path, bool needs_key,
                 Handler handler);
  HandlerResponse on_error(const Request& req, Response& res);
  void add_cors_headers(const Request& req, Response& res) const;
  bool origin_allowed(const std::string& origin) const;
  void preflight(const Request& req, Response& res);
  void check_key(const Request& req) const;
  void log_request(const Request& req, const Response& res);
  std::string route_label(const std::string& path) const;

  void speech(const Request& req, Response& res);
  void stream_speech(Response& res, std::shared_ptr<SpeechCall> call, AudioFormat format);
  void file_speech(Response& res, SpeechCall& call, AudioFormat format);
  void count_speech(const std::string& outcome);
  void count_audio(size_t samples, int64_t sample_rate, SpeechCall& call);

  void register_job(CancelToken& token) {
    std::lock_guard lock(running_mutex_);
    running_.insert(&token);
    if (stopping_) token.cancel();
  }
  void unregister(CancelToken& token) {
    {
      std::lock_guard lock(running_mutex_);
      running_.erase(&token);
    }
    speech_ended_.notify_all();
  }

  const HttpConfig config_;
  SpeechService& service_;
  MetricsRegistry& metrics_;
  ConnectionCounts connections_;
  std::map<std::string, std::set<std::string>> methods_;  // path -> methods it answers
  mutable std::mutex running_mutex_;
  std::condition_variable speech_ended_;
  std::set<CancelToken*> running_;
  bool stopping_ = false;
  std::atomic<bool> draining_{false};
};

void HttpApi::Impl::install() {
  server.new_task_queue = [this] {
    return new ConnectionQueue(config_.max_connections, config_.max_waiting_connections,
                               connections_);
  };
  // cpp-httplib's default sets SO_REUSEPORT, with which a second server could bind the same port
  // and take some of its connections; SO_REUSEADDR alone still allows a quick restart.
  server.set_socket_options([this](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listening_socket.store(sock);
  });
  server.set_payload_max_length(config_.max_body_bytes);
  server.set_read_timeout(config_.read_timeout_s);
  server.set_write_timeout(config_.write_timeout_s);
  server.set_keep_alive_timeout(config_.keep_alive_timeout_s);
  server.set_keep_alive_max_count(100);
  server.set_tcp_nodelay(true);

  server.set_pre_routing_handler([](const Request& req, Response& res) {
    t_request = RequestState{true, Clock::now(), request_id(req), {}};
    res.set_header("X-Request-Id", t_request.id);
    return HandlerResponse::Unhandled;
  });
  server.set_error_handler(httplib::Server::HandlerWithResponse(
      [this](const Request& req, Response& res) { return on_error(req, res); }));
  server.set_exception_handler([](const Request& req, Response& res, std::exception_ptr e) {
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      what = ex.what();
    } catch (...) {
    }
    log_event(spdlog::level::err, "request failed",
              {{"id", t_request.id},
               {"method", req.method},
               {"path", shown_path(req.path)},
               {"error", what}});
    send_error(res, error(500, "internal error while handling the request; see the server log",
                          "server_error"));
  });
  server.set_post_routing_handler([this](const Request& req, Response& res) {
    add_cors_headers(req, res);
    if (draining_.load()) res.set_header("Connection", "close");
  });
  server.set_logger([this](const Request& req, const Response& res) { log_request(req, res); });

  add_route("POST", kSpeechPath, true,
            [this](const Request& req, Response& res) { speech(req, res); });
  add_route("GET", "/healthz", false, [](const Request&, Response& res) {
    send_json(res, 200, {{"status", "ok"}});
  });
  add_route("GET", "/readyz", true, [this](const Request&, Response& res) {
    const Readiness r =
        draining_.load() ? Readiness{false, "the server is shutting down"} : service_.readiness();
    if (r.ready) {
      send_json(res, 200, {{"status", "ready"}});
    } else {
      send_json(res, 503, {{"status", "not ready"}, {"reason", r.reason}});
    }
  });
  add_route("GET", "/v1/models", true, [this](const Request&, Response& res) {
    json data = json::array();
    for (const std::string& id : service_.models()) {
      data.push_back({{"id", id}, {"object", "model"}, {"created", 0}, {"owned_by", "voxd"}});
    }
    send_json(res, 200, {{"object", "list"}, {"data", std::move(data)}});
  });
  add_route("GET", "/v1/voices", true, [this](const Request&, Response& res) {
    json data = json::array();
    for (const VoiceInfo& v : service_.voices()) {
      data.push_back({{"id", v.id},
                      {"object", "voice"},
                      {"sample_rate", v.sample_rate},
                      {"language", v.language}});
    }
    send_json(res, 200, {{"object", "list"}, {"data", std::move(data)}});
  });
  add_route("GET", "/metrics", true, [this](const Request&, Response& res) {
    service_.collect_metrics(metrics_);
    metrics_.gauge("voxd_http_connections", "Connections by state.", {{"state", "active"}})
        .set(static_cast<double>(connections_.active.load()));
    metrics_.gauge("voxd_http_connections", "Connections by state.", {{"state", "waiting"}})
        .set(static_cast<double>(connections_.waiting.load()));
    Counter& rejected = metrics_.counter(
        "voxd_http_connections_rejected_total",
        "Connections answered 503 because max_connections + max_waiting_connections were in use.");
    rejected.inc(static_cast<double>(connections_.rejected.load()) - rejected.value());
    metrics_
        .gauge("voxd_speech_requests_in_progress",
               "Speech requests being handled: parsed, admitted, producing or sending audio.")
        .set(static_cast<double>(speech_in_progress()));
    res.set_content(metrics_.render(), std::string(kMetricsContentType));
  });
  add_route("GET", "/debug/memory", true, [this](const Request& req, Response& res) {
    if (req.get_param_value("format") == "json") {
      send_json(res, 200, service_.memory_summary_json());
    } else {
      res.set_content(service_.memory_summary_text(), "text/plain; charset=utf-8");
    }
  });
  if (!config_.cors_origins.empty()) {
    server.Options(".*", [this](const Request& req, Response& res) { preflight(req, res); });
  }
}

void HttpApi::Impl::add_route(const std::string& method, const std::string& path, bool needs_key,
                              Handler handler) {
  methods_[path].insert(method);
  const bool always_answers = path == "/healthz" || path == "/readyz";
  auto guarded = [this, needs_key, always_answers, handler = std::move(handler)](const Request& req,
                                                                                 Response& res) {
    try {
      if (ConnectionQueue::rejecting()) {
        ApiError e =
            error(503,
                  "the server is at its connection limit (" +
                      std::to_string(config_.max_connections) + " served, " +
                      std::to_string(config_.max_waiting_connections) + " waiting); retry shortly",
                  "server_error", "overloaded");
        e.retry_after_s = 1;
        res.set_header("Connection", "close");
        throw e;
      }
      if (draining_.load() && !always_answers) {
        ApiError e = error(503, "the server is shutting down; retry on another instance",
                           "server_error", "shutting_down");
        e.retry_after_s = 1;
        throw e;
      }
      size_t header_bytes = 0;
      for (const auto& [key, value] : req.headers) header_bytes += key.size() + value.size() + 4;
      if (header_bytes > config_.max_header_bytes) {
        throw error(431,
                    "the request's headers are " + std::to_string(header_bytes) +
                        " bytes; the limit is " + std::to_string(config_.max_header_bytes),
                    "invalid_request_error", "headers_too_large");
      }
      if (needs_key) check_key(req);
      handler(req, res);
    } catch (const ApiError& e) {
      send_error(res, e);
    }
  };
  if (method == "GET") {
    server.Get(path, std::move(guarded));
  } else {
    server.Post(path, std::move(guarded));
  }
}

void HttpApi::Impl::check_key(const Request& req) const {
  if (config_.api_keys.empty()) return;
  const std::string header = req.get_header_value("Authorization");
  constexpr std::string_view kBearer = "Bearer ";
  if (header.empty()) {
    throw error(401,
                "You didn't provide an API key. Send it as a bearer token: "
                "'Authorization: Bearer YOUR_KEY'.",
                "invalid_request_error", "missing_api_key");
  }
  if (header.size() > kBearer.size() && header.starts_with(kBearer)) {
    const std::string_view given = std::string_view(header).substr(kBearer.size());
    bool ok = false;
    for (const std::string& key : config_.api_keys) ok |= same_key(given, key);
    if (ok) return;
  }
  throw error(401, "Incorrect API key provided.", "invalid_request_error", "invalid_api_key");
}

HandlerResponse HttpApi::Impl::on_error(const Request& req, Response& res) {
  if (!res.body.empty()) return HandlerResponse::Unhandled;  // a handler's own error body
  const auto known = methods_.find(req.path);
  ApiError e;
  if (ConnectionQueue::rejecting()) {
    e = error(503, "the server is at its connection limit; retry shortly", "server_error",
              "overloaded");
    e.retry_after_s = 1;
    res.set_header("Connection", "close");
  } else if ((res.status == 404 || res.status == 400) && known != methods_.end() &&
             !req.method.empty()) {
    std::string allow;
    for (const std::string& m : known->second) allow += (allow.empty() ? "" : ", ") + m;
    res.set_header("Allow", allow);
    e = error(405,
              "Method " + req.method + " is not allowed on " + req.path + " (use " + allow + ")",
              "invalid_request_error", "method_not_allowed");
  } else if (res.status == 404) {
    e = error(404, "Invalid URL (" + req.method + " " + shown_path(req.path) + ")",
              "invalid_request_error", "not_found");
  } else if (res.status == 413) {
    if (req.get_header_value("Content-Type").starts_with("application/x-www-form-urlencoded")) {
      e = error(413,
                "form-encoded bodies are limited to " + std::to_string(kLibraryFormBodyLimit) +
                    " bytes; send the JSON with 'Content-Type: application/json'",
                "invalid_request_error", "request_too_large");
    } else {
      e = error(413,
                "the request body is over the limit of " + std::to_string(config_.max_body_bytes) +
                    " bytes",
                "invalid_request_error", "request_too_large");
    }
  } else if (res.status == 414) {
    e = error(414, "the request URI is over " + std::to_string(kLibraryUriLimit) + " bytes",
              "invalid_request_error", "uri_too_long");
  } else if (res.status < 500) {
    e = error(res.status, "malformed HTTP request (status " + std::to_string(res.status) + ")",
              "invalid_request_error", "bad_request");
  } else {
    e = error(res.status, "internal error; see the server log", "server_error");
  }
  send_error(res, e);
  return HandlerResponse::Handled;
}

bool HttpApi::Impl::origin_allowed(const std::string& origin) const {
  if (origin.empty()) return false;
  for (const std::string& allowed : config_.cors_origins) {
    if (allowed == "*" || allowed == origin) return true;
  }
  return false;
}

void HttpApi::Impl::add_cors_headers(const Request& req, Response& res) const {
  const std::string origin = req.get_header_value("Origin");
  if (!origin_allowed(origin)) return;
  const bool any = std::find(config_.cors_origins.begin(), config_.cors_origins.end(), "*") !=
                   config_.cors_origins.end();
  res.set_header("Access-Control-Allow-Origin", any ? "*" : origin);
  if (!any) res.set_header("Vary", "Origin");
  res.set_header("Access-Control-Expose-Headers", "Retry-After, X-Sample-Rate");
}

void HttpApi::Impl::preflight(const Request& req, Response& res) {
  const auto known = methods_.find(req.path);
  if (known == methods_.end()) {
    send_error(res, error(404, "Invalid URL (OPTIONS " + shown_path(req.path) + ")",
                          "invalid_request_error", "not_found"));
    return;
  }
  if (!origin_allowed(req.get_header_value("Origin"))) {
    send_error(res, error(403, "cross-origin requests from this origin are not allowed",
                          "invalid_request_error", "origin_not_allowed"));
    return;
  }
  std::string allow = "OPTIONS";
  for (const std::string& m : known->second) allow += ", " + m;
  res.status = 204;
  res.set_header("Access-Control-Allow-Methods", allow);
  res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
  res.set_header("Access-Control-Max-Age", "600");
}

std::string HttpApi::Impl::route_label(const std::string& path) const {
  return methods_.contains(path) ? path : "other";
}

void HttpApi::Impl::log_request(const Request& req, const Response& res) {
  const std::string route = route_label(req.path);
  metrics_
      .counter("voxd_http_requests_total", "HTTP requests by route and status code.",
               {{"route", route}, {"code", std::to_string(res.status)}})
      .inc();
  nlohmann::ordered_json fields = {{"id", t_request.started ? t_request.id : new_request_id()},
                                   {"method", req.method},
                                   {"path", shown_path(req.path)},
                                   {"status", res.status}};
  if (t_request.started) {
    const double seconds = seconds_since(t_request.start);
    metrics_
        .histogram("voxd_http_request_duration_seconds",
                   "Time from a request's headers to the end of its response.",
                   default_latency_buckets(), {{"route", route}})
        .observe(seconds);
    fields["duration_ms"] = std::round(seconds * 10000.0) / 10.0;
    for (const auto& [key, value] : t_request.fields.items()) fields[key] = value;
  }
  t_request = RequestState{};
  // Probes and scrapes come every few seconds: only at debug level.
  const bool routine = route == "/healthz" || route == "/readyz" || route == "/metrics";
  log_event(routine ? spdlog::level::debug : spdlog::level::info, "request", fields);
}

void HttpApi::Impl::count_speech(const std::string& outcome) {
  metrics_
      .counter("voxd_speech_requests_total",
               "Speech requests by outcome: ok, client_error (4xx), rejected (overload), "
               "cancelled (client gone or server stopping), failed (5xx or cut off).",
               {{"outcome", outcome}})
      .inc();
}

void HttpApi::Impl::count_audio(size_t samples, int64_t sample_rate, SpeechCall& call) {
  if (call.first_audio) {
    call.first_audio = false;
    call.ttfa_s = seconds_since(call.started);
    metrics_
        .histogram("voxd_speech_time_to_first_audio_seconds",
                   "Time from a speech request's arrival to its first audio.",
                   default_latency_buckets())
        .observe(call.ttfa_s);
  }
  const double seconds = static_cast<double>(samples) / static_cast<double>(sample_rate);
  call.audio_s += seconds;
  metrics_.counter("voxd_speech_audio_seconds_total", "Seconds of audio produced.").inc(seconds);
}

void HttpApi::Impl::speech(const Request& req, Response& res) {
  auto call = std::make_shared<SpeechCall>(*this);
  SpeechRequest request;
  try {
    SpeechPolicy policy;
    policy.models = service_.models();
    for (const VoiceInfo& v : service_.voices()) policy.voices.push_back(v.id);
    policy.max_input_chars = config_.max_input_chars;
    request = parse_speech_request(req.body, policy);
    t_request.fields["voice"] = request.voice;
    t_request.fields["chars"] = code_points(request.input);
    t_request.fields["format"] = std::string(format_name(request.response_format));
    t_request.fields["stream"] = request.stream;
    call->job = service_.admit(request);
  } catch (const ApiError& e) {
    count_speech(e.status == 503 || e.status == 429 ? "rejected"
                 : e.status < 500                   ? "client_error"
                                                    : "failed");
    if (e.code) t_request.fields["error"] = *e.code;
    throw;
  } catch (const std::exception&) {
    count_speech("failed");
    throw;  // the exception handler answers 500 and logs it
  }
  try {
    call->encoder =
        make_audio_encoder(request.response_format, call->job->sample_rate(),
                           request.stream ? EncoderMode::kStream : EncoderMode::kWholeFile);
  } catch (const Error& e) {
    count_speech("failed");
    spdlog::error("speech: {}", e.what());
    throw error(500, std::string("cannot encode this voice's audio: ") + e.what(), "server_error");
  }
  res.set_header("X-Sample-Rate", std::to_string(call->encoder->output_sample_rate()));
  if (request.stream) {
    stream_speech(res, std::move(call), request.response_format);
  } else {
    file_speech(res, *call, request.response_format);
  }
}

void HttpApi::Impl::stream_speech(Response& res, std::shared_ptr<SpeechCall> call,
                                  AudioFormat format) {
  res.set_chunked_content_provider(
      std::string(content_type(format)), [this, call](size_t, httplib::DataSink& sink) {
        const int64_t rate = call->job->sample_rate();
        ChunkedSink out(*call->encoder, sink, call->cancel,
                        [&](size_t samples) { count_audio(samples, rate, *call); });
        std::string outcome = "cancelled";
        try {
          call->job->run(out, call->cancel);
          call->job.reset();  // releases the admission before the client sees the end
          if (!call->cancel.cancelled() && out.finish()) {
            count_speech("ok");
            call->log_outcome("ok");
            return true;
          }
        } catch (const std::exception& e) {
          spdlog::warn("speech stream {} cut off: {}", t_request.id, e.what());
          outcome = "failed";
        } catch (const ApiError& e) {
          spdlog::warn("speech stream {} cut off: {}", t_request.id, e.message);
          outcome = "failed";
        }
        count_speech(outcome);
        call->log_outcome(outcome);
        call->job.reset();
        call->cancel.cancel();
        return false;  // cpp-httplib closes the connection without ending the chunked body
      });
}

void HttpApi::Impl::file_speech(Response& res, SpeechCall& call, AudioFormat format) {
  const int64_t rate = call.job->sample_rate();
  FileSink out(*call.encoder, call.cancel,
               [&](size_t samples) { count_audio(samples, rate, call); });
  try {
    call.job->run(out, call.cancel);
    call.job.reset();  // releases the admission before the file is sent
    if (call.cancel.cancelled()) {
      count_speech("cancelled");
      call.log_outcome("cancelled");
      throw error(503, "the server is stopping", "server_error", "shutting_down");
    }
    res.set_content(out.finish(), std::string(content_type(format)));
    count_speech("ok");
    call.log_outcome("ok");
  } catch (const ApiError& e) {
    if (e.code != "shutting_down") {
      count_speech(e.status < 500 ? "client_error" : "failed");
      call.log_outcome(e.status < 500 ? "client_error" : "failed");
    }
    throw;
  } catch (const std::exception& e) {
    count_speech("failed");
    call.log_outcome("failed");
    spdlog::error("speech {} failed: {}", t_request.id, e.what());
    throw error(500, std::string("speech synthesis failed: ") + e.what(), "server_error");
  }
}

HttpApi::HttpApi(HttpConfig config, SpeechService& service, MetricsRegistry& metrics)
    : impl_(std::make_unique<Impl>(std::move(config), service, metrics)) {}

HttpApi::~HttpApi() {
  stop();
}

void HttpApi::start() {
  VOXD_CHECK(!thread_.joinable(), "HttpApi::start called twice");
  const HttpConfig& config = impl_->config();
  int port = config.port;
  if (port == 0) {
    port = impl_->server.bind_to_any_port(config.host);
  } else if (!impl_->server.bind_to_port(config.host, port)) {
    port = -1;
  }
  if (port <= 0) {
    throw Error("cannot listen on " + config.host + ":" + std::to_string(config.port) +
                ": the address is not local or the port is in use (pick another with --port)");
  }
  port_ = port;
  // cpp-httplib (0.11 in Debian 12) listens with a backlog of 5: a burst of clients connecting at
  // once overflows it and waits out SYN retransmits (a second or more). Listening again on the
  // bound socket raises the backlog to the system's maximum.
  if (::listen(impl_->listening_socket.load(), SOMAXCONN) != 0) {
    spdlog::warn(
        "could not raise the listen backlog of {}:{} to {}; bursts of connections may "
        "wait for retransmits",
        config.host, port, SOMAXCONN);
  }
  thread_ = std::thread([this] { impl_->server.listen_after_bind(); });
  // cpp-httplib's stop() does nothing until the accept loop has begun, so a stop() right after
  // start() would leave it running: wait for it (it begins at once).
  while (!impl_->server.is_running()) std::this_thread::yield();
  listening_.store(true);
}

void HttpApi::stop_accepting() {
  impl_->start_draining();
  // cpp-httplib's stop() closes the listening socket; connections end after their current
  // request, and listen_after_bind() returns once they all have.
  if (listening_.exchange(false)) impl_->server.stop();
}

size_t HttpApi::shutdown(std::chrono::steady_clock::duration grace) {
  if (!thread_.joinable()) return 0;
  stop_accepting();
  impl_->wait_for_speech(grace);
  const size_t cancelled = impl_->cancel_all();
  thread_.join();
  return cancelled;
}

void HttpApi::stop() {
  shutdown(std::chrono::steady_clock::duration::zero());
}

size_t HttpApi::speech_in_progress() const {
  return impl_->speech_in_progress();
}

}  // namespace voxd::server
