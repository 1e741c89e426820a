#include "text/mandarin/lexicon.h"

#include <lzma.h>

#include <array>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <utility>

#include "core/error.h"
#include "text/mandarin/characters.h"

namespace voxd::text::mandarin {
namespace {

// Counts a user's word gets for segmentation: enough that the segmenter keeps it whole.
constexpr uint32_t kUserWordCount = 100000;

std::vector<std::string_view> split(std::string_view line, std::string_view separators) {
  std::vector<std::string_view> fields;
  size_t at = 0;
  while (at < line.size()) {
    const size_t start = line.find_first_not_of(separators, at);
    if (start == std::string_view::npos) break;
    const size_t end = std::min(line.find_first_of(separators, start), line.size());
    fields.push_back(line.substr(start, end - start));
    at = end;
  }
  return fields;
}

std::vector<std::string_view> tab_fields(std::string_view line) {
  std::vector<std::string_view> fields;
  size_t at = 0;
  while (true) {
    const size_t tab = line.find('\t', at);
    fields.push_back(line.substr(at, tab == std::string_view::npos ? tab : tab - at));
    if (tab == std::string_view::npos) return fields;
    at = tab + 1;
  }
}

// The contents of the .xz file `path` (its bytes `packed`). Throws voxd::Error naming the file
// when they are not one whole .xz stream.
std::string decompress_xz(const std::string& packed, const std::filesystem::path& path) {
  lzma_stream stream = LZMA_STREAM_INIT;
  if (lzma_stream_decoder(&stream, UINT64_MAX, 0) != LZMA_OK) {
    throw Error("liblzma could not start a decoder for " + path.string());
  }
  const std::unique_ptr<lzma_stream, void (*)(lzma_stream*)> ending(&stream, lzma_end);
  stream.next_in = reinterpret_cast<const uint8_t*>(packed.data());
  stream.avail_in = packed.size();
  std::string text;
  std::array<uint8_t, 1 << 16> buffer{};
  lzma_ret result = LZMA_OK;
  while (result == LZMA_OK) {
    stream.next_out = buffer.data();
    stream.avail_out = buffer.size();
    result = lzma_code(&stream, LZMA_FINISH);
    text.append(reinterpret_cast<const char*>(buffer.data()), buffer.size() - stream.avail_out);
  }
  if (result != LZMA_STREAM_END) {
    throw Error(path.string() + ": not a whole .xz file (liblzma error " +
                std::to_string(static_cast<int>(result)) +
                "); tools/mandarin_lexicon.py writes it again");
  }
  return text;
}

// Calls `row(fields, where)` for each line of a data file that is not blank.
template <typename Row>
void read_table(const std::filesystem::path& path, size_t columns, Row&& row) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    throw Error(path.string() +
                ": cannot be read (the Mandarin lexicon, built by "
                "tools/mandarin_lexicon.py into data/zh)");
  }
  std::unique_ptr<std::istream> unpacked;
  if (path.extension() == ".xz") {
    unpacked = std::make_unique<std::istringstream>(
        decompress_xz(std::string(std::istreambuf_iterator<char>(file), {}), path));
  }
  std::istream& in = unpacked ? *unpacked : file;
  std::string line;
  for (size_t number = 1; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    const std::vector<std::string_view> fields = tab_fields(line);
    const std::string where = path.string() + ": line " + std::to_string(number);
    if (fields.size() != columns) {
      throw Error(where + ": expected " + std::to_string(columns) + " tab-separated fields");
    }
    row(fields, where);
  }
}

// Characters of UTF-8 `text`: its bytes that do not continue a sequence.
size_t character_count(std::string_view text) {
  size_t count = 0;
  for (const char c : text) count += (static_cast<unsigned char>(c) & 0xC0) != 0x80 ? 1 : 0;
  return count;
}

// The bytes of the first character of UTF-8 `text`.
std::string_view first_character(std::string_view text) {
  size_t end = text.empty() ? 0 : 1;
  while (end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) ++end;
  return text.substr(0, end);
}

bool all_hanzi(std::string_view text) {
  const std::vector<Character> chars = characters(text);
  if (chars.empty()) return false;
  for (const Character& c : chars) {
    if (!is_hanzi(c.code)) return false;
  }
  return true;
}

}  // namespace

namespace {

std::mutex deployment_mutex;
std::filesystem::path deployment_file;

}  // namespace

void set_deployment_lexicon(std::filesystem::path file) {
  const std::lock_guard lock(deployment_mutex);
  deployment_file = std::move(file);
}

std::filesystem::path deployment_lexicon() {
  const std::lock_guard lock(deployment_mutex);
  return deployment_file;
}

std::filesystem::path default_lexicon_directory() {
  const char* data = std::getenv("VOXD_DATA_DIR");
  return std::filesystem::path(data && *data ? data : VOXD_DEFAULT_DATA_DIR) / "zh";
}

std::vector<Syllable> parse_syllables(std::string_view written, const MandarinLexicon& lexicon,
                                      const std::string& where) {
  std::vector<Syllable> out;
  for (const std::string_view part : split(written, " \t")) {
    const std::optional<Syllable> syllable = parse_syllable(part);
    if (!syllable || !lexicon.is_syllable(syllable->letters)) {
      throw InputError(where + ": '" + std::string(part) +
                       "' is not a Mandarin syllable (pinyin letters and a tone 1-5, "
                       "e.g. hang2, lv4, le5)");
    }
    out.push_back(*syllable);
  }
  return out;
}

MandarinLexicon MandarinLexicon::load(const std::filesystem::path& directory) {
  MandarinLexicon lexicon;
  // data/zh's sizes (words.tsv.xz 348,974 lines, chars.tsv 41,497, phrases.tsv 22,034): no rehash.
  lexicon.words_.reserve(360000);
  lexicon.chars_.reserve(45000);
  lexicon.phrases_.reserve(25000);
  read_table(directory / "chars.tsv", 2, [&](const auto& fields, const std::string& where) {
    std::vector<Syllable> readings;
    for (const std::string_view part : split(fields[1], " ")) {
      const std::optional<Syllable> syllable = parse_syllable(part);
      if (!syllable) throw Error(where + ": '" + std::string(part) + "' is not a syllable");
      lexicon.syllables_.emplace(syllable->letters, true);
      readings.push_back(*syllable);
    }
    if (readings.empty() || character_count(fields[0]) != 1) {
      throw Error(where + ": expected a character and its readings");
    }
    lexicon.chars_.emplace(std::string(fields[0]), std::move(readings));
  });
  read_table(directory / "words.tsv.xz", 3, [&](const auto& fields, const std::string& where) {
    uint32_t count = 0;
    const auto [end, error] =
        std::from_chars(fields[1].data(), fields[1].data() + fields[1].size(), count);
    if (error != std::errc() || end != fields[1].data() + fields[1].size()) {
      throw Error(where + ": the count '" + std::string(fields[1]) + "' is not a number");
    }
    lexicon.add_word(std::string(fields[0]), Word{.count = count, .tag = std::string(fields[2])});
  });
  read_table(directory / "phrases.tsv", 2, [&](const auto& fields, const std::string& where) {
    std::vector<Syllable> reading = parse_syllables(fields[1], lexicon, where);
    if (reading.size() != character_count(fields[0])) {
      throw Error(where + ": a syllable per character expected");
    }
    lexicon.phrases_.emplace(std::string(fields[0]), std::move(reading));
  });
  lexicon.log_total_ = std::log(static_cast<double>(std::max<uint64_t>(lexicon.total_, 1)));
  return lexicon;
}

std::shared_ptr<const MandarinLexicon> MandarinLexicon::shared(
    const std::filesystem::path& directory, const std::filesystem::path& user_lexicon) {
  static std::mutex mutex;
  static std::map<std::pair<std::string, std::string>, std::weak_ptr<const MandarinLexicon>> loaded;
  const std::lock_guard lock(mutex);
  auto& slot = loaded[{directory.string(), user_lexicon.string()}];
  if (std::shared_ptr<const MandarinLexicon> kept = slot.lock()) return kept;
  auto lexicon = std::make_shared<MandarinLexicon>(load(directory));
  if (!user_lexicon.empty()) lexicon->add_user_entries(user_lexicon);
  slot = lexicon;
  return lexicon;
}

void MandarinLexicon::add_word(std::string text, Word word) {
  total_ += word.count;
  if (!text.empty()) {
    size_t& longest = longest_by_first_[std::string(first_character(text))];
    longest = std::max(longest, character_count(text));
  }
  words_.insert_or_assign(std::move(text), std::move(word));
}

void MandarinLexicon::add_user_entries(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) throw InputError(file.string() + ": the lexicon file cannot be read");
  std::string line;
  for (size_t number = 1; std::getline(in, line); ++number) {
    if (number == 1 && line.starts_with("\xEF\xBB\xBF")) line.erase(0, 3);  // UTF-8 BOM
    const std::vector<std::string_view> fields = split(line, " \t\r");
    if (fields.empty() || fields[0].front() == '#') continue;
    const std::string where = file.string() + ": line " + std::to_string(number);
    if (!all_hanzi(fields[0])) {
      throw InputError(where + ": '" + std::string(fields[0]) +
                       "' is not a word of Chinese characters (a line is the word, then its "
                       "pinyin: 银行 yin2 hang2)");
    }
    std::vector<Syllable> reading;
    for (size_t i = 1; i < fields.size(); ++i) {
      std::vector<Syllable> one = parse_syllables(fields[i], *this, where);
      reading.insert(reading.end(), one.begin(), one.end());
    }
    const size_t chars = character_count(fields[0]);
    if (reading.size() != chars) {
      throw InputError(where + ": '" + std::string(fields[0]) + "' has " + std::to_string(chars) +
                       " characters and " + std::to_string(reading.size()) +
                       " syllables; give one per character");
    }
    const Word* known = word(fields[0]);
    add_word(std::string(fields[0]),
             Word{.count = std::max(kUserWordCount, known ? known->count : 0u),
                  .tag = known ? known->tag : std::string()});
    user_words_.emplace(std::string(fields[0]), true);
    // A character no table reads takes its reading here (a rare 𠮷 in 𠮷野家).
    size_t at = 0;
    for (const Character& c : characters(fields[0])) {
      std::vector<Syllable>& readings = chars_[std::string(c.bytes)];
      if (readings.empty() || chars == 1) {
        std::erase(readings, reading[at]);
        readings.insert(readings.begin(), reading[at]);
      }
      ++at;
    }
    if (chars > 1) phrases_.insert_or_assign(std::string(fields[0]), std::move(reading));
  }
  log_total_ = std::log(static_cast<double>(std::max<uint64_t>(total_, 1)));
}

const MandarinLexicon::Word* MandarinLexicon::word(std::string_view text) const {
  const auto at = words_.find(text);
  return at == words_.end() ? nullptr : &at->second;
}

size_t MandarinLexicon::longest_word(std::string_view character) const {
  const auto at = longest_by_first_.find(character);
  return at == longest_by_first_.end() ? 1 : at->second;
}

const std::vector<Syllable>* MandarinLexicon::reading(std::string_view word) const {
  const auto at = phrases_.find(word);
  return at == phrases_.end() ? nullptr : &at->second;
}

const std::vector<Syllable>* MandarinLexicon::char_readings(std::string_view character) const {
  const auto at = chars_.find(character);
  return at == chars_.end() ? nullptr : &at->second;
}

bool MandarinLexicon::is_syllable(std::string_view letters) const {
  if (letters == "r" || syllables_.contains(letters)) return true;
  const std::string_view base = without_erhua(letters);
  return base.size() < letters.size() && syllables_.contains(base);
}

}  // namespace voxd::text::mandarin
