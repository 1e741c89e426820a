// The body of POST /v1/audio/speech in OpenAI's shape, parsed and checked before any work is
// queued: every field's type and range, the input's encoding and length, the model and voice
// against what the server offers. docs/server.md lists the fields and errors.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "server/audio_format.h"

namespace voxd::server {

struct SpeechRequest {
  std::string model;
  std::string input;  // valid UTF-8, not blank, at most SpeechPolicy::max_input_chars code points
  std::string voice;
  AudioFormat response_format = AudioFormat::kMp3;  // OpenAI's default
  float speed = 1.0f;                               // 0.25 to 4.0
  // voxd's extension: false asks for one complete file with Content-Length instead of audio
  // streamed with chunked transfer encoding as it is produced (OpenAI's behaviour, the default).
  bool stream = true;
};

// What a request may ask for, given by the server.
struct SpeechPolicy {
  std::vector<std::string> models;  // accepted values of `model`
  std::vector<std::string> voices;  // accepted values of `voice`
  size_t max_input_chars = 100000;  // Unicode code points; more is answered 413
};

inline constexpr float kMinSpeed = 0.25f;
inline constexpr float kMaxSpeed = 4.0f;

// Parses a request body. Throws ApiError: 400 for a body that is not UTF-8 or not a JSON object,
// an unknown field, a field of the wrong type, a missing or blank input, an unknown voice, an
// unsupported format or stream_format, speed out of range or non-empty instructions; 404 for
// an unknown model; 413 for input over the limit.
SpeechRequest parse_speech_request(std::string_view body, const SpeechPolicy& policy);

// Where `text` stops being valid UTF-8 (overlong forms, surrogates and code points above
// U+10FFFF are invalid), or std::string_view::npos when all of it is valid.
size_t find_invalid_utf8(std::string_view text);

}  // namespace voxd::server
