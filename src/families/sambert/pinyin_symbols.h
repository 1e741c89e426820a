// Mandarin readings -> KAN-TTS symbol strings, as KAN-TTS's own front end writes them for its
// PinYin voices (kantts/preprocess/script_convertor: py2phoneMap.txt, Syllable.py,
// ScriptWord.py): each syllable two phones (an initial and a final, "_c" Chinese phones; a
// syllable without an initial takes ga/ge/go by its first letter, y and w are initials, erhua
// finals end in r), both with the syllable's tone; s_begin/s_end on the two; word_begin on a
// prosodic word's first phone, word_end on its last, word_middle between; "#1".."#4" tokens after
// each prosodic word with tone_none, s_none, word_none.
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "text/mandarin/reading.h"
#include "text/mandarin/syllable.h"

namespace voxd::sambert {

// The two phones of a syllable: hang2 -> {h_c, ang_c}, ai4 -> {ga, ai_c}, yue4 -> {y_c, ve_c},
// xi1 -> {xx_c, i_c}, huar1 -> {h_c, uar_c}. Syllables KAN-TTS has no key for are read as their
// nearest ones (ng, n -> en; m, hm -> mu). Throws voxd::InputError naming a syllable that is not
// pinyin.
std::array<std::string, 2> kantts_phones(const text::mandarin::Syllable& syllable);

// The symbol string of one sentence, every token with `emotion` and `speaker`. Latin words are
// spelled letter by letter (A ei1, B bi4, ...), as Chinese speakers read them.
std::string kantts_symbols(const text::mandarin::ReadSentence& sentence, std::string_view emotion,
                           std::string_view speaker);

}  // namespace voxd::sambert
