// Sambert (src/families/sambert) on the bench model of bench/make_sambert_bench_model.py: one
// utterance at a time, as KAN-TTS runs it; prints one JSON line (frames, median milliseconds per
// utterance, real-time factor) to compare with bench/sambert_peer.py's.
//
//   voxd_sambert_bench /tmp/sambert-bench [--backend cpu] [--threads 2] [--runs 5]
// (host backends only for now). Tensors come from a DeviceRuntime's caching allocator, as in
// `voxd synth` and `voxd serve`.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backends/runtime.h"
#include "core/error.h"
#include "core/safetensors.h"
#include "families/sambert/sambert.h"

int main(int argc, char** argv) {
  CLI::App app{"Sambert one-utterance latency on the bench model"};
  std::string dir;
  std::string backend_name = "cpu";
  int threads = 2;
  int runs = 5;
  int hop = 200;
  int rate = 16000;
  app.add_option("model_dir", dir, "bench/make_sambert_bench_model.py's folder")->required();
  app.add_option("--backend", backend_name, "backend");
  app.add_option("--threads", threads, "CPU threads");
  app.add_option("--runs", runs, "timed runs (after one warm-up)");
  app.add_option("--hop", hop, "audio samples per frame");
  app.add_option("--rate", rate, "sample rate");
  CLI11_PARSE(app, argc, argv);
  try {
    using namespace voxd;
    std::ifstream config_file(dir + "/config.json");
    const nlohmann::json config = nlohmann::json::parse(config_file);
    auto file = SafetensorsFile::open(dir + "/model.safetensors");
    std::map<std::string, Tensor> state;
    for (const std::string& name : file->names()) state[name] = file->get(name);
    const TensorMapSource weights(state, dir);
    std::ifstream tokens_file(dir + "/tokens.json");
    const nlohmann::json t = nlohmann::json::parse(tokens_file);
    SambertTokens tokens;
    for (const auto& row : t["ling"]) tokens.linguistic.push_back({row[0], row[1], row[2], row[3]});
    tokens.emotion = t["emotion"].get<std::vector<int64_t>>();
    tokens.speaker = t["speaker"].get<std::vector<int64_t>>();
    DeviceRuntime runtime(RuntimeOptions{.backend = backend_name, .threads = threads});
    if (!runtime.device().is_cpu())
      throw Error("the bench runs the host backends (cpu, reference)");
    Context& ctx = runtime.context();
    const Sambert model = Sambert::load(runtime.weights_context(),
                                        SambertConfig::from_json(config["params"], dir), weights);
    std::vector<double> ms;
    int64_t frames = 0;
    for (int i = 0; i <= runs; ++i) {
      const auto start = std::chrono::steady_clock::now();
      const SambertOutput out = model.synthesize(ctx, tokens);
      if (!out.mel.defined()) throw Error("every token got 0 frames: nothing to time");
      const Tensor mel = ops::to_host(ctx, out.mel);
      ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count());
      frames = mel.size(0);
    }
    ms.erase(ms.begin());
    std::sort(ms.begin(), ms.end());
    const double median = ms[ms.size() / 2];
    const double audio_s = static_cast<double>(frames * hop) / rate;
    std::printf(
        "{\"voxd\": \"%s\", \"tokens\": %zu, \"frames\": %lld, \"ms\": %.1f, \"rtf\": %.4f}\n",
        backend_name.c_str(), tokens.linguistic.size(), static_cast<long long>(frames), median,
        median / 1000.0 / audio_s);
  } catch (const std::exception& e) {
    std::cerr << "voxd_sambert_bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
