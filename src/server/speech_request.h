// The body of POST /v1/audio/speech in OpenAI's shape, parsed and checked before any work is
// queued: every field's type and range, the input's encoding and length, the model and voice
// against what the server offers. docs/server.md lists the fields and errors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/audio_format.h"

namespace voxd::server {

// OpenAI's `stream_format`: the audio bytes themselves, or server-sent events carrying them.
enum class StreamFormat {
  kAudio,  // the encoded audio as the body (chunked, or one file with "stream": false)
  kSse,    // text/event-stream: speech.audio.delta events (base64 audio), then speech.audio.done
};

// What `input` holds (voxd's extension `input_format`): text, or KAN-TTS symbol strings for
// Sambert voices.
enum class InputFormat { kText, kKanTtsSymbols };

struct SpeechRequest {
  std::string model;
  std::string input;  // valid UTF-8, not blank, at most SpeechPolicy::max_input_chars code points
  std::string voice;  // a served voice's id: an alias in the request is replaced by its voice
  AudioFormat response_format = AudioFormat::kMp3;  // OpenAI's default
  float speed = 1.0f;                               // 0.25 to 4.0
  // voxd's extension: false asks for one complete file with Content-Length instead of audio
  // streamed with chunked transfer encoding as it is produced (OpenAI's behaviour, the default).
  bool stream = true;
  StreamFormat stream_format = StreamFormat::kAudio;
  // OpenAI's style prompt; voxd's voices cannot follow one, so it is accepted and ignored (the
  // HTTP layer says so in a response header). Empty when not given.
  std::string instructions;
  // The rate to send the audio at, for make_audio_encoder's `output_rate`; nullopt: the voice's
  // own. pcm is 24 kHz unless the request says otherwise (OpenAI's pcm is 24 kHz and carries no
  // header to say so); voxd's extension `sample_rate` ("native" or kSampleRates, pcm and wav
  // only) chooses.
  std::optional<int64_t> sample_rate;
  // voxd's extensions for voices that sample (ChatTTS), checked here for type and range only;
  // nullopt: the voice's own. A voice that does not sample refuses them when the request is
  // admitted (scheduler::OptionError).
  std::optional<uint64_t> seed;        // 0 to 2^64-1
  std::optional<double> temperature;   // greater than 0, at most kMaxTemperature
  std::optional<double> top_p;         // greater than 0, at most 1
  std::optional<int64_t> top_k;        // 1 to kMaxTopK
  std::optional<std::string> speaker;  // not empty, at most kMaxSpeakerBytes
  std::optional<bool> refine_text;
  // voxd's extensions for Sambert voices: an emotion the voice names, and symbol input.
  std::optional<std::string> emotion;  // not empty, at most kMaxEmotionBytes
  InputFormat input_format = InputFormat::kText;
};

// What a request may ask for, given by the server.
struct SpeechPolicy {
  std::vector<std::string> models;  // accepted values of `model`
  std::vector<std::string> voices;  // accepted values of `voice`
  // Other names accepted for voices, alias → voice (OpenAI's "alloy" → "en-demo"), as
  // parse_voice_aliases gives them.
  std::map<std::string, std::string> voice_aliases;
  size_t max_input_chars = 100000;  // Unicode code points; more is answered 413
};

inline constexpr float kMinSpeed = 0.25f;
inline constexpr float kMaxSpeed = 4.0f;
// The longest `instructions` taken, in code points (as long as OpenAI takes an `input`).
inline constexpr size_t kMaxInstructionsChars = 4096;
// The rate of pcm when the request does not choose one: OpenAI's.
inline constexpr int64_t kOpenAiPcmRate = 24000;
// The rates `sample_rate` may name: every one is reached from the usual voice rates by the
// resampler (server/resampler.h), and every codec but Opus takes it.
inline constexpr int64_t kSampleRates[] = {8000,  11025, 12000, 16000, 22050,
                                           24000, 32000, 44100, 48000};
// The bounds of the sampling extensions: `voxd synth`'s for --temperature and --top-k, and room
// for a spk_emb string copied from ChatTTS (a few kB) in `speaker`.
inline constexpr double kMaxTemperature = 10.0;
inline constexpr int64_t kMaxTopK = 100000;
inline constexpr size_t kMaxSpeakerBytes = 65536;
inline constexpr size_t kMaxEmotionBytes = 256;

// Parses a request body. Throws ApiError: 400 for a body that is not UTF-8 or not a JSON object,
// a number out of range, an unknown field, a field of the wrong type, a missing or blank input,
// an unknown voice, an unsupported format or stream_format, a format this build cannot encode
// (aac without libavcodec: missing_codec_library), speed out of range, instructions too long, a
// sample_rate not in kSampleRates or for another format than pcm and wav, "stream_format":
// "sse" with "stream": false, a seed that is not an integer from 0 to 2^64-1, a temperature
// not in (0, kMaxTemperature], a top_p not in (0, 1], a top_k that is not an integer from 1 to
// kMaxTopK, a speaker that is empty or over kMaxSpeakerBytes, or a refine_text that is not a
// boolean; 404 for an unknown model; 413 for input over the limit.
SpeechRequest parse_speech_request(std::string_view body, const SpeechPolicy& policy);

// The aliases given as "alias=voice" (`voxd serve --voice-alias`). Throws InputError naming
// the entry when one is not of that form, an alias is given twice, an alias is itself one of
// `voices`, or its voice is not one of `voices`.
std::map<std::string, std::string> parse_voice_aliases(const std::vector<std::string>& entries,
                                                       const std::vector<std::string>& voices);

// Where `text` stops being valid UTF-8 (overlong forms, surrogates and code points above
// U+10FFFF are invalid), or std::string_view::npos when all of it is valid.
size_t find_invalid_utf8(std::string_view text);

}  // namespace voxd::server
