// Decodes an ADTS AAC stream held in memory with libavcodec (its ADTS parser and AAC decoder),
// for tests of the aac encoder.
#pragma once

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavutil/frame.h>
}

#include <cstdint>
#include <string>
#include <vector>

namespace voxd::server::test {

struct DecodedAac {
  bool ok = false;
  std::string error;
  int rate = 0;
  int channels = 0;
  int profile = FF_PROFILE_UNKNOWN;
  std::vector<float> floats;  // the first channel
};

inline DecodedAac decode_aac(const std::string& bytes) {
  DecodedAac d;
  const AVCodec* codec = avcodec_find_decoder(AV_CODEC_ID_AAC);
  AVCodecParserContext* parser = av_parser_init(AV_CODEC_ID_AAC);
  AVCodecContext* context = avcodec_alloc_context3(codec);
  AVPacket* packet = av_packet_alloc();
  AVFrame* frame = av_frame_alloc();
  const auto take_frames = [&]() {
    while (avcodec_receive_frame(context, frame) == 0) {
      d.rate = frame->sample_rate;
      d.channels = frame->ch_layout.nb_channels;
      d.profile = context->profile;
      if (frame->format != AV_SAMPLE_FMT_FLTP) {
        d.error = "unexpected sample format";
        return false;
      }
      const auto* samples = reinterpret_cast<const float*>(frame->data[0]);
      d.floats.insert(d.floats.end(), samples, samples + frame->nb_samples);
    }
    return true;
  };
  bool ok = codec != nullptr && parser != nullptr && context != nullptr && packet != nullptr &&
            frame != nullptr && avcodec_open2(context, codec, nullptr) == 0;
  if (!ok) d.error = "cannot set up libavcodec's AAC decoder";
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  auto left = static_cast<int>(bytes.size());
  // The parser needs a call with no data at the end to hand over the last frame.
  for (bool last = false; ok && !last;) {
    last = left == 0;
    uint8_t* out = nullptr;
    int out_size = 0;
    const int used = av_parser_parse2(parser, context, &out, &out_size, data, left, AV_NOPTS_VALUE,
                                      AV_NOPTS_VALUE, 0);
    data += used;
    left -= used;
    if (out_size > 0) {
      packet->data = out;
      packet->size = out_size;
      const int status = avcodec_send_packet(context, packet);
      if (status < 0) {
        d.error = "the decoder refused a frame";
        ok = false;
      }
      ok = ok && take_frames();
    }
  }
  if (ok && avcodec_send_packet(context, nullptr) == 0) ok = take_frames();
  d.ok = ok && d.error.empty();
  av_frame_free(&frame);
  av_packet_free(&packet);
  avcodec_free_context(&context);
  av_parser_close(parser);
  return d;
}

}  // namespace voxd::server::test
