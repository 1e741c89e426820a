#include "server/http_api.h"

#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <future>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string_view>
#include <thread>
#include <utility>

#include "core/error.h"
#include "server/api_error.h"
#include "server/audio_encoder.h"
#include "server/descriptor_table.h"
#include "server/http_connection.h"
#include "server/logging.h"
#include "server/sse_encoder.h"
#include "server/web_page.h"

namespace voxd::server {
namespace {

namespace net = boost::asio;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;
using nlohmann::json;
using tcp = net::ip::tcp;

constexpr std::string_view kSpeechPath = "/v1/audio/speech";
constexpr std::string_view kModelPrefix = "/v1/models/";
// Connections over max_connections are answered 503 by a small writer each; beyond this many at
// once they are closed unanswered.
constexpr size_t kMaxRejecting = 256;
constexpr std::chrono::milliseconds kRejectTimeout{1000};
// Connections taken from the listen queue at once after each that async_accept brings, without a
// trip through the reactor apiece: in a burst of 1,000 on an H100 this took 9-10 ms off the median
// wait between a client's write and its header's read (bench/NOTES.md, session 48).
constexpr int kAcceptAtOnce = 256;
// What a rejected connection reads and drops, at most, before it closes.
constexpr size_t kRejectDropBytes = 1 << 20;
// After the grace, how long cancelled replies get to send their ends, and how long the
// connections get to close, before the threads are stopped regardless.
constexpr std::chrono::milliseconds kCancelTime{1000};
constexpr std::chrono::milliseconds kCloseTime{2000};

std::chrono::milliseconds millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(seconds * 1000.0)));
}

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

std::string header_value(const RequestHead& head, std::string_view name) {
  const auto at = head.find(name);
  return at == head.end() ? std::string() : std::string(at->value());
}

// A client's X-Request-Id when it is short and printable, else a new one.
std::string request_id(const RequestHead& head) {
  const std::string given = header_value(head, "X-Request-Id");
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

HttpResponse json_response(http::status status, const json& body) {
  HttpResponse res{status, 11};
  res.set(http::field::content_type, "application/json");
  res.body() = json_text(body);
  return res;
}

HttpResponse text_response(std::string body, std::string_view content_type) {
  HttpResponse res{http::status::ok, 11};
  res.set(http::field::content_type, content_type);
  res.body() = std::move(body);
  return res;
}

HttpResponse error_response(const ApiError& error) {
  HttpResponse res = json_response(static_cast<http::status>(error.status), error.body());
  if (error.retry_after_s) res.set(http::field::retry_after, std::to_string(*error.retry_after_s));
  if (error.status == 401) res.set(http::field::www_authenticate, "Bearer");
  return res;
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

ApiError shutting_down() {
  ApiError e = error(503, "the server is shutting down; retry on another instance", "server_error",
                     "shutting_down");
  e.retry_after_s = 1;
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

// A request path as shown in messages and logs: at most 200 bytes.
std::string shown_path(std::string_view path) {
  return path.size() <= 200 ? std::string(path) : std::string(path.substr(0, 200)) + "...";
}

std::string_view path_of(std::string_view target) {
  return target.substr(0, target.find('?'));
}

// The value of `name` in a request target's query string ("" when absent).
std::string query_value(std::string_view target, std::string_view name) {
  const size_t question = target.find('?');
  if (question == std::string_view::npos) return "";
  std::string_view query = target.substr(question + 1);
  while (!query.empty()) {
    const std::string_view pair = query.substr(0, query.find('&'));
    if (pair.substr(0, pair.find('=')) == name && pair.size() > name.size()) {
      return std::string(pair.substr(name.size() + 1));
    }
    if (pair.size() == query.size()) break;
    query.remove_prefix(pair.size() + 1);
  }
  return "";
}

// The outcome of a speech request, as voxd_speech_requests_total counts it and the access log
// shows it.
std::string outcome_of(const ApiError& e) {
  if (e.code == "shutting_down") return "cancelled";
  if (e.status == 503 || e.status == 429) return "rejected";
  return e.status < 500 ? "client_error" : "failed";
}

// What the access log, the request metrics and the response headers need of one request.
struct RequestInfo {
  std::string id;
  std::string method;
  std::string path;   // as shown: at most 200 bytes
  std::string route;  // the metrics label: a known route or "other"
  std::string origin;
  Clock::time_point start = Clock::now();
  // Added to the access log line (voice, chars, ttfa_ms, ...), in this order.
  nlohmann::ordered_json fields = nlohmann::ordered_json::object();
};

}  // namespace

class HttpApi::Impl final : public RequestHandler {
 public:
  Impl(HttpConfig config, SpeechService& service, MetricsRegistry& metrics);

  void start(int& port);
  void stop_accepting();
  bool wait_for_speech(Clock::duration grace);
  size_t shutdown(Clock::duration grace);
  size_t speech_in_progress() const {
    std::lock_guard lock(speech_mutex_);
    return running_.size() + arriving_;
  }

  Screening screen(const RequestHead& head) override;
  std::shared_ptr<Reply> handle(HttpRequest request, std::function<void()> wake,
                                std::shared_ptr<void> arrival) override;
  std::shared_ptr<Reply> unreadable(ReadFailure failure, const RequestHead* head) override;

 private:
  class LoggedReply;
  class FixedReply;
  class SpeechReply;

  RequestInfo info_of(const RequestHead& head) const;
  std::shared_ptr<Reply> fixed(RequestInfo info, HttpResponse response);
  // A refusal of any request; one of a speech request (no key, too large, too slow, shutting
  // down) counts in voxd_speech_requests_total as the replies of admitted ones do.
  std::shared_ptr<Reply> refuse(RequestInfo info, const ApiError& e) {
    if (info.route == kSpeechPath) count_speech(outcome_of(e));
    return fixed(std::move(info), error_response(e));
  }
  // Routes and methods: the methods a path answers, empty for an unknown path.
  std::set<std::string> methods_of(std::string_view path) const;
  std::string route_label(std::string_view path) const;
  bool origin_allowed(const std::string& origin) const;
  void add_cors_headers(const RequestInfo& info, HttpResponse& res) const;
  std::optional<ApiError> key_problem(const RequestHead& head) const;
  HttpResponse preflight(const RequestInfo& info, const RequestHead& head) const;
  HttpResponse answer_get(RequestInfo& info, const HttpRequest& request);
  HttpResponse metrics_page();
  // Brings every gauge up to date (the service's and the HTTP layer's own).
  void update_metrics();
  json model_json(const std::string& id) const;
  // The reply to a speech request, admitted on the admission threads; it takes over `arrival`'s
  // count.
  std::shared_ptr<Reply> speech(RequestInfo info, HttpRequest request, std::function<void()> wake,
                                const std::shared_ptr<void>& arrival);
  SpeechPolicy speech_policy() const;
  void log_request(const RequestInfo& info, int status, bool delivered);
  void count_speech(const std::string& outcome);

  void accept();
  // Accepts the connections waiting in the listen queue (up to kAcceptAtOnce), without waiting.
  void accept_waiting();
  void open_connection(tcp::socket socket);
  struct Rejection;
  void reject_connection(tcp::socket socket);
  void drop_until_closed(const std::shared_ptr<Rejection>& rejection);
  void end_rejection(Rejection& rejection);
  // Every open connection, for draining and aborting.
  std::vector<std::shared_ptr<Connection>> connections();
  size_t open_connections() {
    std::lock_guard lock(connections_mutex_);
    return connections_.size();
  }
  // Raises the open-file limit for max_connections and grows the descriptor table to match.
  void prepare_open_files() const;

  // A speech request whose body is being read, counted until its reply takes the count over
  // (register_speech) or it is dropped; null when the server is draining (checked under the lock
  // wait_for_speech() takes, so that a request let in is waited for).
  class Arrival;
  std::shared_ptr<void> arriving_speech();
  // Speech replies in progress, for speech_in_progress(), the grace and cancellation. `arrival`
  // (arriving_speech()'s, or null) stops counting in the same step, so that a request counts
  // once from its headers to its reply's end.
  void register_speech(SpeechReply* reply, const std::shared_ptr<void>& arrival);
  void unregister_speech(SpeechReply* reply);
  size_t cancel_speech();

  const HttpConfig config_;
  const ConnectionLimits limits_;
  SpeechService& service_;
  MetricsRegistry& metrics_;
  std::string overloaded_response_;  // the bytes a connection over the limit gets
  std::atomic<bool> draining_{false};
  bool started_ = false;
  bool stopped_ = false;

  // Declared before the io_context, so that handlers destroyed with it (connections, replies)
  // still find them.
  std::mutex connections_mutex_;
  std::condition_variable connections_closed_;
  std::map<const Connection*, std::weak_ptr<Connection>> connections_;
  std::atomic<size_t> rejecting_{0};
  std::atomic<size_t> awaiting_admission_{0};  // speech posted to the admission pool, not begun
  std::atomic<uint64_t> rejected_{0};
  mutable std::mutex speech_mutex_;
  std::condition_variable speech_ended_;
  std::set<SpeechReply*> running_;
  size_t arriving_ = 0;  // speech requests whose bodies are being read
  bool cancelling_ = false;

  net::io_context io_;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work_;
  net::strand<net::io_context::executor_type> accept_strand_;
  tcp::acceptor acceptor_;
  net::steady_timer accept_retry_;
  std::vector<std::thread> threads_;
  // Admits speech requests (parsing, the text front end): CPU work kept off the threads above.
  std::optional<net::thread_pool> admission_pool_;
};

// A reply that writes its request's access log line and metrics when it finishes, and puts the
// request id and CORS headers on its response.
class HttpApi::Impl::LoggedReply : public Reply {
 public:
  LoggedReply(Impl& api, RequestInfo info) : api_(api), info_(std::move(info)) {}

  void finished(bool delivered) override {
    if (logged_) return;
    logged_ = true;
    on_finished(delivered);
    api_.log_request(info_, status_, delivered);
  }

 protected:
  // Subclasses' own accounting, just before the log line.
  virtual void on_finished(bool) {}
  HttpResponse decorated(HttpResponse res) {
    status_ = res.result_int();
    res.set("X-Request-Id", info_.id);
    api_.add_cors_headers(info_, res);
    return res;
  }

  Impl& api_;
  RequestInfo info_;
  int status_ = 0;
  bool logged_ = false;
};

// A response known at once.
class HttpApi::Impl::FixedReply final : public LoggedReply {
 public:
  FixedReply(Impl& api, RequestInfo info, HttpResponse response)
      : LoggedReply(api, std::move(info)), response_(decorated(std::move(response))) {}

  ReplyStep next() override { return ReplyStep::respond(std::move(response_)); }

 private:
  HttpResponse response_;
};

// One speech request from admission to the end of its response. Admission (parsing, the text
// front end, the engine's queue) runs on the admission threads, so that the connections' threads
// only move bytes; then the reply takes the job's audio as it is made (woken by the engine),
// encodes it and hands it to the connection as a chunked body, server-sent events, or one file at
// the end.
class HttpApi::Impl::SpeechReply final : public LoggedReply {
 public:
  // `wake` asks the connection to call next() again.
  SpeechReply(Impl& api, RequestInfo info, std::function<void()> wake,
              const std::shared_ptr<void>& arrival)
      : LoggedReply(api, std::move(info)), wake_(std::move(wake)) {
    api_.register_speech(this, arrival);
  }
  ~SpeechReply() override { api_.unregister_speech(this); }

  // On an admission thread: parses `body`, admits it, makes its encoder and starts the job (or
  // keeps the error to answer), then wakes the connection. A reply the client left meanwhile
  // gets nothing: the job, if any, is dropped here.
  void admit(const std::string& body) {
    Admission a;
    a.fields = nlohmann::ordered_json::object();
    // Since the request arrived: waiting for an admission thread, then admitted (the text
    // through the front end and into the engine's queue).
    const auto ms_since_arrival = [&] {
      return std::round(seconds_since(info_.start) * 10000.0) / 10.0;
    };
    a.fields["admission_wait_ms"] = ms_since_arrival();
    try {
      const SpeechRequest request = parse_speech_request(body, api_.speech_policy());
      a.fields["voice"] = request.voice;
      const size_t chars = code_points(request.input);
      a.fields["chars"] = chars;
      a.fields["format"] = std::string(format_name(request.response_format));
      a.fields["stream"] = request.stream;
      a.format = request.response_format;
      a.mode = request.stream_format == StreamFormat::kSse ? Mode::kEvents
               : request.stream                            ? Mode::kChunked
                                                           : Mode::kFile;
      a.instructions_ignored = !request.instructions.empty();
      a.job = api_.service_.admit(request);
      a.fields["admitted_ms"] = ms_since_arrival();
      a.encoder = make_encoder(request, a.job->sample_rate(), chars);
    } catch (const ApiError& e) {
      a.error = e;
    } catch (const std::exception& e) {
      log_event(spdlog::level::err, "request failed",
                {{"id", info_.id}, {"path", info_.path}, {"error", e.what()}});
      a.error = error(500, std::string("speech synthesis failed: ") + e.what(), "server_error");
    }
    if (a.job && !a.error) a.job->start(wake_);
    {
      std::lock_guard lock(admission_mutex_);
      if (abandoned_) return;  // `a` and its job go with this scope
      admission_ = std::move(a);
    }
    wake_();
  }

  // The server is stopping: the reply ends at its next step (a stream cut off, a file 503).
  void cancel() {
    cancelled_.store(true);
    wake_();
  }

  ReplyStep next() override {
    if (!admitted_) {
      std::optional<Admission> a;
      {
        std::lock_guard lock(admission_mutex_);
        a = std::move(admission_);
        admission_.reset();
      }
      if (!a) return ReplyStep::wait();
      admitted_ = true;
      for (const auto& [key, value] : a->fields.items()) info_.fields[key] = value;
      if (a->error) return fail(*a->error);
      job_ = std::move(a->job);
      encoder_ = std::move(a->encoder);
      format_ = a->format;
      mode_ = a->mode;
      instructions_ignored_ = a->instructions_ignored;
    }
    if (head_sent_ && (pending_done_ || !pending_.empty())) {
      ReplyStep step;
      step.kind = pending_done_ ? ReplyStep::Kind::kEnd : ReplyStep::Kind::kChunk;
      step.bytes = std::move(pending_);
      pending_.clear();
      pending_done_ = false;
      return step;
    }
    if (cancelled_.load()) return fail(shutting_down());
    std::string bytes;
    bool done = false;
    // A piece at a time for a stream, until one gives bytes (a codec may hold a piece back);
    // all there is for a file.
    for (bool took = true; took && !done && (mode_ == Mode::kFile || bytes.empty());) {
      std::vector<float> samples;
      try {
        done = job_->take(samples);
      } catch (const ApiError& e) {
        return fail(e);
      } catch (const std::exception& e) {
        spdlog::error("speech {} failed: {}", info_.id, e.what());
        return fail(
            error(500, std::string("speech synthesis failed: ") + e.what(), "server_error"));
      }
      took = !samples.empty();
      try {
        if (took) {
          count_audio(samples.size());
          encoder_->write(samples, bytes);
        }
        if (done) {
          job_.reset();  // releases the admission before the client sees the end
          encoder_->finish(bytes);
        }
      } catch (const std::exception& e) {
        spdlog::error("speech {}: the encoder failed: {}", info_.id, e.what());
        return fail(
            error(500, std::string("encoding the audio failed: ") + e.what(), "server_error"));
      }
    }
    if (done) outcome_ = "ok";
    if (mode_ == Mode::kFile) {
      file_ += bytes;
      if (!done) return ReplyStep::wait();
      HttpResponse res = audio_head();
      res.body() = std::move(file_);
      return ReplyStep::respond(decorated(std::move(res)));
    }
    if (bytes.empty() && !done) return ReplyStep::wait();
    if (!head_sent_) {
      // The head goes with the first audio, so that a request that fails before it gets its
      // error's status rather than a 200 cut short.
      head_sent_ = true;
      pending_ = std::move(bytes);
      pending_done_ = done;
      ReplyStep step;
      step.kind = ReplyStep::Kind::kHead;
      step.response = decorated(audio_head());
      return step;
    }
    ReplyStep step;
    step.kind = done ? ReplyStep::Kind::kEnd : ReplyStep::Kind::kChunk;
    step.bytes = std::move(bytes);
    return step;
  }

 protected:
  void on_finished(bool delivered) override {
    {
      std::lock_guard lock(admission_mutex_);
      abandoned_ = true;
      admission_.reset();
    }
    job_.reset();
    // Sent in full: what it planned to send; otherwise the client saw a cut: its own leaving or
    // a server that stopped is "cancelled", a failure stays one.
    const std::string outcome = delivered              ? outcome_.value_or("failed")
                                : outcome_ == "failed" ? "failed"
                                                       : "cancelled";
    api_.count_speech(outcome);
    if (!first_audio_) info_.fields["ttfa_ms"] = std::round(ttfa_s_ * 10000.0) / 10.0;
    info_.fields["audio_s"] = std::round(audio_s_ * 1000.0) / 1000.0;
    info_.fields["outcome"] = outcome;
  }

 private:
  enum class Mode { kChunked, kEvents, kFile };

  // What admission made, handed from the admission thread to the connection's strand.
  struct Admission {
    std::optional<ApiError> error;
    std::unique_ptr<SpeechJob> job;
    std::unique_ptr<AudioEncoder> encoder;
    AudioFormat format = AudioFormat::kMp3;
    Mode mode = Mode::kChunked;
    bool instructions_ignored = false;
    nlohmann::ordered_json fields;  // for the access log
  };

  // The encoder for `request`'s format and stream form (`chars`: its input's characters, the
  // events' input tokens); a voice rate the codec cannot take is the server's failure (500).
  static std::unique_ptr<AudioEncoder> make_encoder(const SpeechRequest& request, int64_t rate,
                                                    size_t chars) {
    const bool events = request.stream_format == StreamFormat::kSse;
    try {
      std::unique_ptr<AudioEncoder> encoder = make_audio_encoder(
          request.response_format, rate,
          request.stream || events ? EncoderMode::kStream : EncoderMode::kWholeFile,
          request.sample_rate);
      if (!events) return encoder;
      return make_sse_encoder(std::move(encoder), rate, static_cast<int64_t>(chars));
    } catch (const Error& e) {
      spdlog::error("speech: {}", e.what());
      throw error(500, std::string("cannot encode this voice's audio: ") + e.what(),
                  "server_error");
    }
  }

  HttpResponse audio_head() const {
    HttpResponse res{http::status::ok, 11};
    res.set(http::field::content_type,
            mode_ == Mode::kEvents ? kSseContentType : content_type(format_));
    if (mode_ == Mode::kEvents) res.set(http::field::cache_control, "no-cache");
    res.set("X-Sample-Rate", std::to_string(encoder_->output_sample_rate()));
    // voxd's voices cannot follow instructions: the field is accepted for OpenAI's clients and
    // the response says it was not used.
    if (instructions_ignored_) res.set("X-Ignored-Fields", "instructions");
    return res;
  }

  // What the client gets when the request fails: its error as the response before any audio,
  // an error event in an event stream, a cut-off chunked body otherwise.
  ReplyStep fail(const ApiError& e) {
    job_.reset();
    outcome_ = outcome_of(e);
    if (e.code) info_.fields["error"] = *e.code;
    if (mode_ == Mode::kFile || !head_sent_) {
      return ReplyStep::respond(decorated(error_response(e)));
    }
    if (mode_ == Mode::kEvents) {
      ReplyStep step;
      step.kind = ReplyStep::Kind::kEnd;
      step.bytes = std::move(pending_) +
                   "data: " + json_text(json{{"type", "error"}, {"error", e.body()["error"]}}) +
                   "\n";
      return step;
    }
    spdlog::warn("speech stream {} cut off: {}", info_.id, e.message);
    ReplyStep step;
    step.kind = ReplyStep::Kind::kCut;
    return step;
  }

  void count_audio(size_t samples) {
    if (first_audio_) {
      first_audio_ = false;
      ttfa_s_ = seconds_since(info_.start);
      api_.metrics_
          .histogram("voxd_speech_time_to_first_audio_seconds",
                     "Time from a speech request's arrival to its first audio.",
                     default_latency_buckets())
          .observe(ttfa_s_);
    }
    const double seconds = static_cast<double>(samples) / static_cast<double>(job_->sample_rate());
    audio_s_ += seconds;
    api_.metrics_.counter("voxd_speech_audio_seconds_total", "Seconds of audio produced.")
        .inc(seconds);
  }

  const std::function<void()> wake_;
  std::mutex admission_mutex_;
  std::optional<Admission> admission_;  // made, not yet handed over
  bool abandoned_ = false;              // finished before its admission was handed over
  // The connection's strand alone from here on.
  bool admitted_ = false;
  std::unique_ptr<SpeechJob> job_;
  std::unique_ptr<AudioEncoder> encoder_;
  AudioFormat format_ = AudioFormat::kMp3;
  Mode mode_ = Mode::kChunked;
  bool instructions_ignored_ = false;
  std::atomic<bool> cancelled_{false};
  bool head_sent_ = false;
  std::string pending_;  // bytes made with the head, sent right after it
  bool pending_done_ = false;
  std::string file_;
  std::optional<std::string> outcome_;
  bool first_audio_ = true;
  double ttfa_s_ = 0.0;
  double audio_s_ = 0.0;
};

HttpApi::Impl::Impl(HttpConfig config, SpeechService& service, MetricsRegistry& metrics)
    : config_(std::move(config)),
      limits_{config_.max_header_bytes,
              config_.max_body_bytes,
              millis(config_.header_timeout_s),
              millis(config_.read_timeout_s),
              millis(config_.keep_alive_timeout_s),
              millis(config_.write_timeout_s)},
      service_(service),
      metrics_(metrics),
      accept_strand_(net::make_strand(io_)),
      acceptor_(accept_strand_),
      accept_retry_(accept_strand_) {
  ApiError e = error(503,
                     "the server is at its connection limit (" +
                         std::to_string(config_.max_connections) + "); retry shortly",
                     "server_error", "overloaded");
  e.retry_after_s = 1;
  HttpResponse res = error_response(e);
  res.keep_alive(false);
  res.prepare_payload();
  std::ostringstream text;
  text << res;
  overloaded_response_ = text.str();
  service_.bind_metrics(metrics_);
}

void HttpApi::Impl::start(int& port) {
  VOXD_CHECK(!started_, "HttpApi::start called twice");
  error_code ec;
  const net::ip::address address = net::ip::make_address(config_.host, ec);
  if (ec) {
    throw Error("cannot listen on " + config_.host +
                ": not an IP address (give --host as "
                "127.0.0.1, 0.0.0.0 or ::)");
  }
  const tcp::endpoint endpoint(address, static_cast<unsigned short>(config_.port));
  acceptor_.open(endpoint.protocol(), ec);
  // SO_REUSEADDR allows a quick restart; no SO_REUSEPORT, with which a second server could
  // take some of this one's connections.
  if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
  // accept_waiting's accepts return would_block once the queue is empty.
  if (!ec) acceptor_.non_blocking(true, ec);
  if (ec) {
    error_code ignored;
    acceptor_.close(ignored);
    throw Error("cannot listen on " + config_.host + ":" + std::to_string(config_.port) + ": " +
                ec.message() + " (pick another with --port)");
  }
  port = acceptor_.local_endpoint().port();
  prepare_open_files();
  started_ = true;
  work_.emplace(io_.get_executor());
  net::post(accept_strand_, [this] { accept(); });
  const unsigned threads = config_.threads > 0
                               ? static_cast<unsigned>(config_.threads)
                               : std::clamp(std::thread::hardware_concurrency(), 1u, 4u);
  for (unsigned i = 0; i < threads; ++i) threads_.emplace_back([this] { io_.run(); });
  admission_pool_.emplace(static_cast<size_t>(admission_thread_count(config_)));
}

void HttpApi::Impl::prepare_open_files() const {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  const rlim_t wanted = static_cast<rlim_t>(config_.max_connections) + kMaxRejecting + 256;
  if (limit.rlim_cur < wanted) {
    const rlim_t before = limit.rlim_cur;
    limit.rlim_cur = std::min(wanted, limit.rlim_max);
    if (setrlimit(RLIMIT_NOFILE, &limit) != 0) limit.rlim_cur = before;
    if (limit.rlim_cur < wanted) {
      spdlog::warn(
          "open files are limited to {} (hard limit {}); fewer than the {} connections "
          "--max-connections allows can be open at once",
          limit.rlim_cur, limit.rlim_max, config_.max_connections);
    }
  }
  const int descriptors = static_cast<int>(
      std::min<rlim_t>(std::min(wanted, limit.rlim_cur), std::numeric_limits<int>::max()));
  if (!reserve_descriptor_table(descriptors)) {
    spdlog::debug(
        "the descriptor table could not be grown to {} before serving: a burst of "
        "connections waits while the kernel grows it",
        descriptors);
  }
}

void HttpApi::Impl::accept() {
  acceptor_.async_accept(net::make_strand(io_), [this](error_code ec, tcp::socket socket) {
    if (!acceptor_.is_open()) return;
    if (ec) {
      // Out of file descriptors (or a passing network error): try again shortly rather than
      // spin on the error.
      spdlog::warn("accepting a connection failed: {}", ec.message());
      accept_retry_.expires_after(std::chrono::milliseconds(50));
      accept_retry_.async_wait([this](error_code wait_error) {
        if (!wait_error) accept();
      });
      return;
    }
    open_connection(std::move(socket));
    accept_waiting();
    accept();
  });
}

void HttpApi::Impl::accept_waiting() {
  for (int i = 0; i < kAcceptAtOnce; ++i) {
    error_code ec;
    tcp::socket socket(net::make_strand(io_));
    acceptor_.accept(socket, ec);
    // would_block: none waits; another error (out of file descriptors) comes again to the next
    // async_accept, which waits and retries.
    if (ec) return;
    open_connection(std::move(socket));
  }
}

void HttpApi::Impl::open_connection(tcp::socket socket) {
  std::shared_ptr<Connection> connection;
  {
    std::lock_guard lock(connections_mutex_);
    if (connections_.size() >= config_.max_connections || draining_.load()) {
      reject_connection(std::move(socket));
      return;
    }
    connection = std::shared_ptr<Connection>(new Connection(std::move(socket), limits_, *this),
                                             [this](Connection* c) {
                                               {
                                                 std::lock_guard erase_lock(connections_mutex_);
                                                 connections_.erase(c);
                                               }
                                               delete c;
                                               connections_closed_.notify_all();
                                             });
    connections_.emplace(connection.get(), connection);
  }
  connection->start();
}

// A connection over the limit, being answered 503.
struct HttpApi::Impl::Rejection {
  explicit Rejection(tcp::socket s) : socket(std::move(s)), timer(socket.get_executor()) {}
  tcp::socket socket;
  net::steady_timer timer;
  std::array<char, 4096> dropped;
  size_t dropped_bytes = 0;
};

void HttpApi::Impl::reject_connection(tcp::socket socket) {
  rejected_.fetch_add(1);
  if (rejecting_.load() >= kMaxRejecting) return;  // closed unanswered when `socket` goes
  // Answered at once with the canned 503; then what the client still sends (its request) is
  // read and dropped until it closes, so that closing does not reset the connection under the
  // 503 (a client still sending its body would see only the reset). Cut off after
  // kRejectTimeout either way.
  rejecting_.fetch_add(1);
  auto rejection = std::make_shared<Rejection>(std::move(socket));
  rejection->timer.expires_after(kRejectTimeout);
  rejection->timer.async_wait([rejection](error_code ec) {
    if (!ec) rejection->socket.close(ec);
  });
  net::async_write(rejection->socket, net::buffer(overloaded_response_),
                   [this, rejection](error_code ec, size_t) {
                     if (ec) {
                       end_rejection(*rejection);
                       return;
                     }
                     rejection->socket.shutdown(tcp::socket::shutdown_send, ec);
                     drop_until_closed(rejection);
                   });
}

void HttpApi::Impl::drop_until_closed(const std::shared_ptr<Rejection>& rejection) {
  rejection->socket.async_read_some(net::buffer(rejection->dropped),
                                    [this, rejection](error_code ec, size_t n) {
                                      rejection->dropped_bytes += n;
                                      // Closed, cut off, or more than a request's worth.
                                      if (ec || rejection->dropped_bytes > kRejectDropBytes) {
                                        end_rejection(*rejection);
                                        return;
                                      }
                                      drop_until_closed(rejection);
                                    });
}

void HttpApi::Impl::end_rejection(Rejection& rejection) {
  rejection.timer.cancel();
  error_code ignored;
  rejection.socket.close(ignored);
  rejecting_.fetch_sub(1);
}

std::vector<std::shared_ptr<Connection>> HttpApi::Impl::connections() {
  std::vector<std::weak_ptr<Connection>> weak;
  {
    std::lock_guard lock(connections_mutex_);
    for (const auto& entry : connections_) weak.push_back(entry.second);
  }
  // Locked outside the mutex: the last reference to a connection may go here, and its deleter
  // takes the mutex.
  std::vector<std::shared_ptr<Connection>> open;
  for (const auto& w : weak) {
    if (auto c = w.lock()) open.push_back(std::move(c));
  }
  return open;
}

void HttpApi::Impl::stop_accepting() {
  if (draining_.exchange(true) || !started_) return;
  std::promise<void> closed;
  net::post(accept_strand_, [this, &closed] {
    error_code ignored;
    acceptor_.close(ignored);
    accept_retry_.cancel();
    closed.set_value();
  });
  closed.get_future().wait();
  for (const auto& c : connections()) c->drain();
}

size_t HttpApi::Impl::shutdown(Clock::duration grace) {
  if (!started_ || stopped_) return 0;
  stopped_ = true;
  stop_accepting();
  wait_for_speech(grace);
  const size_t cancelled = cancel_speech();
  {
    std::unique_lock lock(speech_mutex_);
    speech_ended_.wait_for(lock, kCancelTime, [this] { return running_.empty(); });
  }
  admission_pool_->join();  // no request comes in any more: what it holds is done soon
  for (const auto& c : connections()) c->abort();
  {
    std::unique_lock lock(connections_mutex_);
    connections_closed_.wait_for(lock, kCloseTime, [this] { return connections_.empty(); });
  }
  // The threads end once no handler is left; connections that did not close by now are dropped
  // with the io_context.
  work_.reset();
  io_.stop();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  io_.restart();
  io_.poll();
  return cancelled;
}

bool HttpApi::Impl::wait_for_speech(Clock::duration grace) {
  std::unique_lock lock(speech_mutex_);
  const auto wait = std::min<Clock::duration>(grace, std::chrono::hours(24));
  return speech_ended_.wait_for(lock, wait, [this] { return running_.empty() && arriving_ == 0; });
}

// Counts one speech request in arriving_ from its headers until its reply takes the count over
// or the request is dropped.
class HttpApi::Impl::Arrival {
 public:
  explicit Arrival(Impl& api) : api_(api) {}
  Arrival(const Arrival&) = delete;
  Arrival& operator=(const Arrival&) = delete;
  ~Arrival() {
    {
      std::lock_guard lock(api_.speech_mutex_);
      if (!taken_over_) --api_.arriving_;
    }
    api_.speech_ended_.notify_all();
  }
  // Under speech_mutex_: the request counts elsewhere from now on.
  void take_over() {
    if (!taken_over_) --api_.arriving_;
    taken_over_ = true;
  }

 private:
  Impl& api_;
  bool taken_over_ = false;
};

std::shared_ptr<void> HttpApi::Impl::arriving_speech() {
  std::lock_guard lock(speech_mutex_);
  if (draining_.load()) return nullptr;
  ++arriving_;
  return std::make_shared<Arrival>(*this);
}

void HttpApi::Impl::register_speech(SpeechReply* reply, const std::shared_ptr<void>& arrival) {
  std::lock_guard lock(speech_mutex_);
  running_.insert(reply);
  if (arrival) static_cast<Arrival*>(arrival.get())->take_over();
  if (cancelling_) reply->cancel();
}

void HttpApi::Impl::unregister_speech(SpeechReply* reply) {
  {
    std::lock_guard lock(speech_mutex_);
    running_.erase(reply);
  }
  speech_ended_.notify_all();
}

size_t HttpApi::Impl::cancel_speech() {
  std::lock_guard lock(speech_mutex_);
  cancelling_ = true;
  for (SpeechReply* reply : running_) reply->cancel();
  return running_.size();
}

RequestInfo HttpApi::Impl::info_of(const RequestHead& head) const {
  RequestInfo info;
  info.id = request_id(head);
  info.method = std::string(head.method_string());
  const std::string_view path = path_of(head.target());
  info.path = shown_path(path);
  info.route = route_label(path);
  info.origin = header_value(head, "Origin");
  return info;
}

std::shared_ptr<Reply> HttpApi::Impl::fixed(RequestInfo info, HttpResponse response) {
  return std::make_shared<FixedReply>(*this, std::move(info), std::move(response));
}

std::set<std::string> HttpApi::Impl::methods_of(std::string_view path) const {
  if (path == kSpeechPath) return {"POST"};
  if (path == "/" || path == "/healthz" || path == "/readyz" || path == "/v1/models" ||
      path == "/v1/voices" || path == "/metrics" || path == "/debug/memory" ||
      path == "/debug/live") {
    return {"GET"};
  }
  if (path.starts_with(kModelPrefix) && path.size() > kModelPrefix.size()) return {"GET"};
  return {};
}

std::string HttpApi::Impl::route_label(std::string_view path) const {
  if (methods_of(path).empty()) return "other";
  if (path.starts_with(kModelPrefix)) return "/v1/models/{id}";
  return std::string(path);
}

Screening HttpApi::Impl::screen(const RequestHead& head) {
  const auto refused = [](std::shared_ptr<Reply> reply) { return Screening{std::move(reply), {}}; };
  const std::string_view path = path_of(head.target());
  const std::set<std::string> methods = methods_of(path);
  const std::string method(head.method_string());
  if (methods.empty()) {
    return refused(
        refuse(info_of(head), error(404, "Invalid URL (" + method + " " + shown_path(path) + ")",
                                    "invalid_request_error", "not_found")));
  }
  if (method == "OPTIONS" && !config_.cors_origins.empty()) {
    RequestInfo info = info_of(head);
    HttpResponse res = preflight(info, head);
    return refused(fixed(std::move(info), std::move(res)));
  }
  if (!methods.contains(method)) {
    std::string allow;
    for (const std::string& m : methods) allow += (allow.empty() ? "" : ", ") + m;
    HttpResponse res = error_response(error(
        405, "Method " + method + " is not allowed on " + shown_path(path) + " (use " + allow + ")",
        "invalid_request_error", "method_not_allowed"));
    res.set(http::field::allow, allow);
    return refused(fixed(info_of(head), std::move(res)));
  }
  const bool always_answers = path == "/healthz" || path == "/readyz";
  if (draining_.load() && !always_answers) return refused(refuse(info_of(head), shutting_down()));
  // The page holds no secret: it asks its user for the key its API calls need.
  if (path != "/healthz" && path != "/") {
    if (std::optional<ApiError> problem = key_problem(head)) {
      return refused(refuse(info_of(head), *problem));
    }
  }
  if (path != kSpeechPath) return {};
  // Its body is waited for by the grace, as speech is.
  std::shared_ptr<void> arrival = arriving_speech();
  if (!arrival) return refused(refuse(info_of(head), shutting_down()));
  return {nullptr, std::move(arrival)};
}

std::shared_ptr<Reply> HttpApi::Impl::unreadable(ReadFailure failure, const RequestHead* head) {
  RequestInfo info;
  if (head != nullptr) {
    info = info_of(*head);
  } else {
    info.id = new_request_id();
    info.route = "other";
  }
  switch (failure) {
    case ReadFailure::kHeadersTooLarge:
      return refuse(std::move(info), error(431,
                                           "the request line and headers are over the limit of " +
                                               std::to_string(config_.max_header_bytes) + " bytes",
                                           "invalid_request_error", "headers_too_large"));
    case ReadFailure::kBodyTooLarge:
      return refuse(std::move(info), error(413,
                                           "the request body is over the limit of " +
                                               std::to_string(config_.max_body_bytes) + " bytes",
                                           "invalid_request_error", "request_too_large"));
    case ReadFailure::kTimeout:
      return refuse(std::move(info),
                    error(408, "the request did not arrive in time; send it whole and promptly",
                          "invalid_request_error", "request_timeout"));
    case ReadFailure::kMalformed:
      break;
  }
  return refuse(std::move(info),
                error(400, "malformed HTTP request", "invalid_request_error", "bad_request"));
}

std::optional<ApiError> HttpApi::Impl::key_problem(const RequestHead& head) const {
  if (config_.api_keys.empty()) return std::nullopt;
  const std::string header = header_value(head, "Authorization");
  constexpr std::string_view kBearer = "Bearer ";
  if (header.empty()) {
    return error(401,
                 "You didn't provide an API key. Send it as a bearer token: "
                 "'Authorization: Bearer YOUR_KEY'.",
                 "invalid_request_error", "missing_api_key");
  }
  if (header.size() > kBearer.size() && header.starts_with(kBearer)) {
    const std::string_view given = std::string_view(header).substr(kBearer.size());
    bool ok = false;
    for (const std::string& key : config_.api_keys) ok |= same_key(given, key);
    if (ok) return std::nullopt;
  }
  return error(401, "Incorrect API key provided.", "invalid_request_error", "invalid_api_key");
}

std::shared_ptr<Reply> HttpApi::Impl::handle(HttpRequest request, std::function<void()> wake,
                                             std::shared_ptr<void> arrival) {
  RequestInfo info = info_of(request);
  try {
    if (path_of(request.target()) == kSpeechPath) {
      return speech(std::move(info), std::move(request), std::move(wake), arrival);
    }
    HttpResponse res = answer_get(info, request);
    return fixed(std::move(info), std::move(res));
  } catch (const ApiError& e) {
    return refuse(std::move(info), e);
  } catch (const std::exception& e) {
    log_event(spdlog::level::err, "request failed",
              {{"id", info.id}, {"method", info.method}, {"path", info.path}, {"error", e.what()}});
    return refuse(std::move(info),
                  error(500, "internal error while handling the request; see the server log",
                        "server_error"));
  }
}

json HttpApi::Impl::model_json(const std::string& id) const {
  return {{"id", id}, {"object", "model"}, {"created", 0}, {"owned_by", "voxd"}};
}

HttpResponse HttpApi::Impl::answer_get(RequestInfo& info, const HttpRequest& request) {
  const std::string_view path = path_of(request.target());
  if (path == "/healthz") return json_response(http::status::ok, {{"status", "ok"}});
  if (path == "/") {
    HttpResponse page = text_response(std::string(kWebPage), "text/html; charset=utf-8");
    // Everything the page uses is in it or on this server.
    page.set("Content-Security-Policy",
             "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
             "media-src 'self' blob:; connect-src 'self'; img-src 'self' data: blob:");
    page.set("X-Content-Type-Options", "nosniff");
    page.set(http::field::cache_control, "no-cache");
    return page;
  }
  if (path == "/readyz") {
    const Readiness r =
        draining_.load() ? Readiness{false, "the server is shutting down"} : service_.readiness();
    if (r.ready) return json_response(http::status::ok, {{"status", "ready"}});
    return json_response(http::status::service_unavailable,
                         {{"status", "not ready"}, {"reason", r.reason}});
  }
  if (path == "/v1/models") {
    json data = json::array();
    for (const std::string& id : service_.models()) data.push_back(model_json(id));
    return json_response(http::status::ok, {{"object", "list"}, {"data", std::move(data)}});
  }
  if (path.starts_with(kModelPrefix)) {
    const std::string id(path.substr(kModelPrefix.size()));
    const std::vector<std::string> models = service_.models();
    if (std::find(models.begin(), models.end(), id) == models.end()) {
      ApiError e = error(404, "The model '" + shown_path(id) + "' does not exist",
                         "invalid_request_error", "model_not_found");
      e.param = "model";
      throw e;
    }
    return json_response(http::status::ok, model_json(id));
  }
  if (path == "/v1/voices") {
    json data = json::array();
    for (const VoiceInfo& v : service_.voices()) {
      data.push_back({{"id", v.id},
                      {"object", "voice"},
                      {"sample_rate", v.sample_rate},
                      {"language", v.language},
                      {"family", v.family},
                      {"speakers", v.speakers},
                      {"emotions", v.emotions},
                      {"sampling", v.sampling}});
    }
    return json_response(http::status::ok, {{"object", "list"}, {"data", std::move(data)}});
  }
  if (path == "/metrics") return metrics_page();
  if (path == "/debug/live") {
    update_metrics();
    const double now =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    return json_response(http::status::ok, {{"time", now},
                                            {"memory", service_.memory_summary_json()},
                                            {"metrics", metrics_.to_json()}});
  }
  if (path == "/debug/memory") {
    if (query_value(request.target(), "format") == "json") {
      return json_response(http::status::ok, service_.memory_summary_json());
    }
    return text_response(service_.memory_summary_text(), "text/plain; charset=utf-8");
  }
  info.route = "other";
  throw error(404, "Invalid URL (" + info.method + " " + info.path + ")", "invalid_request_error",
              "not_found");
}

HttpResponse HttpApi::Impl::metrics_page() {
  update_metrics();
  return text_response(metrics_.render(), kMetricsContentType);
}

void HttpApi::Impl::update_metrics() {
  service_.collect_metrics(metrics_);
  metrics_.gauge("voxd_http_connections", "Open HTTP connections.", {{"state", "active"}})
      .set(static_cast<double>(open_connections()));
  Counter& rejected =
      metrics_.counter("voxd_http_connections_rejected_total",
                       "Connections answered 503 and closed because max_connections were open.");
  rejected.inc(static_cast<double>(rejected_.load()) - rejected.value());
  metrics_
      .gauge("voxd_speech_requests_in_progress",
             "Speech requests being handled: the body arriving, parsed, admitted, producing or "
             "sending audio.")
      .set(static_cast<double>(speech_in_progress()));
  metrics_
      .gauge("voxd_speech_requests_awaiting_admission",
             "Speech requests read and waiting for an admission thread (parsing, the text front "
             "end); past --max-queue of them more are answered 503 queue_full.")
      .set(static_cast<double>(awaiting_admission_.load()));
}

std::shared_ptr<Reply> HttpApi::Impl::speech(RequestInfo info, HttpRequest request,
                                             std::function<void()> wake,
                                             const std::shared_ptr<void>& arrival) {
  const size_t awaiting = awaiting_admission_.fetch_add(1);
  if (awaiting >= config_.max_awaiting_admission) {
    awaiting_admission_.fetch_sub(1);
    ApiError busy = error(503,
                          "the server is busy: " + std::to_string(awaiting) +
                              " speech requests wait for admission, its limit; retry after 1 s",
                          "server_error", "queue_full");
    busy.retry_after_s = 1;
    return refuse(std::move(info), busy);
  }
  try {
    auto reply = std::make_shared<SpeechReply>(*this, std::move(info), std::move(wake), arrival);
    net::post(*admission_pool_,
              [this, weak = std::weak_ptr<SpeechReply>(reply), body = std::move(request.body())] {
                awaiting_admission_.fetch_sub(1);
                if (const std::shared_ptr<SpeechReply> alive = weak.lock()) alive->admit(body);
              });
    return reply;
  } catch (...) {
    awaiting_admission_.fetch_sub(1);  // nothing was posted
    throw;
  }
}

SpeechPolicy HttpApi::Impl::speech_policy() const {
  SpeechPolicy policy;
  policy.models = service_.models();
  for (const VoiceInfo& v : service_.voices()) policy.voices.push_back(v.id);
  policy.voice_aliases = config_.voice_aliases;
  policy.max_input_chars = config_.max_input_chars;
  return policy;
}

bool HttpApi::Impl::origin_allowed(const std::string& origin) const {
  if (origin.empty()) return false;
  for (const std::string& allowed : config_.cors_origins) {
    if (allowed == "*" || allowed == origin) return true;
  }
  return false;
}

void HttpApi::Impl::add_cors_headers(const RequestInfo& info, HttpResponse& res) const {
  if (config_.cors_origins.empty()) return;
  const bool any = std::find(config_.cors_origins.begin(), config_.cors_origins.end(), "*") !=
                   config_.cors_origins.end();
  // Whether the answer carries the header depends on the origin: a cache must know.
  if (!any) res.set(http::field::vary, "Origin");
  if (!origin_allowed(info.origin)) return;
  res.set(http::field::access_control_allow_origin, any ? "*" : info.origin);
  res.set(http::field::access_control_expose_headers,
          "Retry-After, X-Sample-Rate, X-Request-Id, X-Ignored-Fields");
}

HttpResponse HttpApi::Impl::preflight(const RequestInfo& info, const RequestHead& head) const {
  const std::string_view path = path_of(head.target());
  if (!origin_allowed(info.origin)) {
    return error_response(error(403, "cross-origin requests from this origin are not allowed",
                                "invalid_request_error", "origin_not_allowed"));
  }
  std::string allow = "OPTIONS";
  for (const std::string& m : methods_of(path)) allow += ", " + m;
  HttpResponse res{http::status::no_content, 11};
  res.set(http::field::access_control_allow_methods, allow);
  // Authorization named, as a wildcard does not cover it; any other header (SDKs send their
  // own, e.g. OpenAI's x-stainless-*): no cookie or credential rides on these requests.
  res.set(http::field::access_control_allow_headers, "Authorization, *");
  res.set(http::field::access_control_max_age, "600");
  return res;
}

void HttpApi::Impl::log_request(const RequestInfo& info, int status, bool delivered) {
  metrics_
      .counter("voxd_http_requests_total", "HTTP requests by route and status code.",
               {{"route", info.route}, {"code", std::to_string(status)}})
      .inc();
  const double seconds = seconds_since(info.start);
  metrics_
      .histogram("voxd_http_request_duration_seconds",
                 "Time from a request's headers to the end of its response.",
                 default_latency_buckets(), {{"route", info.route}})
      .observe(seconds);
  nlohmann::ordered_json fields = {{"id", info.id},
                                   {"method", info.method},
                                   {"path", info.path},
                                   {"status", status},
                                   {"duration_ms", std::round(seconds * 10000.0) / 10.0}};
  if (!delivered) fields["delivered"] = false;
  for (const auto& [key, value] : info.fields.items()) fields[key] = value;
  // Probes and scrapes come every few seconds: only at debug level.
  const bool routine =
      info.route == "/healthz" || info.route == "/readyz" || info.route == "/metrics";
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

int admission_thread_count(const HttpConfig& config) {
  // More than eight took cores from the device thread's kernel launches on the H200 (16 cores)
  // and made a burst's first audio no sooner (docs/benchmarks.md).
  return config.admission_threads > 0
             ? config.admission_threads
             : static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
}

HttpApi::HttpApi(HttpConfig config, SpeechService& service, MetricsRegistry& metrics)
    : impl_(std::make_unique<Impl>(std::move(config), service, metrics)) {}

HttpApi::~HttpApi() {
  stop();
}

void HttpApi::start() {
  impl_->start(port_);
}

void HttpApi::stop_accepting() {
  impl_->stop_accepting();
}

bool HttpApi::wait_for_speech(std::chrono::steady_clock::duration grace) {
  return impl_->wait_for_speech(grace);
}

size_t HttpApi::shutdown(std::chrono::steady_clock::duration grace) {
  return impl_->shutdown(grace);
}

void HttpApi::stop() {
  shutdown(std::chrono::steady_clock::duration::zero());
}

size_t HttpApi::speech_in_progress() const {
  return impl_->speech_in_progress();
}

}  // namespace voxd::server
