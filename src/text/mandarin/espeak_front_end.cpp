#include "text/mandarin/espeak_front_end.h"

#include <algorithm>

#include "core/error.h"
#include "text/ascii.h"
#include "text/mandarin/characters.h"
#include "text/phonemizer.h"

namespace voxd::text::mandarin {
namespace {

// The pinyin of `sentence` as eSpeak's cmn-latn-pinyin voice reads it.
std::string pinyin_text(const ReadSentence& sentence) {
  std::string out;
  for (const ReadWord& word : sentence.words) {
    if (word.latin()) {
      for (const char c : word.text) {
        if (!is_latin_letter(static_cast<unsigned char>(c))) continue;
        if (!out.empty() && out.back() != ' ') out.push_back(' ');
        out.push_back(static_cast<char>(c | 0x20));  // lower case: a letter, not pinyin
      }
    } else {
      for (const Syllable& syllable : word.syllables) {
        if (!out.empty() && out.back() != ' ') out.push_back(' ');
        out.append(syllable.text());
      }
    }
    if (word.after == Break::kShort || word.after == Break::kClause) out.push_back(',');
  }
  if (!out.empty() && out.back() == ',') out.pop_back();
  if (!out.empty()) out.push_back(sentence.ending);
  return out;
}

}  // namespace

PinyinEspeakFrontEnd::PinyinEspeakFrontEnd(SymbolTable symbols, std::string voice)
    : voice_(std::move(voice)),
      pinyin_(PhonemeSet::EspeakMnemonic, std::move(symbols), std::string(kEspeakVoice)) {}

const MandarinReader& PinyinEspeakFrontEnd::reader() const {
  std::call_once(reader_once_, [this] {
    reader_ = std::make_unique<const MandarinReader>(
        MandarinLexicon::shared(default_lexicon_directory(), deployment_lexicon()));
  });
  return *reader_;
}

Analysis PinyinEspeakFrontEnd::analyze(std::string_view text) const {
  if (ascii::is_blank(text)) throw InputError("text is empty");
  if (!has_chinese(text)) {
    throw InputError("voice '" + voice_ + "' speaks Mandarin (language " +
                     std::string(kMandarinLanguage) +
                     ") and the text has no Chinese characters; give Chinese text, or use a "
                     "voice of the text's language");
  }
  const MandarinReading reading = reader().read(text);
  Analysis analysis;
  analysis.normalized = reading.normalized;
  size_t dropped = 0;
  for (const ReadSentence& read : reading.sentences) {
    Sentence sentence = pinyin_.phonemize(pinyin_text(read));
    dropped += sentence.dropped;
    const bool pronounceable =
        std::any_of(sentence.phonemes.begin(), sentence.phonemes.end(), is_phoneme);
    if (!sentence.ids.empty() && pronounceable) analysis.sentences.push_back(std::move(sentence));
  }
  if (analysis.sentences.empty()) {
    std::string why = "voice '" + voice_ + "': the text has nothing to pronounce";
    if (dropped > 0) {
      why += " (" + std::to_string(dropped) + " phonemes have no symbol in the voice)";
    } else if (!reading.warnings.empty()) {
      why += " (" + reading.warnings.front() + ")";
    }
    throw InputError(why);
  }
  return analysis;
}

std::unique_ptr<FrontEnd> make_phoneme_front_end(PhonemeSet set, SymbolTable symbols,
                                                 const std::string& language,
                                                 const std::string& voice) {
  if (language != kMandarinLanguage) {
    return std::make_unique<EspeakFrontEnd>(set, std::move(symbols), language);
  }
  if (set != PhonemeSet::EspeakMnemonic) {
    throw InputError("voice '" + voice + "': language " + language + " takes phonemes \"" +
                     std::string(to_string(PhonemeSet::EspeakMnemonic)) + "\", not \"" +
                     std::string(to_string(set)) + "\"");
  }
  return std::make_unique<PinyinEspeakFrontEnd>(std::move(symbols), voice);
}

std::string teacher_voice(const std::string& language) {
  return language == kMandarinLanguage ? std::string(PinyinEspeakFrontEnd::kEspeakVoice) : language;
}

}  // namespace voxd::text::mandarin
