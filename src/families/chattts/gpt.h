// ChatTTS's GPT (ChatTTS/model/gpt.py and embed.py): transformers' LlamaModel (RMSNorm, rotary
// positions, SiLU-gated MLP, causal attention, no biases) fed embeddings instead of token ids —
// a text position takes emb_text of its id, an audio position the sum of the num_vq emb_code
// lookups — with head_text and the num_vq head_code heads on the final hidden states. Each step
// appends its keys and values to a KvCache, so a new token costs one position of work.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/kv_pages.h"
#include "core/ops.h"
#include "core/weight_loading.h"
#include "core/weights.h"
#include "families/chattts/model_config.h"

namespace voxd::chattts {

// Keys and values of every layer for `batch` sequences of up to `capacity` positions, and how
// many each holds.
struct KvCache {
  std::vector<Tensor> keys;    // per layer [batch, capacity, heads, head_dim], compute dtype
  std::vector<Tensor> values;  // the same
  std::vector<int64_t> lengths;
  int64_t capacity = 0;
};

class Gpt {
 public:
  // `transformer` holds the Llama stack by transformers' names (layers.N.self_attn.{q,k,v,o}_proj,
  // layers.N.mlp.{gate,up,down}_proj, layers.N.{input,post_attention}_layernorm, norm);
  // `embed` holds emb_text, emb_code.Q, head_text and head_code.Q (weight norm folded). Every
  // shape is checked against `config`.
  static Gpt load(Context& ctx, const GptConfig& config, const WeightSource& transformer,
                  const WeightSource& embed, DType dtype = DType::F32);

  // A cache for `batch` sequences of up to `capacity` positions (≤ max_position_embeddings),
  // from ctx's allocator, zeroed (attention reads rows past a sequence's length times zero, so
  // they must be finite).
  KvCache make_cache(Context& ctx, int64_t batch, int64_t capacity) const;

  // Embed.forward: ids [B, T, num_vq] (I64, host), text_mask [B, T] (nonzero: a text position,
  // which reads ids[..., 0]) -> [B, T, hidden] in the stream dtype. Ids outside their table
  // throw voxd::Error naming the id.
  Tensor embed(Context& ctx, const Tensor& ids, const Tensor& text_mask) const;
  // The Llama stack over `embeddings` [B, T, hidden], continuing each sequence after the
  // positions `cache` holds (positions cache.lengths[b] + t), whose keys and values it appends:
  // the final hidden states [B, T, hidden] in the stream dtype. Throws voxd::Error when a
  // sequence would pass the cache's capacity.
  Tensor forward(Context& ctx, const Tensor& embeddings, KvCache& cache) const;
  // `pages` pages of `page_size` positions for every layer, zeroed, from ctx's allocator.
  PagedKvCache make_paged_cache(Context& ctx, int64_t pages, int64_t page_size) const;
  // The Llama stack over `embeddings` [B, T, hidden] with sequence b's rows at positions
  // positions[b] + t, their keys and values written into `cache` through page_table [B, P]
  // (ops::write_pages; rows in a missing page are dropped, so a batch of prompts may be padded)
  // and attention over them (ops::paged_attention): the final hidden states [B, T, hidden].
  // Throws voxd::Error when a sequence would pass max_position_embeddings.
  Tensor forward(Context& ctx, const Tensor& embeddings, PagedKvCache& cache,
                 const Tensor& page_table, const std::vector<int64_t>& positions) const;
  // The same with positions I64 [B] on the host or ctx's device and page_table there too (a
  // recorded step's inputs, read where they are when it replays); the caller keeps every
  // sequence within max_position_embeddings.
  Tensor forward(Context& ctx, const Tensor& embeddings, PagedKvCache& cache,
                 const Tensor& page_table, const Tensor& positions) const;
  // head_text: hidden [B, T, hidden] -> logits [B, T, num_text_tokens] F32.
  Tensor text_logits(Context& ctx, const Tensor& hidden) const;
  // The num_vq code heads: hidden [B, T, hidden] -> logits [B, T, num_vq, num_audio_tokens] F32
  // (head q's at [..., q, :]).
  Tensor code_logits(Context& ctx, const Tensor& hidden) const;

  const GptConfig& config() const { return config_; }
  DType compute_dtype() const { return precision_.compute; }
  // The dtype of embed()'s and forward()'s hidden states.
  DType stream_dtype() const { return precision_.stream; }

 private:
  // A layer's projections stacked so that each group is one gemm: the q, k and v rows, and the
  // gate's then the up projection's.
  struct Layer {
    Tensor input_norm, post_attention_norm;  // [hidden], stream dtype
    Tensor qkv;                              // [3 · hidden, hidden]
    Tensor o;                                // [hidden, hidden]
    Tensor gate_up;                          // [2 · intermediate, hidden]
    Tensor down;                             // [hidden, intermediate]
  };

  // One layer's attention: (layer, qkv [B, T, 3, heads, head_dim], the projection before rope)
  // -> attended [B, T, heads, head_dim].
  using Attend = std::function<Tensor(size_t, const Tensor&)>;

  void check_embeddings(const Tensor& embeddings) const;
  float attention_scale() const;
  float rope_theta() const { return static_cast<float>(config_.rope_theta); }
  // The Llama stack over `embeddings`, each layer's attention (rope included) through `attend`.
  Tensor run_layers(Context& ctx, const Tensor& embeddings, const Attend& attend) const;

  GptConfig config_;
  PrecisionPolicy precision_;
  std::vector<Layer> layers_;
  Tensor norm_;                   // [hidden]
  Tensor emb_text_;               // [num_text_tokens, hidden], stream dtype
  std::vector<Tensor> emb_code_;  // num_vq × [num_audio_tokens, hidden]
  Tensor head_text_;              // [num_text_tokens, hidden]
  Tensor head_code_;  // [num_vq · num_audio_tokens, hidden], head q's rows at q · that
};

}  // namespace voxd::chattts
