#include "pipeline/audio_file.h"

#include <sndfile.h>

#include <algorithm>
#include <filesystem>
#include <memory>

#include "core/error.h"

namespace voxd {
namespace {

int format_for(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  if (ext == ".wav") return SF_FORMAT_WAV | SF_FORMAT_PCM_16;
  if (ext == ".flac") return SF_FORMAT_FLAC | SF_FORMAT_PCM_16;
  if (ext == ".ogg") return SF_FORMAT_OGG | SF_FORMAT_VORBIS;
  throw InputError("cannot write '" + path + "': unknown audio extension '" + ext +
                   "' (use .wav, .flac or .ogg)");
}

struct SndfileCloser {
  void operator()(SNDFILE* file) const { sf_close(file); }
};

}  // namespace

void write_audio_file(const std::string& path, const std::vector<float>& samples,
                      int64_t sample_rate) {
  SF_INFO info{};
  info.samplerate = static_cast<int>(sample_rate);
  info.channels = 1;
  info.format = format_for(path);
  std::unique_ptr<SNDFILE, SndfileCloser> file(sf_open(path.c_str(), SFM_WRITE, &info));
  if (!file) throw InputError("cannot write '" + path + "': " + sf_strerror(nullptr));
  sf_command(file.get(), SFC_SET_CLIPPING, nullptr, SF_TRUE);
  const sf_count_t count = static_cast<sf_count_t>(samples.size());
  if (sf_writef_float(file.get(), samples.data(), count) != count) {
    throw Error("writing '" + path + "' failed: " + sf_strerror(file.get()));
  }
}

std::vector<float> read_audio_file(const std::string& path, int64_t* sample_rate) {
  SF_INFO info{};
  std::unique_ptr<SNDFILE, SndfileCloser> file(sf_open(path.c_str(), SFM_READ, &info));
  if (!file) throw InputError("cannot read audio file '" + path + "': " + sf_strerror(nullptr));
  std::vector<float> interleaved(static_cast<size_t>(info.frames * info.channels));
  sf_readf_float(file.get(), interleaved.data(), info.frames);
  std::vector<float> mono(static_cast<size_t>(info.frames));
  for (sf_count_t i = 0; i < info.frames; ++i) {
    mono[static_cast<size_t>(i)] = interleaved[static_cast<size_t>(i * info.channels)];
  }
  if (sample_rate) *sample_rate = info.samplerate;
  return mono;
}

}  // namespace voxd
