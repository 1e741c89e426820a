// The text front end as a model family sees it: text (plain, Markdown, HTML or SSML) → sentences
// of the token ids its model takes. Each family has its own (eSpeak phonemes for FastSpeech2,
// WordPiece tokens for ChatTTS); the markup, normalisation and sentence splitting they share
// live beside this in text/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace voxd::text {

// One sentence ready for a model.
struct Sentence {
  std::string text;                   // the normalised sentence
  std::vector<std::string> phonemes;  // the units as the front end made them (phonemes, tokens)
  std::vector<int64_t> ids;           // the model's token ids of the units it knows
  // Further token channels for models that take several ids per unit (a tone, a word boundary),
  // each the size of `ids`; empty for models that take one.
  std::vector<std::vector<int64_t>> extra_channels;
  size_t dropped = 0;      // units without an id in the voice, left out of ids
  int pause_after_ms = 0;  // silence to insert after the sentence (SSML <break>)
  float rate = 1.0f;       // speed multiplier for this sentence (<prosody rate>)
};

// What the front end made of a text: the normalised text as split into sentences (one line
// per stretch between breaks and rate changes) and the sentences.
struct Analysis {
  std::string normalized;
  std::vector<Sentence> sentences;
};

// Turns text into one voice's token ids. analyze() is const and safe to call from several
// threads at once.
class FrontEnd {
 public:
  virtual ~FrontEnd() = default;
  // The sentences of `text` with the normalised text they came from. Throws voxd::InputError
  // for text with nothing to say ("text is empty", nothing to pronounce, letters the language
  // cannot speak, bad markup).
  virtual Analysis analyze(std::string_view text) const = 0;
  // analyze(text).sentences.
  std::vector<Sentence> process(std::string_view text) const { return analyze(text).sentences; }
  // What the units are, for `voxd phonemize`: "espeak-ipa", "arpabet", "wordpiece".
  virtual std::string unit_name() const = 0;
  // Loads now what the front end would load on first use (a lexicon), so that no request waits
  // for it. Error when it cannot be loaded.
  virtual void load() const {}
};

}  // namespace voxd::text
