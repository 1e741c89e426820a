// Encoders that turn mono float audio, handed over in chunks as it is synthesized, into the
// bytes of a response in one of the speech endpoint's formats. In streaming mode the bytes come
// out as the codec produces them and the encoder keeps only the codec's own state, so memory
// does not grow with the length of the audio; in whole-file mode they come out at the end as
// one complete file with every size and length field filled in. docs/server.md describes each
// format.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "server/audio_format.h"

namespace voxd::server {

enum class EncoderMode {
  // For chunked responses. WAV's RIFF and data sizes are 0xFFFFFFFF ("until the end of the
  // stream"); FLAC's STREAMINFO says the length is unknown; MP3 has no filled-in LAME/Xing tag.
  kStream,
  // For responses with Content-Length: write() hands out nothing, finish() the whole file.
  kWholeFile,
};

class AudioEncoder {
 public:
  virtual ~AudioEncoder() = default;

  // Encodes `samples` (nominally in [-1, 1]; clipped; NaN is silence) and appends the bytes
  // ready to send to `out`. Throws voxd::Error when the codec fails.
  virtual void write(std::span<const float> samples, std::string& out) = 0;
  // Flushes the codec and appends the remaining bytes (the whole file in kWholeFile mode).
  // Call once, after the last write().
  virtual void finish(std::string& out) = 0;
  // Encoded bytes held back inside the encoder (not counting the codec library's own fixed
  // buffers): bounded in kStream mode, the file so far in kWholeFile mode.
  virtual size_t buffered_bytes() const = 0;
  // The sample rate of the encoded audio (see make_audio_encoder).
  virtual int64_t output_sample_rate() const = 0;
};

// An encoder for `format` taking audio at `sample_rate` and encoding it at `output_rate`
// (resampled; nullopt: at `sample_rate`). pcm is raw 16-bit little-endian mono, wav 16-bit PCM,
// flac 16-bit; opus is Ogg Opus, resampled to the lowest of Opus's rates (8, 12, 16, 24, 48 kHz)
// not below the rate (22.05 kHz becomes 24 kHz); aac is AAC-LC in ADTS frames from libavcodec,
// resampled to the lowest of AAC's rates (7.35 to 96 kHz, 22.05 kHz among them) not below the
// rate; mp3 is MPEG-1/2 layer III from LAME. Throws voxd::Error when the codec cannot take the
// rate, or when this build lacks the format's codec (see missing_codec_library).
std::unique_ptr<AudioEncoder> make_audio_encoder(AudioFormat format, int64_t sample_rate,
                                                 EncoderMode mode,
                                                 std::optional<int64_t> output_rate = std::nullopt);

// The codec library this build lacks for `format`, or nullopt when make_audio_encoder encodes
// it: "libavcodec" for aac in a build configured with VOXD_WITH_LIBAV=OFF (which leaves out
// FFmpeg's libraries and the codecs they load).
std::optional<std::string_view> missing_codec_library(AudioFormat format);

// The complete file for `samples` (kWholeFile mode).
std::string encode_audio(AudioFormat format, std::span<const float> samples, int64_t sample_rate);

// The 16-bit sample pcm, wav and flac store for `x`: round(clamp(x, -1, 1) * 32767), 0 for NaN.
int16_t quantize_pcm16(float x);

}  // namespace voxd::server
