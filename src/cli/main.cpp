// voxd command line: synthesize text or ids to audio, vocode a mel, list voices, plan memory,
// serve speech over HTTP and watch a running server.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <iostream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "backends/runtime.h"
#include "cli/audio_output.h"
#include "cli/finite_number.h"
#include "cli/mem_command.h"
#include "cli/monitor_command.h"
#include "cli/phonemize_command.h"
#include "cli/progress_line.h"
#include "cli/serve_command.h"
#include "cli/voice_search.h"
#include "core/error.h"
#include "core/memory_limit.h"
#include "core/npy.h"
#include "core/voice_directory.h"
#include "families/chattts/synthesizer.h"
#include "families/fastspeech2/synthesizer.h"
#include "families/fastspeech2/voice.h"
#include "families/registry.h"
#include "families/sambert/voice.h"
#include "text/espeak_front_end.h"
#include "text/ids.h"
#include "text/mandarin/lexicon.h"

namespace {

using Clock = std::chrono::steady_clock;

struct GlobalOptions {
  std::string backend = "cpu";
  int threads = 0;
  std::string log_level = "warn";
  std::optional<std::string> gpu_memory_limit;
  std::optional<std::string> max_split_size;
};

struct SynthOptions {
  std::string voice;
  std::optional<std::string> text;
  std::optional<std::string> ids;
  std::optional<std::string> symbols;  // Sambert voices: KAN-TTS symbol strings
  std::optional<std::string> emotion;
  std::optional<std::string> speaker;
  float speed = 1.0f;
  float pitch = 1.0f;
  float energy = 1.0f;
  // ChatTTS voices.
  std::optional<uint64_t> seed;
  std::optional<float> temperature;
  std::optional<double> top_p;
  std::optional<int64_t> top_k;
  bool no_refine = false;
  std::string out = "out.wav";
  std::optional<std::string> format;
  std::optional<std::string> mel_out;
  int64_t chunk_frames = 0;
  bool memory_summary = false;
};

struct VocodeOptions {
  std::string voice;
  std::string mel;
  std::string out = "out.wav";
  std::optional<std::string> format;
  int64_t chunk_frames = 0;
  bool memory_summary = false;
};

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void report(const std::string& path, int64_t samples, int64_t sample_rate, double compute_seconds) {
  const double audio_seconds = static_cast<double>(samples) / static_cast<double>(sample_rate);
  spdlog::info("wrote {}: {:.2f} s of audio at {} Hz in {:.3f} s (real-time factor {:.3f})", path,
               audio_seconds, sample_rate, compute_seconds,
               audio_seconds > 0 ? compute_seconds / audio_seconds : 0.0);
}

// The backend and its device memory, with the limits from the global options.
voxd::RuntimeOptions runtime_options(const GlobalOptions& global) {
  voxd::RuntimeOptions options{.backend = global.backend, .threads = global.threads};
  if (global.gpu_memory_limit) {
    options.memory_limit = voxd::MemoryAmount::parse(
        *global.gpu_memory_limit, "--gpu-memory-limit (or VOXD_GPU_MEMORY_LIMIT)");
  }
  if (global.max_split_size) {
    options.max_split_size = voxd::MemoryAmount::parse(*global.max_split_size,
                                                       "--max-split-size (or VOXD_MAX_SPLIT_SIZE)");
  }
  return options;
}

// The text to speak: --text, or all of standard input.
std::string input_text(const SynthOptions& options) {
  if (options.text) return *options.text;
  return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

// `voxd synth` for a ChatTTS voice: the GPT's two stages, the Decoder and Vocos.
int run_chattts_synth(const GlobalOptions& global, const SynthOptions& options,
                      const std::string& directory) {
  if (options.ids) throw voxd::InputError("--ids applies to fastspeech2-hifigan voices only");
  if (options.mel_out || options.chunk_frames != 0 || options.pitch != 1.0f ||
      options.energy != 1.0f || options.speed != 1.0f) {
    throw voxd::InputError(
        "--mel-out, --chunk-frames, --speed, --pitch and --energy apply to fastspeech2-hifigan "
        "voices only (a ChatTTS voice takes --seed, --speaker, --temperature, --top-p, --top-k "
        "and --no-refine)");
  }
  voxd::DeviceRuntime runtime(runtime_options(global));
  const auto load_start = Clock::now();
  auto voice = voxd::chattts::Voice::load(runtime.weights_context(), directory);
  spdlog::info("loaded voice '{}' from {} in {:.3f} s", voice->config().name, directory,
               seconds_since(load_start));
  voxd::AudioOutput output(options.out, options.format, voice->config().sample_rate);
  voxd::chattts::GenerationOptions generation;
  generation.seed = options.seed.value_or(0);
  generation.speaker = options.speaker;
  generation.temperature = options.temperature;
  generation.top_p = options.top_p;
  generation.top_k = options.top_k;
  generation.refine_text = !options.no_refine;
  const std::string text = input_text(options);
  const auto start = Clock::now();
  const voxd::chattts::Generation made =
      voxd::chattts::Synthesizer(runtime.context(), *voice)
          .synthesize(text, generation, [&output](const std::vector<float>& audio) {
            output.write(audio.data(), audio.size());
          });
  const double compute_seconds = seconds_since(start);
  output.commit();
  if (made.drew_speaker) {
    spdlog::info("no --speaker: every sentence speaks with the random speaker of --seed {}",
                 generation.seed);
  }
  if (made.truncated > 0) {
    spdlog::warn("{} sentence(s) reached the code stage's max_new_token and were cut there",
                 made.truncated);
  }
  spdlog::info("{} sentence(s), {} code frames", made.sentences, made.code_frames);
  report(output.description(), made.samples, voice->config().sample_rate, compute_seconds);
  if (options.memory_summary) std::cerr << runtime.memory_summary();
  return 0;
}

// `voxd synth` for a Sambert-HiFiGAN voice: each line of KAN-TTS symbols (--symbols or standard
// input) through Sambert and the vocoder.
int run_sambert_synth(const GlobalOptions& global, const SynthOptions& options,
                      const std::string& directory) {
  if (options.text && options.symbols) {
    throw voxd::InputError("give --text (Chinese text) or --symbols (KAN-TTS symbols), not both");
  }
  if (options.ids || options.mel_out || options.chunk_frames != 0 || options.pitch != 1.0f ||
      options.energy != 1.0f || options.speed != 1.0f || options.temperature || options.top_p ||
      options.top_k || options.no_refine) {
    throw voxd::InputError(
        "a Sambert voice takes --text, --symbols, --emotion, --speaker and (NSF voices) --seed "
        "(--ids, "
        "--mel-out, --chunk-frames, --speed, --pitch, --energy and the ChatTTS options do not "
        "apply)");
  }
  voxd::sambert::VoiceConfig config = voxd::sambert::VoiceConfig::load(directory);
  if (options.seed && !config.acoustic.nsf) {
    throw voxd::InputError(
        "--seed applies to Sambert voices with an NSF vocoder (its source's "
        "noise); this one makes the same audio without one");
  }
  voxd::DeviceRuntime runtime(runtime_options(global));
  const auto load_start = Clock::now();
  const auto voice = voxd::sambert::Voice::load(runtime.weights_context(), std::move(config));
  spdlog::info("loaded voice '{}' from {} in {:.3f} s", voice->config().name, directory,
               seconds_since(load_start));
  // Text (--text, or standard input without symbols) is read by the Mandarin front end.
  const std::string input =
      options.text ? *options.text
      : options.symbols
          ? *options.symbols
          : std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  const bool symbols =
      options.symbols || (!options.text && voxd::sambert::looks_like_symbols(input));
  const voxd::sambert::SymbolFrontEnd& front_end = voice->front_end();
  const std::vector<voxd::SambertTokens> utterances =
      symbols ? front_end.utterances(input, options.emotion, options.speaker)
              : front_end.text_utterances(input, options.emotion, options.speaker);
  voxd::AudioOutput output(options.out, options.format, voice->config().sample_rate);
  const auto start = Clock::now();
  const voxd::sambert::Spoken spoken = voxd::sambert::speak(
      runtime.context(), *voice, utterances, options.seed.value_or(0),
      [&output](const std::vector<float>& audio) { output.write(audio.data(), audio.size()); });
  const double compute_seconds = seconds_since(start);
  output.commit();
  spdlog::info("{} utterance(s), {} mel frames", spoken.utterances, spoken.frames);
  report(output.description(), spoken.samples, voice->config().sample_rate, compute_seconds);
  if (options.memory_summary) std::cerr << runtime.memory_summary();
  return 0;
}

int run_synth(const GlobalOptions& global, const SynthOptions& options) {
  if (options.text && options.ids) throw voxd::InputError("give either --text or --ids, not both");
  const std::string directory = voxd::resolve_voice(options.voice);
  const std::string_view family = voxd::families::registry().family_of(directory).type();
  if (family == voxd::sambert::kSambertType) return run_sambert_synth(global, options, directory);
  if (options.symbols || options.emotion) {
    throw voxd::InputError("--symbols and --emotion apply to sambert voices only");
  }
  if (family == voxd::chattts::kChatTtsType) {
    return run_chattts_synth(global, options, directory);
  }
  if (options.seed || options.temperature || options.top_p || options.top_k || options.no_refine) {
    throw voxd::InputError(
        "--seed, --temperature, --top-p, --top-k and --no-refine apply to chattts voices only");
  }
  voxd::DeviceRuntime runtime(runtime_options(global));
  voxd::Context& ctx = runtime.context();
  const auto load_start = Clock::now();
  auto voice = voxd::Voice::load(runtime.weights_context(), directory);
  spdlog::info("loaded voice '{}' from {} in {:.3f} s", voice->config().name, directory,
               seconds_since(load_start));

  voxd::SynthesisOptions synthesis;
  synthesis.speaker = voice->speaker_id(options.speaker.value_or("0"));
  synthesis.speed = options.speed;
  synthesis.pitch = options.pitch;
  synthesis.energy = options.energy;
  synthesis.keep_mel = options.mel_out.has_value();
  synthesis.chunk_frames = options.chunk_frames;
  voxd::ProgressLine progress;
  synthesis.on_sentence = [&progress](const voxd::Utterance& so_far, int64_t total) {
    progress.update(so_far.sentences, total,
                    static_cast<double>(so_far.samples) / static_cast<double>(so_far.sample_rate));
  };

  voxd::Synthesizer synthesizer(ctx, *voice);
  voxd::AudioOutput output(options.out, options.format, voice->config().sample_rate);
  const voxd::AudioSink sink = [&output](const float* samples, size_t count) {
    output.write(samples, count);
  };
  const auto start = Clock::now();
  voxd::Utterance utterance;
  if (options.ids) {
    utterance = synthesizer.synthesize_ids(voxd::text::parse_ids(*options.ids), synthesis, sink);
  } else {
    utterance = synthesizer.synthesize_text(input_text(options), synthesis, sink);
  }
  const double compute_seconds = seconds_since(start);
  progress.clear();
  output.commit();
  if (options.mel_out) voxd::write_npy(*options.mel_out, utterance.mel);
  spdlog::info("{} sentence(s), {} mel frames", utterance.sentences, utterance.mel_frames);
  report(output.description(), utterance.samples, utterance.sample_rate, compute_seconds);
  if (options.memory_summary) std::cerr << runtime.memory_summary();
  return 0;
}

int run_vocode(const GlobalOptions& global, const VocodeOptions& options) {
  voxd::DeviceRuntime runtime(runtime_options(global));
  voxd::Context& ctx = runtime.context();
  auto voice = voxd::Voice::load(runtime.weights_context(), voxd::resolve_voice(options.voice),
                                 voxd::DType::F32, voxd::Voice::Parts::VocoderOnly);
  const voxd::Tensor mel = voxd::read_npy(options.mel);
  voxd::AudioOutput output(options.out, options.format, voice->config().sample_rate);
  const auto start = Clock::now();
  const std::vector<float> audio = voxd::vocode(ctx, *voice, mel, options.chunk_frames);
  const double compute_seconds = seconds_since(start);
  output.write(audio.data(), audio.size());
  output.commit();
  report(output.description(), static_cast<int64_t>(audio.size()), voice->config().sample_rate,
         compute_seconds);
  if (options.memory_summary) std::cerr << runtime.memory_summary();
  return 0;
}

// One line of `voxd voices`: name, language, sample rate, phonemes, speakers, and the
// directory when `with_directory`.
void print_voice(const std::string& name, const std::string& directory, bool with_directory) {
  try {
    const std::unique_ptr<voxd::scheduler::VoiceDefinition> voice =
        voxd::families::registry().family_of(directory).read(directory);
    const voxd::scheduler::VoiceCard& card = voice->card();
    std::cout << name << "\t" << card.language << "\t" << card.sample_rate << " Hz\t"
              << voice->front_end().unit_name() << "\t"
              << (card.speakers.empty() ? 1 : card.speakers.size()) << " speaker(s)";
  } catch (const voxd::Error& e) {
    std::cout << name << "\tbroken: " << e.what();
  }
  std::cout << (with_directory ? "\t" + directory : "") << "\n";
}

// The voices in `root`, or every voice on the search path when `root` is not given.
int run_voices(const std::optional<std::string>& root) {
  if (root) {
    for (const std::string& name : voxd::find_voices(*root)) {
      print_voice(name, *root + "/" + name, false);
    }
    return 0;
  }
  const std::vector<voxd::FoundVoice> voices = voxd::voices_on_search_path();
  if (voices.empty()) {
    throw voxd::InputError("no voices found in " + voxd::describe_voice_search_path() +
                           " (set VOXD_VOICES, or give a directory: voxd voices DIR)");
  }
  for (const voxd::FoundVoice& voice : voices) print_voice(voice.name, voice.directory, true);
  return 0;
}

void add_range_check(CLI::Option* option, double low, double high) {
  option->check(voxd::finite_number())->check(CLI::Range(low, high));
}

constexpr const char* kVoiceHelp =
    "Voice directory, or the name of a voice on the search path (VOXD_VOICES, then the "
    "repository's voices/, then the installed ones; see voxd voices)";
constexpr const char* kOutHelp =
    "Output audio file (.wav, .flac, .ogg, .mp3, .opus, .pcm), or - for standard output";

void add_format_option(CLI::App& command, std::optional<std::string>& format) {
  command
      .add_option("--format", format,
                  "Audio format: wav, flac, ogg, mp3, opus or pcm (raw 16-bit mono); default: "
                  "the --out extension, wav for -")
      ->check(CLI::IsMember({"wav", "flac", "ogg", "mp3", "opus", "pcm"}));
}

// The first word that is neither an option nor an option's value, if it names no command.
std::optional<std::string> unknown_command(const CLI::App& app, int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("-", 0) == 0) {
      const bool takes_value = arg.find('=') == std::string::npos && arg != "--help" &&
                               arg != "-h" && arg != "--version";
      if (takes_value) ++i;
      continue;
    }
    for (const CLI::App* command : app.get_subcommands({})) {
      if (command->get_name() == arg) return std::nullopt;
    }
    return arg;
  }
  return std::nullopt;
}

}  // namespace

int main(int argc, char** argv) {
  auto logger = spdlog::stderr_color_mt("voxd");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("voxd: %v");

  CLI::App app{"voxd: text-to-speech inference that knows its memory before it runs"};
  app.require_subcommand(1);
  app.fallthrough();
  app.set_version_flag("--version", "voxd 0.1.0");
  GlobalOptions global;
  app.add_option("--backend", global.backend, "Compute backend: cpu, reference, cuda or cuda:N")
      ->capture_default_str();
  app.add_option("--threads", global.threads, "CPU threads (0: all cores)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--log-level", global.log_level, "trace, debug, info, warn, error or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}))
      ->capture_default_str();
  app.add_option("--gpu-memory-limit", global.gpu_memory_limit,
                 "Most memory tensors may reserve on the device (host memory on cpu): bytes, "
                 "512MiB, 8GiB, 8GB, or a fraction of the device such as 0.5")
      ->envname("VOXD_GPU_MEMORY_LIMIT");
  app.add_option("--max-split-size", global.max_split_size,
                 "Cached blocks this large are never split (PyTorch's max_split_size_mb); same "
                 "forms, above 2MiB")
      ->envname("VOXD_MAX_SPLIT_SIZE");
  app.add_option_function<std::string>(
         "--lexicon",
         [](const std::string& file) { voxd::text::mandarin::set_deployment_lexicon(file); },
         "Mandarin lexicon file read on top of voxd's (one word a line: 银行 yin2 hang2)")
      ->check(CLI::ExistingFile)
      ->trigger_on_parse();

  SynthOptions synth;
  CLI::App* synth_cmd = app.add_subcommand("synth", "Synthesize text (or symbol ids) to audio");
  synth_cmd->add_option("--voice", synth.voice, kVoiceHelp)->required();
  synth_cmd->add_option("--text", synth.text, "Text to speak (default: read standard input)");
  synth_cmd->add_option("--ids", synth.ids, "Symbol ids instead of text, e.g. \"12 5 7\"");
  synth_cmd->add_option("--symbols", synth.symbols,
                        "Sambert: KAN-TTS symbol strings, one utterance a line, e.g. "
                        "\"{ge$tone5$s_begin$word_begin$emotion_neutral$F7} ...\" (default: read "
                        "standard input)");
  synth_cmd->add_option("--emotion", synth.emotion,
                        "Sambert: every token's emotion, e.g. emotion_happy (default: each "
                        "token's own)");
  synth_cmd->add_option("--speaker", synth.speaker,
                        "Speaker name or id (default 0); for a ChatTTS voice a named speaker, "
                        "random (from --seed) or a spk_emb string copied from ChatTTS; for a "
                        "Sambert voice every token's speaker (default: each token's own)");
  synth_cmd->add_option("--seed", synth.seed,
                        "ChatTTS: sampling seed; Sambert with an NSF vocoder: its source's noise "
                        "(default 0)");
  add_range_check(synth_cmd->add_option("--temperature", synth.temperature,
                                        "ChatTTS: the code stage's temperature"),
                  0.01, 10.0);
  add_range_check(synth_cmd->add_option("--top-p", synth.top_p, "ChatTTS: the code stage's top-P"),
                  0.01, 1.0);
  synth_cmd->add_option("--top-k", synth.top_k, "ChatTTS: the code stage's top-K")
      ->check(CLI::Range(1, 100000));
  synth_cmd->add_flag("--no-refine", synth.no_refine,
                      "ChatTTS: skip the refine-text stage (the original's skip_refine_text)");
  add_range_check(synth_cmd->add_option("--speed", synth.speed, "Speaking rate, 0.25 to 4")
                      ->capture_default_str(),
                  0.25, 4.0);
  add_range_check(
      synth_cmd->add_option("--pitch", synth.pitch, "Pitch scale, 0 to 4")->capture_default_str(),
      0.0, 4.0);
  add_range_check(synth_cmd
                      ->add_option("--energy", synth.energy,
                                   "Energy scale, 0 to 4 (ming024's FastSpeech2 scales "
                                   "energy by --pitch instead, and so does voxd)")
                      ->capture_default_str(),
                  0.0, 4.0);
  synth_cmd->add_option("--out", synth.out, kOutHelp)->capture_default_str();
  add_format_option(*synth_cmd, synth.format);
  synth_cmd->add_option("--mel-out", synth.mel_out, "Also save the mel as .npy [n_mels, T]");
  synth_cmd
      ->add_option("--chunk-frames", synth.chunk_frames,
                   "Vocode in chunks of this many mel frames (plus the vocoder's receptive field "
                   "as context), "
                   "so memory does not grow with the sentence; 0: each sentence at once")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  synth_cmd->add_flag("--memory-summary", synth.memory_summary,
                      "Print the memory summary (PyTorch's layout) to standard error at the end");

  VocodeOptions vocode;
  CLI::App* vocode_cmd = app.add_subcommand("vocode", "Turn a mel spectrogram (.npy) into audio");
  vocode_cmd
      ->add_option("--voice", vocode.voice, std::string(kVoiceHelp) + " (its vocoder is used)")
      ->required();
  vocode_cmd->add_option("--mel", vocode.mel, "float32 .npy of shape [n_mels, T] or [1, n_mels, T]")
      ->required();
  vocode_cmd->add_option("--out", vocode.out, kOutHelp)->capture_default_str();
  add_format_option(*vocode_cmd, vocode.format);
  vocode_cmd
      ->add_option("--chunk-frames", vocode.chunk_frames,
                   "Vocode in chunks of this many mel frames (plus the vocoder's receptive field "
                   "as context), "
                   "so memory does not grow with the sentence; 0: each sentence at once")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  vocode_cmd->add_flag("--memory-summary", vocode.memory_summary,
                       "Print the memory summary (PyTorch's layout) to standard error at the end");

  std::optional<std::string> voices_root;
  CLI::App* voices_cmd = app.add_subcommand(
      "voices",
      "List the voices on the search path (VOXD_VOICES, the repository's voices/, "
      "the installed ones), or in a directory");
  voices_cmd->add_option("dir", voices_root, "Directory of voice directories");

  voxd::add_mem_command(app);
  voxd::add_phonemize_command(app);
  voxd::ServeCommand serve(app);
  voxd::add_monitor_command(app);

  if (auto command = unknown_command(app, argc, argv)) {
    std::cerr
        << "voxd: unknown command '" << *command
        << "' (commands: synth, vocode, voices, mem, phonemize, serve, monitor; see voxd --help)\n";
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "voxd: " << e.what() << " (see voxd --help)\n";
    return 2;
  }
  spdlog::set_level(spdlog::level::from_str(global.log_level));

  try {
    if (*synth_cmd) return run_synth(global, synth);
    if (*vocode_cmd) return run_vocode(global, vocode);
    if (serve.selected()) return serve.run(app);
    return run_voices(voices_root);
  } catch (const voxd::Error& e) {
    std::cerr << "voxd: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "voxd: internal error: " << e.what() << "\n";
    return 1;
  }
}
