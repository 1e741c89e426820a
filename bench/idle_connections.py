#!/usr/bin/env python3
"""Many idle keep-alive connections against a running `voxd serve`: what they cost the server.

Opens CONNECTIONS connections (asyncio, standard library only), sends one GET /healthz on each
and reads its answer, then keeps them all open and idle. With them open it measures:

  server RSS        the server's resident memory (VmRSS of --pid) before the connections, with
                    them open, and the difference per connection
  server threads    the server's thread count (Threads of --pid) with them open
  probe p50 / max   GET /healthz on a fresh connection, 50 times one after another, while the
                    idle ones are open: a normal client's latency
  still open        connections the server had not closed when they were counted, after --hold
                    seconds

Start the server with a keep-alive timeout longer than the run, e.g.

    voxd serve --voice voices/en-demo --max-connections 12000 --keep-alive-timeout 600 &
    python3 bench/idle_connections.py --url http://127.0.0.1:8080 --pid $! --connections 10000

Prints "opened N connections" once they are all open (scripts/gpu-check.py serve waits for it
before its load rounds), the table row at the end. Exits 1 when a connection could not be opened
or answered, or the server closed one early. It raises its own open-file limit to fit the
connections.
"""
import argparse
import asyncio
import resource
import statistics
import sys
import time
import urllib.parse


def proc_status(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise SystemExit(f"no {field} for process {pid}")


def raise_open_file_limit(connections):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, connections + 256)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    if want < connections + 64:
        raise SystemExit(f"open files are limited to {hard}: too few for {connections} connections")


def request(host, api_key):
    lines = ["GET /healthz HTTP/1.1", f"Host: {host}"]
    if api_key:
        lines.append(f"Authorization: Bearer {api_key}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def read_answer(reader):
    """Reads one response with a Content-Length; returns its status."""
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    await reader.readexactly(length)
    return status


async def open_one(host, port, api_key, timeout):
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    writer.write(request(host, api_key))
    status = await asyncio.wait_for(read_answer(reader), timeout)
    if status != 200:
        raise RuntimeError(f"status {status}")
    return reader, writer


async def probe(host, port, api_key, timeout):
    start = time.perf_counter()
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    writer.write(request(host, api_key))
    await asyncio.wait_for(read_answer(reader), timeout)
    elapsed = time.perf_counter() - start
    writer.close()
    return elapsed


async def run(args):
    url = urllib.parse.urlparse(args.url)
    host, port = url.hostname, url.port or 80
    rss_before = proc_status(args.pid, "VmRSS")
    opened = []
    failures = 0
    # In waves, so that the listen queue is not the thing measured.
    for start in range(0, args.connections, 500):
        wave = [open_one(host, port, args.api_key, args.timeout)
                for _ in range(min(500, args.connections - start))]
        for result in await asyncio.gather(*wave, return_exceptions=True):
            if isinstance(result, Exception):
                failures += 1
            else:
                opened.append(result)
    print(f"opened {len(opened)} connections ({failures} failed); holding them {args.hold} s",
          flush=True)
    await asyncio.sleep(1.0)  # let the server settle after the last answers
    rss_open = proc_status(args.pid, "VmRSS")
    threads = proc_status(args.pid, "Threads")
    probes = [await probe(host, port, args.api_key, args.timeout) for _ in range(50)]
    await asyncio.sleep(args.hold)
    still_open = sum(1 for reader, _ in opened if not reader.at_eof())
    for _, writer in opened:
        writer.close()
    per_connection = (rss_open - rss_before) * 1024 / max(1, len(opened))
    print("| connections open | failed | server RSS before / with them MiB | per connection KiB "
          "| server threads | probe p50 / max ms | still open after hold |")
    print("|---|---|---|---|---|---|---|")
    print(f"| {len(opened)} | {failures} | {rss_before / 1024:.1f} / {rss_open / 1024:.1f} "
          f"| {per_connection / 1024:.1f} | {threads} "
          f"| {statistics.median(probes) * 1000:.1f} / {max(probes) * 1000:.1f} "
          f"| {still_open} |")
    return 0 if failures == 0 and still_open == len(opened) else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8080")
    parser.add_argument("--pid", type=int, required=True, help="the server's process id")
    parser.add_argument("--connections", type=int, default=10000)
    parser.add_argument("--api-key", default="")
    parser.add_argument("--hold", type=float, default=5.0,
                        help="seconds the connections stay idle before they are counted")
    parser.add_argument("--timeout", type=float, default=30.0)
    args = parser.parse_args()
    raise_open_file_limit(args.connections)
    sys.exit(asyncio.run(run(args)))


if __name__ == "__main__":
    main()
