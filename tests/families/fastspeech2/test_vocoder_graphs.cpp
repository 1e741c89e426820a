// VocoderGraphs on backends that cannot record graphs (cpu, reference): run(), start() then
// finish() (one at a time), and vocode_chunks through it give the eager audio bit for bit and
// hold no memory, shapes other than the graphs' are refused, and the Synthesizer's
// use_cuda_graphs switch changes nothing there; the memory the graphs share. The recorded path
// itself is tested on the GPU (tests/cuda/test_cuda_graphs.cpp).
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backends/registry.h"
#include "core/error.h"
#include "core/safetensors.h"
#include "families/fastspeech2/hifigan.h"
#include "families/fastspeech2/synthesizer.h"
#include "families/fastspeech2/vocoder_chunker.h"
#include "families/fastspeech2/vocoder_graphs.h"
#include "families/fastspeech2/voice.h"
#include "vocoder_test_util.h"

namespace voxd {
namespace {

using testing::random_mel;

const std::string kFixtures = std::string(VOXD_SOURCE_DIR) + "/tests/fixtures/hifigan/";
const std::string kTinyVoice = std::string(VOXD_SOURCE_DIR) + "/tests/fixtures/voices/tiny-arpabet";
// One CPU thread: these tests compare audio, not speed.
constexpr int kThreads = 1;

HifiGanConfig read_config(const std::string& fixture) {
  return testing::read_hifigan_config(kFixtures + fixture + "/config.json");
}

// A fixture's generator on one backend.
struct Vocoder {
  Vocoder(const std::string& fixture, const std::string& backend_name)
      : config(read_config(fixture)),
        backend(make_backend(backend_name, kThreads)),
        ctx(*backend, host_allocator()),
        model(HifiGan::load(
            ctx, config, *SafetensorsFile::open(kFixtures + fixture + "/generator.safetensors"))) {}

  // Host mel [B, n_mels, T] vocoded eagerly, as host F32.
  std::vector<float> eager(const Tensor& mel) {
    return ops::to_host(ctx, model.forward(ctx, ops::to_device(ctx, mel))).to_float_vector();
  }

  HifiGanConfig config;
  std::unique_ptr<Backend> backend;
  Context ctx;
  HifiGan model;
};

class GraphsWithoutCapture : public ::testing::TestWithParam<const char*> {};

TEST_P(GraphsWithoutCapture, BackendRecordsNothing) {
  std::unique_ptr<Backend> backend = make_backend(GetParam(), kThreads);
  EXPECT_FALSE(backend->can_capture());
  bool ran = false;
  EXPECT_EQ(backend->capture([&] { ran = true; }), nullptr);
  EXPECT_FALSE(ran);
}

TEST_P(GraphsWithoutCapture, RunEqualsEagerAndHoldsNothing) {
  Vocoder v("v1", GetParam());
  const int64_t frames = 2 * v.config.receptive_field_frames() + 8;
  VocoderGraphs graphs(v.ctx, v.model, frames);
  EXPECT_FALSE(graphs.enabled());
  EXPECT_EQ(graphs.frames(), frames);
  unsigned seed = 1;
  for (int64_t batch : {1, 3, 1}) {
    const Tensor mel = random_mel({batch, v.config.num_mels, frames}, seed++);
    const Tensor got = graphs.run(mel);
    EXPECT_EQ(got.shape(), (Shape{batch, v.config.output_length(frames)}));
    EXPECT_EQ(got.dtype(), DType::F32);
    EXPECT_EQ(got.to_float_vector(), v.eager(mel)) << "batch " << batch;
  }
  EXPECT_EQ(graphs.graphs(), 0u);
  EXPECT_EQ(graphs.bytes(), 0u);
}

TEST_P(GraphsWithoutCapture, StartThenFinishIsRunAndOneRunAtATime) {
  Vocoder v("v1", GetParam());
  const int64_t frames = 2 * v.config.receptive_field_frames() + 8;
  VocoderGraphs graphs(v.ctx, v.model, frames);
  EXPECT_THROW((void)graphs.finish(), Error) << "a finish without a start";
  const Tensor mel = random_mel({2, v.config.num_mels, frames}, 7);
  graphs.start(mel);
  EXPECT_THROW(graphs.start(mel), Error) << "a second start before the first's finish";
  EXPECT_THROW(graphs.run(mel), Error) << "a run before the started one's finish";
  EXPECT_THROW(graphs.clear(), Error) << "a clear before the started one's finish";
  EXPECT_EQ(graphs.finish().to_float_vector(), v.eager(mel));
  EXPECT_EQ(graphs.run(mel).to_float_vector(), v.eager(mel));
}

TEST_P(GraphsWithoutCapture, VocodeChunksThroughGraphsEqualsWithout) {
  Vocoder v("v2", GetParam());
  const int64_t chunk_frames = 6;
  const int64_t r = v.config.receptive_field_frames();
  std::vector<MelChunk> chunks;
  for (int64_t frames : {3 * r + 20, 2 * r + 5, int64_t{4}}) {
    VocoderChunker chunker(v.config, chunk_frames);
    chunker.append(random_mel({v.config.num_mels, frames}, static_cast<unsigned>(frames)));
    chunker.finish();
    for (MelChunk& chunk : chunker.take_chunks()) chunks.push_back(std::move(chunk));
  }
  VocoderGraphs graphs(v.ctx, v.model, chunk_frames + 2 * r);
  size_t interior = 0;
  for (const MelChunk& c : chunks) interior += c.mel.size(1) == graphs.frames() ? 1 : 0;
  ASSERT_GE(interior, 2u) << "the streams must have interior chunks to batch";
  EXPECT_EQ(vocode_chunks(v.ctx, v.model, chunks, &graphs), vocode_chunks(v.ctx, v.model, chunks));
  EXPECT_EQ(graphs.bytes(), 0u);
}

TEST_P(GraphsWithoutCapture, OtherShapesAreRefused) {
  Vocoder v("v3", GetParam());
  EXPECT_THROW(VocoderGraphs(v.ctx, v.model, 0), InputError);
  VocoderGraphs graphs(v.ctx, v.model, 10);
  for (const Shape& shape :
       {Shape{1, v.config.num_mels, 11}, Shape{v.config.num_mels, 10},
        Shape{2, v.config.num_mels + 1, 10}, Shape{0, v.config.num_mels, 10}}) {
    try {
      graphs.run(Tensor::zeros(shape, DType::F32));
      ADD_FAILURE() << "no error for " << shape_to_string(shape);
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("[B, " + std::to_string(v.config.num_mels) + ", 10]"),
                std::string::npos)
          << e.what();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(HostBackends, GraphsWithoutCapture, ::testing::Values("cpu", "reference"));

// What a sink received.
std::vector<float> synthesize(const Synthesizer& synthesizer, const SynthesisOptions& options) {
  std::vector<float> audio;
  synthesizer.synthesize_ids({60, 70, 80, 90, 100, 11, 42, 17, 23, 64, 55, 31}, options,
                             [&](const float* samples, size_t count) {
                               audio.insert(audio.end(), samples, samples + count);
                             });
  return audio;
}

TEST(SynthesizerGraphSwitch, OnAndOffGiveTheSameAudioAndNoGraphsOnTheHost) {
  std::unique_ptr<Backend> backend = make_backend("cpu", kThreads);
  Context ctx(*backend, host_allocator());
  std::unique_ptr<Voice> voice = Voice::load(ctx, kTinyVoice);
  const Synthesizer synthesizer(ctx, *voice);
  SynthesisOptions options;
  EXPECT_TRUE(options.use_cuda_graphs) << "graphs are on by default where the backend has them";
  options.chunk_frames = 4;
  const std::vector<float> on = synthesize(synthesizer, options);
  EXPECT_EQ(synthesizer.graph_bytes(), 0u);
  options.use_cuda_graphs = false;
  const std::vector<float> off = synthesize(synthesizer, options);
  ASSERT_FALSE(on.empty());
  EXPECT_EQ(on, off);
  EXPECT_EQ(synthesizer.graph_bytes(), 0u);
}

// SharedGraphMemory lays every arena that fits its current block over that block, takes a larger
// block from upstream for one that does not (the arenas placed before keep theirs), counts the
// blocks it holds, gives each back after the last arena over it, and then places new arenas over
// the largest block left: checked on host memory.
TEST(SharedGraphMemory, ArenasShareTheLargestBlockAndGiveItBackAfterTheLast) {
  const AllocatorStats upstream_before = host_allocator().stats();
  SharedGraphMemory memory(host_allocator());
  EXPECT_EQ(memory.bytes_to_place(4096), 4096u);
  void* first = memory.allocate(4096);
  EXPECT_EQ(memory.bytes_to_place(1024), 0u);
  EXPECT_EQ(memory.allocate(1024), first) << "a smaller arena lies over the block";
  EXPECT_EQ(memory.allocate(4096), first) << "so does one of the block's size";
  EXPECT_EQ(memory.bytes_to_place(8192), 8192u);
  void* larger = memory.allocate(8192);
  EXPECT_NE(larger, first);
  EXPECT_EQ(memory.allocate(2048), larger) << "new arenas go over the largest block";
  EXPECT_EQ(memory.stats().allocated_bytes, 4096u + 8192u);
  EXPECT_EQ(host_allocator().stats().allocated_bytes - upstream_before.allocated_bytes,
            4096u + 8192u);

  memory.deallocate(first, 4096);
  memory.deallocate(first, 1024);
  EXPECT_EQ(memory.stats().allocated_bytes, 4096u + 8192u) << "one arena is still over it";
  memory.deallocate(first, 4096);
  EXPECT_EQ(memory.stats().allocated_bytes, 8192u);
  memory.deallocate(larger, 2048);
  memory.deallocate(larger, 8192);
  EXPECT_EQ(memory.stats().allocated_bytes, 0u);
  EXPECT_EQ(memory.bytes_to_place(16), 16u) << "no block is held";

  // When the current block goes, new arenas go over the largest block left.
  void* small = memory.allocate(1024);
  void* big = memory.allocate(4096);
  EXPECT_NE(big, small);
  memory.deallocate(big, 4096);
  EXPECT_EQ(memory.bytes_to_place(512), 0u);
  EXPECT_EQ(memory.allocate(512), small);
  memory.deallocate(small, 512);
  memory.deallocate(small, 1024);
  EXPECT_EQ(memory.stats().allocated_bytes, 0u);
  EXPECT_EQ(host_allocator().stats().allocated_bytes, upstream_before.allocated_bytes);
  EXPECT_THROW(memory.deallocate(first, 4096), Error);
}

}  // namespace
}  // namespace voxd
