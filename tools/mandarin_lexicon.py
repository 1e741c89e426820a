#!/usr/bin/env python3
"""Builds voxd's Mandarin lexicon (data/zh/) from Debian 12 packages.

Three files, each from sources under one licence (data/zh/README.md says which):

  words.tsv.xz jieba's word list (python3-jieba, dict.txt; MIT): `word<TAB>count<TAB>tag`, the
               words made only of hanzi with their counts (for the maximum-probability
               segmentation) and part-of-speech tags (n noun, v verb, a adjective, ...); xz
               (5.1 MB of text in 1.5 MB: the tree travels to the GPU machine with every run).
  chars.tsv    the Mandarin readings of each character (golang-github-mozillazg-go-pinyin-dev,
               pinyin_dict.go, from mozillazg/pinyin-data; MIT): `char<TAB>reading reading ...`,
               the most common first, tones as digits 1-5 (5 neutral), ü written v.
  phrases.tsv  the readings of words where they differ from their characters' first readings
               (rime-data-terra-pinyin and rime-data-luna-pinyin; LGPL-3): `word<TAB>reading`,
               one syllable per character.

How a phrase gets its reading. Rime's dictionaries are in traditional characters with Taiwan's
readings in places, so each word is converted with OpenCC's t2s (the `opencc` command) and:
  - the tone sandhi terra writes into phrases is undone (一 yi2/yi4 -> yi1, 不 bu2 -> bu4): the
    front end applies sandhi itself;
  - a syllable that is not one of the character's mainland readings is replaced by the mainland
    reading with the same letters, or by the character's only reading (質量 zhi2 -> zhi4); a word
    where that is ambiguous is used only when nothing better reads it;
  - luna's readings carry no tones: each syllable takes the character's most common reading with
    those letters.
Where terra gives a word several readings, choose() says which is kept.
A jieba word reads, in order of preference: terra's reading of it; luna's; the reading it has
inside the longer terra phrases that contain it (the most common one; 行业 from 行业语, 长大 from
长大成人); the same inside luna's. Terra's and luna's own words are kept too (the front end
splits a word it has no reading for over them: 银行行长 = 银行 + 行长). A reading equal to the
characters' first readings is not written.

Standard library only; needs the packages above and `opencc` (Makefile's ZH_DATA_PACKAGES):

    /usr/bin/python3 tools/mandarin_lexicon.py [--out data/zh] [--check]

--check builds into a temporary folder and fails when the result differs from --out.
"""
import argparse
import collections
import lzma
import os
import re
import subprocess
import sys
import tempfile
import unicodedata

JIEBA_DICT = "/usr/lib/python3/dist-packages/jieba/dict.txt"
GO_PINYIN_DICT = "/usr/share/gocode/src/github.com/mozillazg/go-pinyin/pinyin_dict.go"
TERRA_DICT = "/usr/share/rime-data/terra_pinyin.dict.yaml"
LUNA_DICT = "/usr/share/rime-data/luna_pinyin.dict.yaml"
OPENCC_T2S = "t2s.json"

# Words whose neutral-tone reading in terra is the rarer sense (不是 "fault"): they keep the
# reading terra lists first. Terra lists the full tones first for most words, the colloquial
# neutral tone (先生 xian1 sheng5, 东西 dong1 xi5 "thing") after; the neutral one is preferred.
FULL_TONE_WORDS = {"不是"}
# The measure word 个 keeps its fourth tone after numbers (两个 liang3 ge4; terra has both, and
# its longer phrases often ge5) but in these words.
NEUTRAL_GE_WORDS = {"这个", "那个", "哪个"}

TONE_MARKS = {"\u0304": "1", "\u0301": "2", "\u030c": "3", "\u0300": "4"}
SYLLABLE = re.compile(r"^[a-z]+[1-5]$")


def is_hanzi(ch):
    code = ord(ch)
    return (0x4E00 <= code <= 0x9FFF or 0x3400 <= code <= 0x4DBF or 0x20000 <= code <= 0x2FA1F
            or 0xF900 <= code <= 0xFAFF or ch == "〇")


def numbered(marked):
    """A tone-marked syllable (xíng, ǘ, ê, ńg) as letters and a tone digit (xing2, v2, e5, ng2)."""
    tone = "5"
    letters = []
    for part in unicodedata.normalize("NFD", marked):
        if part in TONE_MARKS:
            tone = TONE_MARKS[part]
        elif part == "\u0308":
            letters[-1] = "v"
        elif part != "\u0302":
            letters.append(part)
    return "".join(letters) + tone


def read_char_readings(path):
    readings = {}
    with open(path, encoding="utf-8") as source:
        for match in re.finditer(r'0x([0-9A-F]+): "([^"]*)"', source.read()):
            char = chr(int(match.group(1), 16))
            ordered = []
            for marked in match.group(2).split(","):
                syllable = numbered(marked)
                if SYLLABLE.match(syllable) and syllable not in ordered:
                    ordered.append(syllable)
            if ordered:
                readings[char] = ordered
    return readings


def read_jieba(path):
    """word -> [count, tag]; a word listed twice adds its counts and keeps its first tag."""
    words = {}
    with open(path, encoding="utf-8") as source:
        for line in source:
            fields = line.split()
            if len(fields) == 3 and all(is_hanzi(ch) for ch in fields[0]):
                entry = words.setdefault(fields[0], [0, fields[2]])
                entry[0] += int(fields[1])
    return words


def read_rime(path):
    """(word, reading, rare) in file order, the body after the YAML header; rare: a weight of
    0% (大家 da4 gu1 beside da4 jia1)."""
    with open(path, encoding="utf-8") as source:
        body = source.read().split("\n...\n", 1)[1]
    entries = []
    for line in body.splitlines():
        if not line or line.startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) >= 2:
            entries.append((fields[0], fields[1], len(fields) > 2 and fields[2] == "0%"))
    return entries


def simplified(words):
    """Each word through OpenCC's t2s, one line each (phrases converted as phrases)."""
    result = subprocess.run(["opencc", "-c", OPENCC_T2S], input="\n".join(words) + "\n",
                            capture_output=True, text=True, check=True)
    converted = result.stdout.split("\n")[:len(words)]
    if len(converted) != len(words):
        sys.exit("opencc returned a different number of lines")
    return converted


def lexical(word, syllables):
    """Terra's sandhi of 一 and 不 undone."""
    out = []
    for char, syllable in zip(word, syllables):
        if char == "一" and syllable in ("yi2", "yi4"):
            syllable = "yi1"
        elif char == "不" and syllable == "bu2":
            syllable = "bu4"
        out.append(syllable)
    return out


def mainland(word, traditional, syllables, char_readings):
    """The syllables with Taiwan readings replaced, and whether that was unambiguous. The
    traditional character's readings come first where it has its own (髮 fa4 for 头发, where
    simplified 发 has fa1 and fa4)."""
    out = []
    certain = True
    if len(traditional) != len(word):
        traditional = word
    for char, old, syllable in zip(word, traditional, syllables):
        known = char_readings.get(char)
        own = char_readings.get(old)
        if own and old != char and not syllable.endswith("5") and syllable not in own:
            same = [k for k in own if k[:-1] == syllable[:-1]]
            if len(same) == 1 and same[0] in (known or [same[0]]):
                out.append(same[0])
                continue
        if not known or syllable in known or syllable.endswith("5") or syllable == "r5":
            out.append(syllable)
            continue
        same_letters = [k for k in known if k[:-1] == syllable[:-1]]
        if len(same_letters) == 1:
            out.append(same_letters[0])
        elif len(known) == 1:
            out.append(known[0])
        else:
            out.append(syllable)
            certain = False
    return out, certain


def toned(word, letters, char_readings):
    """Luna's toneless syllables with each character's most common reading of those letters."""
    out = []
    for char, plain in zip(word, letters):
        match = [k for k in char_readings.get(char, []) if k[:-1] == plain]
        if not match:
            return None
        out.append(match[0])
    return out


def rime_readings(entries, char_readings, with_tones):
    """Simplified word -> (rank, reading): the reading chosen among a word's entries."""
    words = [word for word, _, _ in entries]
    converted = simplified(words)
    candidates = collections.defaultdict(list)
    for (traditional, code, rare), word in zip(entries, converted):
        syllables = code.split(" ")
        if len(word) < 2 or len(syllables) != len(word) or not all(map(is_hanzi, word)):
            continue
        if with_tones:
            if not all(SYLLABLE.match(s) for s in syllables):
                continue
            reading, certain = mainland(word, traditional, lexical(word, syllables),
                                        char_readings)
        else:
            reading = toned(word, syllables, char_readings)
            certain = reading is not None
            if reading is None:
                continue
        candidates[word].append((2 if rare else 0 if certain else 1, reading))
    return {word: choose(word, found, char_readings) for word, found in candidates.items()}


def choose(word, candidates, char_readings):
    """The best-ranked entry, the first of those, except that a reading that only puts syllables
    in the neutral tone wins (知道 zhi1 dao5; not for FULL_TONE_WORDS), and one that differs only
    in tones wins when its tones are the characters' more common ones (不好 bu4 hao3, not terra's
    first, bu4 hao4)."""
    rank = min(r for r, _ in candidates)
    best = None
    for candidate_rank, reading in candidates:
        if candidate_rank != rank:
            continue
        if best is None:
            best = reading
        elif word not in FULL_TONE_WORDS and neutralises(reading, best):
            best = reading
        elif (same_letters(reading, best) and not neutralises(best, reading)
              and commonness(word, reading, char_readings)
              < commonness(word, best, char_readings)):
            best = reading
    return rank, best


def same_letters(reading, other):
    return all(a[:-1] == b[:-1] for a, b in zip(reading, other))


def commonness(word, reading, char_readings):
    """The sum of each syllable's place in its character's readings (0 = the most common)."""
    total = 0
    for char, syllable in zip(word, reading):
        known = char_readings.get(char, [])
        total += known.index(syllable) if syllable in known else len(known)
    return total


def neutralises(reading, other):
    """Whether `reading` is `other` with some syllables in the neutral tone (知道 zhi1 dao5)."""
    changed = False
    for mine, theirs in zip(reading, other):
        if mine == theirs:
            continue
        if mine[:-1] != theirs[:-1] or not mine.endswith("5"):
            return False
        changed = True
    return changed


def inside_readings(phrases, wanted):
    """For each wanted word found inside a longer phrase, its most common reading there."""
    votes = collections.defaultdict(collections.Counter)
    longest = max((len(w) for w in wanted), default=0)
    for phrase, (rank, reading) in phrases.items():
        if rank:
            continue
        for start in range(len(phrase)):
            for end in range(start + 2, min(len(phrase), start + longest) + 1):
                part = phrase[start:end]
                if part in wanted and part != phrase:
                    votes[part][" ".join(reading[start:end])] += 1
    return {word: counts.most_common(1)[0][0].split(" ") for word, counts in votes.items()}


def build(out_dir):
    char_readings = read_char_readings(GO_PINYIN_DICT)
    words = read_jieba(JIEBA_DICT)
    terra = rime_readings(read_rime(TERRA_DICT), char_readings, with_tones=True)
    luna = rime_readings(read_rime(LUNA_DICT), char_readings, with_tones=False)

    def default(word):
        return [char_readings[c][0] if c in char_readings else None for c in word]

    unread = {w for w in words if len(w) > 1 and w not in terra and w not in luna}
    from_terra = inside_readings(terra, unread)
    from_luna = inside_readings(luna, unread - from_terra.keys())

    phrases = {}
    for word in list(words) + list(terra) + list(luna):
        if word in phrases or len(word) < 2:
            continue
        for source in (terra, luna):
            if word in source:
                reading = source[word][1]
                break
        else:
            reading = from_terra.get(word) or from_luna.get(word)
        if reading and word not in NEUTRAL_GE_WORDS:
            reading = ["ge4" if c == "个" and s == "ge5" else s for c, s in zip(word, reading)]
        if reading and reading != default(word):
            phrases[word] = reading

    os.makedirs(out_dir, exist_ok=True)
    with lzma.open(os.path.join(out_dir, "words.tsv.xz"), "wt", encoding="utf-8",
                   preset=9) as out:
        for word in sorted(words):
            out.write(f"{word}\t{words[word][0]}\t{words[word][1]}\n")
    with open(os.path.join(out_dir, "chars.tsv"), "w", encoding="utf-8") as out:
        for char in sorted(char_readings):
            out.write(f"{char}\t{' '.join(char_readings[char])}\n")
    with open(os.path.join(out_dir, "phrases.tsv"), "w", encoding="utf-8") as out:
        for word in sorted(phrases):
            out.write(f"{word}\t{' '.join(phrases[word])}\n")
    return len(words), len(char_readings), len(phrases)


def table_text(path):
    """A table's text, the .xz one's decompressed (its bytes depend on liblzma's version)."""
    with (lzma.open if path.endswith(".xz") else open)(path, "rt", encoding="utf-8") as f:
        return f.read()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "data",
                                                      "zh"))
    parser.add_argument("--check", action="store_true",
                        help="build into a temporary folder and compare with --out")
    args = parser.parse_args()
    for path in (JIEBA_DICT, GO_PINYIN_DICT, TERRA_DICT, LUNA_DICT):
        if not os.path.exists(path):
            sys.exit(f"{path} is missing: install Makefile's ZH_DATA_PACKAGES")
    if not args.check:
        print("words %d, characters %d, phrases %d" % build(args.out))
        return
    with tempfile.TemporaryDirectory() as fresh:
        build(fresh)
        for name in ("words.tsv.xz", "chars.tsv", "phrases.tsv"):
            if table_text(os.path.join(fresh, name)) != table_text(os.path.join(args.out, name)):
                sys.exit(f"{name} differs from what {__file__} builds: rebuild it")
    print("data/zh is what the script builds")


if __name__ == "__main__":
    main()
