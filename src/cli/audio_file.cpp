#include "cli/audio_file.h"

#include <sndfile.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "core/error.h"

namespace voxd {
namespace {

int format_for(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (ext == ".wav") return SF_FORMAT_WAV | SF_FORMAT_PCM_16;
  if (ext == ".flac") return SF_FORMAT_FLAC | SF_FORMAT_PCM_16;
  if (ext == ".ogg") return SF_FORMAT_OGG | SF_FORMAT_VORBIS;
  throw InputError("cannot write '" + path + "': unknown audio extension '" + ext +
                   "' (use .wav, .flac or .ogg)");
}

}  // namespace

AudioFileWriter::AudioFileWriter(const std::string& path, int64_t sample_rate)
    : path_(path), temporary_path_(path + ".partial") {
  SF_INFO info{};
  info.samplerate = static_cast<int>(sample_rate);
  info.channels = 1;
  info.format = format_for(path);
  file_ = sf_open(temporary_path_.c_str(), SFM_WRITE, &info);
  if (file_ == nullptr) throw InputError("cannot write '" + path + "': " + sf_strerror(nullptr));
  sf_command(file_, SFC_SET_CLIPPING, nullptr, SF_TRUE);
}

AudioFileWriter::~AudioFileWriter() {
  if (file_ != nullptr) {
    sf_close(file_);
    std::remove(temporary_path_.c_str());
  }
}

void AudioFileWriter::write(const float* samples, size_t count) {
  VOXD_CHECK(file_ != nullptr, "write after commit");
  const sf_count_t n = static_cast<sf_count_t>(count);
  if (sf_writef_float(file_, samples, n) != n) {
    throw Error("writing '" + path_ + "' failed: " + sf_strerror(file_));
  }
  samples_written_ += n;
}

void AudioFileWriter::commit() {
  VOXD_CHECK(file_ != nullptr, "commit twice");
  const int status = sf_close(file_);
  file_ = nullptr;
  if (status != 0 || std::rename(temporary_path_.c_str(), path_.c_str()) != 0) {
    std::remove(temporary_path_.c_str());
    throw Error("writing '" + path_ + "' failed while finishing the file");
  }
}

void write_audio_file(const std::string& path, const std::vector<float>& samples,
                      int64_t sample_rate) {
  AudioFileWriter writer(path, sample_rate);
  writer.write(samples.data(), samples.size());
  writer.commit();
}

}  // namespace voxd
