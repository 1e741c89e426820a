#!/usr/bin/env python3
"""Fixtures for the Sambert symbol parser (tests/families/sambert/symbols_test.cpp), with ids made
by KAN-TTS's own linguistic unit.

Input, hand-written (tests/fixtures/sambert_symbols/inventory/): a made-up language inventory in
KAN-TTS's format, PhoneSet.xml (17 phones in the original's schema and namespace, <id> values not
in document order) and tonelist.txt (5 lines, one empty), used with LINGUISTIC_UNIT below (three
speakers).

make(out_dir, kantts_src) writes into out_dir:
  symbols.json  tools/kantts_symbols.py's symbol_lists() of that inventory: what the converter
                stores in a voice and SambertSymbols::from_json reads
  cases.json    {"original": the sha256 of the KAN-TTS files run,
                 "linguistic_unit": LINGUISTIC_UNIT,
                 "cases": [{"name", "symbols", "ids": {"sy", "tone", "syllable_flag",
                            "word_segment", "emotion", "speaker"}}],
                 "refused": [{"name", "symbols", "error", "original"}]}
                "ids" are what KanTtsLinguisticUnit.encode_symbol_sequence returns with the last
                column (the appended "~") dropped, as kantts/bin/infer_sambert.py:am_synthesis
                drops it: what the model receives. "refused" are inputs voxd refuses: "error" is
                a substring of voxd's message (our wording), "original" what KAN-TTS made of it,
                {"ids": every channel with its "~"} where it accepted it (an unknown sy is
                dropped, so the channels differ in length; a reserved value gets its id; an
                extra field is ignored) or {"exception": "..."} where it failed.

The ids come from running the ORIGINAL code: kantts_src is an extracted KAN-TTS source tree
(the folder holding kantts/), e.g.

    git --git-dir=<mirror of modelscope/KAN-TTS> archive HEAD kantts | tar -x -C /tmp/kantts_src

It is copied to a temporary folder whose languages/PinYin/PhoneSet.xml and tonelist.txt are
replaced by the made-up inventory (LINGUISTIC_UNIT names no language, so PinYin's are read), and
the modules it imports that are not installed are stubbed: ttsfrd (imported by
kantts/utils/ling_unit/__init__.py, unused here), unidecode and inflect (the cleaners', which only
ever see the spaces between the braced sy fields), numpy (asarray only). The run checks that
symbol_lists() equals the original's lists and symbol-to-id dicts, channel by channel. Without a
KAN-TTS tree only symbols.json is written. Standard library only:

    /usr/bin/python3 tools/reference/sambert_symbol_fixtures.py --kantts /tmp/kantts_src \\
        [--out tests/fixtures/sambert_symbols]

Checked with modelscope/KAN-TTS at 66202d0.
"""
import argparse
import hashlib
import importlib
import importlib.util
import json
import os
import random
import shutil
import sys
import tempfile
import types

_TOOLS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _TOOLS not in sys.path:
    sys.path.insert(0, _TOOLS)

import kantts_symbols  # noqa: E402

_REPO = os.path.dirname(_TOOLS)
INVENTORY = os.path.join(_REPO, "tests", "fixtures", "sambert_symbols", "inventory")
DEFAULT_OUT = os.path.join(_REPO, "tests", "fixtures", "sambert_symbols")

LINGUISTIC_UNIT = {
    "cleaners": "english_cleaners",
    "lfeat_type_list": "sy,tone,syllable_flag,word_segment,emo_category,speaker_category",
    "speaker_list": "F7,xiaoyu,M7",
}

# The KAN-TTS files whose behaviour the fixtures record.
_ORIGINAL_FILES = ["kantts/utils/ling_unit/ling_unit.py",
                   "kantts/utils/ling_unit/lang_symbols.py",
                   "kantts/utils/ling_unit/emotion_types.py",
                   "kantts/preprocess/languages/__init__.py"]

# Channel names in the original's order, and their names in cases.json's "ids".
_CHANNELS = ["sy", "tone", "syllable_flag", "word_segment", "emo_category", "speaker_category"]
_ID_NAMES = ["sy", "tone", "syllable_flag", "word_segment", "emotion", "speaker"]


def tok(sy, tone="tone_none", syllable="s_both", word="word_both", emotion="emotion_neutral",
        speaker="F7"):
    return "{" + "$".join([sy, tone, syllable, word, emotion, speaker]) + "}"


def _brk(n, emotion="emotion_neutral", speaker="F7"):
    return tok(f"#{n}", "tone_none", "s_none", "word_none", emotion, speaker)


def _fp(initial, final, speaker="F7"):
    """One of get_fpdict's filled-pause templates."""
    return " ".join([tok(initial, "tone5", "s_begin", "word_begin", "emotion_neutral", speaker),
                     tok(final, "tone5", "s_end", "word_end", "emotion_neutral", speaker),
                     _brk(3, "emotion_neutral", speaker)])


def _word(syllables, emotion, speaker):
    """Tokens of one word: syllables are lists of (phone, tone); positions as KAN-TTS's
    script converter writes them (s_both for a one-phone syllable, else begin/middle/end; the
    word's first phone word_begin, its last word_end, word_both for a one-phone word)."""
    phones = [(p, t, i, len(s)) for s in syllables for i, (p, t) in enumerate(s)]
    out = []
    for k, (phone, tone, i, n) in enumerate(phones):
        syllable = "s_both" if n == 1 else "s_begin" if i == 0 else "s_end" if i == n - 1 \
            else "s_middle"
        word = "word_both" if len(phones) == 1 else "word_begin" if k == 0 else \
            "word_end" if k == len(phones) - 1 else "word_middle"
        out.append(tok(phone, tone, syllable, word, emotion, speaker))
    return out


def _every_value(lists):
    """One token per emotion, the other channels cycling through all their values."""
    real = {c: lists[c][:-3] for c in _CHANNELS}
    out = []
    for i, emotion in enumerate(real["emo_category"]):
        out.append(tok(real["sy"][i % len(real["sy"])][1:], real["tone"][i % len(real["tone"])],
                       real["syllable_flag"][i % 5], real["word_segment"][(i + 2) % 5], emotion,
                       real["speaker_category"][i % len(real["speaker_category"])]))
    return " ".join(out)


def _long(seed, min_tokens):
    """A long made-up utterance: words of Chinese-like syllables (initial + final, or a final) and
    English-like ones, breaks between words, emotion and speaker changing per sentence."""
    rng = random.Random(seed)
    initials, finals = ["g_c", "h_c", "n_c"], ["a_c", "ao_c", "e_c", "en_c", "i_c", "ar_c"]
    english = ["hh", "aa", "l", "iy", "ow"]
    tones = ["tone3", "tone1", "tone5", "tone2"]
    emotions = kantts_symbols.EMOTION_TYPES
    out = []
    while len(out) < min_tokens:
        emotion, speaker = rng.choice(emotions), rng.choice(["F7", "xiaoyu", "M7"])
        for _ in range(rng.randint(3, 7)):
            if rng.random() < 0.25:
                word = [[(p, "tone_none") for p in rng.sample(english, rng.randint(1, 3))]]
            else:
                word = []
                for _ in range(rng.randint(1, 3)):
                    tone = rng.choice(tones)
                    syllable = [(rng.choice(finals), tone)]
                    if rng.random() < 0.7:
                        syllable.insert(0, (rng.choice(initials), tone))
                    word.append(syllable)
            out += _word(word, emotion, speaker)
            if rng.random() < 0.6:
                out.append(_brk(rng.randint(1, 3), emotion, speaker))
        out.append(_brk(4, emotion, speaker))
    return " ".join(out)


def cases(lists):
    """(name, symbols) of the inputs voxd accepts; KAN-TTS accepts them too."""
    hello = _word([[("n_c", "tone3"), ("i_c", "tone3")], [("h_c", "tone3"), ("ao_c", "tone3")]],
                  "emotion_neutral", "F7")
    return [
        ("filled_pause_en", _fp("ge", "en_c")),
        ("filled_pause_a", _fp("ga", "a_c", "xiaoyu")),
        ("one_token", tok("pau", "tone_none", "s_both", "word_both", "emotion_neutral", "M7")),
        ("breaks", " ".join(
            [_brk(1)] + hello + [_brk(1)]
            + _word([[("g_c", "tone1"), ("e_c", "tone1")]], "emotion_neutral", "F7") + [_brk(2)]
            + _word([[("a_c", "tone5")]], "emotion_neutral", "F7") + [_brk(3)]
            + _word([[("h_c", "tone2"), ("ar_c", "tone2")], [("en_c", "tone5")]],
                    "emotion_neutral", "F7") + [_brk(4), tok("pau")])),
        ("english", " ".join(
            _word([[("hh", "tone_none"), ("aa", "tone_none")], [("l", "tone_none"),
                   ("ow", "tone_none")]], "emotion_calm", "M7")
            + [_brk(1, "emotion_calm", "M7")]
            + _word([[("iy", "tone_none")]], "emotion_calm", "M7")
            + [_brk(4, "emotion_calm", "M7")])),
        ("syllable_middle", " ".join(_word(
            [[("h_c", "tone1"), ("ao_c", "tone1"), ("ar_c", "tone1")], [("g_c", "tone2"),
              ("e_c", "tone2"), ("n_c", "tone2")]], "emotion_gentle", "xiaoyu"))),
        ("speakers", " ".join(
            _word([[("n_c", "tone3"), ("i_c", "tone3")]], "emotion_neutral", "F7")
            + _word([[("h_c", "tone3"), ("ao_c", "tone3")]], "emotion_neutral", "xiaoyu")
            + _word([[("ga", "tone5"), ("a_c", "tone5")]], "emotion_neutral", "M7")
            + [_brk(4, "emotion_neutral", "xiaoyu")])),
        ("emotions", " ".join(
            [tok("a_c", "tone1", "s_both", "word_both", e, s) for e, s in
             [("emotion_none", "F7"), ("emotion_happy", "M7"), ("emotion_sad", "xiaoyu"),
              ("emotion_angry", "F7"), ("emotion_dominance", "M7"),
              ("emotion_placeholder9", "xiaoyu")]])),
        ("every_value", _every_value(lists)),
        # KAN-TTS strips the string, and "{" then "}" from both ends of each token: braces are
        # optional.
        ("unbraced_and_padded", "  " + " ".join([
            "ga$tone1$s_begin$word_begin$emotion_excited$xiaoyu",
            "{a_c$tone1$s_end$word_end$emotion_excited$xiaoyu",
            "e_c$tone2$s_both$word_both$emotion_excited$xiaoyu}",
            "{{#4$tone_none$s_none$word_none$emotion_excited$xiaoyu}}"]) + "\n"),
        ("long", _long(2024, 160)),
    ]


def refused():
    """(name, symbols, substring of voxd's message, whether KAN-TTS accepts the input)."""
    a, b = tok("a_c", "tone1", "s_begin", "word_begin"), tok("en_c", "tone1", "s_end", "word_end")
    return [
        ("unknown_sy", " ".join([a, tok("zz_c"), b]),
         "token 1 ({zz_c$tone_none$s_both$word_both$emotion_neutral$F7}): sy 'zz_c' is not in "
         "the voice's inventory", True),
        ("sy_case", " ".join([a, tok("A_c")]), "token 1 (", True),
        ("sy_prefixed", tok("@a_c"), "token 0 ({@a_c$tone_none$s_both$word_both$emotion_neutral"
         "$F7}): sy '@a_c' is not in the voice's inventory", True),
        ("sy_pad", " ".join([a, tok("_"), b]), "token 1 ({_$tone_none$s_both$word_both$"
         "emotion_neutral$F7}): sy '_' is not in the voice's inventory", True),
        ("sy_mask", tok("[MASK]"), "sy '[MASK]' is a reserved entry", True),
        ("sy_brace_inside", " ".join([a, "{a_c}x$tone1$s_end$word_end$emotion_neutral$F7}"]),
         "token 1 ({a_c}x$tone1$s_end$word_end$emotion_neutral$F7}): sy 'a_c}x' is not in the "
         "voice's inventory", True),
        ("sy_empty", " ".join([a, tok(""), b]), "token 1 ({$tone_none$s_both$word_both$"
         "emotion_neutral$F7}): sy is empty", True),
        ("tone_pad", tok("a_c", "_"), "tone '_' is a reserved entry", True),
        ("emotion_mask", tok("a_c", emotion="@[MASK]"), "emo_category '@[MASK]' is a reserved "
         "entry", True),
        ("speaker_end", " ".join([a, tok("a_c", speaker="~")]),
         "token 1 ({a_c$tone_none$s_both$word_both$emotion_neutral$~}): speaker_category '~' is "
         "a reserved entry", True),
        ("extra_field", " ".join([a, "{a_c$tone1$s_end$word_end$emotion_neutral$F7$M7}"]),
         "token 1 ({a_c$tone1$s_end$word_end$emotion_neutral$F7$M7}): 7 '$'-separated fields, "
         "expected 6", True),
        ("missing_field", " ".join([a, "{a_c$tone1$s_end$word_end$emotion_neutral}"]),
         "token 1 ({a_c$tone1$s_end$word_end$emotion_neutral}): 5 '$'-separated fields, "
         "expected 6", False),
        ("unknown_tone", " ".join([a, tok("a_c", "tone4")]),
         "token 1 ({a_c$tone4$s_both$word_both$emotion_neutral$F7}): tone 'tone4' is not in the "
         "voice's inventory; valid: tone3, tone1, tone_none, tone5, tone2", False),
        ("unknown_syllable_flag", tok("a_c", "tone1", "s_start"),
         "syllable_flag 's_start' is not in the voice's inventory; valid: s_begin, s_end, "
         "s_none, s_both, s_middle", False),
        ("unknown_word_segment", tok("a_c", "tone1", "s_both", "word"),
         "word_segment 'word' is not in the voice's inventory; valid: word_begin, word_end, "
         "word_middle, word_both, word_none", False),
        ("unknown_emotion", tok("a_c", emotion="emotion_joy"),
         "emo_category 'emotion_joy' is not in the voice's inventory; valid: emotion_none, "
         "emotion_neutral, emotion_angry", False),
        ("unknown_speaker", " ".join([a, b, tok("a_c", speaker="f7")]),
         "token 2 ({a_c$tone_none$s_both$word_both$emotion_neutral$f7}): speaker_category 'f7' "
         "is not in the voice's inventory; valid: F7, xiaoyu, M7", False),
        ("empty", "", "no token in the symbol string", False),
        ("blank", " \t\n", "no token in the symbol string", False),
    ]


def _stub_missing_modules():
    """Stubs for the modules KAN-TTS's linguistic unit imports but does not need here."""
    def missing(name):
        return name not in sys.modules and importlib.util.find_spec(name) is None

    if missing("ttsfrd"):
        sys.modules["ttsfrd"] = types.ModuleType("ttsfrd")
    if missing("unidecode"):
        m = types.ModuleType("unidecode")
        m.unidecode = lambda text: text  # the cleaners only ever see ASCII spaces here
        sys.modules["unidecode"] = m
    if missing("inflect"):
        m = types.ModuleType("inflect")
        m.engine = lambda: None  # used only inside number-expansion callbacks
        sys.modules["inflect"] = m
    if missing("numpy"):
        m = types.ModuleType("numpy")
        m.int32 = "int32"
        m.asarray = lambda seq, dtype=None: list(seq)
        sys.modules["numpy"] = m


def _forget_kantts():
    for name in [n for n in sys.modules if n == "kantts" or n.startswith("kantts.")]:
        del sys.modules[name]


class Original:
    """KAN-TTS's KanTtsLinguisticUnit over the made-up inventory, from a copy of kantts_src."""

    def __init__(self, kantts_src, linguistic_unit):
        self.tmp = tempfile.mkdtemp(prefix="kantts_symbols_")
        shutil.copytree(os.path.join(kantts_src, "kantts"), os.path.join(self.tmp, "kantts"))
        pinyin = os.path.join(self.tmp, "kantts", "preprocess", "languages", "PinYin")
        for name in (kantts_symbols.PHONESET_FILE, kantts_symbols.TONELIST_FILE):
            shutil.copyfile(os.path.join(INVENTORY, name), os.path.join(pinyin, name))
        self.hashes = {}
        for path in _ORIGINAL_FILES:
            with open(os.path.join(kantts_src, path), "rb") as f:
                self.hashes[path] = hashlib.sha256(f.read()).hexdigest()
        _stub_missing_modules()
        _forget_kantts()
        sys.path.insert(0, self.tmp)
        try:
            module = importlib.import_module("kantts.utils.ling_unit.ling_unit")
            config = {"linguistic_unit": dict(linguistic_unit),
                      "Model": {"KanTtsSAMBERT": {"params": {}}}}
            self.unit = module.KanTtsLinguisticUnit(config)
        finally:
            sys.path.remove(self.tmp)
            _forget_kantts()
        if self.unit.using_byte():
            raise AssertionError("the original built a byte model")

    def close(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def lists(self):
        return original_lists(self.unit)

    def encode(self, symbols):
        """Every channel's ids, "~" included, or the exception's text."""
        try:
            channels = self.unit.encode_symbol_sequence(symbols)
        except Exception as e:  # noqa: BLE001 (recording what the original does)
            return None, f"{type(e).__name__}: {e}"
        return {c: [int(i) for i in ids] for c, ids in zip(_CHANNELS, channels)}, None


def original_lists(u):
    """A KanTtsLinguisticUnit's lfeat_type_list, and per channel its list and symbol-to-id dict."""
    return {
        "lfeat_type_list": list(u._lfeat_type_list),
        "sy": (list(u.sy), u._sy_to_id),
        "tone": (list(u.tone), u._tone_to_id),
        "syllable_flag": (list(u.syllable_flag), u._syllable_flag_to_id),
        "word_segment": (list(u.word_segment), u._word_segment_to_id),
        "emo_category": (list(u.emo_category), u._emo_category_to_id),
        "speaker_category": (list(u.speaker), u._speaker_to_id),
    }


def check_lists(mine, original):
    """symbol_lists() against the original's lists and symbol-to-id dicts."""
    if mine["lfeat_type_list"] != original["lfeat_type_list"]:
        raise AssertionError(f"lfeat_type_list: {mine['lfeat_type_list']} vs "
                             f"{original['lfeat_type_list']}")
    for channel in _CHANNELS:
        symbols, to_id = original[channel]
        if mine[channel] != symbols:
            raise AssertionError(f"{channel}: {mine[channel]} vs the original's {symbols}")
        if {s: i for i, s in enumerate(mine[channel])} != to_id:
            raise AssertionError(f"{channel}: the original's symbol-to-id dict differs")


def _model_ids(encoded, lists):
    """The ids the model receives: every channel the same length, the last ("~") dropped."""
    lengths = {len(ids) for ids in encoded.values()}
    if len(lengths) != 1:
        raise AssertionError(f"channels of different lengths: {encoded}")
    for channel in _CHANNELS:
        if encoded[channel][-1] != lists[channel].index("~"):
            raise AssertionError(f"{channel} does not end in '~': {encoded[channel]}")
    return {name: encoded[c][:-1] for name, c in zip(_ID_NAMES, _CHANNELS)}


def _dump(value, indent=0):
    """JSON with lists of numbers or strings on one line."""
    pad, inner = " " * indent, " " * (indent + 1)
    if isinstance(value, dict):
        items = [f"{inner}{json.dumps(k)}: {_dump(v, indent + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}" if items else "{}"
    if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        return "[\n" + ",\n".join(inner + _dump(v, indent + 1) for v in value) + "\n" + pad + "]"
    return json.dumps(value, ensure_ascii=False)


def _write(path, value):
    with open(path, "w", encoding="utf-8") as f:
        f.write(_dump(value) + "\n")


def make(out_dir=DEFAULT_OUT, kantts_src=None):
    os.makedirs(out_dir, exist_ok=True)
    lists = kantts_symbols.symbol_lists(INVENTORY, LINGUISTIC_UNIT)
    _write(os.path.join(out_dir, "symbols.json"), lists)
    if kantts_src is None:
        print("sambert_symbol_fixtures: no KAN-TTS source tree given; wrote symbols.json only",
              file=sys.stderr)
        return
    original = Original(kantts_src, LINGUISTIC_UNIT)
    try:
        check_lists(lists, original.lists())
        accepted = []
        for name, symbols in cases(lists):
            encoded, error = original.encode(symbols)
            if error is not None:
                raise AssertionError(f"case {name}: the original raised {error}")
            accepted.append({"name": name, "symbols": symbols,
                             "ids": _model_ids(encoded, lists)})
        refusals = []
        for name, symbols, message, original_accepts in refused():
            encoded, error = original.encode(symbols)
            if original_accepts is not None and (error is None) != original_accepts:
                raise AssertionError(f"refused {name}: expected the original to "
                                     f"{'accept' if original_accepts else 'fail'}, got "
                                     f"{error or encoded}")
            refusals.append({"name": name, "symbols": symbols, "error": message,
                             "original": {"exception": error} if error else {"ids": encoded}})
        _write(os.path.join(out_dir, "cases.json"), {
            "original": {"files": original.hashes},
            "linguistic_unit": LINGUISTIC_UNIT,
            "cases": accepted,
            "refused": refusals,
        })
    finally:
        original.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kantts", default=os.environ.get("KANTTS_SRC"),
                        help="extracted KAN-TTS source tree (the folder holding kantts/); "
                             "default $KANTTS_SRC")
    parser.add_argument("--out", default=DEFAULT_OUT)
    args = parser.parse_args()
    make(args.out, args.kantts)


if __name__ == "__main__":
    main()
