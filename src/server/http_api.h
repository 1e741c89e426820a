// voxd's HTTP API: an asynchronous HTTP/1.1 server on Boost.Beast (a few threads for any number
// of connections and streams; server/http_connection.h reads and writes them) that answers
//   POST /v1/audio/speech   OpenAI's speech endpoint, streamed (chunked), as server-sent events
//                           or as one file
//   GET  /v1/models, /v1/models/{id}, /v1/voices, /readyz, /debug/memory   from the
//                           SpeechService
//   GET  /metrics            the MetricsRegistry, with the HTTP layer's own metrics
//   GET  /healthz            always 200 while the process serves; needs no API key
// with bearer-token authentication, limits on body, headers, input and connections, CORS only
// for configured origins, OpenAI-style error bodies for every 4xx and 5xx, an access log line per
// request (server/logging.h) and a graceful shutdown that keeps its grace whatever clients do.
// docs/server.md describes the API.
#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "server/metrics.h"
#include "server/speech_service.h"

namespace voxd::server {

struct HttpConfig {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port (HttpApi::port() says which)
  // Bearer tokens accepted in "Authorization: Bearer <key>"; empty: no authentication.
  std::vector<std::string> api_keys;
  // Other names a request's `voice` may use (alias → served voice), e.g. OpenAI's "alloy".
  std::map<std::string, std::string> voice_aliases;
  // Origins a browser may call from ("https://app.example"; "*" for any); empty: CORS off.
  std::vector<std::string> cors_origins;
  size_t max_body_bytes = 2 << 20;     // larger bodies are answered 413
  size_t max_header_bytes = 32 << 10;  // all header lines together; larger: 431
  size_t max_input_chars = 100000;     // a request's `input`, in characters; more: 413
  size_t max_connections = 4096;       // open at once; beyond that 503 and closed
  int threads = 0;                     // serving all connections; 0: min(4, cores)
  int admission_threads = 0;  // parsing speech requests and the text front end; 0: min(8, cores)
  // Speech requests read whole and waiting for an admission thread; beyond that 503 queue_full
  // (a burst's bodies held in memory, and its wait, are bounded). voxd serve: --max-queue.
  size_t max_awaiting_admission = 256;
  double header_timeout_s = 10;     // a request's first byte to its last header; then 408
  double read_timeout_s = 10;       // its last header to the body's last byte; then 408
  double write_timeout_s = 10;      // each write; a client that stops reading is cut off
  double keep_alive_timeout_s = 5;  // an idle kept-alive connection closes after it
};

// The admission threads `config` asks for: admission_threads, or min(8, cores) for 0.
int admission_thread_count(const HttpConfig& config);

class HttpApi {
 public:
  // `service` and `metrics` must outlive the HttpApi.
  HttpApi(HttpConfig config, SpeechService& service, MetricsRegistry& metrics);
  // Stops the server (see stop()).
  ~HttpApi();
  HttpApi(const HttpApi&) = delete;
  HttpApi& operator=(const HttpApi&) = delete;

  // Binds host:port and serves on HttpConfig::threads background threads; connections are
  // accepted once it returns. Raises the process's soft limit on open files to fit
  // max_connections when it can. Throws voxd::Error when the address cannot be bound.
  void start();
  // The bound port (the chosen one when HttpConfig::port is 0); 0 before start().
  int port() const { return port_; }
  // Stops accepting connections (the listening socket closes). Requests that still arrive on
  // open connections are answered 503 `shutting_down` (and the connection closed), GET /readyz
  // 503, GET /healthz 200; idle connections close; the speech in progress goes on, including a
  // speech request whose headers came before and whose body is still arriving. Safe to call
  // twice, and before start().
  void stop_accepting();
  // Waits up to `grace` for the speech in progress (its body arriving, being admitted or
  // admitted) to end; returns whether it did. With stop_accepting() first, no new speech starts
  // meanwhile.
  bool wait_for_speech(std::chrono::steady_clock::duration grace);
  // stop_accepting(), then waits up to `grace` for the speech in progress to end, cancels what
  // is left (streams are cut off, whole files answered 503), closes every connection (whatever
  // its client is doing) and stops the threads: it returns within about `grace` plus a second.
  // Returns how many speech requests were cancelled. Safe to call twice.
  size_t shutdown(std::chrono::steady_clock::duration grace);
  // shutdown() without a grace: cancels the speech in progress at once.
  void stop();
  // Speech requests being handled now: the body arriving, parsed, admitted, producing or
  // sending audio.
  size_t speech_in_progress() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace voxd::server
