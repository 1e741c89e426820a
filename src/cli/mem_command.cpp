#include "cli/mem_command.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "cli/command_exit.h"
#include "cli/dtype_option.h"
#include "cli/voice_search.h"
#include "core/error.h"
#include "core/memory_summary.h"
#include "core/workspace_arena.h"
#include "families/registry.h"
#ifdef VOXD_HAVE_CUDA
#include "backends/cuda/cuda_backend.h"
#endif

namespace voxd {
namespace {

struct MemOptions {
  std::string voice;
  std::string device = "cpu";
  std::string dtype = "f32";
  int threads = 0;
  std::optional<int64_t> batch;
  std::optional<int64_t> phonemes;
  std::optional<int64_t> frames;
  std::optional<int64_t> chunks;
  bool json = false;
};

// The backend a plan for --device is made with; CUDA plans use one that opens no device. Adds
// what the plan assumes about it to `notes`.
std::unique_ptr<Backend> planning_backend(const MemOptions& options, DType dtype,
                                          std::vector<std::string>& notes) {
  const std::string& device = options.device;
  if (device == "cpu") {
    if (dtype != DType::F32) {
      throw InputError(
          "--device cpu computes in f32 only; use --dtype f32 (f16 and bf16 run on "
          "cuda)");
    }
    auto cpu = std::make_unique<CpuBackend>(options.threads);
    notes.push_back("the cpu backend's kernel scratch is per thread; planned for " +
                    std::to_string(cpu->threads()) + " threads (set --threads)");
    return cpu;
  }
  if (device.rfind("cuda", 0) == 0) {
    int index = 0;
    if (device != "cuda") {
      const std::string digits = device.substr(std::min<size_t>(5, device.size()));
      if (device[4] != ':' || digits.empty() || digits.size() > 4 ||
          digits.find_first_not_of("0123456789") != std::string::npos) {
        throw InputError("bad --device '" + device + "'; expected cpu, cuda or cuda:N");
      }
      index = std::stoi(digits);
    }
#ifdef VOXD_HAVE_CUDA
    notes.push_back("cuda plans include cuBLAS's workspace (" +
                    std::to_string(CudaBackend::kCublasWorkspaceBytes >> 20) +
                    " MiB in each gemm call),\n      not the CUDA context and kernel images (a "
                    "few hundred MiB per process)");
    return std::make_unique<CudaBackend>(index, CudaBackend::PlanOnly{});
#else
    throw InputError("--device " + device + " (device " + std::to_string(index) +
                     "): this voxd was built without CUDA, so it has no CUDA backend to plan for");
#endif
  }
  throw InputError("unknown --device '" + device + "'; expected cpu, cuda or cuda:N");
}

// One row of the table, without trailing blanks.
void print_row(const std::string& name, const std::string& shape, const std::string& workspace,
               const std::string& carried) {
  char text[256];
  std::snprintf(text, sizeof(text), "  %-17s %-36s %11s %11s", name.c_str(), shape.c_str(),
                workspace.c_str(), carried.c_str());
  std::string line = text;
  line.erase(line.find_last_not_of(' ') + 1);
  std::printf("%s\n", line.c_str());
}

void print_text(const std::string& voice, const WorkspacePlan& plan,
                const std::vector<std::string>& notes) {
  std::printf("voxd memory plan: voice '%s' on %s in %s (planned; nothing ran)\n", voice.c_str(),
              plan.device.c_str(), plan.dtype.c_str());
  print_row("", "shape", "workspace", "carried");
  print_row("weights", "", format_bytes(plan.weights_bytes), "");
  for (const StagePlan& stage : plan.stages) {
    print_row(stage.name, stage.shape, format_bytes(stage.workspace_bytes),
              stage.carried_bytes > 0 ? format_bytes(stage.carried_bytes) : "");
  }
  print_row("total", "weights + largest step", format_bytes(plan.total_bytes()),
            "(" + std::to_string(plan.total_bytes()) + " bytes)");
  const bool carries = std::any_of(plan.stages.begin(), plan.stages.end(),
                                   [](const StagePlan& stage) { return stage.carried_bytes > 0; });
  if (carries) {
    std::printf(
        "carried: memory a step holds outside its workspace (what it keeps for a later\n"
        "step: an acoustic encoder's output, a KV cache)\n");
  }
  for (const std::string& note : notes) std::printf("note: %s\n", note.c_str());
}

// Accepts whole numbers of at least 1 ("--batch: must be a whole number of at least 1, got 0").
CLI::Validator at_least_one() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        int64_t n = 0;
        const char* end = value.data() + value.size();
        const auto [ptr, ec] = std::from_chars(value.data(), end, n);
        if (ec != std::errc() || ptr != end || n < 1) {
          return "must be a whole number of at least 1, got " + value;
        }
        return {};
      },
      "INT>=1");
}

int run_mem(const MemOptions& options) {
  const DType dtype = parse_dtype_option(options.dtype, "--dtype");
  const std::string directory = resolve_voice(options.voice);
  const std::unique_ptr<scheduler::VoiceDefinition> voice =
      families::registry().family_of(directory).read(directory);
  std::vector<std::string> notes;
  const std::unique_ptr<Backend> backend = planning_backend(options, dtype, notes);
  const scheduler::PlanShape shape{.batch = options.batch,
                                   .units = options.phonemes,
                                   .frames = options.frames,
                                   .chunks = options.chunks};
  const WorkspacePlan plan = voice->plan_memory(*backend, dtype, shape, notes);
  if (options.json) {
    nlohmann::json j = to_json(plan);
    j["voice"] = voice->card().name;
    j["notes"] = notes;
    std::cout << j.dump(2) << "\n";
  } else {
    print_text(voice->card().name, plan, notes);
  }
  return 0;
}

}  // namespace

void add_mem_command(CLI::App& app) {
  auto options = std::make_shared<MemOptions>();
  CLI::App* cmd = app.add_subcommand(
      "mem",
      "Print the memory a voice needs for a batch shape (weights, workspace per step, "
      "total), planned without running anything");
  cmd->add_option("--voice", options->voice, "Voice directory")->required();
  cmd->add_option("--device", options->device,
                  "cpu, cuda or cuda:N (planning opens no device, so cuda needs no GPU)")
      ->capture_default_str();
  cmd->add_option("--dtype", options->dtype, "Parameter and activation dtype: f32, f16 or bf16")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}))
      ->capture_default_str();
  cmd->add_option("--threads", options->threads,
                  "CPU threads the cpu plan is for (0: all cores; scratch is per thread)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--batch", options->batch, "Sentences in the acoustic model's batch")
      ->check(at_least_one());
  cmd->add_option("--phonemes", options->phonemes, "Phonemes of the longest sentence")
      ->check(at_least_one());
  cmd->add_option("--frames", options->frames,
                  "Mel frames: of the longest sentence's output (default: 8 per phoneme) and of "
                  "each vocoder chunk")
      ->check(at_least_one());
  cmd->add_option("--chunks", options->chunks,
                  "Mel chunks per vocoder run (default: the acoustic batch, vocoded whole)")
      ->check(at_least_one());
  cmd->add_flag("--json", options->json, "Print the plan as JSON");
  cmd->callback([options] { exit_after([&] { return run_mem(*options); }); });
}

}  // namespace voxd
