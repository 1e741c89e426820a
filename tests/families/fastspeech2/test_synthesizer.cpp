// Synthesizer and vocode() with SynthesisOptions::chunk_frames on the tiny test voice: chunked
// audio reaches the sink chunk by chunk and equals the whole-sentence audio; bad values are
// refused before any audio; on_sentence follows each sentence.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/registry.h"
#include "core/error.h"
#include "families/fastspeech2/synthesizer.h"
#include "families/fastspeech2/voice.h"
#include "text/mandarin/espeak_front_end.h"

namespace voxd {
namespace {

const std::string kTinyVoice = std::string(VOXD_SOURCE_DIR) + "/tests/fixtures/voices/tiny-arpabet";
constexpr float kTolerance = 1e-5f;
// One CPU thread: these tests compare audio, not speed, and OpenMP threads waiting on each other
// slow them down badly on a busy machine.
constexpr int kThreads = 1;

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float worst = 0.0f;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    worst = std::max(worst, std::abs(a[i] - b[i]));
  }
  return worst;
}

// What a sink received: all samples, and the size of each call.
struct Recorded {
  std::vector<float> audio;
  std::vector<size_t> calls;
  AudioSink sink() {
    return [this](const float* samples, size_t count) {
      audio.insert(audio.end(), samples, samples + count);
      calls.push_back(count);
    };
  }
};

class ChunkedSynthesis : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> backend_ = make_backend("cpu", kThreads);
  Context ctx_{*backend_, host_allocator()};
  std::unique_ptr<Voice> voice_ = Voice::load(ctx_, kTinyVoice);
  Synthesizer synthesizer_{ctx_, *voice_};
};

TEST_F(ChunkedSynthesis, IdsAudioEqualsWholeSentenceAndArrivesChunkByChunk) {
  const std::vector<int64_t> ids = {60, 70, 80, 90, 100, 11, 42, 17, 23, 64, 55, 31};
  SynthesisOptions options;
  options.keep_mel = true;
  Recorded whole;
  const Utterance want = synthesizer_.synthesize_ids(ids, options, whole.sink());
  ASSERT_EQ(whole.calls.size(), 1u);
  const int64_t frames = want.mel_frames;
  const int64_t hop = voice_->config().hop_length;
  ASSERT_GT(frames, 2 * voice_->vocoder().config().receptive_field_frames());

  for (int64_t chunk_frames : {int64_t{1}, int64_t{4}, int64_t{13}, frames - 3, frames + 100}) {
    SCOPED_TRACE("chunk_frames " + std::to_string(chunk_frames));
    options.chunk_frames = chunk_frames;
    Recorded chunked;
    const Utterance got = synthesizer_.synthesize_ids(ids, options, chunked.sink());
    EXPECT_EQ(got.samples, want.samples);
    EXPECT_EQ(got.mel_frames, frames);
    EXPECT_EQ(got.mel.to_float_vector(), want.mel.to_float_vector());
    EXPECT_EQ(chunked.calls.size(),
              static_cast<size_t>((frames + chunk_frames - 1) / chunk_frames));
    EXPECT_EQ(chunked.calls.front(), static_cast<size_t>(std::min(chunk_frames, frames) * hop));
    ASSERT_EQ(chunked.audio.size(), whole.audio.size());
    EXPECT_LE(max_abs_diff(chunked.audio, whole.audio), kTolerance);
  }
}

TEST_F(ChunkedSynthesis, TextAudioEqualsWholeSentences) {
  const std::string text = "Printing, in the only sense. With which we are concerned today?";
  SynthesisOptions options;
  Recorded whole;
  const Utterance want = synthesizer_.synthesize_text(text, options, whole.sink());
  ASSERT_EQ(want.sentences, 2);
  options.chunk_frames = 9;
  Recorded chunked;
  const Utterance got = synthesizer_.synthesize_text(text, options, chunked.sink());
  EXPECT_EQ(got.sentences, 2);
  EXPECT_EQ(got.samples, want.samples);
  EXPECT_GT(chunked.calls.size(), whole.calls.size());
  for (size_t count : chunked.calls) EXPECT_LE(count, 9u * voice_->config().hop_length);
  ASSERT_EQ(chunked.audio.size(), whole.audio.size());
  EXPECT_LE(max_abs_diff(chunked.audio, whole.audio), kTolerance);
}

// The bundled voice's trained vocoder, whose audio depends on its context more than the tiny
// voice's random one, gives the same audio chunked.
TEST(ChunkedSynthesisDemoVoice, TextAudioEqualsWholeSentences) {
  auto backend = make_backend("cpu", kThreads);
  Context ctx(*backend, host_allocator());
  const std::unique_ptr<Voice> voice =
      Voice::load(ctx, std::string(VOXD_SOURCE_DIR) + "/voices/en-demo");
  const Synthesizer synthesizer(ctx, *voice);
  const std::string text = "It is 10:30 on May 3rd, and the library is open.";
  SynthesisOptions options;
  Recorded whole;
  synthesizer.synthesize_text(text, options, whole.sink());
  for (int64_t chunk_frames : {12, 64}) {
    options.chunk_frames = chunk_frames;
    Recorded chunked;
    synthesizer.synthesize_text(text, options, chunked.sink());
    ASSERT_EQ(chunked.audio.size(), whole.audio.size());
    EXPECT_LE(max_abs_diff(chunked.audio, whole.audio), kTolerance)
        << "chunk_frames " << chunk_frames;
  }
}

// The bundled Mandarin voice reads Chinese text through the Mandarin front end: the audio of the
// text is its sentences' phoneme ids spoken one after another, and text with no Chinese in it
// is refused naming the voice's language.
TEST(ZhDemoVoice, SpeaksChineseTextAsTheIdsOfItsSentences) {
  auto backend = make_backend("cpu", kThreads);
  Context ctx(*backend, host_allocator());
  const std::unique_ptr<Voice> voice =
      Voice::load(ctx, std::string(VOXD_SOURCE_DIR) + "/voices/zh-demo");
  const Synthesizer synthesizer(ctx, *voice);
  const std::string text = "今天天气真好。我们去银行吧！";
  Recorded spoken;
  const Utterance done = synthesizer.synthesize_text(text, {}, spoken.sink());
  EXPECT_EQ(done.sentences, 2);
  EXPECT_EQ(done.samples, static_cast<int64_t>(spoken.audio.size()));
  EXPECT_GT(done.samples, 22050 / 2);  // 13 syllables: well over half a second

  const auto front_end = text::mandarin::make_phoneme_front_end(
      text::PhonemeSet::EspeakMnemonic, text::SymbolTable::load(voice->config().symbols_path),
      "zh-cn", "zh-demo");
  const std::vector<text::Sentence> sentences = front_end->process(text);
  ASSERT_EQ(sentences.size(), 2u);
  EXPECT_EQ(sentences[1].text, "wo3 men5 qu4 yin2 hang2 ba5!");
  Recorded by_ids;
  for (const text::Sentence& sentence : sentences) {
    synthesizer.synthesize_ids(sentence.ids, {}, by_ids.sink());
  }
  ASSERT_EQ(by_ids.audio.size(), spoken.audio.size());
  EXPECT_LE(max_abs_diff(by_ids.audio, spoken.audio), kTolerance);

  try {
    synthesizer.synthesize_text("Hello world.", {}, spoken.sink());
    ADD_FAILURE() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("zh-cn"), std::string::npos) << e.what();
  }
}

// SynthesisOptions::on_sentence is told after each sentence, once its audio is in the sink.
TEST_F(ChunkedSynthesis, OnSentenceFollowsEachSentence) {
  struct Call {
    int64_t sentences, total, samples;
    size_t sunk;
  };
  std::vector<Call> calls;
  Recorded recorded;
  SynthesisOptions options;
  options.chunk_frames = 7;
  options.on_sentence = [&](const Utterance& so_far, int64_t total) {
    calls.push_back({so_far.sentences, total, so_far.samples, recorded.audio.size()});
  };
  const Utterance done = synthesizer_.synthesize_text(
      "The first sentence. Then a second one. And the third.", options, recorded.sink());
  ASSERT_EQ(done.sentences, 3);
  ASSERT_EQ(calls.size(), 3u);
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(calls[i].sentences, static_cast<int64_t>(i) + 1);
    EXPECT_EQ(calls[i].total, 3);
    EXPECT_EQ(calls[i].samples, static_cast<int64_t>(calls[i].sunk));
    if (i > 0) {
      EXPECT_GT(calls[i].samples, calls[i - 1].samples);
    }
  }
  EXPECT_EQ(calls.back().samples, done.samples);
}

TEST_F(ChunkedSynthesis, NegativeChunkFramesIsRefusedBeforeAnyAudio) {
  SynthesisOptions options;
  options.chunk_frames = -1;
  Recorded sink;
  for (int round = 0; round < 2; ++round) {
    try {
      if (round == 0) {
        synthesizer_.synthesize_ids({60, 70, 80}, options, sink.sink());
      } else {
        synthesizer_.synthesize_text("Hello there.", options, sink.sink());
      }
      ADD_FAILURE() << "expected voxd::InputError";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("chunk_frames must be 0 (vocode each sentence at once) "
                                           "or a positive number"),
                std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("got -1"), std::string::npos) << e.what();
    }
  }
  EXPECT_TRUE(sink.calls.empty());
}

// SSML's <break> and <prosody rate> as the front end hands them over (Sentence::pause_after_ms
// and Sentence::rate).
using MarkedUpSynthesis = ChunkedSynthesis;

TEST_F(MarkedUpSynthesis, BreakIsSilenceBetweenTheSentences) {
  Recorded first, plain;
  synthesizer_.synthesize_text("One.", {}, first.sink());
  synthesizer_.synthesize_text("One. Two.", {}, plain.sink());
  for (int64_t chunk_frames : {0, 9}) {
    SynthesisOptions options;
    options.chunk_frames = chunk_frames;
    Recorded paused;
    const Utterance got =
        synthesizer_.synthesize_text("One. <break time=\"250ms\"/> Two.", options, paused.sink());
    const size_t head = first.audio.size();
    const size_t silence = 5513;  // 250 ms at 22050 Hz, rounded
    ASSERT_EQ(paused.audio.size(), plain.audio.size() + silence) << chunk_frames;
    EXPECT_EQ(got.samples, static_cast<int64_t>(paused.audio.size()));
    EXPECT_EQ(got.sentences, 2);
    EXPECT_LE(max_abs_diff(std::vector<float>(paused.audio.begin(), paused.audio.begin() + head),
                           first.audio),
              kTolerance);
    EXPECT_TRUE(std::all_of(paused.audio.begin() + head, paused.audio.begin() + head + silence,
                            [](float x) { return x == 0.0f; }));
    EXPECT_LE(
        max_abs_diff(std::vector<float>(paused.audio.begin() + head + silence, paused.audio.end()),
                     std::vector<float>(plain.audio.begin() + head, plain.audio.end())),
        kTolerance);
  }
}

TEST_F(MarkedUpSynthesis, ProsodyRateMultipliesSpeed) {
  SynthesisOptions half_speed;
  half_speed.speed = 0.5f;
  Recorded slow_by_option, slow_by_markup, fast_and_slow, normal;
  const Utterance a =
      synthesizer_.synthesize_text("Hello there.", half_speed, slow_by_option.sink());
  const Utterance b = synthesizer_.synthesize_text(
      "<prosody rate=\"x-slow\">Hello there.</prosody>", {}, slow_by_markup.sink());
  EXPECT_EQ(b.mel_frames, a.mel_frames);
  EXPECT_LE(max_abs_diff(slow_by_markup.audio, slow_by_option.audio), kTolerance);
  SynthesisOptions double_speed;
  double_speed.speed = 2.0f;
  const Utterance c = synthesizer_.synthesize_text("<prosody rate=\"50%\">Hello there.</prosody>",
                                                   double_speed, fast_and_slow.sink());
  const Utterance d = synthesizer_.synthesize_text("Hello there.", {}, normal.sink());
  EXPECT_EQ(c.mel_frames, d.mel_frames);
  EXPECT_GT(a.mel_frames, d.mel_frames);
}

TEST_F(ChunkedSynthesis, VocodeInChunksEqualsVocodeAtOnce) {
  const int64_t n_mels = voice_->config().n_mels;
  const int64_t frames = 47;
  std::mt19937 rng(9);
  std::normal_distribution<float> dist(-1.5f, 1.2f);
  std::vector<float> values(static_cast<size_t>(n_mels * frames));
  for (float& v : values) v = dist(rng);
  const Tensor mel = Tensor::from_vector({n_mels, frames}, values);
  const std::vector<float> want = vocode(ctx_, *voice_, mel);
  ASSERT_EQ(static_cast<int64_t>(want.size()), frames * voice_->config().hop_length);
  for (int64_t chunk_frames : {1, 10, 100}) {
    const std::vector<float> got = vocode(ctx_, *voice_, mel.unsqueeze(0), chunk_frames);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_LE(max_abs_diff(got, want), kTolerance) << "chunk_frames " << chunk_frames;
  }
  try {
    vocode(ctx_, *voice_, mel, -2);
    ADD_FAILURE() << "expected voxd::InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("got -2"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace voxd
