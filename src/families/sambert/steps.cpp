#include "families/sambert/steps.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace voxd::sambert {
namespace {

void require_at_least_one(int64_t value, const char* name) {
  if (value < 1) {
    throw InputError(std::string(name) + " must be at least 1 to plan a step, got " +
                     std::to_string(value));
  }
}

std::vector<SambertEncoding> encode_step(Context& ctx, const Sambert& model,
                                         const std::vector<const SambertTokens*>& batch,
                                         int64_t padded) {
  return model.encode(ctx, batch, padded, /*masked=*/true);
}

Tensor prefill_step(Context& ctx, const Sambert& model, PagedKvCache& cache,
                    const std::vector<const SambertMemory*>& batch,
                    const std::vector<const std::vector<int64_t>*>& pages, int64_t padded) {
  return model.prefill(ctx, cache, batch, pages, padded);
}

std::vector<float> decode_step(Context& ctx, const Sambert& model, PagedKvCache& cache,
                               const SambertStepInputs& inputs) {
  return ops::to_host(ctx, model.decode(ctx, cache, inputs)).to_float_vector();
}

// The postnet over each item's decoder frames, then the vocoder over its postnet frames.
void vocode_step(Context& ctx, const Voice& voice, std::vector<ChunkItem>& items, int64_t frames,
                 int64_t input_frames) {
  const Sambert& model = voice.acoustic();
  const KanTtsHifiGan& vocoder = voice.vocoder();
  const int64_t mels = model.config().num_mels;
  const int64_t hidden = model.config().postnet.lstm_units;
  const int64_t context = model.config().postnet_context();
  const int64_t rows = frames + vocoder.config().lookahead_frames();
  const int64_t width = context + rows + model.config().postnet_lookahead();
  const auto b = static_cast<int64_t>(items.size());

  std::vector<float> window(static_cast<size_t>(b * width * mels), 0.0f);
  std::vector<float> mask(static_cast<size_t>(b * width), 0.0f);
  std::vector<float> h(static_cast<size_t>(b * hidden), 0.0f);
  std::vector<float> c(static_cast<size_t>(b * hidden), 0.0f);
  SambertPostnetInputs post;
  post.first = context;
  post.rows = rows;
  for (int64_t i = 0; i < b; ++i) {
    const ChunkItem& item = items[static_cast<size_t>(i)];
    const auto count = static_cast<int64_t>(item.decoder.size()) / mels;
    // A count of 0: the postnet made the chunk's frames already (a vocoder that looks ahead).
    VOXD_CHECK(item.offset + count <= width && item.count >= 0 && item.count <= rows,
               "a vocoder chunk larger than its step");
    std::copy(item.decoder.begin(), item.decoder.end(),
              window.begin() + (i * width + item.offset) * mels);
    std::fill_n(mask.begin() + i * width + item.offset, count, 1.0f);
    if (static_cast<int64_t>(item.h.size()) == hidden) {
      std::copy(item.h.begin(), item.h.end(), h.begin() + i * hidden);
      std::copy(item.c.begin(), item.c.end(), c.begin() + i * hidden);
    }
    post.counts.push_back(item.count);
  }
  const DType dtype = model.dtype();
  post.window = ops::to_device(ctx, Tensor::from_vector({b, width, mels}, window), dtype);
  post.mask = ops::to_device(ctx, Tensor::from_vector({b, width, 1}, mask), dtype);
  post.h = ops::to_device(ctx, Tensor::from_vector({b, hidden}, h));
  post.c = ops::to_device(ctx, Tensor::from_vector({b, hidden}, c));
  const std::vector<float> made = ops::to_host(ctx, model.postnet(ctx, post)).to_float_vector();
  const std::vector<float> h_after = ops::to_host(ctx, post.h).to_float_vector();
  const std::vector<float> c_after = ops::to_host(ctx, post.c).to_float_vector();

  // The vocoder's input per item: the earlier postnet frames, then the new ones, transposed to
  // [mel channels, frames] and padded on the right (its left side must be the utterance's own);
  // for NSF the source's excitation of the same frames: the earlier frames' as made before, the
  // new ones' from their f0 and voicing (restored).
  const VoiceConfig& config = voice.config();
  const int64_t channels = config.mel_channels();
  const int64_t hop = vocoder.config().hop_length();
  const int64_t harmonics = config.vocoder.nsf ? config.vocoder.nsf->harmonics + 1 : 0;
  const int64_t samples = input_frames * hop;
  std::vector<float> mel(static_cast<size_t>(b * channels * input_frames), 0.0f);
  std::vector<float> excitation(static_cast<size_t>(b * harmonics * samples), 0.0f);
  for (int64_t i = 0; i < b; ++i) {
    ChunkItem& item = items[static_cast<size_t>(i)];
    const auto* row = made.data() + i * rows * mels;
    item.postnet.assign(row, row + item.count * mels);
    if (config.acoustic.nsf) restore_f0(config, item.postnet.data(), item.count);
    item.h.assign(h_after.begin() + i * hidden, h_after.begin() + (i + 1) * hidden);
    item.c.assign(c_after.begin() + i * hidden, c_after.begin() + (i + 1) * hidden);
    const auto earlier = static_cast<int64_t>(item.earlier.size()) / mels;
    const int64_t count = earlier + item.count;
    VOXD_CHECK(count == input_frames ||
                   (count < input_frames && (vocoder.config().causal || ctx.planning())),
               "a vocoder chunk with other frames than its step's");
    float* columns = mel.data() + i * channels * input_frames;
    mel_columns(config, item.earlier.data(), earlier, columns, input_frames);
    mel_columns(config, item.postnet.data(), item.count, columns + earlier, input_frames);
    if (item.source != nullptr) {
      item.excitation = excitation_of(config, *item.source, item.postnet.data(), item.count,
                                      item.frame, item.f0_before);
      for (int64_t h = 0; h < harmonics; ++h) {
        const std::vector<float>& before = item.earlier_excitation[static_cast<size_t>(h)];
        VOXD_CHECK(static_cast<int64_t>(before.size()) == earlier * hop,
                   "the earlier frames' excitation does not match them");
        const auto at = excitation.begin() + (i * harmonics + h) * samples;
        std::copy(before.begin(), before.end(), at);
        std::copy_n(item.excitation.begin() + h * item.count * hop, item.count * hop,
                    at + earlier * hop);
      }
    }
  }
  const Tensor input =
      ops::to_device(ctx, Tensor::from_vector({b, channels, input_frames}, mel), dtype);
  const Tensor audio = ops::to_host(
      ctx, vocoder.forward(ctx, input,
                           harmonics > 0 ? Tensor::from_vector({b, harmonics, samples}, excitation)
                                         : Tensor{}));
  for (int64_t i = 0; i < b; ++i) {
    ChunkItem& item = items[static_cast<size_t>(i)];
    const float* row = audio.data<float>() + i * audio.size(1) + item.skip * hop;
    item.audio.assign(row, row + item.keep * hop);
  }
}

}  // namespace

ArenaLayout plan_encode(Backend& backend, const Sambert& model, int64_t batch, int64_t padded) {
  require_at_least_one(batch, "the utterances of an encoder step");
  require_at_least_one(padded, "the tokens of an utterance");
  SambertTokens tokens;
  tokens.linguistic.assign(static_cast<size_t>(padded), {0, 0, 0, 0});
  tokens.emotion.assign(static_cast<size_t>(padded), 0);
  tokens.speaker.assign(static_cast<size_t>(padded), 0);
  const std::vector<const SambertTokens*> utterances(static_cast<size_t>(batch), &tokens);
  return plan_workspace(backend,
                        [&](Context& ctx) { (void)encode_step(ctx, model, utterances, padded); });
}

std::vector<SambertEncoding> run_encode(Backend& backend, Allocator& upstream, const Sambert& model,
                                        const std::vector<const SambertTokens*>& batch,
                                        int64_t padded, const ArenaLayout& plan) {
  std::vector<SambertEncoding> out;
  run_in_workspace(backend, upstream, plan,
                   [&](Context& ctx) { out = encode_step(ctx, model, batch, padded); });
  return out;
}

ArenaLayout plan_prefill(Backend& backend, const Sambert& model, PagedKvCache& cache, int64_t batch,
                         int64_t padded) {
  require_at_least_one(batch, "the utterances of a prefill step");
  require_at_least_one(padded, "the decoder steps of an utterance");
  const SambertConfig& c = model.config();
  SambertMemory memory;
  memory.text = Tensor::zeros({padded, c.outputs_per_step * c.projection_units}, DType::F32);
  memory.speaker.assign(static_cast<size_t>(padded), 0);
  memory.emotion.assign(static_cast<size_t>(padded), 0);
  // Missing pages: a planning pass writes nothing.
  const std::vector<int64_t> pages(
      static_cast<size_t>((padded + cache.page_size - 1) / cache.page_size), -1);
  const std::vector<const SambertMemory*> memories(static_cast<size_t>(batch), &memory);
  const std::vector<const std::vector<int64_t>*> tables(static_cast<size_t>(batch), &pages);
  return plan_workspace(backend, [&](Context& ctx) {
    (void)prefill_step(ctx, model, cache, memories, tables, padded);
  });
}

Tensor run_prefill(Backend& backend, Allocator& upstream, const Sambert& model, PagedKvCache& cache,
                   const std::vector<const SambertMemory*>& batch,
                   const std::vector<const std::vector<int64_t>*>& pages, int64_t padded,
                   const ArenaLayout& plan) {
  Tensor out;
  run_in_workspace(backend, upstream, plan, [&](Context& ctx) {
    out = prefill_step(ctx, model, cache, batch, pages, padded);
  });
  return out;
}

ArenaLayout plan_decode(Backend& backend, const Sambert& model, PagedKvCache& cache, int64_t batch,
                        int64_t step_width, int64_t memory_width) {
  require_at_least_one(batch, "the utterances of a decoder step");
  require_at_least_one(step_width, "the page table's width");
  require_at_least_one(memory_width, "the page table's width");
  const SambertConfig& c = model.config();
  const auto repeat = [batch](int64_t value) {
    return Tensor::from_vector({batch}, std::vector<int64_t>(static_cast<size_t>(batch), value));
  };
  const auto no_pages = [batch](int64_t width) {
    return Tensor::from_vector({batch, width},
                               std::vector<int64_t>(static_cast<size_t>(batch * width), -1));
  };
  SambertStepInputs inputs;
  inputs.previous_frame = Tensor::zeros({batch, 1, c.num_mels}, DType::F32);
  inputs.memory_input = Tensor::zeros({batch, 1, c.decoder_units}, DType::F32);
  inputs.step_table = no_pages(step_width);
  inputs.steps = repeat(0);
  inputs.step_starts = repeat(0);
  inputs.memory_table = no_pages(memory_width);
  inputs.memory_ends = repeat(0);
  return plan_workspace(backend,
                        [&](Context& ctx) { (void)decode_step(ctx, model, cache, inputs); });
}

std::vector<float> run_decode(Backend& backend, Allocator& upstream, const Sambert& model,
                              PagedKvCache& cache, const SambertStepInputs& inputs,
                              const ArenaLayout& plan) {
  std::vector<float> out;
  run_in_workspace(backend, upstream, plan,
                   [&](Context& ctx) { out = decode_step(ctx, model, cache, inputs); });
  return out;
}

int64_t vocoder_frames_of(const Voice& voice, int64_t frames, int64_t item_frames) {
  const KanTtsHifiGanConfig& c = voice.vocoder().config();
  return c.causal ? c.left_context_frames() + frames + c.lookahead_frames() : item_frames;
}

ArenaLayout plan_vocode(Backend& backend, const Voice& voice, int64_t batch, int64_t frames,
                        int64_t vocoder_frames) {
  require_at_least_one(batch, "the chunks of a vocoder step");
  require_at_least_one(frames, "the frames of a vocoder chunk");
  const SambertConfig& c = voice.acoustic().config();
  ChunkItem item;
  item.count = frames;
  item.h.assign(static_cast<size_t>(c.postnet.lstm_units), 0.0f);
  item.c = item.h;
  return plan_workspace(backend, [&](Context& ctx) {
    std::vector<ChunkItem> items(static_cast<size_t>(batch), item);
    vocode_step(ctx, voice, items, frames, vocoder_frames);
  });
}

void run_vocode(Backend& backend, Allocator& upstream, const Voice& voice,
                std::vector<ChunkItem>& items, int64_t frames, int64_t vocoder_frames,
                const ArenaLayout& plan) {
  run_in_workspace(backend, upstream, plan,
                   [&](Context& ctx) { vocode_step(ctx, voice, items, frames, vocoder_frames); });
}

}  // namespace voxd::sambert
