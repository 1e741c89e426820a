// The front end of voxd's own Mandarin voices, and the choice of a phoneme front end by a voice's
// language. Chinese text → MandarinReader's pinyin (tone sandhi applied) → eSpeak NG's
// cmn-latn-pinyin voice, which reads toned pinyin syllables, as phoneme mnemonics with the tone
// on the vowel ("n", "i214") → the voice's symbol ids. Their teacher is eSpeak speaking that same
// pinyin, so the phonemes match its audio one for one.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "text/espeak_front_end.h"
#include "text/front_end.h"
#include "text/mandarin/reader.h"
#include "text/symbols.h"

namespace voxd::text::mandarin {

// The language code of Mandarin voices (config.json's "language").
inline constexpr std::string_view kMandarinLanguage = "zh-cn";

class PinyinEspeakFrontEnd final : public FrontEnd {
 public:
  // eSpeak NG's voice for pinyin: syllables with tone digits ("ni3 hao3"), letters by name.
  static constexpr std::string_view kEspeakVoice = "cmn-latn-pinyin";

  // `voice` names the voice in messages. The reader (voxd's lexicon with the deployment's,
  // ~0.5 s) loads on first use or load().
  PinyinEspeakFrontEnd(SymbolTable symbols, std::string voice);

  // A sentence per sentence of the reading: Sentence::text is the pinyin eSpeak reads (words
  // apart, Latin words spelled letter by letter, "," at the reader's short and clause breaks, the
  // sentence's own end mark), phonemes its mnemonics. InputError for empty text, text with no
  // Chinese ("the voice speaks Mandarin", naming the language), the reader's errors, and text
  // with nothing to pronounce (with the reader's first warning).
  Analysis analyze(std::string_view text) const override;
  std::string unit_name() const override { return "espeak-mnemonic"; }
  // Loads the reader now. Error when the lexicon or OpenCC cannot be loaded.
  void load() const override { (void)reader(); }

 private:
  const MandarinReader& reader() const;

  std::string voice_;
  EspeakFrontEnd pinyin_;  // the pinyin's mnemonics and ids
  mutable std::once_flag reader_once_;
  mutable std::unique_ptr<const MandarinReader> reader_;
};

// The front end for a voice of `language` with `set` phonemes: PinyinEspeakFrontEnd for
// kMandarinLanguage (which must have set EspeakMnemonic), EspeakFrontEnd otherwise. `voice`
// names the voice in messages. InputError for a Mandarin voice of other phonemes.
std::unique_ptr<FrontEnd> make_phoneme_front_end(PhonemeSet set, SymbolTable symbols,
                                                 const std::string& language,
                                                 const std::string& voice);

// The eSpeak NG voice that speaks what make_phoneme_front_end(…, language, …) makes: the
// teacher of voxd's voices of `language`.
std::string teacher_voice(const std::string& language);

}  // namespace voxd::text::mandarin
