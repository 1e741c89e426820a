// Pieces of a family made up for the scheduler's tests: voices that are a directory with a
// config.json naming the family's type, whose models are what the test's load() makes and whose
// streams' work the test admits itself; and a client that waits for a stream's end.
#pragma once

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backends/runtime.h"
#include "core/error.h"
#include "core/memory_limit.h"
#include "core/ops.h"
#include "scheduler/family.h"
#include "scheduler/scheduler.h"
#include "scheduler/step_kind.h"
#include "scheduler/voice_pool.h"

namespace voxd::scheduler::testing {

// One sentence of the text as it is: the made-up voices' streams are made by the tests.
class SilentFrontEnd final : public text::FrontEnd {
 public:
  text::Analysis analyze(std::string_view text) const override {
    text::Analysis analysis;
    analysis.normalized = std::string(text);
    analysis.sentences.emplace_back().text = analysis.normalized;
    return analysis;
  }
  std::string unit_name() const override { return "none"; }
};

// A voice of family `type` in `directory`, 16 kHz, whose load() is the test's (given the
// context the weights go to).
class MadeUpVoice final : public VoiceDefinition {
 public:
  using Load = std::function<std::unique_ptr<LoadedVoice>(Context&)>;

  MadeUpVoice(const std::string& directory, std::string_view type, Load load)
      : load_(std::move(load)) {
    card_.name = std::filesystem::path(directory).filename().string();
    card_.directory = directory;
    card_.family = std::string(type);
    card_.sample_rate = 16000;
  }
  const VoiceCard& card() const override { return card_; }
  const text::FrontEnd& front_end() const override { return front_end_; }
  PreparedStream prepare(std::string_view, const SpeechOptions&,
                         const SchedulerOptions&) const override {
    throw InputError("the tests admit their streams' work themselves");
  }
  std::unique_ptr<LoadedVoice> load(Context& ctx, DType, const SchedulerOptions&) const override {
    return load_(ctx);
  }
  WorkspacePlan plan_memory(Backend&, DType, const PlanShape&,
                            std::vector<std::string>&) const override {
    throw InputError("not planned in these tests");
  }
  uint64_t smallest_step_bytes(Backend&, const LoadedVoice&,
                               const SchedulerOptions&) const override {
    return 0;
  }

 private:
  VoiceCard card_;
  SilentFrontEnd front_end_;
  Load load_;
};

// A family of made-up voices of `type`: its voices' models are what `load` makes, its step
// kinds what `make_kinds` makes.
class MadeUpFamily final : public Family {
 public:
  using MakeKinds = std::function<std::vector<std::unique_ptr<StepKind>>(DeviceRuntime&)>;

  MadeUpFamily(std::string type, MadeUpVoice::Load load, MakeKinds make_kinds)
      : type_(std::move(type)), load_(std::move(load)), make_kinds_(std::move(make_kinds)) {}
  std::string_view type() const override { return type_; }
  std::unique_ptr<VoiceDefinition> read(const std::string& directory) const override {
    return std::make_unique<MadeUpVoice>(directory, type_, load_);
  }
  std::vector<std::unique_ptr<StepKind>> make_kinds(DeviceRuntime& runtime,
                                                    const SchedulerOptions&) const override {
    return make_kinds_(runtime);
  }

 private:
  std::string type_;
  MadeUpVoice::Load load_;
  MakeKinds make_kinds_;
};

// The first running stream for which `wants(stream)` holds, as a batch of one with its urgency,
// slack and voice; an empty batch when there is none.
template <typename Wants>
Batch first_wanting(const std::vector<std::shared_ptr<Stream>>& streams, const Pacing& pacing,
                    Clock::time_point now, const Wants& wants) {
  Batch batch;
  for (const auto& stream : streams) {
    if (!stream->running() || !wants(*stream)) continue;
    batch.urgency = urgency_of(*stream, pacing, now);
    batch.slack_s = stream->slack(now, pacing.first_audio_due_s);
    batch.voice = stream->voice;
    batch.items = {stream};
    break;
  }
  return batch;
}

// What a made-up kind answers for a step that does not fit: the request is too large (413).
inline StepRefusal step_too_big() {
  return {.request_too_large = true, .code = "step_too_big", .message = "too big"};
}

// A step's workspace of `bytes` taken from ctx's allocator and given back, as a step's arena is.
inline void use_workspace(Context& ctx, uint64_t bytes) {
  if (bytes == 0) return;
  const Tensor workspace = ops::empty(ctx, {static_cast<int64_t>(bytes / 4)}, DType::F32);
}

// A stream whose one step of `step_bytes` of workspace makes its audio.
class OneStepWork final : public StreamWork {
 public:
  // A step of `step_bytes`, which OneStepKind::shrink may halve while it stays at least
  // `least_bytes` (by default it may not).
  explicit OneStepWork(uint64_t step_bytes, uint64_t least_bytes = 0)
      : step_bytes(step_bytes), least_bytes(least_bytes == 0 ? step_bytes : least_bytes) {}
  bool finished() const override { return done; }
  StreamGauges gauges() const override { return {}; }
  void release() override {}

  uint64_t step_bytes;
  uint64_t least_bytes;
  bool done = false;
};

// Runs OneStepWork's steps, one stream at a time: its workspace, then `after_step` (given the
// batch) if set, then 160 samples of 0.25. A step that does not fit is halved down to the work's
// least_bytes (shrink), then too large (step_too_big).
class OneStepKind final : public StepKind {
 public:
  using AfterStep = std::function<void(const Batch&)>;

  explicit OneStepKind(DeviceRuntime& runtime, AfterStep after_step = {})
      : runtime_(runtime), after_step_(std::move(after_step)) {}
  const char* name() const override { return "one step"; }
  Batch propose(const std::vector<std::shared_ptr<Stream>>& streams, const Pacing& pacing,
                Clock::time_point now) override {
    return first_wanting(streams, pacing, now,
                         [](const Stream& stream) { return !work(stream).done; });
  }
  uint64_t footprint(const Batch& batch, size_t) override {
    return MemoryBudget::footprint(work(*batch.items.front()).step_bytes);
  }
  StepRefusal too_big(const Batch&, uint64_t, uint64_t) const override { return step_too_big(); }
  bool shrink(Batch& batch) override {
    OneStepWork& w = work(*batch.items.front());
    if (w.step_bytes / 2 < w.least_bytes) return false;
    w.step_bytes /= 2;
    return true;
  }
  StepOutput run(const Batch& batch, MemoryBudget&) override {
    OneStepWork& w = work(*batch.items.front());
    use_workspace(runtime_.context(), w.step_bytes);
    if (after_step_) after_step_(batch);
    w.done = true;
    return {.audio = {std::vector<float>(160, 0.25f)}, .errors = {nullptr}};
  }
  void warm_up(VoiceEntry&, const Pacing&, MemoryBudget&) override {}

 private:
  static OneStepWork& work(const Stream& stream) { return static_cast<OneStepWork&>(*stream.work); }
  DeviceRuntime& runtime_;
  AfterStep after_step_;
};

// Makes `root`/NAME/config.json of family `type` for each name; returns the directories.
inline std::vector<std::string> make_voice_directories(const std::filesystem::path& root,
                                                       std::string_view type,
                                                       const std::vector<std::string>& names) {
  std::vector<std::string> directories;
  for (const std::string& name : names) {
    std::filesystem::create_directories(root / name);
    std::ofstream(root / name / "config.json") << R"({"type": ")" << type << R"("})";
    directories.push_back((root / name).string());
  }
  return directories;
}

// Voices of made-up families in a temporary directory, on a CPU runtime whose memory limit is
// `limit_bytes`, their pool and a scheduler over them (gone before the pool, the pool before the
// directory).
class MadeUpEngine {
 public:
  // Each family with its voices' names.
  using Families = std::vector<std::pair<std::unique_ptr<MadeUpFamily>, std::vector<std::string>>>;

  // Voices `names` of one family.
  MadeUpEngine(std::unique_ptr<MadeUpFamily> family, const std::vector<std::string>& names,
               uint64_t limit_bytes, bool lazy = false, const SchedulerOptions& options = {})
      : MadeUpEngine(one(std::move(family), names), limit_bytes, lazy, options) {}
  MadeUpEngine(Families families, uint64_t limit_bytes, bool lazy = false,
               const SchedulerOptions& options = {})
      : MadeUpEngine(
            std::move(families),
            RuntimeOptions{
                .backend = "cpu", .threads = 1, .memory_limit = MemoryAmount::bytes(limit_bytes)},
            lazy, options) {}
  // On the cpu backend as `runtime` says (a limit, a memory source of its own).
  MadeUpEngine(Families families, const RuntimeOptions& runtime, bool lazy = false,
               const SchedulerOptions& options = {})
      : directory_(std::filesystem::temp_directory_path() /
                   ("voxd-" + std::string(families.front().first->type()) + "-" +
                    std::to_string(::getpid()))),
        runtime_(runtime) {
    std::vector<std::string> directories;
    for (auto& [family, names] : families) {
      for (std::string& directory : make_voice_directories(directory_, family->type(), names)) {
        directories.push_back(std::move(directory));
      }
      families_.add(std::move(family));
    }
    voices_ =
        std::make_unique<VoicePool>(runtime_, families_, directories, DType::F32, lazy, options);
    scheduler_ = std::make_unique<Scheduler>(runtime_, *voices_, options);
  }
  ~MadeUpEngine() {
    scheduler_.reset();
    voices_.reset();
    std::filesystem::remove_all(directory_);
  }
  MadeUpEngine(const MadeUpEngine&) = delete;
  MadeUpEngine& operator=(const MadeUpEngine&) = delete;

  DeviceRuntime& runtime() { return runtime_; }
  Scheduler& scheduler() { return *scheduler_; }
  VoiceEntry& voice(const std::string& name) { return *voices_->find(name); }

 private:
  static Families one(std::unique_ptr<MadeUpFamily> family, const std::vector<std::string>& names) {
    Families families;
    families.emplace_back(std::move(family), names);
    return families;
  }

  std::filesystem::path directory_;
  DeviceRuntime runtime_;
  FamilyRegistry families_;
  std::unique_ptr<VoicePool> voices_;
  std::unique_ptr<Scheduler> scheduler_;
};

// Admits `work` for `voice` and waits for the stream's end: its samples, or its failure
// rethrown.
inline std::vector<float> speak(Scheduler& scheduler, VoiceEntry& voice,
                                std::unique_ptr<StreamWork> work) {
  std::shared_ptr<Stream> stream = scheduler.admit(voice, {std::move(work), 1 << 20});
  std::mutex mutex;
  std::condition_variable news;
  bool woken = false;
  scheduler.watch(*stream, [&] {
    std::lock_guard lock(mutex);
    woken = true;
    news.notify_all();
  });
  std::vector<float> samples;
  for (;;) {
    {
      std::unique_lock lock(mutex);
      news.wait_for(lock, std::chrono::milliseconds(50), [&] { return woken; });
      woken = false;
    }
    try {
      if (scheduler.take(*stream, samples)) break;
    } catch (...) {
      scheduler.release(*stream);
      throw;
    }
  }
  scheduler.release(*stream);
  return samples;
}

}  // namespace voxd::scheduler::testing
