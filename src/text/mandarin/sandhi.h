// Prosodic words and tone changes of a Mandarin sentence: the syllables come in with the
// lexicon's tones and leave with the ones a speaker says (docs/mandarin.md, "Tones").
#pragma once

#include <vector>

#include "text/mandarin/lexicon.h"
#include "text/mandarin/reading.h"

namespace voxd::text::mandarin {

// Groups the words of a sentence into prosodic words: `after` becomes Break::kNone inside one
// and at least Break::kWord between them (a larger break, from punctuation, is kept). A particle
// (的, 了, 吗, 地, 得 as particles) joins the word before it; a word of one syllable joins its
// neighbour while the group has at most three syllables; the words of a number ("五百五十") are
// one prosodic word. Latin words stand alone.
void group_prosodic_words(std::vector<ReadWord>& words);

// The tones a speaker says, in place: readings the neighbours decide (为 wei2 as a copula, 长
// chang2 or zhang3, 只 zhi1 after a numeral); particles and reduplicated nouns and verbs in the
// neutral tone (妈妈 ma1 ma5, 看看); 不 bu2 before a fourth tone, bu5 in "A不A"; 一 yi2 before a
// fourth tone, yi4 before the others, yi1 at a word's end, as a number or ordinal, yi5 in "V一V";
// and third-tone sandhi inside each prosodic word (你好 ni2 hao3, 展览馆 zhan2 lan2 guan3, 小老虎
// xiao3 lao2 hu3). Syllables the user gave are left as they are. Call after
// group_prosodic_words.
void apply_tone_sandhi(std::vector<ReadWord>& words, const MandarinLexicon& lexicon);

}  // namespace voxd::text::mandarin
