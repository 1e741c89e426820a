#!/usr/bin/env python3
"""Writes the small tokenizer.json files and the sentences of the ChatTTS tokenizer parity test
(tests/families/chattts/tokenizer_test.cpp) into tests/fixtures/chattts/:

  tokenizer.json          a Hugging Face tokenizers-format BERT WordPiece tokenizer laid out as
                          ChatTTS's asset/tokenizer/tokenizer.json is (BertNormalizer with
                          lowercase and strip_accents null, BertPreTokenizer, WordPiece with "##",
                          the BERT specials and ChatTTS's 50 added tokens after the vocab), with a
                          small vocab of our own and a few extra added tokens that exercise the
                          added-token flags (normalized, single_word, lstrip, rstrip)
  tokenizer_cased.json    the same with lowercase false (strip_accents null then means no strip)
  tokenizer_strip.json    lowercase false, strip_accents true
  tokenizer_raw.json      clean_text and handle_chinese_chars false, lowercase true, strip_accents
                          false
  sentences.json          the test sentences, a JSON list of strings

Needs only the standard library. The expected ids come from tools/reference/chattts_tokenizer_ids.py,
which runs Hugging Face tokenizers on these files.

    python3 tools/reference/chattts_tokenizer_fixtures.py [--out tests/fixtures/chattts]
"""
import argparse
import copy
import json
import os
import string

# ChatTTS's added tokens, in the order (and so with the ids) its tokenizer.json gives them.
CHATTTS_ADDED = (
    ["[Sasr]", "[Pasr]", "[Easr]", "[Stts]", "[Ptts]", "[Etts]", "[Sbreak]", "[Pbreak]",
     "[Ebreak]", "[uv_break]", "[v_break]", "[lbreak]", "[llbreak]", "[undefine]", "[laugh]",
     "[spk_emb]", "[empty_spk]", "[music]", "[pure]"]
    + [f"[break_{i}]" for i in range(8)]
    + [f"[laugh_{i}]" for i in range(3)]
    + [f"[oral_{i}]" for i in range(10)]
    + [f"[speed_{i}]" for i in range(10)]
)
BERT_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]

# Extra added tokens (not ChatTTS's) for the flags ChatTTS's own tokens leave false.
EXTRA_ADDED = [
    {"content": "Hi-Five", "normalized": True, "special": False},   # matched after normalizing
    {"content": "Café!", "normalized": True, "special": False},     # normalizes to "cafe!"
    {"content": "你好吗", "normalized": True, "special": False},     # normalizes to " 你  好  吗 "
    {"content": "<sw>", "single_word": True, "special": False},
    {"content": "<ls>", "lstrip": True, "special": True},
    {"content": "<rs>", "rstrip": True, "special": True},
    {"content": "hello", "special": False},                         # also in the model's vocab
]

WORDS = [
    "hello", "world", "the", "quick", "brown", "fox", "jump", "over", "lazy", "dog", "a", "an",
    "is", "it", "this", "that", "to", "of", "and", "in", "on", "for", "with", "you", "we", "i",
    "play", "chat", "speech", "voice", "text", "token", "model", "test", "un", "re", "hi",
    "cafe", "café", "naive", "resume", "über", "strasse", "straße", "ok", "tts", "gpt",
    "Hello", "World", "The", "I", "Café", "OK", "GPT",
    "##s", "##ed", "##ing", "##er", "##ly", "##aff", "##able", "##tts", "##izer", "##ize",
    "##ation", "##é", "##è", "##ü", "##ß", "##o", "##n",
]
# Continuations for half the alphabet only, so words that need the others become [UNK].
CONTINUED_LETTERS = "abcdefghijklm"
CJK = list("你好世界我是一个语音合成模型的中文测试今天气很们说话笑了吗不在有人这来大上为和国地到以")
CJK_CONTINUED = ["##好", "##界"]  # reached only when handle_chinese_chars is off
OTHER = [
    "，", "。", "！", "？", "：", "；", "（", "）", "、", "“", "”", "《", "》", "—", "…", "·",
    "「", "」", "€", "£", "°", "½", "😀", "の", "こ", "ん", "に", "ち", "は", "한", "ᄒ", "ᅡ",
    "ᆫ", "##ᅡ", "##ᆫ", "¿", "¡", "«", "»", "‘", "’", "\u00a0", "e", "\u0301",
]


def vocab():
    tokens = list(BERT_SPECIALS)
    tokens += [c for c in string.punctuation]
    tokens += [c for c in string.digits] + ["##" + c for c in string.digits]
    tokens += [c for c in string.ascii_lowercase] + ["##" + c for c in CONTINUED_LETTERS]
    tokens += WORDS + CJK + CJK_CONTINUED + OTHER
    seen = set()
    ordered = []
    for t in tokens:
        if t not in seen:
            seen.add(t)
            ordered.append(t)
    return {t: i for i, t in enumerate(ordered)}


def added_token(token_id, content, **flags):
    entry = {"id": token_id, "content": content, "single_word": False, "lstrip": False,
             "rstrip": False, "normalized": False, "special": True}
    entry.update(flags)
    return entry


def tokenizer_json():
    v = vocab()
    added = [added_token(v[t], t) for t in BERT_SPECIALS]
    next_id = len(v)
    for t in CHATTTS_ADDED:
        added.append(added_token(next_id, t))
        next_id += 1
    for extra in EXTRA_ADDED:
        flags = {k: val for k, val in extra.items() if k != "content"}
        if extra["content"] in v:
            added.append(added_token(v[extra["content"]], extra["content"], **flags))
        else:
            added.append(added_token(next_id, extra["content"], **flags))
            next_id += 1
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "BertNormalizer", "clean_text": True,
                       "handle_chinese_chars": True, "strip_accents": None, "lowercase": True},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}},
                       {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "[SEP]", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 1}},
                     {"SpecialToken": {"id": "[SEP]", "type_id": 1}}],
            "special_tokens": {
                "[CLS]": {"id": "[CLS]", "ids": [v["[CLS]"]], "tokens": ["[CLS]"]},
                "[SEP]": {"id": "[SEP]", "ids": [v["[SEP]"]], "tokens": ["[SEP]"]}},
        },
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 24, "vocab": v},
    }


VARIANTS = {
    "tokenizer.json": {},
    "tokenizer_cased.json": {"lowercase": False},
    "tokenizer_strip.json": {"lowercase": False, "strip_accents": True},
    "tokenizer_raw.json": {"clean_text": False, "handle_chinese_chars": False,
                           "strip_accents": False},
}

LONG_WORD = "supercalifragilisticexpialidocious"  # 34 letters: past max_input_chars_per_word
SENTENCES = [
    # English
    "Hello world!",
    "The quick brown fox jumped over the lazy dog.",
    "HELLO World, this is a TEST of the tokenizer.",
    "unaffable playing chatting jumps",
    "It's 3:45pm; the temperature is 21.5°C (about 70°F).",
    "I paid $12.50, €3 and £7 — 100% ok?",
    "e-mail: someone@example.com #hashtag ~tilde~ {braces} [brackets] <angle> `tick` ^caret|pipe",
    "xyz quux zzz",
    # Chinese and mixed
    "你好，世界！",
    "我是一个语音合成模型。",
    "今天天气很好，我们说话了吗？",
    "“中文测试”《模型》（大）、上：下；…",
    "ChatTTS是一个语音合成模型，GPT很好。",
    "我们在test一下Hello世界123。",
    "中国有1234个人",
    "「你好」— 世界·中文",
    # ChatTTS's decorated prompts and control tokens
    "[Stts][spk_emb]你好，世界[Ptts]",
    "[Stts][empty_spk][speed_5]今天天气很好[uv_break]我们说话了吗[laugh][Ptts]",
    "[Sbreak]Hello world[Pbreak][oral_2][laugh_0][break_6]",
    "hello[uv_break]world[v_break]again[lbreak]",
    "[UV_BREAK] [Uv_Break] [uv_break [uv_break]] [[Stts]]",
    "[laugh]_0] [laugh_0] [laugh_9] [break_8] [speed_10]",
    "[spk_emb][spk_emb][PAD][UNK][CLS][SEP][MASK]",
    "[Stts] [spk_emb] 你好 [Ptts]",
    "[Stts][spk_emb][speed_5]四川美食确实以辣闻名[uv_break]，但也有不辣的选择。[Ptts]",
    # Extra added tokens: normalized, single_word, lstrip, rstrip, in-vocab
    "Hi-Five! hi-five HI-FIVE hi - five",
    "CAFÉ! café! Cafe! cafe !",
    "你好吗 你好吗？ 你 好 吗",
    "<sw> a<sw>b <sw>. x <sw>y (<sw>)",
    "a   <ls>b   c<rs>   d <ls><rs> e",
    "helloworld Hello hello HELLO",
    # Accents, case and other scripts
    "Café naïve résumé Über STRASSE straße",
    "cafe\u0301 CAFE\u0301 e\u0301 \u00e9",
    "İstanbul ΣΊΣΥΦΟΣ Ǆemal ǅ ǆ ẞ \u212a",
    "don't e.g. U.S.A. 3.14 1,000,000 ±×÷ ¥ ￥",
    "がぎぐ नमस्ते مَرْحَبًا สวัสดี",
    "中\u0301 \uf900 \U0002b820 \U00030000 x\u0378y",
    "こんにちは、世界",
    "안녕하세요 한국어",
    "Привет, мир! Ελληνικά",
    "¿Qué tal? ¡Muy bien! «Bonjour» ‘quoted’",
    # Emoji and symbols
    "hi😀 😀😀 👍🏽 🇨🇳 👨‍👩‍👧",
    "½ ² ℃ ™ © ®",
    # Whitespace and control characters
    "tab\there\nnewline\r\ncrlf",
    "vertical\vtab form\ffeed nel\u0085next",
    "nbsp\u00a0space ideographic\u3000space en\u2002space line\u2028sep",
    "zero\u200bwidth join\u200dx bom\ufeffmark soft\u00adhyphen",
    "nul\u0000byte bell\u0007 esc\u001b unit\u001fsep del\u007f c1\u0080",
    "replacement\ufffdchar private\ue000use plane\U000f0000fifteen",
    "tag\U000e0041char lri\u2066x alm\u061cy heart\u2764\ufe0f",
    "  leading and trailing  ",
    "",
    "   ",
    # Full-width forms
    "ＡＢＣ　１２３！？（ｘ）",
    "，。！？",
    # Long words
    LONG_WORD,
    "a" * 24,
    "a" * 25,
    "中" * 30,
    "x" + "a" * 23,
    "a" * 100,                    # ChatTTS's max_input_chars_per_word
    "a" * 101,
    "我们说话了" * 60,            # 300 tokens: past the 256 of ChatTTS's file's truncation field
    # Unicode-version corners: characters newer than the tables tokenizers uses
    "dash\u2e43upturn",           # Pd since Unicode 9.0: not punctuation to tokenizers
    "mark\u08d4x",                # Mn since Unicode 9.0: kept by strip_accents
    "sign\u166dword",             # Po until Unicode 12 (now So): still punctuation there
    "e\u0323\u0302 o\u0328\u0301", # combining marks in non-canonical order
]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..",
                                                      "tests", "fixtures", "chattts"))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    base = tokenizer_json()
    for name, normalizer in VARIANTS.items():
        t = copy.deepcopy(base)
        t["normalizer"].update(normalizer)
        with open(os.path.join(args.out, name), "w", encoding="utf-8") as f:
            json.dump(t, f, ensure_ascii=False, indent=1)
            f.write("\n")
    with open(os.path.join(args.out, "sentences.json"), "w", encoding="utf-8") as f:
        json.dump(SENTENCES, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
