// EngineService on the CPU backend with the tiny ChatTTS fixture voice, its KV cache in pages:
// a sentence's audio streams in chunks as its tokens come and equals the audio the offline
// Synthesizer makes in one piece; a client that does not read stops its stream's decoding;
// streams decoded together from a pool too small for all of them
// are preempted and recomputed and each still gets the audio it gets alone; a stream whose client
// leaves stops decoding and gives its pages back; many short requests leave the pool and the
// allocator where they started.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "backends/registry.h"
#include "core/caching_allocator.h"
#include "families/chattts/generation.h"
#include "families/chattts/served.h"
#include "families/chattts/synthesizer.h"
#include "families/registry.h"
#include "run_job.h"
#include "scheduler/engine_service.h"
#include "scheduler/scheduler.h"
#include "server/api_error.h"
#include "server/metrics.h"

namespace voxd::scheduler {
namespace {

namespace fs = std::filesystem;

const fs::path kFixtureVoice = fs::path(VOXD_SOURCE_DIR) / "tests/fixtures/voices/tiny-chattts";
constexpr uint64_t kPageBytes = 8 * 1024;  // tiny-chattts: 2 layers × K and V × 16 × 2 × 16 × 4

// The fixture voice with stages short enough that a few streams fill a small pool: a code stage
// of at most `code_tokens` tokens (its capacity, with the prompt, in a handful of pages), and a
// GPT of `positions` positions (0: the fixture's).
class ShortStagesVoice {
 public:
  explicit ShortStagesVoice(int64_t code_tokens, int64_t refine_tokens = 24, int64_t positions = 0)
      : dir_(fs::temp_directory_path() /
             ("voxd-chattts-" + std::to_string(::getpid()) + "-" + std::to_string(code_tokens) +
              "-" + std::to_string(refine_tokens) + "-" + std::to_string(positions))) {
    fs::remove_all(dir_);
    fs::copy(kFixtureVoice, dir_, fs::copy_options::recursive);
    nlohmann::json config;
    std::ifstream(dir_ / "config.json") >> config;
    config["infer_code"]["max_new_token"] = code_tokens;
    config["refine_text"]["max_new_token"] = refine_tokens;
    if (positions > 0) config["gpt"]["max_position_embeddings"] = positions;
    std::ofstream(dir_ / "config.json") << config.dump(2);
  }
  ~ShortStagesVoice() { fs::remove_all(dir_); }
  std::string path() const { return dir_.string(); }

 private:
  fs::path dir_;
};

EngineConfig config_of(const ShortStagesVoice& voice, uint64_t kv_cache_pages) {
  EngineConfig config;
  config.families = &families::registry();
  config.voice_dirs = {voice.path()};
  config.runtime.backend = "cpu";
  config.runtime.threads = 1;
  config.kv_cache_bytes = kv_cache_pages * kPageBytes;
  return config;
}

server::SpeechRequest request(const std::string& text, uint64_t seed) {
  server::SpeechRequest r;
  r.model = "voxd";
  r.input = text;
  r.voice = "tiny-chattts";
  r.seed = seed;
  return r;
}

const std::vector<std::string> kTexts = {
    "One sentence here.",
    "Hello there. How are you today?",
    "Short.",
    "A third text, a bit longer.",
    "Good morning to you.",
    "See you at noon.",
};

TEST(ChatTtsEngine, ASentenceStreamsInChunksThatMakeTheAudioOfOnePiece) {
  const ShortStagesVoice voice(400);
  const std::string text = "This one sentence goes on for a while, and then a while longer";
  constexpr uint64_t kSeed = 11;
  std::vector<float> whole;
  chattts::Generation made;
  {
    std::unique_ptr<Backend> backend = make_backend("cpu", 1);
    Context ctx(*backend, host_allocator());
    const std::unique_ptr<chattts::Voice> models = chattts::Voice::load(ctx, voice.path());
    chattts::GenerationOptions options;
    options.seed = kSeed;
    made = chattts::Synthesizer(ctx, *models)
               .synthesize(text, options, [&](const std::vector<float>& audio) {
                 whole.insert(whole.end(), audio.begin(), audio.end());
               });
  }
  ASSERT_EQ(made.sentences, 1);
  ASSERT_GT(made.code_frames, chattts::kFirstStreamChunkFrames + chattts::kStreamChunkFrames);

  Served served(config_of(voice, 256));
  const uint64_t before = served.service.step_counts("vocos").steps;
  expect_same_audio(whole, speak(served.service, request(text, kSeed)), text);
  // One vocoder step per chunk (a stream alone): the first of kFirstStreamChunkFrames code
  // frames, each later one as many as were sent before it, up to kStreamChunkFrames.
  int64_t chunks = 0;
  for (int64_t sent = 0; sent < made.code_frames; ++chunks) {
    sent += sent == 0 ? chattts::kFirstStreamChunkFrames
                      : std::min(chattts::kStreamChunkFrames,
                                 std::max(chattts::kFirstStreamChunkFrames, sent));
  }
  EXPECT_EQ(served.service.step_counts("vocos").steps - before, static_cast<uint64_t>(chunks));
}

TEST(ChatTtsEngine, APoolTooSmallForEveryStreamPreemptsAndEachGetsItsAudioAlone) {
  const ShortStagesVoice voice(96);
  std::vector<std::vector<float>> alone;
  {
    EngineService service(config_of(voice, 256));
    for (size_t i = 0; i < kTexts.size(); ++i)
      alone.push_back(speak(service, request(kTexts[i], i)));
    EXPECT_EQ(service.step_counts("decode").preempted, 0u);
  }
  // Room for one stage's capacity (prompt + 96 tokens, 8 pages) and a little more: six streams
  // decoding together run out and take pages from each other.
  Served served(config_of(voice, 12));
  EngineService& service = served.service;
  std::vector<std::unique_ptr<server::SpeechJob>> jobs;
  for (size_t i = 0; i < kTexts.size(); ++i) jobs.push_back(service.admit(request(kTexts[i], i)));
  const std::vector<std::vector<float>> together = run_all(jobs);
  for (size_t i = 0; i < kTexts.size(); ++i) expect_same_audio(alone[i], together[i], kTexts[i]);
  const uint64_t preempted = service.step_counts("decode").preempted;
  EXPECT_GT(preempted, 0u);
  wait_idle(service);
  EXPECT_EQ(served.kv_pages("used"), 0.0);
  EXPECT_EQ(served.kv_pages("free"), 12.0);
  EXPECT_EQ(
      served.metrics.counter("voxd_engine_preemptions_total", "", {{"kind", "decode"}}).value(),
      static_cast<double>(preempted));
  const nlohmann::json kv = service.memory_summary_json()["kv_cache"];
  EXPECT_EQ(kv["pages"], 12);
  EXPECT_EQ(kv["used_pages"], 0);
  EXPECT_EQ(kv["bytes"], 12 * kPageBytes);
  EXPECT_EQ(kv["preemptions"], preempted);
  EXPECT_NE(service.memory_summary_text().find("preemptions  " + std::to_string(preempted)),
            std::string::npos)
      << service.memory_summary_text();
}

// The prefill steps' streams, all together: each stream's prefill (a stage's, or a recomputation)
// counts once per step that ran a piece of it.
double prefill_items(Served& served) {
  return served.metrics
      .histogram("voxd_engine_batch_size", "", {1, 2, 4, 8, 16, 32, 64, 128, 256},
                 {{"kind", "prefill"}})
      .snapshot()
      .sum;
}

// The same streams with prefills of at most 2 positions: every prefill, the stages' and the
// preempted streams' recomputations, runs in pieces over the cache, and each stream still gets
// the audio it gets alone.
TEST(ChatTtsEngine, PrefillsInPiecesGiveEachStreamItsAudioAlone) {
  const ShortStagesVoice voice(96);
  std::vector<std::vector<float>> alone;
  double stage_prefills = 0;
  {
    Served served(config_of(voice, 256));
    for (size_t i = 0; i < kTexts.size(); ++i)
      alone.push_back(speak(served.service, request(kTexts[i], i)));
    stage_prefills = prefill_items(served);
  }
  EngineConfig config = config_of(voice, 12);
  config.prefill_chunk_tokens = 2;
  Served served(config);
  EngineService& service = served.service;
  std::vector<std::unique_ptr<server::SpeechJob>> jobs;
  for (size_t i = 0; i < kTexts.size(); ++i) jobs.push_back(service.admit(request(kTexts[i], i)));
  const std::vector<std::vector<float>> together = run_all(jobs);
  for (size_t i = 0; i < kTexts.size(); ++i) expect_same_audio(alone[i], together[i], kTexts[i]);
  const uint64_t recomputed =
      service.step_counts("decode").preempted + service.step_counts("prefill").preempted;
  EXPECT_GT(recomputed, 0u);
  // Each prompt has more than 2 positions: two pieces or more for every stage and recomputation.
  EXPECT_GE(prefill_items(served), 2 * (stage_prefills + static_cast<double>(recomputed)));
  wait_idle(service);
  EXPECT_EQ(served.kv_pages("used"), 0.0);
}

TEST(ChatTtsEngine, AStreamWhoseClientLeavesStopsDecodingAndGivesItsPagesBack) {
  const ShortStagesVoice voice(200);
  // Two sentences: the client takes the first one's audio and leaves during the second.
  const server::SpeechRequest r = request("Hello there. How are you today, my friend?", 5);
  Served served(config_of(voice, 64));
  EngineService& service = served.service;
  const uint64_t before = service.step_counts("decode").steps;
  (void)speak(service, r);
  const uint64_t whole = service.step_counts("decode").steps - before;
  {
    std::unique_ptr<server::SpeechJob> job = service.admit(r);
    CollectingSink sink(1);
    run_job(*job, sink);
    EXPECT_EQ(sink.writes, 1u);
  }
  wait_idle(service);
  const uint64_t cut = service.step_counts("decode").steps - before - whole;
  EXPECT_LT(cut, whole) << "the cut-off stream decoded its whole text";
  EXPECT_EQ(served.kv_pages("used"), 0.0);
}

// A client that never reads: its audio fills its buffer, the chunks after it wait, and then the
// GPT makes no more for the stream (the hidden states it holds stay bounded, the decode steps
// stop) until the client goes, which gives the pages back.
TEST(ChatTtsEngine, AClientThatDoesNotReadStopsTheDecodingAndHoldsBoundedAudio) {
  const ShortStagesVoice voice(400);
  Served served(config_of(voice, 256));
  EngineService& service = served.service;
  const std::string text =
      "One sentence goes on for a while. Another one comes after it. A third goes on and on. "
      "And a fourth, to be sure that this request is long.";
  std::unique_ptr<server::SpeechJob> job = service.admit(request(text, 4));
  job->start([] {});
  ASSERT_TRUE(wait_until_steps_stop(service, "decode"))
      << "the decode steps never began, or went on for a client that does not read";
  const SchedulerLoad load = service.load();
  ASSERT_EQ(load.streams.size(), 1u) << "the stream ended: the text is too short for this test";
  const SchedulerLoad::StreamLoad& stream = load.streams.front();
  // One chunk may pass the bound: it is handed over whole.
  EXPECT_LE(stream.buffered_samples,
            stream.max_buffered_samples + chattts::kStreamChunkFrames * 2 * 256);
  // What the GPT stops at: two chunks' rows held (the one cut for the vocoder besides), 2 mel
  // frames a row. A sentence is up to 400 rows: without the stop it would hold far more.
  const chattts::VoiceConfig config = chattts::VoiceConfig::load(voice.path());
  const int64_t chunk_rows =
      chattts::CodeChunker(config.decoder, config.vocos, chattts::kStreamChunkFrames,
                           chattts::kFirstStreamChunkFrames)
          .max_retained_frames();
  EXPECT_GT(stream.work.mel_frames, 0);
  EXPECT_LE(stream.work.mel_frames, 2 * (3 * chunk_rows + 1));
  EXPECT_GT(served.kv_pages("used"), 0.0);
  job.reset();
  wait_idle(service);
  EXPECT_EQ(served.kv_pages("used"), 0.0);
}

// A stream waiting for its client to read holds its pages only while no one else needs them: a
// new request's prefill takes them back (the waiting stream is preempted, and recomputes its
// stage once its client reads on), instead of waiting for the slow stream's deadline. Both
// streams' audio is what each makes alone.
TEST(ChatTtsEngine, AStreamWaitingForItsClientGivesItsPagesToANewRequest) {
  const ShortStagesVoice voice(96);
  const std::string slow_text =
      "One sentence here. Good morning to you. See you at noon. Hello there. Short one.";
  const std::string quick_text = "Short.";
  std::vector<float> slow_alone;
  std::vector<float> quick_alone;
  {
    EngineService service(config_of(voice, 256));
    slow_alone = speak(service, request(slow_text, 3));
    quick_alone = speak(service, request(quick_text, 4));
  }
  // One stage's capacity (prompt + 96 tokens, 8 pages); a deadline the quick request would wait
  // for if the slow stream kept its pages.
  EngineConfig config = config_of(voice, 8);
  config.request_timeout = std::chrono::seconds(120);
  Served served(config);
  EngineService& service = served.service;
  std::unique_ptr<server::SpeechJob> slow = service.admit(request(slow_text, 3));
  SlowClient slow_client(*slow);
  ASSERT_TRUE(wait_until_steps_stop(service, "decode"));
  ASSERT_EQ(service.load().streams.size(), 1u) << "the slow stream ended: make its text longer";
  ASSERT_GT(served.kv_pages("used"), 0.0);
  const auto asked = std::chrono::steady_clock::now();
  expect_same_audio(quick_alone, speak(service, request(quick_text, 4)), quick_text);
  // Long before the slow stream's deadline, which it would have waited for.
  EXPECT_LT(std::chrono::steady_clock::now() - asked, std::chrono::seconds(60));
  EXPECT_GT(service.step_counts("prefill").preempted + service.step_counts("decode").preempted, 0u);
  const std::vector<float> slow_audio = slow_client.read_on();
  expect_same_audio(slow_alone, slow_audio, slow_text);
  slow.reset();
  wait_idle(service);
  EXPECT_EQ(served.kv_pages("used"), 0.0);
}

TEST(ChatTtsEngine, ALaterSentenceTooLongForTheGptIsRefusedAtAdmission) {
  const ShortStagesVoice voice(12, 6, 96);
  Served served(config_of(voice, 64));
  // A GPT of 96 positions: the first sentence fits, the second (211 tokens) does not (built by
  // appending: GCC 12 warns wrongly on a literal + string here).
  std::string text = "Hello there.";
  for (int i = 0; i < 70; ++i) text.append(" one");
  text.append(".");
  try {
    (void)served.service.admit(request(text, 1));
    ADD_FAILURE() << "a sentence past the GPT's positions was admitted";
  } catch (const server::ApiError& e) {
    EXPECT_EQ(e.status, 413);
    EXPECT_EQ(e.code, "input_too_long");
    EXPECT_NE(e.message.find("sentence 2"), std::string::npos) << e.message;
    EXPECT_NE(e.message.find("96 positions"), std::string::npos) << e.message;
  }
  EXPECT_FALSE(speak(served.service, request("Hello there.", 1)).empty());
}

// A later sentence whose stages can need more of the KV cache than the pool has is refused before
// the request's first audio (413, naming it), not after the sentences before it have played; a
// pool too small for any sentence of the voice is the server's (503).
TEST(ChatTtsEngine, ASentenceTooLongForTheKvCacheIsRefusedBeforeAnyAudio) {
  const ShortStagesVoice voice(96);
  // 12 pages of 16 positions: a code stage of a short sentence's prompt and 96 tokens fits, one
  // with a prompt of 70 tokens more does not (built by appending: GCC 12 warns wrongly on a
  // literal + string here).
  Served served(config_of(voice, 12));
  std::string text = "Hello there.";
  for (int i = 0; i < 70; ++i) text.append(" one");
  text.append(".");
  server::SpeechRequest r = request(text, 2);
  r.refine_text = false;
  std::unique_ptr<server::SpeechJob> job = served.service.admit(r);
  CollectingSink sink;
  try {
    run_job(*job, sink);
    ADD_FAILURE() << "a sentence longer than the KV cache was spoken";
  } catch (const server::ApiError& e) {
    EXPECT_EQ(e.status, 413);
    EXPECT_EQ(e.code, "sentence_too_long");
    EXPECT_NE(e.message.find("sentence 2"), std::string::npos) << e.message;
    EXPECT_NE(e.message.find("12 pages of 16 positions"), std::string::npos) << e.message;
  }
  EXPECT_TRUE(sink.audio.empty()) << "the refusal came after the first sentence's audio";
  server::SpeechRequest fits = request("Hello there.", 2);
  fits.refine_text = false;
  EXPECT_FALSE(speak(served.service, fits).empty());

  // With the refine stage, a sentence's code stage can be prompted with up to 23 refined tokens:
  // 7 pages hold the code stage of "Hi." on its own text (the prompt and 96 tokens), not on the
  // longest refined text, so with refining no sentence fits.
  Served small(config_of(voice, 7));
  server::SpeechRequest unrefined = request("Hi.", 2);
  unrefined.refine_text = false;
  EXPECT_FALSE(speak(small.service, unrefined).empty());
  const server::ApiError refused = run_error(*small.service.admit(request("Hi.", 2)),
                                             "a request was spoken by a pool too small for any");
  EXPECT_EQ(refused.status, 503);
  EXPECT_EQ(refused.code, "kv_cache_full");
  EXPECT_NE(refused.message.find("--kv-cache"), std::string::npos) << refused.message;
}

// A temperature the API takes but float arithmetic cannot (a denormal, still > 0) samples as the
// least temperature instead of making every logit infinite and failing the request.
TEST(ChatTtsEngine, ATemperatureNearZeroSamplesAsTheLeastOne) {
  const ShortStagesVoice voice(12, 6);
  Served served(config_of(voice, 64));
  server::SpeechRequest tiny = request("Hello there.", 3);
  tiny.temperature = 1e-39;
  server::SpeechRequest least = request("Hello there.", 3);
  least.temperature = static_cast<double>(chattts::kLeastTemperature);
  server::SpeechRequest zero_as_float = request("Hello there.", 3);
  zero_as_float.temperature = 1e-50;  // 0 once a float
  const std::vector<float> audio = speak(served.service, tiny);
  EXPECT_FALSE(audio.empty());
  EXPECT_EQ(audio, speak(served.service, least));
  EXPECT_EQ(audio, speak(served.service, zero_as_float));
}

TEST(ChatTtsEngine, ManyShortRandomRequestsLeaveThePoolAndTheAllocatorWhereTheyStarted) {
  const ShortStagesVoice voice(12, 6);
  Served served(config_of(voice, 24));
  EngineService& service = served.service;
  wait_idle(service);
  const uint64_t weights = service.runtime().allocator().stats().allocated_bytes;
  std::mt19937 random(7);
  const std::vector<std::string> words = {"one", "two", "hello", "there", "rain", "noon", "ok"};
  constexpr int kRequests = 1000;
  constexpr int kAtOnce = 8;
  for (int done = 0; done < kRequests; done += kAtOnce) {
    std::vector<std::unique_ptr<server::SpeechJob>> jobs;
    for (int i = 0; i < kAtOnce; ++i) {
      std::string text;
      for (int w = 0, n = 1 + static_cast<int>(random() % 4); w < n; ++w) {
        text += (w > 0 ? " " : "") + words[random() % words.size()];
      }
      jobs.push_back(service.admit(request(text + ".", random())));
    }
    for (const std::vector<float>& audio : run_all(jobs)) ASSERT_FALSE(audio.empty());
  }
  wait_idle(service);
  const AllocatorStats end = service.runtime().allocator().stats();
  EXPECT_EQ(end.allocated_bytes, weights);
  // Reserved follows the largest working set (which batches meet depends on timing), not the
  // number of requests: within a segment of the peak allocated, for each of the two pools.
  constexpr uint64_t kSegment = CachingAllocator::kSmallSegment;
  EXPECT_LE(end.reserved_bytes,
            (end.peak_allocated_bytes + kSegment - 1) / kSegment * kSegment + kSegment)
      << "peak allocated " << end.peak_allocated_bytes;
  EXPECT_EQ(served.kv_pages("used"), 0.0);
}

}  // namespace
}  // namespace voxd::scheduler
