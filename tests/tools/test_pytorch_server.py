"""Tests of bench/pytorch_server.py (the seeds' way of serving, for issue 19's table) on the CPU:
with voices/en-demo, the input is split into the front end's sentences, a request in threads mode
gets exactly the model's audio, and batch mode runs concurrent requests as one padded batch; for
Sambert (a stand-in for KAN-TTS, whose checkout CI lacks), threads mode runs one utterance at a
time and pool mode one a copy at once; for ChatTTS (bench/chattts_serve_peer.py's OriginalChat on
the tiny fixture voice around a stand-in LlamaModel), both ways answer each request its own
codes' audio."""
import concurrent.futures
import json
import os
import sys
import threading
import time
import unittest
import urllib.error
import urllib.request

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pytorch_server  # noqa: E402
import test_chattts_serve_bench  # noqa: E402  (its tiny ChatTTS around a stand-in LlamaModel)

VOICE = os.path.join(ROOT, "voices", "en-demo")
VOXD = os.environ.get("VOXD_BIN", os.path.join(ROOT, "build", "src", "cli", "voxd"))
TEXTS = ["Please hold.", "Good evening.", "The meeting moved to room four."]


def start(mode, **options):
    args = pytorch_server.parser().parse_args(
        ["--voice", VOICE, "--voxd", VOXD, "--port", "0", "--device", "cpu", "--mode", mode]
        + [f"--{k.replace('_', '-')}={v}" for k, v in options.items()])
    server = pytorch_server.make_server(args)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def serve(models, known, mode, **options):
    server = pytorch_server.Server(("127.0.0.1", 0), models, known, mode,
                                   options.get("batch", 4), options.get("wait_s", 0.01))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def speak(server, text):
    body = json.dumps({"input": text, "response_format": "pcm"}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{server.server_port}/v1/audio/speech",
                                     body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        assert response.headers["Transfer-Encoding"] == "chunked"
        return np.frombuffer(response.read(), np.int16)


def get(server, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}{path}") as response:
        return json.load(response)


class SplitTest(unittest.TestCase):
    def test_input_is_split_into_known_sentences(self):
        known = {"Please hold.": [1, 2], "Good evening.": [3]}
        self.assertEqual(pytorch_server.split_input(" Good evening. Please hold. ", known),
                         [[3], [1, 2]])
        with self.assertRaisesRegex(ValueError, "not made of"):
            pytorch_server.split_input("Please hold. Hello.", known)
        with self.assertRaisesRegex(ValueError, "empty"):
            pytorch_server.split_input("  ", known)
        # A known text that begins another does not cut the longer one short.
        nested = {"Please hold.": [1], "Please hold. Thanks.": [7]}
        self.assertEqual(pytorch_server.split_input("Please hold. Thanks. Please hold.", nested),
                         [[7], [1]])


class ServeTest(unittest.TestCase):
    def test_threads_mode_answers_the_model_s_own_audio(self):
        server = start("threads")
        try:
            known = server.known
            text = "Please hold. Good evening."
            audio = speak(server, text)
            ids = known["Please hold."] + known["Good evening."]
            alone = np.frombuffer(server.model.synthesize([ids])[0], np.int16)
            np.testing.assert_array_equal(audio, alone)
            self.assertEqual(len(audio) % server.model.hop, 0)
            self.assertGreater(np.abs(audio).max(), 1000)
            self.assertEqual(get(server, "/debug/batches")["sizes"], [1])
            memory = get(server, "/debug/memory?format=json")
            self.assertIsNone(memory["stats"]["peak_reserved_bytes"])  # no CUDA here
            with self.assertRaises(urllib.error.HTTPError) as refused:
                speak(server, "Something the server never phonemized.")
            self.assertEqual(refused.exception.code, 400)
            request = urllib.request.Request(
                f"http://127.0.0.1:{server.server_port}/v1/audio/speech", b"[1, 2]",
                {"Content-Type": "application/json"})
            with self.assertRaises(urllib.error.HTTPError) as not_an_object:
                urllib.request.urlopen(request, timeout=30)
            self.assertEqual(not_an_object.exception.code, 400)
        finally:
            server.shutdown()
            server.server_close()

    def test_batch_mode_runs_concurrent_requests_as_one_padded_batch(self):
        server = start("batch", batch=4, wait_ms=2000)
        try:
            with concurrent.futures.ThreadPoolExecutor(2) as pool:
                short, long = pool.map(lambda t: speak(server, t), [TEXTS[0], TEXTS[2]])
            self.assertEqual(get(server, "/debug/batches")["sizes"], [2])
            # A lone request waits once for --wait-ms, not once per place left in the batch.
            begin = time.monotonic()
            speak(server, TEXTS[1])
            self.assertLess(time.monotonic() - begin, 2.0 + 2.0)
            for text, audio in ((TEXTS[0], short), (TEXTS[2], long)):
                alone = np.frombuffer(server.model.synthesize([server.known[text]])[0],
                                      np.int16).astype(np.float64)
                self.assertEqual(len(audio), len(alone), text)
                # The padded batch changes only what the vocoder sees past the item's end.
                body = slice(0, len(alone) * 9 // 10)
                self.assertLess(np.abs(audio[body] - alone[body]).mean(), 30, text)
        finally:
            server.shutdown()
            server.server_close()


class StandInSambert:
    """Answers OriginalSambert.speak's shape (200 samples a token, the token's phone id / 100)
    and counts how many utterances it runs at once, across every copy."""
    running, most = 0, 0
    guard = threading.Lock()

    def __init__(self):
        import torch
        self.device = torch.device("cpu")

    def speak(self, ids):
        cls = StandInSambert
        with cls.guard:
            cls.running += 1
            cls.most = max(cls.most, cls.running)
        time.sleep(0.2)
        with cls.guard:
            cls.running -= 1
        return np.repeat([row[0] / 100.0 for row in ids[0]], 200).astype(np.float32)


class SambertTest(unittest.TestCase):
    KNOWN = {"{a$tone1}": ([[5, 1, 1, 1]], [0], [3]), "{b$tone2} {c$tone3}":
             ([[7, 2, 1, 1], [9, 3, 1, 1]], [0, 0], [3, 3])}

    def setUp(self):
        StandInSambert.running = StandInSambert.most = 0

    def test_threads_mode_runs_one_utterance_at_a_time(self):
        model = pytorch_server.Sambert(StandInSambert())
        self.assertEqual(model.utterance(list(self.KNOWN.values())),
                         ([[5, 1, 1, 1], [7, 2, 1, 1], [9, 3, 1, 1]], [0, 0, 0], [3, 3, 3]))
        server = serve([model], self.KNOWN, "threads")
        try:
            with concurrent.futures.ThreadPoolExecutor(3) as pool:
                audio = list(pool.map(lambda t: speak(server, t),
                                      ["{a$tone1} {b$tone2} {c$tone3}"] * 3))
            self.assertEqual(StandInSambert.most, 1)  # ModelScope's lock
            for a in audio:
                expected = np.round(np.float32([0.05, 0.07, 0.09]) * 32767.0)
                np.testing.assert_array_equal(a, np.repeat(expected, 200))
            with self.assertRaisesRegex(ValueError, "one utterance at a time"):
                model.synthesize([self.KNOWN["{a$tone1}"]] * 2)
            # Refused before any model loads: a padded batch for Sambert, copies for ChatTTS.
            for family, mode in (("sambert", "batch"), ("chattts", "pool")):
                args = pytorch_server.parser().parse_args(
                    ["--voice", "unused", "--family", family, "--mode", mode, "--device", "cpu"])
                with self.assertRaisesRegex(SystemExit, f"{family}: --mode"):
                    pytorch_server.make_server(args)
        finally:
            server.shutdown()
            server.server_close()

    def test_pool_mode_runs_an_utterance_on_each_copy_at_once(self):
        models = [pytorch_server.Sambert(StandInSambert()) for _ in range(2)]
        server = serve(models, self.KNOWN, "pool", batch=2)
        try:
            with concurrent.futures.ThreadPoolExecutor(4) as pool:
                audio = list(pool.map(lambda t: speak(server, t), ["{a$tone1}"] * 4))
            self.assertEqual(StandInSambert.most, 2)
            self.assertEqual(get(server, "/debug/batches")["sizes"], [1] * 4)
            self.assertTrue(all(len(a) == 200 and a[0] == 1638 for a in audio))
        finally:
            server.shutdown()
            server.server_close()


class ChatTtsTest(unittest.TestCase):
    def test_each_request_gets_its_own_codes_audio_in_both_ways(self):
        chat = test_chattts_serve_bench.tiny_chat()
        model = pytorch_server.ChatTts(chat, 6)
        known = {t: t for t in TEXTS}
        self.assertEqual(model.utterance(["A.", "B."]), ("A. B.", 12))
        for mode in ("threads", "batch"):
            server = serve([model], known, mode, batch=4, wait_s=0.5)
            try:
                texts = [TEXTS[0], f"{TEXTS[1]} {TEXTS[2]}"]
                with concurrent.futures.ThreadPoolExecutor(2) as pool:
                    audio = list(pool.map(lambda t: speak(server, t), texts))
                for a, sentences in zip(audio, (1, 2)):
                    self.assertEqual(len(a), chat.hop * (2 * 6 * sentences - 1), mode)
                    self.assertGreater(np.abs(a).max(), 0, mode)
                sizes = get(server, "/debug/batches")["sizes"]
                self.assertEqual(sizes, [2] if mode == "batch" else [1, 1])
            finally:
                server.shutdown()
                server.server_close()


if __name__ == "__main__":
    unittest.main()
