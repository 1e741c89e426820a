#!/usr/bin/env python3
"""Expected ids for the ChatTTS tokenizer parity test, from Hugging Face tokenizers and
transformers (needs both installed; run where they are, e.g. the GPU machine).

For every tokenizer.json given and every sentence of sentences.json it records:
  "tokenizers":   tokenizers.Tokenizer.from_file(path) with truncation and padding off,
                  encode(sentence, add_special_tokens=False).ids
  "transformers": the call ChatTTS makes (ChatTTS/model/tokenizer.py, Tokenizer.encode):
                  encode_plus(sentence, return_tensors="pt", add_special_tokens=False,
                  padding=True)["input_ids"] (the __call__ form where encode_plus is gone), on
                  BertTokenizerFast.from_pretrained(dir) for a directory (ChatTTS's
                  asset/tokenizer) and on PreTrainedTokenizerFast(tokenizer_file=path) for a lone
                  file (BertTokenizerFast would rewrite a cased file's normalizer to its own
                  do_lower_case default); where transformers fails, "transformers_error" instead
  "agree":        whether the two lists are equal
plus "vocab_size" and the ids of a few named tokens. The output JSON is
  {"versions": {...}, "sentences": "<file>", "results": {"<name>": {...}}}
with <name> the file's name, or the directory's.

    python3 tools/reference/chattts_tokenizer_ids.py --sentences tests/fixtures/chattts/sentences.json \
        --tokenizer tests/fixtures/chattts/tokenizer.json ... [--tokenizer DIR] --out ids.json

tests/fixtures/chattts/expected_ids.json is this script's output (tokenizers 0.23.2,
transformers 5.17.0) for the four small files and ChatTTS's asset/tokenizer. transformers refused
the small files (padding=True and no pad token, which only a tokenizer_config.json names), so
for them it holds tokenizers' ids alone; for ChatTTS's directory both, and they agree.
"""
import argparse
import json
import os

import tokenizers
import transformers

NAMED_TOKENS = ["[UNK]", "[PAD]", "[CLS]", "[SEP]", "[Stts]", "[Ptts]", "[spk_emb]",
                "[empty_spk]", "[Sbreak]", "[Pbreak]", "[Ebreak]", "[break_0]", "[uv_break]",
                "[laugh_0]", "[speed_5]"]


def chattts_call(tok, text):
    """ChatTTS's encode_plus call; the __call__ form where a transformers release dropped it."""
    kwargs = dict(return_tensors="pt", add_special_tokens=False, padding=True)
    if hasattr(tok, "encode_plus"):
        x = tok.encode_plus(text, **kwargs)
    else:
        x = tok(text, **kwargs)
    return x["input_ids"].squeeze(0).tolist()


def transformers_tokenizer(path):
    """ChatTTS's loader for a directory; for a lone file the class that keeps its normalizer
    (transformers 5 renamed PreTrainedTokenizerFast, and may drop the Fast alias)."""
    if os.path.isdir(path):
        cls = getattr(transformers, "BertTokenizerFast", None) or transformers.BertTokenizer
        return cls.from_pretrained(path)
    cls = (getattr(transformers, "PreTrainedTokenizerFast", None)
           or getattr(transformers, "TokenizersBackend"))
    return cls(tokenizer_file=path)


def run(path, sentences):
    file = os.path.join(path, "tokenizer.json") if os.path.isdir(path) else path
    raw = tokenizers.Tokenizer.from_file(file)
    raw.no_truncation()
    raw.no_padding()
    by_tokenizers = [raw.encode(s, add_special_tokens=False).ids for s in sentences]
    result = {
        "vocab_size": raw.get_vocab_size(with_added_tokens=True),
        "token_ids": {t: raw.token_to_id(t) for t in NAMED_TOKENS},
        "tokenizers": by_tokenizers,
    }
    try:  # a failure here still leaves the tokenizers ids
        tf = transformers_tokenizer(path)
        result["transformers_class"] = type(tf).__name__
        result["len_transformers"] = len(tf)
        result["transformers"] = [chattts_call(tf, s) for s in sentences]
        result["agree"] = result["transformers"] == by_tokenizers
    except Exception as e:  # noqa: BLE001 (reported in the output)
        result["transformers_error"] = repr(e)
        result["agree"] = False
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", required=True)
    parser.add_argument("--tokenizer", action="append", required=True,
                        help="a tokenizer.json, or a directory holding one (repeatable)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    with open(args.sentences, encoding="utf-8") as f:
        sentences = json.load(f)
    results = {}
    for path in args.tokenizer:
        name = os.path.basename(os.path.normpath(path))
        try:
            results[name] = run(path, sentences)
        except Exception as e:  # noqa: BLE001 (reported in the output)
            results[name] = {"error": repr(e), "agree": False}
        print(name, "agree" if results[name]["agree"] else "DISAGREE",
              results[name].get("transformers_error", results[name].get("error", "")),
              flush=True)
    out = {"versions": {"tokenizers": tokenizers.__version__,
                        "transformers": transformers.__version__},
           "sentences": os.path.basename(args.sentences), "results": results}
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
