#include "cli/audio_output.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <span>

#include "core/error.h"
#include "server/audio_format.h"

namespace voxd {
namespace {

// The format a file's extension names (".WAV" → "wav"), or the extension itself when it names
// none of voxd's formats.
std::string extension_format(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  if (!ext.empty()) ext.erase(0, 1);
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext;
}

bool written_by_libsndfile(const std::string& format) {
  return format == "wav" || format == "flac" || format == "ogg";
}

std::string output_format(const std::string& path, const std::optional<std::string>& format) {
  if (path == "-") {
    const std::string name = format.value_or("wav");
    if (name == "ogg") {
      throw InputError(
          "ogg (Vorbis) cannot go to standard output; use --format opus (Ogg Opus) or --out "
          "FILE.ogg");
    }
    return name;
  }
  const std::string extension = extension_format(path);
  const bool known =
      written_by_libsndfile(extension) || server::parse_audio_format(extension).has_value();
  if (!known) {
    throw InputError(
        "cannot write '" + path + "': " +
        (extension.empty() ? "no extension" : "unknown audio extension '." + extension + "'") +
        " (use .wav, .flac, .ogg, .mp3, .opus or .pcm, or --out - for standard "
        "output)");
  }
  if (format && *format != extension) {
    throw InputError("--format " + *format + " does not match --out '" + path +
                     "'; leave out --format or name the file ." + *format);
  }
  return extension;
}

}  // namespace

AudioOutput::AudioOutput(const std::string& path, const std::optional<std::string>& format,
                         int64_t sample_rate)
    : path_(path) {
  const std::string name = output_format(path, format);
  if (path != "-" && written_by_libsndfile(name)) {
    file_writer_.emplace(path, sample_rate);
    return;
  }
  encoder_ = server::make_audio_encoder(*server::parse_audio_format(name), sample_rate,
                                        server::EncoderMode::kStream);
  if (path == "-") {
    if (isatty(STDOUT_FILENO) == 1) {
      throw InputError(
          "not writing audio to a terminal: redirect standard output (--out - > speech.wav) or "
          "give --out FILE");
    }
    stream_ = stdout;
    return;
  }
  temporary_path_ = path + ".partial";
  stream_ = std::fopen(temporary_path_.c_str(), "wb");
  if (stream_ == nullptr) {
    throw InputError("cannot write '" + path + "': " + std::strerror(errno));
  }
}

AudioOutput::~AudioOutput() {
  if (stream_ != nullptr && !temporary_path_.empty()) {
    std::fclose(stream_);
    std::remove(temporary_path_.c_str());
  }
}

void AudioOutput::write(const float* samples, size_t count) {
  if (file_writer_) {
    file_writer_->write(samples, count);
    return;
  }
  VOXD_CHECK(stream_ != nullptr, "write after commit");
  bytes_.clear();
  encoder_->write(std::span(samples, count), bytes_);
  send(bytes_);
}

void AudioOutput::commit() {
  if (file_writer_) {
    file_writer_->commit();
    return;
  }
  VOXD_CHECK(stream_ != nullptr, "commit twice");
  bytes_.clear();
  encoder_->finish(bytes_);
  send(bytes_);
  if (temporary_path_.empty()) {
    const bool flushed = std::fflush(stream_) == 0;
    stream_ = nullptr;
    if (!flushed)
      throw Error("writing standard output failed: " + std::string(std::strerror(errno)));
    return;
  }
  const bool closed = std::fclose(stream_) == 0;
  stream_ = nullptr;
  if (!closed || std::rename(temporary_path_.c_str(), path_.c_str()) != 0) {
    std::remove(temporary_path_.c_str());
    throw Error("writing '" + path_ + "' failed while finishing the file");
  }
}

std::string AudioOutput::description() const {
  return path_ == "-" ? "standard output" : path_;
}

void AudioOutput::send(const std::string& bytes) {
  if (bytes.empty()) return;
  if (std::fwrite(bytes.data(), 1, bytes.size(), stream_) != bytes.size()) {
    throw Error("writing " + description() + " failed: " + std::strerror(errno));
  }
}

}  // namespace voxd
