// libespeak-ng in this process. The library keeps process-wide state, so every call into it is
// serialised by one lock: see EspeakWorkers (text/espeak_workers.h) for eSpeak NG in worker
// processes, which run in parallel.
#pragma once

#include <string>
#include <vector>

namespace voxd::text {

// Initialises libespeak-ng from its data path (ESPEAK_DATA_PATH, else its default) unless it
// is already; Error if the data cannot be loaded.
void initialize_espeak();

// What espeak_TextToPhonemes writes for each of `clauses` (texts without clause punctuation) in
// `phoneme_mode` with the voice of `language`, each clause's output pieces joined by spaces.
// The clauses run under one hold of the lock. InputError if eSpeak has no voice for `language`.
std::vector<std::string> espeak_phonemes_in_process(const std::vector<std::string>& clauses,
                                                    const std::string& language, int phoneme_mode);

}  // namespace voxd::text
