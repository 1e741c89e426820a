#include "tools/align.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <string_view>

#include "core/error.h"
#include "text/phonemizer.h"

namespace voxd::tools {
namespace {

constexpr size_t kNone = std::numeric_limits<size_t>::max();

bool is_punctuation(const std::string& token) {
  return !token.empty() && token != text::kWordBoundary && !text::is_phoneme(token);
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& name : names) out += (out.empty() ? "" : " ") + name;
  return out;
}

// An ARPAbet name less its stress digit ("IY1" -> "IY").
std::string_view without_stress(std::string_view name) {
  if (!name.empty() && name.back() >= '0' && name.back() <= '2') name.remove_suffix(1);
  return name;
}

// An ARPAbet name ("IY1", "AH", "HH"): one or two capital letters, then at most a stress digit.
bool is_arpabet(std::string_view name) {
  const std::string_view base = without_stress(name);
  return !base.empty() && base.size() <= 2 &&
         std::all_of(base.begin(), base.end(), [](char c) { return c >= 'A' && c <= 'Z'; });
}

bool is_arpabet_vowel(std::string_view name) {
  static constexpr std::string_view kVowels[] = {"AA", "AE", "AH", "AO", "AW", "AY", "EH", "ER",
                                                 "EY", "IH", "IY", "OW", "OY", "UH", "UW"};
  const std::string_view base = without_stress(name);
  return std::find(std::begin(kVowels), std::end(kVowels), base) != std::end(kVowels);
}

// Whether a voiced token is the phoneme an event names: the same, but for the tone or the
// ARPAbet stress on the token.
bool same_phoneme(const std::string& token, const std::string& event) {
  return token == event || text::without_tone(token) == event ||
         (is_arpabet(token) && without_stress(token) == event);
}

// Whether a token may stand for an event phoneme of another name: both ARPAbet, both vowels or
// both consonants.
bool same_kind(const std::string& token, const std::string& event) {
  return is_arpabet(token) && is_arpabet(event) &&
         is_arpabet_vowel(token) == is_arpabet_vowel(event);
}

// How the voiced tokens and the event phonemes pair up.
struct PhonemeMatch {
  std::vector<size_t> token_of;   // per event phoneme: its voiced token, or kNone (an extra)
  std::vector<bool> substituted;  // per event phoneme: matched to a token of another name
  size_t missing = 0;             // voiced tokens without an event phoneme
};

// The alignment of the voiced tokens with the event phonemes with the fewest edits, each counting
// one (extra event phonemes, and where `rules` allow any, substitutions and missing tokens; on a
// tie a match, then a substitution, then an extra phoneme is preferred, from the end). The limits
// are the caller's to check. InputError when no alignment exists with the edits allowed.
PhonemeMatch match_phonemes(const std::vector<std::string>& voiced,
                            const std::vector<std::string>& heard, const AlignRules& rules) {
  const size_t m = voiced.size(), p = heard.size();
  constexpr size_t kInf = std::numeric_limits<size_t>::max() / 2;
  const bool substitute = rules.max_substitutions > 0, miss = rules.max_missing > 0;
  auto matches = [&](size_t a, size_t b) { return same_phoneme(voiced[a - 1], heard[b - 1]); };
  auto substitutes = [&](size_t a, size_t b) {
    return substitute && same_kind(voiced[a - 1], heard[b - 1]);
  };
  // cost[a][b]: fewest edits to align voiced[0..a) with heard[0..b).
  std::vector<std::vector<size_t>> cost(m + 1, std::vector<size_t>(p + 1, kInf));
  for (size_t b = 0; b <= p; ++b) cost[0][b] = b;
  for (size_t a = 1; a <= m; ++a) {
    if (miss) cost[a][0] = a;
    for (size_t b = 1; b <= p; ++b) {
      size_t best = cost[a][b - 1] + 1;
      if (matches(a, b)) best = std::min(best, cost[a - 1][b - 1]);
      if (substitutes(a, b)) best = std::min(best, cost[a - 1][b - 1] + 1);
      if (miss) best = std::min(best, cost[a - 1][b] + 1);
      cost[a][b] = std::min(best, kInf);
    }
  }
  if (cost[m][p] >= kInf) {
    throw InputError("front-end phonemes [" + joined(voiced) + "] do not match the teacher's [" +
                     joined(heard) + "]");
  }
  PhonemeMatch match{std::vector<size_t>(p, kNone), std::vector<bool>(p, false), 0};
  for (size_t a = m, b = p; a > 0 || b > 0;) {
    if (a > 0 && b > 0 && matches(a, b) && cost[a][b] == cost[a - 1][b - 1]) {
      match.token_of[--b] = --a;
    } else if (a > 0 && b > 0 && substitutes(a, b) && cost[a][b] == cost[a - 1][b - 1] + 1) {
      match.substituted[--b] = true;
      match.token_of[b] = --a;
    } else if (b > 0 && cost[a][b] == cost[a][b - 1] + 1) {
      --b;
    } else {
      ++match.missing;
      --a;
    }
  }
  return match;
}

// The token that gets a pause lying between tokens `before` and `after` (exclusive; kNone for
// the start).
size_t pause_owner(const std::vector<std::string>& tokens, size_t before, size_t after) {
  const size_t first = before == kNone ? 0 : before + 1;
  for (size_t i = first; i < after; ++i) {
    if (is_punctuation(tokens[i])) return i;
  }
  for (size_t i = first; i < after; ++i) {
    if (tokens[i] == text::kWordBoundary) return i;
  }
  return before == kNone ? after : before;
}

// Gives each voiced token that has 0 frames one frame from its nearest non-empty neighbour
// (the larger of the two) that has at least two; returns how many frames moved.
size_t fill_empty_tokens(const std::vector<std::string>& tokens, std::vector<int64_t>& frames) {
  size_t moved = 0;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (frames[i] > 0 || !is_voiced(tokens[i])) continue;
    size_t left = i, right = i + 1;
    while (left > 0 && frames[left - 1] == 0) --left;
    while (right < frames.size() && frames[right] == 0) ++right;
    const int64_t from_left = left > 0 ? frames[left - 1] : 0;
    const int64_t from_right = right < frames.size() ? frames[right] : 0;
    if (std::max(from_left, from_right) < 2) {
      throw InputError("phoneme '" + tokens[i] + "' (token " + std::to_string(i) +
                       ") is shorter than one frame and no neighbour can spare one");
    }
    --frames[from_left >= from_right ? left - 1 : right];
    ++frames[i];
    ++moved;
  }
  return moved;
}

}  // namespace

bool is_voiced(const std::string& token) {
  return text::is_phoneme(token) && token != "ˈ" && token != "ˌ";
}

Alignment align(const std::vector<std::string>& tokens, const std::vector<PhonemeEvent>& events,
                int64_t samples, int64_t hop, const AlignRules& rules) {
  VOXD_CHECK(hop > 0, "hop must be positive");
  int64_t last = 0;
  for (const PhonemeEvent& event : events) {
    if (event.sample < last || event.sample > samples) {
      throw InputError("teacher phoneme events are out of order (sample " +
                       std::to_string(event.sample) + " after " + std::to_string(last) + ", of " +
                       std::to_string(samples) + ")");
    }
    last = event.sample;
  }
  std::vector<std::string> voiced, heard;
  std::vector<size_t> voiced_index, heard_event;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (!is_voiced(tokens[i])) continue;
    voiced.push_back(tokens[i]);
    voiced_index.push_back(i);
  }
  for (size_t k = 0; k < events.size(); ++k) {
    if (events[k].name.empty()) continue;
    heard.push_back(events[k].name);
    heard_event.push_back(k);
  }
  if (voiced.empty()) throw InputError("the sentence has no voiced phoneme");
  const PhonemeMatch match = match_phonemes(voiced, heard, rules);

  Alignment result;
  result.missing_phonemes = match.missing;
  // owner[k]: the token that event k's audio belongs to (kNone: decided below, for pauses).
  std::vector<size_t> owner(events.size(), kNone);
  size_t previous = kNone;
  for (size_t h = 0; h < heard.size(); ++h) {
    if (match.token_of[h] == kNone) {
      ++result.extra_phonemes;
      owner[heard_event[h]] = previous == kNone ? voiced_index.front() : previous;
    } else {
      result.substitutions += match.substituted[h] ? 1 : 0;
      previous = owner[heard_event[h]] = voiced_index[match.token_of[h]];
    }
  }
  const auto check = [&](size_t count, size_t most, const char* what) {
    if (count > most) {
      throw InputError(std::to_string(count) + " " + what + " (at most " + std::to_string(most) +
                       "): [" + joined(heard) + "] vs [" + joined(voiced) + "]");
    }
  };
  check(result.extra_phonemes, rules.max_extra_phonemes,
        "teacher phonemes have no front-end token");
  check(result.substitutions, rules.max_substitutions,
        "front-end phonemes are said as another phoneme");
  check(result.missing_phonemes, rules.max_missing, "front-end phonemes are not said");
  for (size_t k = 0, before = kNone; k < events.size(); ++k) {
    if (!events[k].name.empty()) {
      before = owner[k];
      continue;
    }
    size_t after = tokens.size();
    for (size_t j = k + 1; j < events.size(); ++j) {
      if (!events[j].name.empty()) {
        after = owner[j];
        break;
      }
    }
    owner[k] = pause_owner(tokens, before, after);
  }

  // Samples per token, then rounded cumulative boundaries.
  std::vector<int64_t> token_samples(tokens.size(), 0);
  for (size_t k = 0; k < events.size(); ++k) {
    const int64_t start = k == 0 ? 0 : events[k].sample;
    const int64_t end = k + 1 < events.size() ? events[k + 1].sample : samples;
    token_samples[owner[k]] += end - start;
  }
  if (events.empty()) token_samples.front() = samples;
  const int64_t frames = samples / hop;
  result.durations.resize(tokens.size());
  int64_t boundary = 0, frame = 0;
  for (size_t i = 0; i < tokens.size(); ++i) {
    boundary += token_samples[i];
    const int64_t next =
        i + 1 == tokens.size() ? frames : std::min(frames, (boundary + hop / 2) / hop);
    result.durations[i] = next - frame;
    frame = next;
  }
  result.frames_moved = fill_empty_tokens(tokens, result.durations);
  return result;
}

}  // namespace voxd::tools
