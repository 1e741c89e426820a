// Drives SpeechJobs as the HTTP layer does from its event loop (start, wait for wakes, take each
// piece of audio and hand it on), for tests of EngineService: one on the calling thread, or many
// on threads of their own; and what those tests check with (the same audio, an idle service, the
// KV cache's pages).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <future>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "scheduler/engine_service.h"
#include "scheduler/scheduler.h"
#include "server/api_error.h"
#include "server/metrics.h"
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

// A client of `job` on a thread of its own that takes one piece of audio and then nothing until
// read_on() (a listener reading slowly). However the test ends, it reads on before it goes.
class SlowClient {
 public:
  explicit SlowClient(server::SpeechJob& job)
      : done_(std::async(std::launch::async, [this, &job] { run_job(job, sink_); })) {}
  ~SlowClient() {
    sink_.open();
    if (done_.valid()) done_.wait();
  }
  SlowClient(const SlowClient&) = delete;
  SlowClient& operator=(const SlowClient&) = delete;

  // Reads the rest; all the audio (rethrows what ended the job).
  std::vector<float> read_on() {
    sink_.open();
    done_.get();
    return sink_.audio;
  }

 private:
  class GatedSink final : public AudioReceiver {
   public:
    bool write(std::span<const float> samples) override {
      std::unique_lock lock(mutex_);
      opened_.wait(lock, [&] { return open_ || audio.empty(); });
      audio.insert(audio.end(), samples.begin(), samples.end());
      return true;
    }
    void open() {
      {
        std::lock_guard lock(mutex_);
        open_ = true;
      }
      opened_.notify_all();
    }
    std::vector<float> audio;

   private:
    std::mutex mutex_;
    std::condition_variable opened_;
    bool open_ = false;
  };

  GatedSink sink_;  // before done_, whose thread writes into it
  std::future<void> done_;
};

// Keeps every sample; can stop after a number of writes (the client going away).
class CollectingSink final : public AudioReceiver {
 public:
  explicit CollectingSink(size_t stop_after = SIZE_MAX) : stop_after_(stop_after) {}
  bool write(std::span<const float> samples) override {
    audio.insert(audio.end(), samples.begin(), samples.end());
    return ++writes < stop_after_;
  }

  std::vector<float> audio;
  size_t writes = 0;

 private:
  size_t stop_after_;
};

// Runs an admitted job to its end, which must be an ApiError: returns it (a default one, and a
// test failure saying `what_went_wrong`, when the job ends well).
inline server::ApiError run_error(server::SpeechJob& job, const std::string& what_went_wrong) {
  CollectingSink sink;
  try {
    run_job(job, sink);
  } catch (const server::ApiError& e) {
    return e;
  }
  ADD_FAILURE() << what_went_wrong;
  return {};
}

inline std::vector<float> speak(EngineService& service, const server::SpeechRequest& r) {
  std::unique_ptr<server::SpeechJob> job = service.admit(r);
  CollectingSink sink;
  run_job(*job, sink);
  return sink.audio;
}

// Runs each admitted job on a thread of its own, its audio into audio[i] (as many as jobs), the
// job released when done; the caller joins the threads.
inline std::vector<std::thread> start_all(std::vector<std::unique_ptr<server::SpeechJob>>& jobs,
                                          std::vector<std::vector<float>>& audio) {
  std::vector<std::thread> threads;
  for (size_t i = 0; i < jobs.size(); ++i) {
    threads.emplace_back([&jobs, &audio, i] {
      CollectingSink sink;
      run_job(*jobs[i], sink);
      jobs[i].reset();
      audio[i] = sink.audio;
    });
  }
  return threads;
}

// start_all, then waits for every job: each one's audio.
inline std::vector<std::vector<float>> run_all(
    std::vector<std::unique_ptr<server::SpeechJob>>& jobs) {
  std::vector<std::vector<float>> audio(jobs.size());
  for (std::thread& t : start_all(jobs, audio)) t.join();
  return audio;
}

// Every sample of `actual` within `tolerance` of `expected`'s, which is not empty.
inline void expect_same_audio(const std::vector<float>& expected, const std::vector<float>& actual,
                              const std::string& what, float tolerance = 1e-4f) {
  ASSERT_EQ(expected.size(), actual.size()) << what;
  ASSERT_FALSE(expected.empty()) << what;
  float worst = 0.0f;
  for (size_t i = 0; i < expected.size(); ++i) {
    worst = std::max(worst, std::abs(expected[i] - actual[i]));
  }
  EXPECT_LT(worst, tolerance) << what;
}

// Waits (bounded) until the service has nothing admitted, held or running.
inline void wait_idle(const EngineService& service) {
  // A step already running for a cancelled stream finishes first (slow under sanitizers).
  for (int i = 0; i < 3000 && !service.idle_memory().idle; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(service.idle_memory().idle);
}

// Waits (bounded) until `kind`'s steps have begun and then made no progress for five polls in a
// row: true when they stopped, false when they never began or never stopped. Counting only after
// the first step keeps a slow start (an encoder under sanitizers) from passing for a stop.
inline bool wait_until_steps_stop(const EngineService& service, const std::string& kind) {
  uint64_t steps = service.step_counts(kind).steps;
  int unchanged = 0;
  for (int poll = 0; poll < 600 && unchanged < 5; ++poll) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const uint64_t now = service.step_counts(kind).steps;
    unchanged = now == steps && now > 0 ? unchanged + 1 : 0;
    steps = now;
  }
  return unchanged == 5;
}

// A service with its metrics bound from the start.
struct Served {
  explicit Served(const EngineConfig& config) : service(config) { service.bind_metrics(metrics); }
  // The voxd_engine_kv_cache_pages gauge of `state` (total, used, free) now.
  double kv_pages(const char* state) {
    service.collect_metrics(metrics);
    return metrics.gauge("voxd_engine_kv_cache_pages", "", {{"state", state}}).value();
  }
  server::MetricsRegistry metrics;  // outlives the service, which records into it
  EngineService service;
};

}  // namespace voxd::scheduler
