// Generating the teacher dataset (docs/dataset-format.md): corpus sentences through voxd's front
// end and a teacher (eSpeak NG, or Festival with a voice such as CMU ARCTIC SLT's), aligned into
// per-token frame durations, written as WAVs and a manifest.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "text/symbols.h"
#include "tools/align.h"

namespace voxd::tools {

// Who speaks the corpus.
enum class TeacherKind {
  kEspeak,    // eSpeak NG in the language's teacher voice (text::mandarin::teacher_voice)
  kFestival,  // Festival with `festival_voice`; the front end's phonemes must be ARPAbet
};

// What voxd-dataset generates, and how.
struct DatasetOptions {
  std::string corpus;   // UTF-8 text, one sentence per line (blank lines are skipped)
  std::string out;      // dataset directory, created if missing
  std::string symbols;  // the voice's symbols.txt
  text::PhonemeSet phonemes = text::PhonemeSet::EspeakIpa;
  std::string language = "en-us";  // the voice's (config.json); the teacher is teacher_voice()
  size_t limit = 0;                // 0: every sentence
  size_t jobs = 1;                 // worker processes (eSpeak is process-global)
  TeacherKind teacher = TeacherKind::kEspeak;
  std::string festival_voice = "cmu_us_slt_arctic_hts";
  std::vector<std::string> festival_command = {"festival"};  // the program and its options
  AlignRules rules;  // how closely the teacher must say the front end's phonemes (see align())
};

// Counts for one run. Every sentence is written or dropped for one reason.
struct DatasetReport {
  size_t sentences = 0;
  size_t written = 0;
  size_t dropped_front_end = 0;  // the front end rejected it (nothing to pronounce, ...)
  size_t dropped_split = 0;      // the front end made more than one sentence of it
  size_t dropped_symbols = 0;    // a phoneme has no symbol in the table
  size_t dropped_alignment = 0;  // the teacher's phonemes do not align with the tokens
  size_t extra_phonemes = 0;     // in written sentences (see Alignment)
  size_t substitutions = 0;      // in written sentences (see Alignment)
  size_t missing_phonemes = 0;   // in written sentences (see Alignment)
  size_t frames_moved = 0;       // in written sentences (see Alignment)
  int64_t samples = 0;           // audio written, in samples
  size_t dropped() const {
    return dropped_front_end + dropped_split + dropped_symbols + dropped_alignment;
  }
};

// The sample rate and hop length the dataset is written for.
inline constexpr int kDatasetSampleRate = 22050;
inline constexpr int64_t kHopLength = 256;

// Writes the dataset for `options` into options.out: wavs/<id>.wav, manifest.jsonl (sorted by
// id; the id is the sentence's 0-based index among the corpus's non-blank lines, 6 digits) and
// info.json. Dropped sentences are reported on stderr, one line each ("corpus:LINE: ..."). With
// jobs > 1 the sentences are shared out round-robin to forked worker processes. InputError for
// bad options or an unreadable corpus/symbol file, Error if a worker fails.
DatasetReport generate_dataset(const DatasetOptions& options);

}  // namespace voxd::tools
