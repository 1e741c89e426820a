// Writes a symbol inventory to stdout: the fixed head (padding, punctuation, word boundary), then
// every token the phonemizer emits for the lines of text on stdin, sorted.
//   voxd_make_symbol_table [ESPEAK_VOICE [PHONEMES]]
// PHONEMES espeak-ipa (default) or espeak-mnemonic. data/symbols/espeak-ipa-en.txt is en-us IPA
// of an English word list (docs/text-frontend.md); data/symbols/espeak-mnemonic-zh.txt is
// cmn-latn-pinyin mnemonics of every syllable with every tone (data/symbols/README.md).
#include <iostream>
#include <set>
#include <string>

#include "text/phonemizer.h"

int main(int argc, char** argv) {
  const std::string language = argc > 1 ? argv[1] : "en-us";
  const bool mnemonic = argc > 2 && std::string(argv[2]) == "espeak-mnemonic";
  const std::string head[] = {"_", "!", "\"", "(", ")", ",", "-", ".", ":", ";", "?", " "};
  std::set<std::string> tokens;
  voxd::text::Phonemizer phonemizer;
  std::string line;
  while (std::getline(std::cin, line)) {
    for (std::string& token : mnemonic ? phonemizer.phonemize_mnemonic(line, language)
                                       : phonemizer.phonemize_ipa(line, language)) {
      tokens.insert(token);
    }
  }
  for (const std::string& symbol : head) {
    std::cout << symbol << '\n';
    tokens.erase(symbol);
  }
  for (const std::string& token : tokens) std::cout << token << '\n';
  return 0;
}
