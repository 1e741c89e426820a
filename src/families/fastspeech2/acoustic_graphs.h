// Recorded acoustic steps for small batches: FastSpeech2's encoder and decoder as CUDA graphs, so
// that a request's acoustic model is two launches and one read-back instead of a few hundred
// launches (on an H200 the eager steps take ~1.2 ms for one sequence and ~2.1 ms for eight: at
// small batches most of it is the steps' own cost, not the sequences' work).
//
// A batch is padded to padded() of its longest sequence and of its longest mel (with
// SynthesisControls::mask_padding, so padding changes no sequence's output). For each shape an
// AcousticGraphs meets it plans the step (core/workspace_plan.h), takes one arena of that size,
// places the step's inputs in it (symbol ids, lengths and speakers for the encoder; the length
// regulator's frame map and the mel lengths for the decoder, all in device memory, where the
// recorded kernels read them when they replay: FastSpeech2::encode_on_device and
// decode_on_device) and records the step once with Backend::capture. A decoder graph reads the
// hidden states of the encoder graph of its batch and symbols in place. The durations come back
// to the host between the two, as in FastSpeech2::encode.
//
// Graphs are kept until their arenas would pass `max_bytes` or the caller's budget refuses a new
// one; then the least recently used go, one graph at a time (a decoder graph, or an encoder graph
// once no decoder graph reads it). A caller with a memory budget (the server's acoustic steps)
// goes through encode() and decode(), which record only what its Admission allows and otherwise
// leave the step to the caller's own eager path; run() does both and falls back to FastSpeech2's
// eager steps. On a backend that cannot record (cpu, reference) run() is FastSpeech2::forward with
// the same padding, and holds nothing. One thread at a time, like the backend.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <vector>

#include "core/ops.h"
#include "families/fastspeech2/fastspeech2.h"

namespace voxd {

class AcousticGraphs {
 public:
  // Whether recording a graph that takes `bytes` more device memory may go ahead now.
  using Admission = std::function<bool(uint64_t bytes)>;

  // Graphs of `model` on ctx's backend, their arenas from ctx's allocator, together at most
  // `max_bytes`; ctx, its backend and allocator, and the model must outlive this.
  AcousticGraphs(Context& ctx, const FastSpeech2& model, uint64_t max_bytes);
  // Waits for replays still running, then gives every arena back.
  ~AcousticGraphs();
  AcousticGraphs(const AcousticGraphs&) = delete;
  AcousticGraphs& operator=(const AcousticGraphs&) = delete;

  // Whether the backend records graphs; when false, run() is the eager forward pass.
  bool enabled() const { return ctx_->backend().can_capture(); }

  // FastSpeech2::forward of `ids` with `controls` (mask_padding set, pad_to_phonemes and
  // pad_to_frames replaced by the padded lengths), through the graphs of its shape, recorded on
  // first use: the mel [B, padded(longest mel), n_mels] is a copy in ctx's allocator, frames
  // past each sequence's mel_lengths are padding. A batch longer than max_seq_len symbols or
  // frames, or one whose graphs alone would pass max_bytes, runs eagerly. Arguments and errors
  // as FastSpeech2::forward (forced_durations included); voxd::Error when a step cannot be
  // recorded.
  AcousticOutput run(const std::vector<std::vector<int64_t>>& ids,
                     const std::vector<int64_t>& speakers, const SynthesisControls& controls,
                     const std::vector<std::vector<int64_t>>& forced_durations = {});

  // FastSpeech2::encode of `ids` through the encoder graph of its shape, recorded first when it
  // is not and `admit` allows it: padded to padded(longest) symbols with mask_padding (pad_to_*
  // of `controls` ignored); the hidden states are the graph's output, valid until the next
  // encode() or clear() (decode() keeps the encoder graph it reads). Nothing run, when the
  // backend cannot record, the batch is longer than max_seq_len symbols, or its graph is not
  // recorded and recording it would pass max_bytes or is not admitted even after the least
  // recently used graphs went to make room. Arguments and errors as FastSpeech2::encode.
  std::optional<AcousticEncoding> encode(
      const std::vector<std::vector<int64_t>>& ids, const std::vector<int64_t>& speakers,
      const SynthesisControls& controls, const Admission& admit,
      const std::vector<std::vector<int64_t>>& forced_durations = {});
  // FastSpeech2::decode of the encoding the last encode() returned, through the decoder graph of
  // padded(its longest mel) frames, recorded first when it is not and `admit` allows it: the mel
  // [B, frames, n_mels] is the graph's output, valid until the next call. Nothing run when every
  // mel is empty or the longest is past max_seq_len, or the graph is not recorded and may not be
  // (other decoder graphs may have gone to make room). `controls` as given to encode().
  std::optional<AcousticOutput> decode(const AcousticEncoding& encoding,
                                       const SynthesisControls& controls, const Admission& admit);
  // Whether encode() of `batch` sequences, the longest of `longest` symbols, with `controls`'
  // pitch, replays a graph recorded before.
  bool recorded(int64_t batch, int64_t longest, const SynthesisControls& controls) const;

  // The symbols or mel frames a batch whose longest has `longest` (≥ 1) is padded to:
  // padded_length(longest), but no more than max_seq_len where `longest` fits it (past
  // max_seq_len the positions would be uploaded, which a recorded step cannot do).
  int64_t padded(int64_t longest) const;

  // Recorded graphs (encoders and decoders).
  size_t graphs() const;
  // Device bytes the recorded graphs hold: their arenas, inputs and outputs included.
  uint64_t bytes() const;
  // Drops every graph and gives its arena back.
  void clear();

 private:
  struct Graph;
  struct Encoder;
  // Encoder graphs by (batch, symbols, pitch_scale's bits); decoder graphs by their frames.
  using EncoderKey = std::tuple<int64_t, int64_t, uint32_t>;

  // The key of an encoder graph for `batch` sequences padded to `symbols`.
  static EncoderKey key_of(int64_t batch, int64_t symbols, const SynthesisControls& controls);
  // The encoder graph of `key`, recorded on first use; null when it would not fit max_bytes or
  // `admit` refuses it.
  Encoder* encoder_for(const EncoderKey& key, const SynthesisControls& controls,
                       const Admission& admit);
  // The decoder graph reading `encoder` for `frames`, recorded on first use; null when it would
  // not fit max_bytes or `admit` refuses it.
  Graph* decoder_for(Encoder& encoder, int64_t frames, const SynthesisControls& controls,
                     const Admission& admit);
  // Drops least recently used graphs, never `keep`'s encoder, until `admit` takes `bytes` more
  // and they fit max_bytes; false when they cannot (what went to make room stays gone).
  bool make_room(uint64_t bytes, const Encoder* keep, const Admission& admit);
  // Drops the least recently used graph that may go (a decoder, or an encoder other than
  // `keep` without decoders); false when none may.
  bool drop_oldest(const Encoder* keep);

  Context* ctx_;
  const FastSpeech2* model_;
  uint64_t max_bytes_;
  uint64_t uses_ = 0;  // the clock of last use
  std::map<EncoderKey, std::unique_ptr<Encoder>> encoders_;
  // The encoder the last encode() replayed, which decode() continues; null after any other
  // outcome.
  Encoder* last_encoder_ = nullptr;
};

}  // namespace voxd
