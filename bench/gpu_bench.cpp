// Times a voice end to end on one device at several batch sizes, the way REFERENCES.md measured
// PyTorch: B requests of `--phonemes` random symbols, every phoneme forced to
// `--frames-per-phoneme` frames, acoustic model then vocoder, audio copied back to the host.
// Prints a Markdown table: latency per batch, audio-seconds per second, achieved TFLOP/s per
// stage (bench/flops.h) and device memory (allocator peak, weights, driver's view).
// `--chunk-frames N` vocodes the batch as B streams cut by VocoderChunker into chunks of N frames
// (one round of chunks, a batch of up to B, per vocoder run, as a streaming server would), with
// the interior chunks replayed as CUDA graphs unless `--cuda-graphs off`; the vocoder's TFLOP/s
// then count the unchunked work, so the chunks' context frames show as lost throughput. The last
// two columns time each batch size's first run alone: what meeting a new shape costs.
// `--host-profile` then prints, per batch size, where the host time of its first run and of a
// later run went, op by op (Backend::profile_host_time; backends that queue work only).
// `--acoustic-graphs N` runs the acoustic model of batches up to N through AcousticGraphs
// (recorded CUDA graphs, the symbols and frames padded to their buckets; the vocoder still gets
// the unpadded frames).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/runtime.h"
#include "bench/flops.h"
#include "core/error.h"
#include "core/safetensors.h"
#include "families/fastspeech2/acoustic_graphs.h"
#include "families/fastspeech2/vocoder_chunker.h"
#include "families/fastspeech2/vocoder_graphs.h"
#include "families/fastspeech2/voice.h"

namespace {

using Clock = std::chrono::steady_clock;

// NaN for no values (--repeats 0, as under ncu).
double median(std::vector<double> values) {
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

voxd::DType parse_dtype(const std::string& name) {
  if (name == "f32") return voxd::DType::F32;
  if (name == "f16") return voxd::DType::F16;
  if (name == "bf16") return voxd::DType::BF16;
  throw voxd::InputError("--dtype: expected f32, f16 or bf16, got '" + name + "'");
}

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// Host time by op of one batch size's first run and of a later one.
struct HostProfiles {
  int batch = 0;
  double first_seconds = 0;
  double later_seconds = 0;
  std::vector<voxd::Backend::OpHostTime> first;
  std::vector<voxd::Backend::OpHostTime> later;
};

// A Markdown table of the ops that took most host time in the first run, beside the later run's.
void print_host_profile(const HostProfiles& p) {
  std::printf(
      "\nhost time by op, batch %d: first run %.2f ms, a later run %.2f ms (the ops' calls; the "
      "rest is the model's own host work)\n\n"
      "| op | first run: calls | ms | longest call ms | later run: calls | ms |\n"
      "|---|---|---|---|---|---|\n",
      p.batch, p.first_seconds * 1e3, p.later_seconds * 1e3);
  double first_total = 0;
  double later_total = 0;
  for (const auto& t : p.first) first_total += t.seconds;
  for (const auto& t : p.later) later_total += t.seconds;
  for (size_t i = 0; i < std::min<size_t>(p.first.size(), 12); ++i) {
    const voxd::Backend::OpHostTime& first = p.first[i];
    const auto later = std::find_if(p.later.begin(), p.later.end(),
                                    [&](const auto& t) { return t.op == first.op; });
    const bool in_later = later != p.later.end();
    std::printf("| %s | %lld | %.2f | %.2f | %lld | %.2f |\n", first.op.c_str(),
                static_cast<long long>(first.calls), first.seconds * 1e3,
                first.longest_seconds * 1e3, static_cast<long long>(in_later ? later->calls : 0),
                in_later ? later->seconds * 1e3 : 0.0);
  }
  std::printf("| all ops | | %.2f | | | %.2f |\n", first_total * 1e3, later_total * 1e3);
}

// Host mel [B, n_mels, T] vocoded as B streams of chunks of `chunk_frames` frames, chunk by chunk
// across the streams: each round feeds every stream `chunk_frames` more frames and vocodes the
// chunks that became ready in one vocode_chunks call. Returns the samples made.
int64_t vocode_streams(voxd::Context& ctx, const voxd::HifiGan& vocoder, const voxd::Tensor& mel,
                       int64_t chunk_frames, voxd::VocoderGraphs* graphs) {
  const int64_t batch = mel.size(0);
  const int64_t frames = mel.size(2);
  std::vector<voxd::VocoderChunker> chunkers;
  for (int64_t b = 0; b < batch; ++b) chunkers.emplace_back(vocoder.config(), chunk_frames);
  int64_t samples = 0;
  for (int64_t offset = 0; offset < frames; offset += chunk_frames) {
    std::vector<voxd::MelChunk> round;
    for (int64_t b = 0; b < batch; ++b) {
      voxd::VocoderChunker& chunker = chunkers[static_cast<size_t>(b)];
      chunker.append(mel.select(0, b).narrow(1, offset, std::min(chunk_frames, frames - offset)));
      if (offset + chunk_frames >= frames) chunker.finish();
      for (voxd::MelChunk& chunk : chunker.take_chunks()) round.push_back(std::move(chunk));
    }
    if (round.empty()) continue;
    for (const std::vector<float>& audio : voxd::vocode_chunks(ctx, vocoder, round, graphs)) {
      samples += static_cast<int64_t>(audio.size());
    }
  }
  return samples;
}

}  // namespace

int main(int argc, char** argv) {
  const auto process_start = Clock::now();
  CLI::App app{"voxd device benchmark: latency, throughput, TFLOP/s and memory of a voice"};
  std::string voice_dir;
  voxd::RuntimeOptions runtime_options;
  runtime_options.backend = "cuda";
  std::string dtype_name = "f16";
  int phonemes = 120;
  int frames_per_phoneme = 6;
  std::vector<int> batches{1, 8, 32, 64};
  int repeats = 5;
  double warmup_seconds = 1.0;
  int64_t chunk_frames = 0;
  std::string cuda_graphs = "on";
  bool acoustic_only = false;
  bool host_profile = false;
  int acoustic_graph_batches = 0;
  app.add_option("--voice", voice_dir, "Voice directory")->required();
  app.add_option("--device", runtime_options.backend, "Backend")->capture_default_str();
  app.add_option("--threads", runtime_options.threads, "CPU threads (cpu backend)");
  app.add_option("--dtype", dtype_name, "Weights and activations: f32, f16 or bf16")
      ->capture_default_str();
  app.add_option("--phonemes", phonemes, "Symbols per request")->capture_default_str();
  app.add_option("--frames-per-phoneme", frames_per_phoneme, "Forced duration of every phoneme")
      ->capture_default_str();
  app.add_option("--batches", batches, "Batch sizes to time")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--repeats", repeats, "Timed runs per batch size (median reported)")
      ->capture_default_str();
  app.add_option("--warmup-seconds", warmup_seconds,
                 "Untimed runs of each batch size for at least this long (at least one) before "
                 "its timed runs, so that the device's clocks and the caches settle whatever ran "
                 "before")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--chunk-frames", chunk_frames,
                 "Vocode in chunks of this many mel frames per stream (0: each batch at once)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--cuda-graphs", cuda_graphs,
                 "With --chunk-frames: replay interior chunks as CUDA graphs (on or off)")
      ->capture_default_str()
      ->check(CLI::IsMember({"on", "off"}));
  app.add_option("--acoustic-graphs", acoustic_graph_batches,
                 "Run the acoustic model of batches up to this size as recorded CUDA graphs "
                 "(0: never)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--acoustic-only", acoustic_only,
               "Run the acoustic model alone (to profile it: every kernel is the acoustic "
               "model's); the vocoder columns stay empty");
  app.add_flag("--host-profile", host_profile,
               "After the table, each batch size's host time by op in its first run and in a "
               "later one");
  CLI11_PARSE(app, argc, argv);

  try {
    const voxd::DType dtype = parse_dtype(dtype_name);
    const bool use_graphs = cuda_graphs == "on";
    voxd::DeviceRuntime runtime(runtime_options);
    const double runtime_seconds = seconds_since(process_start);
    voxd::Context& ctx = runtime.context();
    const auto load_start = Clock::now();
    auto voice = voxd::Voice::load(runtime.weights_context(), voice_dir, dtype);
    runtime.backend().synchronize();
    const double load_seconds = seconds_since(load_start);
    const voxd::VoiceConfig& config = voice->config();
    const voxd::FastSpeech2& acoustic = voice->acoustic();
    const voxd::HifiGan& vocoder = voice->vocoder();

    const int64_t frames = static_cast<int64_t>(phonemes) * frames_per_phoneme;
    const double audio_seconds = static_cast<double>(vocoder.config().output_length(frames)) /
                                 static_cast<double>(config.sample_rate);
    // The postnet's width is not in the config; its first convolution's weight [C, n_mels, 5]
    // says it.
    const int64_t postnet_channels =
        voxd::SafetensorsFile::open(voice_dir + "/acoustic.safetensors")
            ->info("postnet.convolutions.0.0.conv.weight")
            .shape[0];
    const double acoustic_flops =
        voxd::bench::fastspeech2_flops(acoustic.config(), phonemes, frames, postnet_channels);
    const double vocoder_flops = voxd::bench::hifigan_flops(vocoder.config(), frames);
    // Graphs for the interior chunk shape, one per batch size met; they hold their arenas
    // across the batch sizes (counted in the allocator's figures).
    voxd::AcousticGraphs acoustic_graphs(ctx, acoustic, uint64_t{4} << 30);
    std::unique_ptr<voxd::VocoderGraphs> graphs;
    if (chunk_frames > 0 && use_graphs && runtime.backend().can_capture()) {
      graphs = std::make_unique<voxd::VocoderGraphs>(
          ctx, vocoder, chunk_frames + 2 * vocoder.config().receptive_field_frames());
    }
    std::string vocoding = chunk_frames == 0
                               ? std::string("vocoder on whole sequences")
                               : "vocoder in chunks of " + std::to_string(chunk_frames) +
                                     " frames, CUDA graphs " + (graphs ? "on" : "off");
    if (acoustic_graph_batches > 0) {
      vocoding += acoustic_graphs.enabled()
                      ? "; acoustic model of batches up to " +
                            std::to_string(acoustic_graph_batches) + " as CUDA graphs"
                      : "; no acoustic graphs: the backend records none";
    }
    std::printf(
        "voice %s on %s, %s: weights %.1f MiB loaded in %.3f s; %d phonemes -> %lld "
        "frames -> %.2f s of audio; %.1f GFLOP acoustic + %.1f GFLOP vocoder per "
        "request; %s\n\n",
        config.name.c_str(), runtime.backend().name().c_str(), dtype_name.c_str(),
        static_cast<double>(runtime.weights_bytes()) / (1024.0 * 1024.0), load_seconds, phonemes,
        static_cast<long long>(frames), audio_seconds, acoustic_flops / 1e9, vocoder_flops / 1e9,
        vocoding.c_str());
    std::printf(
        "| batch | acoustic ms | vocoder ms | total ms | audio-s/s | acoustic TFLOP/s | vocoder "
        "TFLOP/s | peak allocated GiB (weights + work) | peak reserved GiB | device used GiB | "
        "first run: acoustic ms | first run: total ms |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|\n");

    std::mt19937 rng(1234);
    std::uniform_int_distribution<int64_t> symbol(1, acoustic.n_symbols() - 1);
    double cold_start_seconds = -1;  // process start to the first batch's audio on the host
    double first_batch_seconds = 0;
    std::vector<HostProfiles> profiles;
    for (const int batch : batches) {
      std::vector<std::vector<int64_t>> ids(static_cast<size_t>(batch));
      for (auto& sequence : ids) {
        sequence.resize(static_cast<size_t>(phonemes));
        for (int64_t& id : sequence) id = symbol(rng);
      }
      const std::vector<std::vector<int64_t>> durations(
          static_cast<size_t>(batch),
          std::vector<int64_t>(static_cast<size_t>(phonemes), frames_per_phoneme));
      const std::vector<int64_t> speakers(static_cast<size_t>(batch), 0);
      runtime.allocator().reset_peak();
      std::vector<double> acoustic_times;
      std::vector<double> vocoder_times;
      std::vector<double> total_times;
      // One request of the batch: returns when its audio is on the host, with the acoustic
      // model's share of the time.
      struct Timing {
        double acoustic;
        double total;
      };
      const auto run_once = [&]() {
        const auto start = Clock::now();
        voxd::AcousticOutput out =
            batch <= acoustic_graph_batches
                ? acoustic_graphs.run(ids, speakers, {}, durations)
                : acoustic.forward(ctx, ids, speakers, {}, nullptr, durations);
        voxd::Tensor mel = voxd::ops::transpose(ctx, out.mel.narrow(1, 0, frames), 1, 2);
        runtime.backend().synchronize();
        const auto acoustic_end = Clock::now();
        if (acoustic_only) {
          mel = voxd::Tensor();
        } else if (chunk_frames > 0) {
          const voxd::Tensor host_mel = voxd::ops::to_host(ctx, mel);
          mel = voxd::Tensor();
          const int64_t samples =
              vocode_streams(ctx, vocoder, host_mel, chunk_frames, graphs.get());
          if (samples != batch * vocoder.config().output_length(frames)) {
            throw voxd::Error("chunked vocoding made " + std::to_string(samples) +
                              " samples, expected " +
                              std::to_string(batch * vocoder.config().output_length(frames)));
          }
        } else {
          voxd::Tensor audio = vocoder.forward(ctx, mel);
          voxd::Tensor host_audio = voxd::ops::to_host(ctx, audio);
        }
        const auto end = Clock::now();
        if (cold_start_seconds < 0) {
          cold_start_seconds = std::chrono::duration<double>(end - process_start).count();
          first_batch_seconds = std::chrono::duration<double>(end - start).count();
        }
        return Timing{std::chrono::duration<double>(acoustic_end - start).count(),
                      std::chrono::duration<double>(end - start).count()};
      };
      // The batch size's first run is untimed work like the warm-up, but reported: it meets the
      // shape for the first time (plans, library choices, kernels not launched before).
      const auto warmup_start = Clock::now();
      // Profiled runs only: the timed ones read no clock per op.
      const auto profiled = [&](std::vector<voxd::Backend::OpHostTime>& times) {
        runtime.backend().profile_host_time(host_profile);
        const Timing timing = run_once();
        times = runtime.backend().take_host_profile();
        runtime.backend().profile_host_time(false);
        return timing;
      };
      HostProfiles profile;
      profile.batch = batch;
      const Timing first_run = profiled(profile.first);
      profile.first_seconds = first_run.total;
      while (seconds_since(warmup_start) < warmup_seconds) (void)run_once();
      if (host_profile) {
        profile.later_seconds = profiled(profile.later).total;
        profiles.push_back(std::move(profile));
      }
      for (int r = 0; r < repeats; ++r) {
        const Timing timing = run_once();
        acoustic_times.push_back(timing.acoustic);
        vocoder_times.push_back(timing.total - timing.acoustic);
        total_times.push_back(timing.total);
      }
      const voxd::AllocatorStats stats = runtime.allocator().stats();
      const voxd::MemoryBreakdown memory = runtime.breakdown();
      const double a = median(acoustic_times);
      const double v = median(vocoder_times);
      const double t = median(total_times);
      // A figure that needs the vocoder's time, or "–" when it did not run.
      const auto vocoder_cell = [&](const char* format, double value) {
        if (acoustic_only) return std::string("–");
        char text[32];
        std::snprintf(text, sizeof text, format, value);
        return std::string(text);
      };
      std::printf("| %d | %.2f | %s | %.2f | %s | %.1f | %s | %.2f | %.2f | %.2f | %.2f | %.2f |\n",
                  batch, a * 1e3, vocoder_cell("%.2f", v * 1e3).c_str(), t * 1e3,
                  vocoder_cell("%.0f", batch * audio_seconds / t).c_str(),
                  batch * acoustic_flops / a / 1e12,
                  vocoder_cell("%.1f", batch * vocoder_flops / v / 1e12).c_str(),
                  static_cast<double>(stats.peak_allocated_bytes) / kGiB,
                  static_cast<double>(stats.peak_reserved_bytes) / kGiB,
                  memory.total > 0 ? static_cast<double>(memory.total - memory.free) / kGiB : 0.0,
                  first_run.acoustic * 1e3, first_run.total * 1e3);
      std::fflush(stdout);
      runtime.release_cached();
    }
    for (const HostProfiles& p : profiles) print_host_profile(p);
    std::printf(
        "\ncold start: process start to the first batch's audio on the host %.3f s "
        "(device and allocator %.3f s, weights %.3f s, first batch of %d %.3f s)\n",
        cold_start_seconds, runtime_seconds, load_seconds, batches.front(), first_batch_seconds);
  } catch (const voxd::Error& e) {
    std::fprintf(stderr, "voxd_gpu_bench: %s\n", e.what());
    return 2;
  }
  return 0;
}
