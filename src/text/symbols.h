// The voice's symbol table (symbols.txt: line n is the symbol with id n) and the phoneme sets a
// voice can declare in config.json's "phonemes" field.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace voxd::text {

// Which phonemes a voice's symbols are: eSpeak NG IPA tokens, ARPAbet with stress digits, or
// eSpeak NG's ASCII phoneme mnemonics (its Mandarin voices: IPA writes tones 55 and 51 alike).
enum class PhonemeSet { EspeakIpa, Arpabet, EspeakMnemonic };

// Parses config.json's "phonemes" value ("espeak-ipa", "arpabet" or "espeak-mnemonic");
// InputError otherwise.
PhonemeSet parse_phoneme_set(std::string_view name);

// The name parse_phoneme_set accepts for `set`.
std::string_view to_string(PhonemeSet set);

// Maps symbols to ids and back. Symbols are compared byte for byte.
class SymbolTable {
 public:
  // Builds a table from symbols in id order; InputError on an empty or duplicate symbol.
  explicit SymbolTable(std::vector<std::string> symbols);

  // Reads symbols.txt: one symbol per line, line n (from 0) is id n, taken verbatim (a line
  // holding one space is the symbol " "); a final newline is optional and a trailing "\r" is
  // stripped. Empty lines and duplicates are errors. InputError names the file and line.
  static SymbolTable load(const std::string& path);

  // The id of `symbol`, or nullopt if the table has no such symbol.
  std::optional<int64_t> id(std::string_view symbol) const;

  // The symbol with id `id`; InputError if `id` is out of range.
  const std::string& symbol(int64_t id) const;

  // Number of symbols (ids are 0 .. size()-1).
  size_t size() const { return symbols_.size(); }

 private:
  std::vector<std::string> symbols_;
  std::unordered_map<std::string, int64_t> ids_;
};

}  // namespace voxd::text
