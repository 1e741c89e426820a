// What the HTTP layer needs from the engine behind it: the models and voices it offers, whether
// it is ready, its memory summary and metrics, and speech — admitted first (so overload and bad
// text get a proper status before any audio is sent), then produced on the connection's thread
// into a sink that encodes and sends it. The scheduler-backed service implements SpeechService;
// the HTTP tests use a fake.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "server/metrics.h"
#include "server/speech_request.h"

namespace voxd::server {

// Trips when the client has gone or the server is stopping; work checks it between steps.
class CancelToken {
 public:
  void cancel() noexcept { cancelled_.store(true, std::memory_order_release); }
  bool cancelled() const noexcept { return cancelled_.load(std::memory_order_acquire); }

 private:
  std::atomic<bool> cancelled_{false};
};

// Takes a job's audio, in order, and sends it on to the client.
class SpeechSink {
 public:
  virtual ~SpeechSink() = default;
  // Encodes and sends `samples` (mono, at the job's sample_rate(), nominally in [-1, 1]).
  // Returns false once the client has gone (the job's CancelToken has then tripped too): stop.
  virtual bool write(std::span<const float> samples) = 0;
  // Whether the client is still there (a cheap look at the connection); a job waiting for audio
  // asks now and then and stops when it is false (the CancelToken has then tripped too). For a
  // whole-file response the connection cannot be seen before the file is sent: true until then.
  virtual bool connected() = 0;
};

// One admitted request. Destroying it releases what admission reserved (queue slot, memory).
class SpeechJob {
 public:
  virtual ~SpeechJob() = default;
  // The sample rate of the audio run() produces.
  virtual int64_t sample_rate() const = 0;
  // Produces the audio into `sink` on the calling thread, returning when all of it is written
  // or soon after `cancel` trips. Throws ApiError or another exception when synthesis fails; a
  // streamed response is then cut off, a whole-file response answered with the error.
  virtual void run(SpeechSink& sink, const CancelToken& cancel) = 0;
};

struct VoiceInfo {
  std::string id;  // the value of a request's `voice`
  int64_t sample_rate = 0;
  std::string language;  // BCP 47, e.g. "en"
};

struct Readiness {
  bool ready = false;
  std::string reason;  // why not, when not ready
};

class SpeechService {
 public:
  virtual ~SpeechService() = default;

  // The accepted values of `model` (asked on every request, so they may change at run time).
  virtual std::vector<std::string> models() const = 0;
  // The voices a request may name.
  virtual std::vector<VoiceInfo> voices() const = 0;
  // Whether speech can be served now (voices loaded, memory headroom), for GET /readyz.
  virtual Readiness readiness() const = 0;
  // The memory summary for GET /debug/memory, as text and as JSON (core/memory_summary.h).
  virtual std::string memory_summary_text() const = 0;
  virtual nlohmann::json memory_summary_json() const = 0;
  // Brings the service's gauges in `registry` up to date; called just before GET /metrics.
  virtual void collect_metrics(MetricsRegistry& registry) = 0;
  // Admits a parsed and validated request or throws ApiError: 503 with retry_after_s when the
  // queue is full, 400 for text with nothing to pronounce. Runs before any response is sent.
  virtual std::unique_ptr<SpeechJob> admit(const SpeechRequest& request) = 0;
};

}  // namespace voxd::server
