// The teacher's audio as WAV files. The tool reads and writes mono 16-bit PCM RIFF itself rather
// than linking libsndfile: the format is fixed, and libsndfile would bring its codec libraries
// (FLAC, Vorbis, Opus, MP3) into the carry for the GPU machine.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace voxd::tools {

// The canonical 44-byte header of a mono 16-bit PCM WAV file holding `samples` samples at
// `sample_rate` Hz: "RIFF" <size> "WAVE", a 16-byte "fmt " chunk (format 1, 1 channel, rate,
// byte rate, block align 2, 16 bits), then "data" <samples·2>; all fields little-endian.
// Error if the data would not fit the 32-bit size fields.
std::array<uint8_t, 44> wav_header(size_t samples, int sample_rate);

// Writes `audio` to `path` as a mono 16-bit PCM WAV; Error naming the file. No fsync: the
// dataset is regenerated, not kept safe, and 4,000 fsyncs dominated the run time.
void write_wav(const std::string& path, const std::vector<int16_t>& audio, int sample_rate);

// A mono 16-bit PCM WAV file's samples (chunks other than "fmt " and "data" skipped); its rate
// (1,000 to 384,000 Hz) in `sample_rate`. Error naming the file when it is not one.
std::vector<int16_t> read_wav(const std::string& path, int& sample_rate);

}  // namespace voxd::tools
