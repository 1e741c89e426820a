// MandarinLexicon: the words and readings the Mandarin front end reads with. data/zh (built by
// tools/mandarin_lexicon.py from Debian's jieba, go-pinyin and Rime data) gives jieba's words
// with counts and tags for segmentation, each character's readings, and the readings of words
// that differ from their characters' first readings; a deployment's own lexicon file goes on
// top (its words are segmented as words and read as it says).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "text/mandarin/syllable.h"

namespace voxd::text::mandarin {

class MandarinLexicon {
 public:
  struct Word {
    uint32_t count = 0;  // jieba's count; 0 for words known only for their reading
    std::string tag;     // jieba's part of speech ("n", "v", "uj", ...); empty if unknown
  };

  // Reads words.tsv.xz, chars.tsv and phrases.tsv from `directory`. Throws voxd::Error naming the
  // file and line when one is missing or malformed.
  static MandarinLexicon load(const std::filesystem::path& directory);

  // The lexicon of `directory` (and of `user_lexicon` when not empty), loaded once per process
  // and shared: the folder's tables take ~0.5 s and ~60 MB to load.
  static std::shared_ptr<const MandarinLexicon> shared(const std::filesystem::path& directory,
                                                       const std::filesystem::path& user_lexicon);

  // Adds a deployment's entries: one word per line, its hanzi and then one syllable per
  // character separated by spaces or tabs ("银行 yin2 hang2"); blank lines and lines starting
  // with # are skipped; a byte-order mark is ignored. Throws voxd::InputError naming the file, the
  // line and what is wrong (not hanzi, a syllable that is not Mandarin, a count that does not match
  // the characters).
  void add_user_entries(const std::filesystem::path& file);

  // The word, or nullptr when jieba's list and the user's have no such word.
  const Word* word(std::string_view text) const;
  // log of the sum of all counts, the denominator of a word's probability.
  double log_total() const { return log_total_; }
  // The most characters a word beginning with `character` (its UTF-8 bytes) has; 1 if none.
  size_t longest_word(std::string_view character) const;

  // The reading of a word of two or more characters, the user's first, when it differs from its
  // characters' first readings; nullptr otherwise.
  const std::vector<Syllable>* reading(std::string_view word) const;
  // The readings of a character (its UTF-8 bytes), the most common first; nullptr for one the
  // lexicon has none for.
  const std::vector<Syllable>* char_readings(std::string_view character) const;

  // Whether `word` (one character or more) has an entry from add_user_entries.
  bool user_word(std::string_view word) const { return user_words_.contains(word); }

  // Whether `letters` is a Mandarin syllable some character reads as ("hang", "lv", "ng"), one
  // with an erhua r ("huar"), or "r", 儿 merged into the syllable before it (花儿 hua1 r5).
  bool is_syllable(std::string_view letters) const;

 private:
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  template <typename Value>
  using Table = std::unordered_map<std::string, Value, StringHash, std::equal_to<>>;

  void add_word(std::string text, Word word);

  Table<Word> words_;
  Table<std::vector<Syllable>> phrases_;
  Table<std::vector<Syllable>> chars_;
  Table<bool> syllables_;
  Table<bool> user_words_;
  Table<size_t> longest_by_first_;
  double log_total_ = 0.0;
  uint64_t total_ = 0;
};

// The deployment's lexicon file (`voxd serve --lexicon`), which every Mandarin front end made
// after the call reads on top of the data; empty: none.
void set_deployment_lexicon(std::filesystem::path file);
std::filesystem::path deployment_lexicon();

// Where the Mandarin lexicon is: $VOXD_DATA_DIR/zh when VOXD_DATA_DIR is set, else data/zh of
// the source tree voxd was built from.
std::filesystem::path default_lexicon_directory();

// "<file>: line <n>: ..." parse of one syllable list: the syllables of `written` (separated by
// spaces or tabs), each checked with `lexicon.is_syllable`. Throws voxd::InputError with
// `where` and the first bad syllable.
std::vector<Syllable> parse_syllables(std::string_view written, const MandarinLexicon& lexicon,
                                      const std::string& where);

}  // namespace voxd::text::mandarin
