// Times host work the server's device thread does around FastSpeech2 + HiFiGAN steps, outside
// their kernels, at the shapes a burst meets; on a GPU the device waits for it.
// - Planning a step of a new shape (the plan caches keep it for the next), for the CUDA backend
//   without opening a device (CudaBackend::PlanOnly, as `voxd mem --device cuda` does) or for
//   the CPU backend; the voice is loaded in a planning context, so nothing runs. The first plan
//   of each kind in the process, and the median of the later ones.
// - Handing an acoustic step's mel ([B, frames, n_mels] on the host) to each stream's new
//   VocoderChunker, copied (append) or kept as a view (append_shared, as AcousticKind does), the
//   streams keeping their chunkers round after round as a burst's do.
// - The vocoder's proposal (VocoderKind::propose) over a burst's streams on the CPU backend: of
//   --streams streams, --batch have just had an acoustic step's mel handed to them (their first
//   chunks are made during the proposal), a quarter of the rest are playing with chunks in hand,
//   the others wait for the acoustic model; then the same proposal again with those chunks made.
//   And the first chunks alone: VocoderChunker::next_chunk for the step's streams.
// Prints a Markdown table.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/runtime.h"
#include "core/error.h"
#include "core/workspace_arena.h"
#include "families/fastspeech2/family.h"
#include "families/fastspeech2/sentence_work.h"
#include "families/fastspeech2/vocoder_chunker.h"
#include "families/fastspeech2/vocoder_kind.h"
#include "families/fastspeech2/voice.h"
#include "families/fastspeech2/workspace_steps.h"
#include "families/registry.h"
#include "scheduler/voice_pool.h"
#ifdef VOXD_HAVE_CUDA
#include "backends/cuda/cuda_backend.h"
#endif

namespace {

using Clock = std::chrono::steady_clock;

std::unique_ptr<voxd::Backend> planning_backend(const std::string& device) {
  if (device == "cpu") return std::make_unique<voxd::CpuBackend>(0);
#ifdef VOXD_HAVE_CUDA
  if (device == "cuda") {
    return std::make_unique<voxd::CudaBackend>(0, voxd::CudaBackend::PlanOnly{});
  }
#endif
  throw voxd::InputError("--device: expected cpu or cuda (a build with CUDA), got '" + device +
                         "'");
}

struct Times {
  double first_ms = 0;   // the first run in the process
  double median_ms = 0;  // the median of the others
  size_t blocks = 0;     // a plan's blocks (the arena's requests, which planning walks); 0: no plan
};

// `repeats` + 1 timings of `run`, which returns the blocks of the plan it made (or 0), each
// after an untimed `prepare`.
template <typename Prepare, typename Run>
Times time_runs_after(int repeats, const Prepare& prepare, const Run& run) {
  Times times;
  std::vector<double> ms;
  for (int r = 0; r <= repeats; ++r) {
    prepare();
    const auto start = Clock::now();
    times.blocks = run();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
  times.first_ms = ms.front();
  std::sort(ms.begin() + 1, ms.end());
  times.median_ms = ms[1 + (ms.size() - 1) / 2];
  return times;
}

template <typename Run>
Times time_runs(int repeats, const Run& run) {
  return time_runs_after(
      repeats, [] {}, run);
}

// VocoderKind::propose over `streams` streams of the voice in `voice_dir` (not loaded: a proposal
// reads no weights) as a burst leaves them on the CPU backend: the `batch` oldest have just been
// handed an acoustic step's mel of `frames` frames, a quarter of the rest play 0.5 s ahead with
// interior chunks in hand, the others wait for the acoustic model. Times the first chunks made
// alone, the proposal that makes them, and the proposal again with them made.
struct ProposalTimes {
  Times first_chunks;
  Times with_new_mel;
  Times again;
  size_t items = 0;  // in the proposed batch
};

ProposalTimes time_vocoder_proposals(const std::string& voice_dir, int64_t streams, int64_t batch,
                                     int64_t frames, int repeats) {
  using voxd::fastspeech2::SentenceWork;
  using voxd::fastspeech2::work_of;
  using voxd::scheduler::Stream;
  constexpr int64_t kChunkFrames = 64;
  constexpr int64_t kFirstChunkFrames = 32;
  voxd::DeviceRuntime runtime({.backend = "cpu", .threads = 1});
  voxd::scheduler::VoicePool voices(runtime, voxd::families::registry(), {voice_dir},
                                    voxd::DType::F32, /*lazy=*/true, {});
  voxd::scheduler::VoiceEntry& voice = *voices.entries().front();
  const voxd::HifiGanConfig& vocoder = voxd::fastspeech2::config_of(voice).vocoder;
  voxd::Tensor mel = voxd::Tensor::empty({batch, frames, vocoder.num_mels}, voxd::DType::F32);
  std::fill_n(mel.data<float>(), mel.numel(), 0.5f);
  const auto given_mel = [&](int64_t i) {
    voxd::VocoderChunker chunker(vocoder, kChunkFrames, kFirstChunkFrames);
    chunker.append_shared(mel.select(0, i % batch).transpose(0, 1));
    chunker.finish(0);
    return chunker;
  };

  const Clock::time_point now = Clock::now();
  const int64_t playing_end = batch + (streams - batch) / 4;
  std::vector<std::shared_ptr<Stream>> all;
  for (int64_t i = 0; i < streams; ++i) {
    auto stream = std::make_shared<Stream>();
    stream->id = static_cast<uint64_t>(i + 1);
    stream->voice = &voice;
    stream->sample_rate = voice.card().sample_rate;
    stream->admitted = now - std::chrono::microseconds(20 * (streams - i));
    stream->max_buffered_samples = int64_t{1} << 40;
    stream->work =
        std::make_unique<SentenceWork>(1.0f, kChunkFrames + 2 * vocoder.receptive_field_frames());
    SentenceWork& work = work_of(*stream);
    if (i >= batch && i < playing_end) {
      stream->first_audio = now - std::chrono::milliseconds(500);
      stream->produced_samples = stream->sample_rate;  // 1 s made: 0.5 s ahead
      work.chunkers.push_back(given_mel(i));
      (void)work.peek_chunk(0);
      work.ready.pop_front();    // the first chunk went out
      (void)work.peek_chunk(0);  // the next one made by an earlier proposal
    } else if (i >= playing_end) {
      work.sentences.push_back({std::vector<int64_t>(28, 1)});
    }
    all.push_back(std::move(stream));
  }
  const auto hand_mel = [&] {
    for (int64_t i = 0; i < batch; ++i) {
      SentenceWork& work = work_of(*all[static_cast<size_t>(i)]);
      work.ready.clear();
      work.chunkers.clear();
      work.chunkers.push_back(given_mel(i));
    }
  };
  voxd::fastspeech2::VocoderKind kind(runtime, kChunkFrames, kFirstChunkFrames,
                                      /*cuda_graphs=*/false);
  voxd::scheduler::Pacing pacing;
  pacing.max_batch = batch;
  ProposalTimes times;
  times.first_chunks = time_runs_after(repeats, hand_mel, [&] {
    for (int64_t i = 0; i < batch; ++i) (void)work_of(*all[static_cast<size_t>(i)]).peek_chunk(0);
    return size_t{0};
  });
  times.with_new_mel = time_runs_after(repeats, hand_mel, [&] {
    times.items = kind.propose(all, pacing, now).items.size();
    return size_t{0};
  });
  times.again = time_runs(repeats, [&] {
    (void)kind.propose(all, pacing, now);
    return size_t{0};
  });
  return times;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"voxd host benchmark: the host work around a server's steps (planning, chunkers)"};
  std::string voice_dir;
  std::string device = "cuda";
  voxd::DType dtype = voxd::DType::F16;
  int64_t batch = 64;
  int64_t phonemes = 28;
  int64_t frames = 168;
  int64_t chunk_frames = 45;
  int repeats = 20;
  int64_t streams = 1000;
  app.add_option("--voice", voice_dir, "Voice directory")->required();
  app.add_option("--device", device, "Backend planned for: cuda (no device opened) or cpu")
      ->capture_default_str();
  app.add_option("--dtype", dtype, "f32, f16 or bf16")
      ->transform(CLI::CheckedTransformer(
          std::map<std::string, voxd::DType>{
              {"f32", voxd::DType::F32}, {"f16", voxd::DType::F16}, {"bf16", voxd::DType::BF16}},
          CLI::ignore_case))
      ->default_str("f16");
  app.add_option("--batch", batch, "Sentences (acoustic) and chunks (vocoder) in the step")
      ->capture_default_str();
  app.add_option("--phonemes", phonemes, "Padded phonemes of the acoustic step")
      ->capture_default_str();
  app.add_option("--frames", frames, "Padded mel frames of the acoustic step (and its mel)")
      ->capture_default_str();
  app.add_option("--chunk-frames", chunk_frames, "Frames of each vocoder chunk, context included")
      ->capture_default_str();
  app.add_option("--streams", streams, "Streams the vocoder's proposal looks over")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--repeats", repeats, "Runs timed after the first (median reported)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  try {
    const std::unique_ptr<voxd::Backend> backend = planning_backend(device);
    voxd::WorkspaceArena weights(backend->device());
    voxd::Context load = voxd::Context::for_planning(*backend, weights);
    const auto voice = voxd::Voice::load(load, voice_dir, dtype);
    const auto encoder = time_runs(repeats, [&] {
      return voxd::plan_acoustic_encoder(*backend, voice->acoustic(), batch, phonemes, true)
          .encoder.blocks();
    });
    const auto decoder = time_runs(repeats, [&] {
      return voxd::plan_acoustic_decoder(*backend, voice->acoustic(), batch, phonemes, frames, true)
          .blocks();
    });
    const auto vocoder = time_runs(repeats, [&] {
      return voxd::plan_vocoder(*backend, voice->vocoder(), batch, chunk_frames).blocks();
    });
    // The mel of an acoustic step, its sequences handed to new chunkers every round; the
    // streams keep them, as a burst's streams keep theirs until their audio is out.
    const voxd::HifiGanConfig& vocoder_config = voice->vocoder().config();
    const int64_t n_mels = vocoder_config.num_mels;
    voxd::Tensor mel = voxd::Tensor::empty({batch, frames, n_mels}, voxd::DType::F32);
    std::fill_n(mel.data<float>(), mel.numel(), 0.5f);
    const auto hand_over = [&](bool shared) {
      std::deque<voxd::VocoderChunker> streams;
      return time_runs(repeats, [&] {
        for (int64_t i = 0; i < batch; ++i) {
          voxd::VocoderChunker chunker(vocoder_config, 64, 32);
          const voxd::Tensor sequence = mel.select(0, i).transpose(0, 1);
          if (shared) {
            chunker.append_shared(sequence);
          } else {
            chunker.append(sequence);
          }
          chunker.finish(0);
          streams.push_back(std::move(chunker));
        }
        return size_t{0};
      });
    };
    const Times copied = hand_over(false);
    const Times shared = hand_over(true);
    const int64_t burst_streams = std::max(streams, batch);
    const ProposalTimes proposals =
        time_vocoder_proposals(voice_dir, burst_streams, batch, frames, repeats);
    std::printf(
        "voice %s, planned for %s in %s\n\n| host work | shape | blocks | first ms | median ms "
        "|\n|---|---|---|---|---|\n",
        voice->config().name.c_str(), backend->name().c_str(),
        std::string(voxd::dtype_name(dtype)).c_str());
    const auto row = [](const char* step, const std::string& shape, const Times& t) {
      const std::string blocks = t.blocks > 0 ? std::to_string(t.blocks) : "–";
      std::printf("| %s | %s | %s | %.3f | %.3f |\n", step, shape.c_str(), blocks.c_str(),
                  t.first_ms, t.median_ms);
    };
    const std::string sentences = std::to_string(batch) + " x " + std::to_string(phonemes);
    row("plan: acoustic encoder", sentences + " phonemes", encoder);
    row("plan: acoustic decoder", sentences + " phonemes -> " + std::to_string(frames) + " frames",
        decoder);
    row("plan: vocoder",
        std::to_string(batch) + " chunks x " + std::to_string(chunk_frames) + " frames", vocoder);
    const std::string mel_shape =
        std::to_string(batch) + " x " + std::to_string(frames) + " frames";
    row("mel to new chunkers, copied (append)", mel_shape, copied);
    row("mel to new chunkers, kept (append_shared)", mel_shape, shared);
    const std::string burst = std::to_string(burst_streams) + " streams, " + std::to_string(batch) +
                              " handed " + std::to_string(frames) + " frames";
    row("the handed streams' first chunks made (next_chunk)", burst, proposals.first_chunks);
    row(("vocoder proposal (CPU backend), making those chunks: " + std::to_string(proposals.items) +
         " items")
            .c_str(),
        burst, proposals.with_new_mel);
    row("the same proposal again, the chunks made", burst, proposals.again);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
