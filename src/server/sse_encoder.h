// OpenAI's `stream_format: "sse"` for the speech endpoint: the encoded audio carried in
// server-sent events instead of as the body. Each event is one line `data: <JSON>` and a blank
// line:
//   {"type": "speech.audio.delta", "audio": "<base64 of the next bytes of the encoded audio>"}
//   ... then, last:
//   {"type": "speech.audio.done",
//    "usage": {"input_tokens": N, "output_tokens": M, "total_tokens": N + M}}
// docs/server.md describes it.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "server/audio_encoder.h"

namespace voxd::server {

// The Content-Type of an SSE answer.
inline constexpr std::string_view kSseContentType = "text/event-stream";
// voxd counts this many output tokens per second of audio (one per 20 ms), for the usage of
// speech.audio.done.
inline constexpr int64_t kOutputTokensPerSecond = 50;

// An encoder that hands out what `audio` (in EncoderMode::kStream) makes as speech.audio.delta
// events, one per write() that made bytes, and ends with speech.audio.done from finish().
// `sample_rate` is the rate of the samples written (for the output tokens), `input_tokens` what
// the usage reports for the input (voxd: its characters).
std::unique_ptr<AudioEncoder> make_sse_encoder(std::unique_ptr<AudioEncoder> audio,
                                               int64_t sample_rate, int64_t input_tokens);

}  // namespace voxd::server
