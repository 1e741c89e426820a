// Times ChatTTS's audio-code stage and its vocoding on one device, the way bench/chattts_peer.py
// times the original's loop (transformers' LlamaModel with past_key_values): a prompt of
// `--prompt` tokens prefilled, then `--steps` decode steps at batch 1, each the four code heads'
// codes drawn on the device as the server draws them (temperature, repetition penalty, top-P,
// top-K: ops::sample_tokens), copied to the host, and embedded for the next step; then the
// Decoder + Vocos over the hidden states of `--frames`/2 steps. Then the same loop as the server
// runs it: the KV cache in pages and each step replayed as a recorded graph (DecodeGraphs; on a
// backend that records), at each batch of `--graph-batches` (every stream drawing its own codes
// with its own history and seed, all in one sample_tokens; the prompts prefilled together). Then
// the server's vocoder step over `--vocode-batches` streams' chunks (of `--vocode-chunk-frames`
// own code frames), each batch a shape met for the first time: its workspace plan, its first run
// and later runs timed apart. Prints decode
// steps per second (median of --runs; a step makes a code frame for every stream of the batch)
// and the vocoding's real-time factor. The voice is a directory made by
// bench/make_chattts_bench_voice.py.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "backends/runtime.h"
#include "core/error.h"
#include "core/kv_pages.h"
#include "core/safetensors.h"
#include "core/voice_directory.h"
#include "core/workspace_plan.h"
#include "families/chattts/code_chunker.h"
#include "families/chattts/decode_graphs.h"
#include "families/chattts/dvae.h"
#include "families/chattts/gpt.h"
#include "families/chattts/sampling.h"
#include "families/chattts/served.h"
#include "families/chattts/vocos.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace voxd;
using namespace voxd::chattts;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

DType parse_dtype(const std::string& name) {
  if (name == "f32") return DType::F32;
  if (name == "f16") return DType::F16;
  if (name == "bf16") return DType::BF16;
  throw InputError("--dtype: expected f32, f16 or bf16, got '" + name + "'");
}

SamplingParams bench_sampling(const GptConfig& c) {
  SamplingParams sampling;
  sampling.repetition_penalty = 1.05f;
  sampling.top_p = 0.7;
  sampling.top_k = 20;
  sampling.eos = c.num_audio_tokens - 1;
  return sampling;
}

// The codes of a step drawn as the server draws them, one per row of code logits (on the device,
// one row per stream and head, each with its own history; an EOS drawn becomes the code before
// it, so that the benchmark runs every step).
std::vector<int64_t> draw_codes(Context& ctx, const Tensor& logits,
                                std::vector<std::vector<int64_t>>& history, int64_t step,
                                const SamplingParams& sampling) {
  const auto rows = static_cast<int64_t>(history.size());
  std::vector<TokenDraw> draws;
  std::vector<int64_t> recent;
  for (int64_t r = 0; r < rows; ++r) {
    draws.push_back(token_draw(sampling, 0.3f, step, 1, static_cast<uint64_t>(r)));
    const std::vector<int64_t> window =
        recent_tokens(history[static_cast<size_t>(r)], sampling.repetition_window);
    recent.insert(recent.end(), window.begin(), window.end());
  }
  const std::vector<int64_t> drawn =
      sample_rows(ctx, logits, draws, recent, sampling.repetition_window);
  std::vector<int64_t> codes(static_cast<size_t>(rows));
  for (size_t r = 0; r < codes.size(); ++r) {
    const int64_t token = drawn[r];
    if (token < 0) throw Error("chattts_bench: a row of logits drew no token (NaN logits)");
    codes[r] = std::min(token, sampling.eos - 1);
    history[r].push_back(codes[r]);
  }
  return codes;
}

// The code stage's decode loop: `steps` steps after a prefill of `prompt` tokens. Returns the
// seconds the steps took (the prefill not counted) and leaves each step's hidden state in
// `hidden`.
double decode(Context& ctx, Backend& backend, const Gpt& gpt, int64_t prompt, int64_t steps,
              std::vector<float>& hidden) {
  const GptConfig& c = gpt.config();
  KvCache cache = gpt.make_cache(ctx, 1, prompt + steps + 1);
  std::vector<int64_t> ids(static_cast<size_t>(prompt * c.num_vq));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i / 4 % 1000 + 5);
  Tensor last = gpt.forward(
      ctx,
      gpt.embed(
          ctx, Tensor::from_vector({1, prompt, c.num_vq}, ids),
          Tensor::from_vector({1, prompt}, std::vector<int64_t>(static_cast<size_t>(prompt), 1))),
      cache);
  last = ops::contiguous(ctx, last.narrow(1, prompt - 1, 1));
  backend.synchronize();
  const SamplingParams sampling = bench_sampling(c);
  std::vector<std::vector<int64_t>> history(static_cast<size_t>(c.num_vq));
  hidden.clear();
  const Clock::time_point start = Clock::now();
  for (int64_t step = 0; step < steps; ++step) {
    const std::vector<int64_t> codes =
        draw_codes(ctx, gpt.code_logits(ctx, last), history, step, sampling);
    const std::vector<float> h = ops::to_host(ctx, last).to_float_vector();
    hidden.insert(hidden.end(), h.begin(), h.end());
    last = gpt.forward(ctx,
                       gpt.embed(ctx, Tensor::from_vector({1, 1, c.num_vq}, codes),
                                 Tensor::from_vector({1, 1}, std::vector<int64_t>{0})),
                       cache);
  }
  backend.synchronize();
  return seconds_since(start);
}

struct GraphedTimes {
  double seconds = 0;       // the steps
  double draw_seconds = 0;  // of which drawing (on the device, codes to the host)
};

// The server's decode loop for `batch` streams: prompts of `prompt` tokens prefilled into a paged
// cache, then `steps` steps each embedded, replayed through `graphs` and drawn (every row in one
// sample_tokens, as the server draws its streams).
GraphedTimes decode_graphed(Context& ctx, Backend& backend, const Gpt& gpt, int64_t prompt,
                            int64_t steps, int64_t batch) {
  const GptConfig& c = gpt.config();
  constexpr int64_t kPageSize = 16;
  KvPagePool pool(batch * ((prompt + steps + kPageSize) / kPageSize + 1), kPageSize);
  PagedKvCache cache = gpt.make_paged_cache(ctx, pool.pages(), pool.page_size());
  DecodeGraphs graphs(ctx, gpt, cache, pool.pages_for(c.max_position_embeddings));
  std::vector<std::vector<int64_t>> pages(static_cast<size_t>(batch));
  std::vector<const std::vector<int64_t>*> lists;
  std::vector<int64_t> ids(static_cast<size_t>(prompt * c.num_vq));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i / 4 % 1000 + 5);
  const Tensor prompt_mask = Tensor::from_vector(
      {batch, prompt}, std::vector<int64_t>(static_cast<size_t>(batch * prompt), 1));
  for (auto& held : pages) {
    if (!pool.grow(held, prompt + steps + 1)) throw Error("chattts_bench: the pool is too small");
    lists.push_back(&held);
  }
  // Every stream's prompt in one prefill, as the server prefills the prompts that arrive together.
  std::vector<int64_t> batch_ids;
  for (int64_t b = 0; b < batch; ++b) batch_ids.insert(batch_ids.end(), ids.begin(), ids.end());
  (void)gpt.forward(
      ctx, gpt.embed(ctx, Tensor::from_vector({batch, prompt, c.num_vq}, batch_ids), prompt_mask),
      cache, page_table(lists, pool.pages_for(prompt + steps + 1)),
      std::vector<int64_t>(static_cast<size_t>(batch), 0));
  backend.synchronize();
  const SamplingParams sampling = bench_sampling(c);
  std::vector<std::vector<int64_t>> history(static_cast<size_t>(batch * c.num_vq));
  std::vector<int64_t> codes(static_cast<size_t>(batch * c.num_vq), 5);
  const Tensor code_mask =
      Tensor::from_vector({batch, 1}, std::vector<int64_t>(static_cast<size_t>(batch), 0));
  GraphedTimes times;
  // The first step records the graph: it is not timed.
  Clock::time_point start;
  for (int64_t step = -1; step < steps; ++step) {
    if (step == 0) {
      backend.synchronize();
      start = Clock::now();
    }
    const std::vector<int64_t> positions(static_cast<size_t>(batch),
                                         prompt + std::max<int64_t>(step, 0));
    const DecodeGraphs::Output out =
        graphs.run(ctx, gpt.embed(ctx, Tensor::from_vector({batch, 1, c.num_vq}, codes), code_mask),
                   lists, positions, true);
    backend.synchronize();
    const Clock::time_point drawing = Clock::now();
    codes = draw_codes(ctx, out.logits, history, std::max<int64_t>(step, 0), sampling);
    if (step >= 0) times.draw_seconds += seconds_since(drawing);
  }
  backend.synchronize();
  times.seconds = seconds_since(start);
  return times;
}

struct VocodeShapeTimes {
  double plan_seconds = 0;   // planning the shape's workspace (the first time it is met)
  double first_seconds = 0;  // its first run (the backend's per-shape choices made)
  double seconds = 0;        // a run after that (median of `runs`)
  double audio_seconds = 0;  // the chunks' own audio
};

// The server's vocoder step (VocodeKind) for `batch` streams' chunks of `chunk_frames` own code
// frames with full context, a shape met for the first time: its plan, its first run and later
// runs timed apart.
VocodeShapeTimes vocode_new_shape(DeviceRuntime& runtime, const Dvae& decoder, const Vocos& vocos,
                                  const GptConfig& gpt_config, int64_t chunk_frames, int64_t batch,
                                  int runs) {
  const CodeChunker shape(decoder.config(), vocos.config(), chunk_frames);
  const int64_t hop = vocos.config().hop_length;
  CodeChunk chunk;
  chunk.rows = shape.max_retained_frames();
  chunk.hidden.assign(static_cast<size_t>(chunk.rows * gpt_config.hidden_size), 0.01f);
  chunk.skip_samples = 2 * shape.context().left_frames * hop;
  chunk.samples = 2 * chunk_frames * hop;
  const std::vector<const CodeChunk*> chunks(static_cast<size_t>(batch), &chunk);
  Backend& backend = runtime.backend();
  VocodeShapeTimes times;
  backend.synchronize();
  Clock::time_point start = Clock::now();
  const ArenaLayout layout = plan_workspace(
      backend, [&](Context& ctx) { plan_vocode_chunks(ctx, decoder, vocos, batch, chunk.rows); });
  times.plan_seconds = seconds_since(start);
  std::vector<double> seconds;
  for (int r = 0; r < runs + 1; ++r) {
    start = Clock::now();
    run_in_workspace(backend, runtime.allocator(), layout,
                     [&](Context& ctx) { (void)vocode_chunks(ctx, decoder, vocos, chunks); });
    backend.synchronize();
    if (r == 0) {
      times.first_seconds = seconds_since(start);
    } else {
      seconds.push_back(seconds_since(start));
    }
  }
  std::sort(seconds.begin(), seconds.end());
  times.seconds = seconds[seconds.size() / 2];
  times.audio_seconds = static_cast<double>(batch * chunk.samples) / 24000.0;
  return times;
}

int run(const std::string& voice_dir, const std::string& backend_name,
        const std::string& dtype_name, int64_t prompt, int64_t steps, int64_t frames, int runs,
        const std::vector<int64_t>& graph_batches, const std::vector<int64_t>& vocode_batches,
        const std::vector<int64_t>& vocode_chunk_frames) {
  const DType dtype = parse_dtype(dtype_name);
  DeviceRuntime runtime(RuntimeOptions{.backend = backend_name});
  Context& ctx = runtime.context();
  const VoiceConfigFile file = read_voice_config(voice_dir);
  const std::string dir = file.directory + "/";
  const GptConfig gpt_config = GptConfig::from_json(file.root.at("gpt"), file.path + ": gpt");
  DvaeConfig decoder_config =
      DvaeConfig::from_json(file.root.at("decoder"), file.path + ": decoder", true);
  const VocosConfig vocos_config = VocosConfig::from_json(file.root.at("vocos"), file.path);
  const Gpt gpt = Gpt::load(runtime.weights_context(), gpt_config,
                            *SafetensorsFile::open(dir + "gpt.safetensors"),
                            *SafetensorsFile::open(dir + "embed.safetensors"), dtype);
  const Dvae decoder = Dvae::load(runtime.weights_context(), decoder_config,
                                  *SafetensorsFile::open(dir + "decoder.safetensors"), dtype);
  const Vocos vocos = Vocos::load(runtime.weights_context(), vocos_config,
                                  *SafetensorsFile::open(dir + "vocos.safetensors"), dtype);

  std::vector<float> hidden;
  (void)decode(ctx, runtime.backend(), gpt, prompt, 8, hidden);  // warm-up: kernels, cuBLAS
  std::vector<double> rates;
  for (int r = 0; r < runs; ++r) {
    rates.push_back(static_cast<double>(steps) /
                    decode(ctx, runtime.backend(), gpt, prompt, steps, hidden));
  }
  std::sort(rates.begin(), rates.end());

  const int64_t hidden_steps = std::min<int64_t>(frames / 2, steps);
  const Tensor states = ops::to_device(
      ctx,
      Tensor::from_vector(
          {1, hidden_steps, gpt_config.hidden_size},
          std::vector<float>(hidden.begin(),
                             hidden.begin() + hidden_steps * gpt_config.hidden_size)),
      DType::F32);
  std::vector<double> vocode_s;
  int64_t samples = 0;
  for (int r = 0; r < runs + 1; ++r) {
    runtime.backend().synchronize();
    const Clock::time_point start = Clock::now();
    const Tensor audio = ops::to_host(ctx, vocos.forward(ctx, decoder.decode_hidden(ctx, states)));
    if (r > 0) vocode_s.push_back(seconds_since(start));  // the first run warms up
    samples = audio.size(1);
  }
  std::sort(vocode_s.begin(), vocode_s.end());
  const double audio_s = static_cast<double>(samples) / 24000.0;
  std::printf(
      "| device | dtype | prompt | decode steps/s (batch 1) | min..max | Decoder+Vocos %lld frames "
      "| RTF |\n",
      static_cast<long long>(2 * hidden_steps));
  std::printf("|---|---|---|---|---|---|---|\n");
  std::printf("| %s | %s | %lld | %.1f | %.1f..%.1f | %.2f ms for %.2f s | %.5f |\n",
              runtime.device().to_string().c_str(), dtype_name.c_str(),
              static_cast<long long>(prompt), rates[rates.size() / 2], rates.front(), rates.back(),
              1e3 * vocode_s[vocode_s.size() / 2], audio_s,
              vocode_s[vocode_s.size() / 2] / audio_s);
  if (runtime.backend().can_capture() && !graph_batches.empty()) {
    std::printf(
        "\n| device | dtype | prompt | batch | graphed decode steps/s | min..max | code frames/s | "
        "host draws ms/step |\n");
    std::printf("|---|---|---|---|---|---|---|---|\n");
    for (const int64_t batch : graph_batches) {
      std::vector<std::pair<double, double>> graphed;  // steps/s, draw ms per step
      for (int r = 0; r < runs; ++r) {
        const GraphedTimes t = decode_graphed(ctx, runtime.backend(), gpt, prompt, steps, batch);
        graphed.emplace_back(static_cast<double>(steps) / t.seconds,
                             1e3 * t.draw_seconds / static_cast<double>(steps));
      }
      std::sort(graphed.begin(), graphed.end());
      const auto [median, draw_ms] = graphed[graphed.size() / 2];
      std::printf("| %s | %s | %lld | %lld | %.1f | %.1f..%.1f | %.0f | %.2f |\n",
                  runtime.device().to_string().c_str(), dtype_name.c_str(),
                  static_cast<long long>(prompt), static_cast<long long>(batch), median,
                  graphed.front().first, graphed.back().first, median * static_cast<double>(batch),
                  draw_ms);
    }
  }
  if (!vocode_batches.empty()) {
    std::printf(
        "\n| device | dtype | vocoder step: own code frames a chunk | chunks | plan ms (new shape) "
        "| first run ms | later runs ms | audio-s/s |\n|---|---|---|---|---|---|---|---|\n");
  }
  for (const int64_t chunk_frames : vocode_chunk_frames) {
    for (const int64_t batch : vocode_batches) {
      const VocodeShapeTimes t =
          vocode_new_shape(runtime, decoder, vocos, gpt_config, chunk_frames, batch, runs);
      std::printf("| %s | %s | %lld | %lld | %.2f | %.2f | %.2f | %.0f |\n",
                  runtime.device().to_string().c_str(), dtype_name.c_str(),
                  static_cast<long long>(chunk_frames), static_cast<long long>(batch),
                  1e3 * t.plan_seconds, 1e3 * t.first_seconds, 1e3 * t.seconds,
                  t.audio_seconds / t.seconds);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ChatTTS decode-step and vocoding benchmark"};
  std::string voice;
  std::string backend = "cuda";
  std::string dtype = "f32";
  int64_t prompt = 64;
  int64_t steps = 300;
  int64_t frames = 1000;
  int runs = 3;
  std::vector<int64_t> graph_batches = {1, 64};
  std::vector<int64_t> vocode_batches = {1, 100};
  std::vector<int64_t> vocode_chunk_frames = {kStreamChunkFrames};
  app.add_option("--voice", voice, "A ChatTTS voice directory")->required();
  app.add_option("--graph-batches", graph_batches,
                 "Batches of the graphed paged loop (none: skip it)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--vocode-batches", vocode_batches,
                 "Streams' chunks per vocoder step, each a new shape: its plan and first run timed "
                 "apart from later runs (none: skip it)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--vocode-chunk-frames", vocode_chunk_frames,
                 "Own code frames of each chunk the vocoder steps take")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--backend", backend)->capture_default_str();
  app.add_option("--dtype", dtype, "f32, f16 or bf16")->capture_default_str();
  app.add_option("--prompt", prompt, "Prompt tokens prefilled before the steps")
      ->capture_default_str();
  app.add_option("--steps", steps, "Decode steps timed per run")->capture_default_str();
  app.add_option("--frames", frames, "Mel frames the Decoder and Vocos make")
      ->capture_default_str();
  app.add_option("--runs", runs, "Runs (the median is reported)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    return run(voice, backend, dtype, prompt, steps, frames, runs, graph_batches, vocode_batches,
               vocode_chunk_frames);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "chattts_bench: %s\n", e.what());
    return 2;
  }
}
