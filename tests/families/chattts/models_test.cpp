// Parity of ChatTTS's networks with tools/reference/chattts.py (which follows 2noise/ChatTTS and
// gemelo-ai/vocos) on the fixtures tools/reference/chattts_fixtures.py writes, on the reference
// and cpu backends: the GPT's hidden states and logits with and without the KV cache (and through
// a paged cache, several streams at once, against each alone), the
// Decoder's and the DVAE's mel, Vocos's audio. fp32 max abs error ≤ 1e-4.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backends/registry.h"
#include "core/error.h"
#include "core/kv_pages.h"
#include "core/ops.h"
#include "core/safetensors.h"
#include "families/chattts/dvae.h"
#include "families/chattts/gpt.h"
#include "families/chattts/vocos.h"

namespace voxd::chattts {
namespace {

using nlohmann::json;

const std::string kFixtures = std::string(VOXD_SOURCE_DIR) + "/tests/fixtures/chattts/";
constexpr float kTolerance = 1e-4f;

json read_config(const std::string& fixture) {
  std::ifstream in(kFixtures + fixture + "/config.json");
  return json::parse(in);
}

std::shared_ptr<SafetensorsFile> open(const std::string& fixture, const std::string& file) {
  return SafetensorsFile::open(kFixtures + fixture + "/" + file);
}

float max_abs_diff(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.numel(), want.numel()) << got.shape_string() << " vs " << want.shape_string();
  const std::vector<float> a = got.to_float_vector();
  const std::vector<float> b = want.to_float_vector();
  float worst = 0.0f;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    worst = std::max(worst, std::fabs(a[i] - b[i]));
  }
  return worst;
}

class ChatTtsModels : public ::testing::TestWithParam<std::string> {
 protected:
  ChatTtsModels() : backend_(make_backend(GetParam(), 2)), ctx_(*backend_, host_allocator()) {}
  Tensor host(const Tensor& x) { return ops::to_host(ctx_, x); }

  std::unique_ptr<Backend> backend_;
  Context ctx_;
};

TEST_P(ChatTtsModels, GptWithAndWithoutTheKvCache) {
  const json config = read_config("gpt");
  const GptConfig gpt_config = GptConfig::from_json(config, "gpt/config.json");
  const Gpt gpt = Gpt::load(ctx_, gpt_config, *open("gpt", "gpt.safetensors"),
                            *open("gpt", "embed.safetensors"));
  const auto io = open("gpt", "io.safetensors");
  const Tensor ids = io->get("input_ids");
  const int64_t steps = ids.size(1);

  // Embed.forward at every position but the speaker's (which the speaker vector replaces).
  const Tensor embedded = host(gpt.embed(ctx_, ids, io->get("text_mask")));
  const Tensor want_embeds = io->get("inputs_embeds");
  const int64_t speaker_token = config.at("spk_emb_id").get<int64_t>();
  const int64_t hidden = gpt_config.hidden_size;
  int64_t speaker_rows = 0;
  for (int64_t t = 0; t < steps; ++t) {
    if (ids.data<int64_t>()[t * gpt_config.num_vq] == speaker_token) {
      ++speaker_rows;
      continue;
    }
    for (int64_t c = 0; c < hidden; ++c) {
      EXPECT_NEAR(embedded.data<float>()[t * hidden + c], want_embeds.data<float>()[t * hidden + c],
                  1e-6f)
          << "position " << t;
    }
  }
  EXPECT_EQ(speaker_rows, 1);

  const Tensor embeds = ops::to_device(ctx_, want_embeds);
  KvCache whole = gpt.make_cache(ctx_, 1, steps);
  const Tensor hidden_states = gpt.forward(ctx_, embeds, whole);
  EXPECT_EQ(whole.lengths, std::vector<int64_t>{steps});
  const float hidden_err = max_abs_diff(host(hidden_states), io->get("hidden"));
  const float text_err =
      max_abs_diff(host(gpt.text_logits(ctx_, hidden_states)), io->get("text_logits"));
  const Tensor code = host(gpt.code_logits(ctx_, hidden_states));
  const Tensor want_code = io->get("code_logits");  // [1, T, num_vq, V]
  ASSERT_EQ(code.shape(), want_code.shape());
  const float code_err = max_abs_diff(code, want_code);
  std::cout << GetParam() << ": gpt hidden " << hidden_err << ", text logits " << text_err
            << ", code logits " << code_err << "\n";
  EXPECT_LE(hidden_err, kTolerance);
  EXPECT_LE(text_err, kTolerance);
  EXPECT_LE(code_err, kTolerance);

  // The prompt in one pass, then one position per step through the cache.
  const int64_t prefill = config.at("prefill").get<int64_t>();
  KvCache cache = gpt.make_cache(ctx_, 1, steps);
  std::vector<Tensor> parts = {host(gpt.forward(ctx_, embeds.narrow(1, 0, prefill), cache))};
  for (int64_t t = prefill; t < steps; ++t) {
    parts.push_back(host(gpt.forward(ctx_, ops::contiguous(ctx_, embeds.narrow(1, t, 1)), cache)));
    EXPECT_EQ(cache.lengths, std::vector<int64_t>{t + 1});
  }
  std::vector<float> cached;
  for (const Tensor& part : parts) {
    const std::vector<float> values = part.to_float_vector();
    cached.insert(cached.end(), values.begin(), values.end());
  }
  const float cached_err =
      max_abs_diff(Tensor::from_vector({1, steps, hidden}, cached), io->get("hidden_cached"));
  std::cout << GetParam() << ": gpt hidden through the cache " << cached_err << "\n";
  EXPECT_LE(cached_err, kTolerance);
  EXPECT_THROW(gpt.forward(ctx_, ops::contiguous(ctx_, embeds.narrow(1, 0, 1)), cache), Error);
}

// Streams of different lengths decoded together through one paged cache (pages out of order,
// a batch of padded prompts) give each stream the hidden states and logits it gets alone through
// a contiguous cache: vLLM's promise, checked on the fixture's GPT.
TEST_P(ChatTtsModels, PagedCacheGivesEachStreamWhatItGetsAlone) {
  const GptConfig gpt_config = GptConfig::from_json(read_config("gpt"), "gpt/config.json");
  const Gpt gpt = Gpt::load(ctx_, gpt_config, *open("gpt", "gpt.safetensors"),
                            *open("gpt", "embed.safetensors"));
  const Tensor embeds = open("gpt", "io.safetensors")->get("inputs_embeds");  // [1, 16, hidden]
  const int64_t hidden = gpt_config.hidden_size;
  const std::vector<int64_t> prompts = {5, 3, 7};  // stream s reads rows s, s + 1, ...
  const int64_t steps = 4;
  const auto rows = [&](int64_t first, int64_t count) {
    return ops::contiguous(ctx_, embeds.narrow(1, first, count));
  };
  const auto logits_of = [&](const Tensor& h) {
    std::vector<float> out = host(gpt.text_logits(ctx_, h)).to_float_vector();
    const std::vector<float> code = host(gpt.code_logits(ctx_, h)).to_float_vector();
    out.insert(out.end(), code.begin(), code.end());
    return out;
  };
  const auto close = [](const std::vector<float>& a, const std::vector<float>& b) {
    float worst = 0.0f;
    for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
    return a.size() == b.size() ? worst : INFINITY;
  };

  // Alone: per stream, the last prompt position's hidden state and logits, then each step's.
  std::vector<std::vector<std::vector<float>>> alone(prompts.size());
  for (size_t s = 0; s < prompts.size(); ++s) {
    const auto first = static_cast<int64_t>(s);
    KvCache cache = gpt.make_cache(ctx_, 1, prompts[s] + steps);
    Tensor h = gpt.forward(ctx_, rows(first, prompts[s]), cache);
    h = ops::contiguous(ctx_, h.narrow(1, prompts[s] - 1, 1));
    for (int64_t step = 0;; ++step) {
      std::vector<float> values = host(h).to_float_vector();
      const std::vector<float> logits = logits_of(h);
      values.insert(values.end(), logits.begin(), logits.end());
      alone[s].push_back(values);
      if (step == steps) break;
      h = gpt.forward(ctx_, rows(first + prompts[s] + step, 1), cache);
    }
  }

  // Together: pages of 2 positions; a stream that holds pages between the others' keeps them
  // out of order.
  KvPagePool pool(24, 2);
  PagedKvCache cache = gpt.make_paged_cache(ctx_, pool.pages(), pool.page_size());
  std::vector<std::vector<int64_t>> held(prompts.size());
  std::vector<int64_t> other;
  for (size_t s = 0; s < prompts.size(); ++s) {
    ASSERT_TRUE(pool.grow(held[s], prompts[s]));
    ASSERT_TRUE(pool.grow(other, static_cast<int64_t>(s + 1) * pool.page_size()));
  }
  const int64_t width = pool.pages_for(7 + steps);
  const auto table = [&] { return page_table({&held[0], &held[1], &held[2]}, width); };
  // The prompts padded to the longest with zeros; the padding's keys land past each stream's
  // length (or in no page) and are never read before the stream writes its own there.
  const int64_t longest = *std::max_element(prompts.begin(), prompts.end());
  std::vector<float> batch(prompts.size() * static_cast<size_t>(longest * hidden), 0.0f);
  for (size_t s = 0; s < prompts.size(); ++s) {
    const std::vector<float> prompt = rows(static_cast<int64_t>(s), prompts[s]).to_float_vector();
    std::copy(prompt.begin(), prompt.end(),
              batch.begin() + static_cast<std::ptrdiff_t>(s) * longest * hidden);
  }
  const Tensor all = gpt.forward(
      ctx_, Tensor::from_vector({static_cast<int64_t>(prompts.size()), longest, hidden}, batch),
      cache, table(), {0, 0, 0});
  std::vector<Tensor> last;
  for (size_t s = 0; s < prompts.size(); ++s) {
    last.push_back(ops::contiguous(
        ctx_, all.narrow(0, static_cast<int64_t>(s), 1).narrow(1, prompts[s] - 1, 1)));
  }
  float worst = 0.0f;
  for (int64_t step = 0;; ++step) {
    for (size_t s = 0; s < prompts.size(); ++s) {
      std::vector<float> values = host(last[s]).to_float_vector();
      const std::vector<float> logits = logits_of(last[s]);
      values.insert(values.end(), logits.begin(), logits.end());
      worst = std::max(worst, close(values, alone[s][static_cast<size_t>(step)]));
    }
    if (step == steps) break;
    std::vector<float> next;
    std::vector<int64_t> positions;
    for (size_t s = 0; s < prompts.size(); ++s) {
      const int64_t position = prompts[s] + step;
      ASSERT_TRUE(pool.grow(held[s], position + 1));
      positions.push_back(position);
      const std::vector<float> row = rows(static_cast<int64_t>(s) + position, 1).to_float_vector();
      next.insert(next.end(), row.begin(), row.end());
    }
    const Tensor h = gpt.forward(
        ctx_, Tensor::from_vector({static_cast<int64_t>(prompts.size()), 1, hidden}, next), cache,
        table(), positions);
    for (size_t s = 0; s < prompts.size(); ++s) {
      last[s] = ops::contiguous(ctx_, h.narrow(0, static_cast<int64_t>(s), 1));
    }
  }
  std::cout << GetParam() << ": paged vs alone, hidden and logits " << worst << "\n";
  EXPECT_LE(worst, 1e-5f);
  for (auto& pages : held) pool.release(pages);
  pool.release(other);
  EXPECT_EQ(pool.free_pages(), pool.pages());
}

TEST_P(ChatTtsModels, DecoderMelFromHiddenStates) {
  const DvaeConfig config = DvaeConfig::from_json(read_config("decoder"), "decoder", true);
  const Dvae decoder = Dvae::load(ctx_, config, *open("decoder", "decoder.safetensors"));
  const auto io = open("decoder", "io.safetensors");
  const Tensor mel = host(decoder.decode_hidden(ctx_, ops::to_device(ctx_, io->get("hidden"))));
  ASSERT_EQ(mel.shape(), io->get("mel").shape());
  const float err = max_abs_diff(mel, io->get("mel"));
  std::cout << GetParam() << ": decoder mel " << err << "\n";
  EXPECT_LE(err, kTolerance);
}

TEST_P(ChatTtsModels, DvaeMelFromCodes) {
  const DvaeConfig config = DvaeConfig::from_json(read_config("dvae"), "dvae", false);
  ASSERT_TRUE(config.vq.has_value());
  const Dvae dvae = Dvae::load(ctx_, config, *open("dvae", "dvae.safetensors"));
  const auto io = open("dvae", "io.safetensors");
  const Tensor codes = ops::contiguous(ctx_, io->get("codes"));
  const Tensor mel = host(dvae.decode_codes(ctx_, codes));
  ASSERT_EQ(mel.shape(), io->get("mel").shape());
  const float err = max_abs_diff(mel, io->get("mel"));
  std::cout << GetParam() << ": dvae mel " << err << "\n";
  EXPECT_LE(err, kTolerance);

  Tensor bad = Tensor::from_vector(codes.shape(), codes.to_int_vector());
  bad.data<int64_t>()[3] = config.vq->codebook_size();
  EXPECT_THROW(dvae.decode_codes(ctx_, bad), InputError);
}

TEST_P(ChatTtsModels, VocosAudioFromMel) {
  const VocosConfig config = VocosConfig::from_json(read_config("vocos"), "vocos");
  const Vocos vocos = Vocos::load(ctx_, config, *open("vocos", "vocos.safetensors"));
  const auto io = open("vocos", "io.safetensors");
  const Tensor audio = host(vocos.forward(ctx_, ops::to_device(ctx_, io->get("mel"))));
  ASSERT_EQ(audio.shape(), io->get("audio").shape());
  const float err = max_abs_diff(audio, io->get("audio"));
  std::cout << GetParam() << ": vocos audio " << err << "\n";
  EXPECT_LE(err, kTolerance);
}

INSTANTIATE_TEST_SUITE_P(Backends, ChatTtsModels, ::testing::Values("reference", "cpu"));

}  // namespace
}  // namespace voxd::chattts
