// Times host work the server's device thread does around FastSpeech2 + HiFiGAN steps, outside
// their kernels, at the shapes a burst meets; on a GPU the device waits for it.
// - Planning a step of a new shape (the plan caches keep it for the next), for the CUDA backend
//   without opening a device (CudaBackend::PlanOnly, as `voxd mem --device cuda` does) or for
//   the CPU backend; the voice is loaded in a planning context, so nothing runs. The first plan
//   of each kind in the process, and the median of the later ones.
// - Handing an acoustic step's mel ([B, frames, n_mels] on the host) to each stream's new
//   VocoderChunker, copied (append) or kept as a view (append_shared, as AcousticKind does), the
//   streams keeping their chunkers round after round as a burst's do.
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
#include "core/error.h"
#include "core/workspace_arena.h"
#include "families/fastspeech2/vocoder_chunker.h"
#include "families/fastspeech2/voice.h"
#include "families/fastspeech2/workspace_steps.h"
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

// `repeats` + 1 timings of `run`, which returns the blocks of the plan it made (or 0).
template <typename Run>
Times time_runs(int repeats, const Run& run) {
  Times times;
  std::vector<double> ms;
  for (int r = 0; r <= repeats; ++r) {
    const auto start = Clock::now();
    times.blocks = run();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
  times.first_ms = ms.front();
  std::sort(ms.begin() + 1, ms.end());
  times.median_ms = ms[1 + (ms.size() - 1) / 2];
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
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
