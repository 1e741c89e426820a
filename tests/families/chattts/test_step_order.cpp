// The order of ChatTTS's GPT steps: before its first audio a stream is weighed by its laxity, its
// slack less its remaining decode steps to the first chunk at the voice's recent step time. A
// stream admitted a moment after another is prefilled (and joins its decoding batch) as soon as
// the other's progress outweighs the moment, instead of waiting for the other's first audio. A
// voice whose KV pool is full holds no other voice's prefill back, and a decode step out of pages
// takes them from streams outside it first.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backends/runtime.h"
#include "families/chattts/gpt_kinds.h"
#include "families/chattts/served.h"
#include "families/registry.h"
#include "scheduler/memory_budget.h"
#include "scheduler/voice_pool.h"

namespace voxd::chattts {
namespace {

namespace fs = std::filesystem;
using scheduler::Batch;
using scheduler::Clock;
using scheduler::Pacing;
using scheduler::Stream;

// The tiny fixture voice, named `name`, with a code stage long enough that its first chunk waits
// for many steps.
class LongCodeStageVoice {
 public:
  explicit LongCodeStageVoice(const std::string& name)
      : dir_(fs::temp_directory_path() /
             ("voxd-chattts-order-" + name + "-" + std::to_string(::getpid()))) {
    fs::remove_all(dir_);
    fs::copy(fs::path(VOXD_SOURCE_DIR) / "tests/fixtures/voices/tiny-chattts", dir_,
             fs::copy_options::recursive);
    nlohmann::json config;
    std::ifstream(dir_ / "config.json") >> config;
    config["name"] = name;
    config["infer_code"]["min_new_token"] = 200;
    config["infer_code"]["max_new_token"] = 200;
    std::ofstream(dir_ / "config.json") << config.dump(2);
  }
  ~LongCodeStageVoice() { fs::remove_all(dir_); }
  std::string path() const { return dir_.string(); }

 private:
  fs::path dir_;
};

class GptStepOrder : public ::testing::Test {
 protected:
  GptStepOrder()
      : runtime_(RuntimeOptions{.backend = "cpu", .threads = 1}),
        voices_(runtime_, families::registry(), {voice_.path(), other_voice_.path()}, DType::F32,
                /*lazy=*/false, scheduler::SchedulerOptions{}),
        entry_(*voices_.entries().front()),
        other_entry_(*voices_.entries().back()),
        budget_(runtime_),
        now_(Clock::now()) {}

  // A stream of one sentence, admitted `age_s` before now_, in `voice` (entry_ when null),
  // without the refine-text stage unless `refine`.
  std::shared_ptr<Stream> stream(double age_s, scheduler::VoiceEntry* voice = nullptr,
                                 bool refine = false) {
    scheduler::VoiceEntry& entry = voice != nullptr ? *voice : entry_;
    scheduler::SpeechOptions options;
    options.refine_text = refine;
    scheduler::PreparedStream prepared =
        entry.definition->prepare("Hello there.", options, scheduler::SchedulerOptions{});
    auto s = std::make_shared<Stream>();
    s->id = ++next_id_;
    s->voice = &entry;
    s->sample_rate = entry.card().sample_rate;
    s->admitted =
        now_ - std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(age_s));
    s->max_buffered_samples = prepared.max_buffered_samples;
    s->work = std::move(prepared.work);
    return s;
  }

  // Two streams of the same text and seed, prefilled whole and decoded `steps` steps together;
  // then the first is preempted (its stage to be recomputed) while the twin goes on as it was.
  struct PreemptedAndTwin {
    std::shared_ptr<Stream> preempted;
    std::shared_ptr<Stream> twin;
  };
  PreemptedAndTwin preempted_and_twin(int steps) {
    PreemptedAndTwin out{stream(0.050), stream(0.050)};
    step(prefill_, {out.preempted});
    step(prefill_, {out.twin});
    for (int i = 0; i < steps; ++i) {
      step(decode_, {out.preempted});
      step(decode_, {out.twin});
    }
    EXPECT_TRUE(work_of(*out.preempted).generation.next() == RequestGeneration::Next::kDecode)
        << "the stage ended: make it longer";
    work_of(*out.preempted).preempt();
    return out;
  }

  // Runs `kind`'s proposal over `streams` as the scheduler would.
  void step(GptKind& kind, const std::vector<std::shared_ptr<Stream>>& streams) {
    const Batch batch = kind.propose(streams, pacing_, now_);
    ASSERT_FALSE(batch.items.empty());
    const scheduler::StepOutput out = kind.run(batch, budget_);
    for (const auto& error : out.errors) ASSERT_FALSE(error);
  }

  LongCodeStageVoice voice_{"order-a"};
  LongCodeStageVoice other_voice_{"order-b"};
  DeviceRuntime runtime_;
  scheduler::VoicePool voices_;
  scheduler::VoiceEntry& entry_;
  scheduler::VoiceEntry& other_entry_;
  scheduler::MemoryBudget budget_;
  Pacing pacing_;
  Clock::time_point now_;
  uint64_t next_id_ = 0;
  static constexpr int64_t kChunk = scheduler::SchedulerOptions{}.prefill_chunk_tokens;
  GptKind prefill_{runtime_, /*prefill=*/true, /*cuda_graphs=*/false, kChunk};
  GptKind decode_{runtime_, /*prefill=*/false, /*cuda_graphs=*/false, kChunk};
};

// Two streams 15 ms apart at 10 ms a step: the later one waits while the earlier is fewer than
// two steps nearer its first audio (its prefill drew its first code, one step), and is prefilled
// first once it is two, though its plain slack is the larger all along.
TEST_F(GptStepOrder, AStreamJustBehindOneThatDecodesIsPrefilledIntoItsBatch) {
  const auto first = stream(0.050);
  step(prefill_, {first});
  const auto second = stream(0.035);
  const std::vector<std::shared_ptr<Stream>> both = {first, second};
  models_of(entry_).decode_step_seconds = 0.010;
  const int64_t whole = work_of(*second).frames_before_next_chunk();
  ASSERT_GT(whole, 3);
  EXPECT_EQ(work_of(*first).frames_before_next_chunk(), whole - 1);
  EXPECT_GT(second->slack(now_, pacing_.first_audio_due_s),
            first->slack(now_, pacing_.first_audio_due_s));

  // One step ahead, 15 ms earlier: the first goes on (laxity 5 ms less).
  Batch prefill = prefill_.propose(both, pacing_, now_);
  Batch decode = decode_.propose(both, pacing_, now_);
  EXPECT_NEAR(prefill.slack_s - decode.slack_s, 0.005, 1e-6);

  // Two steps ahead: the second's prefill goes first (laxity 5 ms less), alone in its batch.
  step(decode_, {first});
  models_of(entry_).decode_step_seconds = 0.010;
  ASSERT_EQ(work_of(*first).frames_before_next_chunk(), whole - 2);
  prefill = prefill_.propose(both, pacing_, now_);
  decode = decode_.propose(both, pacing_, now_);
  ASSERT_EQ(prefill.items.size(), 1u);
  EXPECT_EQ(prefill.items.front()->id, second->id);
  EXPECT_NEAR(prefill.slack_s - decode.slack_s, -0.005, 1e-6);
}

// Each voice has a KV pool of its own: while the most urgent stream's voice waits for pages, a
// stream of another voice is prefilled; once the pages are back, the most urgent goes first.
TEST_F(GptStepOrder, AVoiceWaitingForPagesDoesNotHoldAnotherVoiceBack) {
  KvPagePool& pool = *models_of(entry_).pages;
  std::vector<int64_t> held;
  ASSERT_TRUE(pool.grow(held, pool.free_pages() * pool.page_size()));
  const auto waiting = stream(0.050);
  const auto other = stream(0.010, &other_entry_);
  const std::vector<std::shared_ptr<Stream>> both = {waiting, other};

  const Batch batch = prefill_.propose(both, pacing_, now_);
  ASSERT_EQ(batch.items.size(), 1u);
  EXPECT_EQ(batch.items.front()->id, other->id);
  EXPECT_EQ(batch.voice, &other_entry_);
  EXPECT_NEAR(batch.slack_s, other->slack(now_, pacing_.first_audio_due_s), 1e-9);
  const scheduler::StepOutput out = prefill_.run(batch, budget_);
  for (const auto& error : out.errors) ASSERT_FALSE(error);
  EXPECT_FALSE(work_of(*other).pages.empty());
  EXPECT_TRUE(work_of(*waiting).pages.empty());

  pool.release(held);
  const Batch after = prefill_.propose(both, pacing_, now_);
  ASSERT_EQ(after.items.size(), 1u);
  EXPECT_EQ(after.items.front()->id, waiting->id);
  EXPECT_EQ(after.voice, &entry_);
}

// When a decode step runs out of pages, a stream outside it that holds pages (here one in the
// refine stage, which decodes in steps of its own) with more slack than the step's streams gives
// them back before a stream of the step preempts itself.
TEST_F(GptStepOrder, AStepOutOfPagesTakesThemFromAStreamOutsideItFirst) {
  const auto coding = stream(0.050);
  const auto refining = stream(0.010, nullptr, /*refine=*/true);
  step(prefill_, {coding});
  step(prefill_, {refining});
  ASSERT_TRUE(work_of(*refining).generation.next() == RequestGeneration::Next::kDecode);
  ASSERT_FALSE(work_of(*refining).generation.code_stage());
  // Beside a stream of the step with more slack than its own, the refining one is not offered:
  // the step's own stream with the most slack goes first.
  const auto young = stream(0.001);
  step(prefill_, {young});
  models_of(entry_).decode_step_seconds = 0.0;
  const Batch with_young = decode_.propose({coding, young, refining}, pacing_, now_);
  ASSERT_EQ(with_young.items.size(), 2u);
  EXPECT_TRUE(with_young.preemptible.empty());
  KvPagePool& pool = *models_of(entry_).pages;
  std::vector<int64_t> held;
  ASSERT_TRUE(pool.grow(held, pool.free_pages() * pool.page_size()));

  scheduler::StepOutput out;
  for (int i = 0; i < 2 * pool.page_size() && out.preempted == 0; ++i) {
    models_of(entry_).decode_step_seconds = 0.0;  // plain slack: the older stream leads
    const Batch batch = decode_.propose({coding, refining}, pacing_, now_);
    ASSERT_EQ(batch.items.size(), 1u);
    ASSERT_EQ(batch.items.front()->id, coding->id);
    ASSERT_EQ(batch.preemptible.size(), 1u);
    out = decode_.run(batch, budget_);
    for (const auto& error : out.errors) ASSERT_FALSE(error);
  }
  EXPECT_EQ(out.preempted, 1);
  EXPECT_TRUE(work_of(*refining).pages.empty());
  EXPECT_TRUE(work_of(*refining).generation.recomputing());
  EXPECT_FALSE(work_of(*coding).generation.recomputing());
  EXPECT_TRUE(work_of(*coding).generation.next() == RequestGeneration::Next::kDecode);
  pool.release(held);
}

// A stage recomputed after preemption goes through a prefill of every position it had reached
// and the one it was to feed next: with a chunk of 8 it runs in pieces of at most 8 positions
// over the cache (text, then text and code, then code: each step sized for its own piece), then
// decodes on, drawing the tokens a twin stream that was never preempted draws.
TEST_F(GptStepOrder, ARecomputedStageIsPrefilledInPiecesOfAtMostAChunk) {
  constexpr int64_t kSmallChunk = 8;
  GptKind chunked{runtime_, /*prefill=*/true, /*cuda_graphs=*/false, kSmallChunk};
  const auto [preempted, twin] = preempted_and_twin(40);
  RequestGeneration& g = work_of(*preempted).generation;
  const RequestGeneration& t = work_of(*twin).generation;
  // Preemption cut nothing the twin has: it is where the preempted stream was.
  const int64_t reached = t.positions();
  ASSERT_TRUE(work_of(*preempted).pages.empty());
  const int64_t length = g.prefill_length();
  ASSERT_GT(length, 3 * kSmallChunk);

  int64_t pieces = 0;
  while (g.next() == RequestGeneration::Next::kPrefill) {
    const Batch batch = chunked.propose({preempted}, pacing_, now_);
    ASSERT_EQ(batch.items.size(), 1u);
    const int64_t begin = g.prefilled();
    const int64_t piece = std::min(kSmallChunk, length - begin);
    EXPECT_NE(chunked.too_big(batch, 0, 0)
                  .message.find("a prefill of " + std::to_string(piece) + " tokens"),
              std::string::npos)
        << "piece " << pieces << " is not sized for its own positions";
    const scheduler::StepOutput out = chunked.run(batch, budget_);
    for (const auto& error : out.errors) ASSERT_FALSE(error);
    ++pieces;
    if (g.next() == RequestGeneration::Next::kPrefill) {
      EXPECT_EQ(g.prefilled(), begin + kSmallChunk);
      EXPECT_FALSE(work_of(*preempted).pages.empty()) << "a piece gave its cached positions back";
    }
    ASSERT_LE(pieces, length) << "the prefill makes no progress";
  }
  EXPECT_EQ(pieces, (length + kSmallChunk - 1) / kSmallChunk);
  // The recomputation fed the position the stream was to feed next, as a decode step would have.
  EXPECT_EQ(g.positions(), reached + 1);
  step(decode_, {twin});
  EXPECT_EQ(g.next_ids(), t.next_ids());
  for (int i = 0; i < 5; ++i) {
    step(decode_, {preempted});
    step(decode_, {twin});
    EXPECT_EQ(g.next_ids(), t.next_ids()) << "decode step " << i << " after the recomputation";
  }
}

// When a stream's prefill step does not fit the memory budget alone, the scheduler asks the kind
// to shrink it: each time the piece is halved, down to kLeastPrefillPiece positions, and the
// stream goes on in pieces of that size to the tokens its twin draws.
TEST_F(GptStepOrder, APrefillTooLargeForTheBudgetIsHalvedDownToTheLeastPiece) {
  const auto [preempted, twin] = preempted_and_twin(40);
  RequestGeneration& g = work_of(*preempted).generation;
  const RequestGeneration& t = work_of(*twin).generation;
  const int64_t length = g.prefill_length();
  ASSERT_GT(length, 2 * kLeastPrefillPiece);
  ASSERT_LT(length, 4 * kLeastPrefillPiece) << "the halvings below assume 32 < length < 64";

  Batch batch = prefill_.propose({preempted}, pacing_, now_);
  ASSERT_EQ(batch.items.size(), 1u);
  const auto sized_for = [&](int64_t positions) {
    return prefill_.too_big(batch, 0, 0)
               .message.find("a prefill of " + std::to_string(positions) + " tokens") !=
           std::string::npos;
  };
  EXPECT_TRUE(sized_for(length));
  ASSERT_TRUE(prefill_.shrink(batch));
  EXPECT_TRUE(sized_for(length / 2));
  ASSERT_TRUE(prefill_.shrink(batch));
  EXPECT_TRUE(sized_for(kLeastPrefillPiece));
  EXPECT_FALSE(prefill_.shrink(batch)) << "a piece was cut below the least one";
  int64_t pieces = 0;
  while (g.next() == RequestGeneration::Next::kPrefill && pieces <= length) {
    step(prefill_, {preempted});
    ++pieces;
  }
  EXPECT_EQ(pieces, (length + kLeastPrefillPiece - 1) / kLeastPrefillPiece);
  step(decode_, {twin});
  EXPECT_EQ(g.next_ids(), t.next_ids());
  // The next prefill of the stream is whole again.
  EXPECT_EQ(work_of(*preempted).prefill_piece_limit, 0);
}

// A stream mid-prefill holds its pages and needs no more: it goes on while a more urgent stream
// waits for pages (before, the waiting lead held it up, and with every other stream prefilling
// no pages ever came back).
TEST_F(GptStepOrder, AStreamHoldingItsPagesMidPrefillGoesOnWhileAnotherWaitsForPages) {
  GptKind chunked{runtime_, /*prefill=*/true, /*cuda_graphs=*/false, /*prefill_chunk_tokens=*/8};
  const auto held = preempted_and_twin(20).preempted;
  step(chunked, {held});
  ASSERT_GT(work_of(*held).generation.prefilled(), 0) << "the prefill ran whole";
  KvPagePool& pool = *models_of(entry_).pages;
  std::vector<int64_t> taken;
  ASSERT_TRUE(pool.grow(taken, pool.free_pages() * pool.page_size()));
  const auto urgent = stream(0.500);
  const Batch batch = chunked.propose({urgent, held}, pacing_, now_);
  ASSERT_EQ(batch.items.size(), 1u);
  EXPECT_EQ(batch.items.front()->id, held->id);
  while (work_of(*held).generation.next() == RequestGeneration::Next::kPrefill) {
    step(chunked, {urgent, held});
  }
  EXPECT_TRUE(work_of(*urgent).pages.empty());
  pool.release(taken);
}

}  // namespace
}  // namespace voxd::chattts
