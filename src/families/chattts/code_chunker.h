// Streaming ChatTTS's audio within a sentence: a CodeChunker cuts one sentence's GPT hidden states
// (one row per code frame), as the code stage makes them, into chunks of own frames plus context
// on each side, so that running the Decoder and Vocos on each chunk and keeping only its own
// samples (vocode_chunk) gives the same audio as vocode_sentence on the whole sentence, while the
// chunker holds at most chunk_frames + left + right rows whatever the sentence's length.
//
// Code frame t becomes mel frames 2t and 2t + 1; Vocos gives hop·(F − 1) samples for F mel frames
// (the ISTFT's centre padding trims n_fft/2 on each side). Own samples are whole hops: code frames
// [a, b) own samples [(2a + shift)·hop, (2b + shift)·hop), clipped to the sentence's
// hop·(2T − 1), with shift 0 or −1 (CodeContext). At the sentence's true start and end a chunk
// has no context on that side, exactly like the whole run (every conv zero-pads there and the
// ISTFT's window envelope ends there), so chunks are never padded across a true boundary. Chunks
// with full context on both sides all have left + chunk_frames + right rows, so they share one
// workspace plan (and could batch).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/ops.h"
#include "families/chattts/dvae.h"
#include "families/chattts/model_config.h"
#include "families/chattts/vocos.h"

namespace voxd::chattts {

// The context that makes chunked vocoding exact, derived from the networks' sizes. Around a chunk
// boundary at sample m·hop, the samples after it use the spectrum's frames from m − before on and
// those before it frames up to m − 1 + after, with before = ⌈(n_fft − n_fft/2)/hop⌉ − 1 and
// after = ⌊(n_fft/2 − 1)/hop⌋ + 1 (1 and 2 for n_fft = 4·hop); each of those frames needs R =
// receptive_mel_frames more. So left = ⌈(R + before − shift)/2⌉ and right = ⌈(R + after +
// shift)/2⌉ code frames, with the shift that needs fewer in all, then fewer on the right.
struct CodeContext {
  // Mel frames each side that one frame of Vocos's spectrum depends on through the Decoder and
  // Vocos's backbone: 3 + n_layer·dilation·⌊kernel/2⌋ (conv_in's two k3 convs, the ConvNeXt
  // blocks, out_conv's k3) + 3 + 3·num_layers (Vocos's k7 embed and k7 blocks).
  int64_t receptive_mel_frames = 0;
  int64_t left_frames = 0;   // code frames of context before a chunk's own
  int64_t right_frames = 0;  // code frames of context after a chunk's own
  // Code frame a's audio starts at sample (2a + shift)·hop, shift 0 or −1. 0: every chunk yields
  // 2·hop per own frame but the last, a hop less; −1: the first yields a hop less instead.
  int64_t shift = 0;
  int64_t hop = 0;  // samples per mel frame
};

// The smallest context for a Decoder of `decoder` and a Vocos of `vocos`; throws
// voxd::InputError for sizes the networks cannot have (an even or non-positive kernel, a
// non-positive dilation, hop or n_fft, hop > n_fft).
CodeContext code_context(const DvaeConfig& decoder, const VocosConfig& vocos);

// One Decoder + Vocos input cut from a sentence: hidden-state rows (the chunk's own plus their
// context) and which samples of the run's output belong to the chunk.
struct CodeChunk {
  std::vector<float> hidden;  // [rows, hidden_size] row-major, host floats
  int64_t rows = 0;           // rows in `hidden`
  int64_t first_row = 0;      // sentence index of hidden's first row
  int64_t own_first = 0;      // first code frame whose audio this chunk yields
  int64_t own_frames = 0;     // how many code frames' audio it yields (≥ 1)
  int64_t first_sample = 0;   // sentence index of the chunk's first own sample
  int64_t skip_samples = 0;   // samples of the run's output before the chunk's own
  int64_t samples = 0;        // the chunk's own samples (≥ hop)
  bool last = false;          // the sentence's last chunk
};

// Cuts one sentence's hidden-state rows into CodeChunks as soon as each chunk's right context
// exists. Not thread-safe; one per stream and sentence.
class CodeChunker {
 public:
  // Chunks of up to `chunk_frames` (≥ 1) own code frames for a Decoder of `decoder` and a Vocos
  // of `vocos`. The sentence's first has `first_chunk_frames` (1 ≤ first ≤ chunk_frames; 0:
  // chunk_frames) so that its first audio comes from less work; each later one as many as the
  // chunks before it yielded, at least the first's and at most chunk_frames (8, 8, 16, 24, 24,
  // ... for 8 and 24), so that the steps a chunk waits for never take longer than the audio
  // already sent lasts, at any rate faster than real time. Throws voxd::InputError for sizes
  // outside those bounds.
  CodeChunker(const DvaeConfig& decoder, const VocosConfig& vocos, int64_t chunk_frames,
              int64_t first_chunk_frames = 0);

  CodeChunker(const CodeChunker&) = delete;
  CodeChunker& operator=(const CodeChunker&) = delete;
  CodeChunker(CodeChunker&&) = default;
  CodeChunker& operator=(CodeChunker&&) = default;

  // Appends whole rows [n, hidden_size()] (n ≥ 0, row-major host floats); throws
  // voxd::InputError for a size that is not a multiple of hidden_size() and voxd::Error after
  // finish().
  void append(std::span<const float> rows);
  // Marks the sentence's end: the rows not yet chunked become chunks without right context.
  void finish();

  // Whether next_chunk() has a chunk: a full chunk with its right context, or anything left once
  // the sentence is finished.
  bool has_chunk() const;
  // The next chunk in sentence order; drops the rows no later chunk needs. Throws voxd::Error
  // when has_chunk() is false.
  CodeChunk next_chunk();
  // Every chunk has_chunk() allows now, in order.
  std::vector<CodeChunk> take_chunks();
  // Whether the sentence is finished and every appended row's audio went out in a chunk.
  bool done() const;
  // Rows still to append before has_chunk() turns true (the next chunk's own frames and right
  // context); 0 when it is true or the sentence is finished.
  int64_t frames_until_chunk() const;

  const CodeContext& context() const { return context_; }
  int64_t chunk_frames() const { return chunk_frames_; }
  int64_t first_chunk_frames() const { return first_chunk_frames_; }
  // Floats per row: the Decoder's input channels, 2·idim (the GPT's hidden size).
  int64_t hidden_size() const { return hidden_size_; }
  // Rows appended so far.
  int64_t frames_appended() const { return frames_appended_; }
  // Rows held now: the left context later chunks still need plus the rows not yet chunked.
  int64_t retained_frames() const { return frames_appended_ - buffer_first_; }
  // left + chunk_frames + right: retained_frames() stays below it while has_chunk() is false (an
  // append adds its rows until their chunks are taken), and every chunk with full context on both
  // sides has this many rows.
  int64_t max_retained_frames() const {
    return context_.left_frames + chunk_frames_ + context_.right_frames;
  }

 private:
  // Own frames of the next chunk, before clipping at the sentence's end.
  int64_t next_chunk_frames() const;
  // The sentence's first sample of code frame `frame`'s audio (clipped at its start).
  int64_t sample_of(int64_t frame) const;

  CodeContext context_;
  int64_t hidden_size_;
  int64_t chunk_frames_;
  int64_t first_chunk_frames_;
  int64_t frames_appended_ = 0;
  int64_t next_own_frame_ = 0;  // first code frame whose audio no chunk has yielded yet
  bool finished_ = false;
  // Rows [buffer_first_, frames_appended_), row-major.
  int64_t buffer_first_ = 0;
  std::vector<float> buffer_;
};

// Runs `decoder` and `vocos` on the chunks' hidden states at once ([chunks, rows, hidden] on
// ctx's device; every chunk of the same rows, from any streams) and returns each chunk's own
// samples as host floats; throws voxd::InputError for chunks that do not fit them or differ in
// rows.
std::vector<std::vector<float>> vocode_chunks(Context& ctx, const Dvae& decoder, const Vocos& vocos,
                                              std::span<const CodeChunk* const> chunks);
// vocode_chunks for one chunk.
std::vector<float> vocode_chunk(Context& ctx, const Dvae& decoder, const Vocos& vocos,
                                const CodeChunk& chunk);
// The allocations vocode_chunks makes for `batch` chunks of `rows` rows, on a planning context
// (nothing read): the workspace plan for that shape.
void plan_vocode_chunks(Context& ctx, const Dvae& decoder, const Vocos& vocos, int64_t batch,
                        int64_t rows);

}  // namespace voxd::chattts
