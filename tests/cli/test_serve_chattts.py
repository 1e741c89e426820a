"""End-to-end tests of `voxd serve` with a ChatTTS voice (the tiny random-weight fixture
tests/fixtures/voices/tiny-chattts, beside voices/en-demo in the same server): audio over HTTP,
the same seed making the same audio, streams decoded together getting the audio each gets alone,
the sampling fields and their refusals, and a KV cache pool that gives every stream's pages back
(a stream cut off mid-generation included; voxd_engine_kv_cache_pages back to 0 used) and refuses,
with 503, a stage it can never hold.

Run by ctest as `/usr/bin/python3 -m unittest tests/cli/test_serve_chattts.py` with VOXD_BIN set
(the CPU build); standard library only. The server helper is test_serve.py's; `scripts/gpu-check.py
serve` runs the suite on CUDA too (VOXD_TEST_DEVICE=cuda).
"""
import io
import json
import os
import socket
import subprocess
import sys
import threading
import unittest
import wave
from array import array

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_serve import (DEVICE, PCM_DIFFERING_FRACTION, PCM_TOLERANCE, ROOT, VOXD,  # noqa: E402
                        Server)

CHATTTS = os.path.join(ROOT, "tests", "fixtures", "voices", "tiny-chattts")
# On CUDA in f32 (not serve's f16 default there): a stream batched with others must draw the same
# tokens as alone, which f16's rounding of the batched products would not keep at every draw.
DTYPE = ["--dtype", "f32"] if DEVICE == "cuda" else []
TEXT = "Hello there. How are you today?"


def body(text=TEXT, **extra):
    request = {"model": "tts-1", "input": text, "voice": "tiny-chattts", "response_format": "wav"}
    request.update(extra)
    return json.dumps(request).encode()


def pcm(data):
    """The 16-bit samples of a 24 kHz mono WAV (a streamed one has 0xFFFFFFFF sizes)."""
    if data[4:8] == b"\xff\xff\xff\xff":
        data = (data[:4] + (len(data) - 8).to_bytes(4, "little") + data[8:40] +
                (len(data) - 44).to_bytes(4, "little") + data[44:])
    with wave.open(io.BytesIO(data), "rb") as w:
        if (w.getnchannels(), w.getsampwidth(), w.getframerate()) != (1, 2, 24000):
            raise AssertionError("unexpected WAV layout")
        return array("h", w.readframes(w.getnframes())).tolist()


def samples(server, **extra):
    status, _, data = server.request("POST", "/v1/audio/speech", body(**extra), key=None)
    if status != 200:
        raise AssertionError(f"status {status}: {data[:300]!r}")
    return pcm(data)


class ChatTtsServeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server("--voice", CHATTTS, *DTYPE)

    @classmethod
    def tearDownClass(cls):
        cls.server.close()

    def test_the_voice_list_says_the_voice_samples(self):
        status, _, data = self.server.request("GET", "/v1/voices", key=None)
        self.assertEqual(status, 200)
        voices = {v["id"]: v for v in json.loads(data)["data"]}
        chattts = voices["tiny-chattts"]
        self.assertEqual((chattts["family"], chattts["sampling"], chattts["emotions"]),
                         ("chattts", True, []))
        self.assertEqual((voices["en-demo"]["family"], voices["en-demo"]["sampling"]),
                         ("fastspeech2-hifigan", False))

    def test_the_same_seed_makes_the_same_audio_and_another_seed_other_audio(self):
        first = samples(self.server, seed=3)
        self.assertGreater(len(first), 24000)  # at least a second at 24 kHz
        self.assertGreater(max(abs(s) for s in first), 100)  # not silence
        self.assertEqual(samples(self.server, seed=3), first)
        self.assertNotEqual(samples(self.server, seed=4), first)

    def test_streams_decoded_together_get_the_audio_each_gets_alone(self):
        requests = [dict(seed=s, input=t) for s, t in
                    [(1, "One sentence here."), (2, TEXT), (3, "Short."), (4, "A third text, a bit longer.")]]
        alone = [samples(self.server, **r) for r in requests]
        together = [None] * len(requests)

        def run(i):
            together[i] = samples(self.server, **requests[i])

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(requests))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for got, want in zip(together, alone):
            self.assertEqual(len(got), len(want))  # the same tokens: the same number of frames
            differing = sum(1 for a, b in zip(got, want) if a != b)
            self.assertLessEqual(max(abs(a - b) for a, b in zip(got, want)), PCM_TOLERANCE)
            self.assertLessEqual(differing, PCM_DIFFERING_FRACTION * len(want))

    def test_sampling_fields_are_taken_and_bad_ones_refused_naming_the_field(self):
        self.assertGreater(len(samples(self.server, seed=5, temperature=0.5, top_p=0.9, top_k=5,
                                       speaker="random", refine_text=False)), 0)
        for extra, field in [({"speed": 2.0}, "speed"), ({"speaker": "nobody"}, "speaker"),
                             ({"top_p": 0}, "top_p"), ({"temperature": -1}, "temperature")]:
            status, _, data = self.server.request("POST", "/v1/audio/speech", body(**extra),
                                                  key=None)
            self.assertEqual(status, 400, extra)
            self.assertEqual(json.loads(data)["error"]["param"], field, data)
        # en-demo (FastSpeech2) in the same server takes none of them.
        status, _, data = self.server.request(
            "POST", "/v1/audio/speech",
            json.dumps({"model": "tts-1", "input": "Hi.", "voice": "en-demo", "seed": 1}).encode(),
            key=None)
        self.assertEqual(status, 400)
        self.assertEqual(json.loads(data)["error"]["param"], "seed")


class KvPoolTest(unittest.TestCase):
    def test_a_cut_off_stream_gives_its_pages_back(self):
        # Room for the most a stream's stage can need (153 pages of 16 positions: a code stage
        # prompted with the longest refined text) and a little more: a stream that kept its pages
        # after its client left would leave later requests waiting.
        server = Server("--voice", CHATTTS, "--kv-cache", "1250KiB", *DTYPE)
        try:
            sock = socket.create_connection(("127.0.0.1", server.port))
            payload = body(seed=9)
            sock.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: "
                         b"application/json\r\nContent-Length: " + str(len(payload)).encode() +
                         b"\r\n\r\n" + payload)
            self.assertEqual(server.metric("voxd_engine_kv_cache_pages", 'state="total"'),
                             1250 * 1024 // 8192)  # tiny-chattts: 8 KiB a page
            server.wait_for(lambda: server.metric("voxd_engine_kv_cache_pages",
                                                  'state="used"') > 0, "a stage holding pages")
            sock.close()
            results = [None, None]

            def run(i):
                results[i] = samples(server, seed=10 + i)

            threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=120)
            self.assertTrue(all(r for r in results), "a request after the cut-off one got no audio")
            server.wait_for(lambda: server.metric("voxd_engine_active_streams") == 0,
                            "every stream to end")
            self.assertEqual(server.metric("voxd_engine_kv_cache_pages", 'state="used"'), 0)
            self.assertEqual(server.metric("voxd_engine_kv_cache_pages", 'state="free"'), 156)
            self.assertEqual(server.metric("voxd_engine_kv_cache_bytes"), 156 * 8192)
            monitor = subprocess.run([VOXD, "monitor", "--url", f"http://127.0.0.1:{server.port}",
                                      "--once", "--interval", "0.2"],
                                     capture_output=True, text=True, timeout=120)
            self.assertEqual(monitor.returncode, 0, monitor.stderr)
            # Three streams of up to 131 pages each (the code stage of this text) from 156: they
            # may preempt one another.
            self.assertRegex(monitor.stdout, r"kv cache    pages used 0 of 156   streams holding 0 "
                                             r"\(most 0\)   preemptions \d+   decode \d+ tokens/s")
            self.assertIn("decode mean", monitor.stdout)
        finally:
            server.close()

    def test_a_pool_too_small_for_any_stage_answers_503(self):
        server = Server("--voice", CHATTTS, "--kv-cache", "64KiB", *DTYPE)
        try:
            status, _, data = server.request("POST", "/v1/audio/speech", body(), key=None)
            self.assertEqual(status, 503, data[:300])
            self.assertIn("KV cache", json.loads(data)["error"]["message"])
            # en-demo is served as before.
            status, _, _ = server.request(
                "POST", "/v1/audio/speech",
                json.dumps({"model": "tts-1", "input": "Hi.", "voice": "en-demo",
                            "response_format": "wav"}).encode(), key=None)
            self.assertEqual(status, 200)
        finally:
            server.close()


if __name__ == "__main__":
    unittest.main()
