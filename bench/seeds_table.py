#!/usr/bin/env python3
"""The seeds' before/after table, side by side (issue 19): one voice served by `voxd serve` and
the seeds' way (bench/pytorch_server.py: the family's PyTorch model in eager mode, a thread per
request, and seed 003's padded-batch queue of 4, or for KAN-TTS, whose inference takes one
utterance at a time, a pool of 4 model copies), measured by the same client (streamed 16-bit
PCM; requests of --sentences sentences from the family's list) one way after the other on one
machine, for each family (--family): FastSpeech2 + HiFiGAN (PyTorch on voxd's reference
modules), Sambert-HiFiGAN (KAN-TTS's own code) and ChatTTS (its infer() as the original runs it):

  cold start        process start to the first audio byte of the first request;
  one request       time to first audio and to the end, median of --alone requests in turn,
                    each sent twice and timed the second time (warm, as cold start is apart);
  GPU utilisation   NVML's, sampled every 0.1 s while 1 and then 2 users send requests back to
                    back for --users-seconds each (with the audio-s/s they got);
  most users        a stepped search (--search) for the most requests at once whose p95 time to
                    first audio stays within --ttfa-ms, with no error (and --past rounds after
                    the first that missed, for the charts);
  peak memory       the server allocator's peak reserved bytes (voxd's /debug/memory, torch.cuda's
                    for the others) and NVML's peak used bytes of the device over the whole way.

Writes the JSON (--json), prints a Markdown table, and with --plots DIR draws throughput and p95
time to first audio against concurrency, and device memory over time, as SVG files
(seeds-FAMILY-*.svg). Without NVML (no GPU) its columns are "-". --from-json prints the table
and draws the charts of a saved run without measuring (a GPU call's charts can stay behind when
it returns too many files).

    python3 bench/seeds_table.py --voice voices/en-demo --voxd build/src/cli/voxd \\
        [--device cuda] [--dtype f16] [--search 1,2,4,...,512] [--json OUT] [--plots DIR]
    python3 bench/seeds_table.py --family sambert --voice WORK/voice --voice-name sambert-bench \\
        --peer-voice WORK/modelscope --kantts KAN-TTS --voxd ... --dtype f16 --peer-dtype f32
    python3 bench/seeds_table.py --family chattts --voice DIR --voxd ... --peer-dtype f32
    python3 bench/seeds_table.py --from-json seeds.json --plots docs
"""
import argparse
import asyncio
import collections
import ctypes
import dataclasses
import json
import math
import os
import queue
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)

import serve_workload as workload  # noqa: E402
import stream_load  # noqa: E402


@dataclasses.dataclass
class Family:
    """What the client sends a family's servers, and how its ways are named."""
    labels: dict               # way -> the table's name for it: voxd's, then the seeds'
    fields: dict               # added to every request's JSON body
    texts: object              # () -> the sentences a request is made of

    @property
    def ways(self):
        return list(self.labels)


def sambert_texts():
    import sambert_serve_bench
    return [symbols for symbols, _ in sambert_serve_bench.seeds_sentences()]


FAMILIES = {
    "fastspeech2": Family({"voxd": "voxd serve", "threads": "PyTorch, a thread per request",
                           "batch": "PyTorch, padded batch of 4 (seed 003)"},
                          {}, lambda: stream_load.TEXTS),
    "sambert": Family({"voxd": "voxd serve",
                       "threads": "KAN-TTS, a thread per request (one model, ModelScope's lock)",
                       "pool": "KAN-TTS, a pool of 4 model copies"},
                      {"input_format": "kantts_symbols"}, sambert_texts),
    "chattts": Family({"voxd": "voxd serve", "threads": "ChatTTS, a thread per request",
                       "batch": "ChatTTS, padded batch of 4 (seed 003)"},
                      {"refine_text": False}, lambda: stream_load.TEXTS),
}


def voice_rate(voice):
    """The voice's sample rate (its config.json's sample_rate): the rate of the PCM both servers
    send, requests asking for the voice's own."""
    with open(os.path.join(voice, "config.json"), encoding="utf-8") as f:
        return int(json.load(f)["sample_rate"])


def request_body(args, sentences, i):
    """Client i's request (stream_load's): `sentences` of the family's sentences from the i-th on,
    with the family's fields."""
    return stream_load.request_body(args.voice_name, sentences, i, args.texts,
                                    args.family_spec.fields)


class Nvml:
    """NVML through ctypes (libnvidia-ml.so.1): GPU utilisation and used memory of device 0;
    `available` False where there is none."""

    class _Utilization(ctypes.Structure):
        _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]

    class _Memory(ctypes.Structure):
        _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                    ("used", ctypes.c_ulonglong)]

    def __init__(self):
        self.available = False
        try:
            self.lib = ctypes.CDLL("libnvidia-ml.so.1")
            self.handle = ctypes.c_void_p()
            self.available = (
                self.lib.nvmlInit_v2() == 0
                and self.lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(self.handle)) == 0)
        except OSError:
            pass

    def reading(self):
        """(GPU utilisation %, used bytes), or (None, None)."""
        if not self.available:
            return None, None
        utilization, memory = self._Utilization(), self._Memory()
        if (self.lib.nvmlDeviceGetUtilizationRates(self.handle, ctypes.byref(utilization)) != 0
                or self.lib.nvmlDeviceGetMemoryInfo(self.handle, ctypes.byref(memory)) != 0):
            return None, None
        return utilization.gpu, memory.used


class Sampler:
    """Samples NVML every 0.1 s on a thread: (seconds since start, utilisation %, used bytes)."""

    def __init__(self, nvml):
        self.nvml, self.samples, self.start = nvml, [], time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            utilization, used = self.nvml.reading()
            if used is not None:
                self.samples.append((time.monotonic() - self.start, utilization, used))
            self._stop.wait(0.1)

    def mark(self):
        return len(self.samples)

    def utilization_since(self, mark):
        values = [u for _, u, _ in self.samples[mark:]]
        return statistics.mean(values) if values else None

    def stop(self):
        self._stop.set()
        self._thread.join()


async def requests_at_once(url, bodies, timeout):
    """stream_load.one_stream for each body at once: its (status, ttfa_s, total_s, bytes, _), or
    the exception it raised."""
    parsed = urllib.parse.urlparse(url)
    return await asyncio.gather(
        *(stream_load.one_stream(parsed.hostname, parsed.port, "/v1/audio/speech", b, None,
                                 timeout, 0.0) for b in bodies), return_exceptions=True)


def ok(result):
    return stream_load.error_kind(result) is None


def summary(results, wall, rate):
    good = [r for r in results if ok(r)]
    ttfa = [1000 * r[1] for r in good]
    audio_s = sum(r[3] for r in good) / 2 / rate
    return {"requests": len(results), "errors": len(results) - len(good),
            "ttfa_p50_ms": statistics.median(ttfa) if ttfa else None,
            "ttfa_p95_ms": stream_load.percentile(ttfa, 0.95) if ttfa else None,
            "audio_s": audio_s, "audio_per_s": audio_s / wall if wall > 0 else None}


def start_server(command, env, timeout):
    """Starts `command`; returns (process, url, seconds until it listened, its last lines of
    output) once a JSON line with msg "listening" and its url came on its output (read on a
    thread, the rest drained there, the last 20 lines kept for error messages). SystemExit, the
    process ended, when that does not come within `timeout` seconds."""
    start = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               env=env, text=True)
    urls = queue.Queue()
    output = collections.deque(maxlen=20)

    def read():
        for line in process.stdout:
            output.append(line.rstrip())
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if isinstance(message, dict) and message.get("msg") == "listening":
                urls.put(message["url"])
        urls.put(None)  # the output ended

    threading.Thread(target=read, daemon=True).start()
    try:
        url = urls.get(timeout=timeout)
    except queue.Empty:
        url = None
    if url is None:
        process.kill()
        process.wait()
        raise SystemExit(f"{command[0]} did not start listening within {timeout} s; its last "
                         "output:\n" + "\n".join(output))
    return process, url, time.monotonic() - start, output


def server_memory(url):
    try:
        with urllib.request.urlopen(url + "/debug/memory?format=json", timeout=5) as response:
            return json.load(response).get("stats", {}).get("peak_reserved_bytes")
    except (OSError, ValueError):
        return None


def closed_loop(url, args, users):
    """`users` clients each sending requests back to back for --users-seconds: (audio-s/s,
    errors)."""
    seconds, timeout, rate = args.users_seconds, args.timeout, args.sample_rate

    async def user(k, stop_at, tally):
        i = k
        while time.monotonic() < stop_at:
            (result,) = await requests_at_once(url, [request_body(args, args.sentences, i)],
                                               timeout)
            tally["audio"] += result[3] if ok(result) else 0
            tally["errors"] += 0 if ok(result) else 1
            i += users

    async def run():
        tally = {"audio": 0, "errors": 0}
        start = time.monotonic()
        await asyncio.gather(*(user(k, start + seconds, tally) for k in range(users)))
        return tally["audio"] / 2 / rate / (time.monotonic() - start), tally["errors"]

    return asyncio.run(run())


def search(round_of, concurrencies, ttfa_ms, past):
    """The stepped search for the most users: round_of(n) (a summary()) for each n of
    `concurrencies` in order, until a round has errors or no first audio, or `past` rounds after
    the first whose p95 first audio exceeds `ttfa_ms`. Returns (the rounds, each with its
    "concurrency"; the last n before that first miss, or None)."""
    rounds, most, missed = [], None, 0
    for n in concurrencies:
        s = dict(round_of(n), concurrency=n)
        rounds.append(s)
        if s["errors"] or s["ttfa_p95_ms"] is None:
            break
        if missed or s["ttfa_p95_ms"] > ttfa_ms:
            missed += 1
            if missed > past:
                break
        else:
            most = n
    return rounds, most


def measure_way(way, args, nvml):
    """Every figure of one way, its server started and stopped here."""
    env = dict(os.environ)
    if way == "voxd":
        command = [args.voxd, "serve", "--voice", args.voice, "--port", "0", "--device",
                   args.device, "--log-format", "json", "--max-connections", "2048",
                   "--max-queue", "4096"] + (["--dtype", args.dtype] if args.dtype else [])
        command += args.serve_args.split()
        if args.voxd_library_path:
            env["LD_LIBRARY_PATH"] = args.voxd_library_path
    else:
        command = [sys.executable, os.path.join(BENCH, "pytorch_server.py"), "--family",
                   args.family, "--voice", args.peer_voice or args.voice, "--voxd", args.voxd,
                   "--port", "0", "--device", args.device, "--dtype",
                   args.peer_dtype or args.dtype or "f32", "--mode", way]
        if args.kantts:
            command += ["--kantts", args.kantts]
        if args.voxd_library_path:
            command += ["--voxd-library-path", args.voxd_library_path]
    sampler = Sampler(nvml)
    start = time.monotonic()
    try:
        process, url, listening_s, output = start_server(command, env, args.timeout)
    except BaseException:
        sampler.stop()
        raise
    label = args.family_spec.labels[way]
    figures = {"way": way, "label": label, "listening_s": listening_s}
    try:
        first = asyncio.run(requests_at_once(url, [request_body(args, 1, 0)], args.timeout))
        if not ok(first[0]):
            time.sleep(0.5)  # the server's own account of the failure, read on its thread
            raise SystemExit(f"{label}: the first request failed: "
                             f"{stream_load.error_kind(first[0])}; the server's last output:\n"
                             + "\n".join(output))
        figures["cold_start_s"] = time.monotonic() - start - first[0][2] + first[0][1]
        # Each single request twice, the second timed: the first pays what a server pays once
        # per shape (PyTorch's kernel choice and loading; the cold start column counts that).
        alone = [[asyncio.run(requests_at_once(
            url, [request_body(args, args.sentences, i)], args.timeout))[0]
            for _ in range(2)][1] for i in range(args.alone)]
        alone = [r for r in alone if ok(r)]
        if not alone:
            raise SystemExit(f"{label}: every one of {args.alone} single requests failed")
        figures["alone_ttfa_ms"] = statistics.median(1000 * r[1] for r in alone)
        figures["alone_total_ms"] = statistics.median(1000 * r[2] for r in alone)
        figures["users"] = []
        for users in (1, 2):
            mark = sampler.mark()
            rate, errors = closed_loop(url, args, users)
            figures["users"].append({"users": users, "audio_per_s": rate, "errors": errors,
                                     "gpu_utilization": sampler.utilization_since(mark)})
        def round_of(n):
            bodies = [request_body(args, args.sentences, i) for i in range(n)]
            begin = time.monotonic()
            results = asyncio.run(requests_at_once(url, bodies, args.timeout))
            return summary(results, time.monotonic() - begin, args.sample_rate)

        figures["search"], figures["most_users"] = search(round_of, args.search, args.ttfa_ms,
                                                          args.past)
        figures["peak_reserved_bytes"] = server_memory(url)
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
        sampler.stop()
    used = [u for _, _, u in sampler.samples]
    figures["peak_device_used_bytes"] = max(used) if used else None
    figures["memory_over_time"] = [(t, u) for t, _, u in sampler.samples]
    return figures


def table(ways, ttfa_ms):
    """The Markdown table of the measured ways."""
    lines = ["| way | cold start s | one request: first audio / end ms | GPU util % 1 / 2 users "
             "| audio-s/s 1 / 2 users | most users, p95 first audio <= "
             f"{ttfa_ms:.0f} ms | peak reserved GiB | peak device used GiB |",
             "|---|---|---|---|---|---|---|---|"]
    for w in ways:
        util = " / ".join(workload.fmt(u["gpu_utilization"]) for u in w["users"])
        rate = " / ".join(workload.fmt(u["audio_per_s"], 1) for u in w["users"])
        most = w["most_users"]
        most_text = "0" if most is None else f"{most:,}"
        if most is not None and w["search"][-1]["concurrency"] == most:
            most_text = f">= {most:,}"  # the search ended before a round missed
        lines.append(f"| {w['label']} | {w['cold_start_s']:.2f} | {w['alone_ttfa_ms']:.0f} / "
                     f"{w['alone_total_ms']:.0f} | {util} | {rate} | {most_text} "
                     f"| {workload.gib(w['peak_reserved_bytes'])} "
                     f"| {workload.gib(w['peak_device_used_bytes'])} |")
    return "\n".join(lines) + "\n"


def svg_chart(path, title, x_label, y_label, series, log_x=False):
    """A line chart of {name: [(x, y)]} as an SVG file (no plotting library on the GPU machine)."""
    # The legend's column is as wide as its longest name (about 7 px a character at 12 px).
    right = max(300, 20 + 7 * max((len(name) for name in series), default=0))
    width, height, left, bottom, top = 500 + right, 400, 70, 50, 40
    points = [p for values in series.values() for p in values if p[1] is not None]
    if not points:
        return
    fx = (lambda x: math.log2(x)) if log_x else (lambda x: x)
    xs, ys = [fx(x) for x, _ in points], [y for _, y in points]
    x0 = 0.0 if not log_x and min(xs) >= 0 else min(xs)  # time axes start at 0
    x1 = max(xs) if max(xs) > x0 else x0 + 1
    y1 = max(ys) * 1.1 or 1.0

    def at(x, y):
        return (left + (fx(x) - x0) / (x1 - x0) * (width - left - right),
                height - bottom - y / y1 * (height - top - bottom))

    colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'font-family="sans-serif" font-size="12">',
             f'<rect width="{width}" height="{height}" fill="white"/>',
             f'<text x="{left}" y="24" font-size="14">{title}</text>',
             f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" '
             f'y2="{height - bottom}" stroke="black"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" stroke="black"/>',
             f'<text x="{(left + width - right) / 2}" y="{height - 12}" '
             f'text-anchor="middle">{x_label}</text>',
             f'<text x="14" y="{(top + height - bottom) / 2}" text-anchor="middle" '
             f'transform="rotate(-90 14 {(top + height - bottom) / 2})">{y_label}</text>']
    for k in range(5):
        y = y1 * k / 4
        py = height - bottom - k / 4 * (height - top - bottom)
        parts.append(f'<text x="{left - 6}" y="{py + 4:.1f}" text-anchor="end">{y:,.0f}</text>')
    if log_x:  # each concurrency measured
        ticks = sorted({x for x, _ in points})
    else:  # five, evenly spaced
        ticks = [x0 + (x1 - x0) * k / 4 for k in range(5)]
    for value in ticks:
        px, _ = at(value, 0)
        parts.append(f'<text x="{px:.1f}" y="{height - bottom + 16}" '
                     f'text-anchor="middle">{value:.3g}</text>')
    for n, (name, values) in enumerate(series.items()):
        colour = colours[n % len(colours)]
        coords = " ".join("%.1f,%.1f" % at(x, y) for x, y in values if y is not None)
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" '
                     f'points="{coords}"/>')
        parts.append(f'<text x="{width - right + 10}" y="{top + 18 * n + 10}" '
                     f'fill="{colour}">{name}</text>')
    parts.append("</svg>")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(parts) + "\n")


def plots(ways, directory, family):
    """The three charts of one family's run: DIRECTORY/seeds-FAMILY-{throughput,ttfa,memory}.svg."""
    os.makedirs(directory, exist_ok=True)
    name = os.path.join(directory, f"seeds-{family}-")
    svg_chart(name + "throughput.svg", f"Audio-seconds per second ({family})",
              "requests at once", "audio-s/s",
              {w["label"]: [(s["concurrency"], s["audio_per_s"]) for s in w["search"]]
               for w in ways}, log_x=True)
    svg_chart(name + "ttfa.svg", f"p95 time to first audio ({family})",
              "requests at once", "ms",
              {w["label"]: [(s["concurrency"], s["ttfa_p95_ms"]) for s in w["search"]]
               for w in ways}, log_x=True)
    svg_chart(name + "memory.svg", f"Device memory used, NVML ({family})",
              "seconds since the server started", "MiB",
              {w["label"]: [(t, u / 2**20) for t, u in w["memory_over_time"]] for w in ways})


def parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--family", choices=sorted(FAMILIES), default="fastspeech2")
    p.add_argument("--voice", help="voxd's voice folder (to measure)")
    p.add_argument("--voice-name", help="the voice's name in requests (default: its folder's)")
    p.add_argument("--peer-voice", help="the seeds' server's voice folder (default: --voice; "
                                        "sambert: the ModelScope voice)")
    p.add_argument("--kantts", help="a KAN-TTS checkout (sambert)")
    p.add_argument("--voxd", help="the voxd binary (served, and the front end; to measure)")
    p.add_argument("--voxd-library-path", help="LD_LIBRARY_PATH for voxd serve alone")
    p.add_argument("--serve-args", default="", help="more voxd serve options")
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default=None, help="f16, f32 (default: each side's own)")
    p.add_argument("--peer-dtype", help="the seeds' server's dtype (default: --dtype, or f32)")
    p.add_argument("--ways", help="of the family's (default: all; fastspeech2 and chattts: "
                                  "voxd, threads, batch; sambert: voxd, threads, pool)")
    p.add_argument("--sentences", type=int, default=2, help="sentences a request")
    p.add_argument("--alone", type=int, default=5, help="single requests in turn")
    p.add_argument("--users-seconds", type=float, default=10.0)
    p.add_argument("--search", default="1,2,4,8,16,32,64,128,256,512",
                   help="requests at once, in order; most users is the last before the first "
                        "that misses")
    p.add_argument("--past", type=int, default=2,
                   help="rounds measured after the first that misses, for the charts (a round "
                        "with errors ends the search)")
    p.add_argument("--ttfa-ms", type=float, default=200.0)
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument("--json", help="write the figures here")
    p.add_argument("--plots", help="a folder for the SVG charts")
    p.add_argument("--from-json", help="a saved run's JSON: its table and charts, no measuring")
    return p


def main(argv=None):
    p = parser()
    args = p.parse_args(argv)
    if args.from_json:
        with open(args.from_json, encoding="utf-8") as f:
            saved = json.load(f)
        print(table(saved["ways"], args.ttfa_ms), end="")
        if args.plots:
            plots(saved["ways"], args.plots, saved.get("family", "fastspeech2"))
        return 0
    if not args.voice or not args.voxd:
        p.error("--voice and --voxd are needed to measure (or --from-json for a saved run)")
    spec = args.family_spec = FAMILIES[args.family]
    names = args.ways.split(",") if args.ways else spec.ways
    unknown = [w for w in names if w not in spec.ways]
    if unknown:
        p.error(f"--ways: {', '.join(unknown)} not of {args.family}'s ({', '.join(spec.ways)})")
    args.search = [int(n) for n in args.search.split(",") if n.strip()]
    args.voice_name = args.voice_name or os.path.basename(os.path.normpath(args.voice))
    args.texts, args.sample_rate = spec.texts(), voice_rate(args.voice)
    nvml = Nvml()
    ways = []
    for way in names:
        ways.append(measure_way(way, args, nvml))
        shown = {k: v for k, v in ways[-1].items() if k != "memory_over_time"}
        print(f"{spec.labels[way]}: {json.dumps(shown)}", flush=True)
        if args.json:  # after each way, so that a run cut short keeps what it measured
            with open(args.json, "w", encoding="utf-8") as f:
                json.dump({"family": args.family, "voice": args.voice, "device": args.device,
                           "ways": ways}, f, indent=1)
    print(table(ways, args.ttfa_ms), end="")
    if args.plots:
        plots(ways, args.plots, args.family)
    return 0


if __name__ == "__main__":
    sys.exit(main())
