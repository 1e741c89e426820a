// VocoderChunker and vocode_chunks on the HiFiGAN fixtures (tests/fixtures/hifigan, random
// weights in the V1/V2/V3/hop-300 shapes): chunked audio equals the unchunked run for any chunk
// size and any way of feeding the frames, R frames of context are needed, streams batch, the
// frames held stay bounded, and bad settings are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <memory>
#include <ostream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "backends/registry.h"
#include "core/error.h"
#include "core/safetensors.h"
#include "families/fastspeech2/hifigan.h"
#include "families/fastspeech2/vocoder_chunker.h"
#include "vocoder_test_util.h"

namespace voxd {
namespace {

using testing::random_mel;

const std::string kFixtures = std::string(VOXD_SOURCE_DIR) + "/tests/fixtures/hifigan/";
constexpr float kTolerance = 1e-5f;
// One CPU thread: these tests compare audio, not speed, and OpenMP threads waiting on each other
// slow them down badly on a busy machine.
constexpr int kThreads = 1;

HifiGanConfig read_config(const std::string& fixture) {
  return testing::read_hifigan_config(kFixtures + fixture + "/config.json");
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
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

// A fixture's generator on one backend.
struct Vocoder {
  Vocoder(const std::string& fixture, const std::string& backend_name)
      : config(read_config(fixture)),
        backend(make_backend(backend_name, kThreads)),
        ctx(*backend, host_allocator()),
        model(HifiGan::load(
            ctx, config, *SafetensorsFile::open(kFixtures + fixture + "/generator.safetensors"))) {}

  // The whole of host mel [n_mels, T] vocoded in one run.
  std::vector<float> unchunked(const Tensor& mel) {
    return ops::to_host(ctx, model.forward(ctx, ops::to_device(ctx, mel.unsqueeze(0))))
        .to_float_vector();
  }

  // Feeds host mel [n_mels, T] to `chunker` in `pieces` (see feed()) and vocodes the chunks as
  // they become ready: the chunks, and their own audio concatenated.
  std::pair<std::vector<MelChunk>, std::vector<float>> fed_and_vocoded(
      VocoderChunker& chunker, const Tensor& mel, const std::vector<int64_t>& pieces);

  HifiGanConfig config;
  std::unique_ptr<Backend> backend;
  Context ctx;
  HifiGan model;
};

// Appends `mel` to `chunker` in pieces whose sizes cycle through `pieces` (0 included), then
// finishes; after each append, `on_chunks` gets the chunks that became ready.
template <typename F>
void feed(VocoderChunker& chunker, const Tensor& mel, const std::vector<int64_t>& pieces,
          F&& on_chunks) {
  const int64_t frames = mel.size(1);
  int64_t offset = 0;
  for (size_t i = 0; offset < frames; ++i) {
    const int64_t piece = std::min(pieces[i % pieces.size()], frames - offset);
    chunker.append(mel.narrow(1, offset, piece));
    offset += piece;
    if (offset == frames) chunker.finish();
    on_chunks(chunker.take_chunks());
  }
}

std::pair<std::vector<MelChunk>, std::vector<float>> Vocoder::fed_and_vocoded(
    VocoderChunker& chunker, const Tensor& mel, const std::vector<int64_t>& pieces) {
  std::vector<MelChunk> all;
  std::vector<float> audio;
  feed(chunker, mel, pieces, [&](const std::vector<MelChunk>& chunks) {
    for (const std::vector<float>& own : vocode_chunks(ctx, model, chunks)) {
      audio.insert(audio.end(), own.begin(), own.end());
    }
    all.insert(all.end(), chunks.begin(), chunks.end());
  });
  return {std::move(all), std::move(audio)};
}

// Checks that `chunks` (all of one stream of `frames` frames, in order) tile it: own frames
// contiguous from 0 to the end, context min(R, what exists) on each side.
void expect_tiling(const std::vector<MelChunk>& chunks, int64_t frames, int64_t chunk_frames,
                   int64_t r, int64_t hop) {
  int64_t next = 0;
  for (const MelChunk& c : chunks) {
    EXPECT_EQ(c.own_first, next);
    EXPECT_GE(c.own_frames, 1);
    EXPECT_LE(c.own_frames, chunk_frames);
    EXPECT_EQ(c.first_frame, std::max<int64_t>(0, c.own_first - r));
    const int64_t end = std::min(frames, c.own_first + c.own_frames + r);
    EXPECT_EQ(c.mel.size(1), end - c.first_frame);
    EXPECT_EQ(c.skip_samples, (c.own_first - c.first_frame) * hop);
    next = c.own_first + c.own_frames;
  }
  EXPECT_EQ(next, frames);
}

struct Case {
  std::string fixture;
  std::string backend;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.fixture << " on " << c.backend;
}

std::vector<Case> cases(const std::vector<const char*>& backends) {
  std::vector<Case> out;
  for (const char* fixture : {"v1", "v2", "v3", "hop300"}) {
    for (const char* backend : backends) out.push_back({fixture, backend});
  }
  return out;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return info.param.fixture + "_" + info.param.backend;
}

class ChunkedVocoding : public ::testing::TestWithParam<Case> {};

// For chunk sizes 1, below R, a few in between and beyond the input, with the mel fed in uneven
// pieces, the chunks' audio concatenated is the unchunked audio.
TEST_P(ChunkedVocoding, EqualsUnchunkedAudio) {
  Vocoder v(GetParam().fixture, GetParam().backend);
  const int64_t r = v.config.receptive_field_frames();
  const int64_t frames = 2 * r + 9;
  const Tensor mel = random_mel({v.config.num_mels, frames}, 7);
  const std::vector<float> want = v.unchunked(mel);
  ASSERT_EQ(static_cast<int64_t>(want.size()), v.config.output_length(frames));

  for (int64_t chunk_frames : {int64_t{1}, r / 2, r + 3, frames - 1, frames + 10}) {
    SCOPED_TRACE("chunk_frames " + std::to_string(chunk_frames));
    VocoderChunker chunker(v.config, chunk_frames);
    const auto [all, got] = v.fed_and_vocoded(chunker, mel, {5, 1, 0, 12, 3});
    EXPECT_TRUE(chunker.done());
    expect_tiling(all, frames, chunk_frames, r, v.config.hop_length());
    EXPECT_EQ(all.size(), static_cast<size_t>((frames + chunk_frames - 1) / chunk_frames));
    ASSERT_EQ(got.size(), want.size());
    EXPECT_LE(max_abs_diff(got, want), kTolerance);
  }
}

// A smaller first chunk (for a stream's first audio) tiles the stream the same way and gives the
// same audio.
TEST_P(ChunkedVocoding, ASmallerFirstChunkGivesTheSameAudio) {
  Vocoder v(GetParam().fixture, GetParam().backend);
  const int64_t r = v.config.receptive_field_frames();
  const int64_t frames = 3 * r + 5;
  const Tensor mel = random_mel({v.config.num_mels, frames}, 11);
  const std::vector<float> want = v.unchunked(mel);
  const int64_t chunk_frames = r + 4;
  for (int64_t first : {int64_t{1}, r / 2, chunk_frames}) {
    SCOPED_TRACE("first chunk " + std::to_string(first));
    VocoderChunker chunker(v.config, chunk_frames, first);
    EXPECT_EQ(chunker.first_chunk_frames(), first);
    const auto [all, got] = v.fed_and_vocoded(chunker, mel, {4, 0, 9, 2});
    EXPECT_TRUE(chunker.done());
    expect_tiling(all, frames, chunk_frames, r, v.config.hop_length());
    ASSERT_FALSE(all.empty());
    EXPECT_EQ(all.front().own_frames, first);
    for (size_t i = 1; i + 1 < all.size(); ++i) EXPECT_EQ(all[i].own_frames, chunk_frames);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_LE(max_abs_diff(got, want), kTolerance);
  }
}

// A chunk whose mel does not reach the stream's end may be padded on the right with zero frames
// (to batch with longer chunks) and still yield its own samples; one that reaches the end may not.
TEST_P(ChunkedVocoding, ChunksWithRightContextMayBePaddedOnTheRight) {
  Vocoder v(GetParam().fixture, GetParam().backend);
  const int64_t r = v.config.receptive_field_frames();
  const int64_t frames = 4 * r + 3;
  const Tensor mel = random_mel({v.config.num_mels, frames}, 13);
  const std::vector<float> want = v.unchunked(mel);
  VocoderChunker chunker(v.config, r, r / 2);
  std::vector<MelChunk> chunks;
  feed(chunker, mel, {frames}, [&](const std::vector<MelChunk>& ready) {
    chunks.insert(chunks.end(), ready.begin(), ready.end());
  });
  ASSERT_GE(chunks.size(), 3u);
  EXPECT_TRUE(chunks.back().reaches_end);
  const int64_t pad = r + 5;
  // The largest difference between a padded chunk's own samples and the unchunked audio.
  const auto padded_error = [&](const MelChunk& chunk) {
    Tensor padded = Tensor::zeros({v.config.num_mels, chunk.mel.size(1) + pad}, DType::F32);
    const std::vector<float> values = chunk.mel.to_float_vector();
    for (int64_t c = 0; c < v.config.num_mels; ++c) {
      std::copy_n(values.begin() + c * chunk.mel.size(1), chunk.mel.size(1),
                  padded.data<float>() + c * padded.size(1));
    }
    const std::vector<float> audio = v.unchunked(padded);
    float worst = 0.0f;
    for (int64_t i = 0; i < chunk.own_frames * v.config.hop_length(); ++i) {
      const auto at = static_cast<size_t>(chunk.own_first * v.config.hop_length() + i);
      worst =
          std::max(worst, std::abs(audio[static_cast<size_t>(chunk.skip_samples + i)] - want[at]));
    }
    return worst;
  };
  int64_t padded_chunks = 0;
  for (const MelChunk& chunk : chunks) {
    EXPECT_EQ(chunk.reaches_end, chunk.first_frame + chunk.mel.size(1) == frames);
    if (chunk.reaches_end) continue;
    EXPECT_LE(padded_error(chunk), kTolerance) << "chunk at frame " << chunk.own_first;
    ++padded_chunks;
  }
  EXPECT_GE(padded_chunks, 2);
  EXPECT_GT(padded_error(chunks.back()), 10 * kTolerance) << "the last chunk may not be padded";
}

// R frames of context on each side reproduce a frame's audio; R / 2 frames change it by far more
// than the tolerance, so the comparisons above would catch a chunker that cut too little context.
// (R − 1 frames change it too, structurally, but with these random weights the farthest frames
// move the output by about 1e-7 only; tests/families/fastspeech2/test_hifigan.cpp shows R is
// exact.)
TEST_P(ChunkedVocoding, HalfTheContextChangesTheAudio) {
  Vocoder v(GetParam().fixture, GetParam().backend);
  const int64_t r = v.config.receptive_field_frames();
  const int64_t hop = v.config.hop_length();
  const int64_t frames = 2 * r + 9;
  const Tensor mel = random_mel({v.config.num_mels, frames}, 11);
  const std::vector<float> want = v.unchunked(mel);
  const int64_t frame = frames / 2;
  for (int64_t context : {r, r / 2}) {
    MelChunk chunk;
    chunk.first_frame = frame - context;
    chunk.mel = mel.narrow(1, chunk.first_frame, 2 * context + 1).to_host_contiguous(DType::F32);
    chunk.own_first = frame;
    chunk.own_frames = 1;
    chunk.skip_samples = context * hop;
    chunk.samples = hop;
    const std::vector<float> got = vocode_chunks(v.ctx, v.model, {chunk}).at(0);
    const std::vector<float> own(want.begin() + frame * hop, want.begin() + (frame + 1) * hop);
    if (context == r) {
      EXPECT_LE(max_abs_diff(got, own), kTolerance);
    } else {
      EXPECT_GT(max_abs_diff(got, own), kTolerance);
    }
  }
}

// Chunks of three streams of different lengths, cut as their frames arrive interleaved and
// vocoded together, give each stream its unchunked audio; interior chunks share one batch.
TEST_P(ChunkedVocoding, StreamsBatchTogether) {
  Vocoder v(GetParam().fixture, GetParam().backend);
  const int64_t r = v.config.receptive_field_frames();
  const int64_t chunk_frames = 6;
  const std::vector<int64_t> lengths = {5, 2 * r + 15, 3 * r + 20};
  std::vector<Tensor> mels;
  std::vector<VocoderChunker> chunkers;
  std::vector<int64_t> fed(lengths.size(), 0);
  for (size_t s = 0; s < lengths.size(); ++s) {
    mels.push_back(random_mel({v.config.num_mels, lengths[s]}, 100 + static_cast<unsigned>(s)));
    chunkers.emplace_back(v.config, chunk_frames);
  }
  std::vector<std::vector<float>> got(lengths.size());
  int64_t cross_stream_batches = 0;  // interior batches holding chunks of several streams
  bool any_left = true;
  for (int64_t step = 1; any_left; ++step) {
    std::vector<MelChunk> round;
    std::vector<size_t> owner;
    any_left = false;
    for (size_t s = 0; s < lengths.size(); ++s) {
      if (chunkers[s].done()) continue;
      const int64_t piece =
          std::min<int64_t>(3 + step % 5 + static_cast<int64_t>(s), lengths[s] - fed[s]);
      chunkers[s].append(mels[s].narrow(1, fed[s], piece));
      fed[s] += piece;
      if (fed[s] == lengths[s]) chunkers[s].finish();
      for (MelChunk& c : chunkers[s].take_chunks()) {
        round.push_back(std::move(c));
        owner.push_back(s);
      }
      any_left = any_left || !chunkers[s].done();
    }
    const std::vector<std::vector<size_t>> groups = batch_groups(round);
    for (size_t g = 0; g < groups.size(); ++g) {
      const int64_t shape = round[groups[g].front()].mel.size(1);
      for (size_t i : groups[g]) EXPECT_EQ(round[i].mel.size(1), shape);
      if (g > 0) {
        EXPECT_GT(shape, round[groups[g - 1].front()].mel.size(1));
      }
      std::set<size_t> streams;
      for (size_t i : groups[g]) streams.insert(owner[i]);
      if (shape == chunk_frames + 2 * r && streams.size() > 1) ++cross_stream_batches;
    }
    const std::vector<std::vector<float>> audio = vocode_chunks(v.ctx, v.model, round);
    for (size_t i = 0; i < round.size(); ++i) {
      got[owner[i]].insert(got[owner[i]].end(), audio[i].begin(), audio[i].end());
    }
  }
  EXPECT_GT(cross_stream_batches, 0);
  for (size_t s = 0; s < lengths.size(); ++s) {
    SCOPED_TRACE("stream " + std::to_string(s));
    const std::vector<float> want = v.unchunked(mels[s]);
    ASSERT_EQ(got[s].size(), want.size());
    EXPECT_LE(max_abs_diff(got[s], want), kTolerance);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ChunkedVocoding,
                         ::testing::ValuesIn(cases({"reference", "cpu"})), case_name);

// Grouping is by frame count, in increasing frame count, each group in the order given, so the
// same chunks always give the same batches.
TEST(BatchGroups, GroupsByShapeDeterministically) {
  const auto chunk = [](int64_t frames) {
    MelChunk c;
    c.mel = Tensor::zeros({80, frames}, DType::F32);
    return c;
  };
  const std::vector<MelChunk> chunks = {chunk(30), chunk(12), chunk(30),
                                        chunk(5),  chunk(12), chunk(30)};
  const std::vector<std::vector<size_t>> want = {{3}, {1, 4}, {0, 2, 5}};
  EXPECT_EQ(batch_groups(chunks), want);
  EXPECT_TRUE(batch_groups({}).empty());
}

// A very long stream fed in small uneven pieces: the frames held stay within chunk_frames + 2R
// once ready chunks are taken, every chunk holds exactly the stream's frames it names, and
// interior chunks all have chunk_frames + 2R frames.
TEST(VocoderChunker, RetainedFramesStayBoundedOnALongStream) {
  const HifiGanConfig config = read_config("v1");
  const int64_t r = config.receptive_field_frames();
  const int64_t n_mels = config.num_mels;
  const int64_t frames = 20000;
  // Frame t, channel c holds t·100 + c: exact in float, so chunks can be checked element-wise.
  std::vector<float> values(static_cast<size_t>(n_mels * frames));
  for (int64_t c = 0; c < n_mels; ++c) {
    for (int64_t t = 0; t < frames; ++t) values[c * frames + t] = static_cast<float>(t * 100 + c);
  }
  const Tensor mel = Tensor::from_vector({n_mels, frames}, values);
  for (int64_t chunk_frames : {1, 8, 64}) {
    SCOPED_TRACE("chunk_frames " + std::to_string(chunk_frames));
    VocoderChunker chunker(config, chunk_frames);
    EXPECT_EQ(chunker.context_frames(), r);
    EXPECT_EQ(chunker.max_retained_frames(), chunk_frames + 2 * r);
    std::vector<MelChunk> all;
    int64_t max_retained = 0;
    int64_t offset = 0;
    for (int64_t i = 0; offset < frames; ++i) {
      const int64_t piece = std::min<int64_t>(1 + (i * 7) % 17, frames - offset);
      const int64_t before = chunker.retained_frames();
      chunker.append(mel.narrow(1, offset, piece));
      offset += piece;
      EXPECT_EQ(chunker.retained_frames(), before + piece);
      if (offset == frames) chunker.finish();
      for (MelChunk& c : chunker.take_chunks()) {
        const bool interior = c.first_frame > 0 && c.first_frame + c.mel.size(1) < frames;
        if (interior) {
          EXPECT_EQ(c.mel.size(1), chunk_frames + 2 * r);
        }
        bool contents_match = true;
        const float* p = c.mel.data<float>();
        for (int64_t ch = 0; ch < n_mels; ++ch) {
          for (int64_t t = 0; t < c.mel.size(1); ++t) {
            contents_match =
                contents_match &&
                p[ch * c.mel.size(1) + t] == static_cast<float>((c.first_frame + t) * 100 + ch);
          }
        }
        EXPECT_TRUE(contents_match) << "chunk at frame " << c.own_first;
        c.mel = Tensor();
        all.push_back(std::move(c));
      }
      max_retained = std::max(max_retained, chunker.retained_frames());
      ASSERT_LE(chunker.retained_frames(), chunker.max_retained_frames()) << "at frame " << offset;
    }
    EXPECT_TRUE(chunker.done());
    EXPECT_EQ(chunker.frames_appended(), frames);
    EXPECT_EQ(max_retained, chunk_frames + 2 * r - 1);
    int64_t next = 0;
    for (const MelChunk& c : all) {
      EXPECT_EQ(c.own_first, next);
      next += c.own_frames;
    }
    EXPECT_EQ(next, frames);
    EXPECT_EQ(all.back().samples, all.back().own_frames * config.hop_length());
  }
}

// The same frames appended as [n_mels, T] contiguous, as a transposed view of time-major
// [T, n_mels] frames (how the acoustic model hands them over), in F16, and as a view with gaps
// give the same chunks.
TEST(VocoderChunker, EveryLayoutOfTheFramesGivesTheSameChunks) {
  const HifiGanConfig config = read_config("v1");
  const int64_t n_mels = config.num_mels;
  const int64_t frames = 150;
  // Frame t, channel c holds (t·3 + c) / 4: exact in F16 and F32.
  std::vector<float> channel_major(static_cast<size_t>(n_mels * frames));
  std::vector<float> time_major(channel_major.size());
  std::vector<float> padded(static_cast<size_t>(n_mels * (frames + 5)), -1.0f);
  for (int64_t c = 0; c < n_mels; ++c) {
    for (int64_t t = 0; t < frames; ++t) {
      const float value = static_cast<float>(t * 3 + c) / 4.0f;
      channel_major[static_cast<size_t>(c * frames + t)] = value;
      time_major[static_cast<size_t>(t * n_mels + c)] = value;
      padded[static_cast<size_t>(c * (frames + 5) + 2 + t)] = value;
    }
  }
  const Tensor contiguous = Tensor::from_vector({n_mels, frames}, channel_major);
  const Tensor frames_first = Tensor::from_vector({frames, n_mels}, time_major);
  const std::vector<Tensor> layouts = {
      frames_first.transpose(0, 1),
      frames_first.to_host_contiguous(DType::F16).transpose(0, 1),
      Tensor::from_vector({n_mels, frames + 5}, padded).narrow(1, 2, frames),
  };
  const auto chunks_of = [&](const Tensor& mel) {
    VocoderChunker chunker(config, 32);
    // In two appends, so that a view's offset into its storage counts too.
    chunker.append(mel.narrow(1, 0, 70));
    chunker.append(mel.narrow(1, 70, frames - 70));
    chunker.finish();
    return chunker.take_chunks();
  };
  const std::vector<MelChunk> expected = chunks_of(contiguous);
  ASSERT_GT(expected.size(), 2u);
  for (size_t layout = 0; layout < layouts.size(); ++layout) {
    SCOPED_TRACE("layout " + std::to_string(layout));
    const std::vector<MelChunk> got = chunks_of(layouts[layout]);
    ASSERT_EQ(got.size(), expected.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].first_frame, expected[i].first_frame);
      EXPECT_EQ(got[i].mel.to_float_vector(), expected[i].mel.to_float_vector()) << "chunk " << i;
    }
  }
}

// Frames handed over whole as a time-major F32 view (the acoustic step's mel) are kept as that
// view, not copied: the same chunks as appended copies, the storage held until the last chunk
// went out and then let go. A later append copies the kept frames first and lets go at once; a
// mel of another layout or dtype is copied.
TEST(VocoderChunker, SharedFramesGiveTheSameChunksAndAreLetGo) {
  const HifiGanConfig config = read_config("v1");
  const int64_t n_mels = config.num_mels;
  const int64_t frames = 150;
  const Tensor block = random_mel({frames + 4, n_mels}, 11);  // a step's [T, n_mels] mel
  const Tensor sequence = block.narrow(0, 2, frames).transpose(0, 1);
  const auto all_chunks = [](VocoderChunker& chunker) {
    std::vector<MelChunk> chunks;
    while (chunker.has_chunk()) chunks.push_back(chunker.next_chunk());
    return chunks;
  };
  VocoderChunker copied(config, 32, 16);
  copied.append(sequence);
  copied.finish(7);
  const std::vector<MelChunk> expected = all_chunks(copied);
  ASSERT_GT(expected.size(), 3u);
  const auto expect_same = [&](const std::vector<MelChunk>& got) {
    ASSERT_EQ(got.size(), expected.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].first_frame, expected[i].first_frame) << "chunk " << i;
      EXPECT_EQ(got[i].samples, expected[i].samples) << "chunk " << i;
      EXPECT_EQ(got[i].silence_after, expected[i].silence_after) << "chunk " << i;
      EXPECT_EQ(got[i].mel.to_float_vector(), expected[i].mel.to_float_vector()) << "chunk " << i;
    }
  };
  const long holders = block.storage().use_count();

  VocoderChunker shared(config, 32, 16);
  shared.append_shared(sequence);
  shared.finish(7);
  EXPECT_EQ(block.storage().use_count(), holders + 1) << "the frames are kept as a view";
  EXPECT_EQ(shared.retained_frames(), frames);
  std::vector<MelChunk> got;
  while (shared.has_chunk()) {
    EXPECT_EQ(block.storage().use_count(), holders + 1) << "let go before the last chunk";
    got.push_back(shared.next_chunk());
  }
  EXPECT_EQ(block.storage().use_count(), holders) << "still held after the last chunk";
  expect_same(got);

  VocoderChunker then_copied(config, 32, 16);
  then_copied.append_shared(sequence.narrow(1, 0, 100));
  EXPECT_EQ(block.storage().use_count(), holders + 1);
  ASSERT_TRUE(then_copied.has_chunk());
  got = {then_copied.next_chunk()};
  then_copied.append(sequence.narrow(1, 100, frames - 100));
  EXPECT_EQ(block.storage().use_count(), holders) << "an append copies the kept frames";
  then_copied.finish(7);
  for (MelChunk& chunk : all_chunks(then_copied)) got.push_back(std::move(chunk));
  expect_same(got);

  const Tensor channel_major = sequence.to_host_contiguous(DType::F32);
  const Tensor half = block.to_host_contiguous(DType::F16).narrow(0, 2, frames).transpose(0, 1);
  for (const Tensor& mel : {channel_major, half}) {
    VocoderChunker other(config, 32, 16);
    const long before = mel.storage().use_count();
    other.append_shared(mel);
    EXPECT_EQ(mel.storage().use_count(), before) << "a mel of another layout or dtype is copied";
    other.finish(7);
    std::vector<MelChunk> chunks = all_chunks(other);
    ASSERT_EQ(chunks.size(), expected.size());
    for (size_t i = 0; i < chunks.size(); ++i) {
      const std::vector<float> a = chunks[i].mel.to_float_vector();
      const std::vector<float> e = expected[i].mel.to_float_vector();
      ASSERT_EQ(a.size(), e.size());
      // F16 rounds each value to within 2^-11 of it.
      for (size_t j = 0; j < a.size(); ++j) {
        ASSERT_NEAR(a[j], e[j], std::abs(e[j]) / 1024.0f) << "chunk " << i;
      }
    }
  }
}

// A chunk is handed out as soon as its right context is complete, and not before: with frames
// arriving one by one, chunk k (k ≥ 1) appears with frame k·chunk_frames + R.
TEST(VocoderChunker, ChunkIsReadyOnceItsRightContextArrives) {
  const HifiGanConfig config = read_config("v3");
  const int64_t r = config.receptive_field_frames();
  const int64_t chunk_frames = 4;
  const int64_t frames = 3 * chunk_frames + r;
  VocoderChunker chunker(config, chunk_frames);
  const Tensor mel = random_mel({config.num_mels, frames}, 3);
  int64_t taken = 0;
  for (int64_t t = 1; t <= frames; ++t) {
    chunker.append(mel.narrow(1, t - 1, 1));
    const bool due = t - r >= chunk_frames && (t - r) % chunk_frames == 0;
    EXPECT_EQ(chunker.has_chunk(), due) << "after " << t << " frames";
    while (chunker.has_chunk()) {
      EXPECT_EQ(chunker.next_chunk().own_frames, chunk_frames);
      ++taken;
    }
  }
  EXPECT_EQ(taken, 3);
  EXPECT_FALSE(chunker.done());
  chunker.finish();
  const std::vector<MelChunk> rest = chunker.take_chunks();
  EXPECT_EQ(static_cast<int64_t>(rest.size()), (r + chunk_frames - 1) / chunk_frames);
  EXPECT_TRUE(chunker.done());
  EXPECT_FALSE(chunker.has_chunk());
}

// The host heap, counting the bytes in use and their peak: the allocator of one context's
// activations.
class PeakAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    void* p = host_allocator().allocate(bytes);
    current_ += bytes;
    peak_ = std::max(peak_, current_);
    return p;
  }
  void deallocate(void* ptr, size_t bytes) override {
    host_allocator().deallocate(ptr, bytes);
    current_ -= bytes;
  }
  Device device() const override { return Device::cpu(); }
  AllocatorStats stats() const override {
    AllocatorStats s;
    s.allocated_bytes = current_;
    s.peak_allocated_bytes = peak_;
    return s;
  }

 private:
  uint64_t current_ = 0;
  uint64_t peak_ = 0;
};

// Peak activation memory of vocoding `mel` chunk by chunk, one chunk per vocoder run.
uint64_t chunked_peak(Vocoder& v, const Tensor& mel, int64_t chunk_frames) {
  PeakAllocator activations;
  Context ctx(*v.backend, activations);
  VocoderChunker chunker(v.config, chunk_frames);
  chunker.append(mel);
  chunker.finish();
  while (chunker.has_chunk()) vocode_chunks(ctx, v.model, {chunker.next_chunk()});
  EXPECT_EQ(activations.stats().allocated_bytes, 0u);
  return activations.stats().peak_allocated_bytes;
}

// The vocoder's working memory for a chunked stream is the same for 200 frames as for 800, and
// less than the 800 frames need at once.
TEST(VocoderChunker, ActivationMemoryDoesNotGrowWithStreamLength) {
  Vocoder v("v1", "cpu");
  const Tensor short_mel = random_mel({v.config.num_mels, 200}, 1);
  const Tensor long_mel = random_mel({v.config.num_mels, 800}, 2);
  const uint64_t short_peak = chunked_peak(v, short_mel, 16);
  const uint64_t long_peak = chunked_peak(v, long_mel, 16);
  EXPECT_EQ(short_peak, long_peak);
  PeakAllocator whole;
  Context ctx(*v.backend, whole);
  ops::to_host(ctx, v.model.forward(ctx, ops::to_device(ctx, long_mel.unsqueeze(0))));
  EXPECT_LT(4 * long_peak, whole.stats().peak_allocated_bytes);
  std::cout << "peak activation memory, chunks of 16 frames: " << long_peak
            << " bytes; 800 frames at once: " << whole.stats().peak_allocated_bytes << " bytes\n";
}

// The tail samples that odd k − u stages add beyond frames·hop come with the stream's last chunk.
TEST(VocoderChunker, LastChunkCarriesTheTailSamples) {
  Vocoder v("odd_kernels", "reference");
  const int64_t frames = 30;
  const int64_t tail = v.config.output_length(frames) - frames * v.config.hop_length();
  ASSERT_GT(tail, 0);
  const Tensor mel = random_mel({v.config.num_mels, frames}, 5);
  VocoderChunker chunker(v.config, 7);
  chunker.append(mel);
  chunker.finish();
  const std::vector<MelChunk> chunks = chunker.take_chunks();
  ASSERT_EQ(chunks.size(), 5u);
  EXPECT_EQ(chunks.back().samples, chunks.back().own_frames * v.config.hop_length() + tail);
  std::vector<float> got;
  for (const std::vector<float>& audio : vocode_chunks(v.ctx, v.model, chunks)) {
    got.insert(got.end(), audio.begin(), audio.end());
  }
  EXPECT_LE(max_abs_diff(got, v.unchunked(mel)), kTolerance);
}

TEST(VocoderChunker, BadSettingsAreRefused) {
  const HifiGanConfig config = read_config("v1");
  for (int64_t bad : {-4, 0}) {
    const std::string m = error_message<InputError>([&] { VocoderChunker chunker(config, bad); });
    EXPECT_NE(m.find("chunk_frames must be at least 1"), std::string::npos) << m;
    EXPECT_NE(m.find("got " + std::to_string(bad)), std::string::npos) << m;
  }
  for (int64_t bad : {-1, 9}) {
    const std::string m =
        error_message<InputError>([&] { VocoderChunker chunker(config, 8, bad); });
    EXPECT_NE(m.find("first chunk's frames must be between 1 and chunk_frames (8), got " +
                     std::to_string(bad)),
              std::string::npos)
        << m;
  }

  VocoderChunker chunker(config, 8);
  std::string m = error_message<InputError>([&] {
    chunker.append(Tensor::zeros({40, 10}, DType::F32));
  });
  EXPECT_NE(m.find("shape [40, 10], expected [80, T]"), std::string::npos) << m;
  m = error_message<InputError>([&] { chunker.append(Tensor::zeros({1, 80, 10}, DType::F32)); });
  EXPECT_NE(m.find("expected [80, T]"), std::string::npos) << m;
  EXPECT_EQ(chunker.frames_appended(), 0);

  chunker.append(Tensor::zeros({80, 3}, DType::F32));
  m = error_message<Error>([&] { chunker.next_chunk(); });
  EXPECT_NE(m.find("no chunk is ready (3 frames wait"), std::string::npos) << m;
  chunker.finish();
  m = error_message<Error>([&] { chunker.append(Tensor::zeros({80, 1}, DType::F32)); });
  EXPECT_NE(m.find("already finished"), std::string::npos) << m;
}

TEST(VocodeChunks, RefusesChunksThatDoNotFitTheVocoder) {
  Vocoder v("v1", "reference");
  MelChunk chunk;
  chunk.mel = Tensor::zeros({40, 10}, DType::F32);
  chunk.own_frames = 10;
  chunk.samples = 10 * v.config.hop_length();
  std::string m = error_message<InputError>([&] { vocode_chunks(v.ctx, v.model, {chunk}); });
  EXPECT_NE(m.find("chunk 0 has a mel of shape [40, 10], expected a host tensor [80, T]"),
            std::string::npos)
      << m;
  chunk.mel = Tensor::zeros({80, 10}, DType::F32);
  chunk.skip_samples = v.config.hop_length();
  m = error_message<InputError>([&] { vocode_chunks(v.ctx, v.model, {chunk}); });
  EXPECT_NE(m.find("asks for samples [256, 2816) of a 2560-sample output"), std::string::npos) << m;
}

}  // namespace
}  // namespace voxd
