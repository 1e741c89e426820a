// The order of work (earliest deadline first): each step kind proposes its most urgent items
// first, by Stream::slack — a new stream's first audio is due Pacing::first_audio_due_s after
// admission, a playing stream's next audio when real-time playback catches up with what it made —
// and the acoustic model counts the mel a stream already holds as audio on its way.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "backends/runtime.h"
#include "core/caching_allocator.h"
#include "core/memory_limit.h"
#include "core/tensor.h"
#include "families/fastspeech2/acoustic_kind.h"
#include "families/fastspeech2/family.h"
#include "families/fastspeech2/vocoder_kind.h"
#include "families/registry.h"
#include "scheduler/memory_budget.h"
#include "scheduler/voice_pool.h"
#include "text/front_end.h"
#include "text/phonemizer.h"

namespace voxd::fastspeech2 {
namespace {

using scheduler::MemoryBudget;
using scheduler::Urgency;
using scheduler::urgency_of;
using scheduler::VoicePool;

const std::string kDemoVoice = std::string(VOXD_SOURCE_DIR) + "/voices/en-demo";
constexpr int64_t kChunkFrames = 16;

// The acoustic kind's options in these tests: kChunkFrames chunks, no graphs, `band`.
scheduler::SchedulerOptions acoustic_options(
    double band = scheduler::SchedulerOptions{}.acoustic_length_band) {
  scheduler::SchedulerOptions options;
  options.chunk_frames = kChunkFrames;
  options.first_chunk_frames = kChunkFrames;
  options.cuda_graphs = false;
  options.acoustic_length_band = band;
  return options;
}

class StepOrder : public ::testing::Test {
 protected:
  StepOrder()
      : runtime_(RuntimeOptions{.backend = "cpu", .threads = 1}),
        voices_(runtime_, families::registry(), {kDemoVoice}, DType::F32, /*lazy=*/false,
                scheduler::SchedulerOptions{}),
        voice_(*voices_.entries().front()),
        now_(Clock::now()) {}

  // A stream admitted `age_s` ago; when `playing_ahead_s` is given it started playing 1 s ago
  // and has made 1 s + playing_ahead_s of audio.
  std::shared_ptr<Stream> stream(double age_s, std::optional<double> playing_ahead_s) {
    auto s = std::make_shared<Stream>();
    s->id = ++next_id_;
    s->voice = &voice_;
    s->sample_rate = voice_.card().sample_rate;
    s->admitted = now_ - seconds(age_s);
    s->work = std::make_unique<SentenceWork>(
        1.0f, kChunkFrames + 2 * config_of(voice_).vocoder.receptive_field_frames());
    s->max_buffered_samples = int64_t{1} << 40;
    if (playing_ahead_s) {
      s->first_audio = now_ - seconds(1.0);
      s->produced_samples =
          static_cast<int64_t>((1.0 + *playing_ahead_s) * static_cast<double>(s->sample_rate));
    }
    return s;
  }

  // Gives `s` a sentence for the acoustic model (of `phonemes` ids), or mel for `chunks` interior
  // vocoder chunks.
  void with_sentence(Stream& s, size_t phonemes = 3) {
    work_of(s).sentences.push_back({std::vector<int64_t>(phonemes, 1)});
  }
  void with_chunks(Stream& s, int64_t chunks) {
    const HifiGanConfig& vocoder = config_of(voice_).vocoder;
    VocoderChunker chunker(vocoder, kChunkFrames);
    chunker.append(Tensor::zeros({vocoder.num_mels, chunks * kChunkFrames}, DType::F32));
    chunker.finish();
    work_of(s).chunkers.push_back(std::move(chunker));
  }

  static Clock::duration seconds(double s) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  }

  static std::vector<uint64_t> ids(const Batch& batch) {
    std::vector<uint64_t> out;
    for (const auto& s : batch.items) out.push_back(s->id);
    return out;
  }

  DeviceRuntime runtime_;
  VoicePool voices_;
  VoiceEntry& voice_;
  Clock::time_point now_;
  uint64_t next_id_ = 0;
};

TEST_F(StepOrder, SlackIsTimeToTheFirstAudioOrToTheEndOfWhatWasMade) {
  const Pacing pacing;  // first audio due after 0.2 s
  EXPECT_NEAR(stream(0.05, std::nullopt)->slack(now_, pacing.first_audio_due_s), 0.15, 1e-6);
  EXPECT_NEAR(stream(0.5, std::nullopt)->slack(now_, pacing.first_audio_due_s), -0.3, 1e-6);
  EXPECT_NEAR(stream(5.0, 0.7)->slack(now_, pacing.first_audio_due_s), 0.7, 1e-3);
  EXPECT_EQ(urgency_of(*stream(0.0, std::nullopt), pacing, now_), Urgency::kFirstAudio);
  EXPECT_EQ(urgency_of(*stream(0.0, 0.5), pacing, now_), Urgency::kStarving);
  EXPECT_EQ(urgency_of(*stream(0.0, 3.0), pacing, now_), Urgency::kAhead);
}

// A new stream's first chunk goes before the next chunk of a stream 0.7 s ahead, but after one
// only 0.1 s from running dry; new streams in order of admission.
TEST_F(StepOrder, VocoderTakesTheEarliestDeadlineFirst) {
  const auto comfortable = stream(3.0, 0.7);
  const auto newer = stream(0.01, std::nullopt);
  const auto running_dry = stream(3.0, 0.1);
  const auto older = stream(0.05, std::nullopt);
  const std::vector<std::shared_ptr<Stream>> streams = {comfortable, newer, running_dry, older};
  for (const auto& s : streams) with_chunks(*s, 3);
  VocoderKind kind(runtime_, kChunkFrames, kChunkFrames, /*cuda_graphs=*/false);
  Pacing pacing;
  pacing.max_batch = 4;
  const Batch batch = kind.propose(streams, pacing, now_);
  EXPECT_EQ(ids(batch),
            (std::vector<uint64_t>{running_dry->id, older->id, newer->id, comfortable->id}));
  EXPECT_EQ(batch.urgency, Urgency::kStarving);
  EXPECT_NEAR(batch.slack_s, 0.1, 1e-3);
}

// A shorter chunk joins a batch of longer ones (padded on the right) unless its mel reaches its
// stream's end.
TEST_F(StepOrder, VocoderPadsShorterChunksThatDoNotReachTheirEnd) {
  const auto lead = stream(3.0, 0.1);
  const auto newcomer = stream(0.0, std::nullopt);
  const auto ending = stream(3.0, 0.5);
  with_chunks(*lead, 4);
  with_chunks(*newcomer, 4);
  with_chunks(*ending, 1);
  ASSERT_NE(work_of(*lead).peek_chunk(0), nullptr);
  work_of(*lead).ready.pop_front();  // its next chunk is an interior one, context on both sides
  const int64_t interior = work_of(*lead).peek_chunk(0)->mel.size(1);
  ASSERT_LT(work_of(*newcomer).peek_chunk(0)->mel.size(1), interior);
  ASSERT_FALSE(work_of(*newcomer).peek_chunk(0)->reaches_end);
  ASSERT_LT(work_of(*ending).peek_chunk(0)->mel.size(1), interior);
  ASSERT_TRUE(work_of(*ending).peek_chunk(0)->reaches_end);
  VocoderKind kind(runtime_, kChunkFrames, kChunkFrames, /*cuda_graphs=*/false);
  Pacing pacing;
  pacing.max_batch = 2;
  const Batch batch = kind.propose({lead, newcomer, ending}, pacing, now_);
  EXPECT_EQ(ids(batch), (std::vector<uint64_t>{lead->id, newcomer->id}));
}

// Beyond one chunk per stream, a step takes chunks only while its expected time (by the voice's
// recent vocoder steps) stays under its lead's slack or the first pass's time; before any step
// was timed, or when every stream holds plenty, up to max_batch. A served step is timed.
TEST_F(StepOrder, VocoderStepEndsBeforeTheLeastAudioInHandRunsOut) {
  const auto make_streams = [&](double least_ahead_s) {
    const std::vector<std::shared_ptr<Stream>> streams = {stream(3.0, least_ahead_s),
                                                          stream(3.0, 5.0), stream(3.0, 5.0)};
    for (const auto& s : streams) {
      with_chunks(*s, 6);
      EXPECT_NE(work_of(*s).peek_chunk(0), nullptr);
      work_of(*s).ready.pop_front();  // four interior chunks of one shape left, then the last
    }
    return streams;
  };
  VocoderKind kind(runtime_, kChunkFrames, kChunkFrames, /*cuda_graphs=*/false);
  Pacing pacing;
  pacing.max_batch = 64;
  const auto sizes = [&](double least_ahead_s) {
    return kind.propose(make_streams(least_ahead_s), pacing, now_).items.size();
  };
  const int64_t frames = kChunkFrames + 2 * config_of(voice_).vocoder.receptive_field_frames();
  LoadedModels& models = models_of(voice_);
  ASSERT_EQ(models.vocoder_times.expected(1, frames), 0.0);
  EXPECT_EQ(sizes(0.27), 12u);  // not timed yet: four passes of three streams
  EXPECT_EQ(sizes(-0.1), 12u);

  models.vocoder_times.record(1, frames, 0.05);  // 50 ms a chunk
  EXPECT_EQ(sizes(4.0), 12u);                    // 0.6 s of work, 4 s in hand
  // Three first chunks (0.15 s) always; then 0.2 and 0.25 s are under 0.27, 0.3 is not.
  const auto streams = make_streams(0.27);
  const Batch batch = kind.propose(streams, pacing, now_);
  EXPECT_EQ(ids(batch), (std::vector<uint64_t>{streams[0]->id, streams[1]->id, streams[2]->id,
                                               streams[0]->id, streams[1]->id}));
  EXPECT_EQ(sizes(-0.1), 3u);  // a stream already dry: no step longer than the first pass

  models.vocoder_times = VocoderStepTimes();
  MemoryBudget budget(runtime_);
  EXPECT_EQ(kind.run(batch, budget).audio.size(), batch.items.size());
  EXPECT_GT(models.vocoder_times.expected(1, frames), 0.0);
}

// Steps are averaged by power-of-two buckets of rows, per row and frame; a size not measured
// takes its nearest bucket's (the smaller on a tie); each step moves its bucket by a tenth.
TEST(VocoderStepTimes, AverageByBucketsOfRowsAndTakeTheNearest) {
  constexpr double kTolerance = 1e-12;
  VocoderStepTimes times;
  EXPECT_EQ(times.expected(4, 100), 0.0);
  times.record(2, 100, 0.002);  // bucket 1 (2 rows): 1e-5 s per row and frame
  EXPECT_NEAR(times.expected(2, 100), 0.002, kTolerance);
  EXPECT_NEAR(times.expected(1, 50), 0.0005, kTolerance);   // bucket 0: the nearest is 1
  EXPECT_NEAR(times.expected(16, 100), 0.016, kTolerance);  // bucket 4: the nearest is 1
  times.record(8, 100, 0.004);                              // bucket 3: 5e-6
  EXPECT_NEAR(times.expected(5, 100), 0.0025, kTolerance);  // bucket 3 itself
  EXPECT_NEAR(times.expected(16, 100), 0.008, kTolerance);  // bucket 4: the nearest is 3
  EXPECT_NEAR(times.expected(3, 100), 0.003, kTolerance);   // bucket 2: a tie, the smaller
  times.record(2, 100, 0.004);                              // bucket 1: 0.9 * 1e-5 + 0.1 * 2e-5
  EXPECT_NEAR(times.expected(2, 100), 0.0022, kTolerance);
  times.record(2, 100, -1.0);  // not a time: ignored
  EXPECT_NEAR(times.expected(2, 100), 0.0022, kTolerance);
}

// A step takes the sentences within the length band of its lead's, on both sides: at 1.25, 10
// and 12 phonemes but not 15 or 7; at 2, all four.
TEST_F(StepOrder, AcousticBatchesWithinTheLengthBand) {
  const auto lead = stream(0.3, std::nullopt);
  const auto near = stream(0.25, std::nullopt);
  const auto longer = stream(0.2, std::nullopt);
  const auto shorter = stream(0.1, std::nullopt);
  with_sentence(*lead, 10);
  with_sentence(*near, 12);
  with_sentence(*longer, 15);
  with_sentence(*shorter, 7);
  Pacing pacing;
  pacing.max_batch = 4;
  AcousticKind narrow(runtime_, acoustic_options());
  EXPECT_EQ(ids(narrow.propose({lead, near, longer, shorter}, pacing, now_)),
            (std::vector<uint64_t>{lead->id, near->id}));
  AcousticKind wide(runtime_, acoustic_options(2.0));
  EXPECT_EQ(ids(wide.propose({lead, near, longer, shorter}, pacing, now_)),
            (std::vector<uint64_t>{lead->id, near->id, longer->id, shorter->id}));
}

// The acoustic model serves a new stream's first sentence before the next sentence of a playing
// stream, and of two playing streams equally far ahead, the one holding less mel first.
TEST_F(StepOrder, AcousticCountsTheMelAStreamHoldsAsAudioOnItsWay) {
  const auto holding = stream(3.0, 0.3);
  const auto empty = stream(3.0, 0.3);
  const auto fresh = stream(0.0, std::nullopt);
  for (const auto& s : {holding, empty, fresh}) with_sentence(*s);
  with_chunks(*holding, 1);
  AcousticKind kind(runtime_, acoustic_options());
  Pacing pacing;
  pacing.max_batch = 3;
  const Batch batch = kind.propose({holding, empty, fresh}, pacing, now_);
  EXPECT_EQ(ids(batch), (std::vector<uint64_t>{fresh->id, empty->id, holding->id}));
  EXPECT_EQ(batch.urgency, Urgency::kFirstAudio);
  EXPECT_NEAR(batch.slack_s, 0.2, 1e-3);
}

// The warm-up's ladder: from one 16-symbol sentence to max_batch sentences of 256 symbols, each
// step's rows (sentences × symbols) at most twice the last's, so no power-of-two bucket of rows
// between them is skipped.
// With first_clause_alone a stream's first sentence reaches the acoustic model as its first
// clause and then the rest (the pause after the sentence after the rest), the other sentences
// whole; without it every sentence whole.
TEST_F(StepOrder, FirstClauseAloneSplitsTheFirstSentenceOnly) {
  const scheduler::VoiceDefinition& definition = *voice_.definition;
  const std::string text =
      "<speak>Ticket three hundred forty-seven, the birch canoe slid on the smooth planks. "
      "Glue the sheet to the dark blue background, and rest.<break time=\"300ms\"/></speak>";
  const scheduler::SpeechOptions options;
  scheduler::SchedulerOptions scheduling;
  const scheduler::PreparedStream whole = definition.prepare(text, options, scheduling);
  scheduling.first_clause_alone = true;
  const scheduler::PreparedStream split = definition.prepare(text, options, scheduling);
  const auto& sentences = static_cast<const SentenceWork&>(*whole.work).sentences;
  const auto& parts = static_cast<const SentenceWork&>(*split.work).sentences;
  ASSERT_EQ(sentences.size(), 2u);
  ASSERT_EQ(parts.size(), 3u);
  std::vector<int64_t> joined = parts[0].ids;
  joined.insert(joined.end(), parts[1].ids.begin(), parts[1].ids.end());
  EXPECT_EQ(joined, sentences[0].ids);
  EXPECT_GE(parts[0].ids.size(), kMinClauseUnits);
  EXPECT_GE(parts[1].ids.size(), kMinClauseUnits);
  EXPECT_EQ(parts[0].pause_samples, 0);
  EXPECT_EQ(parts[1].pause_samples, sentences[0].pause_samples);
  EXPECT_EQ(parts[2].ids, sentences[1].ids);
  EXPECT_GT(parts[2].pause_samples, 0);
  EXPECT_EQ(parts[2].pause_samples, sentences[1].pause_samples);
}

// A sentence of `units` with ids 0, 1, ... (one each).
text::Sentence sentence_of(const std::vector<std::string>& units) {
  text::Sentence sentence;
  sentence.phonemes = units;
  for (size_t i = 0; i < units.size(); ++i) sentence.ids.push_back(static_cast<int64_t>(i));
  return sentence;
}

// `count` units "a", then `mark`, then `after` units "b".
std::vector<std::string> around(size_t count, const std::string& mark, size_t after) {
  std::vector<std::string> units(count, "a");
  units.push_back(mark);
  units.insert(units.end(), after, "b");
  return units;
}

TEST(FirstClause, EndsAtTheFirstMarkWithEnoughUnitsOnEachSide) {
  EXPECT_EQ(first_clause_ids(sentence_of(around(10, ",", 10))), 11u);
  EXPECT_EQ(first_clause_ids(sentence_of(around(7, ";", 8))), 8u);  // the shortest on each side
  EXPECT_EQ(first_clause_ids(sentence_of(around(7, ":", 12))), 8u);
  // ARPAbet voices (ming024's LJSpeech) get a pause where the text had the mark.
  EXPECT_EQ(first_clause_ids(sentence_of(around(9, std::string(text::kArpabetPause), 9))), 10u);
  // A mark too early is passed over for a later one.
  std::vector<std::string> units = around(3, ",", 6);
  const std::vector<std::string> rest = around(2, ",", 9);
  units.insert(units.end(), rest.begin(), rest.end());
  EXPECT_EQ(first_clause_ids(sentence_of(units)), 13u);
  // Too little after the mark, a sentence's end, no mark at all.
  EXPECT_EQ(first_clause_ids(sentence_of(around(10, ",", 7))), std::nullopt);
  EXPECT_EQ(first_clause_ids(sentence_of(around(6, ",", 10))), std::nullopt);
  EXPECT_EQ(first_clause_ids(sentence_of(around(10, ".", 10))), std::nullopt);
  EXPECT_EQ(first_clause_ids(sentence_of(std::vector<std::string>(30, "a"))), std::nullopt);
  // Units that do not pair with the ids one to one.
  text::Sentence dropped = sentence_of(around(10, ",", 10));
  dropped.dropped = 1;
  EXPECT_EQ(first_clause_ids(dropped), std::nullopt);
  text::Sentence short_ids = sentence_of(around(10, ",", 10));
  short_ids.ids.pop_back();
  EXPECT_EQ(first_clause_ids(short_ids), std::nullopt);
}

TEST(WarmLadder, AtMostDoublesTheRowsFromOneSentenceToTheLongestBatch) {
  for (const int64_t max_batch : {1, 2, 48, 64}) {
    const std::vector<std::pair<int64_t, int64_t>> ladder = warm_ladder(max_batch);
    ASSERT_FALSE(ladder.empty());
    EXPECT_EQ(ladder.front(), std::make_pair(int64_t{1}, int64_t{16}));
    EXPECT_EQ(ladder.back(), std::make_pair(max_batch, int64_t{256}));
    for (size_t i = 1; i < ladder.size(); ++i) {
      const int64_t rows = ladder[i].first * ladder[i].second;
      const int64_t before = ladder[i - 1].first * ladder[i - 1].second;
      EXPECT_GT(rows, before) << max_batch << " step " << i;
      EXPECT_LE(rows, 2 * before) << max_batch << " step " << i;
      EXPECT_LE(ladder[i].first, max_batch);
    }
  }
}

// warm_further runs one ladder step a call (made-up input; the plans' arenas come back), says
// when the ladder is done, and leaves out a step that does not fit the budget.
TEST_F(StepOrder, AcousticWarmsFurtherOneStepACallThenStops) {
  AcousticKind kind(runtime_, acoustic_options());
  Pacing pacing;
  pacing.max_batch = 2;
  MemoryBudget budget(runtime_);
  const size_t steps = warm_ladder(pacing.max_batch).size();
  CachingAllocator& allocator = runtime_.allocator();
  for (size_t i = 0; i < steps; ++i) {
    const uint64_t ran_before = allocator.stats().total_allocated_bytes;
    EXPECT_EQ(kind.warm_further(voice_, pacing, budget), i + 1 < steps) << "step " << i;
    EXPECT_GT(allocator.stats().total_allocated_bytes, ran_before) << "step " << i;
    EXPECT_EQ(allocator.stats().allocated_bytes, runtime_.weights_bytes()) << "step " << i;
  }
  EXPECT_FALSE(kind.warm_further(voice_, pacing, budget));
  // A voice warmed up again (loaded again after an unload) climbs the ladder again.
  kind.warm_up(voice_, pacing, budget);
  EXPECT_EQ(kind.warm_further(voice_, pacing, budget), steps > 1);
}

TEST_F(StepOrder, VocoderWarmsFurtherBatchesOfFirstAndInteriorChunksThenStops) {
  VocoderKind kind(runtime_, kChunkFrames, kChunkFrames / 2, /*cuda_graphs=*/false);
  Pacing pacing;
  pacing.max_batch = 4;
  MemoryBudget budget(runtime_);
  CachingAllocator& allocator = runtime_.allocator();
  // First chunks of 2 and 4 streams, then interior chunks of 1, 2 and 4 (no graphs here).
  for (int i = 0; i < 5; ++i) {
    const uint64_t ran_before = allocator.stats().total_allocated_bytes;
    EXPECT_EQ(kind.warm_further(voice_, pacing, budget), i < 4) << "step " << i;
    EXPECT_GT(allocator.stats().total_allocated_bytes, ran_before) << "step " << i;
    EXPECT_EQ(allocator.stats().allocated_bytes, runtime_.weights_bytes()) << "step " << i;
  }
  EXPECT_FALSE(kind.warm_further(voice_, pacing, budget));
  // A voice warmed up again (loaded again after an unload) runs its pieces again.
  kind.warm_up(voice_, pacing, budget);
  EXPECT_TRUE(kind.warm_further(voice_, pacing, budget));
}

TEST(WarmFurther, LeavesOutWhatDoesNotFitTheBudget) {
  RuntimeOptions options{.backend = "cpu", .threads = 1};
  // Room for the weights and next to nothing else.
  {
    DeviceRuntime probe(options);
    VoicePool pool(probe, families::registry(), {kDemoVoice}, DType::F32, /*lazy=*/false,
                   scheduler::SchedulerOptions{});
    options.memory_limit =
        MemoryAmount::bytes(probe.allocator().stats().reserved_bytes + (uint64_t{1} << 16));
  }
  DeviceRuntime runtime(options);
  VoicePool voices(runtime, families::registry(), {kDemoVoice}, DType::F32, /*lazy=*/false,
                   scheduler::SchedulerOptions{});
  VoiceEntry& voice = *voices.entries().front();
  AcousticKind acoustic(runtime, acoustic_options());
  VocoderKind vocoder(runtime, kChunkFrames, kChunkFrames, /*cuda_graphs=*/false);
  Pacing pacing;
  pacing.max_batch = 2;
  MemoryBudget budget(runtime);
  const uint64_t ran_before = runtime.allocator().stats().total_allocated_bytes;
  size_t acoustic_calls = 1;
  while (acoustic.warm_further(voice, pacing, budget)) ++acoustic_calls;
  size_t vocoder_calls = 1;
  while (vocoder.warm_further(voice, pacing, budget)) ++vocoder_calls;
  EXPECT_EQ(acoustic_calls, warm_ladder(pacing.max_batch).size());
  EXPECT_EQ(vocoder_calls, 3u);  // first chunks of 2; interior chunks of 1 and 2
  EXPECT_EQ(runtime.allocator().stats().total_allocated_bytes, ran_before);
}

// A step's padded length: exact up to 16, then never below the longest, at most an eighth above
// it, monotone, and few: 8 sizes per octave.
TEST(AcousticPadding, RoundsUpToEightSizesPerOctave) {
  EXPECT_EQ(padded_length(1), 1);
  EXPECT_EQ(padded_length(16), 16);
  EXPECT_EQ(padded_length(17), 18);
  EXPECT_EQ(padded_length(200), 208);
  EXPECT_EQ(padded_length(256), 256);
  EXPECT_EQ(padded_length(1000), 1024);
  std::set<int64_t> sizes;
  int64_t previous = 0;
  for (int64_t n = 1; n <= 4096; ++n) {
    const int64_t padded = padded_length(n);
    EXPECT_GE(padded, n);
    EXPECT_LE(8 * padded, 9 * n) << n;
    EXPECT_GE(padded, previous);
    previous = padded;
    if (n > 256) sizes.insert(padded);
  }
  EXPECT_EQ(sizes.size(), 4u * 8u);  // 257..4096: four octaves
}

}  // namespace
}  // namespace voxd::fastspeech2
