// Word segmentation of Chinese text: the split of a run of hanzi into the lexicon's words with
// the greatest product of word probabilities (jieba's maximum-probability route over its word
// graph; jieba's HMM for words it does not know is left out, so those stay single characters).
#pragma once

#include <string_view>
#include <vector>

#include "text/mandarin/lexicon.h"

namespace voxd::text::mandarin {

// The words of `hanzi` (views into it), in order; their bytes add up to `hanzi`. A character
// the lexicon does not know is a word of its own.
std::vector<std::string_view> segment(std::string_view hanzi, const MandarinLexicon& lexicon);

}  // namespace voxd::text::mandarin
