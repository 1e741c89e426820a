#include "families/sambert/symbols.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/config_fields.h"
#include "core/error.h"

namespace voxd {
namespace {

using nlohmann::json;

constexpr std::array<std::string_view, SambertSymbols::kChannels> kLfeatTypes = {
    "sy", "tone", "syllable_flag", "word_segment", "emo_category", "speaker_category"};
constexpr std::array<std::string_view, 3> kReservedTail = {"_", "~", "@[MASK]"};
constexpr size_t kSy = 0;
constexpr size_t kEmotion = 4;
constexpr size_t kSpeaker = 5;
constexpr std::string_view kSyPrefix = "@";
constexpr size_t kShownBytes = 80;  // of a token or value quoted in a message
constexpr size_t kShownPhones = 8;  // sy values named in an unknown-sy message

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

// The tokens of `text`: its pieces between runs of whitespace.
std::vector<std::string_view> split_tokens(std::string_view text) {
  std::vector<std::string_view> tokens;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && is_space(text[i])) ++i;
    const size_t begin = i;
    while (i < text.size() && !is_space(text[i])) ++i;
    if (i > begin) tokens.push_back(text.substr(begin, i - begin));
  }
  return tokens;
}

// Python's s.strip(c): `c` removed from both ends.
std::string_view strip(std::string_view s, char c) {
  while (!s.empty() && s.front() == c) s.remove_prefix(1);
  while (!s.empty() && s.back() == c) s.remove_suffix(1);
  return s;
}

// `s` cut to kShownBytes at a UTF-8 character boundary, "..." marking a cut.
std::string shown(std::string_view s) {
  if (s.size() <= kShownBytes) return std::string(s);
  size_t end = kShownBytes;
  while (end > 0 && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) --end;
  return std::string(s.substr(0, end)) + "...";
}

std::string in_quotes(std::string_view s) {
  std::string out = "'";
  out += shown(s);
  out += "'";
  return out;
}

std::string join(const std::vector<std::string>& values, size_t count) {
  std::string out;
  for (size_t i = 0; i < count && i < values.size(); ++i) {
    if (i > 0) out += ", ";
    out += values[i];
  }
  return out;
}

std::string token_context(size_t token, std::string_view text) {
  return "Sambert symbols: token " + std::to_string(token) + " (" + shown(text) + ")";
}

}  // namespace

SambertSymbols SambertSymbols::from_json(const json& lists, const std::string& where) {
  if (!lists.is_object()) throw InputError(where + ": the symbol lists must be a JSON object");
  const json& types = config::require(lists, "lfeat_type_list", where);
  bool standard = types.is_array() && types.size() == kChannels;
  for (size_t c = 0; standard && c < kChannels; ++c) {
    standard = types[c].is_string() && types[c].get<std::string>() == kLfeatTypes[c];
  }
  if (!standard) {
    throw InputError(where +
                     ": field 'lfeat_type_list' must be [\"sy\", \"tone\", \"syllable_flag\", "
                     "\"word_segment\", \"emo_category\", \"speaker_category\"] (KAN-TTS's "
                     "standard channels; the byte model and other lists are not supported), got " +
                     shown(types.dump()));
  }

  SambertSymbols symbols;
  for (size_t c = 0; c < kChannels; ++c) {
    Channel& channel = symbols.channels_[c];
    channel.name = std::string(kLfeatTypes[c]);
    const std::string field = "field '" + channel.name + "'";
    const json& list = config::require(lists, channel.name, where);
    if (!list.is_array() || list.size() <= kReservedTail.size()) {
      throw InputError(where + ": " + field +
                       " must be a list of strings: one or more values, then \"_\", \"~\", "
                       "\"@[MASK]\"");
    }
    const size_t inputs = list.size() - kReservedTail.size();
    for (size_t i = 0; i < list.size(); ++i) {
      if (!list[i].is_string()) {
        throw InputError(where + ": " + field + " entry " + std::to_string(i) +
                         " is not a string: " + shown(list[i].dump()));
      }
      std::string entry = list[i].get<std::string>();
      if (i >= inputs) {
        if (entry != kReservedTail[i - inputs]) {
          throw InputError(where + ": " + field + " must end in \"_\", \"~\", \"@[MASK]\"; entry " +
                           std::to_string(i) + " is " + in_quotes(entry));
        }
      } else if (c == kSy && (entry.size() <= kSyPrefix.size() || !entry.starts_with(kSyPrefix))) {
        throw InputError(where + ": " + field + " entry " + std::to_string(i) + " (" +
                         in_quotes(entry) + ") must be \"@\" followed by a phone or break");
      }
      // A sy field f is looked up as "@" + f, so only "@..." entries can be found.
      if (c == kSy) {
        if (!entry.starts_with(kSyPrefix)) {
          channel.values.push_back(std::move(entry));
          continue;
        }
        entry.erase(0, kSyPrefix.size());
      }
      channel.ids[entry] = static_cast<int64_t>(i);
      channel.values.push_back(std::move(entry));
    }
    channel.inputs = static_cast<int64_t>(inputs);
  }
  return symbols;
}

int64_t SambertSymbols::lookup(size_t c, std::string_view value, size_t token,
                               std::string_view text) const {
  const Channel& channel = channels_[c];
  if (value.empty())
    throw InputError(token_context(token, text) + ": " + channel.name + " is empty");
  const auto found = channel.ids.find(value);
  const std::string what =
      token_context(token, text) + ": " + channel.name + " " + in_quotes(value);
  if (found == channel.ids.end()) {
    const size_t inputs = static_cast<size_t>(channel.inputs);
    if (c == kSy) {
      throw InputError(what +
                       " is not in the voice's inventory (its PhoneSet.xml names and #1-#4, "
                       "case-sensitive, written without '@'; " +
                       std::to_string(inputs) + " in all, e.g. " +
                       join(channel.values, std::min(inputs, kShownPhones)) + ")");
    }
    throw InputError(what +
                     " is not in the voice's inventory; valid: " + join(channel.values, inputs));
  }
  if (found->second >= channel.inputs) {
    throw InputError(what + " is a reserved entry (pad, end or mask), not an input value");
  }
  return found->second;
}

int64_t SambertSymbols::named_id(size_t c, std::string_view name, const char* what) const {
  const Channel& channel = channels_[c];
  const auto found = channel.ids.find(name);
  if (found == channel.ids.end() || found->second >= channel.inputs) {
    throw InputError(std::string("Sambert symbols: unknown ") + what + " " + in_quotes(name) +
                     "; this voice's " + what +
                     "s: " + join(channel.values, static_cast<size_t>(channel.inputs)));
  }
  return found->second;
}

int64_t SambertSymbols::emotion_id(std::string_view name) const {
  return named_id(kEmotion, name, "emotion");
}

int64_t SambertSymbols::speaker_id(std::string_view name) const {
  return named_id(kSpeaker, name, "speaker");
}

const std::string& SambertSymbols::phone(int64_t id) const {
  return channels_[kSy].values.at(static_cast<size_t>(id));
}

std::vector<std::string> SambertSymbols::emotions() const {
  const Channel& channel = channels_[kEmotion];
  return {channel.values.begin(), channel.values.begin() + channel.inputs};
}

std::vector<std::string> SambertSymbols::speakers() const {
  const Channel& channel = channels_[kSpeaker];
  return {channel.values.begin(), channel.values.begin() + channel.inputs};
}

std::array<int64_t, SambertSymbols::kChannels> SambertSymbols::sizes() const {
  std::array<int64_t, kChannels> sizes{};
  for (size_t c = 0; c < kChannels; ++c) {
    sizes[c] = static_cast<int64_t>(channels_[c].values.size());
  }
  return sizes;
}

SambertTokens SambertSymbols::parse(std::string_view symbols,
                                    const std::optional<std::string>& emotion,
                                    const std::optional<std::string>& speaker) const {
  std::optional<int64_t> emotion_override;
  std::optional<int64_t> speaker_override;
  if (emotion) emotion_override = emotion_id(*emotion);
  if (speaker) speaker_override = speaker_id(*speaker);

  const std::vector<std::string_view> tokens = split_tokens(symbols);
  if (tokens.empty()) throw InputError("Sambert symbols: no token in the symbol string");

  SambertTokens out;
  out.linguistic.reserve(tokens.size());
  out.emotion.reserve(tokens.size());
  out.speaker.reserve(tokens.size());
  for (size_t t = 0; t < tokens.size(); ++t) {
    const std::string_view text = tokens[t];
    std::string_view body = strip(strip(text, '{'), '}');
    std::array<std::string_view, kChannels> fields;
    size_t count = 0;
    while (true) {
      const size_t dollar = body.find('$');
      if (count < kChannels) fields[count] = body.substr(0, dollar);
      ++count;
      if (dollar == std::string_view::npos) break;
      body.remove_prefix(dollar + 1);
    }
    if (count != kChannels) {
      throw InputError(token_context(t, text) + ": " + std::to_string(count) +
                       " '$'-separated fields, expected 6 "
                       "(sy$tone$syllable_flag$word_segment$emo_category$speaker_category)");
    }
    std::array<int64_t, kChannels> ids{};
    for (size_t c = 0; c < kChannels; ++c) {
      if (c == kEmotion && emotion_override) {
        ids[c] = *emotion_override;
      } else if (c == kSpeaker && speaker_override) {
        ids[c] = *speaker_override;
      } else {
        ids[c] = lookup(c, fields[c], t, text);
      }
    }
    out.linguistic.push_back({ids[0], ids[1], ids[2], ids[3]});
    out.emotion.push_back(ids[kEmotion]);
    out.speaker.push_back(ids[kSpeaker]);
  }
  return out;
}

}  // namespace voxd
