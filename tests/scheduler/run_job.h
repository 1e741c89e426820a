// Drives a SpeechJob on the calling thread as the HTTP layer does from its event loop: starts
// it, waits for its wakes, takes each piece of audio and hands it on.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "server/speech_service.h"

namespace voxd::scheduler {

// Takes a job's audio a piece at a time.
class AudioReceiver {
 public:
  virtual ~AudioReceiver() = default;
  // False to stop taking (the client leaving; the caller then drops the job).
  virtual bool write(std::span<const float> samples) = 0;
};

// Runs `job` until it ends or `receiver` stops; rethrows the job's failure. A lost wake-up
// hangs here (and fails the test by its timeout) as it would hang a client.
inline void run_job(server::SpeechJob& job, AudioReceiver& receiver) {
  struct Wakes {
    std::mutex mutex;
    std::condition_variable changed;
    bool woken = false;
  };
  auto wakes = std::make_shared<Wakes>();
  job.start([wakes] {
    {
      std::lock_guard lock(wakes->mutex);
      wakes->woken = true;
    }
    wakes->changed.notify_all();
  });
  for (;;) {
    std::vector<float> piece;
    const bool done = job.take(piece);
    if (!piece.empty() && !receiver.write(piece)) return;
    if (done) return;
    if (piece.empty()) {
      std::unique_lock lock(wakes->mutex);
      wakes->changed.wait(lock, [&] { return wakes->woken; });
      wakes->woken = false;
    }
  }
}

}  // namespace voxd::scheduler
