"""Tests of bench/seeds_table.py (issue 19's side-by-side table): the table's cells, the SVG
charts, NVML's absence, and one short run of voxd serve and the seeds' padded-batch way on the
CPU with voices/en-demo."""
import json
import os
import sys
import tempfile
import time
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import seeds_table  # noqa: E402

VOXD = os.environ.get("VOXD_BIN", os.path.join(ROOT, "build", "src", "cli", "voxd"))


def way(label, most, search, reserved=2**30, used=None):
    return {"label": label, "cold_start_s": 1.5, "alone_ttfa_ms": 40.0, "alone_total_ms": 90.0,
            "users": [{"users": 1, "audio_per_s": 20.0, "gpu_utilization": 31.0},
                      {"users": 2, "audio_per_s": 35.5, "gpu_utilization": None}],
            "most_users": most, "search": [{"concurrency": n} for n in search],
            "peak_reserved_bytes": reserved, "peak_device_used_bytes": used}


class TableTest(unittest.TestCase):
    def test_cells_say_what_was_measured_and_what_was_not(self):
        text = seeds_table.table([way("a", 4, [1, 2, 4, 8]), way("b", 8, [1, 2, 4, 8]),
                                  way("c", None, [1], reserved=None, used=3 * 2**30)], 200)
        rows = text.splitlines()
        self.assertIn("p95 first audio <= 200 ms", rows[0])
        self.assertEqual(rows[2], "| a | 1.50 | 40 / 90 | 31 / - | 20.0 / 35.5 | 4 | 1.00 | - |")
        self.assertIn("| >= 8 |", rows[3])  # every round of its search kept within the target
        self.assertIn("| 0 | - | 3.00 |", rows[4])  # even one request at a time missed it


class RequestTest(unittest.TestCase):
    def test_a_request_is_the_family_s_sentences_at_the_voice_s_own_rate(self):
        args = seeds_table.parser().parse_args(["--family", "chattts"])
        args.family_spec, args.voice_name = seeds_table.FAMILIES["chattts"], "chat-v"
        args.texts = ["One.", "Two.", "Three."]
        body = json.loads(seeds_table.request_body(args, 2, 2))
        self.assertEqual(body, {"model": "tts-1", "voice": "chat-v", "response_format": "pcm",
                                "sample_rate": "native", "input": "Three. One.",
                                "refine_text": False})
        sambert = seeds_table.FAMILIES["sambert"]
        self.assertEqual(sambert.fields, {"input_format": "kantts_symbols"})
        self.assertEqual(sambert.ways, ["voxd", "threads", "pool"])
        self.assertEqual(seeds_table.voice_rate(os.path.join(ROOT, "voices", "en-demo")), 22050)
        self.assertEqual(seeds_table.voice_rate(
            os.path.join(ROOT, "tests", "fixtures", "voices", "tiny-chattts")), 24000)
        texts = sambert.texts()
        self.assertEqual(len(texts), 12)
        self.assertTrue(all(t.startswith("{") and t.endswith("}") for t in texts))
        self.assertEqual(texts, sambert.texts())  # the server's list is the same

    def test_a_way_the_family_has_not_is_refused(self):
        with self.assertRaises(SystemExit):
            seeds_table.main(["--family", "sambert", "--voice", "v", "--voxd", "x",
                              "--ways", "voxd,batch"])


class SearchTest(unittest.TestCase):
    @staticmethod
    def rounds(p95, errors=()):
        """round_of for summaries with these p95s by concurrency, errors at those in `errors`."""
        def round_of(n):
            return {"errors": int(n in errors), "ttfa_p95_ms": p95[n]}
        return round_of

    def test_most_users_is_the_last_round_before_the_first_miss(self):
        p95 = {1: 50, 2: 90, 4: 250, 8: 150, 16: 400, 32: 900, 64: 1500}
        rounds, most = seeds_table.search(self.rounds(p95), [1, 2, 4, 8, 16, 32, 64], 200, 2)
        # 8 is within the target again, but after the miss at 4: most stays 2; two rounds past
        # the miss are measured for the charts, then the search ends.
        self.assertEqual(most, 2)
        self.assertEqual([r["concurrency"] for r in rounds], [1, 2, 4, 8, 16])
        self.assertEqual([r["ttfa_p95_ms"] for r in rounds], [50, 90, 250, 150, 400])
        _, most = seeds_table.search(self.rounds(p95), [1, 2], 200, 2)
        self.assertEqual(most, 2)  # every round within: the list's end

    def test_a_round_with_errors_or_no_audio_ends_the_search(self):
        p95 = {1: 50, 2: 60, 4: 70, 8: 80}
        rounds, most = seeds_table.search(self.rounds(p95, errors={4}), [1, 2, 4, 8], 200, 2)
        self.assertEqual(([r["concurrency"] for r in rounds], most), ([1, 2, 4], 2))
        rounds, most = seeds_table.search(self.rounds({1: None, 2: 10}), [1, 2], 200, 2)
        self.assertEqual((len(rounds), most), (1, None))
        rounds, most = seeds_table.search(self.rounds({1: 300, 2: 10}), [1, 2], 200, 0)
        self.assertEqual((len(rounds), most), (1, None))  # --past 0: the miss ends it


class ChartTest(unittest.TestCase):
    def test_a_chart_draws_each_series_and_skips_an_empty_one(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "c.svg")
            seeds_table.svg_chart(path, "t", "x", "y",
                                  {"one": [(1, 5.0), (2, 7.0), (4, None)], "two": [(1, 3.0)]},
                                  log_x=True)
            with open(path, encoding="utf-8") as f:
                svg = f.read()
            self.assertTrue(svg.startswith("<svg") and svg.rstrip().endswith("</svg>"))
            self.assertEqual(svg.count("<polyline"), 2)
            self.assertIn(">one<", svg)
            linear = os.path.join(tmp, "l.svg")
            seeds_table.svg_chart(linear, "t", "s", "MiB",
                                  {"one": [(0.1 * k, 10.0) for k in range(1000)]})
            with open(linear, encoding="utf-8") as f:
                labels = f.read().count('text-anchor="middle">')
            self.assertLess(labels, 12)  # five ticks and the axis names, not a label a sample
            wide = os.path.join(tmp, "w.svg")  # a long name widens the legend's column
            seeds_table.svg_chart(wide, "t", "x", "y", {"n" * 80: [(1, 5.0), (2, 7.0)]})
            with open(wide, encoding="utf-8") as f:
                self.assertIn('width="1080"', f.readline())
            empty = os.path.join(tmp, "e.svg")
            seeds_table.svg_chart(empty, "t", "x", "y", {"one": []})
            self.assertFalse(os.path.exists(empty))


class StartTest(unittest.TestCase):
    def test_a_server_that_never_listens_is_ended_and_named(self):
        command = [sys.executable, "-c", "import time; print('starting', flush=True); "
                   "time.sleep(60)"]
        begin = time.monotonic()
        with self.assertRaisesRegex(SystemExit, "did not start listening within 1(.|\n)*starting"):
            seeds_table.start_server(command, dict(os.environ), 1)
        self.assertLess(time.monotonic() - begin, 10)

    def test_what_the_server_says_after_listening_is_kept_for_error_messages(self):
        command = [sys.executable, "-c", "import json, sys, time; "
                   "print(json.dumps({'msg': 'listening', 'url': 'http://127.0.0.1:9'}), "
                   "flush=True); print('request failed: RuntimeError', file=sys.stderr, "
                   "flush=True); time.sleep(60)"]
        process, url, _, output = seeds_table.start_server(command, dict(os.environ), 30)
        try:
            self.assertEqual(url, "http://127.0.0.1:9")
            deadline = time.monotonic() + 10
            while "request failed: RuntimeError" not in output and time.monotonic() < deadline:
                time.sleep(0.05)
            self.assertIn("request failed: RuntimeError", output)
        finally:
            process.kill()
            process.wait()


class NvmlTest(unittest.TestCase):
    def test_without_a_gpu_readings_are_none(self):
        nvml = seeds_table.Nvml()
        if not nvml.available:
            self.assertEqual(nvml.reading(), (None, None))
        else:
            utilization, used = nvml.reading()
            self.assertGreater(used, 0)


class RunTest(unittest.TestCase):
    def test_a_short_run_measures_both_ways(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "seeds.json")
            code = seeds_table.main(
                ["--voice", os.path.join(ROOT, "voices", "en-demo"), "--voxd", VOXD,
                 "--device", "cpu", "--ways", "voxd,batch", "--search", "1,2,4", "--alone", "2",
                 "--ttfa-ms", "0.001", "--past", "1",
                 "--users-seconds", "1", "--sentences", "1", "--json", out,
                 "--plots", os.path.join(tmp, "plots")])
            self.assertEqual(code, 0)
            with open(out, encoding="utf-8") as f:
                figures = json.load(f)
            self.assertEqual([w["way"] for w in figures["ways"]], ["voxd", "batch"])
            for w in figures["ways"]:
                self.assertGreater(w["cold_start_s"], w["listening_s"])
                self.assertGreater(w["alone_total_ms"], 0)
                self.assertEqual([u["users"] for u in w["users"]], [1, 2])
                self.assertTrue(all(u["errors"] == 0 and u["audio_per_s"] > 0 for u in w["users"]))
                # Every round misses a 1 µs target: one more after the first, for the charts.
                self.assertEqual([r["concurrency"] for r in w["search"]], [1, 2])
                self.assertEqual([r["errors"] for r in w["search"]], [0, 0])
                self.assertIsNone(w["most_users"])
            self.assertIsNone(figures["ways"][1]["peak_reserved_bytes"])  # PyTorch on the CPU
            self.assertTrue(os.path.isfile(os.path.join(tmp, "plots",
                                                        "seeds-fastspeech2-throughput.svg")))
            # The same table and charts again from the saved JSON, without measuring.
            replot = os.path.join(tmp, "replot")
            self.assertEqual(seeds_table.main(["--from-json", out, "--plots", replot]), 0)
            drawn = sorted(os.listdir(os.path.join(tmp, "plots")))  # memory needs NVML
            self.assertEqual(sorted(os.listdir(replot)), drawn)
            for name in drawn:
                with open(os.path.join(tmp, "plots", name), encoding="utf-8") as f:
                    measured = f.read()
                with open(os.path.join(replot, name), encoding="utf-8") as f:
                    self.assertEqual(f.read(), measured)
            with self.assertRaises(SystemExit):
                seeds_table.main(["--voice", os.path.join(ROOT, "voices", "en-demo")])


if __name__ == "__main__":
    unittest.main()
