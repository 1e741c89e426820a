#!/usr/bin/env python3
"""KAN-TTS's own symbol strings for prosody-annotated Chinese sentences: the fixture that
src/families/sambert/pinyin_symbols.h is checked against (tests/families/sambert).

KAN-TTS's training-data converter (kantts/preprocess/script_convertor, TextScriptConvertor) turns
a sentence with prosodic breaks ("今天#1天气#2真好#4") and its pinyin into the symbol strings its
models read, by the rules its closed front end (ttsfrd) follows. This script runs that converter,
from a KAN-TTS source tree, on CASES below and writes, for each, the words (hanzi, voxd's pinyin,
the break after) and the converter's string, to tests/fixtures/sambert_symbols/text_cases.json.

KAN-TTS spells ü as v after j, q, x and y too (xve2, qv4): the converter is given that spelling;
voxd's side keeps ordinary pinyin (xue2, qu4), as its front end writes it.

    /usr/bin/python3 tools/reference/kantts_text_symbol_fixtures.py --kantts KAN-TTS [--out FILE]

Standard library only; the converter's imports of tqdm and bitstring are stubbed (unused here).
"""
import argparse
import json
import os
import sys
import tempfile
import types

# (hanzi, voxd's pinyin, break after) per word; a sentence ends with #4.
CASES = [
    [("今天", "jin1 tian1", 1), ("天气", "tian1 qi4", 2), ("真好", "zhen1 hao3", 4)],
    [("我", "wo3", 1), ("的", "de5", 2), ("花儿", "huar1", 1), ("很", "hen3", 1),
     ("好看", "hao3 kan4", 3), ("啊", "a5", 4)],
    [("一个", "yi2 ge5", 1), ("饿", "e4", 1), ("儿子", "er2 zi5", 2), ("嗯", "ng2", 4)],
    [("女", "nv3", 1), ("绿", "lv4", 1), ("学", "xue2", 1), ("旅游", "lv3 you2", 1),
     ("去", "qu4", 4)],
    [("北京", "bei3 jing1", 1), ("今天", "jin1 tian1", 1), ("天气", "tian1 qi4", 1),
     ("怎么样", "zen3 me5 yang4", 4)],
    [("知道", "zhi1 dao4", 1), ("吃饭", "chi1 fan4", 1), ("日子", "ri4 zi5", 1),
     ("词语", "ci2 yu3", 1), ("四", "si4", 1), ("是", "shi4", 4)],
    [("球", "qiu2", 1), ("对", "dui4", 1), ("顺", "shun4", 1), ("熊", "xiong2", 1),
     ("窗", "chuang1", 1), ("翁", "weng1", 1), ("元", "yuan2", 1), ("军", "jun1", 4)],
    [("一点儿", "yi4 dianr3", 1), ("哪儿", "nar3", 1), ("这儿", "zher4", 1),
     ("玩儿", "wanr2", 1), ("一会儿", "yi2 huir4", 4)],
    [("安", "an1", 1), ("恩", "en1", 1), ("欧", "ou1", 1), ("额", "e2", 1), ("昂", "ang2", 1),
     ("二", "er4", 1), ("哦", "o2", 4)],
    [("小老虎", "xiao3 lao3 hu3", 3), ("展览馆", "zhan3 lan3 guan3", 4)],
]


def kantts_spelling(syllable):
    """ü as v after j, q, x and y, as KAN-TTS's py2phoneMap keys have it (xue2 -> xve2)."""
    if len(syllable) > 1 and syllable[0] in "jqxy" and syllable[1] == "u":
        return syllable[0] + "v" + syllable[2:]
    return syllable


def load_converter(kantts):
    """KAN-TTS's TextScriptConvertor, without running kantts/__init__.py (which imports torch)."""
    for name, path in (("kantts", "kantts"), ("kantts.preprocess", "kantts/preprocess")):
        package = types.ModuleType(name)
        package.__path__ = [os.path.join(kantts, path)]
        sys.modules[name] = package
    sys.modules["tqdm"] = types.SimpleNamespace(tqdm=lambda items, *a, **k: items)
    sys.modules["bitstring"] = types.SimpleNamespace(BitArray=object)
    from kantts.preprocess.script_convertor.TextScriptConvertor import TextScriptConvertor
    return TextScriptConvertor


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kantts", required=True, help="a KAN-TTS source tree")
    parser.add_argument("--out", default=os.path.join(
        os.path.dirname(__file__), "..", "..", "tests", "fixtures", "sambert_symbols",
        "text_cases.json"))
    args = parser.parse_args()
    converter_class = load_converter(os.path.abspath(args.kantts))
    inventory = os.path.join(args.kantts, "kantts", "preprocess", "languages", "PinYin")
    converter = converter_class(
        os.path.join(inventory, "PhoneSet.xml"), os.path.join(inventory, "PosSet.xml"), "PinYin",
        "EnUS", os.path.join(inventory, "En2ChPhoneMap.txt"),
        os.path.join(inventory, "py2phoneMap.txt"), None, "F7")
    with tempfile.TemporaryDirectory() as work:
        script = os.path.join(work, "script.txt")
        with open(script, "w", encoding="utf-8") as f:
            for number, words in enumerate(CASES):
                text = "".join(f"{hanzi}#{mark}" for hanzi, _, mark in words)
                pinyin = " ".join(kantts_spelling(s) for _, reading, _ in words
                                  for s in reading.split())
                f.write(f"{number:06d}\t{text}\n\t{pinyin}\n")
        meta = os.path.join(work, "meta.txt")
        converter.process(script, os.path.join(work, "out.xml"), meta)
        with open(meta, encoding="utf-8") as f:
            lines = dict(line.rstrip("\n").split("\t", 1) for line in f if line.strip())
    cases = [{"words": [{"hanzi": hanzi, "pinyin": reading.split(), "break": mark}
                        for hanzi, reading, mark in words],
              "symbols": lines[f"{number:06d}"]} for number, words in enumerate(CASES)]
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump({"source": "KAN-TTS TextScriptConvertor (tools/reference/"
                             "kantts_text_symbol_fixtures.py)", "cases": cases},
                  f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {len(cases)} cases to {args.out}")


if __name__ == "__main__":
    main()
