#include "families/fastspeech2/family.h"

#include "core/error.h"
#include "core/workspace_arena.h"
#include "families/fastspeech2/acoustic_kind.h"
#include "families/fastspeech2/vocoder_kind.h"
#include "families/fastspeech2/workspace_steps.h"
#include "scheduler/memory_budget.h"
#include "text/mandarin/espeak_front_end.h"

namespace voxd::fastspeech2 {

Definition::Definition(VoiceConfig config)
    : config_(std::move(config)),
      card_{.name = config_.name,
            .directory = config_.directory,
            .family = kFastSpeech2HifiGanType,
            .language = config_.language,
            .sample_rate = config_.sample_rate,
            .speakers = {},
            .emotions = {}},
      front_end_(text::mandarin::make_phoneme_front_end(
          text::parse_phoneme_set(config_.phonemes), text::SymbolTable::load(config_.symbols_path),
          config_.language, config_.name)) {
  for (const auto& [speaker, id] : config_.speakers) card_.speakers.push_back(speaker);
}

namespace {

// The first sampling option `options` sets (in SpeechOptions' order), or nullptr.
const char* sampling_option_set(const scheduler::SpeechOptions& options) {
  if (options.seed) return "seed";
  if (options.temperature) return "temperature";
  if (options.top_p) return "top_p";
  if (options.top_k) return "top_k";
  if (options.speaker) return "speaker";
  if (options.refine_text) return "refine_text";
  return nullptr;
}

}  // namespace

scheduler::PreparedStream Definition::prepare(std::string_view text,
                                              const scheduler::SpeechOptions& options,
                                              const scheduler::SchedulerOptions& scheduling) const {
  // Refused rather than ignored: the caller would otherwise believe a seed or temperature took
  // effect. Checked before the front end runs, so a refused request costs no text processing.
  if (const char* field = sampling_option_set(options)) {
    throw scheduler::OptionError(std::string(field) +
                                     " applies to voices that sample (ChatTTS); voice '" +
                                     config_.name + "' is a FastSpeech2 + HiFiGAN voice",
                                 field);
  }
  scheduler::require_plain_text(options, config_.name);
  return prepare_sentences(front_end_->process(text), options, scheduling);
}

scheduler::PreparedStream Definition::prepare_sentences(
    std::vector<text::Sentence> sentences, const scheduler::SpeechOptions& options,
    const scheduler::SchedulerOptions& scheduling) const {
  VOXD_CHECK(!sentences.empty(), "a stream needs at least one sentence");
  const HifiGanConfig& vocoder = config_.vocoder;
  const int64_t hop = vocoder.hop_length();
  auto work = std::make_unique<SentenceWork>(
      options.speed, scheduling.chunk_frames + 2 * vocoder.receptive_field_frames());
  for (size_t i = 0; i < sentences.size(); ++i) {
    text::Sentence& sentence = sentences[i];
    const int64_t pause =
        static_cast<int64_t>(sentence.pause_after_ms) * config_.sample_rate / 1000;
    const std::optional<size_t> clause =
        i == 0 && scheduling.first_clause_alone ? first_clause_ids(sentence) : std::nullopt;
    if (clause) {
      const auto end = sentence.ids.begin() + static_cast<std::ptrdiff_t>(*clause);
      work->sentences.push_back(
          {std::vector<int64_t>(sentence.ids.begin(), end), sentence.rate, 0});
      work->sentences.push_back(
          {std::vector<int64_t>(end, sentence.ids.end()), sentence.rate, pause});
    } else {
      work->sentences.push_back({std::move(sentence.ids), sentence.rate, pause});
    }
  }
  scheduler::PreparedStream prepared;
  prepared.work = std::move(work);
  prepared.max_buffered_samples =
      scheduling.buffered_chunks * (scheduling.chunk_frames * hop + vocoder.output_length(1) - hop);
  return prepared;
}

std::unique_ptr<scheduler::LoadedVoice> Definition::load(
    Context& ctx, DType dtype, const scheduler::SchedulerOptions& /*scheduling*/) const {
  front_end_->load();  // a Mandarin voice's lexicon, before the first request
  auto loaded = std::make_unique<LoadedModels>();
  loaded->voice = Voice::load(ctx, config_.directory, dtype);
  return loaded;
}

namespace {

// Mel frames per phoneme when the shape gives none: about 93 ms at 22050 Hz with a hop of 256, a
// little slower than conversational speech, so the default errs on the large side.
constexpr int64_t kDefaultFramesPerPhoneme = 8;

}  // namespace

WorkspacePlan Definition::plan_memory(Backend& backend, DType dtype,
                                      const scheduler::PlanShape& shape,
                                      std::vector<std::string>& notes) const {
  if (shape.batch.has_value() != shape.units.has_value()) {
    throw InputError("--batch and --phonemes go together (the acoustic model's batch shape)");
  }
  const bool acoustic = shape.batch.has_value();
  if (!acoustic && !shape.chunks) {
    throw InputError(
        "nothing to plan: give --batch and --phonemes for the acoustic model, "
        "--chunks and --frames for the vocoder, or both");
  }
  if (!acoustic && !shape.frames) {
    throw InputError("--chunks needs --frames (mel frames per vocoder chunk)");
  }
  std::optional<AcousticShape> acoustic_shape;
  if (acoustic) {
    AcousticShape s{*shape.batch, *shape.units, 0};
    s.frames = shape.frames.value_or(s.phonemes * kDefaultFramesPerPhoneme);
    if (!shape.frames) {
      notes.push_back(std::to_string(s.frames) + " mel frames per sequence is the default, " +
                      std::to_string(kDefaultFramesPerPhoneme) + " per phoneme (set --frames)");
    }
    acoustic_shape = s;
  }
  VocoderShape vocoder_shape;
  if (shape.chunks) {
    vocoder_shape = {*shape.chunks, shape.frames.value_or(acoustic_shape->frames)};
  } else {
    vocoder_shape = {acoustic_shape->batch, acoustic_shape->frames};
    notes.push_back("the vocoder is planned for the acoustic batch vocoded whole (" +
                    std::to_string(vocoder_shape.chunks) + " chunks of " +
                    std::to_string(vocoder_shape.frames) +
                    " frames); set --chunks for chunked vocoding");
  }
  WorkspaceArena weights(backend.device());
  Context load = Context::for_planning(backend, weights);
  const auto voice = Voice::load(load, config_.directory, dtype,
                                 acoustic ? Voice::Parts::All : Voice::Parts::VocoderOnly);
  return plan_voice(backend, *voice, weights.in_use(), acoustic_shape, vocoder_shape);
}

uint64_t Definition::smallest_step_bytes(Backend& backend, const scheduler::LoadedVoice& loaded,
                                         const scheduler::SchedulerOptions& scheduling) const {
  const HifiGan& vocoder = static_cast<const LoadedModels&>(loaded).voice->vocoder();
  const int64_t frames = scheduling.chunk_frames + 2 * config_.vocoder.receptive_field_frames();
  return scheduler::MemoryBudget::footprint(plan_vocoder(backend, vocoder, 1, frames).bytes());
}

std::unique_ptr<scheduler::VoiceDefinition> Family::read(const std::string& directory) const {
  return std::make_unique<Definition>(VoiceConfig::load(directory));
}

std::vector<std::unique_ptr<scheduler::StepKind>> Family::make_kinds(
    DeviceRuntime& runtime, const scheduler::SchedulerOptions& scheduling) const {
  std::vector<std::unique_ptr<scheduler::StepKind>> kinds;
  kinds.push_back(std::make_unique<VocoderKind>(
      runtime, scheduling.chunk_frames, scheduling.first_chunk_frames, scheduling.cuda_graphs));
  kinds.push_back(std::make_unique<AcousticKind>(runtime, scheduling));
  return kinds;
}

const VoiceConfig& config_of(const scheduler::VoiceEntry& entry) {
  return static_cast<const Definition&>(*entry.definition).config();
}

uint64_t LoadedModels::releasable_recording_bytes() const {
  return acoustic_graphs ? acoustic_graphs->bytes() : 0;
}

uint64_t LoadedModels::release_recordings() {
  const uint64_t bytes = releasable_recording_bytes();
  acoustic_graphs.reset();
  return bytes;
}

LoadedModels& models_of(scheduler::VoiceEntry& entry) {
  return static_cast<LoadedModels&>(*entry.models);
}

const LoadedModels& models_of(const scheduler::VoiceEntry& entry) {
  return static_cast<const LoadedModels&>(*entry.models);
}

SentenceWork& work_of(scheduler::Stream& stream) {
  return static_cast<SentenceWork&>(*stream.work);
}

const SentenceWork& work_of(const scheduler::Stream& stream) {
  return static_cast<const SentenceWork&>(*stream.work);
}

}  // namespace voxd::fastspeech2
