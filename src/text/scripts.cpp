#include "text/scripts.h"

#include <unicode/uchar.h>
#include <unicode/uscript.h>
#include <unicode/utf8.h>

#include <algorithm>
#include <map>

#include "core/error.h"

namespace voxd::text {
namespace {

std::string utf8_of(UChar32 c) {
  char buf[U8_MAX_LENGTH];
  int32_t length = 0;
  U8_APPEND_UNSAFE(buf, length, c);
  return std::string(buf, static_cast<size_t>(length));
}

}  // namespace

ScriptCheck::ScriptCheck(std::string language) : language_(std::move(language)) {
  std::string locale = language_;
  std::replace(locale.begin(), locale.end(), '-', '_');
  UScriptCode codes[8];
  UErrorCode status = U_ZERO_ERROR;
  const int32_t n = uscript_getCode(locale.c_str(), codes, 8, &status);
  if (U_FAILURE(status)) {
    // ICU's data without its likely-subtags table (a cut-down libicudata): refusing to check
    // would let any script through unannounced.
    throw Error("ICU cannot tell which scripts language '" + language_ + "' is written in (" +
                u_errorName(status) +
                "); its data library lacks likelySubtags.res (see scripts/shrink-icu-data.sh)");
  }
  if (n <= 0) return;  // a language ICU does not know: its text is not checked
  scripts_.assign(codes, codes + n);
  scripts_.push_back(USCRIPT_LATIN);
  // Japanese and Korean text mixes in Han characters; ICU names them as the languages' scripts.
  if (std::find(scripts_.begin(), scripts_.end(), USCRIPT_JAPANESE) != scripts_.end()) {
    scripts_.insert(scripts_.end(), {USCRIPT_HAN, USCRIPT_HIRAGANA, USCRIPT_KATAKANA});
  }
  if (std::find(scripts_.begin(), scripts_.end(), USCRIPT_KOREAN) != scripts_.end()) {
    scripts_.insert(scripts_.end(), {USCRIPT_HAN, USCRIPT_HANGUL});
  }
  if (std::find(scripts_.begin(), scripts_.end(), USCRIPT_SIMPLIFIED_HAN) != scripts_.end() ||
      std::find(scripts_.begin(), scripts_.end(), USCRIPT_TRADITIONAL_HAN) != scripts_.end()) {
    scripts_.push_back(USCRIPT_HAN);
  }
}

void ScriptCheck::check(std::string_view text) const {
  if (scripts_.empty()) return;
  struct Found {
    size_t count = 0;
    UChar32 example = 0;
  };
  std::map<int, Found> foreign;
  size_t letters = 0;
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const auto length = static_cast<int32_t>(text.size());
  for (int32_t i = 0; i < length;) {
    UChar32 c = 0;
    U8_NEXT(s, i, length, c);
    if (c < 0 || !u_isalnum(c)) continue;
    ++letters;
    UErrorCode status = U_ZERO_ERROR;
    const UScriptCode script = uscript_getScript(c, &status);
    if (U_FAILURE(status) || script == USCRIPT_COMMON || script == USCRIPT_INHERITED ||
        std::find(scripts_.begin(), scripts_.end(), script) != scripts_.end()) {
      continue;
    }
    Found& found = foreign[script];
    if (found.count++ == 0) found.example = c;
  }
  if (foreign.empty()) return;
  const auto commonest = std::max_element(
      foreign.begin(), foreign.end(),
      [](const auto& a, const auto& b) { return a.second.count < b.second.count; });
  size_t foreign_letters = 0;
  for (const auto& [script, found] : foreign) foreign_letters += found.count;
  const std::string script =
      std::string(uscript_getName(static_cast<UScriptCode>(commonest->first))) + " script (" +
      utf8_of(commonest->second.example) + ")";
  const std::string cannot = "which voice language '" + language_ + "' cannot speak";
  if (2 * foreign_letters >= letters) throw InputError("the text is in " + script + ", " + cannot);
  throw InputError("the text has " + std::to_string(foreign_letters) + " letter" +
                   (foreign_letters == 1 ? "" : "s") + " in " + script +
                   (foreign.size() > 1 ? " and other scripts" : "") + ", " + cannot +
                   "; leave them out, write them in Latin letters, or give a reading with "
                   "<sub alias=\"...\">");
}

}  // namespace voxd::text
