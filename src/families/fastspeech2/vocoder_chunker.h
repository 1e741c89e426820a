// Chunked, streaming vocoding: a VocoderChunker cuts one stream's mel frames, as they arrive,
// into chunks of `chunk_frames` frames plus R frames of context on each side (R =
// HifiGanConfig::receptive_field_frames()), so that vocoding each chunk and keeping only its own
// samples gives the same audio as vocoding the whole stream at once, while the chunker holds
// O(chunk_frames + 2R) frames whatever the stream's length (or, given a whole sentence's frames
// with append_shared(), a view of them). vocode_chunks() runs the chunks of many streams,
// batching those of equal shape.
//
// At the stream's true start and end a chunk has no context on that side, exactly like the
// unchunked run: HiFiGAN zero-pads every conv at the sequence boundary, which is not the same as
// padding the mel with zero frames, so chunks are never padded to a common shape. Interior
// chunks all have chunk_frames + 2R frames, so they batch (and keep one shape per batch size).
#pragma once

#include <cstdint>
#include <vector>

#include "core/ops.h"
#include "families/fastspeech2/hifigan.h"

namespace voxd {

class VocoderGraphs;

// One vocoder input cut from a stream: mel frames (the chunk's own plus their context) and which
// samples of the vocoder's output for them belong to the chunk.
struct MelChunk {
  Tensor mel;               // host F32 [n_mels, frames], contiguous
  int64_t first_frame = 0;  // stream index of mel's first frame
  int64_t own_first = 0;    // stream index of the first frame whose audio this chunk yields
  int64_t own_frames = 0;   // how many frames' audio it yields (≥ 1)
  int64_t skip_samples = 0;  // output samples before the chunk's own: (own_first − first_frame)·hop
  // The chunk's own samples: own_frames·hop, plus, in a stream's last chunk, the samples
  // output_length() adds beyond frames·hop.
  int64_t samples = 0;
  // Zero samples that follow the chunk's own (a stream's last chunk: the pause its text asked
  // for, VocoderChunker::finish).
  int64_t silence_after = 0;
  // Whether mel reaches the stream's end (less than R frames of right context). Otherwise its own
  // samples depend on no frame past mel's last, so mel may be padded on the right with any frames
  // (zeros) to batch it with longer chunks.
  bool reaches_end = false;
};

// Cuts one stream of mel frames into MelChunks as soon as each chunk's right context is complete.
// Not thread-safe; one per stream.
class VocoderChunker {
 public:
  // Chunks of `chunk_frames` (≥ 1) own frames for a vocoder of `config`, the stream's first one of
  // `first_chunk_frames` (1 ≤ first ≤ chunk_frames; 0: chunk_frames), so that a stream's first
  // audio comes from less work; throws voxd::InputError for sizes outside those bounds.
  VocoderChunker(const HifiGanConfig& config, int64_t chunk_frames, int64_t first_chunk_frames = 0);

  // Appends host frames mel [n_mels, T] (T ≥ 0, any float dtype, any strides); throws
  // voxd::InputError for another shape and voxd::Error after finish() or for a device tensor.
  void append(const Tensor& mel);
  // append(mel) without a copy where it can: into a chunker that holds no frames yet, time-major
  // F32 frames (a view [n_mels, T] of a [T, n_mels] block, as the acoustic model's output) are
  // kept as a view of mel's storage until the last of them goes out in a chunk, so the caller
  // must not write to them again. Any other mel is copied as append() copies it; a later append()
  // copies the kept frames first.
  void append_shared(const Tensor& mel);
  // Marks the end of the stream: the remaining frames become chunks without right context, the
  // last of them followed by `silence_after` zero samples (a pause; 0: none).
  void finish(int64_t silence_after = 0);

  // Whether next_chunk() has a chunk: a full chunk with its right context, or anything left once
  // the stream is finished.
  bool has_chunk() const;
  // The next chunk in stream order; frames nothing needs any more are dropped. Throws
  // voxd::Error when has_chunk() is false.
  MelChunk next_chunk();
  // Every chunk has_chunk() allows now, in order.
  std::vector<MelChunk> take_chunks();
  // Whether the stream is finished and every appended frame went out in a chunk.
  bool done() const;

  int64_t chunk_frames() const { return chunk_frames_; }
  int64_t first_chunk_frames() const { return first_chunk_frames_; }
  // R: frames of context each side of a chunk.
  int64_t context_frames() const { return context_frames_; }
  // Frames appended so far.
  int64_t frames_appended() const { return frames_appended_; }
  // Frames held now: the still-needed left context plus the frames not yet chunked.
  int64_t retained_frames() const;
  // chunk_frames + 2R: retained_frames() never exceeds it while has_chunk() is false, so memory
  // per stream does not grow with its length (an append adds its frames until they are taken).
  int64_t max_retained_frames() const { return chunk_frames_ + 2 * context_frames_; }

 private:
  int64_t n_mels_;
  int64_t hop_;
  int64_t tail_samples_;  // output_length(T) − T·hop, the same for every T
  int64_t chunk_frames_;
  int64_t first_chunk_frames_;
  int64_t context_frames_;
  int64_t frames_appended_ = 0;
  int64_t next_own_frame_ = 0;  // first frame whose audio no chunk has yielded yet
  bool finished_ = false;
  int64_t silence_after_ = 0;
  // Own frames of the next chunk.
  int64_t next_chunk_frames() const;
  // Throws for a mel append() refuses.
  void check_appendable(const Tensor& mel) const;
  // append() of a mel check_appendable() took: copies its frames into buffer_, the frames kept
  // in shared_ first.
  void copy_in(const Tensor& mel);
  // Whether mel [n_mels, T] holds its frames time-major: frame t's values together, frame after
  // frame (a view of a [T, n_mels] block).
  bool time_major(const Tensor& mel) const;
  // Frame buffer_first_'s values, in shared_ or buffer_.
  const float* first_retained() const;
  // Frames [buffer_first_, frames_appended_), time-major: frame t's n_mels values together; in
  // shared_ (frame t at t·n_mels) while it is defined, else in buffer_.
  int64_t buffer_first_ = 0;
  std::vector<float> buffer_;
  Tensor shared_;
};

// Indices into `chunks` grouped by mel frame count, groups in increasing frame count, indices in
// the order given: the batches vocode_chunks() runs.
std::vector<std::vector<size_t>> batch_groups(const std::vector<MelChunk>& chunks);

// Runs `vocoder` once per batch_groups() group (a batch [B, n_mels, frames] in the vocoder's
// dtype on ctx's device) and returns each chunk's own samples, in the order of `chunks`. Chunks
// may come from any number of streams. Groups of graphs->frames() frames run through `graphs`
// (made for this vocoder; recorded CUDA graphs where the backend has them), the others eagerly.
// Throws voxd::InputError for a chunk whose mel does not fit the vocoder.
std::vector<std::vector<float>> vocode_chunks(Context& ctx, const HifiGan& vocoder,
                                              const std::vector<MelChunk>& chunks,
                                              VocoderGraphs* graphs = nullptr);

}  // namespace voxd
