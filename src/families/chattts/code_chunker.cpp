#include "families/chattts/code_chunker.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace voxd::chattts {
namespace {

// Mel frames each side of the fixed convs (dvae.cpp, vocos.cpp): the Decoder's conv_in (two k3
// convs) and out_conv (k3; conv_out is k1), Vocos's embed (k7) and its ConvNeXt blocks' depthwise
// convs (k7, no dilation).
constexpr int64_t kDecoderConvInRadius = 2;
constexpr int64_t kDecoderOutConvRadius = 1;
constexpr int64_t kVocosEmbedRadius = 3;
constexpr int64_t kVocosBlockRadius = 3;

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

}  // namespace

CodeContext code_context(const DvaeConfig& decoder, const VocosConfig& vocos) {
  const ConvNeXtDecoderConfig& dec = decoder.decoder;
  if (dec.kernel < 1 || dec.kernel % 2 == 0 || dec.dilation < 1 || dec.n_layer < 0) {
    throw InputError(
        "chattts decoder: a chunked Decoder needs an odd kernel >= 1, a dilation >= 1 "
        "and n_layer >= 0, got kernel " +
        std::to_string(dec.kernel) + ", dilation " + std::to_string(dec.dilation) + ", n_layer " +
        std::to_string(dec.n_layer));
  }
  if (vocos.hop_length < 1 || vocos.n_fft < vocos.hop_length || vocos.num_layers < 0) {
    throw InputError(
        "vocos: a chunked Vocos needs 1 <= hop_length <= n_fft and num_layers >= 0, "
        "got hop_length " +
        std::to_string(vocos.hop_length) + ", n_fft " + std::to_string(vocos.n_fft) +
        ", num_layers " + std::to_string(vocos.num_layers));
  }
  CodeContext c;
  c.hop = vocos.hop_length;
  c.receptive_mel_frames = kDecoderConvInRadius + dec.n_layer * dec.dilation * (dec.kernel / 2) +
                           kDecoderOutConvRadius + kVocosEmbedRadius +
                           vocos.num_layers * kVocosBlockRadius;
  // Output sample i is sample n = n_fft/2 + i of the overlap-add, the sum of the spectrum's frames
  // f with f·hop <= n < f·hop + n_fft. For a boundary at sample x = m·hop, the samples from x on
  // need frames from m − before on, and those before x frames up to m − 1 + after.
  const int64_t half = vocos.n_fft / 2;
  const int64_t before = ceil_div(vocos.n_fft - half, vocos.hop_length) - 1;
  const int64_t after = (half - 1) / vocos.hop_length + 1;
  // Each of those frames needs receptive_mel_frames more on its side; a chunk's context is whole
  // code frames (2 mel frames), so the boundary's shift picks the parity that rounds up least.
  const int64_t r = c.receptive_mel_frames;
  c.left_frames = ceil_div(r + before, 2);
  c.right_frames = ceil_div(r + after, 2);
  const int64_t shifted_left = ceil_div(r + before + 1, 2);
  const int64_t shifted_right = ceil_div(r + after - 1, 2);
  const int64_t total = c.left_frames + c.right_frames;
  if (shifted_left + shifted_right < total ||
      (shifted_left + shifted_right == total && shifted_right < c.right_frames)) {
    c.left_frames = shifted_left;
    c.right_frames = shifted_right;
    c.shift = -1;
  }
  return c;
}

CodeChunker::CodeChunker(const DvaeConfig& decoder, const VocosConfig& vocos, int64_t chunk_frames,
                         int64_t first_chunk_frames)
    : context_(code_context(decoder, vocos)),
      hidden_size_(2 * decoder.decoder.idim),
      chunk_frames_(chunk_frames),
      first_chunk_frames_(first_chunk_frames == 0 ? chunk_frames : first_chunk_frames) {
  if (chunk_frames < 1) {
    throw InputError("chunk_frames must be at least 1 code frame per Decoder + Vocos chunk, got " +
                     std::to_string(chunk_frames) +
                     " (to vocode a whole sentence at once, use vocode_sentence)");
  }
  if (first_chunk_frames_ < 1 || first_chunk_frames_ > chunk_frames) {
    throw InputError("the first chunk's code frames must be between 1 and chunk_frames (" +
                     std::to_string(chunk_frames) + "), got " + std::to_string(first_chunk_frames));
  }
}

int64_t CodeChunker::next_chunk_frames() const {
  if (next_own_frame_ == 0) return first_chunk_frames_;
  return std::min(chunk_frames_, std::max(first_chunk_frames_, next_own_frame_));
}

int64_t CodeChunker::sample_of(int64_t frame) const {
  return std::max<int64_t>(0, (2 * frame + context_.shift) * context_.hop);
}

void CodeChunker::append(std::span<const float> rows) {
  if (finished_) throw Error("CodeChunker::append: the sentence was already finished");
  if (rows.size() % static_cast<size_t>(hidden_size_) != 0) {
    throw InputError("CodeChunker::append: " + std::to_string(rows.size()) +
                     " floats are not whole hidden-state rows of " + std::to_string(hidden_size_) +
                     " (the GPT's hidden size, twice the Decoder's idim)");
  }
  buffer_.insert(buffer_.end(), rows.begin(), rows.end());
  frames_appended_ += static_cast<int64_t>(rows.size()) / hidden_size_;
}

void CodeChunker::finish() {
  finished_ = true;
}

bool CodeChunker::has_chunk() const {
  if (next_own_frame_ >= frames_appended_) return false;
  return finished_ ||
         frames_appended_ >= next_own_frame_ + next_chunk_frames() + context_.right_frames;
}

int64_t CodeChunker::frames_until_chunk() const {
  if (finished_) return 0;
  return std::max<int64_t>(
      0, next_own_frame_ + next_chunk_frames() + context_.right_frames - frames_appended_);
}

CodeChunk CodeChunker::next_chunk() {
  if (!has_chunk()) {
    throw Error("CodeChunker::next_chunk: no chunk is ready (" +
                std::to_string(frames_appended_ - next_own_frame_) +
                " code frames wait for more frames or the end of the sentence)");
  }
  CodeChunk chunk;
  chunk.own_first = next_own_frame_;
  const int64_t own_end = std::min(next_own_frame_ + next_chunk_frames(), frames_appended_);
  chunk.own_frames = own_end - chunk.own_first;
  chunk.first_row = std::max<int64_t>(0, chunk.own_first - context_.left_frames);
  const int64_t end = std::min(own_end + context_.right_frames, frames_appended_);
  chunk.rows = end - chunk.first_row;
  chunk.last = finished_ && own_end == frames_appended_;
  chunk.first_sample = sample_of(chunk.own_first);
  // Vocos gives hop·(2T − 1) samples for T code frames: the sentence's last sample ends there.
  const int64_t end_sample =
      chunk.last ? (2 * frames_appended_ - 1) * context_.hop : sample_of(own_end);
  chunk.skip_samples = chunk.first_sample - 2 * chunk.first_row * context_.hop;
  chunk.samples = end_sample - chunk.first_sample;

  VOXD_CHECK(chunk.first_row >= buffer_first_, "a needed row was dropped");
  const auto from = buffer_.begin() + (chunk.first_row - buffer_first_) * hidden_size_;
  chunk.hidden.assign(from, from + chunk.rows * hidden_size_);

  next_own_frame_ = own_end;
  const int64_t keep_from = std::max<int64_t>(0, next_own_frame_ - context_.left_frames);
  if (keep_from > buffer_first_) {
    buffer_.erase(buffer_.begin(), buffer_.begin() + (keep_from - buffer_first_) * hidden_size_);
    buffer_first_ = keep_from;
  }
  return chunk;
}

std::vector<CodeChunk> CodeChunker::take_chunks() {
  std::vector<CodeChunk> chunks;
  while (has_chunk()) chunks.push_back(next_chunk());
  return chunks;
}

bool CodeChunker::done() const {
  return finished_ && next_own_frame_ == frames_appended_;
}

namespace {

// The Decoder and Vocos over hidden [B, rows, 2·idim] (host): the runs' whole audio
// [B, hop·(2·rows − 1)] on ctx's device.
Tensor run_chunks(Context& ctx, const Dvae& decoder, const Vocos& vocos, const Tensor& hidden) {
  const Tensor states = ops::to_device(ctx, hidden, DType::F32);
  return vocos.forward(ctx, decoder.decode_hidden(ctx, states));
}

// Samples [first, first + count) of every run of `audio` [B, samples] in one device tensor, so
// that only what some chunk yields is copied to the host, not the context around it (most of a
// run). A planning pass plans the largest copy, the whole runs.
Tensor samples_to_send(Context& ctx, const Tensor& audio, int64_t first, int64_t count) {
  if (ctx.planning()) return ops::empty(ctx, audio.shape(), DType::F32);
  return ops::contiguous(ctx, audio.narrow(1, first, count));
}

}  // namespace

std::vector<std::vector<float>> vocode_chunks(Context& ctx, const Dvae& decoder, const Vocos& vocos,
                                              std::span<const CodeChunk* const> chunks) {
  VOXD_CHECK(!chunks.empty(), "vocode_chunks: no chunks");
  const int64_t size = 2 * decoder.config().decoder.idim;
  const int64_t hop = vocos.config().hop_length;
  const int64_t rows = chunks.front()->rows;
  const int64_t run_samples = (2 * rows - 1) * hop;
  const auto batch = static_cast<int64_t>(chunks.size());
  for (const CodeChunk* chunk : chunks) {
    if (chunk->rows != rows) {
      throw InputError("vocode_chunks: chunks of " + std::to_string(rows) + " and " +
                       std::to_string(chunk->rows) + " rows in one batch; batch equal rows only");
    }
    if (rows < 1 || static_cast<int64_t>(chunk->hidden.size()) != rows * size) {
      throw InputError("vocode_chunks: a chunk has " + std::to_string(chunk->hidden.size()) +
                       " floats for " + std::to_string(rows) + " rows, expected rows >= 1 of " +
                       std::to_string(size) + " (the Decoder's input channels)");
    }
    if (chunk->skip_samples < 0 || chunk->samples < 1 ||
        chunk->skip_samples + chunk->samples > run_samples) {
      throw InputError("vocode_chunks: a chunk asks for samples [" +
                       std::to_string(chunk->skip_samples) + ", " +
                       std::to_string(chunk->skip_samples + chunk->samples) + ") of a " +
                       std::to_string(run_samples) + "-sample run; expected a chunk cut by a " +
                       "CodeChunker for this voice");
    }
  }
  Tensor hidden = Tensor::empty({batch, rows, size}, DType::F32);
  int64_t first = run_samples;
  int64_t end = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const CodeChunk& chunk = *chunks[static_cast<size_t>(b)];
    std::copy(chunk.hidden.begin(), chunk.hidden.end(), hidden.data<float>() + b * rows * size);
    first = std::min(first, chunk.skip_samples);
    end = std::max(end, chunk.skip_samples + chunk.samples);
  }
  const Tensor sent =
      samples_to_send(ctx, run_chunks(ctx, decoder, vocos, hidden), first, end - first);
  std::vector<std::vector<float>> out;
  if (ctx.planning()) return out;
  const Tensor audio = ops::to_host(ctx, sent);
  for (int64_t b = 0; b < batch; ++b) {
    const CodeChunk& chunk = *chunks[static_cast<size_t>(b)];
    const float* own = audio.data<float>() + b * (end - first) + chunk.skip_samples - first;
    out.emplace_back(own, own + chunk.samples);
  }
  return out;
}

std::vector<float> vocode_chunk(Context& ctx, const Dvae& decoder, const Vocos& vocos,
                                const CodeChunk& chunk) {
  const CodeChunk* one[] = {&chunk};
  std::vector<std::vector<float>> audio = vocode_chunks(ctx, decoder, vocos, one);
  return audio.empty() ? std::vector<float>() : std::move(audio.front());
}

void plan_vocode_chunks(Context& ctx, const Dvae& decoder, const Vocos& vocos, int64_t batch,
                        int64_t rows) {
  VOXD_CHECK(batch >= 1 && rows >= 1, "plan_vocode_chunks: a batch of no chunks or rows");
  const int64_t size = 2 * decoder.config().decoder.idim;
  const Tensor audio =
      run_chunks(ctx, decoder, vocos, Tensor::empty({batch, rows, size}, DType::F32));
  (void)samples_to_send(ctx, audio, 0, audio.size(1));
}

}  // namespace voxd::chattts
