#!/usr/bin/env python3
"""A voice served the way the seeds serve it: its PyTorch model in eager mode behind a small
Python HTTP server (issue 19's side-by-side table), for three families:

  fastspeech2  FastSpeech2 + HiFiGAN from a voxd voice folder (tools/reference's modules,
               bench/pytorch_baseline.py's build), fp32 or fp16;
  sambert      KAN-TTS's own KanTtsSAMBERT and HiFiGAN Generator (bench/sambert_serve_bench.py's
               OriginalSambert) from a ModelScope voice folder (--voice) and a KAN-TTS checkout
               (--kantts), fp32;
  chattts      ChatTTS's infer() as the original runs it (bench/chattts_serve_peer.py's
               OriginalChat: transformers' LlamaModel, refine-text skipped, not split) from a
               voxd ChatTTS voice folder, whose infer_code min_new_token = max_new_token gives
               every sentence that many codes.

One model shared by every request (or --batch copies), and one of three ways:

  --mode threads   one thread per request, each running the whole utterance on the shared model
                   (the seeds' starting point); a model that holds an utterance's state in its
                   modules (KAN-TTS's decoder) runs one utterance at a time under a lock, as
                   ModelScope's pipeline does;
  --mode batch     seed 003's queue: a request waits up to --wait-ms for up to --batch others, and
                   they run as one padded batch (each item's audio cut to its own length);
  --mode pool      --batch copies of the model, each on its own worker thread taking the next
                   request (for a model that infers one utterance at a time: KAN-TTS's inference
                   has no masks for a padded batch).

POST /v1/audio/speech with {"input", "response_format": "pcm"} answers 200 with the utterance as
16-bit PCM in one chunk of a chunked body once it is made (the seeds do not stream), so
bench/stream_load.py measures this server and `voxd serve` alike: its time to first audio is the
whole request's. GET /debug/memory?format=json answers torch.cuda's reserved and peak reserved
bytes in voxd's shape (stats.reserved_bytes, stats.peak_reserved_bytes); GET /debug/batches the
sizes of the batches run so far.

A request's input must be sentences the server knows, joined by spaces (400 otherwise), so that
both servers speak the same symbols: FastSpeech2's are bench/stream_load.py's sentences (or
--texts), their ids from voxd's own front end (`voxd phonemize --json`, once, at start);
Sambert's are bench/sambert_serve_bench.py's seeds_sentences() (KAN-TTS symbol strings, which
voxd reads with input_format kantts_symbols); ChatTTS's are bench/stream_load.py's sentences,
the text itself the prompt.

    /usr/bin/python3 bench/pytorch_server.py --voice voices/en-demo --port 8090 \\
        [--family fastspeech2] [--device cuda] [--dtype f16] [--mode batch --batch 4 --wait-ms 10]
"""
import argparse
import contextlib
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
    """The piece (known[s]) of each known sentence s `text` is made of (joined by spaces), in
    order, the longest match first; ValueError otherwise."""
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


def pcm16(samples):
    """16-bit little-endian PCM bytes of float samples in [-1, 1] (clipped)."""
    return (np.clip(samples, -1.0, 1.0) * 32767.0).round().astype("<i2").tobytes()


class FastSpeech2:
    """A voice's acoustic model and vocoder on a device; synthesize() runs a padded batch of id
    lists."""
    exclusive = False  # safe from several threads at once

    def __init__(self, voice, device, dtype):
        self.config, acoustic, vocoder = pytorch_baseline.build(voice)
        self.device = torch.device(device)
        self.dtype = torch.float16 if dtype == "f16" else torch.float32
        self.acoustic = acoustic.to(self.device, self.dtype)
        self.vocoder = vocoder.to(self.device, self.dtype)
        self.hop = self.config["hop_length"]

    @staticmethod
    def utterance(pieces):
        """One request's model input from its sentences' ids: them one after another."""
        return [i for piece in pieces for i in piece]

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
        audio = self.vocoder(mel)[:, 0].float().cpu().numpy()
        return [pcm16(audio[i, :int(mel_lens[i]) * self.hop]) for i in range(len(utterances))]


class Sambert:
    """KAN-TTS's Sambert-HiFiGAN (sambert_serve_bench.OriginalSambert); its inference takes one
    utterance at a time and keeps its state in the modules."""
    exclusive = True

    def __init__(self, original):
        self.original, self.device = original, original.device

    @staticmethod
    def utterance(pieces):
        """(ling, emotion, speaker) of the sentences one after another."""
        return tuple([x for piece in pieces for x in piece[k]] for k in range(3))

    def synthesize(self, utterances):
        if len(utterances) != 1:
            raise ValueError("KAN-TTS's Sambert infers one utterance at a time")
        return [pcm16(self.original.speak(utterances[0]))]


class ChatTts:
    """ChatTTS's infer() on a batch of texts (chattts_serve_peer.OriginalChat), each sentence
    `tokens` codes."""
    exclusive = False

    def __init__(self, chat, tokens):
        self.chat, self.tokens, self.device = chat, tokens, torch.device(chat.peer.device)

    def utterance(self, pieces):
        """(text, codes): the sentences' text as one prompt, not split, as infer() is called."""
        return " ".join(pieces), len(pieces) * self.tokens

    def synthesize(self, utterances):
        import chattts_serve_peer
        jobs = [chattts_serve_peer.Job(text, tokens, audio=[]) for text, tokens in utterances]
        self.chat.infer(jobs, stream=False)
        for job in jobs:
            if job.record.error:
                raise RuntimeError(job.record.error)
        return [pcm16(np.concatenate(job.audio)) for job in jobs]


class Batcher:
    """Seed 003's queue: a worker thread per model takes a request, waits up to `wait_s` for up
    to `batch` in all, runs them together and hands each its audio."""

    def __init__(self, models, batch, wait_s, sizes):
        self.batch, self.wait_s, self.sizes = batch, wait_s, sizes
        self.requests = queue.Queue()
        for model in models:
            threading.Thread(target=self._work, args=(model,), daemon=True).start()

    def submit(self, utterance):
        done = {"event": threading.Event()}
        self.requests.put((utterance, done))
        done["event"].wait()
        if "error" in done:
            raise done["error"]
        return done["audio"]

    def _work(self, model):
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
                audio = model.synthesize([utterance for utterance, _ in taken])
                for (_, done), pcm in zip(taken, audio):
                    done["audio"] = pcm
            except Exception as e:  # every request of the batch gets the failure
                for _, done in taken:
                    done["error"] = e
            for _, done in taken:
                done["event"].set()


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address, models, known, mode, batch, wait_s):
        super().__init__(address, Handler)
        self.model, self.known, self.sizes = models[0], known, []
        self.lock, self.model_lock = threading.Lock(), threading.Lock()
        self.batcher = None
        if mode == "batch":
            self.batcher = Batcher(models[:1], batch, wait_s, self.sizes)
        elif mode == "pool":
            self.batcher = Batcher(models, 1, 0.0, self.sizes)

    def speak(self, pieces):
        """One request's PCM from its sentences' pieces: on this thread (threads) or through the
        queue."""
        utterance = self.model.utterance(pieces)
        if self.batcher is not None:
            return self.batcher.submit(utterance)
        with self.lock:
            self.sizes.append(1)
        with self.model_lock if self.model.exclusive else contextlib.nullcontext():
            return self.model.synthesize([utterance])[0]


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
            pieces = split_input(str(body.get("input", "")), self.server.known)
        except ValueError as e:
            return self._json(400, {"error": str(e)})
        try:
            pcm = self.server.speak(pieces)
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
    p.add_argument("--voice", required=True, help="the family's voice folder (sambert: a "
                                                  "ModelScope voice, am/ and voc/)")
    p.add_argument("--family", choices=["fastspeech2", "sambert", "chattts"],
                   default="fastspeech2")
    p.add_argument("--voxd", default=os.path.join(ROOT, "build", "src", "cli", "voxd"),
                   help="voxd, for its front end (fastspeech2)")
    p.add_argument("--voxd-library-path", help="LD_LIBRARY_PATH for voxd alone")
    p.add_argument("--kantts", help="a KAN-TTS checkout (sambert)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8090, help="0: any free port (printed)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", choices=["f32", "f16", "bf16"], default="f32",
                   help="fastspeech2: f32 or f16; sambert: f32; chattts: the GPT's")
    p.add_argument("--mode", choices=["threads", "batch", "pool"], default="threads")
    p.add_argument("--batch", type=int, default=4,
                   help="batch: requests in a batch at most; pool: model copies")
    p.add_argument("--wait-ms", type=float, default=10.0,
                   help="batch mode: how long the first request waits for others")
    p.add_argument("--texts", help="fastspeech2: a file of sentences, one a line (default: "
                                   "bench/stream_load.py's)")
    return p


# The ways each family's model can be served: KAN-TTS infers one utterance at a time (no
# padded batch), ChatTTS's infer() takes lists (no copies needed).
MODES = {"fastspeech2": ("threads", "batch", "pool"), "sambert": ("threads", "pool"),
         "chattts": ("threads", "batch")}


def load_models(args, copies):
    """`copies` models of the family and {sentence: its piece of a model input}."""
    if args.mode not in MODES[args.family]:
        raise SystemExit(f"{args.family}: --mode {' or '.join(MODES[args.family])}")
    if args.family == "fastspeech2":
        if args.dtype == "bf16":
            raise SystemExit("fastspeech2: --dtype f32 or f16")
        texts = stream_load.TEXTS
        if args.texts:
            with open(args.texts, encoding="utf-8") as f:
                texts = [line.strip() for line in f if line.strip()]
        known = sentence_ids(args.voxd, args.voice, texts, args.voxd_library_path)
        return [FastSpeech2(args.voice, args.device, args.dtype) for _ in range(copies)], known
    if args.family == "sambert":
        import sambert_serve_bench
        if not args.kantts:
            raise SystemExit("sambert: --kantts, a KAN-TTS checkout, is needed")
        if args.dtype != "f32":
            raise SystemExit("sambert: KAN-TTS's decoder makes its frames in float32: --dtype f32")
        models = [Sambert(sambert_serve_bench.OriginalSambert(args.kantts, args.voice,
                                                              args.device))
                  for _ in range(copies)]
        return models, dict(sambert_serve_bench.seeds_sentences())
    import chattts_serve_peer
    chat, tokens = chattts_serve_peer.original_chat(args.voice, args.dtype, args.device)
    return [ChatTts(chat, tokens)], {text: text for text in stream_load.TEXTS}


def make_server(args):
    models, known = load_models(args, args.batch if args.mode == "pool" else 1)
    return Server((args.host, args.port), models, known, args.mode, args.batch,
                  args.wait_ms / 1000.0)


def main():
    args = parser().parse_args()
    server = make_server(args)
    print(json.dumps({"msg": "listening", "url": f"http://{args.host}:{server.server_port}",
                      "family": args.family, "mode": args.mode, "device": args.device,
                      "dtype": args.dtype}), flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
