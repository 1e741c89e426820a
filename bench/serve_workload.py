"""The workload and the accounting that both sides of the ChatTTS serving benchmark share:
bench/chattts_serve_peer.py (the original ChatTTS served in-process) and
bench/chattts_serve_load.py (`voxd serve` through HTTP). Standard library only.

Lengths. Random weights never end a sentence sensibly, so the benchmark fixes how many audio
codes a sentence makes: the bench voice's infer_code has min_new_token = max_new_token = L (the
end token is masked before L and the stage stops at L), and a request's length is its number of
sentences n. voxd makes each sentence in its own code stage (n stages of L codes); the original,
given the whole text as one prompt, makes n·L codes in one stage. Both make the same audio,
2·n·L mel frames (each frame hop / rate seconds), so the two sides' audio-seconds are alike; each
side counts the samples it actually delivered.

Records. A request's result is a `Record`: the arrivals of its audio, (seconds since the request
was sent, samples that arrived then), and an error or None. From them:
  time to first audio (TTFA)  the first arrival;
  real time  a stream keeps up when each chunk arrives before its playback time, playback starting
             at the first audio: chunk k (S_k samples before it) is due at t_0 + S_k / rate;
             its lag is how late the latest chunk was (0 when none was late);
  audio-s/s  every delivered sample of a round over the round's wall time.
"""
import dataclasses
import random

# TEXTS: one sentence each (voxd cuts at . ! ?), 4 to 17 words; max_lag: a stream's real-time lag.
from stream_load import TEXTS, max_lag

RATE = 24000  # ChatTTS's rate, and OpenAI's pcm


@dataclasses.dataclass
class Request:
    """One request of the workload: its text of `sentences` sentences and its sampling seed."""
    text: str
    sentences: int
    seed: int


@dataclasses.dataclass
class Record:
    """What a request got: arrivals [(seconds since it was sent, samples)] and an error."""
    arrivals: list = dataclasses.field(default_factory=list)
    error: str | None = None


def fixed_requests(count, sentences, offset=0):
    """`count` requests of `sentences` sentences each, request i from sentence i + offset on (so
    that neighbours differ), seeds offset + i."""
    return [Request(" ".join(TEXTS[(offset + i + k) % len(TEXTS)]
                             for k in range(sentences)), sentences, offset + i)
            for i in range(count)]


def random_requests(count, seed, fewest=1, most=4):
    """`count` requests of random length from `seed`: each of fewest..most sentences (uniform),
    the sentences drawn from TEXTS, a random 32-bit sampling seed. The same seed gives the
    same requests, and a longer list starts with a shorter one's requests."""
    if not 1 <= fewest <= most:
        raise ValueError("random_requests: want 1 <= fewest <= most")
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        n = rng.randint(fewest, most)
        text = " ".join(rng.choice(TEXTS) for _ in range(n))
        out.append(Request(text, n, rng.getrandbits(32)))
    return out


def parse_range(text):
    """'1-4' -> (1, 4); '3' -> (3, 3)."""
    low, _, high = text.partition("-")
    return int(low), int(high or low)


def percentile(values, q):
    """The value at quantile q of `values` (nearest rank, as bench/stream_load.py); None for
    none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def summarize(records, wall_s, rate=RATE, slack_s=0.0):
    """A round's figures: requests, ok, errors (and by kind), TTFA p50 / p95 in ms, audio seconds,
    wall seconds, audio-s/s, streams that kept up with real time (lag <= slack_s), the largest
    lag in ms. A request is ok when it has audio and no error."""
    ok = [r for r in records if r.error is None and r.arrivals]
    errors = {}
    for r in records:
        if r not in ok:
            kind = r.error if r.error is not None else "no audio"
            errors[kind] = errors.get(kind, 0) + 1
    ttfa = [1000 * r.arrivals[0][0] for r in ok]
    audio_s = sum(s for r in ok for _, s in r.arrivals) / rate
    lags = [max_lag(r.arrivals, rate) for r in ok]
    return {
        "requests": len(records), "ok": len(ok), "errors": len(records) - len(ok),
        "errors_by_kind": errors,
        "ttfa_p50_ms": percentile(ttfa, 0.5), "ttfa_p95_ms": percentile(ttfa, 0.95),
        "audio_s": audio_s, "wall_s": wall_s,
        "audio_per_s": audio_s / wall_s if wall_s > 0 else None,
        "realtime": sum(1 for lag in lags if lag <= slack_s),
        "max_lag_ms": 1000 * max(lags) if lags else None,
    }


def all_kept_up(summary):
    """Whether every request of a round got audio, without error, and kept up with real time."""
    return summary["errors"] == 0 and summary["realtime"] == summary["requests"] > 0


def fmt(value, digits=0, none="-"):
    """A figure for a table cell: `none` for None, else fixed-point with `digits`."""
    return none if value is None else f"{value:,.{digits}f}"


def gib(n):
    """Bytes as GiB text ('-' for None)."""
    return fmt(None if n is None else n / 2**30, 2)


ROUND_COLUMNS = ["requests", "ok", "errors", "TTFA p50 ms", "TTFA p95 ms", "audio s", "wall s",
                 "audio-s/s", "kept up with real time", "largest lag ms"]


def round_cells(summary):
    """A round's cells, in ROUND_COLUMNS's order."""
    s = summary
    return [str(s["requests"]), str(s["ok"]), str(s["errors"]), fmt(s["ttfa_p50_ms"]),
            fmt(s["ttfa_p95_ms"]), fmt(s["audio_s"], 1), fmt(s["wall_s"], 2),
            fmt(s["audio_per_s"], 1), f"{s['realtime']} of {s['ok']}", fmt(s["max_lag_ms"])]


def markdown_row(cells):
    return "| " + " | ".join(cells) + " |"


def markdown_header(columns):
    return markdown_row(columns) + "\n" + markdown_row(["---"] * len(columns)).replace(" ", "")
