// The one place that decides what runs next on the device. A single device thread does all model
// work (contexts and backends are not thread-safe); the HTTP layer's threads are woken when their
// stream has audio and take it without blocking. Each iteration the thread drops streams that
// ended, asks each StepKind (the kinds of the voices' families: acoustic, vocoder, an
// autoregressive decoder) for its most urgent batch of its family's streams, picks the most
// urgent of those (earliest deadline first: the least slack before a stream keeps its listener
// waiting, whether for its first audio or because playback caught up; on ties the kind made
// first), shrinks it until its planned workspace fits the memory budget, runs it and hands the
// audio to the streams (docs/scheduler.md). It knows no family.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "backends/runtime.h"
#include "scheduler/family.h"
#include "scheduler/memory_budget.h"
#include "scheduler/scheduler_options.h"
#include "scheduler/step_kind.h"
#include "scheduler/stream.h"
#include "scheduler/voice_pool.h"
#include "server/api_error.h"
#include "server/metrics.h"
#include "server/speech_service.h"

namespace voxd::scheduler {

// What the scheduler holds now, for tests, metrics and the monitor.
struct SchedulerLoad {
  struct StreamLoad {
    uint64_t id = 0;
    int64_t buffered_samples = 0;      // audio waiting for the client
    int64_t max_buffered_samples = 0;  // the stream's back-pressure bound
    StreamGauges work;                 // what its family's work holds
  };
  size_t admitted = 0;  // requests admitted and not finished
  bool step_running = false;
  // (voice, step kind) pairs whose warm-up while idle has pieces left.
  size_t warm_up_pending = 0;
  std::vector<StreamLoad> streams;
};

// Counts since start, by step kind.
struct StepCounts {
  uint64_t steps = 0;
  uint64_t shrunk = 0;  // batches made smaller to fit the memory budget
  int64_t largest_batch = 0;
  uint64_t preempted = 0;  // streams a step preempted (StepOutput::preempted)
  uint64_t beside = 0;     // steps run while a step of another lane was in flight
};

class Scheduler {
 public:
  // Warms the steps up for the loaded voices (StepKind::warm_up: kernels loaded, graphs recorded
  // before any request), then starts the device thread over `voices` on `runtime` (both must
  // outlive the scheduler).
  Scheduler(DeviceRuntime& runtime, VoicePool& voices, SchedulerOptions options);
  // Fails what is still admitted ("server is shutting down") and joins the device thread.
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Any thread: admits the work `voice`'s family prepared, or throws ApiError 503 with
  // retry_after_s when max_queue requests are admitted or the scheduler is draining.
  std::shared_ptr<Stream> admit(VoiceEntry& voice, PreparedStream prepared);
  // Any thread: the error admit() would throw now for a full queue or a draining scheduler.
  std::optional<server::ApiError> refusal() const;
  // Any thread: calls `wake` (under the scheduler's lock; it must only post work elsewhere)
  // whenever take() may have news for `stream`: audio, its end, a failure.
  void watch(Stream& stream, std::function<void()> wake);
  // Any thread, never blocks: appends the oldest piece of the stream's audio not yet taken (one
  // step's) to `samples` and returns true once the stream has ended and all of it is taken.
  // Rethrows the stream's failure (ApiError 504 past its deadline, 503 when the server stops, 413
  // for a sentence that does not fit memory, or the step's exception).
  bool take(Stream& stream, std::vector<float>& samples);
  // The stream's job is gone: its queue slot is free; unfinished work is cancelled.
  void release(Stream& stream);

  // Refuses admission from now on, waits up to `grace` for admitted requests to finish, then fails
  // the rest with 503; returns how many it failed.
  size_t drain(std::chrono::steady_clock::duration grace);
  bool draining() const { return draining_.load(); }

  // Requests admitted and not finished.
  size_t admitted() const;
  // Whether nothing is admitted, held or running: allocated memory should be weights and graphs.
  bool idle() const;
  SchedulerLoad load() const;
  StepCounts counts(const std::string& kind) const;
  // Streams preempted since start, all kinds together.
  uint64_t preemptions() const;
  // Bytes a step may take now (MemoryBudget::available), as of the last step or start.
  uint64_t budget_bytes() const { return budget_bytes_.load(); }

  // Records step and request metrics in `registry` from now on (the first one given stays).
  void bind_metrics(server::MetricsRegistry& registry);

 private:
  void loop();
  // Before the device thread starts: every kind's warm_up for every loaded voice.
  void warm_up();
  // Device thread, under the lock: queues the warm-up of the voices steps loaded since the last
  // call (lazy voices, and voices loaded again after an unload), to run while idle.
  void queue_warm_ups();
  // Device thread, under the lock, with no step to run: the first pending kind's next piece of
  // warm-up, warm_up or warm_further (the lock released while it runs).
  void warm_further(std::unique_lock<std::mutex>& lock);
  // Device thread, under the lock: drops streams that ended or passed their deadline.
  void reap(Clock::time_point now);
  // What execute() did besides running the step.
  struct Admission {
    bool shrunk = false;   // the batch was cut to fit the memory budget
    double seconds = 0.0;  // loading the voice and planning the step's memory
  };
  // Device thread, without the lock: admission by memory, then the step's start. Cuts `batch` to
  // the items run; returns the step in flight, or null with what it made in `output`.
  std::unique_ptr<StepInFlight> execute(StepKind& kind, Batch& batch, Admission& admission,
                                        StepOutput& output);
  // The device thread's host work between two steps, by what it did (the debug log's step
  // lines): taking the lock back after a step, logging and handing out its output, ending
  // finished streams, the kinds' proposals.
  struct HostGap {
    double relock_s = 0.0;
    double deliver_s = 0.0;
    double reap_s = 0.0;
    double choose_s = 0.0;
  };
  // A step from its start to its delivery.
  struct StartedStep {
    StepKind* kind = nullptr;
    Batch batch;
    size_t proposed = 0;  // items before admission cut the batch
    Admission admission;
    Clock::time_point started;
    double seconds = 0.0;                     // from its start to its output
    std::unique_ptr<StepInFlight> in_flight;  // until finished
    StepOutput output;
    std::exception_ptr error;
    // The kind of the step in flight while this one ran, or of the one that ran while this one
    // was in flight; whether this one is the former.
    const char* beside = nullptr;
    bool ran_beside = false;
    // For the debug log: the allocator's and the lane's counts when it started.
    uint64_t reserves_before = 0;
    double waited_before = 0.0;
    HostGap host_before;  // since the step before it ended (or the device thread last waited)
  };
  // Device thread, without the lock: execute() with the step's timing and host profile.
  void start_step(StartedStep& step);
  // Device thread, without the lock: waits for a step in flight; keeps its output or error.
  void finish_step(StartedStep& step);
  // Device thread, under the lock: logs the step, hands its output to its streams, counts it.
  void deliver_step(StartedStep& step);
  // Device thread, under the lock: finishes and delivers the step in flight.
  void complete_in_flight(std::unique_lock<std::mutex>& lock);
  // Device thread, without the lock: finishes the step in flight, if any (delivered later), so
  // that no device work reads memory about to be freed.
  void settle_in_flight();
  // Device thread: makes `voice`'s models loaded, unloading idle voices when memory is short.
  void ensure_loaded(VoiceEntry& voice);
  // Device thread, between steps (the budget's Reclaim): when, with the loaded voices'
  // releasable recordings, `needed` bytes would be available, their LoadedVoice::
  // release_recordings one voice at a time until they are; the bytes released.
  uint64_t release_recordings(uint64_t needed);
  // Device thread: unloads the least recently used loaded voice with no stream other than
  // `keep`; false when there is none.
  bool unload_idle_voice(const VoiceEntry* keep);
  std::optional<server::ApiError> refusal_locked() const;
  // Under the lock: hands a step's output to its streams.
  void deliver(const Batch& batch, StepOutput& output);
  // Under the lock: ends `stream` with `error` (and wakes its watcher).
  void fail(Stream& stream, std::exception_ptr error);
  void update_mirrors(Stream& stream);
  void record_step(const StepKind& kind, size_t batch, double seconds, bool shrunk,
                   int64_t preempted, bool beside);
  void record_finished(const Stream& stream, Clock::time_point now);

  DeviceRuntime& runtime_;
  VoicePool& voices_;
  const SchedulerOptions options_;
  Pacing pacing_;
  MemoryBudget budget_;
  // The step kinds of every family a voice has, and each family's running streams (device
  // thread, under the lock).
  struct FamilyKinds {
    const Family* family = nullptr;
    std::vector<std::unique_ptr<StepKind>> kinds;
    std::vector<std::shared_ptr<Stream>> streams;
  };
  std::vector<FamilyKinds> families_;
  // A (voice, kind) pair's warm-up left to do while idle: warm_up itself for a voice a step
  // loaded, then warm_further pieces where the backend's first runs cost more.
  struct Warming {
    VoiceEntry* voice = nullptr;
    StepKind* kind = nullptr;
    bool warmed_up = false;  // its warm_up has run
    bool further = false;    // warm_further pieces follow it
  };
  // The pairs with warm-up left (device thread; load() reads the count under the lock), and the
  // seconds their pieces took so far.
  std::vector<Warming> warming_;
  double warming_s_ = 0.0;
  // Whether the kinds warm further while idle (SchedulerOptions::warm_up_while_idle, else the
  // backend's first_runs_cost_more), fixed at construction.
  bool warm_while_idle_ = false;
  // Voices a step loaded whose warm-up is not queued yet (device thread).
  std::vector<VoiceEntry*> loaded_by_steps_;
  // The step whose device work is still queued (device thread): steps of other lanes run
  // beside it, and it is delivered before them, in the order the steps started.
  std::unique_ptr<StartedStep> in_flight_;
  // The host work since the last step ended (device thread), for the next step's log line.
  HostGap host_gap_;
  // Whether the kinds are on more than one lane (made at construction): else a step in flight
  // is finished at once.
  bool several_lanes_ = false;

  mutable std::mutex mutex_;
  std::condition_variable work_;      // the device thread waits on it
  std::condition_variable finished_;  // drain waits on it
  std::vector<std::shared_ptr<Stream>> streams_;
  size_t admitted_ = 0;
  uint64_t next_id_ = 1;
  bool stopping_ = false;
  bool step_running_ = false;
  std::atomic<bool> draining_{false};
  std::atomic<uint64_t> budget_bytes_{0};
  // For Retry-After: written under mutex_, read also where it is not held (a voice's loading).
  std::atomic<double> mean_request_s_{1.0};
  std::map<std::string, StepCounts> counts_;

  std::atomic<server::MetricsRegistry*> metrics_{nullptr};
  std::thread thread_;
};

}  // namespace voxd::scheduler
