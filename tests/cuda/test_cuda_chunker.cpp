// Chunked vocoding on the CUDA backend: chunks of three streams, cut by VocoderChunker as their
// frames arrive and batched by vocode_chunks, give each stream the audio of its unchunked CUDA
// run (F32 to 1e-4 absolute, F16 to 1e-2 relative L2), and the device memory a chunked run needs
// does not grow with the stream's length.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <string>
#include <tuple>
#include <vector>

#include "../families/fastspeech2/vocoder_test_util.h"
#include "core/error.h"
#include "core/ops.h"
#include "core/safetensors.h"
#include "cuda_test_util.h"
#include "families/fastspeech2/hifigan.h"
#include "families/fastspeech2/vocoder_chunker.h"

namespace voxd {
namespace {

using testing::random_mel;

using testing::cuda_backend;
using testing::relative_l2;
using testing::source_dir;

using Case = std::tuple<std::string, DType>;

HifiGanConfig read_config(const std::string& dir) {
  return testing::read_hifigan_config(dir + "config.json");
}

// The whole of host mel [n_mels, T] vocoded in one run, as host F32 [T_audio].
Tensor unchunked(Context& ctx, const HifiGan& model, const Tensor& mel) {
  const Tensor audio =
      ops::to_host(ctx, model.forward(ctx, ops::to_device(ctx, mel.unsqueeze(0), model.dtype())));
  return audio.reshape({audio.numel()});
}

class ChunkedOnCuda : public ::testing::TestWithParam<Case> {};

TEST_P(ChunkedOnCuda, StreamsEqualTheirUnchunkedAudio) {
  const auto& [fixture, dtype] = GetParam();
  const std::string dir = source_dir() + "/tests/fixtures/hifigan/" + fixture + "/";
  const HifiGanConfig config = read_config(dir);
  CudaDeviceAllocator allocator(0);
  Context ctx(cuda_backend(), allocator);
  const HifiGan model =
      HifiGan::load(ctx, config, *SafetensorsFile::open(dir + "generator.safetensors"), dtype);
  const int64_t r = config.receptive_field_frames();
  const std::vector<int64_t> lengths = {7, 2 * r + 15, 3 * r + 20};
  std::vector<Tensor> mels;
  for (size_t s = 0; s < lengths.size(); ++s) {
    mels.push_back(random_mel({config.num_mels, lengths[s]}, 200 + static_cast<unsigned>(s)));
  }
  for (int64_t chunk_frames : {int64_t{1}, r / 2, int64_t{16}, int64_t{500}}) {
    SCOPED_TRACE("chunk_frames " + std::to_string(chunk_frames));
    std::vector<VocoderChunker> chunkers;
    for (size_t s = 0; s < lengths.size(); ++s) chunkers.emplace_back(config, chunk_frames);
    std::vector<int64_t> fed(lengths.size(), 0);
    std::vector<std::vector<float>> got(lengths.size());
    size_t batches = 0;
    size_t chunks = 0;
    for (int64_t step = 1; fed != lengths; ++step) {
      std::vector<MelChunk> round;
      std::vector<size_t> owner;
      for (size_t s = 0; s < lengths.size(); ++s) {
        if (fed[s] == lengths[s]) continue;
        const int64_t piece =
            std::min<int64_t>(2 + (step * 5 + static_cast<int64_t>(s)) % 9, lengths[s] - fed[s]);
        chunkers[s].append(mels[s].narrow(1, fed[s], piece));
        fed[s] += piece;
        if (fed[s] == lengths[s]) chunkers[s].finish();
        for (MelChunk& c : chunkers[s].take_chunks()) {
          round.push_back(std::move(c));
          owner.push_back(s);
        }
      }
      batches += batch_groups(round).size();
      chunks += round.size();
      const std::vector<std::vector<float>> audio = vocode_chunks(ctx, model, round);
      for (size_t i = 0; i < round.size(); ++i) {
        got[owner[i]].insert(got[owner[i]].end(), audio[i].begin(), audio[i].end());
      }
    }
    for (size_t s = 0; s < lengths.size(); ++s) {
      SCOPED_TRACE("stream " + std::to_string(s));
      EXPECT_TRUE(chunkers[s].done());
      const Tensor want = unchunked(ctx, model, mels[s]);
      ASSERT_EQ(static_cast<int64_t>(got[s].size()), want.numel());
      if (dtype == DType::F32) {
        const std::vector<float> e = want.to_float_vector();
        float worst = 0.0f;
        for (size_t i = 0; i < e.size(); ++i) worst = std::max(worst, std::abs(got[s][i] - e[i]));
        EXPECT_LE(worst, 1e-4f);
      } else {
        EXPECT_LE(relative_l2(Tensor::from_vector(want.shape(), got[s]), want), 1e-2);
      }
    }
    std::cout << fixture << " " << dtype_name(dtype) << " chunk_frames " << chunk_frames << ": "
              << chunks << " chunks in " << batches << " batches\n";
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ChunkedOnCuda,
                         ::testing::Combine(::testing::Values("v1", "v2", "v3", "hop300"),
                                            ::testing::Values(DType::F32, DType::F16)),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::get<0>(info.param) + "_" +
                                  std::string(dtype_name(std::get<1>(info.param)));
                         });

// Peak device memory (activations and the batch's mel) of vocoding a stream chunk by chunk, one
// chunk per run, with the model's weights in another allocator.
size_t chunked_peak(const HifiGan& model, const Tensor& mel, int64_t chunk_frames) {
  CudaDeviceAllocator activations(0);
  Context ctx(cuda_backend(), activations);
  VocoderChunker chunker(model.config(), chunk_frames);
  chunker.append(mel);
  chunker.finish();
  while (chunker.has_chunk()) vocode_chunks(ctx, model, {chunker.next_chunk()});
  return activations.stats().peak_allocated_bytes;
}

TEST(ChunkedOnCudaMemory, PeakDoesNotGrowWithStreamLength) {
  const std::string dir = source_dir() + "/tests/fixtures/hifigan/v1/";
  const HifiGanConfig config = read_config(dir);
  CudaDeviceAllocator weights(0);
  Context ctx(cuda_backend(), weights);
  const HifiGan model =
      HifiGan::load(ctx, config, *SafetensorsFile::open(dir + "generator.safetensors"));
  const Tensor short_mel = random_mel({config.num_mels, 300}, 1);
  const Tensor long_mel = random_mel({config.num_mels, 1200}, 2);
  const size_t short_peak = chunked_peak(model, short_mel, 32);
  const size_t long_peak = chunked_peak(model, long_mel, 32);
  EXPECT_EQ(short_peak, long_peak);
  CudaDeviceAllocator whole(0);
  Context whole_ctx(cuda_backend(), whole);
  unchunked(whole_ctx, model, long_mel);
  EXPECT_LT(long_peak, whole.stats().peak_allocated_bytes);
  std::cout << "peak device memory, chunks of 32 frames: " << long_peak
            << " bytes; 1200 frames at once: " << whole.stats().peak_allocated_bytes << " bytes\n";
}

}  // namespace
}  // namespace voxd
