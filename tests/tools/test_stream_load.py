"""Tests of bench/stream_load.py's accounting: a stream's real-time lag (its stall) and a round's
table row, from made-up arrivals with known figures; and its clients, in one event loop or dealt
to worker processes, against a made-up chunked server."""
import argparse
import asyncio
import http.server
import os
import socket
import sys
import threading
import time
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import stream_load  # noqa: E402

RATE = 22050


def stream(ttfa, total, arrivals_in_seconds_of_audio, sent=0.0, started=1000.0):
    """one_stream's result for 16-bit PCM arriving as [(seconds since the start, audio seconds)],
    the request written `sent` seconds after the start, at `started` (seconds since the epoch)."""
    arrivals = [(t, round(audio * RATE) * 2) for t, audio in arrivals_in_seconds_of_audio]
    return stream_load.StreamResult(200, ttfa, total, sum(n for _, n in arrivals), arrivals, sent,
                                    started)


def refused(total, sent=0.0, started=1000.0):
    """one_stream's result for a request answered 503 after `total` seconds."""
    return stream_load.StreamResult(503, None, total, 0, [], sent, started)


class MaxLagTest(unittest.TestCase):
    def test_a_chunk_is_due_when_the_audio_before_it_has_played(self):
        second = RATE  # a second of audio a chunk
        self.assertEqual(stream_load.max_lag([], RATE), 0.0)
        self.assertEqual(stream_load.max_lag([(5.0, second)], RATE), 0.0)
        on_time = [(0.2, second), (1.1, second), (2.15, second)]
        self.assertEqual(stream_load.max_lag(on_time, RATE), 0.0)
        late = [(0.2, second), (1.5, second), (2.1, second)]  # due at 1.2 and 2.2
        self.assertAlmostEqual(stream_load.max_lag(late, RATE), 0.3)
        self.assertAlmostEqual(stream_load.max_lag([(0.0, second / 2), (0.9, second)], RATE), 0.4)

    def test_the_lag_is_what_a_listener_who_pauses_when_dry_waits_in_all(self):
        # Half a second of audio, then two chunks each 0.2 s later than the one before allowed:
        # the player pauses 0.2 s, then again 0.2 s, and the largest lateness is 0.4 s.
        arrivals = [(0.0, RATE / 2), (0.7, RATE / 2), (1.4, RATE / 2)]
        self.assertAlmostEqual(stream_load.max_lag(arrivals, RATE), 0.4)


class RoundRowTest(unittest.TestCase):
    def test_a_round_row_counts_the_streams_that_stalled(self):
        results = [
            stream(0.1, 1.2, [(0.1, 0.4), (0.3, 0.4), (0.6, 0.4)]),  # on time
            stream(0.2, 1.6, [(0.2, 0.4), (0.9, 0.4), (1.0, 0.4)]),  # 0.3 s dry
            stream(0.3, 1.3, [(0.3, 1.0)]),                          # one chunk
            ConnectionRefusedError("refused"),
            refused(0.01),
        ]
        row = stream_load.round_row(5, results, [0.0] * 5, RATE,
                                    {"reserved": 2**30, "device_used": 3 * 2**30})
        cells = [c.strip() for c in row.strip("|").split("|")]
        header = ["clients", "ok", "errors", "p50 TTFA ms", "p95 TTFA ms", "p95 total s",
                  "audio s", "peak reserved GiB", "peak device used GiB", "most streams at once",
                  "stalled", "p95 stall ms"]
        self.assertEqual(dict(zip(header, cells)), {
            "clients": "5", "ok": "3", "errors": "2", "p50 TTFA ms": "200",
            "p95 TTFA ms": "300", "p95 total s": "1.60", "audio s": "3.4",
            "peak reserved GiB": "1.00", "peak device used GiB": "3.00",
            "most streams at once": "3", "stalled": "1", "p95 stall ms": "300"})

    def test_a_pause_under_a_millisecond_is_not_a_stall(self):
        jitter = stream(0.1, 0.9, [(0.1, 0.4), (0.5004, 0.4)])  # 0.4 ms late
        cells = [c.strip() for c in stream_load.round_row(1, [jitter], [0.0], RATE, {})
                 .strip("|").split("|")]
        self.assertEqual(cells[10:], ["0", "0"])

    def test_no_device_reading_and_no_stream_ok(self):
        row = stream_load.round_row(1, [refused(0.01)], [0.0], RATE, {})
        cells = [c.strip() for c in row.strip("|").split("|")]
        self.assertEqual(cells[1:3], ["0", "1"])
        self.assertEqual(cells[8], "-")
        self.assertEqual(cells[10:], ["0", "nan"])


class SendingLineTest(unittest.TestCase):
    def test_the_line_reads_when_the_streams_with_audio_wrote_their_requests(self):
        results = [stream(0.2, 1.0, [(0.2, 1.0)], sent=0.010),
                   stream(0.3, 1.0, [(0.3, 1.0)], sent=0.050),
                   stream(0.4, 1.0, [(0.4, 1.0)], sent=0.030),
                   refused(0.01, 0.500, 1000.0),  # no audio: not counted
                   ConnectionRefusedError("refused")]
        self.assertEqual(stream_load.sending_line(results),
                         "  requests written: p50 30 ms, p95 50 ms, last 50 ms after each "
                         "client's start (the load's own share of its time to first audio)")

    def test_no_stream_with_audio(self):
        self.assertEqual(stream_load.sending_line([refused(0.01, 0.001, 1000.0)]),
                         "  requests written: no stream got audio")


class RequestTimesTest(unittest.TestCase):
    def test_each_stream_with_its_id_start_write_and_first_audio(self):
        results = [stream(0.3, 1.0, [(0.3, 1.0)], sent=0.01, started=100.0),
                   refused(0.01, 0.002, 200.0),
                   ConnectionRefusedError("refused")]
        times = stream_load.request_times(results, ["a", "b", "c"])
        self.assertEqual([t["id"] for t in times], ["a", "b", "c"])
        self.assertEqual(times[0]["started"], 100.0)
        self.assertAlmostEqual(times[0]["written"], 100.01)
        self.assertAlmostEqual(times[0]["first_audio"], 100.3)
        self.assertEqual((times[1]["started"], times[1]["first_audio"]), (200.0, None))
        self.assertAlmostEqual(times[1]["written"], 200.002)
        self.assertEqual(times[2], {"id": "c", "started": None, "written": None,
                                    "first_audio": None})


class ChunkedEcho(http.server.BaseHTTPRequestHandler):
    """Answers a POST with a chunked body of two chunks: as many bytes as the request's body,
    then 2."""
    protocol_version = "HTTP/1.1"

    request_ids = []  # the X-Request-Id of each request, as they came

    def do_POST(self):
        ChunkedEcho.request_ids.append(self.headers.get("X-Request-Id"))
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for chunk in (b"x" * len(body), b"yy"):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, *args):
        pass


class ClientsTest(unittest.TestCase):
    def setUp(self):
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), ChunkedEcho)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.addCleanup(self.server.server_close)
        self.addCleanup(self.server.shutdown)

    def streams(self, port, bodies, processes, ids=None):
        args = argparse.Namespace(processes=processes, api_key=None, timeout=20.0)
        return asyncio.run(stream_load.all_streams("127.0.0.1", port, bodies, args,
                                                   [0.0] * len(bodies), ids))

    def test_workers_give_each_client_its_own_stream_in_order(self):
        bodies = [b"a" * n for n in range(5, 12)]
        for processes in (1, 3):
            ids = [f"id-{processes}-{i}" for i in range(len(bodies))]
            ChunkedEcho.request_ids.clear()
            before = time.time()
            results = self.streams(self.server.server_address[1], bodies, processes, ids)
            self.assertEqual(sorted(ChunkedEcho.request_ids), sorted(ids), processes)
            self.assertEqual([r.status for r in results], [200] * len(bodies), processes)
            self.assertEqual([r.audio_bytes for r in results], [len(b) + 2 for b in bodies],
                             processes)
            for r in results:
                self.assertEqual([n for _, n in r.arrivals], [r.audio_bytes - 2, 2])
                self.assertLessEqual(r.ttfa_s, r.total_s)
                self.assertGreater(r.sent_s, 0.0)  # written before any audio came back
                self.assertLessEqual(r.sent_s, r.ttfa_s)
                self.assertLessEqual(before, r.started)
                self.assertLessEqual(r.started, time.time())

    def test_a_workers_failure_keeps_its_kind(self):
        with socket.socket() as s:  # a port nothing listens on
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        for processes in (1, 2):
            results = self.streams(port, [b"a", b"b"], processes)
            self.assertEqual([stream_load.error_kind(r).split()[0] for r in results],
                             ["ConnectionRefusedError"] * 2, processes)


if __name__ == "__main__":
    unittest.main()
