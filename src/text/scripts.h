// Which writing systems a voice's language can speak, and the check that refuses text in others
// (docs/text-frontend.md, "Scripts").
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace voxd::text {

// The scripts of one eSpeak language ("en-us" → Latin, "ru" → Cyrillic and Latin), from ICU.
// Latin, and the characters every script shares (digits, punctuation, combining marks), are
// always allowed; a language ICU does not know allows every script.
class ScriptCheck {
 public:
  explicit ScriptCheck(std::string language);

  // InputError when a letter or digit of UTF-8 `text` is in a script the language cannot
  // speak, naming the commonest such script and its first character: "the text is in Han
  // script (你), which voice language 'en-us' cannot speak" when most letters are, else "the
  // text has 2 letters in Cyrillic script (м), …" with what to do about them.
  void check(std::string_view text) const;

 private:
  std::string language_;
  std::vector<int> scripts_;  // UScriptCode values; empty: every script
};

}  // namespace voxd::text
