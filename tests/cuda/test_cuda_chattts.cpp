// ChatTTS's networks on the CUDA backend in F32, F16 and BF16 against the fixtures of
// tools/reference/chattts_fixtures.py (the same ones tests/families/chattts/models_test.cpp
// checks on the host): the GPT's hidden states and logits in one pass, through the KV cache,
// through a paged cache beside other streams and with its decode steps replayed as recorded
// graphs (DecodeGraphs, padded batches), the Decoder's and the DVAE's mel, Vocos's audio.
// Device memory comes poisoned (NaN), so a cache row or an output element no kernel wrote shows
// up. F32: max abs error ≤ 1e-4; F16:
// relative L2 ≤ 1e-2; BF16 (8 mantissa bits, F32 stream): relative L2 ≤ 3e-2.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "core/kv_pages.h"
#include "core/ops.h"
#include "core/safetensors.h"
#include "cuda_test_util.h"
#include "families/chattts/decode_graphs.h"
#include "families/chattts/dvae.h"
#include "families/chattts/gpt.h"
#include "families/chattts/vocos.h"

namespace voxd::chattts {
namespace {

using testing::cuda_backend;
using testing::PoisonDeviceAllocator;
using testing::relative_l2;
using testing::source_dir;

std::string fixture_dir(const std::string& name) {
  return source_dir() + "/tests/fixtures/chattts/" + name + "/";
}

nlohmann::json read_config(const std::string& name) {
  std::ifstream in(fixture_dir(name) + "config.json");
  return nlohmann::json::parse(in);
}

std::shared_ptr<SafetensorsFile> open(const std::string& name, const std::string& file) {
  return SafetensorsFile::open(fixture_dir(name) + file);
}

double expect_matches(const Tensor& actual, const Tensor& expected, DType dtype,
                      const std::string& what) {
  EXPECT_EQ(actual.numel(), expected.numel()) << what;
  const Tensor want = expected.reshape(actual.shape());
  if (dtype == DType::F32) {
    const std::vector<float> a = actual.to_float_vector();
    const std::vector<float> e = want.to_float_vector();
    float worst = 0.0f;
    for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - e[i]));
    EXPECT_LE(worst, 1e-4f) << what << " (max abs error)";
    return worst;
  }
  const double err = relative_l2(actual, want);
  EXPECT_LE(err, dtype == DType::F16 ? 1e-2 : 3e-2) << what << " (relative L2 error)";
  return err;
}

class ChatTtsOnCuda : public ::testing::TestWithParam<DType> {
 protected:
  ChatTtsOnCuda() : ctx_(cuda_backend(), allocator_) {}
  Tensor host(const Tensor& x) { return ops::to_host(ctx_, x); }
  std::string dtype() const { return std::string(dtype_name(GetParam())); }

  PoisonDeviceAllocator allocator_;
  Context ctx_;
};

TEST_P(ChatTtsOnCuda, GptInOnePassAndThroughTheCache) {
  const GptConfig config = GptConfig::from_json(read_config("gpt"), "gpt/config.json");
  const Gpt gpt = Gpt::load(ctx_, config, *open("gpt", "gpt.safetensors"),
                            *open("gpt", "embed.safetensors"), GetParam());
  const auto io = open("gpt", "io.safetensors");
  const Tensor embeds = ops::to_device(ctx_, io->get("inputs_embeds"), DType::F32);
  const int64_t steps = embeds.size(1);
  KvCache whole = gpt.make_cache(ctx_, 1, steps);
  const Tensor hidden = gpt.forward(ctx_, embeds, whole);
  const double hidden_err = expect_matches(host(hidden), io->get("hidden"), GetParam(), "hidden");
  const double text_err = expect_matches(host(gpt.text_logits(ctx_, hidden)),
                                         io->get("text_logits"), GetParam(), "text logits");
  const Tensor code = host(gpt.code_logits(ctx_, hidden));
  const Tensor want_code = io->get("code_logits");
  ASSERT_EQ(code.shape(), want_code.shape());
  const double code_err =
      expect_matches(code, want_code.to_host_contiguous(DType::F32), GetParam(), "code logits");
  const int64_t prefill = read_config("gpt").at("prefill").get<int64_t>();
  KvCache cache = gpt.make_cache(ctx_, 1, steps);
  std::vector<float> cached =
      host(gpt.forward(ctx_, embeds.narrow(1, 0, prefill), cache)).to_float_vector();
  for (int64_t t = prefill; t < steps; ++t) {
    const std::vector<float> step =
        host(gpt.forward(ctx_, ops::contiguous(ctx_, embeds.narrow(1, t, 1)), cache))
            .to_float_vector();
    cached.insert(cached.end(), step.begin(), step.end());
  }
  const double cached_err =
      expect_matches(Tensor::from_vector({1, steps, config.hidden_size}, cached),
                     io->get("hidden_cached"), GetParam(), "hidden through the cache");
  std::cout << "gpt " << dtype() << ": hidden " << hidden_err << ", text logits " << text_err
            << ", code logits " << code_err << ", through the cache " << cached_err << "\n";
}

// The fixture's sequence through a paged cache beside two other streams of other lengths (one
// padded batch of prompts, then a step at a time, pages out of order): its hidden states are the
// reference's through a contiguous cache.
TEST_P(ChatTtsOnCuda, GptThroughAPagedCacheBesideOtherStreams) {
  const GptConfig config = GptConfig::from_json(read_config("gpt"), "gpt/config.json");
  const Gpt gpt = Gpt::load(ctx_, config, *open("gpt", "gpt.safetensors"),
                            *open("gpt", "embed.safetensors"), GetParam());
  const auto io = open("gpt", "io.safetensors");
  const Tensor embeds = io->get("inputs_embeds");  // [1, steps, hidden], host
  const int64_t steps = embeds.size(1);
  const int64_t hidden = config.hidden_size;
  const int64_t prefill = read_config("gpt").at("prefill").get<int64_t>();
  // Stream s reads the fixture's rows from s on: prompts of prefill, 4 and 9 rows.
  const std::vector<int64_t> prompts = {prefill, 4, 9};
  const auto row_values = [&](int64_t first, int64_t count) {
    return embeds.narrow(1, first, count).to_host_contiguous(DType::F32).to_float_vector();
  };
  // The embeddings go to the device in F32, as the one-pass test gives them (the GPT converts
  // them to its stream dtype; an F32 stream takes them as they are).
  const auto on_device = [&](const Tensor& x) { return ops::to_device(ctx_, x, DType::F32); };
  KvPagePool pool(32, 4);
  PagedKvCache cache = gpt.make_paged_cache(ctx_, pool.pages(), pool.page_size());
  std::vector<std::vector<int64_t>> held(prompts.size());
  std::vector<int64_t> spacer;
  for (size_t s = 0; s < prompts.size(); ++s) {
    ASSERT_TRUE(pool.grow(held[s], prompts[s]));
    ASSERT_TRUE(pool.grow(spacer, static_cast<int64_t>(s + 1) * pool.page_size()));
  }
  const int64_t width = pool.pages_for(steps + 2);
  const auto table = [&] { return page_table({&held[0], &held[1], &held[2]}, width); };
  const int64_t longest = *std::max_element(prompts.begin(), prompts.end());
  std::vector<float> batch(prompts.size() * static_cast<size_t>(longest * hidden), 0.0f);
  for (size_t s = 0; s < prompts.size(); ++s) {
    const std::vector<float> prompt = row_values(static_cast<int64_t>(s), prompts[s]);
    std::copy(prompt.begin(), prompt.end(),
              batch.begin() + static_cast<std::ptrdiff_t>(s) * longest * hidden);
  }
  const Tensor first =
      host(gpt.forward(ctx_, on_device(Tensor::from_vector({3, longest, hidden}, batch)), cache,
                       table(), {0, 0, 0}));
  std::vector<float> got =
      first.narrow(0, 0, 1).narrow(1, 0, prefill).to_host_contiguous(DType::F32).to_float_vector();
  for (int64_t position = prefill; position < steps; ++position) {
    std::vector<float> next;
    std::vector<int64_t> positions;
    for (size_t s = 0; s < prompts.size(); ++s) {
      const int64_t at = prompts[s] + position - prefill;
      ASSERT_TRUE(pool.grow(held[s], at + 1));
      positions.push_back(at);
      const std::vector<float> row = row_values(static_cast<int64_t>(s) + at, 1);
      next.insert(next.end(), row.begin(), row.end());
    }
    const std::vector<float> h =
        host(gpt.forward(ctx_, on_device(Tensor::from_vector({3, 1, hidden}, next)), cache, table(),
                         positions))
            .to_float_vector();
    got.insert(got.end(), h.begin(), h.begin() + hidden);  // stream 0's
  }
  const double err = expect_matches(Tensor::from_vector({1, steps, hidden}, got),
                                    io->get("hidden_cached"), GetParam(), "hidden through pages");
  std::cout << "gpt " << dtype() << ": hidden through a paged cache " << err << "\n";
}

// The paged test's three streams with every decode step through DecodeGraphs (three streams run
// as a recorded batch of four, the fourth row without pages; every other step through the graph
// of eight, as a step shrunk by preemption runs): stream 0's hidden states and the stage head's
// logits are the reference's, for the code heads and for the text head.
TEST_P(ChatTtsOnCuda, DecodeStepsReplayedAsRecordedGraphs) {
  const GptConfig config = GptConfig::from_json(read_config("gpt"), "gpt/config.json");
  const Gpt gpt = Gpt::load(ctx_, config, *open("gpt", "gpt.safetensors"),
                            *open("gpt", "embed.safetensors"), GetParam());
  const auto io = open("gpt", "io.safetensors");
  const Tensor embeds = io->get("inputs_embeds");
  const int64_t steps = embeds.size(1);
  const int64_t hidden = config.hidden_size;
  const int64_t prefill = read_config("gpt").at("prefill").get<int64_t>();
  const std::vector<int64_t> prompts = {prefill, 4, 9};
  const auto rows_of = [&](int64_t first, int64_t count, DType dtype) {
    return ops::to_device(ctx_, embeds.narrow(1, first, count).to_host_contiguous(DType::F32),
                          dtype);
  };
  for (const bool code : {true, false}) {
    SCOPED_TRACE(code ? "code heads" : "text head");
    KvPagePool pool(32, 4);
    PagedKvCache cache = gpt.make_paged_cache(ctx_, pool.pages(), pool.page_size());
    std::vector<std::vector<int64_t>> held(prompts.size());
    const int64_t width = pool.pages_for(steps + 2);
    DecodeGraphs graphs(ctx_, gpt, cache, width);
    ASSERT_TRUE(graphs.enabled());
    for (size_t s = 0; s < prompts.size(); ++s) {
      ASSERT_TRUE(pool.grow(held[s], prompts[s]));
      (void)gpt.forward(ctx_, rows_of(static_cast<int64_t>(s), prompts[s], DType::F32), cache,
                        page_table({&held[s]}, width), std::vector<int64_t>{0});
    }
    std::vector<float> got_hidden;
    std::vector<float> got_logits;
    for (int64_t position = prefill; position < steps; ++position) {
      std::vector<Tensor> next;
      std::vector<int64_t> positions;
      for (size_t s = 0; s < prompts.size(); ++s) {
        const int64_t at = prompts[s] + position - prefill;
        ASSERT_TRUE(pool.grow(held[s], at + 1));
        positions.push_back(at);
        next.push_back(embeds.narrow(1, static_cast<int64_t>(s) + at, 1));
      }
      std::vector<float> rows;
      for (const Tensor& row : next) {
        const std::vector<float> values = row.to_host_contiguous(DType::F32).to_float_vector();
        rows.insert(rows.end(), values.begin(), values.end());
      }
      const Tensor embedded =
          ops::to_device(ctx_, Tensor::from_vector({3, 1, hidden}, rows), gpt.stream_dtype());
      const int64_t graph_batch = position % 2 == 0 ? 0 : 8;
      const DecodeGraphs::Output out =
          graphs.run(ctx_, embedded, {&held[0], &held[1], &held[2]}, positions, code, graph_batch);
      const std::vector<float> h = host(out.hidden).to_float_vector();
      const std::vector<float> l = host(out.logits).to_float_vector();
      got_hidden.insert(got_hidden.end(), h.begin(), h.begin() + hidden);
      got_logits.insert(got_logits.end(), l.begin(),
                        l.begin() + static_cast<std::ptrdiff_t>(l.size() / 3));
    }
    const int64_t decoded = steps - prefill;
    expect_matches(
        Tensor::from_vector({1, decoded, hidden}, got_hidden),
        io->get("hidden_cached").narrow(1, prefill, decoded).to_host_contiguous(DType::F32),
        GetParam(), "hidden through graphs");
    const Tensor want = io->get(code ? "code_logits_cached" : "text_logits_cached")
                            .narrow(1, prefill, decoded)
                            .to_host_contiguous(DType::F32);
    expect_matches(Tensor::from_vector(want.shape(), got_logits), want, GetParam(),
                   "logits through graphs");
    EXPECT_GT(graphs.bytes(), 0u);
    EXPECT_EQ(graphs.bytes_to_record(3, code), 0u);
    EXPECT_EQ(graphs.bytes_to_record(8, code), 0u);
  }
}

TEST_P(ChatTtsOnCuda, DecoderAndDvaeMel) {
  const DvaeConfig decoder_config = DvaeConfig::from_json(read_config("decoder"), "decoder", true);
  const Dvae decoder =
      Dvae::load(ctx_, decoder_config, *open("decoder", "decoder.safetensors"), GetParam());
  const auto decoder_io = open("decoder", "io.safetensors");
  const double decoder_err = expect_matches(
      host(decoder.decode_hidden(ctx_, ops::to_device(ctx_, decoder_io->get("hidden")))),
      decoder_io->get("mel"), GetParam(), "decoder mel");

  const DvaeConfig dvae_config = DvaeConfig::from_json(read_config("dvae"), "dvae", false);
  const Dvae dvae = Dvae::load(ctx_, dvae_config, *open("dvae", "dvae.safetensors"), GetParam());
  const auto dvae_io = open("dvae", "io.safetensors");
  const double dvae_err = expect_matches(
      host(dvae.decode_codes(ctx_, dvae_io->get("codes").to_host_contiguous(DType::I64))),
      dvae_io->get("mel"), GetParam(), "dvae mel");
  std::cout << "decoder " << dtype() << ": mel " << decoder_err << "; dvae mel " << dvae_err
            << "\n";
}

TEST_P(ChatTtsOnCuda, VocosAudio) {
  const VocosConfig config = VocosConfig::from_json(read_config("vocos"), "vocos");
  const Vocos vocos = Vocos::load(ctx_, config, *open("vocos", "vocos.safetensors"), GetParam());
  const auto io = open("vocos", "io.safetensors");
  const double err = expect_matches(host(vocos.forward(ctx_, ops::to_device(ctx_, io->get("mel")))),
                                    io->get("audio"), GetParam(), "vocos audio");
  std::cout << "vocos " << dtype() << ": audio " << err << "\n";
}

INSTANTIATE_TEST_SUITE_P(Dtypes, ChatTtsOnCuda,
                         ::testing::Values(DType::F32, DType::F16, DType::BF16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(dtype_name(info.param));
                         });

}  // namespace
}  // namespace voxd::chattts
