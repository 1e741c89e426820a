#!/usr/bin/env python3
"""Sambert-HiFiGAN served: KAN-TTS's own inference code against `voxd serve`, on the same random
weights at KAN-TTS's sambert_16k.yaml and hifigan_v1_16k.yaml sizes, in one run on one GPU
(`scripts/gpu-check.py sambert-serve` runs it on the H200).

1. The bench voice (WORK/modelscope: a ModelScope voice folder, am/ and voc/ with config.yaml and
   checkpoint_1.pth as KAN-TTS writes them, over tests/fixtures/sambert_symbols' made-up phone
   inventory, durations about 5 frames a token; WORK/voice: it converted by
   tools/convert_checkpoint.py --kantts), made once.
2. The workload: REQUESTS utterances of 30 to 80 random tokens (seeded), each as KAN-TTS symbol
   strings (voxd's input) and as the ids KAN-TTS's linguistic unit gives them (the original's
   model input; voxd's symbol parser gives the same ids, tests/fixtures/sambert_symbols).
3. The original: KAN-TTS's KanTtsSAMBERT and Generator imported from a KAN-TTS checkout (--kantts;
   what only its training needs — numba, pytorch_wavelets, distutils — stubbed), loaded from the
   checkpoints, weight norm removed, on CUDA in F32, each utterance as ModelScope's voice runs one
   under its lock: the acoustic model (infer_sambert.py's am_synthesis call), then the vocoder
   over the whole mel. Served one request at a time (one model serves one utterance at a time:
   its decoder keeps the utterance's attention state in the module, which is why ModelScope
   holds a lock), and by THREADS copies of the models on as many threads (the way its users
   scale it: more workers). Time to first audio is the whole utterance's time.
4. voxd: `voxd serve --device cuda` (F16 unless --dtype) on the voice, warmed up by two
   requests in turn and four at once; for C in --clients, C streaming requests at once
   (bench/stream_load.py's client, pcm at 16 kHz; C = 1: five requests in turn, the median
   kept): time to first audio p50/p95, audio-seconds per second of the round, how many streams
   kept up with real time (every chunk before its playback time from the first audio).
Prints a Markdown table; --json writes the figures.

    /usr/bin/python3 bench/sambert_serve_bench.py --voxd build/src/cli/voxd --kantts KAN-TTS \\
        [--work /tmp/sambert-serve-bench] [--requests 24] [--clients 1,16,64,256] [--json OUT]
"""
import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
import types
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tools"))

import stream_load  # noqa: E402

RATE = 16000
HOP = 200
# Model.KanTtsSAMBERT.params of kantts/configs/sambert_16k.yaml (bench/make_sambert_bench_model.py),
# with the dropouts KAN-TTS's constructors read (inference does not use them).
from make_sambert_bench_model import PARAMS as SIZES  # noqa: E402
PARAMS = dict(SIZES, encoder_dropout=0.1, encoder_attention_dropout=0.1, encoder_relu_dropout=0.1,
              predictor_dropout=0.1, decoder_dropout=0.1, decoder_attention_dropout=0.1,
              decoder_relu_dropout=0.1, postnet_dropout=0.1, MAS=False)
# Model.Generator.params of kantts/configs/hifigan_v1_16k.yaml.
GENERATOR = {"in_channels": 80, "out_channels": 1, "channels": 256, "kernel_size": 7,
             "upsample_scales": [10, 5, 2, 2], "upsample_kernal_sizes": [20, 10, 4, 4],
             "resblock_kernel_sizes": [3, 7, 11],
             "resblock_dilations": [[1, 3, 5, 7], [1, 3, 5, 7], [1, 3, 5, 7]], "bias": True,
             "causal": True, "nonlinear_activation": "LeakyReLU",
             "nonlinear_activation_params": {"negative_slope": 0.1}, "use_weight_norm": True}


def make_voice(work):
    """WORK/modelscope and WORK/voice (once)."""
    voice = os.path.join(work, "voice")
    if os.path.isfile(os.path.join(voice, "config.json")):
        return
    import make_test_voices
    folder = os.path.join(work, "modelscope")
    if not os.path.isdir(folder):
        # exp(1.8) - 1: about 5 frames a token, as a trained model gives for Mandarin phones.
        make_test_voices.write_modelscope_voice(folder, PARAMS, GENERATOR, seed=0,
                                                log_duration=1.8)
    make_test_voices.convert_modelscope_voice(folder, voice, name="sambert-bench")


def workload(requests, seed):
    """[(symbols, ids)]: ids = (ling [N][4], emotion [N], speaker [N]) as KAN-TTS numbers them."""
    import kantts_symbols
    import make_test_voices
    lists = kantts_symbols.symbol_lists(make_test_voices.SAMBERT_INVENTORY,
                                        make_test_voices.SAMBERT_UNIT)
    reserved = 3  # "_", "~", "@[MASK]" close each list
    phones = [p[1:] for p in lists["sy"][:-reserved]]
    channels = [lists[c][:-reserved] for c in ("tone", "syllable_flag", "word_segment")]
    emotion = lists["emo_category"].index("emotion_neutral")
    speaker = lists["speaker_category"].index("F7")
    rng = random.Random(seed)
    out = []
    for _ in range(requests):
        n = rng.randint(30, 80)
        ling, tokens = [], []
        for _ in range(n):
            ids = [rng.randrange(len(phones))] + [rng.randrange(len(c)) for c in channels]
            ling.append(ids)
            fields = [phones[ids[0]]] + [c[i] for c, i in zip(channels, ids[1:])]
            tokens.append("{" + "$".join(fields + ["emotion_neutral", "F7"]) + "}")
        out.append((" ".join(tokens), (ling, [emotion] * n, [speaker] * n)))
    return out


def seeds_sentences():
    """[(symbols, ids)]: the sentences of bench/seeds_table.py's Sambert requests (twelve
    utterances of workload() at a fixed seed), the same on the client and the server."""
    return workload(12, seed=19)


def import_kantts(checkout):
    """KanTtsSAMBERT and Generator from a KAN-TTS checkout, its model code as it is; the packages'
    __init__ files (the trainers) are not run, and what only training imports is stubbed."""
    def stub(name, **attributes):
        module = types.ModuleType(name)
        module.__dict__.update(attributes)
        sys.modules[name] = module
        return module

    class LooseVersion:
        def __init__(self, text):
            self.parts = [int(p) for p in text.split("+")[0].split(".")[:3] if p.isdigit()]

        def __ge__(self, other):
            return self.parts >= other.parts

        def __lt__(self, other):
            return self.parts < other.parts

    try:
        import distutils.version  # noqa: F401
    except ImportError:
        stub("distutils")
        stub("distutils.version", LooseVersion=LooseVersion)
    identity = lambda *args, **kwargs: (lambda f: f)  # noqa: E731
    stub("numba", jit=identity, njit=identity, prange=range)
    stub("pytorch_wavelets", DWT1DForward=object)
    for package in ("kantts", "kantts.models", "kantts.utils"):
        stub(package, __path__=[os.path.join(checkout, *package.split("."))])
    stub("kantts.utils.audio_torch", stft=None)
    from kantts.models.hifigan.hifigan import Generator
    from kantts.models.sambert.kantts_sambert import KanTtsSAMBERT
    return KanTtsSAMBERT, Generator


class OriginalSambert:
    """KAN-TTS's acoustic model and vocoder from a ModelScope voice folder (am/ and voc/), on
    `device` in float32 (KAN-TTS's decoder makes its frames in float32), ready to infer.
    speak() is not safe from two threads at once: the decoder keeps an utterance's attention
    state in its modules (ModelScope holds a lock around it)."""

    def __init__(self, kantts, folder, device):
        import torch
        import yaml
        KanTtsSAMBERT, Generator = import_kantts(kantts)
        with open(os.path.join(folder, "am", "config.yaml")) as f:
            am_config = yaml.safe_load(f)
        state = torch.load(os.path.join(folder, "am", "ckpt", "checkpoint_1.pth"),
                           map_location="cpu")
        params = dict(am_config["Model"]["KanTtsSAMBERT"]["params"])
        for name, table in (("sy", "text_encoder.sy_emb"), ("tone", "text_encoder.tone_emb"),
                            ("syllable_flag", "text_encoder.syllable_flag_emb"),
                            ("word_segment", "text_encoder.ws_emb"),
                            ("emotion", "emo_tokenizer"), ("speaker", "spk_tokenizer")):
            params[name] = state["model"][table + ".weight"].shape[0]
        self.device = torch.device(device)
        self.fsnet = KanTtsSAMBERT(params).to(self.device)
        self.fsnet.load_state_dict(state["model"], strict=False)
        self.fsnet.eval()
        self.generator = Generator(**GENERATOR).to(self.device)
        self.generator.load_state_dict(torch.load(
            os.path.join(folder, "voc", "ckpt", "checkpoint_1.pth"),
            map_location="cpu")["model"]["generator"])
        self.generator.remove_weight_norm()
        self.generator.eval()

    def speak(self, ids):
        """The samples (float32 numpy) of one utterance ((ling [N][4], emotion [N], speaker
        [N])) as ModelScope's voice makes it: infer_sambert.py's am_synthesis call, then the
        vocoder over the whole mel."""
        import torch
        ling, emotion, speaker = (torch.tensor([x], device=self.device) for x in ids)
        with torch.no_grad():
            res = self.fsnet(ling, emotion, speaker, torch.tensor([len(ids[0])],
                                                                  device=self.device))
            valid = int(res["LR_length_rounded"][0].item())
            mel = res["postnet_outputs"][0, :valid, :]
            return self.generator(mel.t().unsqueeze(0)).squeeze().float().cpu().numpy()


def run_original(args, requests):
    import torch
    torch.backends.cudnn.benchmark = True
    cuda = args.original_device.startswith("cuda")
    folder = os.path.join(args.work, "modelscope")
    speak = OriginalSambert(args.kantts, folder, args.original_device).speak
    speak(requests[0][1])  # warm-up: cuDNN's plans, the allocator
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    result = {"torch": torch.__version__}
    latencies = []
    samples = 0
    start = time.perf_counter()
    for _, ids in requests:
        t = time.perf_counter()
        samples += speak(ids).size
        latencies.append(time.perf_counter() - t)
    wall = time.perf_counter() - start
    result["serial"] = {"requests": len(requests), "p50_ms": statistics.median(latencies) * 1000,
                        "p95_ms": stream_load.percentile(latencies, 0.95) * 1000,
                        "audio_s": samples / RATE, "audio_s_per_s": samples / RATE / wall}
    result["peak_allocated_gib"] = torch.cuda.max_memory_allocated() / 2**30 if cuda else 0.0
    result["peak_reserved_gib"] = torch.cuda.max_memory_reserved() / 2**30 if cuda else 0.0
    print(f"original, one at a time: {json.dumps(result)}", flush=True)
    # Copies of the models, one a thread.
    speakers = [OriginalSambert(args.kantts, folder, args.original_device).speak
                for _ in range(args.threads)]
    for s in speakers:
        s(requests[0][1])
    counts = [0] * args.threads
    times = []

    def worker(i):
        for k in range(i, len(requests), args.threads):
            t = time.perf_counter()
            counts[i] += speakers[i](requests[k][1]).size
            times.append(time.perf_counter() - t)

    start = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(args.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    result["copies"] = {"copies": args.threads, "p50_ms": statistics.median(times) * 1000,
                        "p95_ms": stream_load.percentile(times, 0.95) * 1000,
                        "audio_s_per_s": sum(counts) / RATE / wall}
    if cuda:
        result["copies"]["peak_reserved_gib"] = torch.cuda.max_memory_reserved() / 2**30
    return result


def kept_up(arrivals, bytes_per_s):
    """Whether every chunk came before its playback time, counted from the first audio."""
    if not arrivals:
        return False
    first, heard = arrivals[0][0], 0
    for at, size in arrivals:
        if at > first + heard / bytes_per_s + 1e-3:
            return False
        heard += size
    return True


async def voxd_round(port, requests, clients, timeout):
    bodies = [json.dumps({"model": "tts-1", "voice": "sambert-bench", "input_format":
                          "kantts_symbols", "input": requests[i % len(requests)][0],
                          "response_format": "pcm", "sample_rate": RATE}).encode()
              for i in range(clients)]
    start = time.perf_counter()
    results = await asyncio.gather(*(stream_load.one_stream("127.0.0.1", port, "/v1/audio/speech",
                                                            body, None, timeout, 0)
                                     for body in bodies), return_exceptions=True)
    wall = time.perf_counter() - start
    ok = [r for r in results if stream_load.error_kind(r) is None]
    ttfa = [r[1] * 1000 for r in ok]
    audio_s = sum(r[3] for r in ok) / 2 / RATE
    return {"clients": clients, "ok": len(ok), "errors": len(results) - len(ok),
            "p50_ttfa_ms": statistics.median(ttfa) if ttfa else None,
            "p95_ttfa_ms": stream_load.percentile(ttfa, 0.95) if ttfa else None,
            "audio_s": audio_s, "audio_s_per_s": audio_s / wall,
            "realtime": sum(1 for r in ok if kept_up(r[4], 2 * RATE))}


def run_voxd(args, requests):
    log = open(os.path.join(args.work, "serve.log"), "w")
    command = [args.voxd, "serve", "--voice", os.path.join(args.work, "voice"), "--device",
               args.voxd_device,
               "--port", "0", "--log-format", "json", "--max-batch", str(args.max_batch),
               "--max-connections", "2048", "--max-queue", "4096"] + args.serve_args.split()
    if args.dtype:
        command += ["--dtype", args.dtype]
    # VOXD_LIBRARY_PATH: the packed voxd's libraries (scripts/gpu-check.py), kept from torch.
    env = dict(os.environ)
    if os.environ.get("VOXD_LIBRARY_PATH"):
        env["LD_LIBRARY_PATH"] = os.environ["VOXD_LIBRARY_PATH"]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log, env=env)
    try:
        port = None
        deadline = time.monotonic() + 120
        while port is None and time.monotonic() < deadline:
            with open(log.name) as f:
                for line in f:
                    if '"listening"' in line:
                        port = int(json.loads(line)["url"].rsplit(":", 1)[1])
            if server.poll() is not None:
                raise SystemExit("voxd serve exited:\n" + open(log.name).read())
            time.sleep(0.1)
        if port is None:
            raise SystemExit("voxd serve did not start:\n" + open(log.name).read())
        rounds = []
        # Warm-up: the steps' plans for one stream and for small batches are made once, on first
        # use.
        for clients in (1, 1, 4):
            asyncio.run(voxd_round(port, requests, clients, args.timeout))
        for clients in args.clients:
            if clients == 1:  # one stream alone: the median of 5 requests in turn
                alone = [asyncio.run(voxd_round(port, requests[k:], 1, args.timeout))
                         for k in range(5)]
                rounds.append(sorted(alone, key=lambda r: r["p50_ttfa_ms"])[2])
                rounds[-1]["ttfa_ms_each"] = [r["p50_ttfa_ms"] for r in alone]
            else:
                rounds.append(asyncio.run(voxd_round(port, requests, clients, args.timeout)))
            print(f"voxd {clients} clients: {json.dumps(rounds[-1])}", flush=True)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/debug/memory?format=json") as r:
            stats = json.loads(r.read())["stats"]
        # "voice 'sambert-bench' loaded (F16 on cuda:0)"
        loaded = [line for line in open(log.name) if "loaded (" in line]
        dtype = loaded[0].split("loaded (")[1].split()[0] if loaded else "?"
        return {"rounds": rounds, "peak_reserved_gib": stats["peak_reserved_bytes"] / 2**30,
                "dtype": dtype}
    finally:
        server.terminate()
        server.wait(timeout=60)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--voxd", required=True, help="the voxd binary")
    parser.add_argument("--kantts", required=True, help="a KAN-TTS checkout")
    parser.add_argument("--work", default="/tmp/sambert-serve-bench")
    parser.add_argument("--requests", type=int, default=24)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--clients", default="1,16,64,256")
    parser.add_argument("--max-batch", type=int, default=256)
    parser.add_argument("--dtype", default=None, help="voxd serve's --dtype (default f16)")
    parser.add_argument("--voxd-device", default="cuda", help="voxd serve's --device")
    parser.add_argument("--original-device", default="cuda", help="torch's device for KAN-TTS")
    parser.add_argument("--serve-args", default="", help="more voxd serve options")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--voxd-only", action="store_true",
                        help="measure voxd serve alone (the original measured in another run)")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    args.clients = [int(c) for c in args.clients.split(",")]
    os.makedirs(args.work, exist_ok=True)
    make_voice(args.work)
    requests = workload(args.requests, args.seed)
    figures = {"requests": args.requests, "serve_args": args.serve_args}
    if not args.voxd_only:
        figures["original"] = run_original(args, requests)
    figures["voxd"] = run_voxd(args, requests)
    print("\n| | first audio p50 / p95 ms | audio-s/s | real-time streams | peak reserved GiB |")
    print("|---|---|---|---|---|")
    if not args.voxd_only:
        o = figures["original"]
        print(f"| KAN-TTS, one request at a time (F32) | {o['serial']['p50_ms']:.0f} / "
              f"{o['serial']['p95_ms']:.0f} | {o['serial']['audio_s_per_s']:.1f} | 1 | "
              f"{o['peak_reserved_gib']:.2f} |")
        print(f"| KAN-TTS, {args.threads} model copies on {args.threads} threads | "
              f"{o['copies']['p50_ms']:.0f} / {o['copies']['p95_ms']:.0f} | "
              f"{o['copies']['audio_s_per_s']:.1f} | - | "
              f"{o['copies'].get('peak_reserved_gib', 0):.2f} |")
    for r in figures["voxd"]["rounds"]:
        print(f"| voxd serve ({figures['voxd']['dtype']}), {r['clients']} at once | "
              f"{r['p50_ttfa_ms']:.0f} / {r['p95_ttfa_ms']:.0f} | {r['audio_s_per_s']:.1f} | "
              f"{r['realtime']} of {r['ok']} ({r['errors']} errors) | "
              f"{figures['voxd']['peak_reserved_gib']:.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=2)


if __name__ == "__main__":
    main()
