// Writes mono float audio to a file through libsndfile; the container follows the extension.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

typedef struct sf_private_tag SNDFILE;

namespace voxd {

// Streams audio into `path` as it is produced: .wav as 16-bit PCM, .flac as 16-bit FLAC, .ogg as
// Vorbis, samples nominally in [-1, 1] (clipped). The data goes to a temporary file beside
// `path` that commit() renames into place, so a failed or abandoned run never leaves a partial
// file at `path`.
class AudioFileWriter {
 public:
  // Throws voxd::InputError for an unknown extension or a path that cannot be written.
  AudioFileWriter(const std::string& path, int64_t sample_rate);
  ~AudioFileWriter();
  AudioFileWriter(const AudioFileWriter&) = delete;
  AudioFileWriter& operator=(const AudioFileWriter&) = delete;

  void write(const float* samples, size_t count);
  // Finishes the file and moves it to `path`.
  void commit();
  int64_t samples_written() const { return samples_written_; }

 private:
  std::string path_;
  std::string temporary_path_;
  SNDFILE* file_ = nullptr;
  int64_t samples_written_ = 0;
};

// Writes a whole buffer: AudioFileWriter, write, commit.
void write_audio_file(const std::string& path, const std::vector<float>& samples,
                      int64_t sample_rate);

}  // namespace voxd
