"""`voxd` with a ChatTTS voice: the tiny random-weight voice under tests/fixtures/voices/tiny-chattts
(tools/make_test_voices.py) spoken end to end on the CPU — the same seed gives the same audio,
another seed other audio — and the bad input a user can give it: a missing or truncated asset
file, a tokenizer that does not match the embeddings, a bad speaker string, options of another
family, a `voxd serve --kv-cache` it cannot use (tests/cli/test_serve_chattts.py serves it). Every
error is one line, exit 2.

Run by ctest as `/usr/bin/python3 -m unittest tests/cli/test_chattts.py` with VOXD_BIN set.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
import wave

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_cli import ROOT, VOXD, VoxdTestCase, run  # noqa: E402

VOICE = os.path.join(ROOT, "tests", "fixtures", "voices", "tiny-chattts")
TEXT = "你好, hello world."


def samples_of(path):
    with wave.open(path, "rb") as w:
        return w.getframerate(), w.getnchannels(), w.readframes(w.getnframes())


class ChatTtsCliTest(VoxdTestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="voxd-chattts-")

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def path(self, name):
        return os.path.join(self.tmp, name)

    def synth(self, *extra, voice=VOICE, out="out.wav"):
        out = self.path(out)
        result = run("synth", "--voice", voice, "--text", TEXT, "--out", out, *extra)
        self.assertEqual(result.returncode, 0, result.stderr)
        return samples_of(out)

    def copy_voice(self):
        copy = self.path("voice")
        shutil.copytree(VOICE, copy)
        return copy

    def test_same_seed_same_audio_other_seed_other_audio(self):
        rate, channels, first = self.synth("--seed", "7", out="a.wav")
        self.assertEqual((rate, channels), (24000, 1))
        self.assertGreater(len(first), 0)
        _, _, again = self.synth("--seed", "7", out="b.wav")
        _, _, other = self.synth("--seed", "8", out="c.wav")
        self.assertEqual(first, again)
        self.assertNotEqual(first, other)

    def test_speakers_change_the_audio(self):
        _, _, plain = self.synth("--seed", "1", "--no-refine", out="plain.wav")
        _, _, named = self.synth("--seed", "1", "--no-refine", "--speaker", "tiny", out="named.wav")
        _, _, drawn = self.synth("--seed", "1", "--no-refine", "--speaker", "random", out="r.wav")
        self.assertNotEqual(plain, named)
        self.assertNotEqual(named, drawn)

    def test_temperature_and_refinement_are_honoured(self):
        _, _, base = self.synth("--seed", "2", out="base.wav")
        _, _, hot = self.synth("--seed", "2", "--temperature", "0.9", out="hot.wav")
        _, _, unrefined = self.synth("--seed", "2", "--no-refine", out="unrefined.wav")
        self.assertNotEqual(base, hot)
        self.assertNotEqual(base, unrefined)

    def test_bad_speaker_string_is_one_line(self):
        result = run("synth", "--voice", VOICE, "--text", TEXT, "--out", self.path("x.wav"),
                     "--speaker", "not a speaker")
        self.assertFalse(os.path.exists(self.path("x.wav")))
        self.assert_input_error(result, "speaker", "ChatTTS speaker string")

    def test_options_of_another_family_are_refused(self):
        result = run("synth", "--voice", VOICE, "--text", TEXT, "--out", self.path("x.wav"),
                     "--pitch", "1.5")
        self.assert_input_error(result, "fastspeech2-hifigan")
        tiny_ipa = os.path.join(ROOT, "tests", "fixtures", "voices", "tiny-ipa")
        result = run("synth", "--voice", tiny_ipa, "--text", "Hi.", "--out", self.path("y.wav"),
                     "--seed", "3")
        self.assert_input_error(result, "chattts voices only")

    def test_missing_and_truncated_files_name_the_file(self):
        voice = self.copy_voice()
        os.remove(os.path.join(voice, "vocos.safetensors"))
        result = run("synth", "--voice", voice, "--text", TEXT, "--out", self.path("x.wav"))
        self.assert_input_error(result, "vocos.safetensors")
        voice = self.path("voice")
        shutil.rmtree(voice)
        voice = self.copy_voice()
        gpt = os.path.join(voice, "gpt.safetensors")
        with open(gpt, "r+b") as f:
            f.truncate(os.path.getsize(gpt) // 2)
        result = run("synth", "--voice", voice, "--text", TEXT, "--out", self.path("x.wav"))
        self.assert_input_error(result, "gpt.safetensors")

    def test_a_tokenizer_of_another_model_is_refused(self):
        voice = self.copy_voice()
        shutil.copy(os.path.join(ROOT, "tests", "fixtures", "chattts", "tokenizer.json"),
                    os.path.join(voice, "tokenizer", "tokenizer.json"))
        result = run("synth", "--voice", voice, "--text", TEXT, "--out", self.path("x.wav"))
        self.assert_input_error(result, "tokenizer.json", "emb_text")

    def test_long_text_is_split_into_sentences(self):
        text = " ".join(["This is sentence number %d of a long text." % i for i in range(12)])
        result = run("--log-level", "info", "synth", "--voice", VOICE, "--text", text,
                     "--no-refine", "--out", self.path("long.wav"))
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("12 sentence(s)", result.stderr)

    def test_several_sentences_share_one_drawn_speaker(self):
        result = run("--log-level", "info", "synth", "--voice", VOICE, "--text",
                     "你好。今天天气很好！[laugh][uv_break]", "--out", self.path("two.wav"))
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("2 sentence(s)", result.stderr)
        self.assertIn("random speaker", result.stderr)

    def test_serve_refuses_a_kv_cache_it_cannot_use_with_one_line(self):
        for size, expected in [("0.5", "not a fraction"), ("1KiB", "less than one page")]:
            result = subprocess.run([VOXD, "serve", "--voice", VOICE, "--port", "0",
                                     "--kv-cache", size],
                                    capture_output=True, text=True, timeout=120)
            self.assert_input_error(result, "--kv-cache", expected)

    def test_voices_phonemize_and_mem_read_the_voice(self):
        listed = run("voices", os.path.dirname(VOICE))
        self.assertEqual(listed.returncode, 0, listed.stderr)
        line = next(l for l in listed.stdout.splitlines() if l.startswith("tiny-chattts"))
        self.assertIn("24000 Hz", line)
        self.assertIn("wordpiece", line)
        words = run("phonemize", "--voice", VOICE, "--text", "hello world")
        self.assertEqual(words.returncode, 0, words.stderr)
        self.assertIn("wordpiece", words.stdout)
        plan = run("mem", "--voice", VOICE, "--batch", "2", "--phonemes", "40")
        self.assertEqual(plan.returncode, 0, plan.stderr)
        for stage in ("gpt prefill", "gpt decode step", "decoder + vocos"):
            self.assertIn(stage, plan.stdout)
        # Two streams' pages of 16 positions for the prompt and the code stage's new tokens.
        pages = re.search(r"pages of 16 positions, (\d+) a stream for (\d+) positions .* x 2 "
                          r"streams = (\d+) pages", plan.stdout)
        self.assertIsNotNone(pages, plan.stdout)
        per_stream, positions, total = (int(g) for g in pages.groups())
        self.assertEqual(per_stream, (positions + 15) // 16)
        self.assertEqual(total, 2 * per_stream)
        # The vocoder's step is a batch of chunks of the code stage's hidden states, each 96
        # frames of audio with its context on both sides.
        chunk = re.search(r"decoder \+ vocos\s+batch 2 x (\d+) code frames a chunk", plan.stdout)
        self.assertIsNotNone(chunk, plan.stdout)
        context = re.search(r"a chunk is 96 code frames of audio with (\d+) and (\d+) of context",
                            plan.stdout)
        self.assertIsNotNone(context, plan.stdout)
        self.assertEqual(int(chunk.group(1)), 96 + int(context.group(1)) + int(context.group(2)))
        self.assert_input_error(run("mem", "--voice", VOICE, "--batch", "2", "--phonemes", "40",
                                    "--frames", "90"), "--frames")
        self.assert_input_error(run("mem", "--voice", VOICE, "--chunks", "2", "--frames", "9"),
                                "--batch")
        self.assert_input_error(run("mem", "--voice", VOICE, "--batch", "1", "--phonemes", "5000"),
                                "positions")


if __name__ == "__main__":
    unittest.main()
