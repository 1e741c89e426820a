// Times a voice's acoustic model and vocoder on one backend and prints real-time factors
// (compute seconds per audio second; lower is better) as a Markdown table row set. Tensors come
// from a DeviceRuntime's caching allocator, as in `voxd synth` and `voxd serve`, so the figures
// are the product's and not the C library's page faults for each fresh activation.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "backends/runtime.h"
#include "core/error.h"
#include "families/fastspeech2/voice.h"

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"voxd CPU benchmark: real-time factor of a voice's acoustic model and vocoder"};
  std::vector<std::string> voices;
  std::string backend_name = "cpu";
  int threads = 0;
  int phonemes = 120;
  int repeats = 5;
  app.add_option("--voice", voices, "Voice directories to time")->required();
  app.add_option("--backend", backend_name, "Backend")->capture_default_str();
  app.add_option("--threads", threads, "Threads (0: all cores)")->capture_default_str();
  app.add_option("--phonemes", phonemes, "Input length in symbols")->capture_default_str();
  app.add_option("--repeats", repeats, "Timed runs per stage (median reported)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  try {
    voxd::DeviceRuntime runtime(voxd::RuntimeOptions{.backend = backend_name, .threads = threads});
    voxd::Context& ctx = runtime.context();
    std::printf(
        "| voice | phonemes | frames | audio s | acoustic s | vocoder s | acoustic RTF | "
        "vocoder RTF | total RTF |\n|---|---|---|---|---|---|---|---|---|\n");
    for (const std::string& directory : voices) {
      auto voice = voxd::Voice::load(runtime.weights_context(), directory);
      const voxd::VoiceConfig& config = voice->config();
      std::mt19937 rng(1234);
      std::uniform_int_distribution<int64_t> symbol(1, 60);
      std::vector<int64_t> ids(static_cast<size_t>(phonemes));
      for (int64_t& id : ids) id = symbol(rng);

      std::vector<double> acoustic_times;
      std::vector<double> vocoder_times;
      int64_t frames = 0;
      for (int r = 0; r <= repeats; ++r) {  // the first run warms up and is not counted
        auto start = Clock::now();
        voxd::AcousticOutput acoustic = voice->acoustic().forward(ctx, {ids}, {0}, {});
        voxd::Tensor mel = voxd::ops::transpose(ctx, acoustic.mel, 1, 2);
        runtime.backend().synchronize();
        const double acoustic_seconds = std::chrono::duration<double>(Clock::now() - start).count();
        frames = acoustic.mel_lengths[0];
        start = Clock::now();
        voxd::Tensor audio = voice->vocoder().forward(ctx, mel);
        runtime.backend().synchronize();
        const double vocoder_seconds = std::chrono::duration<double>(Clock::now() - start).count();
        if (r > 0) {
          acoustic_times.push_back(acoustic_seconds);
          vocoder_times.push_back(vocoder_seconds);
        }
      }
      const double audio_seconds =
          static_cast<double>(frames * config.hop_length) / static_cast<double>(config.sample_rate);
      const double a = median(acoustic_times);
      const double v = median(vocoder_times);
      std::printf("| %s | %d | %lld | %.2f | %.3f | %.3f | %.4f | %.4f | %.4f |\n",
                  config.name.c_str(), phonemes, static_cast<long long>(frames), audio_seconds, a,
                  v, a / audio_seconds, v / audio_seconds, (a + v) / audio_seconds);
      std::fflush(stdout);
    }
  } catch (const voxd::Error& e) {
    std::fprintf(stderr, "voxd_bench: %s\n", e.what());
    return 2;
  }
  return 0;
}
