// Writes mono float audio to a file through libsndfile; the container follows the extension.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace voxd {

// Writes `samples` (nominally in [-1, 1]; clipped) at `sample_rate` to `path`: .wav as 16-bit
// PCM, .flac as 16-bit FLAC, .ogg as Vorbis. Throws voxd::InputError for an unknown extension or
// a path that cannot be written.
void write_audio_file(const std::string& path, const std::vector<float>& samples,
                      int64_t sample_rate);

// Reads a mono or multi-channel audio file (first channel) as floats; for tests and tools.
std::vector<float> read_audio_file(const std::string& path, int64_t* sample_rate);

}  // namespace voxd
