// Aligns the teacher's phoneme timing (eSpeak NG's phoneme events, Festival's segments) to the
// front end's tokens and turns it into per-token mel-frame durations.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace voxd::tools {

// One teacher phoneme: its name (eSpeak NG's IPA or mnemonic, Festival's in ARPAbet; "" for a
// pause) and its first sample.
struct PhonemeEvent {
  std::string name;
  int64_t sample = 0;
};

// How closely the front end's voiced tokens must follow the teacher's phonemes. A token matches a
// teacher phoneme of its own name (see align()); beyond that, each sentence may have at most:
struct AlignRules {
  // Teacher phonemes without a token (their audio goes to the token before).
  size_t max_extra_phonemes = 0;
  // Tokens matched to a teacher phoneme of another name of the same kind, vowel for vowel or
  // consonant for consonant (ARPAbet names only): the teacher's lexicon reduced or chose another
  // vowel ("IH0" said as "AH0").
  size_t max_substitutions = 0;
  // Voiced tokens the teacher did not say (each takes a frame from a neighbour).
  size_t max_missing = 0;
};

// Per-token durations of one utterance.
struct Alignment {
  std::vector<int64_t> durations;  // frames per token, summing to samples / hop
  size_t extra_phonemes = 0;       // teacher phonemes without a token, absorbed by a neighbour
  size_t substitutions = 0;        // tokens matched to a teacher phoneme of another name
  size_t missing_phonemes = 0;     // voiced tokens the teacher did not say
  size_t frames_moved = 0;         // frames moved to voiced tokens that rounded to 0 frames
};

// True for a token the teacher voices: a phoneme, not a stress mark, word boundary or
// punctuation.
bool is_voiced(const std::string& token);

// Durations of `tokens` (FrontEnd phonemes) from the teacher's `events` over `samples` samples.
// A dynamic-programming alignment matches the voiced tokens to the event phonemes in order with
// the fewest edits, each counting one (extra event phonemes always; substitutions and missing
// tokens only where `rules` allow any), and `rules`' limits are then checked on that alignment:
// a token matches an event phoneme of exactly its name, or its name less a tone
// (text::without_tone) or an ARPAbet stress digit ("IY1" matches "IY"). Audio
// before the first event goes to the first token; a pause goes to the first punctuation token
// between the voiced tokens around it, else to the word boundary there, else to the voiced token
// before it. Token boundaries (in samples) are rounded to the nearest frame of `hop` samples, the
// last one to samples / hop; a voiced token left with 0 frames takes one from its nearest
// non-empty neighbour that has two or more. InputError saying why when the tokens and events do
// not align within the rules.
Alignment align(const std::vector<std::string>& tokens, const std::vector<PhonemeEvent>& events,
                int64_t samples, int64_t hop, const AlignRules& rules);

}  // namespace voxd::tools
