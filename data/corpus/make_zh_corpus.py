#!/usr/bin/env python3
"""Regenerates zh-sentences.txt and zh-heldout.txt from Debian's simplified-Chinese manuals.

Source: the HTML of Debian 12's `debian-reference-zh-cn` and `maint-guide-zh-cn` packages (both
GPL-2+; see README.md, which also says why `debian-faq-zh-cn` is left out). The script takes
the running prose of each page (no code, commands, screens, tables, headings, tables of
contents or navigation), splits it into sentences at 。！？ and keeps the sentences a hanzi
front end reads cleanly: Chinese characters, a few digits and the punctuation ，、；：。！？“”《》（）
only (no Latin letters), 8-60 characters, balanced brackets and quotes. It then picks a fixed,
varied selection. Python 3 stdlib only; the output depends only on the installed HTML files
(selection by SHA-1 of the sentence).

The manuals give far fewer such sentences than TRAIN_COUNT (most of their sentences name a
command or a package). The rest of the training file is generated: clauses of words drawn by
frequency from jieba's word list (Debian's python3-jieba, dict.txt, MIT; the list data/zh is
built from), with a fixed seed. They are not meaningful Chinese, but the teacher (eSpeak NG
reading the front end's pinyin) reads syllables, tones and word boundaries, not meaning, and the
drawn words cover far more syllables and tone pairs than the manuals' vocabulary. The held-out
sentences are all from the manuals.

Usage: python3 data/corpus/make_zh_corpus.py [--root DIR] [--out-dir DIR]
"""

import argparse
import collections
import hashlib
import html.parser
import bisect
import random
import pathlib
import re
import sys

TRAIN_COUNT = 4000
HELDOUT_COUNT = 20
MIN_CHARS, MAX_CHARS = 8, 60
MAX_DIGITS = 4          # digit characters in a sentence (a year, a version, a count)
MIN_HANZI_SHARE = 0.7   # of all characters, punctuation included

# (Debian package, folder, file pattern), read in this order. debian-faq-zh-cn
# (/usr/share/doc/debian/FAQ/zh-cn/*.zh-cn.html) is left out: README.md says why.
SOURCES = (
    ("debian-reference-zh-cn", "usr/share/debian-reference", "*.zh-cn.html"),
    ("maint-guide-zh-cn", "usr/share/doc/maint-guide-zh-cn/html", "*.zh-cn.html"),
)

# Elements whose whole content is dropped and that end the running text: program listings and
# screens, tables (command and package tables), headings and titles, tables of contents,
# navigation, the book's title page (authors, copyright, legal notice; its abstract is kept).
HEADING_TAGS = {"h1", "h2", "h3", "h4", "h5", "h6"}
SKIP_TAGS = {"head", "script", "style", "pre", "table"} | HEADING_TAGS
SKIP_CLASSES = {"toc", "navheader", "navfooter", "title", "subtitle", "list-of-tables",
                "legalnotice", "authorgroup", "author", "othercredit", "editor", "copyright",
                "releaseinfo", "pubdate", "revhistory"}
LISTING_TAGS = {"pre", "table"}
HEADING_NUMBER = re.compile(r"^[0-9A-Z]+(?:\.[0-9]+)*\.?\s+")   # "6.2. " before a title
# Inline code: the text around it is no longer a sentence without it, so it becomes a mark
# that no kept sentence may contain.
CODE_TAGS = {"code", "tt", "kbd", "samp", "var"}
CODE_CLASSES = {"command", "filename", "literal", "systemitem", "replaceable", "package",
                "citerefentry", "refentrytitle", "email"}
CODE_MARK = "\ufffc"
FOOTNOTE_CLASSES = {"footnote", "para"}
# Inline elements; every other element starts and ends a block of running text.
INLINE_TAGS = {"a", "em", "strong", "span", "b", "i", "u", "abbr", "acronym", "cite", "q",
               "small", "big", "font", "img", "sup", "sub"} | CODE_TAGS
VOID_TAGS = {"br", "hr", "img", "meta", "link", "col", "input", "area", "base", "param"}

HANZI = r"\u3400-\u4dbf\u4e00-\u9fff"          # CJK unified ideographs and extension A
PUNCT = "，、；：。！？“”《》（）"
KEEP = re.compile(rf"^[{HANZI}0-9{PUNCT}]+$")
IS_HANZI = re.compile(rf"[{HANZI}]")
HANZI_ONLY = re.compile(rf"[{HANZI}]+")
PAIRS = {"“": "”", "《": "》", "（": "）"}
ASCII_PUNCT = str.maketrans({"(": "（", ")": "）", ";": "；", "?": "？", "!": "！"})
# DocBook ends a paragraph at a screen or table inside it and puts the rest in a new one: a
# block after a listing that starts with one of these continues a sentence (来获得相同的信息。).
CONTINUATION = "的地得了着过来以和并而及与中时后"
# A sentence ends at 。！？ (a run of them), with any closing quote or bracket after it.
SENTENCE = re.compile(r"[^。！？]*[。！？]+[”）》]*")


class ProseParser(html.parser.HTMLParser):
    """Collects the running text of a DocBook HTML page as a list of blocks (paragraphs, list
    items, notes), each as (text, whether it comes right after a listing or table): a sentence
    never spans two blocks. A heading is kept as a block of its own only when it is a whole
    question or exclamation (谁在系统里？)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.blocks, self.current, self.heading = [], [], None
        self.after_listing = self.current_after_listing = False
        self.stack = []      # open elements: (tag, skipped, code, footnote mark)
        self.skip = self.code = self.sup = 0

    def _end_block(self):
        text = "".join(self.current)
        if text.strip():
            self.blocks.append((text, self.current_after_listing))
        self.current = []

    def handle_starttag(self, tag, attrs):
        classes = set((dict(attrs).get("class") or "").split())
        if tag not in INLINE_TAGS:
            self._end_block()
        if tag in VOID_TAGS:
            return
        skipped = tag in SKIP_TAGS or bool(classes & SKIP_CLASSES)
        # A footnote mark ([1]) inside a sentence is left out silently; other super- and
        # subscripts count as code.
        sup = tag == "sup" and bool(classes & FOOTNOTE_CLASSES)
        code = tag in CODE_TAGS or bool(classes & CODE_CLASSES) or (tag in ("sup", "sub")
                                                                     and not sup)
        if tag in HEADING_TAGS and not self.skip:
            self.heading = []
        self.stack.append((tag, skipped, code, sup))
        self.skip += skipped
        self.code += code
        self.sup += sup
        if code and not self.sup:
            self._text(CODE_MARK)

    def handle_startendtag(self, tag, attrs):
        if tag not in INLINE_TAGS:
            self._end_block()

    def handle_endtag(self, tag):
        if tag in VOID_TAGS or not any(t == tag for t, *_ in self.stack):
            return
        while self.stack:
            name, skipped, code, sup = self.stack.pop()
            self.skip -= skipped
            self.code -= code
            self.sup -= sup
            if name == tag:
                break
        if tag in HEADING_TAGS and self.heading is not None and not self.skip:
            title = HEADING_NUMBER.sub("", " ".join("".join(self.heading).split()))
            if title.endswith(("？", "！")):
                self.blocks.append((title, False))
            self.heading = None
        if tag in LISTING_TAGS:
            self.after_listing = True
        if tag not in INLINE_TAGS:
            self._end_block()

    def _text(self, data):
        if self.heading is not None and self.skip == 1:
            self.heading.append(data)   # the text of the heading being read
        elif not self.skip:
            if not "".join(self.current).strip() and data.strip():
                self.current_after_listing, self.after_listing = self.after_listing, False
            self.current.append(data)

    def handle_data(self, data):
        if not self.code and not self.sup:
            self._text(data)

    def close(self):
        super().close()
        self._end_block()


def read_blocks(path):
    parser = ProseParser()
    parser.feed(path.read_text(encoding="utf-8"))
    parser.close()
    return parser.blocks


def balanced(text):
    """True when “” 《》 （） open and close in order, properly nested."""
    stack = []
    for c in text:
        if c in PAIRS:
            stack.append(PAIRS[c])
        elif c in PAIRS.values():
            if not stack or stack.pop() != c:
                return False
    return not stack


def normalise(block):
    """The block's text on one line, with the ASCII punctuation that the translations use
    between Chinese words made full-width: ( ) ; ? ! and , : except between digits (1,000,
    12:30, which then fail the character check)."""
    text = " ".join(block.split())
    text = text.translate(ASCII_PUNCT)
    return re.sub(r"(?<![0-9])[,:]|[,:](?![0-9])", lambda m: "，" if m.group(0) == "," else "：",
                  text)


def split_sentences(text):
    """Splits a normalised block at 。！？; the text after the last mark (a heading, a list
    fragment, a sentence ending in a colon before a listing) is not a sentence and is dropped."""
    return [m.group(0).strip() for m in SENTENCE.finditer(text) if m.group(0).strip()]


def clean(raw):
    """(sentence, None) when a hanzi front end reads `raw` cleanly as a whole sentence, else
    (None, the reason it is dropped)."""
    if re.search(r"[A-Za-z]", raw):
        return None, "Latin letters"
    if CODE_MARK in raw:
        return None, "inline code"
    if re.search(r"[0-9] [0-9]", raw):
        return None, "spaced digits"
    text = raw.replace(" ", "")   # the translations space digits from hanzi: 第 3 章
    if text.count('"') == 2:
        text = text.replace('"', "“", 1).replace('"', "”", 1)
    if not KEEP.match(text):
        return None, "other characters"
    if not MIN_CHARS <= len(text) <= MAX_CHARS:
        return None, "length"
    if not balanced(text):
        return None, "unbalanced brackets or quotes"
    if text[0] in "，、；：。！？”》）":
        return None, "fragment"
    if len(re.findall(r"[0-9]", text)) > MAX_DIGITS:
        return None, "too many digits"
    if len(IS_HANZI.findall(text)) < MIN_HANZI_SHARE * len(text):
        return None, "too few hanzi"
    return text, None


def ending(sentence):
    """The sentence's final mark (。！？), behind any closing quote or bracket."""
    return sentence.rstrip("”》）")[-1]


def rank(sentence):
    """A fixed pseudo-random sort key, so the selection mixes documents and topics."""
    return hashlib.sha1(sentence.encode("utf-8")).hexdigest()


def select(candidates):
    """Splits the unique sentences into (training, held-out): questions, exclamations and
    sentences with a digit first (they are rare; up to a quarter of the selection), then the
    rest, each in rank order; the first HELDOUT_COUNT of the mix in rank order are held out."""
    special = sorted((s for s in candidates if ending(s) in "？！" or re.search(r"[0-9]", s)),
                     key=rank)
    special_set = set(special)
    plain = sorted((s for s in candidates if s not in special_set), key=rank)
    chosen = special[: (TRAIN_COUNT + HELDOUT_COUNT) // 4]
    chosen += plain[: TRAIN_COUNT + HELDOUT_COUNT - len(chosen)]
    chosen.sort(key=rank)
    return chosen[HELDOUT_COUNT:], chosen[:HELDOUT_COUNT]


JIEBA_DICT = "usr/lib/python3/dist-packages/jieba/dict.txt"
MIN_WORD_COUNT = 50  # jieba's count: rarer words are often names or typos
SEED = 20261202


def generated_sentences(dict_path, count, taken):
    """`count` sentences of 2-3 clauses of 2-5 words each, the words drawn from jieba's list in
    proportion to their counts (hanzi-only words of 1-4 characters); mostly statements, one in
    eight a question, one in sixteen an exclamation. None is in `taken`."""
    words, totals = [], []
    with open(dict_path, encoding="utf-8") as f:
        for line in f:
            word, number = line.split()[:2]
            if int(number) >= MIN_WORD_COUNT and len(word) <= 4 and HANZI_ONLY.fullmatch(word):
                words.append(word)
                totals.append((totals[-1] if totals else 0) + int(number))
    rng = random.Random(SEED)
    out, seen = [], set(taken)
    while len(out) < count:
        clauses = []
        for _ in range(rng.randint(2, 3)):
            drawn = [words[bisect.bisect_right(totals, rng.randrange(totals[-1]))]
                     for _ in range(rng.randint(2, 5))]
            clauses.append("".join(drawn))
        roll = rng.randrange(16)
        sentence = "，".join(clauses) + ("？" if roll < 2 else "！" if roll == 2 else "。")
        if MIN_CHARS <= len(sentence) <= MAX_CHARS and sentence not in seen:
            seen.add(sentence)
            out.append(sentence)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default="/", help="file system root holding the packages")
    parser.add_argument("--out-dir", default=str(pathlib.Path(__file__).resolve().parent))
    args = parser.parse_args()
    root = pathlib.Path(args.root)
    candidates, source = [], {}
    split, dropped = collections.Counter(), collections.Counter()
    for package, folder, pattern in SOURCES:
        files = sorted((root / folder).glob(pattern))
        if not files:
            sys.exit(f"{root / folder}/{pattern}: not found (apt-get install {package})")
        for path in files:
            for block, after_listing in read_blocks(path):
                for i, raw in enumerate(split_sentences(normalise(block))):
                    split[package] += 1
                    text, reason = clean(raw)
                    if text and i == 0 and after_listing and text[0] in CONTINUATION:
                        text, reason = None, "continues a sentence before a listing"
                    if text in source:
                        reason = "duplicate"
                    if reason:
                        dropped[reason] += 1
                        continue
                    source[text] = package
                    candidates.append(text)
    train, heldout = select(candidates)
    natural = len(train)
    jieba_dict = root / JIEBA_DICT
    if not jieba_dict.is_file():
        sys.exit(f"{jieba_dict}: not found (apt-get install python3-jieba)")
    train += generated_sentences(jieba_dict, TRAIN_COUNT - natural, set(train) | set(heldout))
    out = pathlib.Path(args.out_dir)
    (out / "zh-sentences.txt").write_text("\n".join(train) + "\n", encoding="utf-8")
    (out / "zh-heldout.txt").write_text("\n".join(heldout) + "\n", encoding="utf-8")
    print(f"{sum(split.values())} sentences in the prose, {len(candidates)} candidates; wrote "
          f"{len(train)} training and {len(heldout)} held-out sentences to {out}")
    print("  dropped: " + ", ".join(f"{reason} {n}" for reason, n in dropped.most_common()))
    for package, _, _ in SOURCES:
        print(f"  {package}: {split[package]} sentences, "
              f"{sum(source[s] == package for s in candidates)} candidates, "
              f"{sum(source.get(s) == package for s in train)} in training, "
              f"{sum(source[s] == package for s in heldout)} held out")
    print(f"  training: {sum(ending(s) == '？' for s in train)} questions, "
          f"{sum(ending(s) == '！' for s in train)} exclamations, "
          f"{sum(bool(re.search(r'[0-9]', s)) for s in train)} with digits, "
          f"{sum(map(len, train))} characters")
    print(f"  training: {natural} from the manuals, {len(train) - natural} generated from "
          f"jieba's word list")


if __name__ == "__main__":
    main()
