#include "server/audio_format.h"

#include <array>
#include <utility>

namespace voxd::server {
namespace {

struct FormatRow {
  AudioFormat format;
  std::string_view name;
  std::string_view content_type;
};

constexpr std::array<FormatRow, 6> kFormats = {{
    {AudioFormat::kMp3, "mp3", "audio/mpeg"},
    {AudioFormat::kOpus, "opus", "audio/ogg"},
    {AudioFormat::kAac, "aac", "audio/aac"},
    {AudioFormat::kFlac, "flac", "audio/flac"},
    {AudioFormat::kWav, "wav", "audio/wav"},
    {AudioFormat::kPcm, "pcm", "audio/pcm"},
}};

const FormatRow& row(AudioFormat format) {
  for (const FormatRow& r : kFormats) {
    if (r.format == format) return r;
  }
  return kFormats[0];
}

}  // namespace

std::string_view format_name(AudioFormat format) {
  return row(format).name;
}

std::optional<AudioFormat> parse_audio_format(std::string_view name) {
  for (const FormatRow& r : kFormats) {
    if (r.name == name) return r.format;
  }
  return std::nullopt;
}

std::string_view content_type(AudioFormat format) {
  return row(format).content_type;
}

}  // namespace voxd::server
