"""Tests of the ChatTTS serving benchmark's parts that need no GPU: bench/serve_workload.py (the
requests' lengths, real-time accounting), bench/chattts_serve_load.py (chunk arrivals from a
chunked HTTP body), bench/chattts_serve_peer.py (the original's batching, streaming and three
ways, on the tiny fixture voice with a stand-in for transformers' LlamaModel, which this
machine's Python lacks) and scripts/gpu-check.py's chattts-serve pieces (the derived voice, the
side-by-side table, the targets).

Run by ctest with Debian's python3 (python3-torch, python3-numpy):
    /usr/bin/python3 -m unittest -v tests/tools/test_chattts_serve_bench.py
"""
import asyncio
import http.server
import importlib.util
import json
import shutil
import sys
import tempfile
import threading
import types
import unittest
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tools"))
import chattts_peer  # noqa: E402
import chattts_serve_load  # noqa: E402
import chattts_serve_peer  # noqa: E402
import serve_workload as workload  # noqa: E402
import stream_load  # noqa: E402
from reference import chattts  # noqa: E402

SPEC = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu-check.py")
gpu_check = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(gpu_check)
TINY = ROOT / "tests" / "fixtures" / "voices" / "tiny-chattts"


class WorkloadTest(unittest.TestCase):
    def test_random_lengths_follow_the_seed(self):
        a = workload.random_requests(200, seed=7)
        self.assertEqual(a, workload.random_requests(200, seed=7))
        self.assertNotEqual(a, workload.random_requests(200, seed=8))
        self.assertEqual(workload.random_requests(50, seed=7), a[:50])
        self.assertEqual({r.sentences for r in a}, {1, 2, 3, 4})
        for r in a:  # each of TEXTS ends in its only full stop
            self.assertEqual(r.text.count("."), r.sentences)
        self.assertTrue(all(r.sentences == 2 for r in workload.random_requests(20, 1, 2, 2)))
        with self.assertRaises(ValueError):
            workload.random_requests(1, 1, 3, 2)

    def test_fixed_requests_and_ranges(self):
        requests = workload.fixed_requests(3, 2)
        self.assertEqual([r.sentences for r in requests], [2, 2, 2])
        self.assertEqual([r.seed for r in requests], [0, 1, 2])
        self.assertEqual(requests[1].text,
                         workload.TEXTS[1] + " " + workload.TEXTS[2])
        self.assertEqual(workload.parse_range("1-4"), (1, 4))
        self.assertEqual(workload.parse_range("3"), (3, 3))


class RealTimeTest(unittest.TestCase):
    def test_a_round_summary(self):
        second = workload.RATE
        records = [workload.Record([(0.1, second), (0.5, second)]),
                   workload.Record([(0.3, second), (1.5, second)]),   # 0.2 s late
                   workload.Record([], "HTTP 503"), workload.Record([])]
        s = workload.summarize(records, wall_s=2.0)
        self.assertEqual((s["requests"], s["ok"], s["errors"]), (4, 2, 2))
        self.assertEqual(s["errors_by_kind"], {"HTTP 503": 1, "no audio": 1})
        self.assertAlmostEqual(s["ttfa_p50_ms"], 100)  # nearest rank (round half to even)
        self.assertAlmostEqual(s["ttfa_p95_ms"], 300)
        self.assertAlmostEqual(s["audio_s"], 4.0)
        self.assertAlmostEqual(s["audio_per_s"], 2.0)
        self.assertEqual(s["realtime"], 1)
        self.assertAlmostEqual(s["max_lag_ms"], 200)
        self.assertEqual(workload.summarize(records, 2.0, slack_s=0.25)["realtime"], 2)
        self.assertFalse(workload.all_kept_up(s))
        self.assertTrue(workload.all_kept_up(workload.summarize(records[:1], 1.0)))
        self.assertFalse(workload.all_kept_up(workload.summarize([], 1.0)))

    def test_a_round_row_has_a_cell_per_column(self):
        s = workload.summarize([workload.Record([(0.25, 48000)])], 1.0)
        cells = workload.round_cells(s)
        self.assertEqual(len(cells), len(workload.ROUND_COLUMNS))
        self.assertEqual(cells[3:5], ["250", "250"])
        self.assertEqual(workload.markdown_header(["a", "b"]), "| a | b |\n|---|---|")
        self.assertEqual(workload.gib(None), "-")
        self.assertEqual(workload.gib(3 * 2**29), "1.50")


class ChunkedServer:
    """A server on a free port answering every connection with a chunked 200 of the given
    chunks (bytes), each after its delay in seconds."""

    def __init__(self, chunks):
        self.chunks = chunks
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        self.thread = threading.Thread(target=self._serve, args=(ready,), daemon=True)
        self.thread.start()
        ready.wait()

    def _serve(self, ready):
        asyncio.set_event_loop(self.loop)

        async def answer(reader, writer):
            while (await reader.readline()) not in (b"\r\n", b""):
                pass
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            for delay, data in self.chunks:
                await asyncio.sleep(delay)
                writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                await writer.drain()
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            writer.close()

        self.server = self.loop.run_until_complete(asyncio.start_server(answer, "127.0.0.1", 0))
        self.port = self.server.sockets[0].getsockname()[1]
        ready.set()
        self.loop.run_forever()

    def close(self):
        async def stop():
            self.server.close()
            await self.server.wait_closed()
            self.loop.stop()
        asyncio.run_coroutine_threadsafe(stop(), self.loop)
        self.thread.join()
        self.loop.close()


class ClientTest(unittest.TestCase):
    def test_each_chunk_arrival_is_timed_and_counted_in_samples(self):
        server = ChunkedServer([(0.05, b"\0" * 4800), (0.3, b"\0" * 2400)])
        self.addCleanup(server.close)
        args = types.SimpleNamespace(url=f"http://127.0.0.1:{server.port}", api_key=None,
                                     voice="v", timeout=10)
        requests = workload.fixed_requests(3, 1)
        records, wall = asyncio.run(chattts_serve_load.Target(args).streams(requests, window=2))
        self.assertEqual(len(records), 3)
        for r in records:
            self.assertIsNone(r.error)
            self.assertEqual([n for _, n in r.arrivals], [2400, 1200])
            self.assertGreaterEqual(r.arrivals[0][0], 0.05)
            self.assertGreaterEqual(r.arrivals[1][0] - r.arrivals[0][0], 0.25)
        self.assertGreaterEqual(wall, 0.7)  # two at a time: the third waited for a slot
        summary = workload.summarize(records, wall)
        self.assertEqual(summary["realtime"], 0)  # 0.3 s apart, 0.1 s of audio before
        past = asyncio.run(chattts_serve_load.Target(args).streams(requests, 2, deadline=0))
        self.assertEqual(past, ([], past[1]))  # none opened after the deadline

    def test_memory_reads_the_allocator_nvml_and_the_kv_pool(self):
        summary = {"device": "cuda:0", "stats": {"reserved_bytes": 5, "allocated_bytes": 4,
                                                 "peak_reserved_bytes": 9,
                                                 "peak_allocated_bytes": 8},
                   "device_reading": {"available": True, "used_bytes": 11},
                   "kv_cache": {"pages": 100, "used_pages": 0, "preemptions": 2}}
        answers = [summary, {"stats": summary["stats"]}]

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                assert self.path == "/debug/memory?format=json"
                data = json.dumps(answers.pop(0)).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        self.addCleanup(thread.join)
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        url = f"http://127.0.0.1:{server.server_address[1]}"
        self.assertEqual(chattts_serve_load.memory(url, None), {
            "reserved": 5, "allocated": 4, "peak_reserved": 9, "peak_allocated": 8,
            "device_used": 11, "kv_cache": summary["kv_cache"]})
        older = chattts_serve_load.memory(url, None)  # a server without NVML or the KV section
        self.assertEqual((older["device_used"], older["kv_cache"]), (None, None))

    def test_records_of_failures_and_the_request_body(self):
        self.assertEqual(chattts_serve_load.record_of(
            stream_load.StreamResult(503, None, 0.1, 0, [], 0.0, 0.0)).error, "HTTP 503")
        self.assertEqual(chattts_serve_load.record_of(ConnectionRefusedError()).error,
                         "ConnectionRefusedError")
        body = json.loads(chattts_serve_load.body("chattts-bench", workload.Request("Hi.", 1, 9)))
        self.assertEqual(body, {"model": "tts-1", "voice": "chattts-bench", "input": "Hi.",
                                "response_format": "pcm", "seed": 9, "refine_text": False})
        self.assertIs(chattts_serve_load.stream_load, stream_load)


class StandInLlama(torch.nn.Module):
    """Called as ChatTTS calls LlamaModel; checks that the mask covers the cache and the new
    positions, records the position ids, and answers tanh(W x)."""

    def __init__(self, hidden):
        super().__init__()
        self.proj = torch.nn.Linear(hidden, hidden)
        self.positions = []

    def forward(self, inputs_embeds, attention_mask, position_ids, past_key_values=None,
                use_cache=True):
        past = past_key_values or 0
        assert attention_mask.shape[1] == past + inputs_embeds.shape[1]
        assert position_ids.shape == inputs_embeds.shape[:2]
        self.positions.append(position_ids.clone())
        return types.SimpleNamespace(last_hidden_state=torch.tanh(self.proj(inputs_embeds)),
                                     past_key_values=past + inputs_embeds.shape[1])


def tiny_chat():
    config = json.loads((TINY / "config.json").read_text())
    torch.manual_seed(0)
    warpers = [lambda ids, s: chattts.top_p_filter(s, 0.7),
               lambda ids, s: chattts.top_k_filter(s, 20)]
    llama = StandInLlama(config["gpt"]["hidden_size"]).eval()
    peer = chattts_peer.assemble(str(TINY), config, llama, warpers, "cpu")
    # One id a character (the tiny vocabulary has 155): prompt lengths follow the texts'.
    return chattts_serve_peer.OriginalChat(peer, lambda text: [ord(c) % 150 for c in text])


class PeerTest(unittest.TestCase):
    def setUp(self):
        self.chat = tiny_chat()
        self.hop = self.chat.hop

    def test_a_padded_batch_gives_each_row_its_own_length_at_the_end(self):
        jobs = [chattts_serve_peer.Job("A short one.", 30),
                chattts_serve_peer.Job("A rather longer text than that.", 50)]
        self.chat.infer(jobs, stream=False)
        for job in jobs:
            self.assertIsNone(job.record.error)
            self.assertEqual(len(job.record.arrivals), 1)
            self.assertEqual(job.record.arrivals[0][1], self.hop * (2 * job.tokens - 1))
        # Left padding: the prefill's last position is each row's prompt length - 1, and every
        # step after it one more, the longest row's length + 1 forward passes in all.
        positions = self.chat.peer.llama.positions
        widths = [len(self.chat.template.replace("{text}", j.text)) for j in jobs]
        self.assertEqual(positions[0][:, -1].tolist(), [w - 1 for w in widths])
        self.assertEqual(positions[-1][:, 0].tolist(), [w - 1 + 50 for w in widths])
        self.assertEqual(len(positions), 51)

    def test_stream_sends_from_the_third_result_at_most_12000_samples_each_then_the_rest(self):
        job = chattts_serve_peer.Job("Streamed.", 100)
        self.chat.infer([job], stream=True)
        sizes = [n for _, n in job.record.arrivals]
        # Results at 24, 48 (passed), 72, 96 steps and the end; then what is left.
        self.assertEqual(sizes[:3], [12000, 12000, 12000])
        self.assertEqual(sum(sizes), self.hop * (2 * 100 - 1))
        self.assertEqual(len(sizes), 4)
        times = [t for t, _ in job.record.arrivals]
        self.assertEqual(times, sorted(times))

    def test_a_short_stream_comes_whole_at_the_end(self):
        job = chattts_serve_peer.Job("Short.", 30)  # one result at 24 steps, passed
        self.chat.infer([job], stream=True)
        self.assertEqual([n for _, n in job.record.arrivals], [self.hop * 59])

    def test_the_three_ways_serve_every_request(self):
        for way in ("sequential", "batched", "threads"):
            jobs = chattts_serve_peer.jobs_of(workload.fixed_requests(3, 2), 12)
            wall = chattts_serve_peer.serve(self.chat, way, jobs, False, batch=2)
            summary = chattts_serve_peer.summarize(jobs, wall, 0.0)
            self.assertEqual((summary["ok"], summary["errors"]), (3, 0), way)
            self.assertAlmostEqual(summary["audio_s"], 3 * self.hop * 47 / workload.RATE)
        with self.assertRaises(ValueError):
            chattts_serve_peer.serve(self.chat, "pool", [], False)

    def test_a_failure_is_every_job_of_its_batch_s_error(self):
        def fail(**_):
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB\nmore")
        self.chat.peer.llama.forward = fail
        jobs = chattts_serve_peer.jobs_of(workload.fixed_requests(2, 1), 5)
        self.chat.infer(jobs, stream=False)
        self.assertEqual([j.record.error for j in jobs],
                         ["RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"] * 2)

    def test_run_measures_each_way_and_stops_the_search_at_the_list_or_the_deadline(self):
        args = chattts_serve_peer.parser().parse_args(
            ["--voice", str(TINY), "--device", "cpu", "--tokens", "8", "--sentences", "2",
             "--sequential", "2", "--batched", "3", "--batch", "2", "--threads", "2",
             "--search-batched", "1,2", "--search-threads", "1", "--random", "3"])
        lines, saved = [], []
        result = chattts_serve_peer.run(self.chat, args, float("inf"), lines.append,
                                        saved.append)
        ways = result["ways"]
        self.assertEqual(list(ways), ["sequential", "batched", "threads"])
        self.assertEqual(ways["batched"]["label"], "infer() on lists of 2")
        self.assertEqual(ways["sequential"]["main"]["concurrency"], 2)
        self.assertIsNone(ways["sequential"]["main"]["memory"])  # on the CPU
        for entry in ways.values():
            self.assertEqual(entry["main"]["summary"]["errors"], 0)
        # Each search either ended on a round that fell behind or kept up to its last step.
        for way, steps in (("batched", [1, 2]), ("threads", [1])):
            entry = ways[way]
            if entry["most_realtime_exact"]:
                self.assertLess(entry["most_realtime"], steps[-1])
            else:
                self.assertEqual(entry["most_realtime"], steps[-1])
        self.assertEqual(result["random"]["summary"]["requests"], 3)
        self.assertEqual(len(saved), 4)  # after each way and after the random part
        self.assertTrue(all(line.startswith("| ") for line in lines))
        late = chattts_serve_peer.run(self.chat, args, 0.0, lines.append)
        self.assertTrue(all(e["main"] is None for e in late["ways"].values()))
        self.assertIsNone(late["random"])


class PeerSearchTest(unittest.TestCase):
    """The stream=True search's steps, with rounds that keep up or fall behind by list size."""

    def search(self, behind, past_real_time, failing=()):
        def serve(chat, way, jobs, stream, batch):
            return 1.0

        def summarize(jobs, wall, slack):
            n = len(jobs)
            errors = n if n in failing else 0
            return {"requests": n, "ok": n - errors, "errors": errors, "audio_per_s": float(n),
                    "realtime": n - 1 if n in behind else n, "ttfa_p50_ms": 1.0,
                    "ttfa_p95_ms": 1.0, "audio_s": float(n), "wall_s": 1.0, "max_lag_ms": 0.0}

        saved = chattts_serve_peer.serve, chattts_serve_peer.summarize
        chattts_serve_peer.serve, chattts_serve_peer.summarize = serve, summarize
        try:
            return chattts_serve_peer.search(None, "batched", [1, 2, 4, 8],
                                             lambda n: [None] * n, float("inf"), 0.0, [],
                                             "infer()", past_real_time=past_real_time)
        finally:
            chattts_serve_peer.serve, chattts_serve_peer.summarize = saved

    def test_the_search_stops_at_the_first_round_that_falls_behind(self):
        most, exact, rounds = self.search({4}, past_real_time=False)
        self.assertEqual((most, exact), (2, True))
        self.assertEqual([r["concurrency"] for r in rounds], [1, 2, 4])

    def test_past_real_time_goes_on_for_throughput_and_keeps_the_most_real_time(self):
        most, exact, rounds = self.search({4}, past_real_time=True)
        self.assertEqual((most, exact), (2, True))
        self.assertEqual([r["concurrency"] for r in rounds], [1, 2, 4, 8])

    def test_past_real_time_stops_at_a_round_that_fails(self):
        most, exact, rounds = self.search({2}, past_real_time=True, failing={4})
        self.assertEqual((most, exact), (1, True))
        self.assertEqual([r["concurrency"] for r in rounds], [1, 2, 4])

    def test_when_every_round_keeps_up_the_most_is_a_lower_bound(self):
        most, exact, rounds = self.search(set(), past_real_time=True)
        self.assertEqual((most, exact), (8, False))
        most, exact, _ = self.search({1}, past_real_time=True)
        self.assertEqual((most, exact), (0, True))


def round_entry(concurrency, audio_per_s, p95=100.0, errors=0, realtime=None, peak=2**30):
    requests = concurrency
    return {"concurrency": concurrency,
            "summary": {"requests": requests, "ok": requests - errors, "errors": errors,
                        "ttfa_p50_ms": p95 / 2, "ttfa_p95_ms": p95, "audio_per_s": audio_per_s,
                        "realtime": requests - errors if realtime is None else realtime},
            "memory": {"peak_reserved": peak, "reserved": peak // 2}}


def peer_result():
    def way(label, rate, most, exact):
        main = round_entry(8, rate)
        main["memory"] = {"peak_reserved": 3 * 2**30, "reserved": 2**30}
        search = [round_entry(1, rate / 2, p95=60.0), round_entry(16, rate * 0.8)]
        return {"label": label, "main": main, "search": search,
                "most_realtime": most, "most_realtime_exact": exact}
    return {"ways": {"sequential": way("one request at a time", 1.5, 1, True),
                     "batched": way("infer() on lists of 8", 10.0, 4, True),
                     "threads": way("one thread per request", 2.0, 2, False)},
            "random": {"requests": 32, "summary": round_entry(32, 9.0)["summary"],
                       "before": {"reserved": 2**30}, "after": {"reserved": 2**31}}}


def voxd_result(most=384, exact=True, p95=250.0, before=4 * 2**30, after=4.1 * 2**30, sent=1000):
    search = [round_entry(n, n * 2.0, peak=6 * 2**30) for n in (128, 256, 384)]
    search.append(round_entry(512, 900.0, realtime=500, peak=7 * 2**30))
    return {"rounds": [round_entry(1, 3.0), round_entry(100, 250.0, p95=p95)],
            "search": search, "most_realtime": most, "most_realtime_exact": exact,
            "random": {"requests": 1000, "sent": sent,
                       "summary": round_entry(sent, 400.0)["summary"],
                       "before": {"reserved": before}, "after": {"reserved": after}}}


class ChatttsServeModeTest(unittest.TestCase):
    def test_the_derived_voice_fixes_the_codes_a_sentence_and_links_the_rest(self):
        folder = Path(tempfile.mkdtemp(prefix="voxd-serve-bench-test."))
        self.addCleanup(shutil.rmtree, folder)
        out = folder / "voice"
        self.assertEqual(gpu_check.derive_serve_voice(TINY, out, 40), "tiny-chattts")
        self.assertEqual(gpu_check.derive_serve_voice(TINY, out, 48), "tiny-chattts")  # again
        config = json.loads((out / "config.json").read_text())
        self.assertEqual((config["infer_code"]["min_new_token"],
                          config["infer_code"]["max_new_token"]), (48, 48))
        original = json.loads((TINY / "config.json").read_text())
        del config["infer_code"], original["infer_code"]
        self.assertEqual(config, original)
        self.assertEqual(sorted(p.name for p in out.iterdir()),
                         sorted(p.name for p in TINY.iterdir()))
        self.assertEqual((out / "gpt.safetensors").resolve(), (TINY / "gpt.safetensors").resolve())

    def test_side_by_side_rows(self):
        table = gpu_check.side_by_side(peer_result(), voxd_result(most=384, exact=False))
        lines = table.splitlines()
        self.assertEqual(len(lines), 2 + 3 + 2)
        self.assertEqual({line.count("|") for line in lines}, {8})
        self.assertIn("| original: infer() on lists of 8 | 8 | 50 / 100 (stream=True, 1 at once: "
                      "30 / 60) | 10.0 | 4 | 3.00 / 1.00 | 1.00 / 2.00 (32 requests) |", lines)
        self.assertIn("| original: one thread per request | 8 | 50 / 100 (stream=True, 1 at once: "
                      "30 / 60) | 2.0 | >= 2 |", table)
        self.assertIn("| voxd serve, 1 at once | 1 | 50 / 100 | 3.0 | >= 384 | 1.00 / 0.50 | "
                      "4.00 / 4.10 (1000 requests) |", lines)
        self.assertTrue(lines[-1].endswith("| 250.0 |  | 1.00 / 0.50 |  |"))
        self.assertIsNone(gpu_check.kv_line(voxd_result()))
        with_kv = voxd_result()
        with_kv["random"]["after"]["kv_cache"] = {"pages": 64, "used_pages": 0, "preemptions": 3}
        self.assertEqual(gpu_check.kv_line(with_kv), "voxd's KV cache after the random-length "
                         "requests: 0 of 64 pages used, 3 preemptions since it started")
        self.assertIsNone(gpu_check.kv_line(None))
        missing = gpu_check.side_by_side(None, None)
        self.assertIn("| original: sequential | - | not run |", missing)
        self.assertIn("| voxd serve | - | not run |", missing)

    def test_targets_met(self):
        lines = gpu_check.target_lines(peer_result(), voxd_result())
        self.assertEqual(len(lines), 4)
        self.assertTrue(all(line.endswith(": met") for line in lines), lines)
        self.assertIn("384 streams, peak reserved by then 6.00 GiB", lines[0])
        self.assertIn("250 ms, 0 errors", lines[1])
        # voxd's best is its search round of 512 (900), the original's the batched way (10).
        self.assertIn("voxd 900.0 (search, 512 at once) / original 10.0 (infer() on lists of 8)"
                      " = 90.0x", lines[2])
        self.assertIn("4.00 -> 4.10 GiB (+2.5 %) over 1000 requests", lines[3])

    def test_targets_missed_or_not_measured(self):
        lines = gpu_check.target_lines(peer_result(), voxd_result(most=128, p95=320.0,
                                                                    after=4.4 * 2**30))
        self.assertTrue(lines[0].endswith(": missed"), lines[0])
        self.assertTrue(lines[1].endswith(": missed"), lines[1])
        self.assertTrue(lines[3].endswith(": missed"), lines[3])
        lines = gpu_check.target_lines(peer_result(), voxd_result(most=128, exact=False, sent=600))
        self.assertIn(">= 128 streams", lines[0])
        self.assertTrue(lines[0].endswith("(the search ended before a stream fell behind)"))
        self.assertTrue(lines[3].endswith("over 600 requests, 0 errors: not measured at 1,000"))
        self.assertTrue(all(line.endswith("not measured") or "not measured (no round" in line
                            for line in gpu_check.target_lines(None, None)))


if __name__ == "__main__":
    unittest.main()
