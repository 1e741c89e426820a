// KAN-TTS's symbol strings -> Sambert's input ids. A Sambert voice's front end writes one token
// per phone, `{sy$tone$syllable_flag$word_segment$emotion$speaker}`, e.g.
//   {ge$tone5$s_begin$word_begin$emotion_neutral$F7} {en_c$tone5$s_end$word_end$emotion_neutral$F7}
// and KAN-TTS's KanTtsLinguisticUnit (kantts/utils/ling_unit/ling_unit.py) numbers each field
// by its index in its channel's list. SambertSymbols holds those lists, as
// tools/kantts_symbols.py rebuilds them from the voice's language inventory and speaker_list,
// and gives the same ids, one per token (the "~" KAN-TTS appends and its inference drops is not
// added).
//
// Parsing follows encode_symbol_sequence: the fields map to channels by position, each token
// has '{' and then '}' stripped from both ends (braces are optional), a sy is looked up as "@" +
// the field, and every lookup is case-sensitive. Where KAN-TTS is lax or fails, voxd refuses
// with an InputError naming the token (from 0), the channel and the value:
//   - a sy that is not in the inventory (KAN-TTS silently drops it, so its channels disagree in
//     length and the model fails), an empty field, or any other unknown value (KAN-TTS: KeyError);
//   - a reserved entry ("_", "~", "@[MASK]"; a sy "[MASK]"), which KAN-TTS would give its id;
//   - a token with other than six '$'-separated fields (KAN-TTS ignores extra fields);
//   - a string with no token.
// Tokens are separated by runs of ASCII whitespace (space, \t, \n, \v, \f, \r) and the string
// may begin and end with whitespace. KAN-TTS splits on single spaces only (two in a row make it
// fail; a tab or newline stays inside a token). So where KAN-TTS gives ids for a string, voxd
// gives the same ones or refuses it.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "families/sambert/sambert.h"

namespace voxd {

class SambertSymbols {
 public:
  // Channels, in the order of a token's fields: sy, tone, syllable_flag, word_segment,
  // emo_category, speaker_category.
  static constexpr size_t kChannels = 6;

  // Reads the dict of tools/kantts_symbols.py: "lfeat_type_list" (the six channels above, in
  // that order; nothing else is supported) and per channel the list of its values by id, each
  // ending in "_", "~", "@[MASK]", the sy values before them starting with "@". Other keys are
  // ignored. Throws voxd::InputError "<where>: field '<name>' ..." otherwise.
  static SambertSymbols from_json(const nlohmann::json& lists, const std::string& where);

  // The ids of one symbol string. A given `emotion` / `speaker` (a name from emotions() /
  // speakers()) is every token's instead of its own field, which must still be present but is
  // not read. Throws voxd::InputError as described above, and for an unknown override name
  // (the message lists the valid names).
  SambertTokens parse(std::string_view symbols,
                      const std::optional<std::string>& emotion = std::nullopt,
                      const std::optional<std::string>& speaker = std::nullopt) const;

  // The phone (sy value, without its "@") of a sy id parse gave.
  const std::string& phone(int64_t id) const;
  // The names parse accepts as emotion / speaker, in id order, the reserved entries left out.
  std::vector<std::string> emotions() const;
  std::vector<std::string> speakers() const;
  // The id of an emotion / speaker name; voxd::InputError listing the valid names otherwise.
  int64_t emotion_id(std::string_view name) const;
  int64_t speaker_id(std::string_view name) const;

  // Entries per channel, the reserved ones included: KAN-TTS's embedding table sizes
  // (ModelScope's voices may have one row less, the mask's, which is last).
  std::array<int64_t, kChannels> sizes() const;

 private:
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  struct Channel {
    std::string name;                 // as in lfeat_type_list
    std::vector<std::string> values;  // by id, as a field writes them (sy without its "@")
    // A field's id: for a value listed twice the later one, as KAN-TTS's dict keeps it.
    std::unordered_map<std::string, int64_t, StringHash, std::equal_to<>> ids;
    int64_t inputs = 0;  // ids below this are values; the reserved tail starts here
  };

  SambertSymbols() = default;
  // The id of `value` in channel `c` for token `token` (text `text`), or an InputError.
  int64_t lookup(size_t c, std::string_view value, size_t token, std::string_view text) const;
  // The id of an override name in channel `c` (`what`: "emotion" or "speaker").
  int64_t named_id(size_t c, std::string_view name, const char* what) const;

  std::array<Channel, kChannels> channels_;
};

}  // namespace voxd
