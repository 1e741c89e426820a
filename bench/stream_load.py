#!/usr/bin/env python3
"""Concurrent streaming clients against a running `voxd serve`: time to first audio, errors, memory.

Opens CLIENTS streaming POST /v1/audio/speech requests at once (asyncio, one connection each,
standard library only), measures for each the time from sending the request to the first audio
byte of the chunked body and to the end of the stream, and polls GET /debug/memory?format=json
while they run for the largest device memory in use. Prints one table row per run.

    voxd serve --voice voices/en-demo --max-connections 1100 --max-queue 2048 &
    python3 bench/stream_load.py --url http://127.0.0.1:8080 --clients 1000 --rounds 1
"""
import argparse
import asyncio
import json
import statistics
import time
import urllib.parse
import urllib.request

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Streaming speech arrives while the rest of the sentence is still being made.",
    "A server that knows its memory before it runs never runs out of it.",
    "It is ten thirty on the third of May, and the weather is fine.",
]


async def one_stream(host, port, path, body, api_key, timeout):
    """Returns (status, ttfa_s, total_s, audio_bytes)."""
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
    writer.write(("\r\n".join(headers) + "\r\n\r\n").encode() + body)
    await writer.drain()
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
            await reader.read()
            return status, None, time.perf_counter() - start, 0
        ttfa = None
        audio = 0
        while True:
            size_line = await asyncio.wait_for(reader.readline(), timeout)
            size = int(size_line.split(b";")[0], 16)
            if size == 0:
                break
            data = await asyncio.wait_for(reader.readexactly(size + 2), timeout)
            audio += len(data) - 2
            if ttfa is None:
                ttfa = time.perf_counter() - start
        return status, ttfa, time.perf_counter() - start, audio
    finally:
        writer.close()


def device_used_bytes(url, api_key):
    request = urllib.request.Request(url + "/debug/memory?format=json")
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    with urllib.request.urlopen(request, timeout=5) as response:
        summary = json.load(response)
    reading = summary.get("device_reading") or {}
    return summary.get("stats", {}).get("reserved_bytes", 0), reading.get("used_bytes")


async def poll_memory(url, api_key, stop, peaks):
    while not stop.is_set():
        try:
            reserved, used = await asyncio.to_thread(device_used_bytes, url, api_key)
            peaks["reserved"] = max(peaks.get("reserved", 0), reserved or 0)
            if used is not None:
                peaks["device_used"] = max(peaks.get("device_used", 0), used)
        except OSError:
            pass
        await asyncio.sleep(0.2)


def percentile(values, q):
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


async def run(args):
    parsed = urllib.parse.urlparse(args.url)
    host, port = parsed.hostname, parsed.port or 80
    print("| clients | ok | errors | p50 TTFA ms | p95 TTFA ms | p95 total s | audio s | "
          "peak reserved GiB | peak device used GiB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for _ in range(args.rounds):
        stop = asyncio.Event()
        peaks = {}
        poller = asyncio.create_task(poll_memory(args.url, args.api_key, stop, peaks))
        bodies = [
            json.dumps({"model": "tts-1", "voice": args.voice, "response_format": "pcm",
                        "input": TEXTS[i % len(TEXTS)]}).encode()
            for i in range(args.clients)
        ]
        results = await asyncio.gather(
            *(one_stream(host, port, "/v1/audio/speech", body, args.api_key, args.timeout)
              for body in bodies),
            return_exceptions=True)
        stop.set()
        await poller
        ok = [r for r in results if not isinstance(r, BaseException) and r[0] == 200 and r[1]]
        errors = len(results) - len(ok)
        ttfa = [r[1] * 1000 for r in ok]
        total = [r[2] for r in ok]
        audio_s = sum(r[3] for r in ok) / 2 / args.sample_rate  # 16-bit PCM
        used = peaks.get("device_used")
        print(f"| {args.clients} | {len(ok)} | {errors} | {statistics.median(ttfa) if ttfa else float('nan'):.0f} | "
              f"{percentile(ttfa, 0.95):.0f} | {percentile(total, 0.95):.2f} | {audio_s:.1f} | "
              f"{peaks.get('reserved', 0) / 2**30:.2f} | "
              f"{'-' if used is None else f'{used / 2**30:.2f}'} |")
        if errors and args.verbose:
            for r in results:
                if isinstance(r, BaseException) or r[0] != 200:
                    print("  error:", r)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8080")
    parser.add_argument("--voice", default="en-demo")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--sample-rate", type=int, default=22050)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--verbose", action="store_true")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
