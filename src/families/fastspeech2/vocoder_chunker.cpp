#include "families/fastspeech2/vocoder_chunker.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <string>

#include "core/error.h"
#include "families/fastspeech2/vocoder_graphs.h"

namespace voxd {

VocoderChunker::VocoderChunker(const HifiGanConfig& config, int64_t chunk_frames,
                               int64_t first_chunk_frames)
    : n_mels_(config.num_mels),
      hop_(config.hop_length()),
      tail_samples_(config.output_length(1) - config.hop_length()),
      chunk_frames_(chunk_frames),
      first_chunk_frames_(first_chunk_frames == 0 ? chunk_frames : first_chunk_frames),
      context_frames_(config.receptive_field_frames()) {
  if (chunk_frames < 1) {
    throw InputError("chunk_frames must be at least 1 mel frame per vocoder chunk, got " +
                     std::to_string(chunk_frames) +
                     " (to vocode a whole sequence at once, do not use a VocoderChunker)");
  }
  if (first_chunk_frames_ < 1 || first_chunk_frames_ > chunk_frames) {
    throw InputError("the first chunk's frames must be between 1 and chunk_frames (" +
                     std::to_string(chunk_frames) + "), got " + std::to_string(first_chunk_frames));
  }
}

int64_t VocoderChunker::next_chunk_frames() const {
  return next_own_frame_ == 0 ? first_chunk_frames_ : chunk_frames_;
}

void VocoderChunker::check_appendable(const Tensor& mel) const {
  if (finished_) throw Error("VocoderChunker::append: the stream was already finished");
  if (!mel.device().is_cpu()) {
    throw Error("VocoderChunker::append: mel is on " + mel.device().to_string() +
                ", expected a host tensor");
  }
  if (mel.dim() != 2 || mel.size(0) != n_mels_) {
    throw InputError("appended mel has shape " + mel.shape_string() + ", expected [" +
                     std::to_string(n_mels_) + ", T]: the vocoder's " + std::to_string(n_mels_) +
                     " mel channels, then frames");
  }
}

bool VocoderChunker::time_major(const Tensor& mel) const {
  return (n_mels_ == 1 || mel.strides()[0] == 1) &&
         (mel.size(1) == 1 || mel.strides()[1] == n_mels_);
}

const float* VocoderChunker::first_retained() const {
  return shared_.defined() ? shared_.data<float>() + buffer_first_ * n_mels_ : buffer_.data();
}

void VocoderChunker::append_shared(const Tensor& mel) {
  check_appendable(mel);
  if (frames_appended_ == 0 && mel.size(1) > 0 && mel.dtype() == DType::F32 && time_major(mel)) {
    shared_ = mel;
    frames_appended_ = mel.size(1);
    return;
  }
  copy_in(mel);
}

void VocoderChunker::append(const Tensor& mel) {
  check_appendable(mel);
  copy_in(mel);
}

void VocoderChunker::copy_in(const Tensor& mel) {
  const int64_t frames = mel.size(1);
  if (frames == 0) return;
  if (shared_.defined()) {
    const float* kept = first_retained();
    buffer_.assign(kept, kept + (frames_appended_ - buffer_first_) * n_mels_);
    shared_ = Tensor();
  }
  const auto count = static_cast<size_t>(frames * n_mels_);
  const bool frame_after_frame = time_major(mel);
  if (frame_after_frame && mel.dtype() == DType::F32) {
    const float* first = mel.data<float>();
    buffer_.insert(buffer_.end(), first, first + count);
  } else {
    const size_t old_size = buffer_.size();
    buffer_.resize(old_size + count);
    float* out = buffer_.data() + old_size;
    if (frame_after_frame) {
      convert_elements(mel.raw_data(), mel.dtype(), out, DType::F32, count);
    } else {
      const Tensor host = mel.to_host_contiguous(DType::F32);
      const float* values = host.data<float>();
      for (int64_t t = 0; t < frames; ++t) {
        for (int64_t c = 0; c < n_mels_; ++c) out[t * n_mels_ + c] = values[c * frames + t];
      }
    }
  }
  frames_appended_ += frames;
}

void VocoderChunker::finish(int64_t silence_after) {
  VOXD_CHECK(silence_after >= 0, "a negative pause");
  finished_ = true;
  silence_after_ = silence_after;
}

bool VocoderChunker::has_chunk() const {
  if (next_own_frame_ >= frames_appended_) return false;
  return finished_ || frames_appended_ >= next_own_frame_ + next_chunk_frames() + context_frames_;
}

MelChunk VocoderChunker::next_chunk() {
  if (!has_chunk()) {
    throw Error("VocoderChunker::next_chunk: no chunk is ready (" +
                std::to_string(frames_appended_ - next_own_frame_) +
                " frames wait for more frames or the end of the stream)");
  }
  MelChunk chunk;
  chunk.own_first = next_own_frame_;
  const int64_t own_end = std::min(next_own_frame_ + next_chunk_frames(), frames_appended_);
  chunk.own_frames = own_end - chunk.own_first;
  chunk.first_frame = std::max<int64_t>(0, chunk.own_first - context_frames_);
  const int64_t end = std::min(own_end + context_frames_, frames_appended_);
  const int64_t frames = end - chunk.first_frame;
  chunk.skip_samples = (chunk.own_first - chunk.first_frame) * hop_;
  const bool last = finished_ && own_end == frames_appended_;
  chunk.samples = chunk.own_frames * hop_ + (last ? tail_samples_ : 0);
  chunk.silence_after = last ? silence_after_ : 0;
  chunk.reaches_end = finished_ && end == frames_appended_;

  VOXD_CHECK(chunk.first_frame >= buffer_first_, "a needed frame was dropped");
  chunk.mel = Tensor::empty({n_mels_, frames}, DType::F32);
  // Each channel's row written in order: reading across the frames costs less than writing
  // across them (a burst step's 64 first chunks 0.14-0.16 → 0.10-0.12 ms, voxd_host_bench).
  const float* in = first_retained() + (chunk.first_frame - buffer_first_) * n_mels_;
  float* out = chunk.mel.data<float>();
  for (int64_t c = 0; c < n_mels_; ++c) {
    float* row = out + c * frames;
    for (int64_t t = 0; t < frames; ++t) row[t] = in[t * n_mels_ + c];
  }

  next_own_frame_ = own_end;
  const int64_t keep_from = std::max<int64_t>(0, next_own_frame_ - context_frames_);
  if (keep_from > buffer_first_) {
    if (!shared_.defined()) {
      buffer_.erase(buffer_.begin(), buffer_.begin() + (keep_from - buffer_first_) * n_mels_);
    }
    buffer_first_ = keep_from;
  }
  if (done()) shared_ = Tensor();
  return chunk;
}

std::vector<MelChunk> VocoderChunker::take_chunks() {
  std::vector<MelChunk> chunks;
  while (has_chunk()) chunks.push_back(next_chunk());
  return chunks;
}

bool VocoderChunker::done() const {
  return finished_ && next_own_frame_ == frames_appended_;
}

int64_t VocoderChunker::retained_frames() const {
  return frames_appended_ - buffer_first_;
}

std::vector<std::vector<size_t>> batch_groups(const std::vector<MelChunk>& chunks) {
  std::map<int64_t, std::vector<size_t>> by_frames;
  for (size_t i = 0; i < chunks.size(); ++i) by_frames[chunks[i].mel.size(-1)].push_back(i);
  std::vector<std::vector<size_t>> groups;
  for (auto& [frames, indices] : by_frames) groups.push_back(std::move(indices));
  return groups;
}

std::vector<std::vector<float>> vocode_chunks(Context& ctx, const HifiGan& vocoder,
                                              const std::vector<MelChunk>& chunks,
                                              VocoderGraphs* graphs) {
  const HifiGanConfig& config = vocoder.config();
  for (size_t i = 0; i < chunks.size(); ++i) {
    const MelChunk& c = chunks[i];
    if (c.mel.dim() != 2 || c.mel.size(0) != config.num_mels || c.mel.size(1) < 1 ||
        !c.mel.device().is_cpu()) {
      throw InputError("chunk " + std::to_string(i) + " has a mel of shape " +
                       c.mel.shape_string() + ", expected a host tensor [" +
                       std::to_string(config.num_mels) + ", T] with T >= 1");
    }
    if (c.skip_samples < 0 || c.samples < 1 ||
        c.skip_samples + c.samples > config.output_length(c.mel.size(1))) {
      throw InputError("chunk " + std::to_string(i) + " asks for samples [" +
                       std::to_string(c.skip_samples) + ", " +
                       std::to_string(c.skip_samples + c.samples) + ") of a " +
                       std::to_string(config.output_length(c.mel.size(1))) +
                       "-sample output; expected a chunk cut by VocoderChunker");
    }
  }
  std::vector<std::vector<float>> audio(chunks.size());
  for (const std::vector<size_t>& group : batch_groups(chunks)) {
    const int64_t batch = static_cast<int64_t>(group.size());
    const int64_t frames = chunks[group.front()].mel.size(1);
    Tensor mel = Tensor::empty({batch, config.num_mels, frames}, DType::F32);
    const size_t chunk_values = static_cast<size_t>(config.num_mels * frames);
    for (int64_t b = 0; b < batch; ++b) {
      const Tensor& given = chunks[group[static_cast<size_t>(b)]].mel;
      const Tensor own = given.is_contiguous() && given.dtype() == DType::F32
                             ? given
                             : given.to_host_contiguous(DType::F32);
      std::memcpy(mel.data<float>() + static_cast<size_t>(b) * chunk_values, own.data<float>(),
                  chunk_values * sizeof(float));
    }
    const Tensor out =
        graphs != nullptr && frames == graphs->frames()
            ? graphs->run(mel)
            : ops::to_host(ctx, vocoder.forward(ctx, ops::to_device(ctx, mel, vocoder.dtype())),
                           DType::F32);
    const int64_t out_samples = out.size(1);
    for (int64_t b = 0; b < batch; ++b) {
      const MelChunk& c = chunks[group[static_cast<size_t>(b)]];
      const float* row = out.data<float>() + b * out_samples + c.skip_samples;
      audio[group[static_cast<size_t>(b)]].assign(row, row + c.samples);
    }
  }
  return audio;
}

}  // namespace voxd
