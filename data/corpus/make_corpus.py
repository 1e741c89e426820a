#!/usr/bin/env python3
"""Regenerates en-sentences.txt and en-heldout.txt from WordNet 3.0's usage examples.

Source: Debian 12's `wordnet-base` package (/usr/share/wordnet/data.{noun,verb,adj,adv}),
WordNet 3.0 licence (Princeton University, permissive; see README.md). Each synset's gloss
holds quoted usage examples ("the dog barked all night"); this script keeps the ones that read
as whole sentences, cleans them, and picks a fixed, varied selection. Python 3 stdlib only;
the output depends only on the installed data files (selection by SHA-1 of the sentence).

Usage: python3 data/corpus/make_corpus.py [--wordnet DIR] [--out-dir DIR]
"""

import argparse
import hashlib
import pathlib
import re
import sys

TRAIN_COUNT = 4000
HELDOUT_COUNT = 20
MIN_WORDS, MAX_WORDS = 4, 25
# Lowercase examples are kept only when they start like a clause (a subject pronoun or a
# question word); capitalised examples are written as sentences in WordNet.
CLAUSE_STARTS = {
    "he", "she", "they", "we", "i", "you", "it", "this", "there",
    "how", "what", "why", "who", "where", "when", "which", "do", "does", "did",
    "can", "could", "will", "would", "is", "are", "was", "were", "have", "has",
}
ALLOWED = re.compile(r"^[A-Za-z0-9 ,.;:!?'()$%\"-]+$")
QUOTED = re.compile(r'"([^"]+)"')


def read_examples(wordnet_dir):
    """Yields every quoted usage example from the glosses of WordNet's four data files."""
    for pos in ("noun", "verb", "adj", "adv"):
        path = pathlib.Path(wordnet_dir) / f"data.{pos}"
        with open(path, encoding="latin-1") as f:
            for line in f:
                if line.startswith("  ") or " | " not in line:
                    continue  # the licence header, or a line without a gloss
                yield from QUOTED.findall(line.split(" | ", 1)[1])


def balanced(text):
    """True when the parentheses of `text` open and close in order."""
    depth = 0
    for c in text:
        depth += {"(": 1, ")": -1}.get(c, 0)
        if depth < 0:
            return False
    return depth == 0


def clean(example):
    """The example as a sentence (capitalised, with end punctuation), or None for a fragment or
    anything the teacher might read badly (odd symbols, several sentences, wrong length)."""
    text = " ".join(example.split())
    text = re.sub(r" ([,;:!?.])", r"\1", text)
    if not text or not ALLOWED.match(text) or "--" in text or "''" in text:
        return None
    if not balanced(text) or text.count('"') % 2:
        return None
    words = text.split()
    if not MIN_WORDS <= len(words) <= MAX_WORDS:
        return None
    first = words[0].lower().strip("'\"(")
    if not text[0].isupper() and first not in CLAUSE_STARTS:
        return None
    if re.search(r"[.!?]\s", text):
        return None  # more than one sentence
    if not re.search(r"[A-Za-z]{2}", text):
        return None
    text = text[0].upper() + text[1:]
    if text[-1] in ",;:":
        text = text[:-1]
    if text[-1] not in ".!?":
        text += "."
    return text


def rank(sentence):
    """A fixed pseudo-random sort key, so the selection mixes sources and topics."""
    return hashlib.sha1(sentence.encode("utf-8")).hexdigest()


def select(sentences):
    """Splits the unique cleaned sentences into (training, held-out): every question,
    exclamation and sentence with a digit first (they are rare), then the rest in rank order."""
    special = [s for s in sentences if s[-1] in "?!" or re.search(r"[0-9]", s)]
    plain = [s for s in sentences if s not in set(special)]
    special.sort(key=rank)
    plain.sort(key=rank)
    chosen = special[: (TRAIN_COUNT + HELDOUT_COUNT) // 4]
    chosen += plain[: TRAIN_COUNT + HELDOUT_COUNT - len(chosen)]
    chosen.sort(key=rank)
    return chosen[HELDOUT_COUNT:], chosen[:HELDOUT_COUNT]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wordnet", default="/usr/share/wordnet",
                        help="WordNet 3.0 database folder (Debian: wordnet-base)")
    parser.add_argument("--out-dir", default=str(pathlib.Path(__file__).resolve().parent))
    args = parser.parse_args()
    if not (pathlib.Path(args.wordnet) / "data.noun").is_file():
        sys.exit(f"{args.wordnet}/data.noun: not found (apt-get install wordnet-base)")
    seen, sentences = set(), []
    for example in read_examples(args.wordnet):
        sentence = clean(example)
        if sentence and sentence.lower() not in seen:
            seen.add(sentence.lower())
            sentences.append(sentence)
    train, heldout = select(sentences)
    out = pathlib.Path(args.out_dir)
    (out / "en-sentences.txt").write_text("\n".join(train) + "\n", encoding="utf-8")
    (out / "en-heldout.txt").write_text("\n".join(heldout) + "\n", encoding="utf-8")
    print(f"{len(sentences)} candidate sentences; wrote {len(train)} training and "
          f"{len(heldout)} held-out sentences to {out}")


if __name__ == "__main__":
    main()
