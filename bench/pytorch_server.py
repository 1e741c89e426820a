#!/usr/bin/env python3
"""FastSpeech2 + HiFiGAN served the way the seeds serve them: PyTorch eager behind a small Python
HTTP server (issue 19's side-by-side table).

The same weights voxd loads (a voice folder: tools/reference's modules, bench/pytorch_baseline.py's
build), fp32 or fp16 on --device, one model shared by every request, and one of two ways:

  --mode threads   one thread per request, each running the whole utterance on the shared model
                   (the seeds' starting point);
  --mode batch     seed 003's queue: a request waits up to --wait-ms for up to --batch others, and
                   they run as one padded batch (the acoustic model over the padded ids, the
                   vocoder over the padded mels, each item's audio cut to its own frames).

POST /v1/audio/speech with {"input", "response_format": "pcm"} answers 200 with the utterance as
16-bit PCM in one chunk of a chunked body once it is made (the seeds do not stream), so
bench/stream_load.py measures this server and `voxd serve` alike: its time to first audio is the
whole request's. GET /debug/memory?format=json answers torch.cuda's reserved and peak reserved
bytes in voxd's shape (stats.reserved_bytes, stats.peak_reserved_bytes); GET /debug/batches the
sizes of the batches run so far.

Text goes through voxd's own front end once, at start: `voxd phonemize --json` of each of --texts
(bench/stream_load.py's sentences by default) gives its ids; a request's input must be such texts
joined by spaces (400 otherwise), so both servers speak the same symbols.

    /usr/bin/python3 bench/pytorch_server.py --voice voices/en-demo --port 8090 \\
        [--device cuda] [--dtype f16] [--mode batch --batch 4 --wait-ms 10]
"""
import argparse
import http.server
import json
import os
import queue
import subprocess
import sys
import threading
import time

import numpy as np
import torch

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
sys.path.insert(0, BENCH)

import pytorch_baseline  # noqa: E402
import stream_load  # noqa: E402


def sentence_ids(voxd, voice, texts, library_path=None):
    """{text: ids} for each of `texts` as given, from `voxd phonemize --json` of it alone (all
    its sentences' ids; LD_LIBRARY_PATH `library_path` for voxd alone, when given: a packed
    voxd's libraries are not torch's)."""
    env = dict(os.environ)
    if library_path:
        env["LD_LIBRARY_PATH"] = library_path
    known = {}
    for text in texts:
        run = subprocess.run([voxd, "phonemize", "--voice", voice, "--json", "--text", text],
                             check=True, capture_output=True, text=True, env=env)
        known[text] = [i for s in json.loads(run.stdout)["sentences"] for i in s["ids"]]
    return known


def split_input(text, known):
    """The ids of each known text `text` is made of (joined by spaces), in order, the longest
    match first; ValueError otherwise."""
    out, rest = [], text.strip()
    longest_first = sorted(known, key=len, reverse=True)
    while rest:
        match = next((s for s in longest_first if rest.startswith(s)), None)
        if match is None:
            raise ValueError(f"input is not made of the server's sentences: {rest[:60]!r}")
        out.append(known[match])
        rest = rest[len(match):].lstrip()
    if not out:
        raise ValueError("input is empty")
    return out


class Model:
    """The voice's acoustic model and vocoder on a device; synthesize() runs a padded batch."""

    def __init__(self, voice, device, dtype):
        self.config, acoustic, vocoder = pytorch_baseline.build(voice)
        self.device = torch.device(device)
        self.dtype = torch.float16 if dtype == "f16" else torch.float32
        self.acoustic = acoustic.to(self.device, self.dtype)
        self.vocoder = vocoder.to(self.device, self.dtype)
        self.hop = self.config["hop_length"]

    @torch.no_grad()
    def synthesize(self, utterances):
        """16-bit PCM bytes for each id list of `utterances`, run as one padded batch."""
        lengths = [len(ids) for ids in utterances]
        width = max(lengths)
        ids = torch.zeros(len(utterances), width, dtype=torch.long)
        for row, item in enumerate(utterances):
            ids[row, :len(item)] = torch.tensor(item)
        ids = ids.to(self.device)
        lens = torch.tensor(lengths, device=self.device)
        speakers = torch.zeros(len(utterances), dtype=torch.long, device=self.device)
        out = self.acoustic(speakers, ids, lens, width)
        mel, mel_lens = out[1].transpose(1, 2), out[9]
        audio = self.vocoder(mel)[:, 0].float().clamp(-1.0, 1.0)
        pcm = (audio * 32767.0).round().to(torch.int16).cpu().numpy()
        return [pcm[i, :int(mel_lens[i]) * self.hop].tobytes() for i in range(len(utterances))]


class Batcher:
    """Seed 003's queue: one worker thread takes a request, waits up to `wait_s` for up to
    `batch` in all, runs them together and hands each its audio."""

    def __init__(self, model, batch, wait_s, sizes):
        self.model, self.batch, self.wait_s, self.sizes = model, batch, wait_s, sizes
        self.requests = queue.Queue()
        threading.Thread(target=self._work, daemon=True).start()

    def submit(self, ids):
        done = {"event": threading.Event()}
        self.requests.put((ids, done))
        done["event"].wait()
        if "error" in done:
            raise done["error"]
        return done["audio"]

    def _work(self):
        while True:
            taken = [self.requests.get()]
            deadline = time.monotonic() + self.wait_s
            try:
                while len(taken) < self.batch:
                    taken.append(self.requests.get(timeout=max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                pass
            self.sizes.append(len(taken))
            try:
                audio = self.model.synthesize([ids for ids, _ in taken])
                for (_, done), pcm in zip(taken, audio):
                    done["audio"] = pcm
            except Exception as e:  # every request of the batch gets the failure
                for _, done in taken:
                    done["error"] = e
            for _, done in taken:
                done["event"].set()


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address, model, known, mode, batch, wait_s):
        super().__init__(address, Handler)
        self.model, self.known, self.sizes = model, known, []
        self.lock = threading.Lock()
        self.batcher = Batcher(model, batch, wait_s, self.sizes) if mode == "batch" else None

    def speak(self, sentences):
        """One request's PCM: its sentences one after another (threads) or through the queue."""
        ids = [i for sentence in sentences for i in sentence]
        if self.batcher is not None:
            return self.batcher.submit(ids)
        with self.lock:
            self.sizes.append(1)
        return self.model.synthesize([ids])[0]


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _json(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path.startswith("/debug/memory"):
            cuda = self.server.model.device.type == "cuda"  # no allocator figures on the CPU
            self._json(200, {"stats": {
                "reserved_bytes": torch.cuda.memory_reserved() if cuda else None,
                "peak_reserved_bytes": torch.cuda.max_memory_reserved() if cuda else None}})
        elif self.path == "/debug/batches":
            self._json(200, {"sizes": list(self.server.sizes)})
        else:
            self._json(404, {"error": "not found"})

    def do_POST(self):
        if self.path != "/v1/audio/speech":
            return self._json(404, {"error": "not found"})
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            if not isinstance(body, dict):
                raise ValueError("the body must be a JSON object")
            if body.get("response_format", "pcm") != "pcm":
                raise ValueError("only response_format pcm")
            sentences = split_input(str(body.get("input", "")), self.server.known)
        except ValueError as e:
            return self._json(400, {"error": str(e)})
        try:
            pcm = self.server.speak(sentences)
        except Exception as e:  # e.g. CUDA out of memory: the seeds answer 500
            error = f"{type(e).__name__}: {e}"
            print(json.dumps({"msg": "request failed", "error": error}), file=sys.stderr,
                  flush=True)
            return self._json(500, {"error": error})
        self.send_response(200)
        self.send_header("Content-Type", "audio/pcm")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.write(f"{len(pcm):x}\r\n".encode() + pcm + b"\r\n0\r\n\r\n")


def parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--voice", required=True, help="a FastSpeech2 + HiFiGAN voice folder")
    p.add_argument("--voxd", default=os.path.join(ROOT, "build", "src", "cli", "voxd"),
                   help="voxd, for its front end")
    p.add_argument("--voxd-library-path", help="LD_LIBRARY_PATH for voxd alone")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8090, help="0: any free port (printed)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", choices=["f32", "f16"], default="f32")
    p.add_argument("--mode", choices=["threads", "batch"], default="threads")
    p.add_argument("--batch", type=int, default=4, help="batch mode: requests in a batch at most")
    p.add_argument("--wait-ms", type=float, default=10.0,
                   help="batch mode: how long the first request waits for others")
    p.add_argument("--texts", help="a file of sentences, one a line (default: "
                                   "bench/stream_load.py's)")
    return p


def make_server(args):
    texts = stream_load.TEXTS
    if args.texts:
        with open(args.texts, encoding="utf-8") as f:
            texts = [line.strip() for line in f if line.strip()]
    known = sentence_ids(args.voxd, args.voice, texts, args.voxd_library_path)
    model = Model(args.voice, args.device, args.dtype)
    return Server((args.host, args.port), model, known, args.mode, args.batch,
                  args.wait_ms / 1000.0)


def main():
    args = parser().parse_args()
    server = make_server(args)
    print(json.dumps({"msg": "listening", "url": f"http://{args.host}:{server.server_port}",
                      "mode": args.mode, "device": args.device, "dtype": args.dtype}), flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
