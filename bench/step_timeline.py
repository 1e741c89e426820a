#!/usr/bin/env python3
"""Where a burst's time to first audio goes, read from one `voxd serve --log-format json
--log-level debug` log: the speech requests' first audio against the device's steps.

A request line (msg "request", path /v1/audio/speech) is written when the response ends: it
arrived at time - duration_ms and had its first audio ttfa_ms later. A step line (msg "step")
is written when the step ends: it ran for `seconds` before its time, with `items` units of its
`kind`, labelled with the urgency of its lead ("first_audio", "starving", "ahead"), and waited
`device_wait_s` of them for the GPU (the rest is the host's: planning, launches, libraries).
A step that ran beside one in flight (`ran_beside`, docs/scheduler.md) lies inside that one's
span; the device thread was running it then, so the step in flight counts only the rest of its
span, and its GPU wait (its audio's download, after the step beside) in the last part.

Printed: the requests' p50 / p95 first audio as the server measured it, and the moment the p95
request had its first audio (ms after the first request arrived); then the device's time from
that arrival to that moment and after it, busy by kind and urgency (and how much of that the
device thread waited for the GPU) and idle, and where the idle time lay: before the first step,
in the gaps between steps (the host's own work between them), after the last; and, from the
step lines' host_before, what the device thread did in those gaps (choosing the next step,
delivering the last one's output, reaping finished streams, taking its lock back). A slow
first audio then reads as the device idle (waiting for admission: the front end, the HTTP layer;
or many short gaps: the device thread's own work between steps), busy with other streams' later
audio (the order of the steps), busy with first audio (throughput), or busy on the host rather
than the GPU (steps whose GPU wait is a small part of their time).

With --load-times (bench/stream_load.py --request-times, the same burst), the requests are
joined by their X-Request-Id and a last line says where the time outside the server's clock
went: from a client's write to the server having read the request's header (the accepting and
reading under the burst), and from the server's first audio to the client's reading it (the
writing, the network, the client's event loop), p50 / p95 / the most; and for the requests whose
first audio came at or after the load's p95, the same two beside the server's own time to first
audio.

    python3 bench/step_timeline.py SERVE_LOG [--json OUT] [--load-times REQUEST_TIMES]
"""
import argparse
import collections
import datetime
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from stream_load import percentile  # noqa: E402  (the load's own p50 / p95: the same ranks)


def log_time(entry):
    """When a log line was written, in seconds since the epoch."""
    return datetime.datetime.fromisoformat(entry["time"].replace("Z", "+00:00")).timestamp()


def log_entries(path):
    """(entry, end_s) for each JSON line of the log with a time: the entry and when it was
    written, in seconds since the epoch; other lines are skipped."""
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and "time" in entry:
                yield entry, log_time(entry)


def speech_times(entry, end):
    """(arrived_s, first_audio_s) of a speech request's access log line written at `end`, or None
    for any other line (or a request without first audio)."""
    if (entry.get("msg") != "request" or entry.get("path") != "/v1/audio/speech"
            or "ttfa_ms" not in entry):
        return None
    arrived = end - entry["duration_ms"] / 1000.0
    return arrived, arrived + entry["ttfa_ms"] / 1000.0


HOST_PARTS = ("choose_s", "deliver_s", "reap_s", "relock_s")


def read_log(path):
    """(speech requests as (arrived_s, first_audio_s), steps as (start_s, end_s, kind, urgency,
    items, gpu_wait_s), the requests' admitted_ms, and each step's host_before as (start_s,
    {part: seconds}) where its line has it), times in seconds since the epoch, gpu_wait_s None
    where the line has no device_wait_s (an older voxd); lines that are not JSON are skipped."""
    requests, steps, beside, admitted, host = [], [], [], [], []
    for entry, end in log_entries(path):
        if entry.get("msg") == "step":
            step = (end - entry["seconds"], end, entry["kind"], entry["urgency"],
                    entry["items"], entry.get("device_wait_s"))
            (beside if entry.get("ran_beside") else steps).append(step)
            if "host_before" in entry:
                host.append((step[0], entry["host_before"]))
        elif (times := speech_times(entry, end)) is not None:
            requests.append(times)
            if "admitted_ms" in entry:
                admitted.append(entry["admitted_ms"])
    return requests, without_steps_beside(steps, beside) + beside, admitted, host


def read_request_ids(path):
    """{request id: (arrived_s, first_audio_s)} of the speech requests with a first audio in the
    log, times in seconds since the epoch."""
    return {entry["id"]: times for entry, end in log_entries(path)
            if "id" in entry and (times := speech_times(entry, end)) is not None}


def load_gaps(server, load):
    """The time outside the server's clock, from read_request_ids' `server` and the load's
    request times (stream_load.request_times' dicts), joined by id: {"joined", "to_server_ms",
    "from_server_ms", and for the requests at or past the load's p95 first audio "slow": {"requests",
    "to_server_ms", "server_ms", "from_server_ms"}}, each of those a [p50, p95, most] in ms."""
    rows = []
    for entry in load:
        if entry.get("first_audio") is None or entry.get("id") not in server:
            continue
        arrived, first = server[entry["id"]]
        rows.append((entry["first_audio"] - entry["started"], arrived - entry["written"],
                     first - arrived, entry["first_audio"] - first))
    if not rows:
        raise ValueError("no request of the load's times is in the server's log with a first "
                         "audio (the same burst? a voxd that logs the request id?)")

    def spread(values):
        return [1000 * percentile(values, 0.5), 1000 * percentile(values, 0.95),
                1000 * max(values)]

    p95 = percentile([r[0] for r in rows], 0.95)
    slow = [r for r in rows if r[0] >= p95]
    return {"joined": len(rows), "to_server_ms": spread([r[1] for r in rows]),
            "from_server_ms": spread([r[3] for r in rows]),
            "slow": {"requests": len(slow), "to_server_ms": spread([r[1] for r in slow]),
                     "server_ms": spread([r[2] for r in slow]),
                     "from_server_ms": spread([r[3] for r in slow])}}


def gaps_line(g):
    def ms(values):
        return f"p50 {values[0]:.0f}, p95 {values[1]:.0f}, most {values[2]:.0f} ms"

    s = g["slow"]
    return (f"outside the server's clock ({g['joined']} requests joined by id): the client's write "
            f"to the server's reading it {ms(g['to_server_ms'])}; the server's first audio to "
            f"the client's reading it {ms(g['from_server_ms'])}; the {s['requests']} at or past "
            f"the load's p95 first audio: {ms(s['to_server_ms'])} in, {ms(s['server_ms'])} the "
            f"server's, {ms(s['from_server_ms'])} out\n")


def without_steps_beside(steps, beside):
    """`steps` with the spans of the `beside` steps cut out of the steps they ran inside: a step
    in flight becomes its parts outside them, its items and GPU wait in its last part (the others
    have no items, and count as no step)."""
    cut = []
    for start, stop, kind, urgency, items, gpu_wait in steps:
        inner = sorted((b[0], b[1]) for b in beside if b[0] >= start and b[1] <= stop)
        if not inner:
            cut.append((start, stop, kind, urgency, items, gpu_wait))
            continue
        pieces, at = [], start
        for b_start, b_stop in inner:
            if b_start > at:
                pieces.append((at, b_start))
            at = max(at, b_stop)
        if stop > at:
            pieces.append((at, stop))
        for i, (p_start, p_stop) in enumerate(pieces):
            last = i == len(pieces) - 1
            cut.append((p_start, p_stop, kind, urgency, items if last else 0,
                        gpu_wait if last or gpu_wait is None else 0.0))
    return cut


def device_time(steps, begin, end):
    """{(kind, urgency): [steps, items, busy seconds, of them waiting for the GPU (None when a
    step's line does not say)]} of the steps' time within [begin, end), and the idle seconds
    there. A step partly inside counts the same share of its GPU wait."""
    spent = collections.defaultdict(lambda: [0, 0, 0.0, 0.0])
    busy = 0.0
    for start, stop, kind, urgency, items, gpu_wait in steps:
        overlap = min(stop, end) - max(start, begin)
        if overlap <= 0:
            continue
        row = spent[(kind, urgency)]
        row[0] += 1 if items > 0 else 0  # a part of a step in flight before its last
        row[1] += items
        row[2] += overlap
        if gpu_wait is None or row[3] is None:
            row[3] = None
        else:
            row[3] += gpu_wait * overlap / (stop - start)
        busy += overlap
    return dict(spent), max(0.0, (end - begin) - busy)


def idle_spans(steps, begin, end):
    """Where the device thread was idle within [begin, end): {"before_first_step_s",
    "between_steps_s", "gaps" (how many between steps), "longest_gap_ms", "median_gap_ms",
    "after_last_step_s"}. Many short gaps between steps are the host's own work between them
    (choosing, delivering); one long wait before the first step is the burst's admission."""
    spans = sorted((max(start, begin), min(stop, end)) for start, stop, *_ in steps
                   if min(stop, end) > max(start, begin))
    merged = []
    for start, stop in spans:
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], stop)
        else:
            merged.append([start, stop])
    gaps = [b[0] - a[1] for a, b in zip(merged, merged[1:])]
    return {"before_first_step_s": (merged[0][0] if merged else end) - begin,
            "between_steps_s": sum(gaps), "gaps": len(gaps),
            "longest_gap_ms": 1000 * max(gaps, default=0.0),
            "median_gap_ms": 1000 * percentile(gaps, 0.5) if gaps else 0.0,
            "after_last_step_s": end - merged[-1][1] if merged else 0.0}


def host_work(host, begin, end):
    """The device thread's work between steps (read_log's host_before) of the steps that started
    within [begin, end): {part: seconds summed}, or None where no step line has it."""
    within = [parts for start, parts in host if begin <= start < end]
    if not within:
        return None
    return {part: sum(parts.get(part, 0.0) for parts in within) for part in HOST_PARTS}


def timeline(requests, steps, admitted=(), host=()):
    """The figures this script prints, as a dict; `admitted`: the requests' admitted_ms, where
    their lines have it; `host`: read_log's host_before of each step."""
    if not requests:
        raise ValueError("no speech request with a first audio in the log (is it --log-format "
                         "json, and did any request finish?)")
    if not steps:
        raise ValueError("no step lines in the log (start voxd serve with --log-level debug)")
    origin = min(arrived for arrived, _ in requests)
    ttfa = [first - arrived for arrived, first in requests]
    p95_moment = percentile([first for _, first in requests], 0.95)
    last_step = max(step[1] for step in steps)
    parts = {}
    for name, (begin, end) in (("to the p95 first audio", (origin, p95_moment)),
                               ("after it", (p95_moment, max(p95_moment, last_step)))):
        spent, idle = device_time(steps, begin, end)
        parts[name] = {"seconds": end - begin, "idle_s": idle,
                       "idle": idle_spans(steps, begin, end),
                       "host_work_s": host_work(host, begin, end),
                       "busy": [{"kind": k, "urgency": u, "steps": n, "items": items,
                                 "seconds": s, "gpu_wait_s": w}
                                for (k, u), (n, items, s, w) in sorted(spent.items())]}
    out = {"requests": len(requests), "ttfa_p50_ms": 1000 * percentile(ttfa, 0.5),
           "ttfa_p95_ms": 1000 * percentile(ttfa, 0.95),
           "p95_first_audio_at_ms": 1000 * (p95_moment - origin), "parts": parts}
    if admitted:
        out["admitted_p50_ms"] = percentile(admitted, 0.5)
        out["admitted_p95_ms"] = percentile(admitted, 0.95)
    return out


def report(t):
    lines = [f"{t['requests']} speech requests: first audio p50 {t['ttfa_p50_ms']:.0f} ms, p95 "
             f"{t['ttfa_p95_ms']:.0f} ms; the p95 first audio came "
             f"{t['p95_first_audio_at_ms']:.0f} ms after the first request arrived"
             + (f"; admitted (text through the front end, in the engine's queue) p50 "
                f"{t['admitted_p50_ms']:.0f} ms, p95 {t['admitted_p95_ms']:.0f} ms after arrival"
                if "admitted_p50_ms" in t else ""),
             "| device time | kind | urgency | steps | items | seconds | share | of it waiting "
             "for the GPU |",
             "|---|---|---|---|---|---|---|---|"]
    for name, part in t["parts"].items():
        total = part["seconds"] or 1.0
        for row in part["busy"]:
            wait = " " if row["gpu_wait_s"] is None else f" {row['gpu_wait_s']:.3f} "
            lines.append(f"| {name} | {row['kind']} | {row['urgency']} | {row['steps']} | "
                         f"{row['items']} | {row['seconds']:.3f} | "
                         f"{100 * row['seconds'] / total:.0f} % |{wait}|")
        lines.append(f"| {name} | idle | | | | {part['idle_s']:.3f} | "
                     f"{100 * part['idle_s'] / total:.0f} % | |")
    for name, part in t["parts"].items():
        i = part["idle"]
        lines.append(f"idle {name}: {1000 * i['before_first_step_s']:.1f} ms before the first "
                     f"step, {1000 * i['between_steps_s']:.1f} ms in {i['gaps']} gaps between "
                     f"steps (median {i['median_gap_ms']:.2f} ms, longest "
                     f"{i['longest_gap_ms']:.2f} ms), {1000 * i['after_last_step_s']:.1f} ms "
                     f"after the last")
        if (w := part.get("host_work_s")) is not None:
            lines.append(f"the device thread between steps {name}: choosing "
                         f"{1000 * w['choose_s']:.1f} ms, delivering {1000 * w['deliver_s']:.1f} "
                         f"ms, reaping {1000 * w['reap_s']:.1f} ms, taking the lock back "
                         f"{1000 * w['relock_s']:.1f} ms")
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("log", help="voxd serve's standard error, --log-format json --log-level debug")
    p.add_argument("--json", help="write the figures here too")
    p.add_argument("--load-times", help="bench/stream_load.py --request-times of the same burst")
    args = p.parse_args(argv)
    try:
        t = timeline(*read_log(args.log))
        if args.load_times:
            with open(args.load_times, encoding="utf-8") as f:
                load = [json.loads(line) for line in f if line.strip()]
            t["outside"] = load_gaps(read_request_ids(args.log), load)
    except (ValueError, OSError) as e:
        print(f"step_timeline: {args.log}: {e}", file=sys.stderr)
        return 1
    print(report(t) + (gaps_line(t["outside"]) if "outside" in t else ""), end="")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(t, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
