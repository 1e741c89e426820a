// Sentence → phonemes through libespeak-ng: IPA tokens for voxd's own voices and ARPAbet with
// stress digits for voices trained on CMUdict (ming024's FastSpeech2 LJSpeech). See
// docs/text-frontend.md for the tokenisation.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace voxd::text {

// The token phonemize_ipa emits between words.
inline constexpr std::string_view kWordBoundary = " ";

// The token phonemize_arpabet emits for a pause (clause punctuation).
inline constexpr std::string_view kArpabetPause = "sp";

// Thread-safe front to eSpeak NG: the process's library, whose calls one mutex serialises, or the
// worker processes the process uses (use_espeak_workers, text/espeak_workers.h), which run at
// once. Each call selects the requested language itself.
class Phonemizer {
 public:
  // Initialises libespeak-ng in this process (unless it uses worker processes) on first use;
  // Error if the data cannot be loaded.
  Phonemizer();

  // IPA tokens of `sentence`: one token per eSpeak phoneme ("t", "aɪ", "ɑːɹ"; the length mark
  // stays on its vowel), the stress marks "ˈ" and "ˌ" as tokens of their own before the
  // stressed vowel, kWordBoundary between words, and punctuation , . ; : ! ? - " ( ) as tokens.
  // InputError if eSpeak has no voice for `language`.
  std::vector<std::string> phonemize_ipa(std::string_view sentence,
                                         const std::string& language) const;

  // eSpeak NG's ASCII phoneme mnemonics of `sentence`, tokenised as phonemize_ipa does: one
  // token per phoneme with its tone ("n", "i214": eSpeak's Mandarin voices write the tone after
  // the vowel), the stress marks as "ˈ" and "ˌ" (IPA's, so that they never read as a comma),
  // kWordBoundary between words and punctuation as tokens; eSpeak's pause mnemonics ("_", "_:",
  // "_|") are left out. InputError if eSpeak has no voice for `language`.
  std::vector<std::string> phonemize_mnemonic(std::string_view sentence,
                                              const std::string& language) const;

  // ARPAbet phonemes of `sentence` (CMUdict's 39 phonemes, vowels with stress digit 0/1/2), no
  // word boundaries, kArpabetPause for each run of , ; : . - ? ! and nothing for quotes and
  // brackets. `language` should be an English eSpeak voice (the mapping is for eSpeak's English
  // phonemes). InputError if eSpeak has no voice for `language`.
  std::vector<std::string> phonemize_arpabet(std::string_view sentence,
                                             const std::string& language) const;
};

// The token of eSpeak phoneme mnemonic `name`: the name itself, but for a name that is one
// punctuation character (Mandarin's ";", the glide before ü), written "#;" so that it never reads
// as punctuation. The teacher names its phoneme events the same way.
std::string mnemonic_phoneme(std::string_view name);

// A phoneme token without its tone ("i214" -> "i"), the name eSpeak gives the phoneme in its
// phoneme events (the tone is a phoneme of its own there, with no event). A tone is a run of two
// or more digits at the end; a token without one is returned whole ("@2", "ɑː").
std::string_view without_tone(std::string_view token);

// False for the tokens that carry no sound: kWordBoundary, kArpabetPause and punctuation.
bool is_phoneme(std::string_view token);

// ARPAbet for one word given as eSpeak's English ASCII phoneme mnemonics, each optionally
// prefixed with its stress mark ("'" primary, "," secondary), e.g. {"h", "@", "l", "'oU"} →
// {"HH", "AH0", "L", "OW1"}. Pause and marker mnemonics yield nothing; unknown ones are skipped.
// A word without primary stress gets it on its first secondary-stressed vowel, else on its first
// full (not reduced) vowel, as CMUdict stresses every word of more than a reduced syllable.
std::vector<std::string> espeak_word_to_arpabet(const std::vector<std::string>& mnemonics);

}  // namespace voxd::text
