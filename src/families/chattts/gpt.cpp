#include "families/chattts/gpt.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace voxd::chattts {

namespace {

// The tensors `names` (each [rows, cols]) stacked along their rows into one weight in `dtype` on
// ctx's device, so that their products with one input are one gemm. Each is loaded as
// load_parameter loads it and written into its rows on the device.
Tensor load_stacked(Context& ctx, const WeightSource& source, const std::vector<std::string>& names,
                    int64_t rows, int64_t cols, DType dtype) {
  const auto count = static_cast<int64_t>(names.size());
  Tensor stacked = ops::empty(ctx, {1, count * rows, cols}, dtype);
  for (int64_t i = 0; i < count; ++i) {
    const Tensor part =
        load_parameter(ctx, source, names[static_cast<size_t>(i)], {rows, cols}, dtype);
    ops::write_rows(ctx, stacked, part.reshape({1, rows, cols}), {i * rows});
  }
  return stacked.reshape({count * rows, cols});
}

}  // namespace

Gpt Gpt::load(Context& ctx, const GptConfig& config, const WeightSource& transformer,
              const WeightSource& embed, DType dtype) {
  Gpt gpt;
  gpt.config_ = config;
  gpt.precision_ = PrecisionPolicy::for_weights(dtype);
  const DType compute = gpt.precision_.compute;
  const DType stream = gpt.precision_.stream;
  const int64_t h = config.hidden_size;
  const int64_t inner = config.intermediate_size;
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    Layer layer;
    layer.input_norm = load_parameter(ctx, transformer, p + "input_layernorm.weight", {h}, stream);
    layer.post_attention_norm =
        load_parameter(ctx, transformer, p + "post_attention_layernorm.weight", {h}, stream);
    layer.qkv = load_stacked(ctx, transformer,
                             {p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight",
                              p + "self_attn.v_proj.weight"},
                             h, h, compute);
    layer.o = load_parameter(ctx, transformer, p + "self_attn.o_proj.weight", {h, h}, compute);
    layer.gate_up =
        load_stacked(ctx, transformer, {p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"},
                     inner, h, compute);
    layer.down = load_parameter(ctx, transformer, p + "mlp.down_proj.weight", {h, inner}, compute);
    gpt.layers_.push_back(std::move(layer));
  }
  gpt.norm_ = load_parameter(ctx, transformer, "norm.weight", {h}, stream);
  gpt.emb_text_ =
      load_parameter(ctx, embed, "emb_text.weight", {config.num_text_tokens, h}, stream);
  gpt.head_text_ =
      load_parameter(ctx, embed, "head_text.weight", {config.num_text_tokens, h}, compute);
  // The num_vq code heads stacked into one [num_vq · num_audio_tokens, hidden] weight: a step's
  // code logits are one gemm.
  const int64_t audio = config.num_audio_tokens;
  std::vector<std::string> heads;
  for (int64_t q = 0; q < config.num_vq; ++q) {
    const std::string n = std::to_string(q);
    gpt.emb_code_.push_back(
        load_parameter(ctx, embed, "emb_code." + n + ".weight", {audio, h}, stream));
    heads.push_back("head_code." + n + ".weight");
  }
  gpt.head_code_ = load_stacked(ctx, embed, heads, audio, h, compute);
  return gpt;
}

KvCache Gpt::make_cache(Context& ctx, int64_t batch, int64_t capacity) const {
  if (capacity < 1 || capacity > config_.max_position_embeddings) {
    throw Error("chattts gpt: a cache of " + std::to_string(capacity) +
                " positions is outside [1, max_position_embeddings = " +
                std::to_string(config_.max_position_embeddings) + "]");
  }
  KvCache cache;
  cache.capacity = capacity;
  cache.lengths.assign(static_cast<size_t>(batch), 0);
  const Shape shape = {batch, capacity, config_.num_attention_heads, config_.head_dim()};
  for (size_t i = 0; i < layers_.size(); ++i) {
    cache.keys.push_back(ops::zeros(ctx, shape, precision_.compute));
    cache.values.push_back(ops::zeros(ctx, shape, precision_.compute));
  }
  return cache;
}

Tensor Gpt::embed(Context& ctx, const Tensor& ids, const Tensor& text_mask) const {
  const int64_t num_vq = config_.num_vq;
  if (ids.dim() != 3 || ids.size(2) != num_vq || ids.dtype() != DType::I64 ||
      !ids.device().is_cpu()) {
    throw Error("chattts gpt: ids must be I64 [B, T, " + std::to_string(num_vq) +
                "] on the host, got " + ids.shape_string());
  }
  const int64_t b = ids.size(0);
  const int64_t t = ids.size(1);
  if (text_mask.shape() != Shape{b, t} || !text_mask.device().is_cpu()) {
    throw Error("chattts gpt: text_mask must be [B, T] = [" + std::to_string(b) + ", " +
                std::to_string(t) + "] on the host, got " + text_mask.shape_string());
  }
  const Tensor all = ids.to_host_contiguous(DType::I64);
  const std::vector<int64_t> mask = text_mask.to_int_vector();
  // Each table reads its own positions; at the others it looks up row 0, masked away (× 0).
  const auto n = static_cast<size_t>(b * t);
  std::vector<int64_t> text_ids(n, 0);
  std::vector<std::vector<int64_t>> code_ids(static_cast<size_t>(num_vq), text_ids);
  std::vector<float> is_text(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t* row = all.data<int64_t>() + static_cast<int64_t>(i) * num_vq;
    is_text[i] = mask[i] != 0 ? 1.0f : 0.0f;
    if (mask[i] != 0) {
      text_ids[i] = row[0];
    } else {
      for (int64_t q = 0; q < num_vq; ++q) code_ids[static_cast<size_t>(q)][i] = row[q];
    }
  }
  const auto text = [&] {
    return ops::embedding(ctx, Tensor::from_vector({b, t}, text_ids), emb_text_);
  };
  const auto code = [&] {
    Tensor sum = ops::embedding(ctx, Tensor::from_vector({b, t}, code_ids[0]), emb_code_[0]);
    for (int64_t q = 1; q < num_vq; ++q) {
      const auto column = static_cast<size_t>(q);
      sum = ops::add(
          ctx, sum,
          ops::embedding(ctx, Tensor::from_vector({b, t}, code_ids[column]), emb_code_[column]));
    }
    return sum;
  };
  // A decode step is all text or all code: one table's lookups, no masks.
  const auto texts = std::count(is_text.begin(), is_text.end(), 1.0f);
  if (texts == static_cast<std::ptrdiff_t>(n)) return text();
  if (texts == 0) return code();
  std::vector<float> is_code(is_text.size());
  for (size_t i = 0; i < is_text.size(); ++i) is_code[i] = 1.0f - is_text[i];
  const Tensor text_weight =
      ops::to_device(ctx, Tensor::from_vector({b, t, 1}, is_text), precision_.stream);
  const Tensor code_weight =
      ops::to_device(ctx, Tensor::from_vector({b, t, 1}, is_code), precision_.stream);
  return ops::add(ctx, ops::mul(ctx, text(), text_weight), ops::mul(ctx, code(), code_weight));
}

Tensor Gpt::forward(Context& ctx, const Tensor& embeddings, KvCache& cache) const {
  check_embeddings(embeddings);
  const int64_t b = embeddings.size(0);
  const int64_t t = embeddings.size(1);
  if (static_cast<int64_t>(cache.lengths.size()) != b || cache.keys.size() != layers_.size()) {
    throw Error("chattts gpt: the cache is for " + std::to_string(cache.lengths.size()) +
                " sequences, the embeddings have " + std::to_string(b));
  }
  std::vector<int64_t> ends(cache.lengths);
  for (int64_t& end : ends) {
    end += t;
    if (end > cache.capacity) {
      throw Error("chattts gpt: a sequence of " + std::to_string(end) +
                  " positions passes its cache of " + std::to_string(cache.capacity));
    }
  }
  AttentionParams attention;
  attention.scale = attention_scale();
  attention.key_lengths = ends;
  attention.causal = true;
  attention.query_offsets = cache.lengths;
  const Tensor positions = Tensor::from_vector({b}, cache.lengths);
  const int64_t heads = config_.num_attention_heads;
  Tensor hidden = run_layers(ctx, embeddings, [&](size_t l, const Tensor& qkv) {
    const auto part = [&](int64_t i) {
      return ops::contiguous(ctx, qkv.narrow(2, i, 1)).reshape({b, t, heads, config_.head_dim()});
    };
    ops::write_rows(ctx, cache.keys[l], ops::rope(ctx, part(1), positions, rope_theta()),
                    cache.lengths);
    ops::write_rows(ctx, cache.values[l], part(2), cache.lengths);
    return ops::attention(ctx, ops::rope(ctx, part(0), positions, rope_theta()), cache.keys[l],
                          cache.values[l], attention);
  });
  cache.lengths = ends;
  return hidden;
}

PagedKvCache Gpt::make_paged_cache(Context& ctx, int64_t pages, int64_t page_size) const {
  return PagedKvCache::make(ctx, static_cast<int64_t>(layers_.size()), pages, page_size,
                            config_.num_attention_heads, config_.head_dim(), precision_.compute);
}

Tensor Gpt::forward(Context& ctx, const Tensor& embeddings, PagedKvCache& cache,
                    const Tensor& page_table, const std::vector<int64_t>& positions) const {
  check_embeddings(embeddings);
  const int64_t b = embeddings.size(0);
  if (static_cast<int64_t>(positions.size()) != b || cache.keys.size() != layers_.size()) {
    throw Error("chattts gpt: " + std::to_string(positions.size()) + " positions for a batch of " +
                std::to_string(b) + " sequences");
  }
  for (int64_t position : positions) {
    if (position + embeddings.size(1) > config_.max_position_embeddings) {
      throw Error("chattts gpt: a sequence of " + std::to_string(position + embeddings.size(1)) +
                  " positions passes the GPT's " + std::to_string(config_.max_position_embeddings));
    }
  }
  return forward(ctx, embeddings, cache, page_table, Tensor::from_vector({b}, positions));
}

Tensor Gpt::forward(Context& ctx, const Tensor& embeddings, PagedKvCache& cache,
                    const Tensor& page_table, const Tensor& positions) const {
  check_embeddings(embeddings);
  return run_layers(ctx, embeddings, [&](size_t l, const Tensor& qkv) {
    const Tensor q = ops::qkv_to_pages(ctx, qkv, cache.keys[l], cache.values[l], page_table,
                                       positions, rope_theta());
    return ops::paged_attention(ctx, q, cache.keys[l], cache.values[l], page_table, positions,
                                attention_scale());
  });
}

void Gpt::check_embeddings(const Tensor& embeddings) const {
  if (embeddings.dim() != 3 || embeddings.size(2) != config_.hidden_size) {
    throw Error("chattts gpt: embeddings must be [B, T, " + std::to_string(config_.hidden_size) +
                "], got " + embeddings.shape_string());
  }
}

float Gpt::attention_scale() const {
  return 1.0f / std::sqrt(static_cast<float>(config_.head_dim()));
}

Tensor Gpt::run_layers(Context& ctx, const Tensor& embeddings, const Attend& attend) const {
  const int64_t b = embeddings.size(0);
  const int64_t t = embeddings.size(1);
  const int64_t hidden = config_.hidden_size;
  const int64_t heads = config_.num_attention_heads;
  const auto eps = static_cast<float>(config_.rms_norm_eps);
  // x is the residual stream; h the next sublayer's normed input. Each sublayer's output is added
  // to x by the norm after it (the next layer's, or the final one).
  Tensor x = precision_.to_stream(ctx, embeddings);
  Tensor h = precision_.to_compute(ctx, ops::rms_norm(ctx, x, layers_.front().input_norm, eps));
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& layer = layers_[l];
    const Tensor qkv =
        ops::linear(ctx, h, layer.qkv, Tensor()).reshape({b, t, 3, heads, config_.head_dim()});
    const Tensor attended = attend(l, qkv).reshape({b, t, hidden});
    const ops::ResidualNorm mlp_input =
        ops::add_rms_norm(ctx, x, ops::linear(ctx, attended, layer.o, Tensor()),
                          layer.post_attention_norm, eps, precision_.compute);
    const Tensor gated =
        ops::swiglu(ctx, ops::linear(ctx, mlp_input.normed, layer.gate_up, Tensor()));
    const bool last = l + 1 == layers_.size();
    const ops::ResidualNorm next =
        ops::add_rms_norm(ctx, mlp_input.sum, ops::linear(ctx, gated, layer.down, Tensor()),
                          last ? norm_ : layers_[l + 1].input_norm, eps,
                          last ? precision_.stream : precision_.compute);
    x = next.sum;
    h = next.normed;
  }
  return h;
}

Tensor Gpt::text_logits(Context& ctx, const Tensor& hidden) const {
  return ops::to_device(
      ctx, ops::linear(ctx, precision_.to_compute(ctx, hidden), head_text_, Tensor()), DType::F32);
}

Tensor Gpt::code_logits(Context& ctx, const Tensor& hidden) const {
  const Tensor logits = ops::to_device(
      ctx, ops::linear(ctx, precision_.to_compute(ctx, hidden), head_code_, Tensor()), DType::F32);
  return logits.reshape({hidden.size(0), hidden.size(1), config_.num_vq, config_.num_audio_tokens});
}

}  // namespace voxd::chattts
