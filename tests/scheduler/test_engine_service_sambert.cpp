// EngineService on the CPU backend with the tiny Sambert-HiFiGAN fixture voice: utterances go
// through the encoder, prefill and decoder steps over a paged KV cache and the postnet and the
// vocoder in chunks, and a request's audio equals what `voxd synth` makes an utterance at a time
// in one piece (with a causal vocoder, and one that looks ahead); streams batched together each
// get the audio they get alone; a personal voice (speaker embedding, HiFiGAN-NSF) serves each
// request the offline audio of its seed; the request's options are checked by name; an utterance
// larger than the pool is refused; a client that does not read holds the decoder back; a client
// that leaves gives its pages back, and many short requests leave the pool and the allocator where
// they started.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backends/registry.h"
#include "core/caching_allocator.h"
#include "core/safetensors.h"
#include "core/tensor.h"
#include "families/registry.h"
#include "families/sambert/served.h"
#include "families/sambert/voice.h"
#include "run_job.h"
#include "scheduler/engine_service.h"
#include "scheduler/scheduler.h"
#include "server/api_error.h"
#include "server/metrics.h"
#include "support/edited_voice.h"

namespace voxd::scheduler {
namespace {

namespace fs = std::filesystem;

const fs::path kFixtureVoice = fs::path(VOXD_SOURCE_DIR) / "tests/fixtures/voices/tiny-sambert";
// tiny-sambert's sizes as a personal voice: a speaker embedding, f0 and voicing after the mel, a
// HiFiGAN-NSF vocoder.
const fs::path kNsfVoice = fs::path(VOXD_SOURCE_DIR) / "tests/fixtures/voices/tiny-sambert-nsf";
// tiny-sambert: 2 decoder layers × keys and values × 16 steps × 16 units × 4 bytes.
constexpr uint64_t kPageBytes = 2 * 2 * 16 * 16 * 4;

// A copy of a fixture voice with its vocoder `causal` or not (the same weights: causality only
// moves the padding).
class VoiceCopy {
 public:
  VoiceCopy(const fs::path& voice, bool causal) : copy_(voice, causal ? "causal" : "lookahead") {
    copy_.edit([&](nlohmann::json& config) { config["vocoder"]["model"]["causal"] = causal; });
  }
  std::string path() const { return copy_.path(); }

 private:
  test_support::EditedVoice copy_;
};

EngineConfig config_of(const std::string& voice, uint64_t kv_cache_pages) {
  EngineConfig config;
  config.families = &families::registry();
  config.voice_dirs = {voice};
  config.runtime.backend = "cpu";
  config.runtime.threads = 1;
  config.kv_cache_bytes = kv_cache_pages * kPageBytes;
  // Small chunks, so that an utterance of the tiny voice (about 4 frames a token) takes several.
  config.chunk_frames = 12;
  config.first_chunk_frames = 5;
  return config;
}

// A token of the fixture inventory (tests/fixtures/sambert_symbols/inventory).
std::string token(const std::string& phone, const std::string& tone, const std::string& speaker,
                  const std::string& emotion = "emotion_neutral") {
  std::string out = "{";
  for (const std::string* field : {&phone, &tone}) out.append(*field).append("$");
  out.append("s_begin$word_begin$").append(emotion).append("$").append(speaker).append("}");
  return out;
}

// An utterance of `tokens` tokens drawn from `seed`.
std::string utterance(int tokens, uint32_t seed, const std::string& speaker = "F7") {
  const std::vector<std::string> phones = {"a_c", "ao_c", "e_c", "en_c", "g_c", "h_c", "i_c",
                                           "n_c", "ga",   "ge",  "aa",   "hh",  "iy",  "l"};
  const std::vector<std::string> tones = {"tone1", "tone2", "tone3", "tone5"};
  std::mt19937 random(seed);
  std::string out;
  for (int t = 0; t < tokens; ++t) {
    if (t > 0) out.append(" ");
    out.append(token(phones[random() % phones.size()], tones[random() % tones.size()], speaker));
  }
  return out;
}

server::SpeechRequest request(const std::string& symbols,
                              const std::string& voice = "tiny-sambert") {
  server::SpeechRequest r;
  r.model = "voxd";
  r.input = symbols;
  r.voice = voice;
  r.input_format = server::InputFormat::kKanTtsSymbols;
  return r;
}

std::vector<float> offline(const std::string& voice, const std::string& symbols,
                           const std::optional<std::string>& emotion = std::nullopt,
                           const std::optional<std::string>& speaker = std::nullopt,
                           uint64_t seed = 0) {
  std::unique_ptr<Backend> backend = make_backend("cpu", 1);
  Context ctx(*backend, host_allocator());
  const auto models = sambert::Voice::load(ctx, sambert::VoiceConfig::load(voice));
  std::vector<float> audio;
  sambert::speak(ctx, *models, models->front_end().utterances(symbols, emotion, speaker), seed,
                 [&](const std::vector<float>& piece) {
                   audio.insert(audio.end(), piece.begin(), piece.end());
                 });
  return audio;
}

// Chinese text, read by the Mandarin front end: served, each sentence is an utterance and the
// audio is what voxd synth makes of the same text (tiny-sambert-zh has KAN-TTS's PinYin phones).
TEST(SambertEngine, ChineseTextIsServedAsTheOfflineAudioOfItsSentences) {
  const std::string voice =
      (fs::path(VOXD_SOURCE_DIR) / "tests/fixtures/voices/tiny-sambert-zh").string();
  const std::string text = "今天天气真好，我们去银行。明天3:30见！";
  std::vector<float> whole;
  {
    std::unique_ptr<Backend> backend = make_backend("cpu", 1);
    Context ctx(*backend, host_allocator());
    const auto models = sambert::Voice::load(ctx, sambert::VoiceConfig::load(voice));
    const std::vector<SambertTokens> utterances =
        models->front_end().text_utterances(text, std::nullopt, "M7");
    ASSERT_EQ(utterances.size(), 2u);
    sambert::speak(ctx, *models, utterances, 0, [&](const std::vector<float>& piece) {
      whole.insert(whole.end(), piece.begin(), piece.end());
    });
  }
  Served served(config_of(voice, 64));
  server::SpeechRequest r = request(text, "tiny-sambert-zh");
  r.input_format = server::InputFormat::kText;
  r.speaker = "M7";
  expect_same_audio(whole, speak(served.service, r), "text");
  wait_idle(served.service);
  EXPECT_EQ(served.kv_pages("used"), 0.0);
}

class SambertServedAudio : public ::testing::TestWithParam<bool> {};

// Two utterances, the first of them spoken by another speaker with another emotion: the served
// audio is the offline audio, made in several vocoder chunks.
TEST_P(SambertServedAudio, EqualsTheAudioOfEachUtteranceMadeInOnePiece) {
  const VoiceCopy voice(kFixtureVoice, GetParam());
  std::string symbols = utterance(14, 1);
  symbols.append("\n\n").append(utterance(9, 2, "M7"));
  const std::vector<float> whole = offline(voice.path(), symbols, "emotion_happy", "F74");
  Served served(config_of(voice.path(), 64));
  server::SpeechRequest r = request(symbols);
  r.emotion = "emotion_happy";
  r.speaker = "F74";
  const uint64_t chunks = served.service.step_counts("vocoder").steps;
  expect_same_audio(whole, speak(served.service, r), GetParam() ? "causal" : "lookahead");
  // 23 tokens of about 4 frames in chunks of at most 12 frames.
  EXPECT_GE(served.service.step_counts("vocoder").steps - chunks, 6u);
  wait_idle(served.service);
  EXPECT_EQ(served.kv_pages("used"), 0.0);
}

INSTANTIATE_TEST_SUITE_P(Vocoders, SambertServedAudio, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "causal" : "lookahead"; });

class SambertServedNsf : public ::testing::TestWithParam<bool> {};

// A personal voice's requests of two seeds, served together: each is the offline audio of its
// seed (the source's phases and noise carried across chunks and counted per utterance), and the
// two seeds' audio differ.
TEST_P(SambertServedNsf, EachRequestIsTheOfflineAudioOfItsSeed) {
  const VoiceCopy voice(kNsfVoice, GetParam());
  std::string symbols = utterance(12, 3);
  symbols.append("\n").append(utterance(7, 4, "M7"));
  Served served(config_of(voice.path(), 64));
  std::vector<std::unique_ptr<server::SpeechJob>> jobs;
  for (const uint64_t seed : {7u, 8u}) {
    server::SpeechRequest r = request(symbols, "tiny-sambert-nsf");
    r.seed = seed;
    jobs.push_back(served.service.admit(r));
  }
  const std::vector<std::vector<float>> audio = run_all(jobs);
  const std::string what = GetParam() ? "causal" : "lookahead";
  expect_same_audio(offline(voice.path(), symbols, std::nullopt, std::nullopt, 7), audio[0],
                    what + ", seed 7");
  expect_same_audio(offline(voice.path(), symbols, std::nullopt, std::nullopt, 8), audio[1],
                    what + ", seed 8");
  ASSERT_EQ(audio[0].size(), audio[1].size());
  float difference = 0.0f;
  for (size_t i = 0; i < audio[0].size(); ++i) {
    difference = std::max(difference, std::abs(audio[0][i] - audio[1][i]));
  }
  EXPECT_GT(difference, 1e-3f) << "the seed moved nothing";
  // Each stream's frames span several chunks of at most 12 frames (hop 200).
  EXPECT_GT(audio[0].size(), 3u * 12 * 200);
  EXPECT_GE(served.service.step_counts("vocoder").steps, 4u);
  wait_idle(served.service);
  EXPECT_EQ(served.kv_pages("used"), 0.0);
}

INSTANTIATE_TEST_SUITE_P(Vocoders, SambertServedNsf, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "causal" : "lookahead"; });

TEST(SambertEngine, StreamsBatchedTogetherEachGetTheAudioTheyGetAlone) {
  const std::string voice = kFixtureVoice.string();
  std::vector<std::string> inputs;
  for (uint32_t i = 0; i < 6; ++i) {
    std::string input = utterance(4 + 5 * static_cast<int>(i), 10 + i, i % 2 == 0 ? "F7" : "M7");
    if (i % 3 == 0) input.append("\n").append(utterance(6, 20 + i));
    inputs.push_back(input);
  }
  std::vector<std::vector<float>> alone;
  {
    EngineService service(config_of(voice, 64));
    for (const std::string& input : inputs) alone.push_back(speak(service, request(input)));
  }
  Served served(config_of(voice, 64));
  EngineService& service = served.service;
  std::vector<std::unique_ptr<server::SpeechJob>> jobs;
  for (const std::string& input : inputs) jobs.push_back(service.admit(request(input)));
  const std::vector<std::vector<float>> together = run_all(jobs);
  for (size_t i = 0; i < inputs.size(); ++i) {
    expect_same_audio(alone[i], together[i], "stream " + std::to_string(i));
  }
  EXPECT_GT(service.step_counts("decode").largest_batch, 1) << "no decode step took two streams";
  EXPECT_GT(service.step_counts("encode").largest_batch, 1) << "no encoder step took two";
  wait_idle(service);
  EXPECT_EQ(served.kv_pages("used"), 0.0);
}

// The 400s a request gets before any work: each names its field.
TEST(SambertEngine, OptionsTheVoiceCannotTakeAreRefusedByName) {
  EngineService service(config_of(kFixtureVoice.string(), 64));
  const auto field_of = [&](const server::SpeechRequest& r) -> std::string {
    try {
      (void)service.admit(r);
    } catch (const server::ApiError& e) {
      EXPECT_EQ(e.status, 400) << e.message;
      return e.param.value_or("");
    }
    return "";
  };
  // tiny-sambert's made-up phone set lacks the Mandarin front end's phones.
  server::SpeechRequest text = request("今天天气真好");
  text.input_format = server::InputFormat::kText;
  EXPECT_EQ(field_of(text), "input");
  server::SpeechRequest emotion = request(utterance(3, 1));
  emotion.emotion = "emotion_gloomy";
  EXPECT_EQ(field_of(emotion), "emotion");
  server::SpeechRequest speaker = request(utterance(3, 1));
  speaker.speaker = "F8";
  EXPECT_EQ(field_of(speaker), "speaker");
  server::SpeechRequest speed = request(utterance(3, 1));
  speed.speed = 1.5f;
  EXPECT_EQ(field_of(speed), "speed");
  server::SpeechRequest seed = request(utterance(3, 1));
  seed.seed = 3;
  EXPECT_EQ(field_of(seed), "seed");
  EXPECT_EQ(field_of(request("{zz$tone1$s_begin$word_begin$emotion_neutral$F7}")), "input");
  EXPECT_EQ(field_of(request("not symbols")), "input");
  // Well-formed, but more tokens than an utterance may have: 413, naming what to split.
  try {
    (void)service.admit(request(utterance(static_cast<int>(SambertLimits{}.max_tokens) + 1, 1)));
    ADD_FAILURE() << "an utterance past the token limit was admitted";
  } catch (const server::ApiError& e) {
    EXPECT_EQ(e.status, 413) << e.message;
    EXPECT_EQ(e.code, "input_too_long");
    EXPECT_NE(e.message.find("split it"), std::string::npos) << e.message;
  }
}

// An utterance whose keys and values need more pages than the pool has fails alone; the
// request beside it is served.
TEST(SambertEngine, AnUtteranceLargerThanThePoolIsRefusedAndOthersAreServed) {
  Served served(config_of(kFixtureVoice.string(), 4));
  EngineService& service = served.service;
  std::unique_ptr<server::SpeechJob> large = service.admit(request(utterance(60, 3)));
  std::unique_ptr<server::SpeechJob> small = service.admit(request(utterance(5, 4)));
  const server::ApiError e = run_error(*large, "an utterance of 60 tokens fit 4 pages of 16 steps");
  EXPECT_EQ(e.status, 413) << e.message;
  EXPECT_NE(e.message.find("pages of the KV cache"), std::string::npos) << e.message;
  CollectingSink served_sink;
  run_job(*small, served_sink);
  EXPECT_FALSE(served_sink.audio.empty());
  large.reset();
  small.reset();
  wait_idle(service);
  EXPECT_EQ(served.kv_pages("used"), 0.0);
}

// A copy of tiny-sambert whose duration predictor is biased by `bias` (its log durations move by
// that much): +1e4 makes every token infinitely long, -1e4 makes every token 0 frames.
class BiasedDurations {
 public:
  explicit BiasedDurations(float bias) : copy_(kFixtureVoice, bias > 0 ? "long" : "none") {
    const std::string path = copy_.path() + "/acoustic.safetensors";
    std::map<std::string, Tensor> tensors;
    {
      const auto file = SafetensorsFile::open(path);
      for (const std::string& name : file->names()) tensors[name] = file->get(name);
    }
    tensors["variance_adaptor.duration_predictor.fc.bias"] =
        Tensor::from_vector({1}, std::vector<float>{bias});
    write_safetensors(path, tensors);
  }
  std::string path() const { return copy_.path(); }

 private:
  test_support::EditedVoice copy_;
};

// What the model predicts is checked per utterance: one past the frame limit is refused with a
// 413 that says to split it (not a server error), and one whose every token gets 0 frames makes
// no audio and ends its request normally, as FastSpeech2's sentences without frames do; offline
// (voxd synth) too.
TEST(SambertEngine, PredictedLengthsPastTheLimitAre413AndNoFramesMakeNoAudio) {
  {
    const BiasedDurations long_voice(1e4f);
    Served served(config_of(long_voice.path(), 64));
    std::unique_ptr<server::SpeechJob> job = served.service.admit(request(utterance(5, 1)));
    const server::ApiError e = run_error(*job, "an utterance of infinite durations was served");
    EXPECT_EQ(e.status, 413) << e.message;
    EXPECT_EQ(e.code, "sentence_too_long") << e.message;
    EXPECT_NE(e.message.find("split the sentence"), std::string::npos) << e.message;
  }
  const BiasedDurations silent_voice(-1e4f);
  const std::string text = utterance(5, 1) + "\n" + utterance(7, 2);
  Served served(config_of(silent_voice.path(), 64));
  std::unique_ptr<server::SpeechJob> job = served.service.admit(request(text));
  CollectingSink sink;
  run_job(*job, sink);
  EXPECT_TRUE(sink.audio.empty());
  job.reset();
  wait_idle(served.service);
  EXPECT_EQ(served.kv_pages("used"), 0.0);

  std::unique_ptr<Backend> backend = make_backend("cpu", 1);
  Context ctx(*backend, host_allocator());
  const auto models = sambert::Voice::load(ctx, sambert::VoiceConfig::load(silent_voice.path()));
  size_t pieces = 0;
  const sambert::Spoken spoken = sambert::speak(ctx, *models, models->front_end().utterances(text),
                                                0, [&](const std::vector<float>&) { ++pieces; });
  EXPECT_EQ(pieces, 0u);
  EXPECT_EQ(spoken.utterances, 0);
  EXPECT_EQ(spoken.samples, 0);
}

// The pages one utterance of `text` holds while its client does not read.
double pages_held_by(const std::string& text) {
  Served probe(config_of(kFixtureVoice.string(), 256));
  std::unique_ptr<server::SpeechJob> held = probe.service.admit(request(text));
  held->start([] {});
  EXPECT_TRUE(wait_until_steps_stop(probe.service, "decode"));
  return probe.kv_pages("used");
}

// When a sink first took audio.
class TimedSink final : public AudioReceiver {
 public:
  bool write(std::span<const float> samples) override {
    if (audio.empty()) first = std::chrono::steady_clock::now();
    audio.insert(audio.end(), samples.begin(), samples.end());
    return true;
  }
  std::vector<float> audio;
  std::chrono::steady_clock::time_point first;
};

// Each voice has a pool of pages of its own: while one voice's most urgent utterance waits for
// pages (its pool held by a stream whose client does not read, until that stream's utterance is
// decoded to its end), another voice's utterances are prefilled and served: the other voice's
// first audio comes before the waiting one's. The held utterance is long (~20 s of audio, ~530
// decoder steps) so that, however late its decoding starts to outrank the others, the other
// voice's prefill comes before its last step.
TEST(SambertEngine, AVoiceWaitingForPagesDoesNotHoldAnotherVoiceBack) {
  const std::string held_text = utterance(400, 21);
  const double pages = pages_held_by(held_text);
  ASSERT_GT(pages, 0.0);
  test_support::EditedVoice other(kFixtureVoice, "other");
  other.edit([](nlohmann::json& config) { config["name"] = "tiny-sambert-b"; });
  // Room for the held utterance and one page more in each voice's pool: the waiting one, shorter
  // (and so, by its own audio, more urgent than the other voice's: a prefill's slack must not
  // count the audio it is for), needs at least two.
  EngineConfig config = config_of(kFixtureVoice.string(), static_cast<uint64_t>(pages) + 1);
  config.voice_dirs.push_back(other.path());
  config.request_timeout = std::chrono::seconds(60);  // a wait ends in a 504, not a hang
  Served served(config);
  std::unique_ptr<server::SpeechJob> held = served.service.admit(request(held_text));
  held->start([] {});
  ASSERT_TRUE(wait_until_steps_stop(served.service, "decode"));
  std::unique_ptr<server::SpeechJob> waiting = served.service.admit(request(utterance(12, 23)));
  TimedSink waiting_sink;
  auto waiting_client = std::async(std::launch::async, [&] { run_job(*waiting, waiting_sink); });
  std::unique_ptr<server::SpeechJob> other_voice =
      served.service.admit(request(utterance(30, 24), "tiny-sambert-b"));
  TimedSink other_sink;
  run_job(*other_voice, other_sink);
  waiting_client.get();
  ASSERT_FALSE(other_sink.audio.empty());
  ASSERT_FALSE(waiting_sink.audio.empty());
  EXPECT_LT(other_sink.first, waiting_sink.first);
}

// A stream whose client does not read holds its pages only while no one else needs them: when a
// new request's utterance waits for pages, the held utterance is decoded to its end (its frames
// wait on the host) and gives them back, instead of holding them until its deadline; its next
// utterance takes no pages until its client reads on. Both streams' audio is what each makes
// alone.
TEST(SambertEngine, AStreamWaitingForItsClientGivesItsPagesToANewRequest) {
  const std::string slow_text = utterance(30, 21) + "\n" + utterance(20, 22);
  const std::string quick_text = utterance(12, 23);
  const double pages = pages_held_by(slow_text);
  ASSERT_GT(pages, 0.0);
  // Room for the held utterance and one page more; a deadline the quick request would wait for
  // if the slow stream kept its pages.
  EngineConfig config = config_of(kFixtureVoice.string(), static_cast<uint64_t>(pages) + 1);
  config.request_timeout = std::chrono::seconds(120);
  Served served(config);
  EngineService& service = served.service;
  std::unique_ptr<server::SpeechJob> slow = service.admit(request(slow_text));
  SlowClient slow_client(*slow);
  ASSERT_TRUE(wait_until_steps_stop(service, "decode"));
  ASSERT_GT(served.kv_pages("used"), 0.0);
  const auto asked = std::chrono::steady_clock::now();
  expect_same_audio(offline(kFixtureVoice.string(), quick_text),
                    speak(service, request(quick_text)), quick_text);
  // Long before the slow stream's deadline, which it would have waited for.
  EXPECT_LT(std::chrono::steady_clock::now() - asked, std::chrono::seconds(60));
  ASSERT_TRUE(wait_until_steps_stop(service, "prefill"));
  ASSERT_EQ(service.load().streams.size(), 1u);
  EXPECT_EQ(served.kv_pages("used"), 0.0) << "the slow stream's next utterance took pages";
  const std::vector<float> slow_audio = slow_client.read_on();
  expect_same_audio(offline(kFixtureVoice.string(), slow_text), slow_audio, slow_text);
  slow.reset();
  wait_idle(service);
  EXPECT_EQ(served.kv_pages("used"), 0.0);
}

// A client that never reads: its audio fills its buffer, then the decoder makes no more for it
// (the frames it holds stay bounded, its decode steps stop) until the client goes.
TEST(SambertEngine, AClientThatDoesNotReadHoldsTheDecoderBack) {
  Served served(config_of(kFixtureVoice.string(), 64));
  EngineService& service = served.service;
  std::unique_ptr<server::SpeechJob> job = service.admit(request(utterance(120, 5)));
  job->start([] {});
  ASSERT_TRUE(wait_until_steps_stop(service, "decode"))
      << "the decode steps never began, or went on for a client that does not read";
  const SchedulerLoad load = service.load();
  ASSERT_EQ(load.streams.size(), 1u)
      << "the stream ended: the utterance is too short for this test";
  const SchedulerLoad::StreamLoad& stream = load.streams.front();
  EXPECT_GT(stream.work.mel_frames, 0);
  EXPECT_LE(stream.work.mel_frames, stream.work.lookahead_frames + 3);
  EXPECT_GT(served.kv_pages("used"), 0.0);
  job.reset();
  wait_idle(service);
  EXPECT_EQ(served.kv_pages("used"), 0.0);
}

TEST(SambertEngine, ManyShortRandomRequestsLeaveThePoolAndTheAllocatorWhereTheyStarted) {
  Served served(config_of(kFixtureVoice.string(), 24));
  EngineService& service = served.service;
  wait_idle(service);
  const uint64_t weights = service.runtime().allocator().stats().allocated_bytes;
  std::mt19937 random(7);
  constexpr int kRequests = 300;
  constexpr int kAtOnce = 6;
  for (int done = 0; done < kRequests; done += kAtOnce) {
    std::vector<std::unique_ptr<server::SpeechJob>> jobs;
    for (int i = 0; i < kAtOnce; ++i) {
      jobs.push_back(service.admit(
          request(utterance(1 + static_cast<int>(random() % 8), static_cast<uint32_t>(random())))));
    }
    for (const std::vector<float>& audio : run_all(jobs)) ASSERT_FALSE(audio.empty());
  }
  wait_idle(service);
  const AllocatorStats end = service.runtime().allocator().stats();
  EXPECT_EQ(end.allocated_bytes, weights);
  constexpr uint64_t kSegment = CachingAllocator::kSmallSegment;
  EXPECT_LE(end.reserved_bytes,
            (end.peak_allocated_bytes + kSegment - 1) / kSegment * kSegment + kSegment)
      << "peak allocated " << end.peak_allocated_bytes;
  EXPECT_EQ(served.kv_pages("used"), 0.0);
}

}  // namespace
}  // namespace voxd::scheduler
