"""Tests of bench/step_timeline.py: the device's time around a burst's p95 first audio, from a
made-up log with known figures and from a real `voxd serve` on the CPU (voices/en-demo)."""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import step_timeline  # noqa: E402

VOXD = os.environ.get("VOXD_BIN", os.path.join(ROOT, "build", "src", "cli", "voxd"))


def line(seconds_after, **fields):
    """A JSON log line written `seconds_after` 10:00:00.000 (the log's millisecond times)."""
    ms = round(seconds_after * 1000)
    return json.dumps({"time": f"2026-12-03T10:00:{ms // 1000:02d}.{ms % 1000:03d}Z", **fields})


def speech(end, duration_ms, ttfa_ms, **fields):
    return line(end, level="info", msg="request", method="POST", path="/v1/audio/speech",
                status=200, duration_ms=duration_ms, ttfa_ms=ttfa_ms, **fields)


def step(end, seconds, kind, urgency, items, device_wait_s=None, ran_beside=None,
         host_before=None):
    fields = {} if device_wait_s is None else {"device_wait_s": device_wait_s}
    if ran_beside is not None:
        fields["ran_beside"] = ran_beside
    if host_before is not None:
        fields["host_before"] = host_before
    return line(end, level="debug", msg="step", kind=kind, urgency=urgency, items=items,
                seconds=seconds, **fields)


class TimelineTest(unittest.TestCase):
    def timeline_of(self, lines):
        with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as f:
            f.write("\n".join(lines) + "\nnot json\n")
        self.addCleanup(os.unlink, f.name)
        return step_timeline.timeline(*step_timeline.read_log(f.name))

    def test_device_time_is_split_at_the_p95_first_audio(self):
        # Two requests arrive at 0 and 0.1 s; first audio at 0.3 and 0.5 s. Steps: acoustic
        # 0.0-0.1 (first audio), idle 0.1-0.2, vocoder 0.2-0.4 (first audio), vocoder 0.4-0.7
        # (ahead): the p95 moment is 0.5 s, so 0.1 s of the last step falls before it, and a
        # third of its 0.24 s waiting for the GPU with it. The acoustic step waited 0.02 s for
        # the GPU (the rest was the host's); the first vocoder step's line does not say.
        gap = {"relock_s": 0.001, "deliver_s": 0.002, "reap_s": 0.003, "choose_s": 0.004}
        t = self.timeline_of([
            step(0.1, 0.1, "acoustic", "first_audio", 2, device_wait_s=0.02),
            step(0.4, 0.2, "vocoder", "first_audio", 2, host_before=gap),
            speech(0.9, 900, 300),
            step(0.7, 0.3, "vocoder", "ahead", 1, device_wait_s=0.24, host_before=gap),
            speech(1.0, 900, 400),
            line(1.0, level="info", msg="request", path="/healthz", duration_ms=0.1),
        ])
        self.assertEqual(t["requests"], 2)
        self.assertAlmostEqual(t["ttfa_p50_ms"], 300, places=3)
        self.assertAlmostEqual(t["ttfa_p95_ms"], 400, places=3)
        self.assertAlmostEqual(t["p95_first_audio_at_ms"], 500, places=3)
        before = t["parts"]["to the p95 first audio"]
        self.assertAlmostEqual(before["seconds"], 0.5, places=6)
        self.assertAlmostEqual(before["idle_s"], 0.1, places=6)
        busy = {(r["kind"], r["urgency"]): (r["steps"], r["items"], r["seconds"])
                for r in before["busy"]}
        self.assertEqual(set(busy), {("acoustic", "first_audio"), ("vocoder", "first_audio"),
                                     ("vocoder", "ahead")})
        self.assertAlmostEqual(busy[("vocoder", "ahead")][2], 0.1, places=6)
        waits = {(r["kind"], r["urgency"]): r["gpu_wait_s"] for r in before["busy"]}
        self.assertAlmostEqual(waits[("acoustic", "first_audio")], 0.02, places=6)
        self.assertIsNone(waits[("vocoder", "first_audio")])
        self.assertAlmostEqual(waits[("vocoder", "ahead")], 0.08, places=6)
        after = t["parts"]["after it"]
        self.assertAlmostEqual(after["seconds"], 0.2, places=6)
        self.assertAlmostEqual(after["idle_s"], 0.0, places=6)
        self.assertEqual([(r["kind"], r["steps"], r["items"]) for r in after["busy"]],
                         [("vocoder", 1, 1)])
        self.assertAlmostEqual(after["busy"][0]["gpu_wait_s"], 0.16, places=6)
        report = step_timeline.report(t)
        self.assertIn("| to the p95 first audio | acoustic | first_audio | 1 | 2 | 0.100 | 20 % | "
                      "0.020 |", report)
        self.assertIn("| to the p95 first audio | vocoder | first_audio | 1 | 2 | 0.200 | 40 % | |",
                      report)
        self.assertIn("| to the p95 first audio | idle | | | | 0.100 | 20 % | |", report)
        self.assertEqual(before["idle"]["gaps"], 1)
        self.assertAlmostEqual(before["idle"]["before_first_step_s"], 0.0, places=6)
        self.assertAlmostEqual(before["idle"]["between_steps_s"], 0.1, places=6)
        self.assertAlmostEqual(before["idle"]["longest_gap_ms"], 100.0, places=3)
        self.assertIn("idle to the p95 first audio: 0.0 ms before the first step, 100.0 ms in 1 "
                      "gaps between steps (median 100.00 ms, longest 100.00 ms), 0.0 ms after "
                      "the last", report)
        # The host work before the two vocoder steps, both starting before the p95 moment (0.2
        # and 0.4 s); the acoustic step's line has none.
        self.assertEqual(before["host_work_s"], {"choose_s": 0.008, "deliver_s": 0.004,
                                                 "reap_s": 0.006, "relock_s": 0.002})
        self.assertIsNone(after["host_work_s"])
        self.assertIn("the device thread between steps to the p95 first audio: choosing 8.0 ms, "
                      "delivering 4.0 ms, reaping 6.0 ms, taking the lock back 2.0 ms", report)

    def test_a_step_beside_one_in_flight_takes_its_span_from_it(self):
        # A vocoder step in flight 0.1-0.5 s (its line written after the acoustic step's start,
        # 0.2 s waiting for the GPU at its end), an acoustic step beside it 0.2-0.35 s, logged
        # after it; first audio at 0.6 s. The device thread ran the vocoder step 0.1-0.2 and
        # 0.35-0.5 s, the acoustic step between; idle 0-0.1 and 0.5-0.6 s.
        t = self.timeline_of([
            step(0.5, 0.4, "vocoder", "first_audio", 8, device_wait_s=0.12, ran_beside=False),
            step(0.35, 0.15, "acoustic", "first_audio", 4, device_wait_s=0.03, ran_beside=True),
            speech(0.6, 600, 600, admitted_ms=120.0),
        ])
        self.assertEqual((t["admitted_p50_ms"], t["admitted_p95_ms"]), (120.0, 120.0))
        self.assertIn("admitted (text through the front end, in the engine's queue) p50 120 ms",
                      step_timeline.report(t))
        before = t["parts"]["to the p95 first audio"]
        self.assertAlmostEqual(before["idle_s"], 0.2, places=6)
        # The three spans touch: no gap between them, the idle before the first and after.
        self.assertEqual(before["idle"]["gaps"], 0)
        self.assertAlmostEqual(before["idle"]["before_first_step_s"], 0.1, places=6)
        self.assertAlmostEqual(before["idle"]["after_last_step_s"], 0.1, places=6)
        busy = {r["kind"]: (r["steps"], r["items"], r["seconds"], r["gpu_wait_s"])
                for r in before["busy"]}
        self.assertEqual(busy["vocoder"][:2], (1, 8))
        self.assertAlmostEqual(busy["vocoder"][2], 0.25, places=6)
        self.assertAlmostEqual(busy["vocoder"][3], 0.12, places=6)
        self.assertEqual(busy["acoustic"][:2], (1, 4))
        self.assertAlmostEqual(busy["acoustic"][2], 0.15, places=6)
        self.assertAlmostEqual(busy["acoustic"][3], 0.03, places=6)

    def test_a_log_without_steps_says_what_to_do(self):
        with self.assertRaisesRegex(ValueError, "--log-level debug"):
            self.timeline_of([speech(1.0, 500, 100)])
        with self.assertRaisesRegex(ValueError, "no speech request"):
            self.timeline_of([step(0.1, 0.1, "acoustic", "first_audio", 1)])


class LoadGapsTest(unittest.TestCase):
    def test_the_time_outside_the_servers_clock_by_request(self):
        # Two requests; the server read "a" at 0.10 s and "b" at 0.20 s (10:00:00 + those), and
        # had their first audio 0.30 s and 0.50 s later; the load wrote them at 0.05 and 0.06 s
        # and read their first audio at 0.45 and 0.80 s. "c" the server never logged.
        base = 1796292000.0  # 2026-12-03T10:00:00Z
        log = [speech(1.0, 900, 300, id="a"), speech(1.2, 1000, 500, id="b"),
               line(1.3, level="info", msg="request", path="/healthz", duration_ms=0.1, id="h")]
        with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as f:
            f.write("\n".join(log) + "\n")
        self.addCleanup(os.unlink, f.name)
        server = step_timeline.read_request_ids(f.name)
        self.assertEqual(sorted(server), ["a", "b"])
        load = [{"id": "a", "started": base, "written": base + 0.05, "first_audio": base + 0.45},
                {"id": "b", "started": base, "written": base + 0.06, "first_audio": base + 0.80},
                {"id": "c", "started": base, "written": base + 0.07, "first_audio": base + 0.9},
                {"id": "d", "started": None, "written": None, "first_audio": None}]
        g = step_timeline.load_gaps(server, load)
        self.assertEqual(g["joined"], 2)
        for got, want in ((g["to_server_ms"], [50, 140, 140]), (g["from_server_ms"], [50, 100, 100]),
                          (g["slow"]["to_server_ms"], [140, 140, 140]),
                          (g["slow"]["server_ms"], [500, 500, 500]),
                          (g["slow"]["from_server_ms"], [100, 100, 100])):
            for a, b in zip(got, want):
                self.assertAlmostEqual(a, b, places=3)
        self.assertEqual(g["slow"]["requests"], 1)
        self.assertIn("2 requests joined by id", step_timeline.gaps_line(g))
        with self.assertRaisesRegex(ValueError, "request id"):
            step_timeline.load_gaps(server, load[2:])


class ServeTest(unittest.TestCase):
    def test_a_real_burst_on_the_cpu(self):
        with tempfile.TemporaryDirectory() as tmp:
            log = os.path.join(tmp, "serve.log")
            with open(log, "w") as err:
                server = subprocess.Popen(
                    [VOXD, "serve", "--voice", os.path.join(ROOT, "voices", "en-demo"), "--port",
                     "0", "--device", "cpu", "--threads", "2", "--log-format", "json",
                     "--log-level", "debug"], stdout=subprocess.DEVNULL, stderr=err)
            try:
                url = None
                for _ in range(600):
                    with open(log) as f:
                        for entry in f:
                            if '"msg":"listening"' in entry:
                                url = json.loads(entry)["url"]
                    if url or server.poll() is not None:
                        break
                    time.sleep(0.05)
                self.assertIsNotNone(url, open(log).read())
                times = os.path.join(tmp, "request-times.jsonl")
                result = subprocess.run(
                    [sys.executable, os.path.join(ROOT, "bench", "stream_load.py"), "--url", url,
                     "--voice", "en-demo", "--clients", "4", "--timeout", "60", "--unique",
                     "--request-times", times],
                    capture_output=True, text=True, timeout=120)
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertIn("requests written:", result.stdout)
            finally:
                server.send_signal(signal.SIGTERM)
                server.wait(timeout=60)
            t = step_timeline.timeline(*step_timeline.read_log(log))
            with open(log) as f:
                entries = [json.loads(line) for line in f if line.startswith("{")]
            with open(times) as f:
                load = [json.loads(line) for line in f]
            gaps = step_timeline.load_gaps(step_timeline.read_request_ids(log), load)
        # Every stream's request id came back in the server's log; the server read each request
        # after the client wrote it and sent its first audio before the client read it (within
        # the log's millisecond times).
        self.assertEqual(gaps["joined"], 4)
        self.assertGreater(gaps["to_server_ms"][0], -1.0)
        self.assertGreater(gaps["from_server_ms"][0], -1.0)
        self.assertEqual(t["requests"], 4)
        self.assertLessEqual(t["admitted_p95_ms"], t["ttfa_p95_ms"])
        before = t["parts"]["to the p95 first audio"]
        kinds = {(r["kind"], r["urgency"]) for r in before["busy"]}
        self.assertIn(("acoustic", "first_audio"), kinds)
        self.assertIn(("vocoder", "first_audio"), kinds)
        busy = sum(r["seconds"] for r in before["busy"])
        self.assertAlmostEqual(busy + before["idle_s"], before["seconds"], delta=0.01)
        # The acoustic steps' own lines: each pads its lengths to at least the longest sentence's
        # and at most an eighth more, and times the decoder's run within its decoder time; every
        # step line counts the segments it reserved and its ops' host time.
        acoustic = [e for e in entries if e.get("msg") == "acoustic step"]
        self.assertTrue(any(e["sentences"] > 0 and e["frames"] > 0 for e in acoustic), acoustic)
        for e in acoustic:
            self.assertGreaterEqual(e["padded_phonemes"], e["phonemes"])
            self.assertGreaterEqual(e["padded_frames"], e["frames"])
            self.assertLessEqual(8 * e["padded_frames"], 9 * e["frames"] + 8 * 16)
            self.assertGreaterEqual(e["planning_s"], 0)
            self.assertGreaterEqual(e["decoder_run_s"], 0)
            self.assertLessEqual(e["decoder_run_s"], e["decoder_s"])
        steps = [e for e in entries if e.get("msg") == "step"]
        self.assertTrue(steps)
        for e in steps:
            self.assertIsInstance(e["segment_reserves"], int)
            self.assertGreaterEqual(e["device_wait_s"], 0)
            self.assertLessEqual(e["device_wait_s"], e["seconds"])
            # Host time in the backend's ops: none on the cpu backend, whose ops are its compute.
            self.assertGreaterEqual(e["ops_host_s"], 0)
            self.assertLessEqual(e["ops_host_s"], e["seconds"])
            self.assertEqual(e["top_ops"] == "", e["ops_host_s"] == 0)
        # The device thread's work between steps, by part: each within the time between the
        # two steps' lines (the one before wrote its line after taking the lock back).
        for before, e in zip(steps, steps[1:]):
            parts = e["host_before"]
            self.assertEqual(set(parts), {"relock_s", "deliver_s", "reap_s", "choose_s"})
            self.assertTrue(all(v >= 0 for v in parts.values()), parts)
            spacing = (step_timeline.log_time(e) - step_timeline.log_time(before)
                       - e["seconds"])
            self.assertLessEqual(sum(parts.values()) - parts["relock_s"], spacing + 1e-4,
                                 (before, e))


if __name__ == "__main__":
    unittest.main()
