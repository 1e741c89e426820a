// Where `voxd synth` and `voxd vocode` put their audio: a file, or standard output for "-".
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "cli/audio_file.h"
#include "server/audio_encoder.h"

namespace voxd {

// Writes mono float audio as it is produced to `path`, or to standard output when `path` is "-".
// The format is `format` (wav, flac, ogg, mp3, opus, pcm) when given, else the file's extension;
// "-" defaults to wav. Standard output cannot seek, so it gets the server's streaming encoders
// (docs/server.md: WAV sizes say "until the end", FLAC's length is unknown). Files are finished
// completely: .wav, .flac and .ogg through AudioFileWriter, .mp3, .opus and .pcm through the
// same encoders; either way into a temporary file that commit() renames into place.
class AudioOutput {
 public:
  // Throws voxd::InputError for an unknown format, a --format that disagrees with the file's
  // extension, ogg to standard output, or a path that cannot be written.
  AudioOutput(const std::string& path, const std::optional<std::string>& format,
              int64_t sample_rate);
  ~AudioOutput();
  AudioOutput(const AudioOutput&) = delete;
  AudioOutput& operator=(const AudioOutput&) = delete;

  void write(const float* samples, size_t count);
  // Finishes the audio: flushes standard output, or moves the file to `path`.
  void commit();
  // What the log calls the output: the path, or "standard output".
  std::string description() const;

 private:
  void send(const std::string& bytes);

  std::string path_;
  std::optional<AudioFileWriter> file_writer_;
  std::unique_ptr<server::AudioEncoder> encoder_;
  std::FILE* stream_ = nullptr;  // standard output, or the temporary file the encoder fills
  std::string temporary_path_;   // empty for standard output
  std::string bytes_;
};

}  // namespace voxd
