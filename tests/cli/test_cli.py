"""End-to-end tests of the `voxd` command line on the small random-weight test voices.

Run by ctest as `/usr/bin/python3 -m unittest tests/cli/test_cli.py` with VOXD_BIN set to the
built binary; needs numpy (Debian python3-numpy).
"""
import ctypes
import io
import json
import os
import pty
import shutil
import signal
import subprocess
import tempfile
import unittest
import wave

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
VOXD = os.environ.get("VOXD_BIN", os.path.join(ROOT, "build", "src", "cli", "voxd"))
VOICES = os.path.join(ROOT, "tests", "fixtures", "voices")
ARPABET_VOICE = os.path.join(VOICES, "tiny-arpabet")
IPA_VOICE = os.path.join(VOICES, "tiny-ipa")
# A Sambert voice of KAN-TTS's PinYin phones: reads Chinese text.
SAMBERT_ZH_VOICE = os.path.join(VOICES, "tiny-sambert-zh")
REPO_VOICES = os.path.join(ROOT, "voices")
HOP = 256
MP3_FRAME = 576  # samples per MPEG-2 layer III frame (22.05 kHz)


def run(*args, stdin=None):
    return subprocess.run([VOXD, *args], input=stdin, capture_output=True, text=True, timeout=300)


def wav_info(path):
    with wave.open(path, "rb") as w:
        return w.getnframes(), w.getframerate(), w.getnchannels()


class VoxdTestCase(unittest.TestCase):
    """Assertions the command-line tests share."""

    def assert_input_error(self, result, *fragments):
        """Exit 2 with one line on standard error holding every fragment."""
        self.assertEqual(result.returncode, 2, result.stderr)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        self.assertEqual(len(lines), 1, f"expected one line, got: {result.stderr!r}")
        for fragment in fragments:
            self.assertIn(fragment, lines[0])


class CliTest(VoxdTestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="voxd-cli-")

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def path(self, name):
        return os.path.join(self.tmp, name)

    def synth_with_mel(self, voice, *extra):
        out, mel = self.path("out.wav"), self.path("mel.npy")
        result = run("synth", "--voice", voice, "--out", out, "--mel-out", mel, *extra)
        self.assertEqual(result.returncode, 0, result.stderr)
        return out, np.load(mel)

    def test_synth_text_length_matches_frames_times_hop(self):
        for voice in (ARPABET_VOICE, IPA_VOICE):
            out, mel = self.synth_with_mel(voice, "--text", "Hello world. It costs $5.50, doesn't it?")
            frames, rate, channels = wav_info(out)
            self.assertEqual(mel.shape[0], 80)
            self.assertGreater(mel.shape[1], 0)
            self.assertEqual(frames, mel.shape[1] * HOP)
            self.assertEqual((rate, channels), (22050, 1))

    def test_synth_reads_standard_input(self):
        out = self.path("stdin.wav")
        result = run("synth", "--voice", ARPABET_VOICE, "--out", out, stdin="Text from a pipe.\n")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertGreater(wav_info(out)[0], 0)

    def test_synth_ids_and_speed(self):
        _, normal = self.synth_with_mel(ARPABET_VOICE, "--ids", "60 70 80 90 100 11")
        _, fast = self.synth_with_mel(ARPABET_VOICE, "--ids", "60 70 80 90 100 11", "--speed", "2")
        self.assertLess(fast.shape[1], normal.shape[1])

    def test_synth_is_deterministic(self):
        _, first = self.synth_with_mel(ARPABET_VOICE, "--text", "Same text twice.")
        _, second = self.synth_with_mel(ARPABET_VOICE, "--text", "Same text twice.")
        np.testing.assert_array_equal(first, second)

    def test_vocode_gives_frames_times_hop(self):
        for shape in ((80, 37), (1, 80, 21)):
            mel_path, out = self.path("in.npy"), self.path("vocoded.wav")
            rng = np.random.default_rng(0)
            np.save(mel_path, rng.uniform(-6, 1, size=shape).astype(np.float32))
            result = run("vocode", "--voice", ARPABET_VOICE, "--mel", mel_path, "--out", out)
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertEqual(wav_info(out)[0], shape[-1] * HOP)

    def test_vocode_of_synth_mel_reproduces_synth_audio_length(self):
        out, mel = self.synth_with_mel(ARPABET_VOICE, "--text", "Round trip.")
        mel_path, vocoded = self.path("rt.npy"), self.path("rt.wav")
        np.save(mel_path, mel)
        result = run("vocode", "--voice", ARPABET_VOICE, "--mel", mel_path, "--out", vocoded)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(wav_info(vocoded)[0], wav_info(out)[0])

    def read_samples(self, path):
        with wave.open(path, "rb") as w:
            return np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.int32)

    def test_chunked_vocoding_gives_the_same_audio(self):
        text = "Chunked vocoding must not change what is said, only when it arrives."
        whole, chunked = self.path("whole.wav"), self.path("chunked.wav")
        for out, extra in ((whole, []), (chunked, ["--chunk-frames", "8"])):
            result = run("synth", "--voice", ARPABET_VOICE, "--text", text, "--out", out, *extra)
            self.assertEqual(result.returncode, 0, result.stderr)
        a, b = self.read_samples(whole), self.read_samples(chunked)
        self.assertEqual(len(a), len(b))
        self.assertGreater(np.abs(a).max(), 0)
        # 16-bit files: chunking may move a sample across a rounding boundary, no further.
        self.assertLessEqual(np.abs(a - b).max(), 1)
        mel_path, vocoded = self.path("in.npy"), self.path("vocoded.wav")
        np.save(mel_path, np.random.default_rng(1).uniform(-6, 1, (80, 50)).astype(np.float32))
        result = run("vocode", "--voice", ARPABET_VOICE, "--mel", mel_path, "--out", vocoded,
                     "--chunk-frames", "7")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(wav_info(vocoded)[0], 50 * HOP)
        self.assert_input_error(run("synth", "--voice", ARPABET_VOICE, "--text", "hi",
                                    "--chunk-frames", "-3", "--out", whole), "--chunk-frames")

    def test_voices_lists_test_voices(self):
        result = run("voices", VOICES)
        self.assertEqual(result.returncode, 0, result.stderr)
        names = [line.split("\t")[0] for line in result.stdout.splitlines()]
        self.assertIn("tiny-arpabet", names)
        self.assertIn("tiny-ipa", names)

    def test_help_everywhere(self):
        for args in ((), ("synth",), ("vocode",), ("voices",), ("phonemize",)):
            result = run(*args, "--help")
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertIn("--help", result.stdout)

    def test_bad_arguments(self):
        out = self.path("x.wav")
        self.assert_input_error(run("synth", "--text", "hi", "--out", out), "--voice")
        self.assert_input_error(run("synth", "--voice", ARPABET_VOICE, "--speed", "9",
                                    "--text", "hi"), "--speed")
        # NaN passes a range check (every comparison with it is false): refused on its own.
        for flag, value in [("--speed", "nan"), ("--temperature", "inf"), ("--top-p", "nan")]:
            self.assert_input_error(run("synth", "--voice", ARPABET_VOICE, flag, value, "--text", "hi",
                                        "--out", out), flag, "must be a finite number")
        self.assert_input_error(run("monitor", "--interval", "nan", "--once"), "--interval", "finite")
        self.assert_input_error(run("synth", "--voice", ARPABET_VOICE, "--bogus"), "bogus")
        self.assert_input_error(run("frobnicate"), "frobnicate")
        self.assert_input_error(run("synth", "--voice", ARPABET_VOICE, "--text", "a",
                                    "--ids", "1 2", "--out", out), "either --text or --ids")
        self.assert_input_error(run("synth", "--voice", ARPABET_VOICE, "--ids", "1 x 2",
                                    "--out", out), "x")
        self.assert_input_error(run("synth", "--voice", ARPABET_VOICE, "--text", "hi",
                                    "--out", self.path("x.mp4")), ".mp4")
        self.assert_input_error(run("synth", "--voice", ARPABET_VOICE, "--text", "hi",
                                    "--speaker", "nobody", "--out", out), "nobody")

    def test_bad_text(self):
        out = self.path("x.wav")
        self.assert_input_error(run("synth", "--voice", ARPABET_VOICE, "--text", "", "--out", out),
                                "empty")
        self.assert_input_error(run("synth", "--voice", ARPABET_VOICE, "--text", "   \n\t ",
                                    "--out", out), "empty")
        self.assert_input_error(run("synth", "--voice", ARPABET_VOICE, "--text", "\U0001F600\U0001F680",
                                    "--out", out), "nothing to pronounce")
        self.assertFalse(os.path.exists(out))

    def test_unknown_voice_directory(self):
        missing = self.path("no-such-voice")
        self.assert_input_error(run("synth", "--voice", missing, "--text", "hi"), missing)

    def copy_voice(self):
        voice = self.path("voice")
        shutil.copytree(ARPABET_VOICE, voice)
        return voice

    def test_missing_weights(self):
        voice = self.copy_voice()
        os.remove(os.path.join(voice, "acoustic.safetensors"))
        self.assert_input_error(run("synth", "--voice", voice, "--text", "hi",
                                    "--out", self.path("x.wav")), "acoustic.safetensors")

    def test_truncated_weights(self):
        voice = self.copy_voice()
        weights = os.path.join(voice, "vocoder.safetensors")
        size = os.path.getsize(weights)
        with open(weights, "r+b") as f:
            f.truncate(size // 2)
        self.assert_input_error(run("synth", "--voice", voice, "--text", "hi",
                                    "--out", self.path("x.wav")), "vocoder.safetensors")

    def test_garbage_weights(self):
        voice = self.copy_voice()
        with open(os.path.join(voice, "acoustic.safetensors"), "wb") as f:
            f.write(os.urandom(4096))
        self.assert_input_error(run("synth", "--voice", voice, "--text", "hi",
                                    "--out", self.path("x.wav")), "acoustic.safetensors")

    def test_corrupt_config(self):
        voice = self.copy_voice()
        with open(os.path.join(voice, "config.json"), "w") as f:
            f.write("{ not json")
        self.assert_input_error(run("synth", "--voice", voice, "--text", "hi",
                                    "--out", self.path("x.wav")), "config.json")

    def test_mel_of_wrong_shape(self):
        out = self.path("x.wav")
        for shape in ((40, 10), (2, 80, 10), (80,), (80, 0)):
            mel_path = self.path("bad.npy")
            np.save(mel_path, np.zeros(shape, dtype=np.float32))
            self.assert_input_error(run("vocode", "--voice", ARPABET_VOICE, "--mel", mel_path,
                                        "--out", out), "shape")
        bad = self.path("nan.npy")
        np.save(bad, np.full((80, 5), np.nan, dtype=np.float32))
        self.assert_input_error(run("vocode", "--voice", ARPABET_VOICE, "--mel", bad,
                                    "--out", out), "non-finite")
        notnpy = self.path("not.npy")
        with open(notnpy, "wb") as f:
            f.write(b"hello")
        self.assert_input_error(run("vocode", "--voice", ARPABET_VOICE, "--mel", notnpy,
                                    "--out", out), notnpy)


class SfInfo(ctypes.Structure):
    _fields_ = [("frames", ctypes.c_int64), ("samplerate", ctypes.c_int),
                ("channels", ctypes.c_int), ("format", ctypes.c_int),
                ("sections", ctypes.c_int), ("seekable", ctypes.c_int)]


def decode_with_libsndfile(path):
    """(sample rate, number of decoded samples) of an audio file, read to its end through
    libsndfile (sox here has no MP3 or Opus)."""
    lib = ctypes.CDLL("libsndfile.so.1")
    lib.sf_open.restype = ctypes.c_void_p
    lib.sf_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(SfInfo)]
    lib.sf_readf_float.restype = ctypes.c_int64
    lib.sf_readf_float.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    lib.sf_close.argtypes = [ctypes.c_void_p]
    info = SfInfo()
    handle = lib.sf_open(path.encode(), 0x10, ctypes.byref(info))  # SFM_READ
    if not handle:
        raise AssertionError(f"libsndfile cannot read {path}")
    buffer = (ctypes.c_float * 4096)()
    samples = 0
    while (n := lib.sf_readf_float(handle, buffer, 4096)) > 0:
        samples += n
    lib.sf_close(handle)
    return info.samplerate, samples


def wav_samples(data):
    """16-bit samples of a WAV held in `data` (a streamed WAV's sizes say "until the end")."""
    with wave.open(io.BytesIO(data), "rb") as w:
        return np.frombuffer(w.readframes(w.getnframes()), "<i2")


def flac_samples(data):
    decoded = subprocess.run(["sox", "-t", "flac", "-", "-t", "raw", "-e", "signed", "-b", "16",
                              "-c", "1", "-"], input=data, capture_output=True, check=True)
    return np.frombuffer(decoded.stdout, "<i2")


class VoiceNamesAndOutputTest(VoxdTestCase):
    """--voice by name on the search path, `voxd voices` without a directory, --out - and
    --format, .mp3/.opus files, and the progress line."""

    TEXT = "Hello there. This is a second sentence. And a third one to finish."

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="voxd-names-")
        self.env = {k: v for k, v in os.environ.items() if k != "VOXD_VOICES"}

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def path(self, name):
        return os.path.join(self.tmp, name)

    def voxd(self, *args, env=None, text=True):
        """voxd run from the temporary directory, not the repository root."""
        return subprocess.run([VOXD, *args], capture_output=True, text=text, timeout=300,
                              cwd=self.tmp, env={**self.env, **(env or {})})

    def loaded_from(self, result):
        self.assertEqual(result.returncode, 0, result.stderr)
        lines = [line for line in result.stderr.splitlines() if "loaded voice" in line]
        self.assertEqual(len(lines), 1, result.stderr)
        return lines[0]

    def test_synth_by_name_from_another_directory(self):
        out = self.path("hello.wav")
        result = self.voxd("--log-level", "info", "synth", "--voice", "en-demo",
                           "--text", "Hello.", "--out", "hello.wav")
        self.assertIn(f"'en-demo' from {os.path.join(REPO_VOICES, 'en-demo')}",
                      self.loaded_from(result))
        frames, rate, _ = wav_info(out)
        self.assertGreater(frames, 0)
        self.assertEqual(rate, 22050)
        mem = self.voxd("mem", "--voice", "en-demo", "--chunks", "1", "--frames", "10")
        self.assertEqual(mem.returncode, 0, mem.stderr)
        self.assertIn("voice 'en-demo'", mem.stdout)
        mel = self.path("mel.npy")
        np.save(mel, np.zeros((80, 12), dtype=np.float32))
        vocoded = self.voxd("vocode", "--voice", "en-demo", "--mel", mel, "--out", "v.wav")
        self.assertEqual(vocoded.returncode, 0, vocoded.stderr)
        self.assertEqual(wav_info(self.path("v.wav"))[0], 12 * HOP)

    def test_voxd_voices_directories_come_first(self):
        # An en-demo in VOXD_VOICES (really tiny-arpabet) hides the repository's.
        override = self.path("mine")
        shutil.copytree(ARPABET_VOICE, os.path.join(override, "en-demo"))
        env = {"VOXD_VOICES": f"{self.path('missing')}:{override}:{VOICES}"}
        result = self.voxd("--log-level", "info", "synth", "--voice", "en-demo", "--text", "Hi.",
                           "--out", "a.wav", env=env)
        self.assertIn(f"'tiny-arpabet' from {os.path.join(override, 'en-demo')}",
                      self.loaded_from(result))
        result = self.voxd("--log-level", "info", "synth", "--voice", "tiny-ipa", "--text", "Hi.",
                           "--out", "b.wav", env=env)
        self.assertIn(f"from {IPA_VOICE}", self.loaded_from(result))

    def test_a_path_wins_over_a_name(self):
        shutil.copytree(ARPABET_VOICE, self.path("en-demo"))
        result = self.voxd("--log-level", "info", "synth", "--voice", "en-demo", "--text", "Hi.",
                           "--out", "a.wav")
        self.assertIn("loaded voice 'tiny-arpabet' from en-demo", self.loaded_from(result))

    def test_unknown_name_says_where_it_looked(self):
        env = {"VOXD_VOICES": VOICES}
        for command in (("synth", "--text", "hi"), ("mem", "--chunks", "1", "--frames", "4"),
                        ("serve", "--port", "0")):
            result = self.voxd(command[0], "--voice", "no-such-voice", *command[1:], env=env)
            self.assert_input_error(result, "voice named 'no-such-voice'",
                                       f"looked in {VOICES}, {REPO_VOICES}",
                                       "voices found: en-demo, en-slt, tiny-arpabet, tiny-chattts, tiny-ipa")

    def test_serve_by_name(self):
        server = subprocess.Popen([VOXD, "serve", "--voice", "tiny-ipa", "--port", "0",
                                   "--device", "cpu", "--log-level", "info"], cwd=self.tmp,
                                  env={**self.env, "VOXD_VOICES": VOICES}, text=True,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            lines = []
            for line in server.stderr:
                lines.append(line)
                if "listening" in line:
                    break
            self.assertIn('voices=["tiny-ipa"]', lines[-1], "".join(lines))
        finally:
            server.send_signal(signal.SIGTERM)
            server.communicate(timeout=60)

    def test_voices_without_a_directory_lists_the_search_path(self):
        result = self.voxd("voices", env={"VOXD_VOICES": VOICES})
        self.assertEqual(result.returncode, 0, result.stderr)
        rows = [line.split("\t") for line in result.stdout.splitlines()]
        self.assertEqual([row[0] for row in rows],
                         ["en-demo", "en-slt", "tiny-arpabet", "tiny-chattts", "tiny-ipa",
                          "tiny-sambert", "tiny-sambert-nsf", "tiny-sambert-zh", "zh-demo"])
        rates = {"tiny-chattts": "24000 Hz", "tiny-sambert": "16000 Hz",
                 "tiny-sambert-nsf": "16000 Hz", "tiny-sambert-zh": "16000 Hz"}
        for row in rows:
            self.assertEqual(len(row), 6, row)
            self.assertEqual(row[2], rates.get(row[0], "22050 Hz"))
            self.assertTrue(os.path.isfile(os.path.join(row[5], "config.json")), row)
        self.assertEqual(rows[0][1:], ["en-us", "22050 Hz", "espeak-ipa", "1 speaker(s)",
                                       os.path.join(REPO_VOICES, "en-demo")])
        self.assertEqual(rows[1][1:], ["en-us", "22050 Hz", "arpabet", "1 speaker(s)",
                                       os.path.join(REPO_VOICES, "en-slt")])
        self.assertEqual(rows[2][5], ARPABET_VOICE)
        plain = subprocess.run([VOXD, "voices"], capture_output=True, text=True, timeout=60,
                               cwd="/tmp", env=self.env)
        self.assertEqual(plain.returncode, 0, plain.stderr)
        self.assertIn("en-demo\ten-us", plain.stdout)
        listed = self.voxd("voices", VOICES)
        self.assertEqual(listed.returncode, 0, listed.stderr)
        self.assertEqual([line.split("\t")[0] for line in listed.stdout.splitlines()],
                         ["tiny-arpabet", "tiny-chattts", "tiny-ipa", "tiny-sambert",
                          "tiny-sambert-nsf", "tiny-sambert-zh"])

    def synth_bytes(self, *args):
        """voxd synth with its info log and memory summary on, which go to stderr."""
        result = self.voxd("--log-level", "info", "synth", "--voice", "en-demo", "--text",
                           self.TEXT, "--memory-summary", *args, text=False)
        self.assertEqual(result.returncode, 0, result.stderr.decode())
        return result

    def test_standard_output_holds_the_same_audio_as_a_file(self):
        self.synth_bytes("--out", "file.wav")
        with open(self.path("file.wav"), "rb") as f:
            want = wav_samples(f.read())
        self.assertGreater(len(want), HOP)
        self.assertEqual(len(want) % HOP, 0)
        wav = self.synth_bytes("--out", "-")
        self.assertIn(b"wrote standard output", wav.stderr)  # the log went to stderr
        self.assertIn(b"voxd memory summary", wav.stderr)
        streamed = wav_samples(wav.stdout)
        # Files go through libsndfile and standard output through the server's encoders, whose
        # float to 16-bit conversions differ (rounding, and the scale near full scale): by one
        # step, by two in a handful of samples (one in 56,576 in the sanitizer build).
        self.assertEqual(len(streamed), len(want))
        difference = np.abs(streamed.astype(np.int32) - want)
        self.assertLessEqual(difference.max(), 2)
        self.assertLessEqual(np.count_nonzero(difference > 1), len(want) // 1000)
        pcm = self.synth_bytes("--out", "-", "--format", "pcm").stdout
        np.testing.assert_array_equal(np.frombuffer(pcm, "<i2"), streamed)
        flac = self.synth_bytes("--out", "-", "--format", "flac").stdout
        np.testing.assert_array_equal(flac_samples(flac), streamed)
        self.synth_bytes("--out", "file.flac")
        with open(self.path("file.flac"), "rb") as f:
            flac_file = flac_samples(f.read())
        self.assertEqual(len(flac_file), len(want))
        self.assertLessEqual(np.abs(flac_file.astype(np.int32) - streamed).max(), 1)
        mp3 = self.synth_bytes("--out", "-", "--format", "mp3").stdout
        streamed_mp3 = self.path("streamed.mp3")
        with open(streamed_mp3, "wb") as f:
            f.write(mp3)
        self.synth_bytes("--out", "file.mp3")
        rate, samples = decode_with_libsndfile(streamed_mp3)
        self.assertEqual((rate, samples), decode_with_libsndfile(self.path("file.mp3")))
        # MP3 decodes to whole frames, with the encoder's delay in front.
        self.assertEqual(rate, 22050)
        self.assertGreaterEqual(samples, len(want))
        self.assertLessEqual(samples, len(want) + 4 * MP3_FRAME)

    def test_vocode_to_standard_output(self):
        mel = self.path("mel.npy")
        np.save(mel, np.random.default_rng(2).uniform(-6, 1, (80, 30)).astype(np.float32))
        result = self.voxd("vocode", "--voice", ARPABET_VOICE, "--mel", mel, "--out", "-",
                           "--format", "pcm", text=False)
        self.assertEqual(result.returncode, 0, result.stderr.decode())
        self.assertEqual(len(result.stdout), 30 * HOP * 2)

    def test_mp3_and_opus_files(self):
        self.synth_bytes("--out", "speech.wav")
        samples = wav_info(self.path("speech.wav"))[0]
        self.synth_bytes("--out", "speech.mp3")
        self.synth_bytes("--out", "speech.opus")
        with open(self.path("speech.mp3"), "rb") as f:
            head = f.read(3)
        self.assertTrue(head == b"ID3" or head[0] == 0xFF, head)
        with open(self.path("speech.opus"), "rb") as f:
            self.assertEqual(f.read(4), b"OggS")
        rate, decoded = decode_with_libsndfile(self.path("speech.mp3"))
        self.assertEqual(rate, 22050)
        self.assertGreaterEqual(decoded, samples)
        self.assertLessEqual(decoded, samples + 4 * MP3_FRAME)
        # Opus has no 22.05 kHz: the encoder resamples to 24 kHz and the length follows.
        rate, decoded = decode_with_libsndfile(self.path("speech.opus"))
        self.assertEqual(rate, 24000)
        self.assertAlmostEqual(decoded, samples * 24000 / 22050, delta=2)
        self.assertEqual(sorted(os.listdir(self.tmp)), ["speech.mp3", "speech.opus", "speech.wav"])

    def test_format_errors(self):
        args = ("synth", "--voice", "en-demo", "--text", "hi")
        self.assert_input_error(self.voxd(*args, "--out", "a.wav", "--format", "flac"),
                                   "--format flac does not match --out 'a.wav'")
        self.assert_input_error(self.voxd(*args, "--out", "-", "--format", "ogg"),
                                   "ogg (Vorbis) cannot go to standard output")
        self.assert_input_error(self.voxd(*args, "--out", "-", "--format", "aac"), "--format")
        self.assert_input_error(self.voxd(*args, "--out", "speech"), "no extension")
        self.assertEqual(os.listdir(self.tmp), [])

    def test_no_progress_line_when_stderr_is_not_a_terminal(self):
        result = self.voxd("synth", "--voice", "en-demo", "--text", self.TEXT, "--out", "a.wav")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stderr, "")

    def test_progress_line_on_a_terminal(self):
        controller, terminal = pty.openpty()
        process = subprocess.Popen([VOXD, "synth", "--voice", "en-demo", "--text", self.TEXT,
                                    "--out", "a.wav"], cwd=self.tmp, env=self.env,
                                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=terminal)
        os.close(terminal)
        shown = b""
        while True:
            try:
                chunk = os.read(controller, 4096)
            except OSError:  # EIO: the process closed the terminal
                break
            if not chunk:
                break
            shown += chunk
        os.close(controller)
        self.assertEqual(process.wait(timeout=300), 0, shown)
        updates = [part for part in shown.split(b"\r") if part.strip()]
        self.assertEqual([u.split(b",")[0] for u in updates],
                         [b"voxd: sentence 1/3", b"voxd: sentence 2/3", b"voxd: sentence 3/3"])
        seconds = [float(u.split(b", ")[1].split(b" ")[0]) for u in updates]
        self.assertEqual(seconds, sorted(seconds))
        self.assertGreater(seconds[0], 0)
        # Cleared at the end: the last thing written is a blank line and a carriage return.
        self.assertRegex(shown, rb"\r +\r$")
        self.assertAlmostEqual(seconds[-1], wav_info(self.path("a.wav"))[0] / 22050, delta=0.05)


class MemoryOptionsTest(VoxdTestCase):
    """--gpu-memory-limit, --max-split-size (and their VOXD_* variables), --memory-summary."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="voxd-mem-")
        self.out = os.path.join(self.tmp, "out.wav")

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def synth(self, *options, env=None, extra=()):
        args = [VOXD, *options, "synth", "--voice", ARPABET_VOICE, "--text", "Hello there.",
                "--out", self.out, *extra]
        return subprocess.run(args, capture_output=True, text=True, timeout=300,
                              env={**os.environ, **(env or {})})

    def test_bad_limits_give_one_line_and_exit_2(self):
        for value, says in (("8G", "unknown unit in '8G'"), ("1.5", "not a fraction in (0, 1]"),
                            ("0", "zero bytes"), ("lots", "does not start with a number"),
                            ("1000TiB", "is more than cpu has")):
            self.assert_input_error(self.synth("--gpu-memory-limit", value),
                                       "--gpu-memory-limit", says)
        self.assert_input_error(self.synth(env={"VOXD_GPU_MEMORY_LIMIT": "8G"}),
                                   "VOXD_GPU_MEMORY_LIMIT", "unknown unit")
        self.assert_input_error(self.synth("--max-split-size", "1MiB"),
                                   "--max-split-size", "must be above 2.00 MiB")
        self.assertFalse(os.path.exists(self.out))

    def test_a_limit_too_small_fails_cleanly(self):
        self.assert_input_error(self.synth("--gpu-memory-limit", "1MiB"),
                                   "out of memory", "limit 1.00 MiB", "raise the memory limit")

    def test_synth_memory_summary(self):
        result = self.synth("--gpu-memory-limit", "512MiB", "--max-split-size", "64MiB",
                            extra=("--memory-summary",))
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout, "")
        self.assertGreater(wav_info(self.out)[0], 0)
        for text in ("voxd memory summary, device cpu", "limit: 512.00 MiB",
                     "max split size: 64.00 MiB", "| Allocated memory      |",
                     "| GPU reserved memory   |", "| Non-releasable memory |",
                     "| Weights               |", "| Workspaces            |      0 B   |",
                     "| Allocator cache       |", "| Free                  |"):
            self.assertIn(text, result.stderr)
        lines = [line for line in result.stderr.splitlines() if line.startswith("|")]
        self.assertGreater(len(lines), 25)
        self.assertTrue(all(len(line) == 77 for line in lines), lines)

    def test_vocode_memory_summary_and_environment(self):
        mel = os.path.join(self.tmp, "mel.npy")
        np.save(mel, np.random.default_rng(0).uniform(-6, 1, size=(80, 20)).astype(np.float32))
        result = subprocess.run(
            [VOXD, "vocode", "--voice", ARPABET_VOICE, "--mel", mel, "--out", self.out,
             "--memory-summary"],
            capture_output=True, text=True, timeout=300,
            env={**os.environ, "VOXD_GPU_MEMORY_LIMIT": "256MiB"})
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(wav_info(self.out)[0], 20 * HOP)
        self.assertIn("limit: 256.00 MiB", result.stderr)
        self.assertIn("| Workspaces            |      0 B   |", result.stderr)

    def test_no_summary_without_the_flag(self):
        result = self.synth()
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertNotIn("memory summary", result.stderr)


def has_mem_command():
    result = run("mem", "--help")
    return result.returncode == 0 and "--phonemes" in result.stdout


@unittest.skipUnless(has_mem_command(),
                     "this voxd has no mem command (src/cli/main.cpp does not call add_mem_command)")
class MemCommandTest(VoxdTestCase):
    """voxd mem: the planned memory of a voice's steps, without running them."""

    def mem(self, *args, voice=ARPABET_VOICE):
        return run("mem", "--voice", voice, *args)

    def mem_json(self, *args):
        result = self.mem(*args, "--json")
        self.assertEqual(result.returncode, 0, result.stderr)
        return json.loads(result.stdout)

    def test_cpu_plan_text(self):
        result = self.mem("--batch", "2", "--phonemes", "12", "--threads", "2")
        self.assertEqual(result.returncode, 0, result.stderr)
        out = result.stdout
        self.assertIn("voice 'tiny-arpabet' on cpu in F32", out)
        for line_start, shape in (("weights", ""), ("acoustic encoder", "batch 2 x 12 phonemes"),
                                  ("acoustic decoder", "batch 2 x 12 phonemes -> 96 frames"),
                                  ("vocoder", "2 chunks x 96 frames"),
                                  ("total", "weights + largest step")):
            lines = [line for line in out.splitlines() if line.strip().startswith(line_start)]
            self.assertEqual(len(lines), 1, out)
            self.assertIn(shape, lines[0])
            self.assertRegex(lines[0], r"\d+\.\d\d (KiB|MiB)")
        self.assertRegex(out, r"total .* \(\d+ bytes\)")
        self.assertIn("96 mel frames per sequence is the default, 8 per phoneme", out)
        self.assertIn("planned for 2 threads", out)
        self.assertEqual(result.stderr, "")

    def test_json_plan_adds_up(self):
        plan = self.mem_json("--batch", "2", "--phonemes", "12", "--frames", "50",
                             "--chunks", "3", "--threads", "2")
        self.assertEqual((plan["voice"], plan["device"], plan["dtype"]), ("tiny-arpabet", "cpu", "F32"))
        names = [stage["name"] for stage in plan["stages"]]
        self.assertEqual(names, ["acoustic encoder", "acoustic decoder", "vocoder"])
        self.assertEqual(plan["stages"][2]["shape"], "3 chunks x 50 frames")
        # The encoder's hidden states (2 x 12 x 32 floats) wait for the decoder.
        self.assertEqual(plan["stages"][0]["carried_bytes"], 3072)
        self.assertEqual(plan["stages"][1]["carried_bytes"], 3072)
        for stage in plan["stages"]:
            self.assertGreater(stage["workspace_bytes"], 0)
            self.assertEqual(stage["peak_bytes"], stage["workspace_bytes"] + stage["carried_bytes"])
        self.assertGreater(plan["weights_bytes"], 100000)
        self.assertEqual(plan["total_bytes"],
                         plan["weights_bytes"] + max(s["peak_bytes"] for s in plan["stages"]))

    def test_plans_grow_with_the_shape_and_repeat(self):
        small = self.mem_json("--batch", "2", "--phonemes", "12", "--frames", "50", "--threads", "2")
        large = self.mem_json("--batch", "2", "--phonemes", "12", "--frames", "200", "--threads", "2")
        self.assertEqual(small["stages"][0], large["stages"][0])  # the encoder does not see frames
        for i in (1, 2):
            self.assertGreater(large["stages"][i]["workspace_bytes"],
                               small["stages"][i]["workspace_bytes"])
        again = self.mem_json("--batch", "2", "--phonemes", "12", "--frames", "50", "--threads", "2")
        self.assertEqual(again, small)

    def test_vocoder_only(self):
        plan = self.mem_json("--chunks", "4", "--frames", "32")
        self.assertEqual([stage["name"] for stage in plan["stages"]], ["vocoder"])
        self.assertEqual(plan["stages"][0]["shape"], "4 chunks x 32 frames")

    def test_cuda_plan_needs_no_gpu(self):
        result = self.mem("--device", "cuda", "--dtype", "f16", "--batch", "1", "--phonemes", "8")
        if result.returncode == 2 and "built without CUDA" in result.stderr:
            self.skipTest("voxd was built without CUDA")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("on cuda:0 in F16", result.stdout)
        self.assertIn("cuBLAS's workspace", result.stdout)
        f16 = self.mem_json("--device", "cuda:0", "--dtype", "f16", "--chunks", "2", "--frames", "40")
        f32 = self.mem_json("--device", "cuda:0", "--dtype", "f32", "--chunks", "2", "--frames", "40")
        # F16 halves every weight, and on CUDA adds the copies arranged once at load for the
        # implicit GEMM (V1's resblock pairs, the upsamplers' phases): more than half of F32's.
        self.assertGreater(f16["weights_bytes"], f32["weights_bytes"] // 2)
        self.assertNotEqual(f16["weights_bytes"], f32["weights_bytes"])
        self.assertLess(f16["stages"][0]["workspace_bytes"], f32["stages"][0]["workspace_bytes"])

    def test_bad_arguments(self):
        self.assert_input_error(run("mem", "--batch", "1", "--phonemes", "5"), "--voice")
        self.assert_input_error(self.mem("--batch", "2"), "--batch and --phonemes go together")
        self.assert_input_error(self.mem(), "nothing to plan")
        self.assert_input_error(self.mem("--chunks", "2"), "--chunks needs --frames")
        self.assert_input_error(self.mem("--batch", "0", "--phonemes", "5"), "--batch")
        self.assert_input_error(self.mem("--chunks", "2", "--frames", "-3"), "--frames")
        self.assert_input_error(self.mem("--batch", "1", "--phonemes", "5", "--dtype", "f8"),
                                "--dtype")
        self.assert_input_error(self.mem("--batch", "1", "--phonemes", "5", "--device", "tpu"),
                                "unknown --device 'tpu'")
        self.assert_input_error(self.mem("--batch", "1", "--phonemes", "5", "--device", "cuda:x"),
                                "bad --device 'cuda:x'")
        self.assert_input_error(self.mem("--batch", "1", "--phonemes", "5", "--dtype", "bf16"),
                                "f32 only")
        self.assert_input_error(self.mem("--batch", "1", "--phonemes", "5",
                                         voice=os.path.join(VOICES, "no-such-voice")),
                                "no-such-voice")


EN_DEMO = os.path.join(ROOT, "voices", "en-demo")


def zero_runs(samples):
    """The length of the longest run of zero samples."""
    longest = current = 0
    for zero in samples == 0:
        current = current + 1 if zero else 0
        longest = max(longest, current)
    return longest


class TextFrontEndTest(VoxdTestCase):
    """voxd phonemize, and SSML breaks and rates in voxd synth (docs/text-frontend.md)."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="voxd-text-")

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def symbols(self):
        with open(os.path.join(EN_DEMO, "symbols.txt"), encoding="utf-8") as f:
            return f.read().split("\n")

    def test_phonemize_text(self):
        result = run("phonemize", "--voice", EN_DEMO, "--text",
                     "On 2024-03-05, call 555-123-4567. See *this*.")
        self.assertEqual(result.returncode, 0, result.stderr)
        out = result.stdout
        self.assertIn("voice: en-demo (language en-us, espeak-ipa phonemes)", out)
        self.assertIn("normalized:\n  On March fifth, twenty twenty-four, call five five five, "
                      "one two three, four five six seven. See this.\n", out)
        self.assertIn("sentence 1: On March fifth, twenty twenty-four, call five five five, "
                      "one two three, four five six seven.\n", out)
        self.assertIn("sentence 2: See this.\n", out)
        self.assertNotIn("sentence 3", out)
        symbols = self.symbols()
        phoneme_lines = [l.split(": ", 1)[1] for l in out.splitlines() if l.startswith("  phonemes: ")]
        id_lines = [l.split(": ", 1)[1] for l in out.splitlines() if l.startswith("  ids: ")]
        self.assertEqual(len(phoneme_lines), 2)
        for phonemes, ids in zip(phoneme_lines, id_lines):
            shown = [symbols[int(i)] for i in ids.split()]
            self.assertEqual(" ".join("|" if p == " " else p for p in shown), phonemes)

    def test_phonemize_json_with_ssml_reads_standard_input(self):
        text = ('<speak>Hello <break time="500ms"/> world. '
                '<prosody rate="slow">Slowly now.</prosody></speak>')
        result = run("phonemize", "--voice", EN_DEMO, "--json", stdin=text)
        self.assertEqual(result.returncode, 0, result.stderr)
        analysis = json.loads(result.stdout)
        self.assertEqual(analysis["voice"], "en-demo")
        self.assertEqual(analysis["normalized"], "Hello\nworld.\nSlowly now.")
        sentences = analysis["sentences"]
        self.assertEqual([s["text"] for s in sentences], ["Hello", "world.", "Slowly now."])
        self.assertEqual([s["pause_after_ms"] for s in sentences], [500, 0, 0])
        self.assertEqual([s["rate"] for s in sentences], [1.0, 1.0, 0.75])
        symbols = self.symbols()
        for s in sentences:
            self.assertEqual(s["dropped"], 0)
            self.assertEqual([symbols[i] for i in s["ids"]], s["phonemes"])

    def test_phonemize_bad_input(self):
        self.assert_input_error(run("phonemize", "--voice", EN_DEMO, "--text", "你好，世界"),
                                "the text is in Han script (你), which voice language 'en-us' "
                                "cannot speak")
        self.assert_input_error(run("phonemize", "--voice", EN_DEMO, "--text",
                                    'a <break time="soon"/> b'), '<break time="soon">')
        self.assert_input_error(run("phonemize", "--voice", EN_DEMO, "--text", "  "), "empty")
        self.assert_input_error(run("phonemize", "--voice", EN_DEMO, "--text", "<b></b>"),
                                "nothing to pronounce")
        missing = os.path.join(self.tmp, "no-voice")
        self.assert_input_error(run("phonemize", "--voice", missing, "--text", "hi"), missing)
        self.assert_input_error(run("phonemize", "--text", "hi"), "--voice")

    def test_phonemize_mandarin(self):
        result = run("phonemize", "--language", "zh", "--json", "--text",
                     "银行行长说：一个不是。他行[xing2]了")
        self.assertEqual(result.returncode, 0, result.stderr)
        reading = json.loads(result.stdout)["mandarin"]
        self.assertEqual(reading["normalized"], "银行行长说一个不是\n他行了")
        words = [[(w["text"], " ".join(w["pinyin"]), w["break"]) for w in s["words"]]
                 for s in reading["sentences"]]
        self.assertEqual(words[0], [("银行行长", "yin2 hang2 hang2 zhang3", "#1"),
                                    ("说", "shuo1", "#3"), ("一个", "yi2 ge4", "#1"),
                                    ("不是", "bu2 shi4", "#4")])
        self.assertEqual([pinyin for _, pinyin, _ in words[1]], ["ta1", "xing2", "le5"])

    def test_phonemize_mandarin_with_a_sambert_voice_shows_its_symbols(self):
        result = run("phonemize", "--voice", SAMBERT_ZH_VOICE, "--text", "你好😀。")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("  sentence 1: 你好[ni2 hao3] #4\n", result.stdout)
        self.assertIn("warning: '😀' (U+1F600) is not read", result.stdout)
        self.assertIn("  phonemes: n_c i_c h_c ao_c #4\n", result.stdout)

    def test_mandarin_bad_input_is_named(self):
        self.assert_input_error(run("phonemize", "--language", "zh", "--text", "行[hangg2]"),
                                "the pinyin [hangg2]: 'hangg2' is not a Mandarin syllable")
        self.assert_input_error(run("phonemize", "--language", "fr", "--text", "bonjour"),
                                "--language 'fr'")
        dollars = run("phonemize", "--language", "zh", "--json", "--text", "价格$5")
        self.assertEqual(dollars.returncode, 0, dollars.stderr)
        words = json.loads(dollars.stdout)["mandarin"]["sentences"][0]["words"]
        self.assertEqual(words[0]["pinyin"], ["jia4", "ge2"])
        self.assert_input_error(run("synth", "--voice", SAMBERT_ZH_VOICE, "--text", "Hello.",
                                    "--out", os.path.join(self.tmp, "x.wav")),
                                "has no Chinese characters")
        lexicon = os.path.join(self.tmp, "lexicon.txt")
        with open(lexicon, "w", encoding="utf-8") as f:
            f.write("银行 yin2 hang2\n行 hang9\n")
        self.assert_input_error(run("--lexicon", lexicon, "phonemize", "--language", "zh",
                                    "--text", "行"), f"{lexicon}: line 2: 'hang9'")

    def test_a_deployment_lexicon_sets_readings(self):
        lexicon = os.path.join(self.tmp, "lexicon.txt")
        with open(lexicon, "w", encoding="utf-8") as f:
            f.write("# names\n重庆森林 chong2 qing4 sen1 lin2\n行 hang2\n")
        result = run("--lexicon", lexicon, "phonemize", "--language", "zh", "--json", "--text",
                     "行。重庆森林")
        self.assertEqual(result.returncode, 0, result.stderr)
        sentences = json.loads(result.stdout)["mandarin"]["sentences"]
        self.assertEqual(sentences[0]["words"][0]["pinyin"], ["hang2"])
        self.assertEqual(sentences[1]["words"][0]["text"], "重庆森林")

    def test_synth_reads_chinese_with_a_sambert_voice(self):
        out = os.path.join(self.tmp, "zh.wav")
        result = run("synth", "--voice", SAMBERT_ZH_VOICE, "--text", "今天天气真好。明天见！",
                     "--out", out)
        self.assertEqual(result.returncode, 0, result.stderr)
        with wave.open(out, "rb") as w:
            self.assertEqual(w.getframerate(), 16000)
            self.assertGreater(w.getnframes(), 16000 // 4)

    def synth(self, text, *extra):
        out = os.path.join(self.tmp, "out.wav")
        mel = os.path.join(self.tmp, "mel.npy")
        result = run("synth", "--voice", EN_DEMO, "--text", text, "--out", out, "--mel-out", mel,
                     *extra)
        self.assertEqual(result.returncode, 0, result.stderr)
        with wave.open(out, "rb") as w:
            samples = np.frombuffer(w.readframes(w.getnframes()), "<i2")
        return samples, np.load(mel).shape[1]

    def test_synth_break_adds_its_silence(self):
        plain, plain_frames = self.synth("One. Two.")
        paused, paused_frames = self.synth('One. <break time="1s"/> Two.')
        self.assertEqual(paused_frames, plain_frames)  # the same two sentences
        self.assertLessEqual(abs(len(paused) - len(plain) - 22050), HOP)
        self.assertGreaterEqual(zero_runs(paused), 22050)
        self.assertLess(zero_runs(plain), 22050 // 4)
        # The silence sits between the sentences: the audio before it is the first sentence's.
        start = int(np.argmax(np.convolve(paused == 0, np.ones(22050), "valid") == 22050))
        np.testing.assert_array_equal(paused[:start], plain[:start])

    def test_synth_prosody_rate_applies_on_top_of_speed(self):
        _, normal = self.synth("Speaking at one rate, then another.")
        _, slow = self.synth('<prosody rate="x-slow">Speaking at one rate, then another.</prosody>')
        _, slow_and_fast = self.synth(
            '<prosody rate="50%">Speaking at one rate, then another.</prosody>', "--speed", "2")
        self.assertAlmostEqual(slow / normal, 2.0, delta=0.15)
        self.assertAlmostEqual(slow_and_fast / normal, 1.0, delta=0.1)

    def test_synth_refuses_foreign_script(self):
        out = os.path.join(self.tmp, "x.wav")
        self.assert_input_error(run("synth", "--voice", EN_DEMO, "--text", "你好，世界", "--out", out),
                                "Han script (你)")
        self.assertFalse(os.path.exists(out))


if __name__ == "__main__":
    unittest.main()
