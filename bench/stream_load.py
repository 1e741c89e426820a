#!/usr/bin/env python3
"""Concurrent streaming clients against a running `voxd serve`: time to first audio, errors, memory.

Opens CLIENTS streaming POST /v1/audio/speech requests at once (asyncio, one connection each,
standard library only; --ramp spreads their starts over some seconds instead), measures for each
the time from opening its connection to the first audio byte of the chunked body (time to first
audio, TTFA) and to the end of the stream, and polls GET /debug/memory?format=json while they
run. Prints one table row per round:

  ok / errors        streams that got status 200 and audio / the rest; when there are errors a
                     line after the row counts them by kind (HTTP status, or the exception: a
                     refused or timed-out connection, a stream cut short)
  peak reserved GiB  the server allocator's peak reserved bytes since it started
                     (stats.peak_reserved_bytes, exact), or the largest reserved_bytes polled
  peak device used   the largest NVML reading of the whole device's used memory polled every
                     0.2 s (device_reading.used_bytes; "-" when the server has no reading)
  most streams at once  the most streams open at the same time (from each one's start and end)
  stalled / p95 stall ms  streams whose audio ran dry (for 1 ms or more: less is the clock's
                     jitter), and the 95th percentile of how long:
                     a listener who starts playing at the first audio byte, in real time, and
                     pauses whenever the next audio has not arrived waits max_lag seconds in all
                     (a smaller first chunk or a busier server can buy first audio with stalls)

and after it a line of when the requests were written, after each client's start (p50, p95, the
last): the time to first audio includes it, and where it is large the load, not the server, held
the first audio back (more --processes, or a host with cores to spare). Each request carries
X-Request-Id load-RUN-ROUND-CLIENT (RUN a random tag of this run); --request-times FILE writes
when each was written and had its first audio, for bench/step_timeline.py --load-times to set
beside the server's own times.

With --processes N the clients are dealt round-robin to N worker processes, each with its own
event loop, all starting at the same moment: one Python process reading 1,000 streams at once
adds its own delay to the last ones' first audio. The memory polls stay in the main process.

Exits 1 when any round had an error. It raises its own open-file limit to fit the connections.

    voxd serve --voice voices/en-demo --max-connections 1100 --max-queue 2048 &
    python3 bench/stream_load.py --url http://127.0.0.1:8080 --clients 1000 --rounds 1
"""
import argparse
import asyncio
import collections
import concurrent.futures
import json
import multiprocessing
import os
import resource
import statistics
import sys
import time
import urllib.parse
import urllib.request

# Sentences of varied lengths (4 to 17 words); client i asks for --sentences of them from the
# i-th on, so neighbouring clients share some and the acoustic model sees mixed lengths.
TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Streaming speech arrives while the rest of the sentence is still being made.",
    "A server that knows its memory before it runs never runs out of it.",
    "It is ten thirty on the third of May, and the weather is fine.",
    "Please hold.",
    "Your order has shipped and should arrive on Thursday afternoon.",
    "Turn left at the next light, then keep right for two miles until you see the bridge.",
    "Thank you for calling.",
    "The meeting moved to room four.",
    "Seven hundred and twelve people signed up before noon, more than last year.",
    "Good evening.",
    "Remember to water the plants while I am away for the weekend.",
]


def request_body(voice, sentences, i, texts=TEXTS, fields=None, unique=False):
    """Client i's request: `sentences` of `texts` from the i-th on, streamed 16-bit PCM at the
    voice's own rate (voxd's pcm is OpenAI's 24 kHz unless asked otherwise; --sample-rate names
    the voice's), with `fields` added to the JSON body. With `unique`, the first sentence starts
    with the client's own number ("Ticket 347, ..."), so that no two first sentences are the same
    text and their lengths spread as real traffic's do."""
    text = " ".join(texts[(i + k) % len(texts)] for k in range(sentences))
    if unique:
        text = f"Ticket {i + 1}, {text[0].lower()}{text[1:]}"
    return json.dumps({"model": "tts-1", "voice": voice, "response_format": "pcm",
                       "sample_rate": "native", "input": text, **(fields or {})}).encode()


# One stream's result: its HTTP status; seconds from its start to its first audio (None without
# audio) and to its end; its audio bytes; arrivals: (seconds since the start, bytes) of each chunk
# of the body as it was read (bench/chattts_serve_load.py reads real time from them); sent_s:
# when its request was written to the socket, the client's own share of its time to first audio
# (its event loop connecting and writing the other streams' requests too); started: its start,
# in seconds since the epoch (time.time()).
StreamResult = collections.namedtuple(
    "StreamResult", "status ttfa_s total_s audio_bytes arrivals sent_s started")


async def one_stream(host, port, path, body, api_key, timeout, delay, request_id=None):
    """A StreamResult, after waiting `delay` seconds to start. `request_id` goes as X-Request-Id,
    which the server's access log repeats (bench/step_timeline.py --load-times joins the two)."""
    if delay > 0:
        await asyncio.sleep(delay)
    started = time.time()
    start = time.perf_counter()
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    headers = [
        f"POST {path} HTTP/1.1",
        f"Host: {host}:{port}",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
        "Connection: close",
    ]
    if api_key:
        headers.append(f"Authorization: Bearer {api_key}")
    if request_id:
        headers.append(f"X-Request-Id: {request_id}")
    writer.write(("\r\n".join(headers) + "\r\n\r\n").encode() + body)
    await writer.drain()
    sent = time.perf_counter() - start
    try:
        status_line = await asyncio.wait_for(reader.readline(), timeout)
        status = int(status_line.split()[1])
        chunked = False
        while True:
            line = await asyncio.wait_for(reader.readline(), timeout)
            if line in (b"\r\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            if name.strip().lower() == "transfer-encoding" and "chunked" in value.lower():
                chunked = True
        if status != 200 or not chunked:
            await asyncio.wait_for(reader.read(), timeout)
            return StreamResult(status, None, time.perf_counter() - start, 0, [], sent, started)
        arrivals = []
        while True:
            size_line = await asyncio.wait_for(reader.readline(), timeout)
            size = int(size_line.split(b";")[0], 16)
            if size == 0:
                break
            data = await asyncio.wait_for(reader.readexactly(size + 2), timeout)
            arrivals.append((time.perf_counter() - start, len(data) - 2))
        ttfa = arrivals[0][0] if arrivals else None
        return StreamResult(status, ttfa, time.perf_counter() - start,
                            sum(n for _, n in arrivals), arrivals, sent, started)
    finally:
        writer.close()


def memory_summary(url, api_key, timeout=5):
    """The server's GET /debug/memory?format=json, parsed."""
    request = urllib.request.Request(url + "/debug/memory?format=json")
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.load(response)


def memory_reading(url, api_key):
    """(reserved, peak reserved, device used or None) from GET /debug/memory?format=json."""
    summary = memory_summary(url, api_key)
    stats = summary.get("stats", {})
    reading = summary.get("device_reading") or {}  # NVML; without a reading only "reason"
    return (stats.get("reserved_bytes", 0), stats.get("peak_reserved_bytes", 0),
            reading.get("used_bytes"))


def note_memory(peaks, reading):
    reserved, peak_reserved, used = reading
    peaks["reserved"] = max(peaks.get("reserved", 0), reserved or 0, peak_reserved or 0)
    if used is not None:
        peaks["device_used"] = max(peaks.get("device_used", 0), used)


async def poll_memory(url, api_key, stop, peaks):
    while not stop.is_set():
        try:
            note_memory(peaks, await asyncio.to_thread(memory_reading, url, api_key))
        except (OSError, ValueError):
            peaks["poll_failures"] = peaks.get("poll_failures", 0) + 1
        try:
            await asyncio.wait_for(stop.wait(), 0.2)
        except asyncio.TimeoutError:
            pass


class ClientFailure(Exception):
    """A stream's exception as a worker process hands it back: its kind and message, which any
    exception's pickling may not keep."""

    def __init__(self, kind, text):
        super().__init__(kind, text)
        self.kind, self.text = kind, text

    def __str__(self):
        return self.text


def worker_streams(host, port, bodies, api_key, timeout, delays, start_at, ids):
    """In a worker process: one_stream for each body, with its delay after wall-clock time
    `start_at` and its request id; exceptions as ClientFailure."""
    async def streams():
        await asyncio.sleep(max(0.0, start_at - time.time()))
        return await asyncio.gather(
            *(one_stream(host, port, "/v1/audio/speech", body, api_key, timeout, delay, i)
              for body, delay, i in zip(bodies, delays, ids)),
            return_exceptions=True)
    raise_open_file_limit(len(bodies))
    return [ClientFailure(type(r).__name__, str(r)) if isinstance(r, BaseException) else r
            for r in asyncio.run(streams())]


async def all_streams(host, port, bodies, args, delays, ids=None):
    """one_stream's result (or exception) for each body, in order, with its request id (ids, or
    none): in this event loop, or dealt round-robin to args.processes worker processes that start
    together."""
    ids = ids or [None] * len(bodies)
    if args.processes <= 1:
        return await asyncio.gather(
            *(one_stream(host, port, "/v1/audio/speech", body, args.api_key, args.timeout, delay,
                         i)
              for body, delay, i in zip(bodies, delays, ids)),
            return_exceptions=True)
    n = args.processes
    # Spawned workers import this module afresh; a second is ample for them to be ready.
    start_at = time.time() + 1.0
    loop = asyncio.get_running_loop()
    with concurrent.futures.ProcessPoolExecutor(
            n, mp_context=multiprocessing.get_context("spawn")) as pool:
        parts = await asyncio.gather(*(
            loop.run_in_executor(pool, worker_streams, host, port, bodies[k::n], args.api_key,
                                 args.timeout, delays[k::n], start_at, ids[k::n])
            for k in range(n)))
    results = [None] * len(bodies)
    for k, part in enumerate(parts):
        results[k::n] = part
    return results


def error_kind(result):
    if isinstance(result, ClientFailure):
        return result.kind + (f" ({result.text.strip()[:60]})" if result.text.strip() else "")
    if isinstance(result, BaseException):
        text = str(result).strip()
        return type(result).__name__ + (f" ({text[:60]})" if text else "")
    if result.status != 200:
        return f"HTTP {result.status}"
    return "no audio" if result.ttfa_s is None else None


def raise_open_file_limit(connections):
    """Lifts the soft limit on open files to fit `connections` sockets (up to the hard limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = connections + 64
    if soft != resource.RLIM_INFINITY and soft < want:
        new = want if hard == resource.RLIM_INFINITY else min(want, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
        if new < want:
            print(f"warning: open files limited to {new} (hard limit); {connections} clients "
                  f"need about {want}", file=sys.stderr)


def max_overlap(intervals):
    """The most (start, end) intervals open at one time."""
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals],
                    key=lambda e: (e[0], e[1]))
    most = now = 0
    for _, change in events:
        now += change
        most = max(most, now)
    return most


def max_lag(arrivals, rate):
    """How late (seconds, >= 0) the latest chunk of a stream came against its playback time from
    the first arrival, for arrivals [(seconds, samples)] at `rate` samples a second: chunk k, with
    S_k samples before it, is due at t_0 + S_k / rate. It is also the time in all that a listener
    who pauses whenever the audio runs dry spends waiting. 0 for a stream of one chunk or none."""
    if not arrivals:
        return 0.0
    first = arrivals[0][0]
    before = lag = 0.0
    for t, samples in arrivals:
        lag = max(lag, t - first - before / rate)
        before += samples
    return lag


def percentile(values, q):
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def sending_line(results):
    """How long the clients took to write their requests (one_stream's sent_s) over the streams
    that got audio: what of the time to first audio was the load's own, not the server's."""
    sent = [r.sent_s * 1000 for r in results if error_kind(r) is None]
    if not sent:
        return "  requests written: no stream got audio"
    return (f"  requests written: p50 {statistics.median(sent):.0f} ms, p95 "
            f"{percentile(sent, 0.95):.0f} ms, last {max(sent):.0f} ms after each client's start "
            f"(the load's own share of its time to first audio)")


def request_times(results, ids):
    """For --request-times: each stream's request id with its start, when its request was
    written and when its first audio came (seconds since the epoch; null where it did not come or
    the stream failed before)."""
    times = []
    for request_id, r in zip(ids, results):
        if isinstance(r, BaseException):
            times.append({"id": request_id, "started": None, "written": None, "first_audio": None})
            continue
        times.append({"id": request_id, "started": r.started, "written": r.started + r.sent_s,
                      "first_audio": None if r.ttfa_s is None else r.started + r.ttfa_s})
    return times


def round_row(clients, results, starts, sample_rate, peaks):
    """A round's table row from one_stream's results (or exceptions), the clients' start offsets
    and the memory peaks polled; 16-bit PCM at `sample_rate`."""
    ok = [r for r in results if error_kind(r) is None]
    ttfa = [r.ttfa_s * 1000 for r in ok]
    most_at_once = max_overlap([(starts[i], starts[i] + r.total_s)
                                for i, r in enumerate(results) if error_kind(r) is None])
    total = [r.total_s for r in ok]
    audio_s = sum(r.audio_bytes for r in ok) / 2 / sample_rate
    stalls = [max_lag([(t, n / 2) for t, n in r.arrivals], sample_rate) * 1000 for r in ok]
    used = peaks.get("device_used")
    return (f"| {clients} | {len(ok)} | {len(results) - len(ok)} | "
            f"{statistics.median(ttfa) if ttfa else float('nan'):.0f} | "
            f"{percentile(ttfa, 0.95):.0f} | {percentile(total, 0.95):.2f} | {audio_s:.1f} | "
            f"{peaks.get('reserved', 0) / 2**30:.2f} | "
            f"{'-' if used is None else f'{used / 2**30:.2f}'} | {most_at_once} | "
            f"{sum(1 for s in stalls if s >= 1)} | {percentile(stalls, 0.95):.0f} |")


async def run(args):
    parsed = urllib.parse.urlparse(args.url)
    host, port = parsed.hostname, parsed.port or 80
    print("| clients | ok | errors | p50 TTFA ms | p95 TTFA ms | p95 total s | audio s | "
          "peak reserved GiB | peak device used GiB | most streams at once | stalled | "
          "p95 stall ms |", flush=True)
    print("|---|---|---|---|---|---|---|---|---|---|---|---|", flush=True)
    failed = False
    run_tag = os.urandom(3).hex()  # request ids apart from another run's in the server's log
    for round_number in range(1, args.rounds + 1):
        stop = asyncio.Event()
        peaks = {}
        poller = asyncio.create_task(poll_memory(args.url, args.api_key, stop, peaks))
        bodies = [request_body(args.voice, args.sentences, i, unique=args.unique)
                  for i in range(args.clients)]
        ids = [f"load-{run_tag}-{round_number}-{i}" for i in range(args.clients)]
        starts = [args.ramp * i / args.clients for i in range(args.clients)]
        results = await all_streams(host, port, bodies, args, starts, ids)
        if args.request_times:
            with open(args.request_times, "a", encoding="utf-8") as f:
                for entry in request_times(results, ids):
                    f.write(json.dumps(entry) + "\n")
        stop.set()
        await poller
        try:  # the allocator's exact peak, and one more reading after the last stream
            note_memory(peaks, await asyncio.to_thread(memory_reading, args.url, args.api_key))
        except (OSError, ValueError):
            peaks["poll_failures"] = peaks.get("poll_failures", 0) + 1
        kinds = collections.Counter(k for k in map(error_kind, results) if k is not None)
        errors = sum(kinds.values())
        failed = failed or errors > 0
        print(round_row(args.clients, results, starts, args.sample_rate, peaks), flush=True)
        print(sending_line(results), flush=True)
        if errors:
            print(f"  {args.clients} clients, errors by kind: "
                  + ", ".join(f"{kind} x{n}" for kind, n in kinds.most_common()), flush=True)
            if args.verbose:
                for r in results:
                    if error_kind(r) is not None:
                        print("  error:", repr(r))
        if peaks.get("poll_failures"):
            print(f"  {args.clients} clients: {peaks['poll_failures']} memory polls failed",
                  flush=True)
    return 1 if failed else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8080")
    parser.add_argument("--voice", default="en-demo")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--sample-rate", type=int, default=22050)
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds each step of a stream (connect, a read) may take")
    parser.add_argument("--ramp", type=float, default=0.0,
                        help="spread the clients' starts evenly over this many seconds "
                             "(default 0: all at once)")
    parser.add_argument("--sentences", type=int, default=1,
                        help="sentences per request (the texts in turn): longer streams, so that "
                             "ramped clients overlap")
    parser.add_argument("--unique", action="store_true",
                        help="start each client's text with its own number, so that every first "
                             "sentence differs (real traffic) instead of 12 texts repeating")
    parser.add_argument("--processes", type=int, default=1,
                        help="worker processes the clients are dealt to, each with its own event "
                             "loop (default 1: all in this one)")
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--verbose", action="store_true", help="print every failed stream")
    parser.add_argument("--request-times", metavar="FILE",
                        help="append a JSON line per stream: its request id (X-Request-Id, "
                             "load-RUN-ROUND-CLIENT), its start, when its request was written and "
                             "when its first audio came, in seconds since the epoch "
                             "(bench/step_timeline.py --load-times reads them beside the "
                             "server's log)")
    args = parser.parse_args()
    if args.clients < 1 or args.rounds < 1 or args.processes < 1:
        parser.error("--clients, --rounds and --processes must be at least 1")
    raise_open_file_limit(args.clients + 16)  # and the memory polls' connections
    sys.exit(asyncio.run(run(args)))


if __name__ == "__main__":
    main()
