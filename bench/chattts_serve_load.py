#!/usr/bin/env python3
"""`voxd serve`'s side of the ChatTTS serving benchmark (scripts/gpu-check.py chattts-serve):
streaming clients against a running server with a ChatTTS voice, through bench/stream_load.py's
HTTP client (asyncio, one connection a stream, standard library only), on bench/serve_workload.py's
requests, the same the original gets in bench/chattts_serve_peer.py.

Each request is OpenAI's speech API as voxd takes it: {"model": "tts-1", "voice": VOICE,
"input": TEXT, "response_format": "pcm" (24 kHz 16-bit), "seed": its seed, "refine_text": false},
streamed. The arrival of every chunk of the body is timed, so that for each stream: time to
first audio, and whether it kept up with real time (each chunk before its playback time from the
first audio; bench/serve_workload.py). Three parts, each skipped once --deadline has passed:

  rounds   for C in --clients: C streams of --sentences sentences each, sent at once;
  search   for C in --search, in order: the same, until a round in which a stream fell behind
           or failed; the most real-time streams is the largest C before it (a lower bound
           when no round fell behind: most_realtime_exact false in the JSON);
  random   --random requests of random length (--random-sentences, seeded by --seed), at most
           --window open at once, with the server's memory before and after.

After each round it reads GET /debug/memory?format=json: stats.reserved_bytes and
allocated_bytes (now), stats.peak_reserved_bytes (the allocator's peak since the server started:
it covers every round so far), device_reading.used_bytes (NVML, when there is a reading), and
kv_cache (the KV pool's pages and preemptions, kept as the server gives it; servers before
6c15a6f have none). Prints
Markdown rows; --json writes them for scripts/gpu-check.py. Exits 1 when a round of --clients or
the random part had a failed stream (errors in the search only end the search).

    voxd serve --voice /tmp/chattts-serve-bench --max-batch 512 --kv-cache 6GiB &
    python3 bench/chattts_serve_load.py --url http://127.0.0.1:8080 --voice chattts-bench \\
        [--clients 1,100] [--sentences 3] [--search 16,32,64,128,256,384,512] \\
        [--random 1000 --window 128] [--deadline 200] [--json OUT]
"""
import argparse
import asyncio
import json
import os
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_workload as workload  # noqa: E402
import stream_load  # noqa: E402

PATH = "/v1/audio/speech"


def body(voice, request):
    return json.dumps({"model": "tts-1", "voice": voice, "input": request.text,
                       "response_format": "pcm", "seed": request.seed,
                       "refine_text": False}).encode()


def record_of(result):
    """A serve_workload.Record from stream_load.one_stream's result or exception: arrivals in
    samples (16-bit PCM: bytes / 2)."""
    if isinstance(result, BaseException):
        return workload.Record([], stream_load.error_kind(result))
    if result.status != 200:
        return workload.Record([], f"HTTP {result.status}")
    return workload.Record([(t, n / 2) for t, n in result.arrivals])


def memory(url, api_key):
    """The server's allocator and NVML figures from GET /debug/memory?format=json."""
    summary = stream_load.memory_summary(url, api_key, timeout=10)
    stats, reading = summary["stats"], summary.get("device_reading") or {}
    return {"reserved": stats["reserved_bytes"], "allocated": stats["allocated_bytes"],
            "peak_reserved": stats["peak_reserved_bytes"],
            "peak_allocated": stats["peak_allocated_bytes"],
            "device_used": reading.get("used_bytes"), "kv_cache": summary.get("kv_cache")}


class Target:
    def __init__(self, args):
        parsed = urllib.parse.urlparse(args.url)
        self.host, self.port = parsed.hostname, parsed.port or 80
        self.url, self.api_key, self.voice, self.timeout = (args.url, args.api_key, args.voice,
                                                            args.timeout)

    async def streams(self, requests, window=None, deadline=None):
        """Sends the requests, at most `window` open at once (None: all at once), none opened
        after `deadline` (time.monotonic()); returns (records of those sent, wall seconds)."""
        gate = asyncio.Semaphore(window) if window else None

        async def one(request):
            if gate is None:
                return await stream_load.one_stream(self.host, self.port, PATH,
                                                    body(self.voice, request), self.api_key,
                                                    self.timeout, 0)
            async with gate:
                if deadline is not None and time.monotonic() > deadline:
                    return None
                return await stream_load.one_stream(self.host, self.port, PATH,
                                                    body(self.voice, request), self.api_key,
                                                    self.timeout, 0)

        start = time.perf_counter()
        results = await asyncio.gather(*(one(r) for r in requests), return_exceptions=True)
        wall = time.perf_counter() - start
        return [record_of(r) for r in results if r is not None], wall


def row(label, summary, mem):
    cells = [label] + workload.round_cells(summary)
    cells += [workload.gib(mem["peak_reserved"]), workload.gib(mem["reserved"]),
              workload.gib(mem["device_used"])] if mem else ["-", "-", "-"]
    return workload.markdown_row(cells)


HEADER = workload.markdown_header(
    ["voxd serve round"] + workload.ROUND_COLUMNS
    + ["peak reserved GiB (since start)", "reserved after GiB", "NVML used GiB"])


def error_line(label, summary):
    kinds = summary["errors_by_kind"]
    return (f"  {label}: errors by kind: " + ", ".join(f"{k} x{n}" for k, n in kinds.items())
            if kinds else None)


async def run(args, out=print, save=lambda result: None):
    """Every part that time allows; returns (the JSON-ready result, whether a round of --clients
    or the random part had an error). `save` gets the result after each round too."""
    target = Target(args)
    deadline = time.monotonic() + args.deadline
    result = {"start_memory": memory(args.url, args.api_key), "rounds": [], "search": [],
              "most_realtime": None, "most_realtime_exact": False, "random": None,
              "sentences": args.sentences}
    failed = False

    async def one_round(count, label):
        records, wall = await target.streams(workload.fixed_requests(count, args.sentences))
        summary = workload.summarize(records, wall, workload.RATE, args.slack)
        mem = memory(args.url, args.api_key)
        out(row(label, summary, mem))
        if error_line(label, summary):
            out(error_line(label, summary))
        return {"concurrency": count, "summary": summary, "memory": mem}

    def add(part, entry):
        result[part].append(entry)
        save(result)
        return entry

    out(HEADER)
    for count in args.clients:
        if time.monotonic() > deadline:
            out(f"| {count} at once | not run: past the deadline |")
            continue
        entry = add("rounds", await one_round(count, f"{count} at once"))
        failed = failed or entry["summary"]["errors"] > 0
    for count in args.search:
        if time.monotonic() > deadline:
            out(f"| search, {count} at once | not run: past the deadline |")
            break
        entry = add("search", await one_round(count, f"search, {count} at once"))
        if not workload.all_kept_up(entry["summary"]):
            result["most_realtime"] = result["most_realtime"] or 0
            result["most_realtime_exact"] = True
            save(result)
            break
        result["most_realtime"] = count
        save(result)
    if args.random and time.monotonic() <= deadline:
        before = memory(args.url, args.api_key)
        requests = workload.random_requests(args.random, args.seed,
                                            *workload.parse_range(args.random_sentences))
        records, wall = await target.streams(requests, args.window, deadline)
        summary = workload.summarize(records, wall, workload.RATE, args.slack)
        after = memory(args.url, args.api_key)
        result["random"] = {"requests": args.random, "sent": len(records), "summary": summary,
                            "before": before, "after": after}
        label = f"{len(records)} of {args.random} random length, {args.window} open at most"
        out(row(label, summary, after))
        if error_line(label, summary):
            out(error_line(label, summary))
        out(f"  random-length requests: reserved {workload.gib(before['reserved'])} GiB before, "
            f"{workload.gib(after['reserved'])} GiB after; allocated "
            f"{workload.gib(before['allocated'])} -> {workload.gib(after['allocated'])} GiB")
        if after["kv_cache"]:
            kv = after["kv_cache"]
            out(f"  KV cache after them: {kv['used_pages']} of {kv['pages']} pages used, "
                f"{kv['preemptions']} preemptions since the server started")
        failed = failed or summary["errors"] > 0
        save(result)
    elif args.random:
        out(f"| {args.random} random length | not run: past the deadline |")
    return result, failed


def int_list(text):
    return [int(x) for x in text.split(",") if x.strip()]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8080")
    parser.add_argument("--voice", default="chattts-bench")
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--clients", type=int_list, default=[1, 100])
    parser.add_argument("--sentences", type=int, default=3, help="sentences a request, rounds")
    parser.add_argument("--search", type=int_list, default=[16, 32, 64, 128, 256, 384, 512])
    parser.add_argument("--random", type=int, default=1000, help="random-length requests (0: none)")
    parser.add_argument("--random-sentences", default="1-4")
    parser.add_argument("--window", type=int, default=128, help="random part: most open at once")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--slack", type=float, default=0.0,
                        help="seconds a chunk may come after its playback time and still keep up")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds each step of a stream (connect, a read) may take")
    parser.add_argument("--deadline", type=float, default=200.0,
                        help="seconds after which no part or round starts")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    most = max(args.clients + args.search + [args.window])
    stream_load.raise_open_file_limit(most + 16)

    def save(result):
        if args.json:
            with open(args.json, "w") as f:
                json.dump(result, f, indent=1)
    _, failed = asyncio.run(run(args, lambda line: print(line, flush=True), save))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
