#include "text/symbols.h"

#include <fstream>

#include "core/error.h"

namespace voxd::text {

PhonemeSet parse_phoneme_set(std::string_view name) {
  if (name == "espeak-ipa") return PhonemeSet::EspeakIpa;
  if (name == "arpabet") return PhonemeSet::Arpabet;
  if (name == "espeak-mnemonic") return PhonemeSet::EspeakMnemonic;
  throw InputError("unknown phoneme set '" + std::string(name) +
                   "' (expected \"espeak-ipa\", \"arpabet\" or \"espeak-mnemonic\")");
}

std::string_view to_string(PhonemeSet set) {
  switch (set) {
    case PhonemeSet::EspeakIpa:
      return "espeak-ipa";
    case PhonemeSet::Arpabet:
      return "arpabet";
    case PhonemeSet::EspeakMnemonic:
      return "espeak-mnemonic";
  }
  return "espeak-ipa";
}

SymbolTable::SymbolTable(std::vector<std::string> symbols) : symbols_(std::move(symbols)) {
  ids_.reserve(symbols_.size());
  for (size_t i = 0; i < symbols_.size(); ++i) {
    if (symbols_[i].empty()) throw InputError("symbol " + std::to_string(i) + " is empty");
    auto [it, inserted] = ids_.emplace(symbols_[i], static_cast<int64_t>(i));
    if (!inserted) {
      throw InputError("symbol " + std::to_string(i) + " '" + symbols_[i] + "' duplicates symbol " +
                       std::to_string(it->second));
    }
  }
}

SymbolTable SymbolTable::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError("cannot open symbol table '" + path + "'");
  std::vector<std::string> symbols;
  std::unordered_map<std::string, size_t> first_line;
  std::string line;
  size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const std::string where = path + ":" + std::to_string(line_no);
    if (line.empty()) {
      throw InputError(where +
                       ": empty line (each line must hold one symbol; write a space "
                       "symbol as a line with one space)");
    }
    auto [it, inserted] = first_line.emplace(line, line_no);
    if (!inserted) {
      throw InputError(where + ": symbol '" + line + "' already defined on line " +
                       std::to_string(it->second));
    }
    symbols.push_back(std::move(line));
  }
  if (in.bad()) throw InputError("cannot read symbol table '" + path + "'");
  if (symbols.empty()) throw InputError(path + ": symbol table is empty");
  return SymbolTable(std::move(symbols));
}

std::optional<int64_t> SymbolTable::id(std::string_view symbol) const {
  auto it = ids_.find(std::string(symbol));
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

const std::string& SymbolTable::symbol(int64_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= symbols_.size()) {
    throw InputError("symbol id " + std::to_string(id) + " is out of range [0, " +
                     std::to_string(symbols_.size()) + ")");
  }
  return symbols_[static_cast<size_t>(id)];
}

}  // namespace voxd::text
