// The audio formats the speech endpoint answers in (OpenAI's `response_format`).
#pragma once

#include <array>
#include <optional>
#include <string_view>

namespace voxd::server {

enum class AudioFormat { kMp3, kOpus, kAac, kFlac, kWav, kPcm };

// Every format, in the order messages list them.
inline constexpr std::array<AudioFormat, 6> kAudioFormats = {AudioFormat::kMp3, AudioFormat::kOpus,
                                                             AudioFormat::kAac, AudioFormat::kFlac,
                                                             AudioFormat::kWav, AudioFormat::kPcm};

// "mp3", "opus", "aac", "flac", "wav", "pcm".
std::string_view format_name(AudioFormat format);
// The format named `name` (exact, lower case), or nullopt.
std::optional<AudioFormat> parse_audio_format(std::string_view name);
// The Content-Type of a response in `format`: audio/mpeg, audio/ogg, audio/aac, audio/flac,
// audio/wav, audio/pcm.
std::string_view content_type(AudioFormat format);

}  // namespace voxd::server
