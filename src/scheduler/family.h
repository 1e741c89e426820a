// A model family as the engine sees it (docs/architecture.md): it reads its voices' directories,
// turns a request's text into a stream's work with its front end, loads a voice's models, and
// makes the step kinds that run its streams. The scheduler, the voice pool and the engine know
// families only through these interfaces; families/registry.h lists the families there are.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backends/runtime.h"
#include "core/error.h"
#include "core/workspace_plan.h"
#include "scheduler/scheduler_options.h"
#include "scheduler/step_kind.h"
#include "scheduler/stream.h"
#include "text/front_end.h"

namespace voxd::scheduler {

// What every voice has, whatever its family.
struct VoiceCard {
  std::string name;       // the value of a request's `voice`
  std::string directory;  // where it was read from
  std::string family;     // the family's type
  std::string language;   // eSpeak-style, e.g. "en-us"
  int64_t sample_rate = 0;
  std::vector<std::string> speakers;  // the speakers it names (none: one unnamed speaker)
  std::vector<std::string> emotions;  // the emotions it names (none: it has no emotions to pick)
  bool sampling = false;  // its model samples: it takes seed, temperature, top_p and top_k
};

// What a request's input holds: text for the voice's front end, or KAN-TTS symbol strings
// (families/sambert/symbols.h), which only voices that read them take.
enum class InputFormat { kText, kKanTtsSymbols };

// What a request asks of a voice besides its text. The sampling fields are for families whose
// models sample (ChatTTS); unset means the voice's own, and a family that does not sample
// refuses them (OptionError), as it does an emotion when it has none to choose from.
struct SpeechOptions {
  float speed = 1.0f;                  // 0.25 to 4
  std::optional<uint64_t> seed;        // the same seed, text and options make the same audio
  std::optional<double> temperature;   // > 0
  std::optional<double> top_p;         // (0, 1]
  std::optional<int64_t> top_k;        // >= 1
  std::optional<std::string> speaker;  // a speaker of the voice, "random" or a spk_emb string
  std::optional<bool> refine_text;     // ChatTTS's refine-text stage before the audio codes
  std::optional<std::string> emotion;  // an emotion the voice names (Sambert)
  InputFormat input_format = InputFormat::kText;
};

// A SpeechOptions field the voice cannot take: InputError naming the request's field (the HTTP
// layer answers 400 with it as the error's param).
class OptionError : public InputError {
 public:
  OptionError(const std::string& message, std::string field)
      : InputError(message), field_(std::move(field)) {}
  const std::string& field() const { return field_; }

 private:
  std::string field_;
};

// For voices that read text and name no emotions: OptionError for an emotion, or for input that is
// not text, naming the voice.
void require_plain_text(const SpeechOptions& options, const std::string& voice);

// A stream's work as the family prepared it at admission.
struct PreparedStream {
  std::unique_ptr<StreamWork> work;
  // The family's kinds make no more audio for the stream while this much is waiting for the
  // client (Stream::max_buffered_samples).
  int64_t max_buffered_samples = 0;
};

// The shape `voxd mem` plans a voice's steps for, as given on its command line; what each means
// is the family's (phonemes or tokens per sentence, mel frames, vocoder chunks).
struct PlanShape {
  std::optional<int64_t> batch;   // sentences or streams in a step
  std::optional<int64_t> units;   // input units (phonemes, tokens) of the longest item
  std::optional<int64_t> frames;  // mel frames of the longest item, or per vocoder chunk
  std::optional<int64_t> chunks;  // vocoder chunks in one vocoder step
};

// A voice's models on the device, and the device state that goes with them (recorded graphs).
// Made and destroyed on the device thread.
class LoadedVoice {
 public:
  virtual ~LoadedVoice() = default;
  // Pages of the KV cache pool the voice holds for its streams (families whose streams hold
  // one; StreamGauges::kv_pages counts what each holds).
  virtual int64_t kv_cache_pages() const { return 0; }
  // Bytes of one page of that pool (0 without one).
  virtual uint64_t kv_cache_page_bytes() const { return 0; }
  // Device bytes held by what the voice's steps recorded only to run faster and can run without
  // (CUDA graphs with an eager fallback; not those a step cannot run without).
  virtual uint64_t releasable_recording_bytes() const { return 0; }
  // Device thread, while none of the voice's steps runs: drops those recordings (the steps record
  // them again when memory allows); returns the bytes they held. The scheduler calls it when a
  // step does not fit the memory budget but would without them.
  virtual uint64_t release_recordings() { return 0; }
};

// One voice of a family: its config and front end, read without touching the weights.
class VoiceDefinition {
 public:
  virtual ~VoiceDefinition() = default;
  virtual const VoiceCard& card() const = 0;
  // Safe from any thread.
  virtual const text::FrontEnd& front_end() const = 0;
  // Any thread: the work of speaking `text`. Throws voxd::InputError for text the voice cannot
  // speak (the front end's errors).
  virtual PreparedStream prepare(std::string_view text, const SpeechOptions& options,
                                 const SchedulerOptions& scheduling) const = 0;
  // Device thread: the voice's models in `dtype` from ctx's allocator, with what its streams
  // hold on the device for their life sized by `scheduling` (a KV cache pool). voxd::Error when
  // they do not fit ("out of memory: ..."), InputError naming the file for bad weights.
  virtual std::unique_ptr<LoadedVoice> load(Context& ctx, DType dtype,
                                            const SchedulerOptions& scheduling) const = 0;
  // The memory the voice's steps take for `shape` on `backend` in `dtype`, planned without
  // running anything (the weights loaded in a planning context over a measuring arena); adds
  // what the plan assumes to `notes`. Throws voxd::InputError for a shape the family cannot
  // plan (naming the flags it needs).
  virtual WorkspacePlan plan_memory(Backend& backend, DType dtype, const PlanShape& shape,
                                    std::vector<std::string>& notes) const = 0;
  // Workspace bytes the smallest step of `loaded` needs on `backend` (the server is not ready
  // while less is free).
  virtual uint64_t smallest_step_bytes(Backend& backend, const LoadedVoice& loaded,
                                       const SchedulerOptions& scheduling) const = 0;
};

class Family {
 public:
  virtual ~Family() = default;
  // The value of a voice config.json's "type".
  virtual std::string_view type() const = 0;
  // Reads the voice in `directory` (its config.json is a JSON object of this family's type).
  // Throws voxd::InputError naming the file and the field.
  virtual std::unique_ptr<VoiceDefinition> read(const std::string& directory) const = 0;
  // The step kinds that run this family's streams, in the order of preference at equal slack.
  virtual std::vector<std::unique_ptr<StepKind>> make_kinds(
      DeviceRuntime& runtime, const SchedulerOptions& scheduling) const = 0;
};

// The families an engine knows, by type.
class FamilyRegistry {
 public:
  // `family`'s type must be new. The first family added is the one of configs without "type".
  void add(std::unique_ptr<Family> family);
  // The family of `type`, or null.
  const Family* find(std::string_view type) const;
  // The family named by `directory`/config.json's "type". Throws voxd::InputError naming the
  // file for a missing or unreadable config, or a type no family has.
  const Family& family_of(const std::string& directory) const;
  const std::vector<std::unique_ptr<Family>>& families() const { return families_; }

 private:
  std::vector<std::unique_ptr<Family>> families_;
};

}  // namespace voxd::scheduler
