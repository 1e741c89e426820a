// Helpers shared by the vocoder tests on the CPU (tests/pipeline) and on the GPU (tests/cuda): a
// HiFiGAN fixture's config and random mels drawn like the fixtures'.
#pragma once

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "families/fastspeech2/hifigan.h"

namespace voxd::testing {

// The HiFiGAN config at `path` (a config.json); throws voxd::Error when it cannot be read.
inline HifiGanConfig read_hifigan_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error("cannot read " + path);
  return HifiGanConfig::from_json(nlohmann::json::parse(in), path);
}

// A host mel of `shape` drawn like the fixtures' mels (mean −1.5, std 1.2), from `seed`.
inline Tensor random_mel(const Shape& shape, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(-1.5f, 1.2f);
  int64_t n = 1;
  for (const int64_t size : shape) n *= size;
  std::vector<float> values(static_cast<size_t>(n));
  for (float& v : values) v = dist(rng);
  return Tensor::from_vector(shape, values);
}

}  // namespace voxd::testing
