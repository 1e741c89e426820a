#!/usr/bin/env python3
"""An intelligibility proxy: word error rate of an off-the-shelf recogniser (CMU PocketSphinx,
Debian `pocketsphinx pocketsphinx-en-us`) on the teacher's audio and on voxd's, for the same
held-out sentences. PocketSphinx is a weak recogniser and eSpeak's voice is far from its
training data, so the teacher's own WER is the yardstick: a voice that kept the teacher's
intelligibility lands near it.

    build/src/tools/voxd-dataset --corpus data/corpus/en-heldout.txt --out /tmp/heldout
    /usr/bin/python3 training/asr_wer.py --data /tmp/heldout --voice voices/en-demo \\
        --corpus data/corpus/en-heldout.txt
"""
import argparse
import json
import os
import re
import subprocess
import tempfile


def words(text):
    return re.findall(r"[a-z']+", text.lower())


def edit_distance(ref, hyp):
    """Levenshtein distance between two word lists."""
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        previous, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (r != h))
    return row[-1]


def recognise(wav, work):
    """PocketSphinx's transcript of `wav` (resampled to 16 kHz with sox)."""
    resampled = os.path.join(work, "16k.wav")
    subprocess.run(["sox", wav, "-r", "16000", resampled], check=True)
    result = subprocess.run(["pocketsphinx_continuous", "-infile", resampled, "-logfn",
                             os.devnull], capture_output=True, text=True, check=True)
    return result.stdout.strip()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="teacher dataset of the held-out corpus")
    parser.add_argument("--voice", required=True)
    parser.add_argument("--corpus", required=True, help="the sentences, one per line")
    parser.add_argument("--voxd", default="build/src/cli/voxd")
    args = parser.parse_args()
    with open(os.path.join(args.data, "manifest.jsonl"), encoding="utf-8") as f:
        teacher = [json.loads(line) for line in f]
    with open(args.corpus, encoding="utf-8") as f:
        sentences = [line.strip() for line in f if line.strip()]
    totals = {"teacher": [0, 0], "voxd": [0, 0]}
    print("| sentence | teacher heard | voxd heard |\n|---|---|---|")
    with tempfile.TemporaryDirectory() as work:
        for item, sentence in zip(teacher, sentences):
            voxd_wav = os.path.join(work, "voxd.wav")
            subprocess.run([args.voxd, "synth", "--voice", args.voice, "--text", sentence,
                            "--out", voxd_wav], check=True)
            heard = {"teacher": recognise(os.path.join(args.data, item["wav"]), work),
                     "voxd": recognise(voxd_wav, work)}
            for who, text in heard.items():
                totals[who][0] += edit_distance(words(sentence), words(text))
                totals[who][1] += len(words(sentence))
            print(f"| {sentence} | {heard['teacher']} | {heard['voxd']} |")
    for who, (errors, count) in totals.items():
        print(f"{who}: WER {100.0 * errors / count:.1f} % ({errors} errors in {count} words)")


if __name__ == "__main__":
    main()
