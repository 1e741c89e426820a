#include "server/sse_encoder.h"

#include <string>
#include <utility>

#include "core/error.h"
#include "server/base64.h"

namespace voxd::server {
namespace {

class SseEncoder final : public AudioEncoder {
 public:
  SseEncoder(std::unique_ptr<AudioEncoder> audio, int64_t sample_rate, int64_t input_tokens)
      : audio_(std::move(audio)), sample_rate_(sample_rate), input_tokens_(input_tokens) {
    VOXD_CHECK(sample_rate > 0, "an SSE encoder needs the input's sample rate");
  }

  void write(std::span<const float> samples, std::string& out) override {
    samples_ += static_cast<int64_t>(samples.size());
    encoded_.clear();
    audio_->write(samples, encoded_);
    append_delta(out);
  }

  void finish(std::string& out) override {
    encoded_.clear();
    audio_->finish(encoded_);
    append_delta(out);
    const int64_t output_tokens =
        (samples_ * kOutputTokensPerSecond + sample_rate_ - 1) / sample_rate_;
    out += "data: {\"type\":\"speech.audio.done\",\"usage\":{\"input_tokens\":" +
           std::to_string(input_tokens_) + ",\"output_tokens\":" + std::to_string(output_tokens) +
           ",\"total_tokens\":" + std::to_string(input_tokens_ + output_tokens) + "}}\n\n";
  }

  size_t buffered_bytes() const override { return audio_->buffered_bytes(); }
  int64_t output_sample_rate() const override { return audio_->output_sample_rate(); }

 private:
  void append_delta(std::string& out) const {
    if (encoded_.empty()) return;
    out += "data: {\"type\":\"speech.audio.delta\",\"audio\":\"";
    append_base64(encoded_, out);
    out += "\"}\n\n";
  }

  std::unique_ptr<AudioEncoder> audio_;
  int64_t sample_rate_;
  int64_t input_tokens_;
  int64_t samples_ = 0;
  std::string encoded_;  // what audio_ made in the current call
};

}  // namespace

std::unique_ptr<AudioEncoder> make_sse_encoder(std::unique_ptr<AudioEncoder> audio,
                                               int64_t sample_rate, int64_t input_tokens) {
  return std::make_unique<SseEncoder>(std::move(audio), sample_rate, input_tokens);
}

}  // namespace voxd::server
