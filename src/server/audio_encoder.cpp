#include "server/audio_encoder.h"

#include <sndfile.h>

#ifdef VOXD_HAVE_LIBAV
extern "C" {
#include <libavcodec/avcodec.h>
#include <libavutil/channel_layout.h>
#include <libavutil/error.h>
#include <libavutil/frame.h>
#include <libavutil/log.h>
}
#include <spdlog/spdlog.h>

#include <cstdarg>
#include <mutex>
#endif

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <optional>
#include <vector>

#include "core/error.h"
#include "server/resampler.h"

namespace voxd::server {
namespace {

// Samples converted per libsndfile call, so conversion buffers stay small.
constexpr size_t kBlock = 4096;
// libsndfile's compression level for MP3, mapped linearly onto LAME's bit rates: 64 kbit/s at
// the MPEG-2 rates (16 to 24 kHz), 138 kbit/s at the MPEG-1 rates (32 to 48 kHz).
constexpr double kMp3Compression = 96.0 / 152.0;

// The highest sample rate any encoder takes.
constexpr int64_t kMaxSampleRate = 384000;

void check_rate(AudioFormat format, int64_t sample_rate) {
  if (sample_rate <= 0 || sample_rate > kMaxSampleRate) {
    throw Error("cannot encode " + std::string(format_name(format)) + " at " +
                std::to_string(sample_rate) + " Hz: the rate must be between 1 and " +
                std::to_string(kMaxSampleRate));
  }
}

float clip(float x) {
  if (std::isnan(x)) return 0.0f;
  return std::clamp(x, -1.0f, 1.0f);
}

void append_le16(std::string& out, int16_t v) {
  const auto u = static_cast<uint16_t>(v);
  out.push_back(static_cast<char>(u & 0xFF));
  out.push_back(static_cast<char>(u >> 8));
}

void append_le32(std::string& out, uint32_t v) {
  for (int shift = 0; shift < 32; shift += 8) out.push_back(static_cast<char>((v >> shift) & 0xFF));
}

void append_pcm16(std::span<const float> samples, std::string& out) {
  out.reserve(out.size() + 2 * samples.size());
  for (float x : samples) append_le16(out, quantize_pcm16(x));
}

// Raw 16-bit little-endian mono.
class PcmEncoder final : public AudioEncoder {
 public:
  PcmEncoder(int64_t sample_rate, EncoderMode mode) : sample_rate_(sample_rate), mode_(mode) {}

  void write(std::span<const float> samples, std::string& out) override {
    append_pcm16(samples, mode_ == EncoderMode::kStream ? out : held_);
  }
  void finish(std::string& out) override { hand_over(held_, out); }
  size_t buffered_bytes() const override { return held_.size(); }
  int64_t output_sample_rate() const override { return sample_rate_; }

  // Moves `from` to the end of `out`, without a copy when `out` is empty.
  static void hand_over(std::string& from, std::string& out) {
    if (out.empty()) {
      out.swap(from);
    } else {
      out += from;
    }
    from.clear();
  }

 private:
  int64_t sample_rate_;
  EncoderMode mode_;
  std::string held_;
};

// RIFF WAVE, 16-bit PCM mono, with a 44-byte header.
class WavEncoder final : public AudioEncoder {
 public:
  WavEncoder(int64_t sample_rate, EncoderMode mode) : sample_rate_(sample_rate), mode_(mode) {}

  void write(std::span<const float> samples, std::string& out) override {
    if (mode_ == EncoderMode::kStream) {
      if (!header_sent_) {
        out += header(0xFFFFFFFFu);
        header_sent_ = true;
      }
      append_pcm16(samples, out);
    } else {
      append_pcm16(samples, data_);
    }
  }

  void finish(std::string& out) override {
    if (mode_ == EncoderMode::kStream) {
      if (!header_sent_) out += header(0xFFFFFFFFu);
      header_sent_ = true;
      return;
    }
    // Files of 4 GiB and more cannot state their size; they say "to the end", as streams do.
    const uint32_t size =
        data_.size() <= 0xFFFFFFFFu - 36 ? static_cast<uint32_t>(data_.size()) : 0xFFFFFFFFu;
    out += header(size);
    PcmEncoder::hand_over(data_, out);
  }

  size_t buffered_bytes() const override { return data_.size(); }
  int64_t output_sample_rate() const override { return sample_rate_; }

 private:
  // The header for `data_bytes` of samples; 0xFFFFFFFF makes both sizes 0xFFFFFFFF.
  std::string header(uint32_t data_bytes) const {
    const uint32_t riff = data_bytes == 0xFFFFFFFFu ? data_bytes : data_bytes + 36;
    const auto rate = static_cast<uint32_t>(sample_rate_);
    std::string h = "RIFF";
    append_le32(h, riff);
    h += "WAVEfmt ";
    append_le32(h, 16);        // fmt chunk size
    append_le16(h, 1);         // PCM
    append_le16(h, 1);         // channels
    append_le32(h, rate);      // sample rate
    append_le32(h, rate * 2);  // byte rate
    append_le16(h, 2);         // block align
    append_le16(h, 16);        // bits per sample
    h += "data";
    append_le32(h, data_bytes);
    return h;
  }

  int64_t sample_rate_;
  EncoderMode mode_;
  bool header_sent_ = false;
  std::string data_;
};

// The file libsndfile writes into, through its virtual I/O. Bytes before `sent_` have been
// handed to the client: a codec that goes back to rewrite them (FLAC's totals, MP3's LAME tag)
// is told the write succeeded and the bytes stay as they were sent. In whole-file mode nothing
// is handed out before the end, so every rewrite lands.
class MemoryFile {
 public:
  // Moves the bytes written so far to `out`.
  void take(std::string& out) {
    sent_ += static_cast<sf_count_t>(pending_.size());
    PcmEncoder::hand_over(pending_, out);
  }
  size_t pending_bytes() const { return pending_.size(); }

  static SF_VIRTUAL_IO callbacks() {
    SF_VIRTUAL_IO io{};
    io.get_filelen = [](void* self) { return static_cast<MemoryFile*>(self)->length(); };
    io.seek = [](sf_count_t offset, int whence, void* self) {
      return static_cast<MemoryFile*>(self)->seek(offset, whence);
    };
    io.read = [](void* ptr, sf_count_t count, void* self) {
      return static_cast<MemoryFile*>(self)->read(ptr, count);
    };
    io.write = [](const void* ptr, sf_count_t count, void* self) {
      return static_cast<MemoryFile*>(self)->write(ptr, count);
    };
    io.tell = [](void* self) { return static_cast<MemoryFile*>(self)->position_; };
    return io;
  }

 private:
  sf_count_t length() const { return sent_ + static_cast<sf_count_t>(pending_.size()); }

  sf_count_t seek(sf_count_t offset, int whence) {
    sf_count_t target = offset;
    if (whence == SEEK_CUR) target += position_;
    if (whence == SEEK_END) target += length();
    if (target < 0 || target > length()) return -1;
    position_ = target;
    return position_;
  }

  sf_count_t read(void* ptr, sf_count_t count) {
    if (position_ < sent_ || count <= 0) return 0;
    const sf_count_t n = std::min(count, length() - position_);
    std::memcpy(ptr, pending_.data() + (position_ - sent_), static_cast<size_t>(n));
    position_ += n;
    return n;
  }

  sf_count_t write(const void* ptr, sf_count_t count) {
    if (count <= 0) return 0;
    const char* bytes = static_cast<const char*>(ptr);
    const sf_count_t begin = position_;
    position_ += count;
    const sf_count_t skipped = std::clamp<sf_count_t>(sent_ - begin, 0, count);  // already sent
    if (skipped == count) return count;
    const auto start = static_cast<size_t>(begin + skipped - sent_);  // offset in pending_
    const auto n = static_cast<size_t>(count - skipped);
    const size_t overlap = std::min(n, pending_.size() - start);
    pending_.replace(start, overlap, bytes + skipped, overlap);
    pending_.append(bytes + skipped + overlap, n - overlap);
    return count;
  }

  std::string pending_;  // bytes [sent_, length())
  sf_count_t sent_ = 0;
  sf_count_t position_ = 0;
};

// FLAC, Ogg Opus and MP3 through libsndfile.
class SndfileEncoder final : public AudioEncoder {
 public:
  SndfileEncoder(AudioFormat format, int64_t sample_rate, EncoderMode mode)
      : format_(format), mode_(mode), output_rate_(sample_rate) {
    const std::string what = "cannot encode " + std::string(format_name(format)) + " at " +
                             std::to_string(sample_rate) + " Hz";
    check_rate(format, sample_rate);
    SF_INFO info{};
    info.channels = 1;
    if (format == AudioFormat::kFlac) {
      info.format = SF_FORMAT_FLAC | SF_FORMAT_PCM_16;
    } else if (format == AudioFormat::kOpus) {
      info.format = SF_FORMAT_OGG | SF_FORMAT_OPUS;
      output_rate_ = opus_rate(sample_rate);
      if (output_rate_ != sample_rate) resampler_.emplace(sample_rate, output_rate_);
    } else {
      // libsndfile leaks LAME's state when LAME refuses a rate, so the rate is checked first.
      constexpr std::array<int64_t, 9> kMp3Rates = {8000,  11025, 12000, 16000, 22050,
                                                    24000, 32000, 44100, 48000};
      if (std::find(kMp3Rates.begin(), kMp3Rates.end(), sample_rate) == kMp3Rates.end()) {
        throw Error(what +
                    ": MP3 takes 8, 11.025, 12, 16, 22.05, 24, 32, 44.1 or 48 kHz; "
                    "ask for wav, flac, opus or pcm");
      }
      info.format = SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III;
    }
    info.samplerate = static_cast<int>(output_rate_);
    SF_VIRTUAL_IO io = MemoryFile::callbacks();
    if (!sf_format_check(&info) ||
        (file_ = sf_open_virtual(&io, SFM_WRITE, &info, &memory_)) == nullptr) {
      throw Error(what + ": " + sf_strerror(nullptr));
    }
    if (format == AudioFormat::kMp3) {
      // Constant bit rate: a streamed MP3 cannot carry the Xing tag that tells a variable
      // rate's duration, and decoders estimate it from the first frame's rate.
      int bitrate_mode = SF_BITRATE_MODE_CONSTANT;
      double compression = kMp3Compression;
      sf_command(file_, SFC_SET_BITRATE_MODE, &bitrate_mode, sizeof bitrate_mode);
      sf_command(file_, SFC_SET_COMPRESSION_LEVEL, &compression, sizeof compression);
    }
    // FLAC writes its header only with the first samples; this writes it now, so that a
    // stream starts at once and no audio still gives a valid file.
    sf_command(file_, SFC_UPDATE_HEADER_NOW, nullptr, 0);
  }

  ~SndfileEncoder() override {
    if (file_ != nullptr) sf_close(file_);
  }
  SndfileEncoder(const SndfileEncoder&) = delete;
  SndfileEncoder& operator=(const SndfileEncoder&) = delete;

  void write(std::span<const float> samples, std::string& out) override {
    VOXD_CHECK(file_ != nullptr, "write after finish");
    if (resampler_) {
      resampled_.clear();
      resampler_->process(samples, resampled_);
      encode(resampled_);
    } else {
      encode(samples);
    }
    if (mode_ == EncoderMode::kStream) memory_.take(out);
  }

  void finish(std::string& out) override {
    VOXD_CHECK(file_ != nullptr, "finish twice");
    if (resampler_) {
      resampled_.clear();
      resampler_->flush(resampled_);
      encode(resampled_);
    }
    if (format_ == AudioFormat::kOpus && !wrote_audio_) {
      // An Ogg Opus stream with no audio packet is malformed to decoders: send one silent sample.
      const float silence = 0.0f;
      encode(std::span(&silence, 1));
    }
    const int status = sf_close(file_);
    file_ = nullptr;
    if (status != 0) {
      throw Error("finishing the " + std::string(format_name(format_)) +
                  " stream failed: " + sf_error_number(status));
    }
    memory_.take(out);
  }

  size_t buffered_bytes() const override { return memory_.pending_bytes(); }
  int64_t output_sample_rate() const override { return output_rate_; }

 private:
  static int64_t opus_rate(int64_t rate) {
    for (int64_t r : {8000, 12000, 16000, 24000, 48000}) {
      if (r >= rate) return r;
    }
    return 48000;
  }

  void encode(std::span<const float> samples) {
    for (size_t start = 0; start < samples.size(); start += kBlock) {
      const size_t n = std::min(kBlock, samples.size() - start);
      sf_count_t written = 0;
      if (format_ == AudioFormat::kFlac) {
        shorts_.resize(n);
        for (size_t i = 0; i < n; ++i) shorts_[i] = quantize_pcm16(samples[start + i]);
        written = sf_writef_short(file_, shorts_.data(), static_cast<sf_count_t>(n));
      } else {
        floats_.resize(n);
        for (size_t i = 0; i < n; ++i) floats_[i] = clip(samples[start + i]);
        written = sf_writef_float(file_, floats_.data(), static_cast<sf_count_t>(n));
      }
      if (written != static_cast<sf_count_t>(n)) {
        throw Error("encoding " + std::string(format_name(format_)) +
                    " failed: " + sf_strerror(file_));
      }
      wrote_audio_ = true;
    }
  }

  AudioFormat format_;
  EncoderMode mode_;
  int64_t output_rate_;
  std::optional<Resampler> resampler_;
  MemoryFile memory_;
  SNDFILE* file_ = nullptr;
  bool wrote_audio_ = false;
  std::vector<float> resampled_;
  std::vector<float> floats_;
  std::vector<short> shorts_;
};

#ifdef VOXD_HAVE_LIBAV
// AAC's sampling frequencies, in the order of the ADTS header's sampling_frequency_index.
constexpr std::array<int64_t, 13> kAacRates = {96000, 88200, 64000, 48000, 44100, 32000, 24000,
                                               22050, 16000, 12000, 11025, 8000,  7350};
// AAC-LC's bit rate for mono speech: 64 kbit/s, at most 3 bits a sample (24 kbit/s at 8 kHz);
// the codec itself takes at most 6 (6,144 bits a 1,024-sample frame) and warns beyond.
constexpr int64_t kAacBitRate = 64000;
constexpr int64_t kAacMaxBitsPerSample = 3;

// The message of libav's error `code`.
std::string av_error(int code) {
  std::array<char, AV_ERROR_MAX_STRING_SIZE> text{};
  av_strerror(code, text.data(), text.size());
  return text.data();
}

// libav's warnings and errors as the server's log lines; its chatter (the AAC encoder's "Qavg"
// line at the end of every stream, at info level) left out. Installed once, process-wide.
void log_libav_through_spdlog() {
  static std::once_flag once;
  std::call_once(once, [] {
    av_log_set_callback([](void* context, int level, const char* format, va_list args) {
      if (level > AV_LOG_WARNING) return;
      std::array<char, 1024> line{};
      int print_prefix = 1;
      av_log_format_line2(context, level, format, args, line.data(), line.size(), &print_prefix);
      std::string text = line.data();
      while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
      spdlog::log(level <= AV_LOG_ERROR ? spdlog::level::err : spdlog::level::warn, "libav: {}",
                  text);
    });
  });
}

// The lowest AAC rate not below `rate` (the highest when `rate` is above them all).
int64_t aac_rate(int64_t rate) {
  for (auto it = kAacRates.rbegin(); it != kAacRates.rend(); ++it) {
    if (*it >= rate) return *it;
  }
  return kAacRates.front();
}

// AAC-LC, mono, from libavcodec's native encoder, each packet in an ADTS frame (a 7-byte header
// that makes the stream playable from any frame, with no container). `sample_rate` must be one
// of kAacRates. The codec takes 1024 samples a frame: fewer are held until the next write().
class AacEncoder final : public AudioEncoder {
 public:
  AacEncoder(int64_t sample_rate, EncoderMode mode) : mode_(mode), sample_rate_(sample_rate) {
    const std::string what = "cannot encode aac at " + std::to_string(sample_rate) + " Hz";
    const auto index = std::find(kAacRates.begin(), kAacRates.end(), sample_rate);
    VOXD_CHECK(index != kAacRates.end(), what + ": not one of AAC's rates");
    rate_index_ = static_cast<uint8_t>(index - kAacRates.begin());
    log_libav_through_spdlog();
    const AVCodec* codec = avcodec_find_encoder(AV_CODEC_ID_AAC);
    if (codec == nullptr) throw Error(what + ": libavcodec has no AAC encoder");
    context_ = avcodec_alloc_context3(codec);
    frame_ = av_frame_alloc();
    packet_ = av_packet_alloc();
    if (context_ == nullptr || frame_ == nullptr || packet_ == nullptr) {
      release();
      throw Error(what + ": out of memory");
    }
    context_->sample_fmt = AV_SAMPLE_FMT_FLTP;
    context_->sample_rate = static_cast<int>(sample_rate);
    context_->time_base = AVRational{1, static_cast<int>(sample_rate)};
    context_->bit_rate = std::min(kAacBitRate, kAacMaxBitsPerSample * sample_rate);
    context_->profile = FF_PROFILE_AAC_LOW;
    av_channel_layout_default(&context_->ch_layout, 1);
    int status = avcodec_open2(context_, codec, nullptr);
    if (status >= 0) {
      frame_->format = AV_SAMPLE_FMT_FLTP;
      frame_->sample_rate = context_->sample_rate;
      frame_->nb_samples = context_->frame_size;
      status = av_channel_layout_copy(&frame_->ch_layout, &context_->ch_layout);
    }
    if (status >= 0) status = av_frame_get_buffer(frame_, 0);
    if (status < 0) {
      release();
      throw Error(what + ": " + av_error(status));
    }
    frame_size_ = static_cast<size_t>(context_->frame_size);
    pending_.reserve(frame_size_);
  }

  ~AacEncoder() override { release(); }
  AacEncoder(const AacEncoder&) = delete;
  AacEncoder& operator=(const AacEncoder&) = delete;

  void write(std::span<const float> samples, std::string& out) override {
    VOXD_CHECK(!finished_, "write after finish");
    std::string& sink = mode_ == EncoderMode::kStream ? out : held_;
    for (float x : samples) {
      pending_.push_back(clip(x));
      if (pending_.size() == frame_size_) send_pending(sink);
    }
  }

  void finish(std::string& out) override {
    VOXD_CHECK(!finished_, "finish twice");
    finished_ = true;
    std::string& sink = mode_ == EncoderMode::kStream ? out : held_;
    // A stream with no frame is no AAC file to decoders: one silent sample makes one.
    if (samples_sent_ == 0 && pending_.empty()) pending_.push_back(0.0f);
    if (!pending_.empty()) send_pending(sink);  // libavcodec pads a short last frame
    send(nullptr, sink);
    PcmEncoder::hand_over(held_, out);
  }

  size_t buffered_bytes() const override { return held_.size(); }
  int64_t output_sample_rate() const override { return sample_rate_; }

 private:
  void release() {
    av_packet_free(&packet_);
    av_frame_free(&frame_);
    avcodec_free_context(&context_);
  }

  void send_pending(std::string& sink) {
    const int status = av_frame_make_writable(frame_);
    if (status < 0) throw Error("encoding aac failed: " + av_error(status));
    frame_->nb_samples = static_cast<int>(pending_.size());
    frame_->pts = samples_sent_;
    std::copy(pending_.begin(), pending_.end(), reinterpret_cast<float*>(frame_->data[0]));
    samples_sent_ += static_cast<int64_t>(pending_.size());
    pending_.clear();
    send(frame_, sink);
  }

  // Sends `frame` (nullptr: the end) and appends every packet the codec has ready.
  void send(const AVFrame* frame, std::string& sink) {
    int status = avcodec_send_frame(context_, frame);
    if (status < 0) throw Error("encoding aac failed: " + av_error(status));
    for (;;) {
      status = avcodec_receive_packet(context_, packet_);
      if (status == AVERROR(EAGAIN) || status == AVERROR_EOF) return;
      if (status < 0) throw Error("encoding aac failed: " + av_error(status));
      append_adts(sink);
      av_packet_unref(packet_);
    }
  }

  // The packet in an ADTS frame: MPEG-4, no CRC, AAC-LC, one channel (ISO/IEC 14496-3, 1.A.2).
  void append_adts(std::string& sink) const {
    constexpr size_t kHeader = 7;
    constexpr size_t kMaxFrame = (1 << 13) - 1;  // the 13-bit frame_length
    const size_t length = kHeader + static_cast<size_t>(packet_->size);
    VOXD_CHECK(length <= kMaxFrame, "an AAC packet too large for an ADTS frame");
    constexpr uint8_t kProfileLc = 1;  // audio object type 2 (LC), less one
    constexpr uint8_t kMono = 1;       // channel_configuration
    const std::array<uint8_t, kHeader> header = {
        0xFF,
        0xF1,  // sync word, MPEG-4, layer 0, no CRC
        static_cast<uint8_t>(kProfileLc << 6 | rate_index_ << 2 | kMono >> 2),
        static_cast<uint8_t>((kMono & 3) << 6 | length >> 11),
        static_cast<uint8_t>(length >> 3 & 0xFF),
        static_cast<uint8_t>((length & 7) << 5 | 0x1F),  // and buffer fullness 0x7FF: VBR
        0xFC,
    };
    sink.append(reinterpret_cast<const char*>(header.data()), header.size());
    sink.append(reinterpret_cast<const char*>(packet_->data), static_cast<size_t>(packet_->size));
  }

  EncoderMode mode_;
  int64_t sample_rate_;
  uint8_t rate_index_ = 0;
  AVCodecContext* context_ = nullptr;
  AVFrame* frame_ = nullptr;
  AVPacket* packet_ = nullptr;
  size_t frame_size_ = 0;
  std::vector<float> pending_;  // fewer than frame_size_ samples not yet sent to the codec
  int64_t samples_sent_ = 0;
  bool finished_ = false;
  std::string held_;  // the file so far, in kWholeFile mode
};
#endif  // VOXD_HAVE_LIBAV

// Resamples the input to `inner`'s rate before `inner` encodes it.
class ResamplingEncoder final : public AudioEncoder {
 public:
  ResamplingEncoder(int64_t input_rate, std::unique_ptr<AudioEncoder> inner, int64_t inner_rate)
      : resampler_(input_rate, inner_rate), inner_(std::move(inner)) {}

  void write(std::span<const float> samples, std::string& out) override {
    resampled_.clear();
    resampler_.process(samples, resampled_);
    inner_->write(resampled_, out);
  }
  void finish(std::string& out) override {
    resampled_.clear();
    resampler_.flush(resampled_);
    inner_->write(resampled_, out);
    inner_->finish(out);
  }
  size_t buffered_bytes() const override { return inner_->buffered_bytes(); }
  int64_t output_sample_rate() const override { return inner_->output_sample_rate(); }

 private:
  Resampler resampler_;
  std::unique_ptr<AudioEncoder> inner_;
  std::vector<float> resampled_;
};

// An encoder for `format` taking audio at `sample_rate`, at that rate (or the one Opus and AAC
// move it to).
std::unique_ptr<AudioEncoder> make_encoder_at(AudioFormat format, int64_t sample_rate,
                                              EncoderMode mode) {
  switch (format) {
    case AudioFormat::kPcm:
    case AudioFormat::kWav:
      check_rate(format, sample_rate);
      if (format == AudioFormat::kPcm) return std::make_unique<PcmEncoder>(sample_rate, mode);
      return std::make_unique<WavEncoder>(sample_rate, mode);
    case AudioFormat::kAac: {
#ifdef VOXD_HAVE_LIBAV
      check_rate(format, sample_rate);
      const int64_t rate = aac_rate(sample_rate);
      auto encoder = std::make_unique<AacEncoder>(rate, mode);
      if (rate == sample_rate) return encoder;
      return std::make_unique<ResamplingEncoder>(sample_rate, std::move(encoder), rate);
#else
      throw Error(
          "cannot encode aac: this voxd was built without libavcodec (VOXD_WITH_LIBAV=OFF); use "
          "mp3, opus, flac, wav or pcm");
#endif
    }
    case AudioFormat::kFlac:
    case AudioFormat::kOpus:
    case AudioFormat::kMp3:
      return std::make_unique<SndfileEncoder>(format, sample_rate, mode);
  }
  throw Error("unknown audio format");
}

}  // namespace

std::optional<std::string_view> missing_codec_library(AudioFormat format) {
#ifdef VOXD_HAVE_LIBAV
  constexpr bool kHaveLibav = true;
#else
  constexpr bool kHaveLibav = false;
#endif
  if (format == AudioFormat::kAac && !kHaveLibav) return "libavcodec";
  return std::nullopt;
}

int16_t quantize_pcm16(float x) {
  return static_cast<int16_t>(std::lrint(clip(x) * 32767.0f));
}

std::unique_ptr<AudioEncoder> make_audio_encoder(AudioFormat format, int64_t sample_rate,
                                                 EncoderMode mode,
                                                 std::optional<int64_t> output_rate) {
  if (!output_rate || *output_rate == sample_rate) {
    return make_encoder_at(format, sample_rate, mode);
  }
  check_rate(format, sample_rate);
  check_rate(format, *output_rate);
  return std::make_unique<ResamplingEncoder>(
      sample_rate, make_encoder_at(format, *output_rate, mode), *output_rate);
}

std::string encode_audio(AudioFormat format, std::span<const float> samples, int64_t sample_rate) {
  std::unique_ptr<AudioEncoder> encoder =
      make_audio_encoder(format, sample_rate, EncoderMode::kWholeFile);
  std::string out;
  encoder->write(samples, out);
  encoder->finish(out);
  return out;
}

}  // namespace voxd::server
