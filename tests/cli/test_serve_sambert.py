"""End-to-end tests of `voxd serve` with a Sambert-HiFiGAN voice (the tiny random-weight fixture
tests/fixtures/voices/tiny-sambert, beside voices/en-demo in the same server): KAN-TTS symbol
strings in, audio out over HTTP equal to what `voxd synth --symbols` makes, with the emotion and
speaker fields, and for a personal voice (tiny-sambert-nsf, HiFiGAN-NSF) with its seed; Chinese
text read by the Mandarin front end (tiny-sambert-zh, KAN-TTS's PinYin phone names) equal to
`voxd synth --text`; the refusals of text without Chinese characters, of text to a voice whose
phones the front end's do not match, of unknown emotions, of a seed to a voice without a source,
of Chinese to an English voice and of symbols sent to an English voice, each naming its field;
and the KV cache pool's pages all back once the streams have ended.

Run by ctest as `/usr/bin/python3 -m unittest tests/cli/test_serve_sambert.py` with VOXD_BIN set
(the CPU build); standard library only. The server helper is test_serve.py's; `scripts/gpu-check.py
serve` runs the suite on CUDA too (VOXD_TEST_DEVICE=cuda).
"""
import io
import json
import os
import subprocess
import sys
import tempfile
import unittest
import wave
from array import array

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_serve import DEVICE, PCM_TOLERANCE, ROOT, VOXD, Server  # noqa: E402

SAMBERT = os.path.join(ROOT, "tests", "fixtures", "voices", "tiny-sambert")
# A personal voice: a speaker embedding, f0 and voicing after the mel, a HiFiGAN-NSF vocoder.
SAMBERT_NSF = os.path.join(ROOT, "tests", "fixtures", "voices", "tiny-sambert-nsf")
# KAN-TTS's PinYin phones: reads Chinese text.
SAMBERT_ZH = os.path.join(ROOT, "tests", "fixtures", "voices", "tiny-sambert-zh")
CHINESE = "今天天气真好，我们一起去银行。2024年3月5日下午3:30见！"
# On CUDA in f32, as `voxd synth` runs, so that the two are compared at one precision.
DTYPE = ["--dtype", "f32"] if DEVICE == "cuda" else []


def token(phone, tone, speaker="F7", emotion="emotion_neutral"):
    return "{%s$%s$s_begin$word_begin$%s$%s}" % (phone, tone, emotion, speaker)


SYMBOLS = "\n".join([
    " ".join(token(p, t) for p, t in [("ge", "tone5"), ("en_c", "tone1"), ("a_c", "tone3"),
                                      ("h_c", "tone2"), ("ao_c", "tone1"), ("n_c", "tone5")]),
    " ".join(token(p, t, "M7") for p, t in [("i_c", "tone3"), ("e_c", "tone2"), ("l", "tone1")]),
])


def body(symbols=SYMBOLS, voice="tiny-sambert", **extra):
    request = {"model": "tts-1", "input": symbols, "voice": voice,
               "response_format": "wav", "input_format": "kantts_symbols"}
    request.update(extra)
    return json.dumps(request).encode()


def pcm(data, rate=16000):
    """The 16-bit samples of a mono WAV (a streamed one has 0xFFFFFFFF sizes)."""
    if data[4:8] == b"\xff\xff\xff\xff":
        data = (data[:4] + (len(data) - 8).to_bytes(4, "little") + data[8:40] +
                (len(data) - 44).to_bytes(4, "little") + data[44:])
    with wave.open(io.BytesIO(data), "rb") as w:
        if (w.getnchannels(), w.getsampwidth(), w.getframerate()) != (1, 2, rate):
            raise AssertionError("unexpected WAV layout")
        return array("h", w.readframes(w.getnframes())).tolist()


class SambertServeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server("--voice", SAMBERT, "--voice", SAMBERT_NSF, "--voice", SAMBERT_ZH,
                            "--chunk-frames", "8",
                            "--first-chunk-frames", "4", *DTYPE)

    @classmethod
    def tearDownClass(cls):
        cls.server.close()

    def post(self, payload):
        return self.server.request("POST", "/v1/audio/speech", payload, key=None)

    def synth(self, voice, *options, source=("--symbols", SYMBOLS)):
        """The samples of `voxd synth --symbols SYMBOLS` (or `source`) with `options`."""
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "synth.wav")
            result = subprocess.run(
                [VOXD, "--backend", DEVICE, "synth", "--voice", voice, *source,
                 *options, "--out", out], capture_output=True, text=True, timeout=120)
            self.assertEqual(result.returncode, 0, result.stderr)
            with open(out, "rb") as f:
                return pcm(f.read())

    def assert_streams(self, payload, want):
        status, headers, data = self.post(payload)
        self.assertEqual(status, 200, data[:300])
        self.assertEqual(headers.get("transfer-encoding"), "chunked")
        got = pcm(data)
        self.assertEqual(len(got), len(want))
        self.assertGreater(len(got), 0)
        self.assertLessEqual(max(abs(a - b) for a, b in zip(got, want)), PCM_TOLERANCE)

    def test_the_voice_list_names_each_voices_speakers_and_emotions(self):
        status, _, data = self.server.request("GET", "/v1/voices", key=None)
        self.assertEqual(status, 200)
        voices = {v["id"]: v for v in json.loads(data)["data"]}
        sambert = voices["tiny-sambert"]
        self.assertEqual((sambert["family"], sambert["sampling"]), ("sambert", False))
        self.assertIn("emotion_happy", sambert["emotions"])
        self.assertIn("emotion_neutral", sambert["emotions"])
        self.assertIn("F74", sambert["speakers"])
        # What the list names, a request takes.
        self.assert_streams(body(emotion=sambert["emotions"][-1], speaker=sambert["speakers"][-1]),
                            self.synth(SAMBERT, "--emotion", sambert["emotions"][-1], "--speaker",
                                       sambert["speakers"][-1]))

    def test_symbols_stream_the_audio_voxd_synth_makes(self):
        self.assert_streams(body(emotion="emotion_happy", speaker="F74"),
                            self.synth(SAMBERT, "--emotion", "emotion_happy", "--speaker", "F74"))

    def test_a_personal_voice_streams_the_audio_of_its_seed(self):
        self.assert_streams(body(voice="tiny-sambert-nsf", seed=5),
                            self.synth(SAMBERT_NSF, "--seed", "5"))

    def test_chinese_text_streams_the_audio_voxd_synth_makes(self):
        self.assert_streams(body(CHINESE, voice="tiny-sambert-zh", input_format="text",
                                 speaker="M7"),
                            self.synth(SAMBERT_ZH, "--speaker", "M7", source=("--text", CHINESE)))

    def test_refusals_name_their_field(self):
        for payload, field in [
                (body("今天天气真好", input_format="text"), "input"),
                (body("Hello there.", voice="tiny-sambert-zh", input_format="text"), "input"),
                (body("行[hangg2]", voice="tiny-sambert-zh", input_format="text"), "input"),
                (json.dumps({"model": "tts-1", "input": "今天天气真好。",
                             "voice": "en-demo"}).encode(), "input"),
                (body(emotion="gloomy"), "emotion"),
                (body(speaker="F8"), "speaker"),
                (body(speed=1.5), "speed"),
                (body(seed=3), "seed"),
                (body("{zz$tone1$s_begin$word_begin$emotion_neutral$F7}"), "input"),
                (json.dumps({"model": "tts-1", "input": "Hi.", "voice": "en-demo",
                             "input_format": "kantts_symbols"}).encode(), "input_format"),
                (json.dumps({"model": "tts-1", "input": "Hi.", "voice": "en-demo",
                             "emotion": "emotion_happy"}).encode(), "emotion")]:
            status, _, data = self.post(payload)
            self.assertEqual(status, 400, (payload, data))
            self.assertEqual(json.loads(data)["error"]["param"], field, data)

    def test_the_kv_pool_is_whole_again_once_streams_end(self):
        for _ in range(3):
            status, _, data = self.post(body())
            self.assertEqual(status, 200, data[:300])
        self.server.wait_for(lambda: self.server.metric("voxd_engine_active_streams") == 0,
                             "every stream to end")
        total = self.server.metric("voxd_engine_kv_cache_pages", 'state="total"')
        self.assertGreater(total, 0)
        self.assertEqual(self.server.metric("voxd_engine_kv_cache_pages", 'state="used"'), 0)
        self.assertEqual(self.server.metric("voxd_engine_kv_cache_pages", 'state="free"'), total)
        for kind in ("encode", "prefill", "decode", "vocoder"):
            self.assertGreater(self.server.metric("voxd_engine_batch_size_count", f'kind="{kind}"'),
                               0, kind)


if __name__ == "__main__":
    unittest.main()
