#!/usr/bin/env python3
"""PyTorch's best on voxd_gpu_bench's work, on the same GPU: the peer for issue 19's targets.

The same voice files voxd loads (the reference modules of tools/reference, the originals'
forward code, with HiFiGAN's weight norm folded), in half precision on CUDA with
cudnn.benchmark, and the same work as bench/gpu_bench.cpp: B requests of --phonemes random
symbols, every phoneme forced to --frames-per-phoneme frames, the acoustic model, then the
vocoder, the audio copied to the host. Three ways:

  eager     the modules as they are;
  inductor  torch.compile (default mode) of the vocoder and of the acoustic model;
  graphs    torch.compile(mode="reduce-overhead"): inductor plus CUDA graphs.

Each (way, batch) is warmed up (compilation included) and then timed --repeats times with the
host clock around a synchronized region, as voxd_gpu_bench times itself; the median is printed.
"vocoder" is the vocoder alone on the batch's mel (already on the device) up to the audio on the
host; "request" is the acoustic model and the vocoder, the ids already on the device. Prints a
Markdown table and writes --json.

    python3 bench/pytorch_best.py --voice /tmp/voxd-bench-voices/lj-v1 --batches 1,32 \\
        --json pytorch-best.json
"""
import argparse
import json
import os
import statistics
import sys
import time
import traceback

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pytorch_baseline  # noqa: E402  (the voice as reference modules, as the CPU peer loads it)
from reference import fastspeech2  # noqa: E402  (pytorch_baseline put tools/ on the path)


def build(voice_dir, device):
    """The voice's acoustic model and vocoder as reference modules in eval mode, F16 on CUDA
    (F32 on the CPU, where the script is only checked)."""
    config, acoustic, vocoder = pytorch_baseline.build(voice_dir)
    n_symbols = acoustic.encoder.src_word_emb.weight.shape[0]
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    return config, n_symbols, acoustic.to(device, dtype), vocoder.to(device, dtype)


def make_acoustic(model, frames):
    """mel [B, n_mels, frames] from ids [B, L]: every phoneme `frames / L` frames (teacher-forced
    durations; pitch and energy at bin 0), as voxd_gpu_bench forces them."""
    def run(ids, durations, zeros):
        lengths = torch.full((ids.shape[0],), ids.shape[1], device=ids.device)
        mel_lengths = torch.full((ids.shape[0],), frames, device=ids.device)
        _, postnet_mel, *_ = fastspeech2.fastspeech2_teacher_forced(
            model, ids, lengths, ids.shape[1], mel_lengths, frames, durations, zeros, zeros)
        return postnet_mel.transpose(1, 2)
    return run


def timed(function, repeats):
    """Median seconds of `repeats` calls after two warm-up calls (compilation happens there);
    each call ends with its audio on the host, so it is synchronized."""
    for _ in range(2):
        function()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--voice", required=True)
    parser.add_argument("--batches", default="1,32")
    parser.add_argument("--ways", default="eager,inductor,graphs")
    parser.add_argument("--phonemes", type=int, default=120)
    parser.add_argument("--frames-per-phoneme", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--device", default="cuda", help="cpu only checks the script (F32)")
    parser.add_argument("--json")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("pytorch_best: no CUDA device")
    torch.backends.cudnn.benchmark = True
    config, n_symbols, acoustic, vocoder = build(args.voice, device)
    frames = args.phonemes * args.frames_per_phoneme
    sample_rate, hop = config["sample_rate"], config["hop_length"]
    generator = torch.Generator().manual_seed(1234)
    rows = []
    device_name = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    print(f"PyTorch {torch.__version__}, {device_name}, {next(vocoder.parameters()).dtype}, "
          f"{args.phonemes} phonemes x {args.frames_per_phoneme} frames", flush=True)
    print("| way | batch | vocoder ms | vocoder audio-s/s | request ms | request audio-s/s |")
    print("|---|---|---|---|---|---|", flush=True)
    for way in args.ways.split(","):
        if way != "eager":
            torch._dynamo.reset()  # each way compiles afresh
        acoustic_run = make_acoustic(acoustic, frames)
        vocode = vocoder
        if way == "inductor":
            acoustic_run, vocode = torch.compile(acoustic_run), torch.compile(vocoder)
        elif way == "graphs":
            acoustic_run = torch.compile(acoustic_run, mode="reduce-overhead")
            vocode = torch.compile(vocoder, mode="reduce-overhead")
        elif way != "eager":
            sys.exit(f"pytorch_best: unknown way {way!r}; expected eager, inductor or graphs")
        for batch in (int(b) for b in args.batches.split(",")):
            ids = torch.randint(1, n_symbols, (batch, args.phonemes),
                                generator=generator).to(device)
            durations = torch.full((batch, args.phonemes), args.frames_per_phoneme,
                                   dtype=torch.long, device=device)
            zeros = torch.zeros((batch, args.phonemes), device=device)
            row = {"way": way, "batch": batch,
                   "audio_s": batch * frames * hop / sample_rate}
            # CUDA graphs' outputs live in the graphs' memory until the next replay: each call
            # is marked as a new step, so that the acoustic graph's output may feed the vocoder's.
            mark_step = (torch.compiler.cudagraph_mark_step_begin if way == "graphs"
                         else lambda: None)

            def vocoder_only():
                mark_step()
                return vocode(mel).float().cpu()

            def request():
                mark_step()
                return vocode(acoustic_run(ids, durations, zeros)).float().cpu()

            try:
                with torch.no_grad():  # inference_mode tensors trip dynamo's guards
                    mel = make_acoustic(acoustic, frames)(ids, durations, zeros).clone()
                    row["vocoder_s"] = timed(vocoder_only, args.repeats)
                    row["request_s"] = timed(request, args.repeats)
            except Exception as e:  # a way that fails is reported, not fatal to the others
                row["error"] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
                traceback.print_exc()
            rows.append(row)
            if "error" in row:
                print(f"| {way} | {batch} | failed: {row['error']} | | | |", flush=True)
                continue
            print(f"| {way} | {batch} | {row['vocoder_s'] * 1e3:.2f} | "
                  f"{row['audio_s'] / row['vocoder_s']:,.0f} | {row['request_s'] * 1e3:.2f} | "
                  f"{row['audio_s'] / row['request_s']:,.0f} |", flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"torch": torch.__version__, "device": device_name,
                       "phonemes": args.phonemes,
                       "frames_per_phoneme": args.frames_per_phoneme, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
