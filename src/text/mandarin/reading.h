// What the Mandarin front end makes of a text: sentences of words, each word with the syllables
// a speaker says (after tone sandhi) and the prosodic break that follows it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "text/mandarin/syllable.h"

namespace voxd::text::mandarin {

// The breaks between words, KAN-TTS's #1-#4: none inside a prosodic word, a prosodic-word
// boundary, a short pause (、), a clause boundary (，；：), the end of a sentence.
enum class Break : uint8_t { kNone = 0, kWord = 1, kShort = 2, kClause = 3, kSentence = 4 };

struct ReadWord {
  std::string text;                 // hanzi after normalisation, or a Latin word
  std::vector<Syllable> syllables;  // one per hanzi (erhua 儿 merged), as spoken; empty if Latin
  std::vector<std::string> hanzi;   // per syllable, the characters it reads ("花儿" for huar1)
  std::vector<bool> given;          // per syllable: set by the user ([pinyin] or lexicon file)
  std::string tag;                  // jieba's part of speech; "eng" for a Latin word
  bool from_phrase = false;         // read as a whole from the lexicon's phrases
  Break after = Break::kWord;       // the break that follows the word

  bool latin() const { return syllables.empty(); }
};

struct ReadSentence {
  std::string text;  // the sentence after normalisation
  std::vector<ReadWord> words;
  char ending = '.';  // how it ends: '?' (？ ?), '!' (！ !) or '.' (any other end)
};

struct MandarinReading {
  std::string normalized;  // the sentences' texts, one per line
  std::vector<ReadSentence> sentences;
  std::vector<std::string> warnings;  // characters not read, and why
};

}  // namespace voxd::text::mandarin
