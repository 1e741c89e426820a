// Aligns the teacher's phoneme timing (eSpeak NG phoneme events) to the front end's tokens and
// turns it into per-token mel-frame durations.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace voxd::tools {

// One eSpeak phoneme event: the phoneme's IPA name ("" for a pause) and its first sample.
struct PhonemeEvent {
  std::string name;
  int64_t sample = 0;
};

// Per-token durations of one utterance.
struct Alignment {
  std::vector<int64_t> durations;  // frames per token, summing to samples / hop
  size_t extra_phonemes = 0;       // teacher phonemes without a token, absorbed by a neighbour
  size_t frames_moved = 0;         // frames moved to voiced tokens that rounded to 0 frames
};

// True for a token the teacher voices: a phoneme, not a stress mark, word boundary or
// punctuation.
bool is_voiced(const std::string& token);

// Durations of `tokens` (FrontEnd phonemes) from the teacher's `events` over `samples` samples.
// A dynamic-programming alignment matches every voiced token to an event phoneme with exactly
// its name (the token's tone aside: text::without_tone), in order; at most `max_extra_phonemes`
// event phonemes may be left unmatched (their audio goes to the preceding token). Audio before the
// first event goes to the first token; a pause goes to the first punctuation token between the
// voiced tokens around it, else to the word boundary there, else to the voiced token before it.
// Token boundaries (in samples) are rounded to the nearest frame of `hop` samples, the last one to
// samples / hop; a voiced token left with 0 frames takes one from its nearest non-empty neighbour
// that has two or more. InputError saying why when the tokens and events do not align.
Alignment align(const std::vector<std::string>& tokens, const std::vector<PhonemeEvent>& events,
                int64_t samples, int64_t hop, size_t max_extra_phonemes);

}  // namespace voxd::tools
