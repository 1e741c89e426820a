// CodeChunker and vocode_chunk on the tiny ChatTTS voice (tests/fixtures/voices/tiny-chattts,
// random weights): for sentences of 1 frame up to many chunks, several chunk and first-chunk
// sizes and rows appended in uneven pieces, the chunks' own audio concatenated is vocode_sentence's
// on the whole sentence, also with chunk boundaries shifted by a hop (an odd receptive field); the
// outermost context rows matter and the rows beyond do not; the context follows the networks'
// sizes (the real ChatTTS's by hand); the rows held stay bounded; interior chunks share
// one shape and one workspace plan; bad sizes and misuse are refused.
#include "families/chattts/code_chunker.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backends/registry.h"
#include "core/error.h"
#include "core/safetensors.h"
#include "core/workspace_plan.h"
#include "families/chattts/synthesizer.h"

namespace voxd::chattts {
namespace {

const std::string kVoice = std::string(VOXD_SOURCE_DIR) + "/tests/fixtures/voices/tiny-chattts";
constexpr float kTolerance = 1e-4f;
// One CPU thread: these tests compare audio, not speed.
constexpr int kThreads = 1;

float max_abs_diff(std::span<const float> a, std::span<const float> b) {
  EXPECT_EQ(a.size(), b.size());
  float worst = 0.0f;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    worst = std::max(worst, std::abs(a[i] - b[i]));
  }
  return worst;
}

// The message of the E `f` throws; fails the test when it throws nothing or something else.
template <typename E, typename F>
std::string error_message(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw another exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected an exception";
  return "";
}

// `frames` rows of `size` normal random floats (hidden states are of that order).
std::vector<float> random_rows(int64_t frames, int64_t size, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> rows(static_cast<size_t>(frames * size));
  for (float& v : rows) v = normal(rng);
  return rows;
}

// A Decoder and Vocos of one layer each (the tiny voice's first blocks): an odd receptive field
// (2 + 1·2·3 + 1 + 3 + 1·3 = 15 mel frames), so their chunk boundaries are shifted by a hop.
struct SmallModels {
  SmallModels(Context& ctx, const VoiceConfig& config)
      : decoder_config(one_layer(config.decoder)),
        vocos_config(one_layer(config.vocos)),
        decoder(
            Dvae::load(ctx, decoder_config, *SafetensorsFile::open(config.decoder_weights_path))),
        vocos(Vocos::load(ctx, vocos_config, *SafetensorsFile::open(config.vocos_weights_path))) {}
  static DvaeConfig one_layer(DvaeConfig c) {
    c.decoder.n_layer = 1;
    return c;
  }
  static VocosConfig one_layer(VocosConfig c) {
    c.num_layers = 1;
    return c;
  }

  DvaeConfig decoder_config;
  VocosConfig vocos_config;
  Dvae decoder;
  Vocos vocos;
};

class CodeChunkerTest : public ::testing::Test {
 protected:
  CodeChunkerTest()
      : backend_(make_backend("cpu", kThreads)),
        ctx_(*backend_, host_allocator()),
        voice_(Voice::load(ctx_, kVoice)) {}

  const Dvae& decoder() const { return voice_->decoder(); }
  const Vocos& vocos() const { return voice_->vocos(); }
  int64_t hidden_size() const { return 2 * decoder().config().decoder.idim; }
  CodeChunker chunker(int64_t chunk_frames, int64_t first_chunk_frames = 0) const {
    return CodeChunker(decoder().config(), vocos().config(), chunk_frames, first_chunk_frames);
  }

  // Appends `hidden` to `chunker` in pieces whose sizes (rows) cycle through `pieces` (0
  // included), finishes after the last, and vocodes the chunks ready after each append with
  // `decoder` and `vocos`: the chunks, and their own audio concatenated. Records the most rows
  // the chunker held once the ready chunks were taken.
  std::pair<std::vector<CodeChunk>, std::vector<float>> chunked(CodeChunker& chunker,
                                                                const std::vector<float>& hidden,
                                                                const std::vector<int64_t>& pieces,
                                                                const Dvae& decoder,
                                                                const Vocos& vocos) {
    const int64_t frames = static_cast<int64_t>(hidden.size()) / chunker.hidden_size();
    std::vector<CodeChunk> all;
    std::vector<float> audio;
    int64_t offset = 0;
    for (size_t i = 0; offset < frames; ++i) {
      const int64_t piece = std::min(pieces[i % pieces.size()], frames - offset);
      chunker.append(std::span<const float>(hidden).subspan(
          static_cast<size_t>(offset * chunker.hidden_size()),
          static_cast<size_t>(piece * chunker.hidden_size())));
      offset += piece;
      if (offset == frames) chunker.finish();
      for (CodeChunk& chunk : chunker.take_chunks()) {
        const std::vector<float> own = vocode_chunk(ctx_, decoder, vocos, chunk);
        EXPECT_EQ(static_cast<int64_t>(own.size()), chunk.samples);
        audio.insert(audio.end(), own.begin(), own.end());
        all.push_back(std::move(chunk));
      }
      most_retained_ = std::max(most_retained_, chunker.retained_frames());
    }
    return {std::move(all), std::move(audio)};
  }
  std::pair<std::vector<CodeChunk>, std::vector<float>> chunked(
      CodeChunker& chunker, const std::vector<float>& hidden, const std::vector<int64_t>& pieces) {
    return chunked(chunker, hidden, pieces, decoder(), vocos());
  }

  // `hidden` ([frames, hidden_size] rows) through `decoder` and `vocos` in one run.
  std::vector<float> whole(const Dvae& decoder, const Vocos& vocos,
                           const std::vector<float>& hidden) {
    const int64_t frames = static_cast<int64_t>(hidden.size()) / hidden_size();
    const Tensor states =
        ops::to_device(ctx_, Tensor::from_vector({1, frames, hidden_size()}, hidden), DType::F32);
    return ops::to_host(ctx_, vocos.forward(ctx_, decoder.decode_hidden(ctx_, states)))
        .to_float_vector();
  }

  // Adds noise to row `row` of the whole of `hidden` and returns how much the own samples of
  // `chunk` change.
  float own_change(const Dvae& decoder, const Vocos& vocos, const std::vector<float>& hidden,
                   const CodeChunk& chunk, int64_t row) {
    const auto size = static_cast<size_t>(hidden_size());
    const std::vector<float> noise = random_rows(1, hidden_size(), 99);
    std::vector<float> changed = hidden;
    for (size_t i = 0; i < size; ++i) changed[static_cast<size_t>(row) * size + i] += 10 * noise[i];
    const std::vector<float> before = whole(decoder, vocos, hidden);
    const std::vector<float> after = whole(decoder, vocos, changed);
    const auto own = [&](const std::vector<float>& audio) {
      return std::span<const float>(audio).subspan(static_cast<size_t>(chunk.first_sample),
                                                   static_cast<size_t>(chunk.samples));
    };
    return max_abs_diff(own(after), own(before));
  }

  // Checks on an interior chunk of a long sentence that its outermost context rows matter to its
  // own audio and the rows beyond them do not (not at all: the same arithmetic reaches those
  // samples).
  void expect_context_is_tight(const Dvae& decoder, const Vocos& vocos) {
    CodeChunker c(decoder.config(), vocos.config(), 8);
    const int64_t frames = c.max_retained_frames() + 2 * c.chunk_frames();
    const std::vector<float> hidden = random_rows(frames, hidden_size(), 7);
    c.append(hidden);
    c.finish();
    const std::vector<CodeChunk> chunks = c.take_chunks();
    const auto interior = std::find_if(chunks.begin(), chunks.end(), [&](const CodeChunk& chunk) {
      return chunk.first_row > 0 && chunk.rows == c.max_retained_frames() &&
             chunk.first_row + chunk.rows < frames;
    });
    ASSERT_NE(interior, chunks.end());
    const int64_t first = interior->first_row;
    const int64_t last = first + interior->rows - 1;
    EXPECT_EQ(own_change(decoder, vocos, hidden, *interior, first - 1), 0.0f);
    EXPECT_GT(own_change(decoder, vocos, hidden, *interior, first), 1e-6f);
    EXPECT_GT(own_change(decoder, vocos, hidden, *interior, last), 1e-6f);
    EXPECT_EQ(own_change(decoder, vocos, hidden, *interior, last + 1), 0.0f);
  }

  std::unique_ptr<Backend> backend_;
  Context ctx_;
  std::unique_ptr<Voice> voice_;
  int64_t most_retained_ = 0;
};

// Checks that `chunks` (all of one sentence of `frames` frames, in order) tile it: own frames and
// own samples contiguous from 0 to the end, context min(left/right, what exists) on each side,
// the first chunk of `first` frames, each later one as many as were sent before it (at least
// `first`, at most `chunk_frames`) but the last.
void expect_tiling(const std::vector<CodeChunk>& chunks, const CodeChunker& chunker,
                   int64_t frames) {
  const CodeContext& c = chunker.context();
  int64_t next = 0;
  int64_t next_sample = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const CodeChunk& chunk = chunks[i];
    SCOPED_TRACE("chunk " + std::to_string(i));
    EXPECT_EQ(chunk.own_first, next);
    const int64_t first = chunker.first_chunk_frames();
    const int64_t want_own =
        i == 0 ? first : std::min(chunker.chunk_frames(), std::max(first, chunk.own_first));
    EXPECT_EQ(chunk.own_frames, std::min(want_own, frames - chunk.own_first));
    EXPECT_EQ(chunk.first_row, std::max<int64_t>(0, chunk.own_first - c.left_frames));
    const int64_t end = std::min(frames, chunk.own_first + chunk.own_frames + c.right_frames);
    EXPECT_EQ(chunk.rows, end - chunk.first_row);
    EXPECT_EQ(static_cast<int64_t>(chunk.hidden.size()), chunk.rows * chunker.hidden_size());
    EXPECT_EQ(chunk.first_sample, next_sample);
    EXPECT_EQ(chunk.skip_samples, chunk.first_sample - 2 * chunk.first_row * c.hop);
    EXPECT_GE(chunk.samples, 1);
    EXPECT_EQ(chunk.last, i + 1 == chunks.size());
    next = chunk.own_first + chunk.own_frames;
    next_sample = chunk.first_sample + chunk.samples;
  }
  EXPECT_EQ(next, frames);
  EXPECT_EQ(next_sample, (2 * frames - 1) * c.hop);
}

// The context of the tiny voice and of the real ChatTTS, worked out by hand. Vocos's ISTFT at
// n_fft 1024, hop 256: output sample i is overlap-add sample n = 512 + i, the sum of the frames
// f with 256·f <= n < 256·f + 1024; so for a chunk boundary at sample 256·m the samples from it
// on need frames from m − 1 on, and those before it frames up to m + 1.
TEST_F(CodeChunkerTest, ContextFollowsTheNetworksSizes) {
  // Tiny: Decoder 2 + 2·2·3 + 1 = 15 mel frames, Vocos 3 + 2·3 = 9: R = 24. Shift 0: the left
  // needs R + 1 = 25 mel frames (13 code frames), the right R + 2 = 26 (13).
  const CodeContext tiny = code_context(decoder().config(), vocos().config());
  EXPECT_EQ(tiny.receptive_mel_frames, 24);
  EXPECT_EQ(tiny.left_frames, 13);
  EXPECT_EQ(tiny.right_frames, 13);
  EXPECT_EQ(tiny.shift, 0);
  EXPECT_EQ(tiny.hop, 256);

  // The real ChatTTS (asset/config: Decoder n_layer 12, kernel 7, dilation 2; Vocos 8 layers,
  // n_fft 1024, hop 256): Decoder 2 + 12·2·3 + 1 = 75, Vocos 3 + 8·3 = 27: R = 102. Left
  // 103 mel frames → 52 code frames, right 104 → 52 (shift −1 gives 104 and 103: no less).
  DvaeConfig chattts;
  chattts.decoder = {.idim = 384,
                     .odim = 384,
                     .hidden = 512,
                     .n_layer = 12,
                     .bn_dim = 128,
                     .kernel = 7,
                     .dilation = 2};
  chattts.dim = 384;
  const VocosConfig chattts_vocos;  // the defaults are ChatTTS's
  const CodeContext real = code_context(chattts, chattts_vocos);
  EXPECT_EQ(real.receptive_mel_frames, 102);
  EXPECT_EQ(real.left_frames, 52);
  EXPECT_EQ(real.right_frames, 52);
  EXPECT_EQ(real.shift, 0);

  // An odd R: Decoder n_layer 1, kernel 3, dilation 1 (2 + 1 + 1 = 4), Vocos 8 layers (27): R =
  // 31. Shift 0 needs 32 and 33 mel frames (16 + 17 code frames), shift −1 33 and 32 (17 + 16):
  // as few in all and fewer on the right, where they delay the audio.
  DvaeConfig odd = chattts;
  odd.decoder.n_layer = 1;
  odd.decoder.kernel = 3;
  odd.decoder.dilation = 1;
  const CodeContext shifted = code_context(odd, chattts_vocos);
  EXPECT_EQ(shifted.receptive_mel_frames, 31);
  EXPECT_EQ(shifted.left_frames, 17);
  EXPECT_EQ(shifted.right_frames, 16);
  EXPECT_EQ(shifted.shift, -1);

  DvaeConfig even_kernel = chattts;
  even_kernel.decoder.kernel = 6;
  EXPECT_NE(error_message<InputError>([&] {
              (void)code_context(even_kernel, chattts_vocos);
            }).find("odd kernel"),
            std::string::npos);
  VocosConfig no_hop;
  no_hop.hop_length = 0;
  EXPECT_NE(
      error_message<InputError>([&] { (void)code_context(chattts, no_hop); }).find("hop_length"),
      std::string::npos);
}

// For sentences of 1 frame, fewer than a chunk, exactly a chunk, many chunks and lengths that are
// no multiple of it, chunk and first-chunk sizes from 1 up, rows fed in uneven pieces: the
// chunks tile the sentence and their audio is vocode_sentence's on the whole.
TEST_F(CodeChunkerTest, ChunkedAudioEqualsTheWholeSentence) {
  const std::vector<std::vector<int64_t>> pieces = {{1}, {5, 1, 0, 12, 3}, {40}, {2, 7}};
  unsigned seed = 1;
  size_t feeding = 0;
  for (const int64_t chunk_frames : {int64_t{1}, int64_t{6}, int64_t{24}}) {
    for (const int64_t first : {int64_t{0}, int64_t{1}, int64_t{4}}) {
      if (first > chunk_frames) continue;
      const CodeChunker shape = chunker(chunk_frames, first);
      const int64_t l = shape.context().left_frames;
      for (const int64_t frames : {int64_t{1}, chunk_frames - 1, chunk_frames, chunk_frames + 1,
                                   l + 1, 3 * chunk_frames + 2 * l + 5}) {
        if (frames < 1) continue;
        const std::vector<int64_t>& feed = pieces[feeding++ % pieces.size()];
        SCOPED_TRACE("chunk " + std::to_string(chunk_frames) + ", first " + std::to_string(first) +
                     ", " + std::to_string(frames) + " frames, pieces from " +
                     std::to_string(feed.front()));
        const std::vector<float> hidden = random_rows(frames, hidden_size(), seed++);
        const std::vector<float> want = vocode_sentence(ctx_, *voice_, hidden, frames);
        CodeChunker c = chunker(chunk_frames, first);
        const auto [chunks, got] = chunked(c, hidden, feed);
        EXPECT_TRUE(c.done());
        EXPECT_FALSE(c.has_chunk());
        expect_tiling(chunks, c, frames);
        ASSERT_EQ(got.size(), want.size());
        EXPECT_LE(max_abs_diff(got, want), kTolerance);
      }
    }
  }
}

// The one-layer models' boundary is shifted by a hop: chunking still gives the whole audio.
TEST_F(CodeChunkerTest, AShiftedBoundaryGivesTheWholeAudio) {
  const SmallModels small(ctx_, voice_->config());
  const CodeContext context = code_context(small.decoder_config, small.vocos_config);
  ASSERT_EQ(context.receptive_mel_frames, 15);
  ASSERT_EQ(context.shift, -1);
  EXPECT_EQ(context.left_frames, 9);   // 15 + 1 + 1 = 17 mel frames
  EXPECT_EQ(context.right_frames, 8);  // 15 + 2 − 1 = 16

  for (const int64_t frames : {int64_t{1}, int64_t{3}, int64_t{37}}) {
    SCOPED_TRACE(std::to_string(frames) + " frames");
    const std::vector<float> hidden = random_rows(frames, hidden_size(), 100 + frames);
    const std::vector<float> want = whole(small.decoder, small.vocos, hidden);
    CodeChunker c(small.decoder_config, small.vocos_config, 5, 2);
    const auto [chunks, got] = chunked(c, hidden, {3, 1}, small.decoder, small.vocos);
    expect_tiling(chunks, c, frames);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_LE(max_abs_diff(got, want), kTolerance);
  }
}

// The context is the least that works: changing an interior chunk's farthest context row on
// either side (in the whole sentence) changes the chunk's own audio, changing the row just beyond
// it changes none of it.
TEST_F(CodeChunkerTest, EveryContextRowIsNeeded) {
  expect_context_is_tight(decoder(), vocos());
}

TEST_F(CodeChunkerTest, EveryContextRowIsNeededWithAShiftedBoundary) {
  const SmallModels small(ctx_, voice_->config());
  expect_context_is_tight(small.decoder, small.vocos);
}

// A long sentence fed a row at a time, as the GPT makes them: the rows held stay below
// max_retained_frames(), chunks with context on both sides all have that many rows, and one
// workspace plan made by shape fits each of them exactly.
TEST_F(CodeChunkerTest, RetainedRowsStayBoundedAndInteriorChunksShareAShape) {
  const int64_t frames = 400;
  const int64_t chunk_frames = 24;
  const std::vector<float> hidden = random_rows(frames, hidden_size(), 3);
  CodeChunker c = chunker(chunk_frames, 4);
  const auto [chunks, got] = chunked(c, hidden, {1});
  const CodeContext& context = c.context();
  EXPECT_EQ(c.max_retained_frames(), context.left_frames + chunk_frames + context.right_frames);
  EXPECT_LT(most_retained_, c.max_retained_frames());
  EXPECT_EQ(c.retained_frames(), std::min(frames, context.left_frames));

  std::set<int64_t> interior_rows;
  for (const CodeChunk& chunk : chunks) {
    const bool full_left = chunk.own_first >= context.left_frames;
    const bool full_right = chunk.own_first + chunk.own_frames + context.right_frames <= frames;
    if (full_left && full_right && chunk.own_frames == chunk_frames) {
      interior_rows.insert(chunk.rows);
    }
  }
  EXPECT_EQ(interior_rows, std::set<int64_t>{c.max_retained_frames()});
  const std::vector<float> want = vocode_sentence(ctx_, *voice_, hidden, frames);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_LE(max_abs_diff(got, want), kTolerance);

  const ArenaLayout plan = plan_workspace(*backend_, [&](Context& ctx) {
    plan_vocode_chunks(ctx, decoder(), vocos(), 1, c.max_retained_frames());
  });
  EXPECT_GT(plan.bytes(), 0u);
  for (const CodeChunk& chunk : chunks) {
    if (chunk.rows != c.max_retained_frames()) continue;
    std::vector<float> own;
    const uint64_t used = run_in_workspace(*backend_, host_allocator(), plan, [&](Context& ctx) {
      own = vocode_chunk(ctx, decoder(), vocos(), chunk);
    });
    EXPECT_EQ(used, plan.bytes());
    EXPECT_EQ(static_cast<int64_t>(own.size()), chunk.samples);
  }
}

// Chunks of equal rows from different sentences run as one batch, each giving the audio it gives
// alone; chunks of different rows are refused.
TEST_F(CodeChunkerTest, ChunksOfEqualRowsBatchAcrossSentences) {
  std::vector<CodeChunk> interior;
  std::vector<CodeChunk> others;
  for (unsigned seed : {21u, 22u, 23u}) {
    CodeChunker c = chunker(6, 2);
    c.append(random_rows(40, hidden_size(), seed));
    c.finish();
    for (CodeChunk& chunk : c.take_chunks()) {
      (chunk.rows == c.max_retained_frames() ? interior : others).push_back(std::move(chunk));
    }
  }
  ASSERT_GE(interior.size(), 3u);
  std::vector<const CodeChunk*> batch;
  for (const CodeChunk& chunk : interior) batch.push_back(&chunk);
  const std::vector<std::vector<float>> together = vocode_chunks(ctx_, decoder(), vocos(), batch);
  ASSERT_EQ(together.size(), interior.size());
  for (size_t i = 0; i < interior.size(); ++i) {
    const std::vector<float> alone = vocode_chunk(ctx_, decoder(), vocos(), interior[i]);
    ASSERT_EQ(together[i].size(), alone.size());
    EXPECT_LE(max_abs_diff(together[i], alone), kTolerance);
  }
  ASSERT_FALSE(others.empty());
  const CodeChunk* mixed[] = {&interior.front(), &others.front()};
  EXPECT_NE(error_message<InputError>([&] {
              (void)vocode_chunks(ctx_, decoder(), vocos(), mixed);
            }).find("rows"),
            std::string::npos);
}

// Nothing is ready before a chunk's right context exists; the end makes the rest ready.
TEST_F(CodeChunkerTest, AChunkWaitsForItsRightContextOrTheEnd) {
  CodeChunker c = chunker(6, 2);
  const int64_t right = c.context().right_frames;
  const std::vector<float> hidden = random_rows(2 + right, hidden_size(), 5);
  const auto size = static_cast<size_t>(hidden_size());
  c.append(std::span<const float>(hidden).first(hidden.size() - size));
  EXPECT_FALSE(c.has_chunk());
  EXPECT_NE(error_message<Error>([&] { (void)c.next_chunk(); }).find("no chunk is ready"),
            std::string::npos);
  c.append(std::span<const float>(hidden).last(size));
  ASSERT_TRUE(c.has_chunk());
  const CodeChunk first = c.next_chunk();
  EXPECT_EQ(first.own_frames, 2);
  EXPECT_EQ(first.rows, 2 + right);
  EXPECT_FALSE(first.last);
  EXPECT_FALSE(c.has_chunk());
  EXPECT_FALSE(c.done());
  c.finish();
  const std::vector<CodeChunk> rest = c.take_chunks();
  // The rest in chunks of as many frames as were sent before each (2, 4, 6, 6, ...).
  size_t expected = 0;
  for (int64_t sent = 2; sent < 2 + right; ++expected) sent += std::min<int64_t>(6, sent);
  ASSERT_EQ(rest.size(), expected);
  EXPECT_TRUE(rest.back().last);
  EXPECT_TRUE(c.done());

  CodeChunker empty = chunker(6);
  empty.finish();
  EXPECT_FALSE(empty.has_chunk());
  EXPECT_TRUE(empty.done());
}

// frames_until_chunk() counts down to has_chunk(): the first chunk's own frames and right context,
// then each later chunk's.
TEST_F(CodeChunkerTest, FramesUntilAChunkCountDownToIt) {
  CodeChunker c = chunker(6, 2);
  const int64_t right = c.context().right_frames;
  EXPECT_EQ(c.frames_until_chunk(), 2 + right);
  const std::vector<float> rows = random_rows(40 + right, hidden_size(), 7);
  const auto size = static_cast<size_t>(hidden_size());
  for (int64_t appended = 0; appended < 40 + right; ++appended) {
    EXPECT_EQ(c.frames_until_chunk() == 0, c.has_chunk()) << appended;
    if (c.has_chunk()) (void)c.take_chunks();
    const int64_t before = c.frames_until_chunk();
    c.append(std::span<const float>(rows).subspan(static_cast<size_t>(appended) * size, size));
    if (before > 0) {
      EXPECT_EQ(c.frames_until_chunk(), before - 1) << appended;
    }
  }
  c.finish();
  EXPECT_EQ(c.frames_until_chunk(), 0);
}

TEST_F(CodeChunkerTest, RefusesBadSizesAndMisuse) {
  for (const auto& [chunk_frames, first] :
       std::vector<std::pair<int64_t, int64_t>>{{0, 0}, {-3, 0}, {8, 9}, {8, -1}}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk_frames) + ", first " + std::to_string(first));
    (void)error_message<InputError>([&] { (void)chunker(chunk_frames, first); });
  }
  EXPECT_NE(error_message<InputError>([&] { (void)chunker(0); }).find("at least 1 code frame"),
            std::string::npos);
  EXPECT_NE(error_message<InputError>([&] { (void)chunker(8, 9); }).find("between 1 and"),
            std::string::npos);

  CodeChunker c = chunker(8);
  const std::vector<float> rows = random_rows(3, hidden_size(), 9);
  EXPECT_NE(error_message<InputError>([&] {
              c.append(std::span<const float>(rows).first(rows.size() - 1));
            }).find("not whole hidden-state rows"),
            std::string::npos);
  EXPECT_EQ(c.frames_appended(), 0);
  c.append(rows);
  c.finish();
  EXPECT_NE(error_message<Error>([&] { c.append(rows); }).find("already finished"),
            std::string::npos);
  CodeChunk chunk = c.next_chunk();
  chunk.samples += 1;
  EXPECT_NE(error_message<InputError>([&] {
              (void)vocode_chunk(ctx_, decoder(), vocos(), chunk);
            }).find("expected a chunk cut by a CodeChunker"),
            std::string::npos);
  chunk.hidden.pop_back();
  EXPECT_NE(error_message<InputError>([&] {
              (void)vocode_chunk(ctx_, decoder(), vocos(), chunk);
            }).find("floats for"),
            std::string::npos);
}

}  // namespace
}  // namespace voxd::chattts
