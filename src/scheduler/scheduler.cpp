#include "scheduler/scheduler.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <string_view>
#include <utility>

#include "core/error.h"
#include "core/memory_summary.h"
#include "server/logging.h"

namespace voxd::scheduler {
namespace {

using server::ApiError;

// How often an idle device thread looks at the streams' deadlines.
constexpr auto kPoll = std::chrono::milliseconds(100);

ApiError shutting_down() {
  ApiError error;
  error.status = 503;
  error.type = "server_error";
  error.code = "shutting_down";
  error.message = "the server is shutting down";
  error.retry_after_s = 1;  // another replica, or this one restarted
  return error;
}

ApiError timed_out(std::chrono::milliseconds timeout) {
  ApiError error;
  error.status = 504;
  error.type = "server_error";
  error.code = "timeout";
  error.message = "the request took longer than the server's request timeout of " +
                  std::to_string(timeout.count()) + " ms; send less text or try again later";
  return error;
}

double seconds_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

// A step's host time in the backend's ops, for its debug log line: the total, and the four
// ops that took most as "op: calls x, ms (longest ms)".
struct OpTimes {
  double seconds = 0;
  std::string top;
};

OpTimes op_times(const std::vector<Backend::OpHostTime>& times) {
  OpTimes out;
  for (const Backend::OpHostTime& time : times) out.seconds += time.seconds;
  for (size_t i = 0; i < std::min<size_t>(times.size(), 4); ++i) {
    char entry[128];
    std::snprintf(entry, sizeof entry, "%s%s: %lld x, %.2f ms (%.2f)", i == 0 ? "" : "; ",
                  times[i].op.c_str(), static_cast<long long>(times[i].calls),
                  times[i].seconds * 1e3, times[i].longest_seconds * 1e3);
    out.top += entry;
  }
  return out;
}

const std::vector<double>& batch_buckets() {
  static const std::vector<double> buckets = {1, 2, 4, 8, 16, 32, 64, 128, 256};
  return buckets;
}

const std::vector<double>& step_buckets() {
  static const std::vector<double> buckets = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                              0.05,   0.1,   0.25,   0.5,   1.0,  2.5};
  return buckets;
}

const std::vector<double>& rtf_buckets() {
  static const std::vector<double> buckets = {0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10};
  return buckets;
}

// What the client is told for a step's failure: a StepRefusal as the HTTP error it stands for
// (413 for a request too large for any step, 503 for a server with too little memory), any other
// error as it is.
std::exception_ptr answer_of(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const StepRefusalError& refused) {
    const StepRefusal& refusal = refused.refusal();
    ApiError answer;
    answer.message = refusal.message;
    answer.code = refusal.code;
    if (refusal.request_too_large) {
      answer.status = 413;
      answer.param = "input";
    } else {
      answer.status = 503;
      answer.type = "server_error";
      answer.retry_after_s = 1;
    }
    return std::make_exception_ptr(answer);
  } catch (...) {
    return error;
  }
}

}  // namespace

Scheduler::Scheduler(DeviceRuntime& runtime, VoicePool& voices, SchedulerOptions options)
    : runtime_(runtime),
      voices_(voices),
      options_(options),
      budget_(runtime, [this](uint64_t needed) { return release_recordings(needed); }) {
  if (options_.max_batch < 1) {
    throw InputError("max_batch must be at least 1, got " + std::to_string(options_.max_batch));
  }
  if (options_.max_queue < 1) throw InputError("max_queue must be at least 1");
  if (options_.chunk_frames < 1) {
    throw InputError("chunk_frames must be at least 1 mel frame, got " +
                     std::to_string(options_.chunk_frames));
  }
  if (options_.first_chunk_frames < 1 || options_.first_chunk_frames > options_.chunk_frames) {
    throw InputError("first_chunk_frames must be between 1 and chunk_frames (" +
                     std::to_string(options_.chunk_frames) + "), got " +
                     std::to_string(options_.first_chunk_frames));
  }
  if (!std::isfinite(options_.acoustic_length_band) || options_.acoustic_length_band < 1.0) {
    throw InputError("the acoustic length band must be a finite factor of at least 1, got " +
                     std::to_string(options_.acoustic_length_band));
  }
  if (options_.request_timeout.count() < 1) {
    throw InputError("the request timeout must be at least 1 ms");
  }
  pacing_.max_batch = options_.max_batch;
  pacing_.starving_below_s = options_.starving_below_s;
  pacing_.first_audio_due_s = options_.first_audio_due_s;
  for (const auto& entry : voices_.entries()) {
    const bool known = std::any_of(families_.begin(), families_.end(), [&](const FamilyKinds& f) {
      return f.family == &entry->family;
    });
    if (!known)
      families_.push_back({&entry->family, entry->family.make_kinds(runtime_, options_), {}});
  }
  std::optional<size_t> first_lane;
  for (const FamilyKinds& family : families_) {
    for (const auto& kind : family.kinds) {
      if (!first_lane) first_lane = kind->lane();
      several_lanes_ = several_lanes_ || kind->lane() != *first_lane;
    }
  }
  warm_up();
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    for (const auto& stream : streams_) {
      if (stream->running()) fail(*stream, std::make_exception_ptr(shutting_down()));
    }
  }
  work_.notify_all();
  thread_.join();
}

std::shared_ptr<Stream> Scheduler::admit(VoiceEntry& voice, PreparedStream prepared) {
  VOXD_CHECK(prepared.work != nullptr, "admit needs the stream's work");
  auto stream = std::make_shared<Stream>();
  stream->voice = &voice;
  stream->sample_rate = voice.card().sample_rate;
  stream->max_buffered_samples = prepared.max_buffered_samples;
  stream->gauges = prepared.work->gauges();
  stream->work = std::move(prepared.work);

  std::unique_lock lock(mutex_);
  if (std::optional<ApiError> refusal = refusal_locked()) throw *refusal;
  stream->id = next_id_++;
  stream->admitted = Clock::now();
  stream->deadline = stream->admitted + options_.request_timeout;
  ++admitted_;
  ++voice.streams;
  streams_.push_back(stream);
  for (FamilyKinds& family : families_) {
    if (family.family == &voice.family) family.streams.push_back(stream);
  }
  lock.unlock();
  work_.notify_one();
  return stream;
}

std::optional<ApiError> Scheduler::refusal() const {
  std::lock_guard lock(mutex_);
  return refusal_locked();
}

std::optional<ApiError> Scheduler::refusal_locked() const {
  if (draining_.load() || stopping_) return shutting_down();
  if (admitted_ < options_.max_queue) return std::nullopt;
  ApiError error;
  error.status = 503;
  error.type = "server_error";
  error.code = "queue_full";
  error.retry_after_s = std::clamp(static_cast<int>(std::ceil(mean_request_s_.load())), 1, 60);
  error.message = "the server is busy: " + std::to_string(admitted_) +
                  " requests are admitted, its limit; retry after " +
                  std::to_string(*error.retry_after_s) + " s";
  return error;
}

void Scheduler::watch(Stream& stream, std::function<void()> wake) {
  std::lock_guard lock(mutex_);
  stream.wake = std::move(wake);
}

bool Scheduler::take(Stream& stream, std::vector<float>& samples) {
  std::lock_guard lock(mutex_);
  if (stream.state == Stream::State::kFailed) std::rethrow_exception(stream.error);
  if (stream.state != Stream::State::kRunning) return true;
  if (!stream.audio.empty()) {
    const std::vector<float>& piece = stream.audio.front();
    samples.insert(samples.end(), piece.begin(), piece.end());
    stream.buffered_samples -= static_cast<int64_t>(piece.size());
    stream.audio.pop_front();
    work_.notify_one();  // room under the stream's back-pressure bound
  }
  if (!stream.finished_making || !stream.audio.empty()) return false;
  stream.state = Stream::State::kDone;
  work_.notify_one();
  return true;
}

void Scheduler::release(Stream& stream) {
  {
    std::lock_guard lock(mutex_);
    const Clock::time_point now = Clock::now();
    stream.wake = nullptr;
    if (stream.running()) {
      stream.state = Stream::State::kCancelled;
      stream.audio.clear();
      stream.buffered_samples = 0;
    }
    if (stream.state == Stream::State::kDone) record_finished(stream, now);
    --admitted_;
    mean_request_s_.store(0.9 * mean_request_s_.load() +
                          0.1 * seconds_between(stream.admitted, now));
  }
  finished_.notify_all();
  work_.notify_one();
}

size_t Scheduler::drain(std::chrono::steady_clock::duration grace) {
  std::unique_lock lock(mutex_);
  draining_.store(true);
  // A day is "forever" here, and keeps now + grace from overflowing.
  const auto wait = std::min<std::chrono::steady_clock::duration>(grace, std::chrono::hours(24));
  finished_.wait_for(lock, wait, [this] { return admitted_ == 0; });
  size_t failed = 0;
  for (const auto& stream : streams_) {
    if (stream->running()) {
      fail(*stream, std::make_exception_ptr(shutting_down()));
      ++failed;
    }
  }
  lock.unlock();
  work_.notify_one();
  return failed;
}

size_t Scheduler::admitted() const {
  std::lock_guard lock(mutex_);
  return admitted_;
}

bool Scheduler::idle() const {
  std::lock_guard lock(mutex_);
  return admitted_ == 0 && streams_.empty() && !step_running_;
}

SchedulerLoad Scheduler::load() const {
  std::lock_guard lock(mutex_);
  SchedulerLoad load;
  load.admitted = admitted_;
  load.step_running = step_running_;
  load.warm_up_pending = warming_.size();
  for (const auto& stream : streams_) {
    load.streams.push_back(
        {stream->id, stream->buffered_samples, stream->max_buffered_samples, stream->gauges});
  }
  return load;
}

StepCounts Scheduler::counts(const std::string& kind) const {
  std::lock_guard lock(mutex_);
  const auto at = counts_.find(kind);
  return at == counts_.end() ? StepCounts{} : at->second;
}

uint64_t Scheduler::preemptions() const {
  std::lock_guard lock(mutex_);
  uint64_t total = 0;
  for (const auto& [kind, counts] : counts_) total += counts.preempted;
  return total;
}

void Scheduler::bind_metrics(server::MetricsRegistry& registry) {
  server::MetricsRegistry* none = nullptr;
  metrics_.compare_exchange_strong(none, &registry);
}

void Scheduler::warm_up() {
  const Clock::time_point started = Clock::now();
  warm_while_idle_ =
      options_.warm_up_while_idle.value_or(runtime_.backend().first_runs_cost_more());
  for (const auto& entry : voices_.entries()) {
    if (!entry->models) continue;
    for (const FamilyKinds& family : families_) {
      if (family.family != &entry->family) continue;
      for (const auto& kind : family.kinds) {
        try {
          kind->warm_up(*entry, pacing_, budget_);
          if (warm_while_idle_) warming_.push_back({entry.get(), kind.get(), true, true});
        } catch (const std::exception& e) {
          spdlog::warn("warming up the {} steps of voice '{}' failed: {}", kind->name(),
                       entry->card().name, e.what());
        }
      }
    }
  }
  // What the device holds outside the allocator now (the context, the libraries' workspaces the
  // warm-up made them take) is this server's own; what grows beyond it is another process's.
  runtime_.mark_outside();
  budget_bytes_.store(budget_.available());
  server::log_event(spdlog::level::info, "warmed up",
                    {{"seconds", seconds_between(started, Clock::now())},
                     {"graph_bytes", voices_.graph_bytes()}});
}

void Scheduler::queue_warm_ups() {
  for (VoiceEntry* voice : loaded_by_steps_) {
    // A voice loaded again starts its warm-up over.
    std::erase_if(warming_, [voice](const Warming& w) { return w.voice == voice; });
    for (const FamilyKinds& family : families_) {
      if (family.family != &voice->family) continue;
      for (const auto& kind : family.kinds) {
        warming_.push_back({voice, kind.get(), false, warm_while_idle_});
      }
    }
  }
  loaded_by_steps_.clear();
}

void Scheduler::warm_further(std::unique_lock<std::mutex>& lock) {
  const Warming piece = warming_.front();
  bool more = false;
  if (piece.voice->models) {  // a voice unloaded meanwhile leaves the warm-up
    VoiceEntry& voice = *piece.voice;
    StepKind& kind = *piece.kind;
    step_running_ = true;
    lock.unlock();
    const Clock::time_point started = Clock::now();
    try {
      if (piece.warmed_up) {
        more = kind.warm_further(voice, pacing_, budget_);
      } else {
        kind.warm_up(voice, pacing_, budget_);
        more = piece.further;
      }
      runtime_.backend(kind.lane()).synchronize();  // as after a step (start_step)
    } catch (const std::exception& e) {
      spdlog::warn("warming up the {} steps of voice '{}' {}failed: {}", kind.name(),
                   voice.card().name, piece.warmed_up ? "further " : "", e.what());
    }
    const double seconds = seconds_between(started, Clock::now());
    warming_s_ += seconds;
    lock.lock();
    step_running_ = false;
    budget_bytes_.store(budget_.available());
    warming_.front().warmed_up = true;
    server::log_event(spdlog::level::debug, "warm-up piece",
                      {{"kind", kind.name()}, {"voice", voice.card().name}, {"seconds", seconds}});
  }
  if (more) return;
  warming_.erase(warming_.begin());
  if (warming_.empty()) {
    server::log_event(spdlog::level::info, "warmed up further while idle",
                      {{"seconds", warming_s_}, {"graph_bytes", voices_.graph_bytes()}});
  }
}

void Scheduler::loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    const Clock::time_point now = Clock::now();
    reap(now);
    const Clock::time_point reaped = Clock::now();
    host_gap_.reap_s += seconds_between(now, reaped);
    if (stopping_) break;
    // While a step is in flight, only kinds of the other lanes propose.
    const bool busy = in_flight_ != nullptr;
    const size_t busy_lane = busy ? in_flight_->kind->lane() : 0;
    StepKind* chosen = nullptr;
    Batch best;
    bool family_failed = false;
    for (const FamilyKinds& family : families_) {
      if (family.streams.empty()) continue;
      StepKind* family_chosen = nullptr;
      Batch family_best;
      try {
        for (const auto& kind : family.kinds) {
          if (busy && kind->lane() == busy_lane) continue;
          Batch batch = kind->propose(family.streams, pacing_, now);
          if (batch.items.empty()) continue;
          if (family_chosen == nullptr || batch.slack_s < family_best.slack_s) {
            family_chosen = kind.get();
            family_best = std::move(batch);
          }
        }
      } catch (const std::exception& e) {
        // A stream's state broke its kind's rules: end the family's streams rather than the
        // thread, and leave the other families' alone.
        spdlog::error("the scheduler could not choose a step of {}: {}", family.family->type(),
                      e.what());
        for (const auto& stream : family.streams) fail(*stream, std::current_exception());
        family_failed = true;
        continue;
      }
      if (family_chosen != nullptr && (chosen == nullptr || family_best.slack_s < best.slack_s)) {
        chosen = family_chosen;
        best = std::move(family_best);
      }
    }
    if (family_failed) continue;  // reaped before anything else runs
    if (chosen == nullptr) {
      if (busy) {
        complete_in_flight(lock);
      } else {
        if (warming_.empty()) {
          work_.wait_for(lock, kPoll);
        } else {
          warm_further(lock);
        }
        host_gap_ = {};  // waited for work: the next step's gap starts here
      }
      continue;
    }
    auto step = std::make_unique<StartedStep>();
    step->kind = chosen;
    step->batch = std::move(best);
    host_gap_.choose_s += seconds_between(reaped, Clock::now());
    step->host_before = std::exchange(host_gap_, {});
    step_running_ = true;
    lock.unlock();
    start_step(*step);
    // With every kind on one lane nothing can run beside it: no other pass of the loop for it.
    if (!several_lanes_) finish_step(*step);
    if (busy) {  // a step beside the one in flight runs whole; the older one is delivered first
      // Unless its admission waited for the one in flight (for memory, or a voice to load).
      const bool overlapped = in_flight_->in_flight != nullptr;
      finish_step(*step);
      if (overlapped) {
        step->beside = in_flight_->kind->name();
        step->ran_beside = true;
        in_flight_->beside = step->kind->name();
      }
      finish_step(*in_flight_);
    }
    const uint64_t available = budget_.available();
    const Clock::time_point ended = Clock::now();
    lock.lock();
    const Clock::time_point locked = Clock::now();
    queue_warm_ups();
    if (busy) {
      deliver_step(*in_flight_);
      in_flight_.reset();
    }
    if (step->in_flight) {
      in_flight_ = std::move(step);
    } else {
      deliver_step(*step);
    }
    step_running_ = in_flight_ != nullptr;
    budget_bytes_.store(available);
    host_gap_.relock_s += seconds_between(ended, locked);
    host_gap_.deliver_s += seconds_between(locked, Clock::now());
  }
  if (in_flight_) complete_in_flight(lock);
  for (const auto& stream : streams_) {
    if (stream->running()) fail(*stream, std::make_exception_ptr(shutting_down()));
  }
}

void Scheduler::start_step(StartedStep& step) {
  Backend& backend = runtime_.backend(step.kind->lane());
  step.proposed = step.batch.items.size();
  const bool debug = spdlog::should_log(spdlog::level::debug);
  if (debug) {
    // Segments reserved during the step: each a cudaMalloc on a GPU, which waits for the device.
    step.reserves_before = runtime_.allocator().stats().num_segment_reserves;
    step.waited_before = backend.device_wait_seconds();
  }
  backend.profile_host_time(debug);
  if (debug) (void)backend.take_host_profile();  // what ran between steps
  step.started = Clock::now();
  try {
    step.in_flight = execute(*step.kind, step.batch, step.admission, step.output);
    // A step that ran whole leaves nothing queued on its lane: the memory it gave back may go
    // to a step of another lane, whose work does not wait for this lane's.
    if (!step.in_flight) backend.synchronize();
  } catch (...) {
    step.error = std::current_exception();
    try {
      backend.synchronize();
    } catch (const std::exception& e) {  // the step's own failure is the one reported
      spdlog::warn("waiting for the {} step's device work failed: {}", step.kind->name(), e.what());
    }
  }
  if (!step.in_flight) step.seconds = seconds_between(step.started, Clock::now());
}

void Scheduler::finish_step(StartedStep& step) {
  if (!step.in_flight) return;
  try {
    step.output = step.in_flight->finish();
  } catch (...) {
    step.error = std::current_exception();
  }
  step.in_flight.reset();
  step.seconds = seconds_between(step.started, Clock::now());
}

void Scheduler::settle_in_flight() {
  if (in_flight_) finish_step(*in_flight_);
}

void Scheduler::complete_in_flight(std::unique_lock<std::mutex>& lock) {
  lock.unlock();
  finish_step(*in_flight_);
  const uint64_t available = budget_.available();
  const Clock::time_point ended = Clock::now();
  lock.lock();
  const Clock::time_point locked = Clock::now();
  deliver_step(*in_flight_);
  in_flight_.reset();
  step_running_ = false;
  budget_bytes_.store(available);
  host_gap_.relock_s += seconds_between(ended, locked);
  host_gap_.deliver_s += seconds_between(locked, Clock::now());
}

void Scheduler::deliver_step(StartedStep& step) {
  StepKind& kind = *step.kind;
  if (spdlog::should_log(spdlog::level::debug)) {  // no fields built on the hot path otherwise
    Backend& backend = runtime_.backend(kind.lane());
    const OpTimes ops = op_times(backend.take_host_profile());
    server::log_event(spdlog::level::debug, "step",
                      {{"kind", kind.name()},
                       {"urgency", urgency_name(step.batch.urgency)},
                       {"proposed", step.proposed},
                       {"items", step.batch.items.size()},
                       {"admission_s", step.admission.seconds},
                       {"seconds", step.seconds},
                       {"beside", step.beside != nullptr ? step.beside : ""},
                       {"ran_beside", step.ran_beside},
                       {"segment_reserves",
                        runtime_.allocator().stats().num_segment_reserves - step.reserves_before},
                       {"device_wait_s", backend.device_wait_seconds() - step.waited_before},
                       {"ops_host_s", ops.seconds},
                       {"top_ops", ops.top},
                       {"streams", streams_.size()},
                       {"host_before",
                        {{"relock_s", step.host_before.relock_s},
                         {"deliver_s", step.host_before.deliver_s},
                         {"reap_s", step.host_before.reap_s},
                         {"choose_s", step.host_before.choose_s}}}});
  }
  if (step.error) {
    try {
      std::rethrow_exception(step.error);
    } catch (const std::exception& e) {
      spdlog::warn("{} step of {} items failed: {}", kind.name(), step.batch.items.size(),
                   e.what());
    } catch (...) {
      spdlog::warn("{} step of {} items failed", kind.name(), step.batch.items.size());
    }
    for (const auto& stream : step.batch.items) fail(*stream, step.error);
    if (server::MetricsRegistry* metrics = metrics_.load()) {
      metrics
          ->counter("voxd_engine_step_failures_total", "Steps that threw, by kind.",
                    {{"kind", kind.name()}})
          .inc();
    }
    return;
  }
  deliver(step.batch, step.output);
  record_step(kind, step.batch.items.size(), step.seconds, step.admission.shrunk,
              step.output.preempted, step.ran_beside);
}

void Scheduler::reap(Clock::time_point now) {
  std::erase_if(streams_, [&](const std::shared_ptr<Stream>& stream) {
    if (stream->running() && now >= stream->deadline) {
      fail(*stream, std::make_exception_ptr(timed_out(options_.request_timeout)));
    }
    if (stream->running() && !stream->work_admitted) {
      stream->work_admitted = true;
      try {
        stream->work->admit();
      } catch (...) {
        fail(*stream, std::current_exception());
      }
    }
    if (stream->running()) return false;
    --stream->voice->streams;
    try {
      stream->work->release();
    } catch (const std::exception& e) {
      // A family's bookkeeping broke (a page given back twice): the stream is gone either way,
      // and the device thread must go on for every other.
      spdlog::error("releasing a stream's work failed: {}", e.what());
    }
    stream->audio.clear();
    stream->buffered_samples = 0;
    stream->gauges = {};
    return true;
  });
  for (FamilyKinds& family : families_) {
    std::erase_if(family.streams,
                  [](const std::shared_ptr<Stream>& stream) { return !stream->running(); });
  }
}

std::unique_ptr<StepInFlight> Scheduler::execute(StepKind& kind, Batch& batch, Admission& admission,
                                                 StepOutput& output) {
  const Clock::time_point started = Clock::now();
  VoiceEntry& voice = *batch.voice;
  ensure_loaded(voice);
  voice.last_used = Clock::now();
  size_t size = batch.items.size();
  for (;;) {
    const uint64_t footprint = kind.footprint(batch, size);
    if (budget_.fits(footprint)) break;
    if (size > 1) {
      size = (size + 1) / 2;
      admission.shrunk = true;
      continue;
    }
    // The step of another lane in flight gives its arena back when done: waiting for it costs
    // least, and the whole batch may fit after it. Then recordings before idle voices: recording
    // again costs less than loading a voice again.
    if (in_flight_ && in_flight_->in_flight) {
      settle_in_flight();
      size = batch.items.size();
      admission.shrunk = false;
      continue;
    }
    // Less of the item's work in this step costs it more steps, and nobody else anything.
    if (kind.shrink(batch)) {
      admission.shrunk = true;
      continue;
    }
    if (budget_.reclaim(footprint)) continue;
    if (voices_.lazy() && unload_idle_voice(&voice)) continue;
    output.audio.resize(1);
    output.errors.push_back(std::make_exception_ptr(StepRefusalError(
        budget_.refusal(kind.too_big(batch, footprint, budget_.available()), footprint))));
    batch.items.resize(1);
    return nullptr;
  }
  // The items cut off hold what they held: the step may take it back first (most slack first).
  batch.preemptible.insert(batch.preemptible.begin(), batch.items.rbegin(),
                           batch.items.rend() - static_cast<std::ptrdiff_t>(size));
  batch.items.resize(size);
  admission.seconds = seconds_between(started, Clock::now());
  return kind.start(batch, budget_, output);
}

void Scheduler::ensure_loaded(VoiceEntry& voice) {
  while (!voice.models) {
    try {
      voices_.load(voice);
      loaded_by_steps_.push_back(&voice);
    } catch (const Error& e) {
      // CachingAllocator's "out of memory: ..." (docs/memory.md); anything else is the voice's.
      if (!std::string_view(e.what()).starts_with("out of memory")) throw;
      if (unload_idle_voice(&voice)) continue;
      ApiError error;
      error.status = 503;
      error.type = "server_error";
      error.code = "insufficient_memory";
      error.retry_after_s = std::clamp(static_cast<int>(std::ceil(mean_request_s_.load())), 1, 60);
      error.message = "voice '" + voice.card().name + "' cannot be loaded now: " + e.what();
      throw error;
    }
  }
}

uint64_t Scheduler::release_recordings(uint64_t needed) {
  uint64_t releasable = 0;
  for (const auto& entry : voices_.entries()) {
    if (entry->models) releasable += entry->models->releasable_recording_bytes();
  }
  // Nothing goes for a step that would not fit even without them; then one voice's at a time,
  // until it fits.
  if (releasable == 0 || budget_.available() + releasable < needed) return 0;
  settle_in_flight();  // a step in flight may be replaying a recording
  uint64_t bytes = 0;
  for (const auto& entry : voices_.entries()) {
    if (budget_.available() >= needed) break;
    if (entry->models) bytes += entry->models->release_recordings();
  }
  server::log_event(spdlog::level::info, "recordings released",
                    {{"bytes", bytes}, {"why", "a step did not fit the memory budget"}});
  if (server::MetricsRegistry* metrics = metrics_.load()) {
    metrics
        ->counter("voxd_engine_recordings_released_total",
                  "Times the voices' recorded graphs were dropped to make room for a step.")
        .inc();
  }
  return bytes;
}

bool Scheduler::unload_idle_voice(const VoiceEntry* keep) {
  VoiceEntry* victim = nullptr;
  {
    std::lock_guard lock(mutex_);
    for (const auto& entry : voices_.entries()) {
      if (entry.get() == keep || !entry->models || entry->streams > 0) continue;
      if (victim == nullptr || entry->last_used < victim->last_used) victim = entry.get();
    }
  }
  if (victim == nullptr) return false;
  settle_in_flight();  // its voice has no stream left, but its work may still be on the device
  voices_.unload(*victim);
  runtime_.release_cached();
  if (server::MetricsRegistry* metrics = metrics_.load()) {
    metrics->counter("voxd_engine_voice_unloads_total", "Idle voices unloaded to free memory.")
        .inc();
  }
  return true;
}

void Scheduler::deliver(const Batch& batch, StepOutput& output) {
  const Clock::time_point now = Clock::now();
  std::set<Stream*> touched;
  // A stream preempted from outside the step gave its memory back: its gauges say so now.
  if (output.preempted > 0) {
    for (const std::shared_ptr<Stream>& stream : batch.preemptible) touched.insert(stream.get());
  }
  for (size_t i = 0; i < batch.items.size(); ++i) {
    Stream& stream = *batch.items[i];
    touched.insert(&stream);
    if (i < output.errors.size() && output.errors[i]) {
      fail(stream, output.errors[i]);
      continue;
    }
    if (!stream.running() || i >= output.audio.size() || output.audio[i].empty()) continue;
    std::vector<float>& audio = output.audio[i];
    const auto samples = static_cast<int64_t>(audio.size());
    stream.produced_samples += samples;
    stream.buffered_samples += samples;
    stream.audio.push_back(std::move(audio));
    if (!stream.first_audio) stream.first_audio = now;
  }
  for (Stream* stream : touched) {
    update_mirrors(*stream);
    if (stream->wake) stream->wake();
  }
}

void Scheduler::fail(Stream& stream, std::exception_ptr error) {
  if (!stream.running()) return;
  stream.state = Stream::State::kFailed;
  stream.error = answer_of(std::move(error));
  stream.audio.clear();
  stream.buffered_samples = 0;
  if (stream.wake) stream.wake();
  work_.notify_one();
}

void Scheduler::update_mirrors(Stream& stream) {
  if (!stream.running()) return;
  stream.gauges = stream.work->gauges();
  if (stream.work->finished()) stream.finished_making = true;
}

void Scheduler::record_step(const StepKind& kind, size_t batch, double seconds, bool shrunk,
                            int64_t preempted, bool beside) {
  StepCounts& counts = counts_[kind.name()];
  ++counts.steps;
  if (shrunk) ++counts.shrunk;
  if (beside) ++counts.beside;
  counts.preempted += static_cast<uint64_t>(preempted);
  counts.largest_batch = std::max(counts.largest_batch, static_cast<int64_t>(batch));
  server::MetricsRegistry* metrics = metrics_.load();
  if (metrics == nullptr) return;
  const server::Labels labels = {{"kind", kind.name()}};
  metrics
      ->histogram("voxd_engine_batch_size", "Items per step (sentences or chunks), by kind.",
                  batch_buckets(), labels)
      .observe(static_cast<double>(batch));
  metrics
      ->histogram("voxd_engine_step_seconds", "Time of one model step, by kind.", step_buckets(),
                  labels)
      .observe(seconds);
  if (shrunk) {
    metrics
        ->counter("voxd_engine_batches_shrunk_total",
                  "Batches made smaller to fit the memory budget, by kind.", labels)
        .inc();
  }
  if (beside) {
    metrics
        ->counter("voxd_engine_steps_beside_total",
                  "Steps run while a step of another lane was still on the device, by kind.",
                  labels)
        .inc();
  }
  if (preempted > 0) {
    metrics
        ->counter("voxd_engine_preemptions_total",
                  "Streams whose memory a step took back to recompute them later, by kind.", labels)
        .inc(static_cast<double>(preempted));
  }
}

void Scheduler::record_finished(const Stream& stream, Clock::time_point now) {
  server::MetricsRegistry* metrics = metrics_.load();
  if (metrics == nullptr || stream.produced_samples == 0) return;
  const double audio_s =
      static_cast<double>(stream.produced_samples) / static_cast<double>(stream.sample_rate);
  metrics
      ->histogram("voxd_engine_real_time_factor",
                  "Per finished request: time from admission to its last audio over the audio's "
                  "duration.",
                  rtf_buckets())
      .observe(seconds_between(stream.admitted, now) / audio_s);
}

}  // namespace voxd::scheduler
