// CUDA graphs (CudaBackend::capture) of the vocoder (families/fastspeech2/vocoder_graphs.h):
// replaying the recorded forward pass gives the eager audio (F32 to 1e-5 absolute, F16 to 1e-3
// of the output's scale) for the V1-shaped fixture and the en-demo vocoder at batch sizes 1 and
// 4, over several replays with new mels each (a stale input would show), without any device
// allocation during a replay; chunked vocoding through the graphs equals it without them. Of the
// acoustic model (acoustic_graphs.h): replays with new inputs equal the padded eager steps, and
// voxd serve's acoustic steps through them speak as they do without them. Work that cannot be
// recorded fails with an error naming the op and leaves the backend usable.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "../families/fastspeech2/vocoder_test_util.h"
#include "../scheduler/run_job.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/runtime.h"
#include "core/error.h"
#include "core/memory_limit.h"
#include "core/ops.h"
#include "core/safetensors.h"
#include "cuda_test_util.h"
#include "families/fastspeech2/acoustic_graphs.h"
#include "families/fastspeech2/fastspeech2.h"
#include "families/fastspeech2/hifigan.h"
#include "families/fastspeech2/vocoder_chunker.h"
#include "families/fastspeech2/vocoder_graphs.h"
#include "families/fastspeech2/voice.h"
#include "families/registry.h"
#include "scheduler/engine_service.h"
#include "server/api_error.h"

namespace voxd {
namespace {

using testing::random_mel;

using testing::cuda_backend;
using testing::expect_close_scaled;
using testing::source_dir;

// A vocoder on the GPU: the V1-shaped fixture ("v1") or the en-demo voice's ("en-demo").
struct GpuVocoder {
  GpuVocoder(const std::string& name, DType dtype) : ctx(cuda_backend(), allocator) {
    if (name == "en-demo") {
      voice = Voice::load(ctx, source_dir() + "/voices/en-demo", dtype);
      return;
    }
    const std::string dir = source_dir() + "/tests/fixtures/hifigan/" + name + "/";
    const HifiGanConfig config = testing::read_hifigan_config(dir + "config.json");
    fixture = std::make_unique<HifiGan>(
        HifiGan::load(ctx, config, *SafetensorsFile::open(dir + "generator.safetensors"), dtype));
  }
  const HifiGan& model() const { return voice ? voice->vocoder() : *fixture; }

  // Host mel [B, n_mels, T] vocoded eagerly, as host F32.
  Tensor eager(const Tensor& mel) {
    return ops::to_host(ctx, model().forward(ctx, ops::to_device(ctx, mel, model().dtype())));
  }

  CudaDeviceAllocator allocator{0};
  Context ctx;
  std::unique_ptr<Voice> voice;
  std::unique_ptr<HifiGan> fixture;
};

void expect_matches(const Tensor& got, const Tensor& want, DType dtype, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  if (dtype == DType::F32) {
    const std::vector<float> a = got.to_float_vector();
    const std::vector<float> e = want.to_float_vector();
    float worst = 0;
    for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - e[i]));
    EXPECT_LE(worst, 1e-5f) << what;
  } else {
    expect_close_scaled(got, want, 1e-3, what);
  }
}

using Case = std::tuple<std::string, DType>;

class GraphsOnGpu : public ::testing::TestWithParam<Case> {};

TEST_P(GraphsOnGpu, ReplaysEqualEagerWithoutAllocating) {
  const auto& [name, dtype] = GetParam();
  GpuVocoder v(name, dtype);
  const HifiGanConfig& config = v.model().config();
  // The interior chunk shape of 32-frame chunks.
  const int64_t frames = 32 + 2 * config.receptive_field_frames();
  VocoderGraphs graphs(v.ctx, v.model(), frames);
  ASSERT_TRUE(graphs.enabled());
  unsigned seed = 10;
  uint64_t held = 0;
  for (int64_t batch : {int64_t{1}, int64_t{4}, int64_t{2}}) {
    Tensor previous;
    for (int replay = 0; replay < 4; ++replay) {
      const std::string what = name + " " + std::string(dtype_name(dtype)) + " batch " +
                               std::to_string(batch) + " run " + std::to_string(replay);
      const Tensor mel = random_mel({batch, config.num_mels, frames}, seed++);
      const Tensor want = v.eager(mel);
      const AllocatorStats before = v.allocator.stats();
      const Tensor got = graphs.run(mel);
      const AllocatorStats after = v.allocator.stats();
      expect_matches(got, want, dtype, what);
      if (replay == 0 && batch == 2) {
        // Recorded over the block batch 4 took (SharedGraphMemory): nothing allocated.
        EXPECT_EQ(after.num_allocs, before.num_allocs) << what;
        EXPECT_EQ(graphs.bytes(), held) << what;
      } else if (replay == 0) {
        // The first run records the graph and takes a block larger than any before: one
        // allocation, the batch before keeping its own.
        EXPECT_EQ(after.num_allocs, before.num_allocs + 1) << what;
        EXPECT_GT(graphs.bytes(), held) << what;
        EXPECT_GE(after.allocated_bytes - before.allocated_bytes, graphs.bytes() - held) << what;
        held = graphs.bytes();
      } else {
        EXPECT_EQ(after.num_allocs, before.num_allocs) << what;
        EXPECT_EQ(after.num_frees, before.num_frees) << what;
        EXPECT_EQ(after.allocated_bytes, before.allocated_bytes) << what;
        EXPECT_EQ(after.reserved_bytes, before.reserved_bytes) << what;
        EXPECT_NE(got.to_float_vector(), previous.to_float_vector())
            << what << ": a new mel gave the previous audio (stale input)";
      }
      previous = got;
    }
  }
  // Batches 4 and 2 lie over one block: each replay in turn still gives its own eager audio.
  for (const int64_t batch : {int64_t{4}, int64_t{2}, int64_t{4}, int64_t{1}}) {
    const Tensor mel = random_mel({batch, config.num_mels, frames}, seed++);
    expect_matches(graphs.run(mel), v.eager(mel), dtype,
                   name + " batch " + std::to_string(batch) + " after another over its memory");
  }
  EXPECT_EQ(graphs.graphs(), 3u);
  EXPECT_EQ(graphs.bytes(), held);
  const uint64_t allocated = v.allocator.stats().allocated_bytes;
  graphs.clear();
  EXPECT_EQ(graphs.graphs(), 0u);
  EXPECT_EQ(graphs.bytes(), 0u);
  EXPECT_EQ(v.allocator.stats().allocated_bytes + held, allocated);
}

TEST_P(GraphsOnGpu, ChunkedVocodingThroughGraphsEqualsWithout) {
  const auto& [name, dtype] = GetParam();
  GpuVocoder v(name, dtype);
  const HifiGanConfig& config = v.model().config();
  const int64_t chunk_frames = 24;
  const int64_t r = config.receptive_field_frames();
  std::vector<MelChunk> chunks;
  for (int64_t frames : {6 * chunk_frames + 5, 3 * chunk_frames, 2 * r + 3}) {
    VocoderChunker chunker(config, chunk_frames);
    chunker.append(random_mel({config.num_mels, frames}, static_cast<unsigned>(frames)));
    chunker.finish();
    for (MelChunk& chunk : chunker.take_chunks()) chunks.push_back(std::move(chunk));
  }
  VocoderGraphs graphs(v.ctx, v.model(), chunk_frames + 2 * r);
  const std::vector<std::vector<float>> want = vocode_chunks(v.ctx, v.model(), chunks);
  for (int round = 0; round < 2; ++round) {
    const std::vector<std::vector<float>> got = vocode_chunks(v.ctx, v.model(), chunks, &graphs);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      const auto n = static_cast<int64_t>(want[i].size());
      expect_close_scaled(Tensor::from_vector({n}, got[i]), Tensor::from_vector({n}, want[i]),
                          dtype == DType::F32 ? 1e-5 : 1e-3,
                          name + " chunk " + std::to_string(i) + " round " + std::to_string(round));
    }
  }
  EXPECT_EQ(graphs.graphs(), 1u) << "one batch size of interior chunks";
}

INSTANTIATE_TEST_SUITE_P(Vocoders, GraphsOnGpu,
                         ::testing::Combine(::testing::Values("v1", "en-demo"),
                                            ::testing::Values(DType::F32, DType::F16)),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           std::string name = std::get<0>(info.param);
                           for (char& c : name) c = c == '-' ? '_' : c;
                           return name + "_" + std::string(dtype_name(std::get<1>(info.param)));
                         });

// The acoustic model's graphs (families/fastspeech2/acoustic_graphs.h) on the multi-speaker
// "batch" fixture: each run equals FastSpeech2's eager steps with the same padding, while later
// runs replay the recorded graphs with new symbols, lengths and speakers (a value read when
// recording instead of when replaying would show), and a repeated shape records nothing more.
class AcousticGraphsOnGpu : public ::testing::TestWithParam<DType> {};

TEST_P(AcousticGraphsOnGpu, ReplaysEqualThePaddedEagerStepsWithNewInputs) {
  const DType dtype = GetParam();
  CudaDeviceAllocator allocator(0);
  Context ctx(cuda_backend(), allocator);
  const std::string dir = source_dir() + "/tests/fixtures/fastspeech2/batch/";
  std::ifstream config_file(dir + "config.json");
  const FastSpeech2Config config =
      FastSpeech2Config::from_json(nlohmann::json::parse(config_file), "batch");
  const FastSpeech2 model =
      FastSpeech2::load(ctx, config, *SafetensorsFile::open(dir + "acoustic.safetensors"), dtype);
  const auto io = SafetensorsFile::open(dir + "io.safetensors");
  const std::vector<int64_t> flat = io->get("ids").to_int_vector();
  const int64_t stride = io->get("ids").size(1);
  const std::vector<int64_t> lengths = io->get("src_lens").to_int_vector();
  const std::vector<int64_t> fixture_speakers = io->get("speakers").to_int_vector();
  ASSERT_GE(lengths.size(), 2u);
  ASSERT_GE(model.n_speakers(), 2);

  AcousticGraphs graphs(ctx, model, uint64_t{1} << 30);
  ASSERT_TRUE(graphs.enabled());
  // Round r: the fixture's first sequence whole, the others cut by r symbols, speakers swapped
  // on odd rounds; round 3 repeats round 1, so it meets only shapes recorded before.
  for (const int round : {0, 1, 2, 3}) {
    const int cut = round == 3 ? 1 : round;
    std::vector<std::vector<int64_t>> ids;
    std::vector<int64_t> speakers;
    for (size_t b = 0; b < lengths.size(); ++b) {
      const int64_t length = b == 0 ? lengths[b] : std::max<int64_t>(1, lengths[b] - cut);
      const auto row = flat.begin() + static_cast<int64_t>(b) * stride;
      ids.emplace_back(row, row + length);
      speakers.push_back(cut % 2 == 1 ? 1 - std::min<int64_t>(fixture_speakers[b], 1)
                                      : fixture_speakers[b]);
    }
    const size_t graphs_before = graphs.graphs();
    const uint64_t bytes_before = graphs.bytes();
    const AcousticOutput replayed = graphs.run(ids, speakers, {});

    SynthesisControls padded;
    padded.mask_padding = true;
    size_t longest = 0;
    for (const auto& sequence : ids) longest = std::max(longest, sequence.size());
    padded.pad_to_phonemes = graphs.padded(static_cast<int64_t>(longest));
    const AcousticEncoding encoding = model.encode(ctx, ids, speakers, padded);
    padded.pad_to_frames =
        graphs.padded(*std::max_element(encoding.mel_lengths.begin(), encoding.mel_lengths.end()));
    const AcousticOutput eager = model.decode(ctx, encoding, padded);
    const std::string what = "round " + std::to_string(round);
    EXPECT_EQ(replayed.durations, eager.durations) << what;
    EXPECT_EQ(replayed.mel_lengths, eager.mel_lengths) << what;
    expect_matches(ops::to_host(ctx, replayed.mel, DType::F32),
                   ops::to_host(ctx, eager.mel, DType::F32), dtype, what);
    if (round == 3) {
      EXPECT_EQ(graphs.graphs(), graphs_before) << "a shape met before was recorded again";
      EXPECT_EQ(graphs.bytes(), bytes_before);
    }
  }
  EXPECT_GE(graphs.graphs(), 2u);
  EXPECT_GT(graphs.bytes(), 0u);

  // Graphs that would pass max_bytes are not recorded: the run is eager, with the same result.
  AcousticGraphs tiny(ctx, model, 1);
  std::vector<std::vector<int64_t>> ids;
  for (size_t b = 0; b < lengths.size(); ++b) {
    const auto row = flat.begin() + static_cast<int64_t>(b) * stride;
    ids.emplace_back(row, row + lengths[b]);
  }
  const AcousticOutput eager_run = tiny.run(ids, fixture_speakers, {});
  EXPECT_EQ(tiny.graphs(), 0u);
  const AcousticOutput recorded_run = graphs.run(ids, fixture_speakers, {});
  EXPECT_EQ(eager_run.durations, recorded_run.durations);
  expect_matches(ops::to_host(ctx, recorded_run.mel, DType::F32),
                 ops::to_host(ctx, eager_run.mel, DType::F32), dtype, "eager against recorded");
}

INSTANTIATE_TEST_SUITE_P(Dtypes, AcousticGraphsOnGpu, ::testing::Values(DType::F32, DType::F16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(dtype_name(info.param));
                         });

// voxd serve's steps through recorded graphs speak as they do without them: en-demo in F32 says
// each text alone and four at once (batched into steps of several sentences and chunks) with the
// same audio. Text through eSpeak NG (ESPEAK_DATA_PATH on the GPU machine).
scheduler::EngineConfig served_config(uint64_t acoustic_graph_bytes, bool vocoder_graphs = true) {
  scheduler::EngineConfig config;
  config.families = &families::registry();
  config.voice_dirs = {source_dir() + "/voices/en-demo"};
  config.runtime.backend = "cuda";
  config.dtype = DType::F32;
  config.max_batch = 8;
  config.acoustic_graph_bytes = acoustic_graph_bytes;
  config.cuda_graphs = vocoder_graphs;
  return config;
}

server::SpeechRequest served_request(const std::string& text) {
  server::SpeechRequest r;
  r.model = "voxd";
  r.input = text;
  r.voice = "en-demo";
  return r;
}

const std::vector<std::string> kServedTexts = {
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "A quick brown cat walks under the busy bridge near the old town.",
    "The small grey mouse runs across the quiet room past the sleeping dog.",
    "Graphs replay the same kernels."};

// kServedTexts spoken one at a time by a server of `config`, and the persistent bytes it held.
struct SpokenAlone {
  std::vector<std::vector<float>> audio;
  uint64_t persistent_bytes = 0;
};
SpokenAlone speak_alone(const scheduler::EngineConfig& config) {
  scheduler::EngineService service(config);
  SpokenAlone spoken;
  for (const std::string& text : kServedTexts) {
    spoken.audio.push_back(scheduler::speak(service, served_request(text)));
  }
  spoken.persistent_bytes = service.runtime().persistent_bytes();
  return spoken;
}

// `service` speaks kServedTexts one at a time, then all at once, as `expected`.
void expect_alone_as(scheduler::EngineService& service,
                     const std::vector<std::vector<float>>& expected) {
  for (size_t i = 0; i < kServedTexts.size(); ++i) {
    scheduler::expect_same_audio(expected[i],
                                 scheduler::speak(service, served_request(kServedTexts[i])),
                                 "alone: " + kServedTexts[i]);
  }
}
void expect_together_as(scheduler::EngineService& service,
                        const std::vector<std::vector<float>>& expected) {
  std::vector<std::unique_ptr<server::SpeechJob>> jobs;
  for (const std::string& text : kServedTexts) jobs.push_back(service.admit(served_request(text)));
  const std::vector<std::vector<float>> together = scheduler::run_all(jobs);
  for (size_t i = 0; i < kServedTexts.size(); ++i) {
    scheduler::expect_same_audio(expected[i], together[i], "together: " + kServedTexts[i]);
  }
}

// Acoustic steps of up to kGraphSentences sentences go through the voice's AcousticGraphs
// (AcousticKind), and their arenas show as persistent bytes only when they are on.
TEST(AcousticGraphsServed, SpeakAsWithoutThemAloneAndBatched) {
  const SpokenAlone without = speak_alone(served_config(0));
  scheduler::EngineService service(served_config(uint64_t{256} << 20));
  expect_alone_as(service, without.audio);
  const uint64_t persistent_alone = service.runtime().persistent_bytes();
  ASSERT_GT(persistent_alone, without.persistent_bytes) << "no acoustic graph was recorded";
  expect_together_as(service, without.audio);
  EXPECT_GT(service.step_counts("acoustic").largest_batch, 1);
  // A batch of several is a shape of its own: it was recorded too, not run eagerly.
  EXPECT_GT(service.runtime().persistent_bytes(), persistent_alone);
  EXPECT_LE(service.runtime().persistent_bytes() - without.persistent_bytes, uint64_t{256} << 20);
}

// Vocoder steps of interior chunks and of streams' first chunks go through the voice's
// VocoderGraphs for their shape (VocoderKind; the acoustic graphs off), all of whose arenas lie
// over one block (SharedGraphMemory): the server holds at least the largest graph's (interior
// chunks at max_batch, recorded here apart) more than a server without them, and less than twice
// it, where both shapes' graphs at batches 1, 2, 4 and 8 in arenas of their own would hold about
// three times it.
TEST(VocoderGraphsServed, FirstAndInteriorChunksSpeakAsWithoutThem) {
  const SpokenAlone without = speak_alone(served_config(0, false));
  const scheduler::EngineConfig config = served_config(0);
  scheduler::EngineService service(config);
  expect_alone_as(service, without.audio);
  expect_together_as(service, without.audio);
  EXPECT_GT(service.step_counts("vocoder").largest_batch, 1);

  GpuVocoder v("en-demo", DType::F32);
  const int64_t frames = config.chunk_frames + 2 * v.model().config().receptive_field_frames();
  VocoderGraphs largest(v.ctx, v.model(), frames);
  (void)largest.run(
      Tensor::zeros({config.max_batch, v.model().config().num_mels, frames}, DType::F32));
  const uint64_t held = service.runtime().persistent_bytes() - without.persistent_bytes;
  EXPECT_GE(held, largest.bytes());
  EXPECT_LT(held, 2 * largest.bytes());
}

// A replay started on lane 0 (VocoderGraphs::start) and the acoustic model run whole on lane 1
// meanwhile (DeviceRuntime::lanes: two streams, one allocator, lane 1's going first) each give
// what they give alone, and no replay over the graphs' memory may start before the started one
// is finished.
TEST(LanesOnGpu, AReplayInFlightAndAnAcousticStepBesideItGiveWhatEachGivesAlone) {
  DeviceRuntime runtime({.backend = "cuda"});
  ASSERT_EQ(runtime.lanes(), 2u);
  ASSERT_NE(&runtime.backend(0), &runtime.backend(1));
  int least = 0;
  int greatest = 0;
  ASSERT_EQ(cudaDeviceGetStreamPriorityRange(&least, &greatest), cudaSuccess);
  ASSERT_LT(greatest, least) << "the device has one stream priority";
  EXPECT_EQ(dynamic_cast<CudaBackend&>(runtime.backend(0)).stream_priority(), least);
  EXPECT_EQ(dynamic_cast<CudaBackend&>(runtime.backend(1)).stream_priority(), greatest);
  EXPECT_EQ(&runtime.context(1).allocator(), &runtime.allocator());
  EXPECT_EQ(&runtime.context(1).backend(), &runtime.backend(1));
  const std::unique_ptr<Voice> voice =
      Voice::load(runtime.weights_context(), source_dir() + "/voices/en-demo", DType::F32);
  const HifiGan& vocoder = voice->vocoder();
  const FastSpeech2& acoustic = voice->acoustic();
  const int64_t frames = 64 + 2 * vocoder.config().receptive_field_frames();
  VocoderGraphs graphs(runtime.persistent_context(), vocoder, frames);
  ASSERT_TRUE(graphs.enabled());

  std::vector<std::vector<int64_t>> ids(4);
  for (size_t b = 0; b < ids.size(); ++b) {
    for (int64_t i = 0; i < 24 + 6 * static_cast<int64_t>(b); ++i) {
      ids[b].push_back(1 + (i * 7 + static_cast<int64_t>(b) * 3) % (acoustic.n_symbols() - 1));
    }
  }
  const auto acoustic_mel = [&](Context& ctx) {
    SynthesisControls controls;
    controls.mask_padding = true;
    const AcousticEncoding encoding = acoustic.encode(ctx, ids, {}, controls);
    return ops::to_host(ctx, acoustic.decode(ctx, encoding, controls).mel, DType::F32);
  };
  Context& lane0 = runtime.context(0);
  const Tensor acoustic_alone = acoustic_mel(lane0);
  unsigned seed = 40;
  for (int round = 0; round < 3; ++round) {
    const std::string what = "round " + std::to_string(round);
    const Tensor mel = random_mel({16, vocoder.config().num_mels, frames}, seed++);
    const Tensor want = ops::to_host(
        lane0, vocoder.forward(lane0, ops::to_device(lane0, mel, vocoder.dtype())), DType::F32);
    graphs.start(mel);
    EXPECT_THROW(graphs.start(mel), Error) << what << ": a replay over a started one's output";
    const Tensor beside = acoustic_mel(runtime.context(1));
    const Tensor audio = graphs.finish();
    expect_matches(audio, want, DType::F32, what + ": the replay in flight");
    expect_matches(beside, acoustic_alone, DType::F32, what + ": the acoustic model beside it");
  }
}

// Requests of several sentences, so that acoustic steps (lane 1) run while the vocoder's replays
// (lane 0) are in flight: the audio is what a server that runs one step at a time makes, alone
// and batched.
TEST(StepsBesideServed, SpeakAsOneStepAtATime) {
  const std::vector<std::string> texts = {
      kServedTexts[0] + " " + kServedTexts[1] + " " + kServedTexts[3],
      kServedTexts[2] + " " + kServedTexts[3] + " " + kServedTexts[0],
      kServedTexts[1] + " " + kServedTexts[2]};
  const scheduler::EngineConfig one_at_a_time = served_config(0);
  ASSERT_FALSE(one_at_a_time.overlap_steps) << "steps side by side are on by default";
  scheduler::EngineConfig side_by_side = served_config(0);
  side_by_side.overlap_steps = true;
  std::vector<std::vector<float>> expected;
  {
    scheduler::EngineService service(one_at_a_time);
    for (const std::string& text : texts) {
      expected.push_back(scheduler::speak(service, served_request(text)));
    }
    EXPECT_EQ(service.step_counts("acoustic").beside, 0u);
  }
  scheduler::EngineService service(side_by_side);
  for (size_t i = 0; i < texts.size(); ++i) {
    scheduler::expect_same_audio(expected[i], scheduler::speak(service, served_request(texts[i])),
                                 "alone: " + texts[i]);
  }
  std::vector<std::unique_ptr<server::SpeechJob>> jobs;
  for (const std::string& text : texts) jobs.push_back(service.admit(served_request(text)));
  const std::vector<std::vector<float>> together = scheduler::run_all(jobs);
  for (size_t i = 0; i < texts.size(); ++i) {
    scheduler::expect_same_audio(expected[i], together[i], "together: " + texts[i]);
  }
  EXPECT_GT(service.step_counts("acoustic").beside, 0u)
      << "no acoustic step ran while a vocoder step was in flight";
  EXPECT_EQ(service.step_counts("vocoder").beside, 0u);
}

// Memory held by recorded acoustic steps goes back for a step that needs it. The smallest limit
// (to kLimitStep) at which a server without acoustic graphs speaks a long sentence is found
// first, with the persistent bytes (weights, vocoder graphs) it held then; then the least margin
// over that limit at which shorter sentences, spoken first, leave acoustic graphs recorded, which
// must hold more than the margin. The long sentence has no room beside what is held, and it is
// spoken, with the same audio: the scheduler releases recordings before a step that does not
// fit, the acoustic graphs make room among themselves for a new shape, and an eager decoder after
// a recorded encoder reads a copy of its hidden states so that they may go too. Steps of one
// chunk and no warm-up while idle keep the cached memory the same in every server.
TEST(AcousticGraphsServed, GiveTheirMemoryBackToALongSentenceUnderALimit) {
  constexpr uint64_t kLimitStep = uint64_t{256} << 10;
  constexpr uint64_t kGraphBytes = uint64_t{256} << 20;
  const std::string long_text =
      "When the evening train finally left the crowded station in the middle of the winter "
      "storm, every passenger on board was quietly hoping that the long journey across the "
      "frozen northern mountains would end safely before the sun rose again over the valley "
      "where their families were waiting for them with warm bread and hot tea";
  const std::vector<std::string> short_texts = {
      "The quick brown fox jumps over the lazy dog near the river bank.",
      "A quick brown cat walks under the busy bridge near the old town.",
      "The small grey mouse runs across the quiet room past the sleeping dog.",
      "Graphs replay the same kernels."};
  const auto config_of = [](uint64_t graph_bytes, uint64_t limit) {
    scheduler::EngineConfig config = served_config(graph_bytes);
    config.runtime.memory_limit = MemoryAmount::bytes(limit);
    config.request_timeout = std::chrono::seconds(30);  // a wait for memory ends, as a refusal
    config.max_batch = 1;
    config.warm_up_while_idle = false;
    return config;
  };
  // Whether a server without acoustic graphs speaks the long sentence at `limit`, and the
  // persistent bytes it held then (weights, the vocoder's graphs).
  uint64_t persistent_at_fits = 0;
  const auto speaks_long_text = [&](uint64_t limit) {
    try {
      scheduler::EngineService service(config_of(0, limit));
      const bool spoken = !scheduler::speak(service, served_request(long_text)).empty();
      if (spoken) persistent_at_fits = service.runtime().persistent_bytes();
      return spoken;
    } catch (const server::ApiError&) {  // refused: 413 or 503
      return false;
    } catch (const std::exception&) {  // no room for the voice itself
      return false;
    }
  };
  // The persistent bytes `service` holds after the short sentences.
  const auto after_short_texts = [&](scheduler::EngineService& service) {
    for (const std::string& text : short_texts)
      (void)scheduler::speak(service, served_request(text));
    return service.runtime().persistent_bytes();
  };
  std::vector<float> expected;
  uint64_t fits = 0;
  {
    scheduler::EngineService unlimited(config_of(0, uint64_t{64} << 30));
    expected = scheduler::speak(unlimited, served_request(long_text));
    fits = 2 * unlimited.runtime().allocator().stats().peak_reserved_bytes;
  }
  ASSERT_TRUE(speaks_long_text(fits));
  uint64_t too_little = 0;
  while (fits - too_little > kLimitStep) {
    const uint64_t middle = too_little + (fits - too_little) / 2;
    (speaks_long_text(middle) ? fits : too_little) = middle;
  }
  ASSERT_TRUE(speaks_long_text(fits));  // persistent_at_fits is this limit's

  // The least margin over fits (to kLimitStep) at which the short sentences' acoustic graphs
  // stay recorded: with less, their own steps need the memory.
  const auto held_after_short_texts = [&](uint64_t margin) {
    scheduler::EngineService probe(config_of(kGraphBytes, fits + margin));
    const uint64_t held = after_short_texts(probe);
    std::cout << "limit " << fits << " + " << margin << ": held " << held << " bytes after the "
              << "short sentences, " << persistent_at_fits << " with the long one at " << fits
              << "\n";
    return held;
  };
  uint64_t margin = fits;
  ASSERT_GT(held_after_short_texts(margin), persistent_at_fits) << "no acoustic graph was kept";
  uint64_t not_kept = 0;
  while (margin - not_kept > kLimitStep) {
    const uint64_t middle = not_kept + (margin - not_kept) / 2;
    (held_after_short_texts(middle) > persistent_at_fits ? margin : not_kept) = middle;
  }
  // At fits + margin the long sentence has room beside what the server holds only while that is
  // at most persistent_at_fits + margin.
  const auto crowds_out = [&](uint64_t held) {
    return held > persistent_at_fits + margin + kLimitStep;
  };
  ASSERT_TRUE(crowds_out(held_after_short_texts(margin)))
      << "the acoustic graphs the short sentences keep leave the long sentence room beside them: "
         "the test proves nothing";
  scheduler::EngineService service(config_of(kGraphBytes, fits + margin));
  const uint64_t persistent_with_graphs = after_short_texts(service);
  ASSERT_TRUE(crowds_out(persistent_with_graphs)) << "the server holds less than the probe";
  scheduler::expect_same_audio(expected, scheduler::speak(service, served_request(long_text)),
                               "the long sentence under the limit");
  EXPECT_LT(service.runtime().persistent_bytes(), persistent_with_graphs)
      << "no recording was released for the long sentence";
}

TEST(CaptureOnGpu, UncapturableWorkFailsNamingTheOpAndTheBackendStaysUsable) {
  CudaDeviceAllocator allocator(0);
  Context ctx(cuda_backend(), allocator);
  const Tensor x =
      ops::to_device(ctx, Tensor::from_vector({4}, std::vector<float>{1.0f, -2.0f, 3.0f, -4.0f}));
  Tensor device = ops::empty(ctx, {4});
  Tensor host = Tensor::empty({4}, DType::F32);
  const auto message_of = [](const std::function<void()>& work) -> std::string {
    try {
      cuda_backend().capture(work);
    } catch (const Error& e) {
      return e.what();
    }
    ADD_FAILURE() << "the work was recorded";
    return "";
  };
  std::string message = message_of([&] { cuda_backend().copy(x, host, ctx.scratch()); });
  EXPECT_NE(message.find("cuda: capture:"), std::string::npos) << message;
  EXPECT_NE(message.find("copy: a copy to the host"), std::string::npos) << message;
  message = message_of([&] { cuda_backend().copy(host, device, ctx.scratch()); });
  EXPECT_NE(message.find("copy: an upload of host data"), std::string::npos) << message;
  // A tensor from cudaMalloc inside the recording: the reason graphs run in an arena.
  message = message_of([&] { ops::relu(ctx, x); });
  EXPECT_NE(message.find("cuda: capture:"), std::string::npos) << message;
  EXPECT_EQ(ops::to_host(ctx, ops::relu(ctx, x)).to_float_vector(),
            (std::vector<float>{1.0f, 0.0f, 3.0f, 0.0f}));
  cuda_backend().synchronize();
}

TEST(CaptureOnGpu, RecordedWorkRunsOnlyOnReplayAndReadsItsInputThen) {
  CudaDeviceAllocator allocator(0);
  Context ctx(cuda_backend(), allocator);
  Tensor x = ops::to_device(ctx, Tensor::from_vector({3}, std::vector<float>{1.0f, 2.0f, 3.0f}));
  Tensor out = ops::zeros(ctx, {3});
  std::unique_ptr<CapturedWork> work =
      cuda_backend().capture([&] { cuda_backend().unary(x, out, UnaryOp::Scale, 2.0f); });
  ASSERT_NE(work, nullptr);
  EXPECT_EQ(ops::to_host(ctx, out).to_float_vector(), (std::vector<float>{0.0f, 0.0f, 0.0f}));
  work->replay();
  EXPECT_EQ(ops::to_host(ctx, out).to_float_vector(), (std::vector<float>{2.0f, 4.0f, 6.0f}));
  cuda_backend().copy(Tensor::from_vector({3}, std::vector<float>{5.0f, 6.0f, 7.0f}), x,
                      ctx.scratch());
  work->replay();
  EXPECT_EQ(ops::to_host(ctx, out).to_float_vector(), (std::vector<float>{10.0f, 12.0f, 14.0f}));
}

}  // namespace
}  // namespace voxd
