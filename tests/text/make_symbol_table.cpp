// Writes the espeak-ipa symbol inventory (data/symbols/espeak-ipa-en.txt) to stdout: the fixed
// head (padding, punctuation, word boundary), then every token phonemize_ipa emits for the
// lines of text on stdin, sorted. See docs/text-frontend.md for the word list used.
#include <iostream>
#include <set>
#include <string>

#include "text/phonemizer.h"

int main(int argc, char** argv) {
  const std::string language = argc > 1 ? argv[1] : "en-us";
  const std::string head[] = {"_", "!", "\"", "(", ")", ",", "-", ".", ":", ";", "?", " "};
  std::set<std::string> tokens;
  voxd::text::Phonemizer phonemizer;
  std::string line;
  while (std::getline(std::cin, line)) {
    for (std::string& token : phonemizer.phonemize_ipa(line, language)) tokens.insert(token);
  }
  for (const std::string& symbol : head) {
    std::cout << symbol << '\n';
    tokens.erase(symbol);
  }
  for (const std::string& token : tokens) std::cout << token << '\n';
  return 0;
}
