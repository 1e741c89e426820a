// What the HTTP layer needs from the engine behind it: the models and voices it offers, whether
// it is ready, its memory summary and metrics, and speech — admitted first (so overload and bad
// text get a proper status before any audio is sent), then taken as the engine makes it and
// sent. The scheduler-backed service implements SpeechService; the HTTP tests use a fake.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/metrics.h"
#include "server/speech_request.h"

namespace voxd::server {

// One admitted request, producing audio on the engine's own threads; the HTTP layer takes the
// audio as it comes without blocking, so a few threads serve any number of streams. Destroying
// the job releases what admission reserved (queue slot, memory) and stops unfinished work: that
// is how a client that goes away cancels its request.
class SpeechJob {
 public:
  virtual ~SpeechJob() = default;
  // The sample rate of the audio take() hands out.
  virtual int64_t sample_rate() const = 0;
  // Starts watching the job: `wake` is called, from any thread, whenever take() may have
  // something new (audio, the end, a failure). `wake` must return quickly and must not call
  // back into the job (it runs under the engine's locks): post the take() elsewhere. Call once,
  // then take() once: what happened before start() is not signalled.
  virtual void start(std::function<void()> wake) = 0;
  // Never blocks. Appends the oldest piece of audio not yet taken (what one engine step made for
  // this request; mono, nominally in [-1, 1]) to `samples`, if there is one, and returns true
  // once the request has ended and every piece has been taken. Throws ApiError (504 past the
  // request timeout, 503 when the server stops, 413 for a sentence that does not fit memory)
  // or the step's exception when synthesis failed.
  virtual bool take(std::vector<float>& samples) = 0;
};

struct VoiceInfo {
  std::string id;  // the value of a request's `voice`
  int64_t sample_rate = 0;
  std::string language;               // BCP 47, e.g. "en"
  std::string family;                 // the model family's type, e.g. "chattts"
  std::vector<std::string> speakers;  // the values `speaker` may name (none: one speaker)
  std::vector<std::string> emotions;  // the values `emotion` may name (none: no emotions)
  bool sampling = false;              // takes seed, temperature, top_p and top_k
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
  // Records the service's counters and histograms in `registry` from now on (called once, before
  // the first request), so that work done before the first scrape is counted.
  virtual void bind_metrics(MetricsRegistry& registry) = 0;
  // Brings the service's gauges in `registry` up to date; called just before GET /metrics.
  virtual void collect_metrics(MetricsRegistry& registry) = 0;
  // Admits a parsed and validated request or throws ApiError: 503 with retry_after_s when the
  // queue is full, 400 for text with nothing to pronounce. Runs before any response is sent.
  virtual std::unique_ptr<SpeechJob> admit(const SpeechRequest& request) = 0;
};

}  // namespace voxd::server
