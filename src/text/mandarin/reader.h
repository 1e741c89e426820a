// MandarinReader: Chinese text -> sentences of words with the pinyin a speaker says. Markup
// (Markdown, HTML, SSML) is removed, text cleaned up (NFKC), converted from traditional to
// simplified characters (OpenCC), its numbers, dates, money and units written out, split into
// sentences at 。！？ and into words by the lexicon; each word is read as a whole where the lexicon
// has it (银行 yin2 hang2, 行走 xing2 zou3), else over the lexicon's shorter words, else character
// by character; then prosodic words and tone sandhi (sandhi.h). Users steer it with pinyin in
// brackets after the characters it reads (行[hang2], 银行行长[yin2 hang2 hang2 zhang3]) and with a
// lexicon file.
#pragma once

#include <memory>
#include <string_view>

#include "text/mandarin/lexicon.h"
#include "text/mandarin/reading.h"

namespace opencc {
class SimpleConverter;
}

namespace voxd::text::mandarin {

class MandarinReader {
 public:
  // A sentence longer than this is split at its largest break before it (a clause, else a word).
  static constexpr size_t kMaxSentenceSyllables = 100;

  // Throws voxd::Error when OpenCC's t2s conversion cannot be loaded (Debian's libopencc-data, or
  // t2s.json and its dictionaries in $VOXD_OPENCC_DIR).
  explicit MandarinReader(std::shared_ptr<const MandarinLexicon> lexicon);
  ~MandarinReader();

  // The reading of `text`. Throws voxd::InputError for text that is not UTF-8 and for a bad
  // override (a syllable that is not Mandarin, more syllables than characters before it),
  // naming it. Characters it cannot read (kana, hangul, emoji, hanzi without a reading) are
  // left out, each with a warning naming it. Safe to call from several threads.
  MandarinReading read(std::string_view text) const;

  const MandarinLexicon& lexicon() const { return *lexicon_; }

 private:
  std::shared_ptr<const MandarinLexicon> lexicon_;
  std::unique_ptr<opencc::SimpleConverter> to_simplified_;
};

}  // namespace voxd::text::mandarin
