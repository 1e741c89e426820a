// EngineService on the CPU backend with the bundled en-demo voice: audio through the scheduler
// equals Synthesizer's and each request's alone, however requests are batched or the memory
// budget cuts batches; overload, cancel, timeout and drain leave the service serving and its
// workspace memory at zero; lazy voices unload the least recently used one when memory is short;
// a 100,000-character request holds bounded audio and mel while its client reads slowly.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "backends/registry.h"
#include "core/caching_allocator.h"
#include "core/error.h"
#include "core/memory_source.h"
#include "families/fastspeech2/synthesizer.h"
#include "families/fastspeech2/voice.h"
#include "families/registry.h"
#include "run_job.h"
#include "scheduler/engine_service.h"
#include "scheduler/scheduler.h"
#include "server/api_error.h"
#include "server/metrics.h"

namespace voxd::scheduler {
namespace {

namespace fs = std::filesystem;
using server::ApiError;

const std::string kDemoVoice = std::string(VOXD_SOURCE_DIR) + "/voices/en-demo";
// One CPU thread: OpenMP threads spinning at barriers slow down badly on a busy machine, and these
// tests compare audio, not speed.
constexpr int kThreads = 1;
constexpr int64_t kChunkFrames = 64;
constexpr uint64_t kMiB = uint64_t{1} << 20;

// Short texts of different lengths (two of them twice), each at least one 32-frame chunk with
// its context, so their first chunks share a shape.
const std::vector<std::string> kTexts = {
    "Hello there.",           "Thank you for waiting.", "Good morning to you.",
    "See you at noon.",       "The rain has stopped.",  "Coffee first, then news.",
    "Seven ducks swam by.",   "Please call me back.",   "Hello there.",
    "Stop, look and listen.", "We meet by the bridge.", "Numbers like 42 too.",
    "Thank you for waiting.", "She sells sea shells.",  "It is late already.",
    "A short one.",
};
// One sentence of about 300 mel frames: three interior 64-frame chunks.
const std::string kMediumSentence =
    "The quick brown fox jumps over the lazy dog near the river bank.";

EngineConfig demo_config(int64_t chunk_frames = kChunkFrames) {
  EngineConfig config;
  config.families = &families::registry();
  config.voice_dirs = {kDemoVoice};
  config.runtime.backend = "cpu";
  config.runtime.threads = kThreads;
  config.chunk_frames = chunk_frames;
  return config;
}

server::SpeechRequest request(const std::string& text, const std::string& voice = "en-demo") {
  server::SpeechRequest r;
  r.model = "voxd";
  r.input = text;
  r.voice = voice;
  return r;
}

// What Synthesizer makes for `text` with the same voice and chunking.
std::vector<float> synthesize(const std::string& text, float speed = 1.0f) {
  std::unique_ptr<Backend> backend = make_backend("cpu", kThreads);
  Context ctx(*backend, host_allocator());
  std::unique_ptr<Voice> voice = Voice::load(ctx, kDemoVoice);
  Synthesizer synthesizer(ctx, *voice);
  SynthesisOptions options;
  options.chunk_frames = kChunkFrames;
  options.speed = speed;
  std::vector<float> audio;
  synthesizer.synthesize_text(text, options, [&](const float* samples, size_t count) {
    audio.insert(audio.end(), samples, samples + count);
  });
  return audio;
}

void expect_valid_audio(const std::vector<float>& audio) {
  ASSERT_FALSE(audio.empty());
  for (float s : audio) ASSERT_TRUE(std::isfinite(s));
}

void expect_workspace_free(EngineService& service) {
  wait_idle(service);
  const EngineService::IdleMemory idle = service.idle_memory();
  EXPECT_EQ(idle.unexplained_bytes, 0u) << idle.summary;
  EXPECT_EQ(service.runtime().allocator().stats().allocated_bytes,
            service.runtime().weights_bytes());
}

ApiError admit_error(EngineService& service, const server::SpeechRequest& r) {
  try {
    (void)service.admit(r);
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "admit() did not refuse";
  return {};
}

// The bytes the allocator holds once en-demo is loaded, and a limit `extra` above it.
uint64_t reserved_with_weights() {
  EngineService service(demo_config());
  return service.runtime().allocator().stats().reserved_bytes;
}

// Before it serves, the scheduler runs each kind's steps once (kernels loaded, CUDA graphs
// recorded), so the first client does not pay for that; the warm-up keeps no memory.
TEST(EngineService, WarmsUpBeforeTheFirstRequestAndKeepsNothing) {
  EngineService service(demo_config());
  const AllocatorStats stats = service.runtime().allocator().stats();
  // Bytes allocated and given back since the start: the warm-up's arenas.
  EXPECT_GT(stats.total_allocated_bytes - stats.allocated_bytes, 4 * kMiB);
  EXPECT_EQ(stats.allocated_bytes, service.runtime().weights_bytes());
  EXPECT_TRUE(service.readiness().ready) << service.readiness().reason;
}

// Where the backend's first runs of a size cost more (CUDA; asked for here on the CPU), the
// device thread goes on warming up larger steps while no step waits: a request admitted
// meanwhile is served first and unchanged, and the warm-up ends keeping nothing. The CPU backend
// has nothing to gain, so by default it does not.
TEST(EngineService, WarmsUpFurtherWhileIdleAndServesWhatComesMeanwhile) {
  EXPECT_EQ(EngineService(demo_config()).load().warm_up_pending, 0u);
  const std::vector<float> expected = synthesize(kTexts[1]);
  EngineConfig config = demo_config();
  config.max_batch = 2;
  config.warm_up_while_idle = true;
  EngineService service(config);
  // The acoustic and vocoder steps of en-demo (the first alone takes far longer than this check).
  EXPECT_EQ(service.load().warm_up_pending, 2u);
  expect_same_audio(expected, speak(service, request(kTexts[1])), kTexts[1]);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (service.load().warm_up_pending > 0 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(service.load().warm_up_pending, 0u);
  expect_workspace_free(service);
  expect_same_audio(expected, speak(service, request(kTexts[1])), "after the warm-up");
}

TEST(EngineService, OneRequestEqualsSynthesizer) {
  // Two sentences, the second with interior chunks.
  const std::string text = "Hello there. " + kMediumSentence;
  const std::vector<float> expected = synthesize(text);
  const std::vector<float> faster = synthesize(kTexts[2], 1.5f);
  EngineService service(demo_config());
  expect_same_audio(expected, speak(service, request(text)), text);
  server::SpeechRequest fast = request(kTexts[2]);
  fast.speed = 1.5f;
  expect_same_audio(faster, speak(service, fast), "at speed 1.5");
  expect_workspace_free(service);
}

// SSML's <break> and <prosody rate> reach the served audio as they reach Synthesizer's: the
// pause as silence after its sentence, the rate on top of the request's speed.
TEST(EngineService, BreaksAndRatesFromTheTextShapeTheAudioAsInSynthesizer) {
  const std::string text = "<speak>Hello there.<break time=\"300ms\"/><prosody rate=\"slow\">" +
                           kMediumSentence + "</prosody> The end.</speak>";
  const std::vector<float> expected = synthesize(text);
  const std::vector<float> plain = synthesize("Hello there. " + kMediumSentence + " The end.");
  // 300 ms of silence and a slower middle sentence: longer than the plain text's audio.
  ASSERT_GT(expected.size(), plain.size() + 300 * 22050 / 1000);
  EngineService service(demo_config());
  expect_same_audio(expected, speak(service, request(text)), "with a break and a rate");
  expect_workspace_free(service);
}

// A stream's first audio is its first chunk, made smaller than the rest (first_chunk_frames), and
// the whole stream is still Synthesizer's audio.
TEST(EngineService, AStreamsFirstAudioIsTheSmallerFirstChunk) {
  EngineConfig config = demo_config();
  config.first_chunk_frames = 8;
  EngineService service(config);
  std::unique_ptr<Backend> backend = make_backend("cpu", kThreads);
  Context ctx(*backend, host_allocator());
  const int64_t hop = Voice::load(ctx, kDemoVoice)->vocoder().config().hop_length();

  std::unique_ptr<server::SpeechJob> job = service.admit(request(kMediumSentence));
  CollectingSink first_write(1);
  run_job(*job, first_write);
  EXPECT_EQ(static_cast<int64_t>(first_write.audio.size()), 8 * hop);
  job.reset();
  expect_same_audio(synthesize(kMediumSentence), speak(service, request(kMediumSentence)),
                    kMediumSentence);
  expect_workspace_free(service);
}

TEST(EngineService, ConcurrentRequestsEqualEachServedAlone) {
  EngineService service(demo_config(32));
  std::vector<std::vector<float>> alone;
  for (const std::string& text : kTexts) alone.push_back(speak(service, request(text)));

  std::vector<std::vector<float>> together(kTexts.size());
  std::vector<std::thread> threads;
  std::barrier start(static_cast<std::ptrdiff_t>(kTexts.size()));
  for (size_t i = 0; i < kTexts.size(); ++i) {
    threads.emplace_back([&, i] {
      start.arrive_and_wait();
      together[i] = speak(service, request(kTexts[i]));
    });
  }
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < kTexts.size(); ++i) expect_same_audio(alone[i], together[i], kTexts[i]);
  EXPECT_GT(service.step_counts("vocoder").largest_batch, 1);
  expect_workspace_free(service);
}

TEST(EngineService, SentencesOfOneLengthShareAnAcousticStep) {
  EngineService service(demo_config());
  const std::vector<float> alone = speak(service, request(kTexts[1]));
  // Admitted back to back: the device thread is busy with the first while the rest arrive.
  std::vector<std::unique_ptr<server::SpeechJob>> jobs;
  for (int i = 0; i < 4; ++i) jobs.push_back(service.admit(request(kTexts[1])));
  const std::vector<std::vector<float>> audio = run_all(jobs);
  for (const auto& a : audio) expect_same_audio(alone, a, kTexts[1]);
  EXPECT_GT(service.step_counts("acoustic").largest_batch, 1);
}

// Sentences of different but similar lengths share an acoustic step, padded to the longest with
// the padding masked: each stream's audio is still the one it gets alone.
TEST(EngineService, SentencesOfSimilarLengthsShareAStepAndKeepTheirAudio) {
  EngineService service(demo_config());
  const std::vector<std::string> texts = {"Thank you for waiting.", "Good morning to you.",
                                          "The rain has stopped.", "Please call me back."};
  std::vector<std::vector<float>> alone;
  for (const std::string& text : texts) alone.push_back(speak(service, request(text)));
  const int64_t largest_before = service.step_counts("acoustic").largest_batch;
  std::vector<std::unique_ptr<server::SpeechJob>> jobs;
  for (const std::string& text : texts) jobs.push_back(service.admit(request(text)));
  const std::vector<std::vector<float>> audio = run_all(jobs);
  for (size_t i = 0; i < texts.size(); ++i) expect_same_audio(alone[i], audio[i], texts[i]);
  EXPECT_EQ(largest_before, 1);
  EXPECT_GT(service.step_counts("acoustic").largest_batch, 1);
}

TEST(EngineService, FullQueueAnswers503WithRetryAfterAndServesTheAccepted) {
  EngineConfig config = demo_config();
  config.max_queue = 2;
  EngineService service(config);
  constexpr size_t kClients = 6;
  std::vector<std::unique_ptr<server::SpeechJob>> jobs(kClients);
  std::vector<std::optional<ApiError>> refused(kClients);
  std::vector<std::vector<float>> audio(kClients);
  std::barrier admitted(static_cast<std::ptrdiff_t>(kClients));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      try {
        jobs[i] = service.admit(request(kTexts[i]));
      } catch (const ApiError& e) {
        refused[i] = e;
      }
      admitted.arrive_and_wait();  // every client asks while the accepted ones are queued
      if (jobs[i]) {
        CollectingSink sink;
        run_job(*jobs[i], sink);
        jobs[i].reset();
        audio[i] = sink.audio;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  size_t accepted = 0;
  for (size_t i = 0; i < kClients; ++i) {
    if (refused[i]) {
      EXPECT_EQ(refused[i]->status, 503);
      ASSERT_TRUE(refused[i]->retry_after_s.has_value());
      EXPECT_GT(*refused[i]->retry_after_s, 0);
    } else {
      ++accepted;
      expect_valid_audio(audio[i]);
    }
  }
  EXPECT_EQ(accepted, config.max_queue);
  expect_valid_audio(speak(service, request("After the rush.")));
}

TEST(EngineService, NothingToPronounceIs400BeforeAnyAudio) {
  EngineService service(demo_config());
  const ApiError error = admit_error(service, request("... !!! ..."));
  EXPECT_EQ(error.status, 400);
  EXPECT_EQ(error.param, "input");
}

TEST(EngineService, CancelMidStreamFreesTheWorkspaceAndKeepsServing) {
  EngineService service(demo_config());
  std::string text;
  for (int i = 0; i < 6; ++i) text += kMediumSentence + " ";
  std::unique_ptr<server::SpeechJob> job = service.admit(request(text));
  CollectingSink sink(2);
  run_job(*job, sink);
  EXPECT_EQ(sink.writes, 2u);
  const int64_t steps = static_cast<int64_t>(service.step_counts("vocoder").steps);
  job.reset();
  expect_workspace_free(service);
  EXPECT_TRUE(service.load().streams.empty());
  // The cancelled stream made at most its buffer's worth more after the client left.
  EXPECT_LE(static_cast<int64_t>(service.step_counts("vocoder").steps), steps + 4);
  expect_valid_audio(speak(service, request("Still here.")));
}

TEST(EngineService, RequestPastItsTimeoutFailsWith504) {
  EngineConfig config = demo_config();
  config.request_timeout = std::chrono::milliseconds(1);
  EngineService service(config);
  std::string text;
  for (int i = 0; i < 4; ++i) text += kMediumSentence + " ";
  std::unique_ptr<server::SpeechJob> job = service.admit(request(text));
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(run_error(*job, "run() finished a request past its timeout").status, 504);
  job.reset();
  expect_workspace_free(service);
}

TEST(EngineService, DrainFinishesInFlightWorkAndRefusesNewRequests) {
  EngineService service(demo_config());
  std::vector<std::unique_ptr<server::SpeechJob>> jobs;
  jobs.push_back(service.admit(request(kTexts[1])));
  jobs.push_back(service.admit(request(kTexts[2])));
  std::vector<std::vector<float>> audio(jobs.size());
  std::vector<std::thread> threads = start_all(jobs, audio);
  EXPECT_EQ(service.drain(std::chrono::minutes(2)), 0u);
  for (std::thread& t : threads) t.join();
  for (const auto& a : audio) expect_valid_audio(a);
  const ApiError error = admit_error(service, request("Too late."));
  EXPECT_EQ(error.status, 503);
  EXPECT_EQ(error.code, "shutting_down");
  EXPECT_EQ(error.retry_after_s, 1);
  EXPECT_FALSE(service.readiness().ready);
}

TEST(EngineService, DrainCancelsWhatOutlastsTheGrace) {
  EngineService service(demo_config());
  std::unique_ptr<server::SpeechJob> job = service.admit(request(kMediumSentence));
  EXPECT_EQ(service.drain(std::chrono::milliseconds(0)), 1u);
  const ApiError error = run_error(*job, "run() went on after drain cancelled it");
  EXPECT_EQ(error.status, 503);
  EXPECT_EQ(error.retry_after_s, 1);
  job.reset();
  expect_workspace_free(service);
}

TEST(EngineService, BudgetTooSmallForABatchShrinksItAndKeepsTheAudio) {
  std::vector<std::vector<float>> alone;
  // kMediumSentence has three interior chunks, and four streams of it, admitted one after
  // another before any is read, share acoustic steps (one batches the streams admitted while the
  // one before it ran): two or more have interior chunks (one shape) at once, more than the
  // budget's one. (One stream's later chunks join its step only while the step is expected to end
  // before its audio runs out, which depends on how fast this machine runs them.)
  const std::vector<std::string> texts = {kMediumSentence, kMediumSentence, kMediumSentence,
                                          kMediumSentence, kTexts[0]};
  {
    EngineService roomy(demo_config());
    for (const std::string& text : texts) alone.push_back(speak(roomy, request(text)));
  }
  // Room for one interior vocoder chunk at once (3 MiB on en-demo), not two (6 MiB).
  EngineConfig config = demo_config();
  config.runtime.memory_limit = MemoryAmount::bytes(reserved_with_weights() + 4 * kMiB);
  EngineService service(config);
  std::vector<std::unique_ptr<server::SpeechJob>> jobs;
  for (const std::string& text : texts) jobs.push_back(service.admit(request(text)));
  const std::vector<std::vector<float>> together = run_all(jobs);
  for (size_t i = 0; i < texts.size(); ++i) expect_same_audio(alone[i], together[i], texts[i]);
  EXPECT_GT(service.step_counts("vocoder").shrunk, 0u);
  EXPECT_LE(service.runtime().allocator().stats().peak_reserved_bytes,
            service.runtime().limit_bytes());
  expect_workspace_free(service);
}

// One sentence whose acoustic decoder needs more than 7 MiB of workspace on en-demo.
const std::string kHugeSentence =
    "In the beginning of the long and winding afternoon the travellers walked slowly along the "
    "dusty road that led from the old mill by the river towards the distant hills, talking "
    "about the harvest, the weather, the price of bread in the market town and the stories "
    "their grandparents had told them about the great storm that had flooded the valley";

TEST(EngineService, SentenceTooBigForTheBudgetFailsAloneWithAClearError) {
  const std::string& huge = kHugeSentence;
  EngineConfig config = demo_config();
  config.runtime.memory_limit = MemoryAmount::bytes(reserved_with_weights() + 7 * kMiB);
  EngineService service(config);
  std::vector<float> small_audio;
  std::thread small([&] { small_audio = speak(service, request(kTexts[2])); });
  std::unique_ptr<server::SpeechJob> job = service.admit(request(huge));
  const ApiError e = run_error(*job, "a sentence beyond the memory budget was synthesized");
  EXPECT_EQ(e.status, 413);
  EXPECT_EQ(e.code, "sentence_too_long");
  EXPECT_NE(e.message.find("split it into shorter sentences"), std::string::npos) << e.message;
  job.reset();
  small.join();
  expect_valid_audio(small_audio);
  expect_valid_audio(speak(service, request("Short sentences still work.")));
  expect_workspace_free(service);
}

// On a device shared with another process (a small simulated one the test takes memory from, as
// that process would), the same sentence is refused 503 insufficient_memory with Retry-After
// while the other process holds most of the device, not 413: the acoustic decoder, which learns
// its size inside its step, blames the request only when the memory would not be there anyway.
// Once the memory is back the sentence is synthesized.
TEST(EngineService, ASentenceShortOfMemoryAnotherProcessTookIsToldToRetry) {
  const auto device = std::make_shared<HostMemorySource>(reserved_with_weights() + 256 * kMiB);
  EngineConfig config = demo_config();
  config.runtime.source = device;
  EngineService service(config);
  service.runtime().release_cached();
  const size_t taken_bytes = service.runtime().breakdown().free - 7 * kMiB;
  void* taken = device->reserve(taken_bytes);
  ASSERT_NE(taken, nullptr);
  server::MetricsRegistry registry;
  service.bind_metrics(registry);
  const auto outside_growth = [&] {
    service.collect_metrics(registry);
    return registry.gauge("voxd_engine_memory_outside_growth_bytes", "").value();
  };
  EXPECT_EQ(outside_growth(), static_cast<double>(taken_bytes));
  std::unique_ptr<server::SpeechJob> job = service.admit(request(kHugeSentence));
  const ApiError e = run_error(*job, "a sentence beyond the device's free memory was synthesized");
  EXPECT_EQ(e.status, 503);
  EXPECT_EQ(e.code, "insufficient_memory");
  EXPECT_EQ(e.retry_after_s, 1);
  EXPECT_NE(e.message.find("another process"), std::string::npos) << e.message;
  job.reset();
  device->release(taken, taken_bytes);
  EXPECT_EQ(outside_growth(), 0.0);
  expect_valid_audio(speak(service, request(kHugeSentence)));
  expect_workspace_free(service);
}

// A copy of en-demo named `name` in `root`.
std::string copy_voice(const fs::path& root, const std::string& name) {
  const fs::path dir = root / name;
  fs::create_directories(dir);
  for (const auto& file : fs::directory_iterator(kDemoVoice)) {
    fs::copy_file(file.path(), dir / file.path().filename(), fs::copy_options::overwrite_existing);
  }
  nlohmann::json config;
  std::ifstream(dir / "config.json") >> config;
  config["name"] = name;
  std::ofstream(dir / "config.json") << config.dump(2);
  return dir.string();
}

TEST(EngineService, LazyVoicesLoadOnFirstUseAndUnloadTheLeastRecentlyUsed) {
  const fs::path root = fs::temp_directory_path() / ("voxd-lazy-" + std::to_string(::getpid()));
  EngineConfig config = demo_config();
  config.voice_dirs = {copy_voice(root, "demo-a"), copy_voice(root, "demo-b")};
  config.lazy_voices = true;
  // One voice's weights and its steps fit; two voices' weights do not.
  config.runtime.memory_limit = MemoryAmount::bytes(reserved_with_weights() + 12 * kMiB);
  {
    EngineService service(config);
    EXPECT_TRUE(service.loaded_voices().empty());
    EXPECT_TRUE(service.readiness().ready) << service.readiness().reason;
    EXPECT_EQ(service.voices().size(), 2u);

    const std::vector<float> a = speak(service, request(kTexts[1], "demo-a"));
    EXPECT_EQ(service.loaded_voices(), std::vector<std::string>{"demo-a"});
    const std::vector<float> b = speak(service, request(kTexts[1], "demo-b"));
    EXPECT_EQ(service.loaded_voices(), std::vector<std::string>{"demo-b"});
    expect_same_audio(a, b, "the same voice under two names");
    expect_same_audio(a, speak(service, request(kTexts[1], "demo-a")), "demo-a loaded again");
    EXPECT_EQ(service.loaded_voices(), std::vector<std::string>{"demo-a"});
    expect_workspace_free(service);
  }
  fs::remove_all(root);
}

TEST(EngineService, AStepThatThrowsFailsItsRequestsAndTheRestGoOn) {
  const fs::path root = fs::temp_directory_path() / ("voxd-broken-" + std::to_string(::getpid()));
  EngineConfig config = demo_config();
  const std::string broken = copy_voice(root, "broken");
  fs::resize_file(fs::path(broken) / "acoustic.safetensors", 100);
  config.voice_dirs = {copy_voice(root, "demo-a"), broken};
  config.lazy_voices = true;  // so the broken weights are read on the device thread, in a step
  {
    config.lazy_voices = false;
    EXPECT_THROW(EngineService{config}, InputError);  // at start, a broken voice stops it
    config.lazy_voices = true;
    EngineService service(config);
    std::unique_ptr<server::SpeechJob> job = service.admit(request(kTexts[1], "broken"));
    CollectingSink sink;
    EXPECT_THROW(run_job(*job, sink), Error);
    EXPECT_TRUE(sink.audio.empty());
    job.reset();
    expect_valid_audio(speak(service, request(kTexts[1], "demo-a")));
    EXPECT_EQ(service.loaded_voices(), std::vector<std::string>{"demo-a"});
    expect_workspace_free(service);
  }
  fs::remove_all(root);
}

// Reads slowly and checks, at every write, that the stream's held audio and mel stay within
// bounds that do not grow with the text.
class SlowReader final : public AudioReceiver {
 public:
  SlowReader(EngineService& service, size_t stop_after)
      : service_(service), stop_after_(stop_after) {}
  bool write(std::span<const float> samples) override {
    samples_ += samples.size();
    // The first few times, wait (bounded) until the scheduler stops filling this stream's
    // buffer: back-pressure holds it at the bound while the client does not read.
    if (writes < kFillWaits) {
      for (int i = 0; i < 3000 && !buffer_full(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      EXPECT_TRUE(buffer_full());
    }
    for (const SchedulerLoad::StreamLoad& s : service_.load().streams) {
      EXPECT_LE(s.buffered_samples, s.max_buffered_samples);
      EXPECT_LE(s.work.mel_frames, s.work.largest_unit_frames + 6 * s.work.lookahead_frames);
      most_buffered = std::max(most_buffered, s.buffered_samples);
      most_mel = std::max(most_mel, s.work.mel_frames);
      pending = s.work.pending_units;
    }
    return ++writes < stop_after_;
  }

  size_t writes = 0;
  int64_t most_buffered = 0;
  int64_t most_mel = 0;
  int64_t pending = 0;

 private:
  static constexpr size_t kFillWaits = 2;

  // Whether the stream's buffer has no room for another full chunk.
  bool buffer_full() const {
    for (const SchedulerLoad::StreamLoad& s : service_.load().streams) {
      const int64_t chunk = s.max_buffered_samples / 4;
      if (s.buffered_samples + chunk > s.max_buffered_samples) return true;
    }
    return false;
  }

  EngineService& service_;
  size_t stop_after_;
  size_t samples_ = 0;
};

TEST(EngineService, HundredThousandCharactersHoldBoundedAudioAndMel) {
  std::string text;
  while (text.size() < 100000) text += kMediumSentence + " Then they rested. ";
  EngineService service(demo_config(16));
  std::unique_ptr<server::SpeechJob> job = service.admit(request(text));
  SlowReader reader(service, 8);
  run_job(*job, reader);
  EXPECT_EQ(reader.writes, 8u);
  EXPECT_GT(reader.most_buffered, 0);
  EXPECT_GT(reader.most_mel, 0);
  EXPECT_GT(reader.pending, 500);  // most of the text is still text
  job.reset();
  expect_workspace_free(service);
}

TEST(EngineService, MetricsFollowTheWorkAndTheMemory) {
  EngineService service(demo_config());
  EXPECT_TRUE(service.readiness().ready) << service.readiness().reason;
  server::MetricsRegistry registry;
  service.bind_metrics(registry);
  expect_valid_audio(speak(service, request(kTexts[1])));
  wait_idle(service);
  service.collect_metrics(registry);
  for (const char* kind : {"acoustic", "vocoder"}) {
    const server::Histogram::Snapshot batches =
        registry
            .histogram("voxd_engine_batch_size", "", {1, 2, 4, 8, 16, 32, 64, 128, 256},
                       {{"kind", kind}})
            .snapshot();
    EXPECT_EQ(batches.count, service.step_counts(kind).steps) << kind;
    EXPECT_GT(batches.count, 0u) << kind;
  }
  EXPECT_EQ(registry.gauge("voxd_engine_memory_bytes", "", {{"kind", "weights"}}).value(),
            static_cast<double>(service.runtime().weights_bytes()));
  EXPECT_EQ(registry.gauge("voxd_engine_memory_bytes", "", {{"kind", "workspace"}}).value(), 0.0);
  EXPECT_EQ(registry.gauge("voxd_engine_queue_depth", "").value(), 0.0);
  EXPECT_EQ(registry.gauge("voxd_engine_voices_loaded", "").value(), 1.0);
  const std::string text = registry.render();
  EXPECT_NE(text.find("voxd_engine_step_seconds_count{kind=\"vocoder\"}"), std::string::npos);
  EXPECT_NE(text.find("voxd_engine_real_time_factor_count 1"), std::string::npos) << text;
}

TEST(EngineService, BadConfigurationsAreRefusedWithActionableMessages) {
  EngineConfig config = demo_config();
  config.voice_dirs = {};
  EXPECT_THROW(EngineService{config}, InputError);
  config.voice_dirs = {kDemoVoice, kDemoVoice};
  try {
    EngineService service(config);
    ADD_FAILURE() << "two voices of one name were accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("name"), std::string::npos) << e.what();
  }
  for (const double band : {0.5, std::nan(""), HUGE_VAL}) {
    EngineConfig bad = demo_config();
    bad.acoustic_length_band = band;
    try {
      EngineService service(bad);
      ADD_FAILURE() << "an acoustic length band of " << band << " was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("acoustic length band"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace voxd::scheduler
