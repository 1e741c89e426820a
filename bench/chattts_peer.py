"""The peer of bench/chattts_bench.cpp: ChatTTS's audio-code loop the way the original runs it
(ChatTTS/model/gpt.py: transformers' LlamaModel fed inputs_embeds with past_key_values, the four
emb_code lookups summed, the four head_code heads, temperature, the repetition penalty over the
last 16 codes, transformers' TopP/TopK warpers with min_tokens_to_keep 3, torch.multinomial) on
the same random weights (a voice from bench/make_chattts_bench_voice.py), batch 1, and the
Decoder + Vocos (tools/reference/chattts.py's modules, which follow dvae.py and Vocos, with
torch.istft) on the same number of frames. Prints one Markdown row per dtype.

    python3 bench/chattts_peer.py --voice DIR [--steps 300] [--prompt 64] [--frames 1000]

build() and vocode() serve bench/chattts_serve_peer.py too; transformers is imported where the
model is built, so that what runs around it loads where transformers is missing (its tests).
"""
import argparse
import dataclasses
import json
import os
import statistics
import sys
import time

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
from reference import chattts  # noqa: E402
from safetensors_io import load  # noqa: E402


def tensors(path):
    return {k: torch.from_numpy(np.ascontiguousarray(v).astype(np.float32)) for k, v in load(path).items()}


@dataclasses.dataclass
class Peer:
    """The original's modules on `device`: transformers' LlamaModel in the dtype asked for, the
    Embed tables in float32 (ChatTTS keeps Embed in float32 whatever the GPT's dtype), the
    reference Decoder and Vocos in float32, and the infer_code stage's logits warpers."""
    config: dict
    llama: torch.nn.Module
    emb_text: torch.Tensor
    emb_code: list
    head_code: list
    decoder: torch.nn.Module
    vocos: torch.nn.Module
    warpers: list
    device: str


def build(voice, dtype, device="cuda"):
    """The original's model from a voice directory: transformers' LlamaModel in `dtype` and its
    TopP/TopK warpers at the voice's infer_code settings, around assemble()'s modules."""
    from transformers import LlamaConfig, LlamaModel
    from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper
    config = json.load(open(os.path.join(voice, "config.json")))
    g = config["gpt"]
    llama = LlamaModel(LlamaConfig(
        hidden_size=g["hidden_size"], intermediate_size=g["intermediate_size"],
        num_attention_heads=g["num_attention_heads"], num_key_value_heads=g["num_key_value_heads"],
        num_hidden_layers=g["num_hidden_layers"], max_position_embeddings=g["max_position_embeddings"],
        rms_norm_eps=g["rms_norm_eps"], rope_theta=g["rope_theta"], vocab_size=32000))
    llama.load_state_dict(tensors(os.path.join(voice, "gpt.safetensors")), strict=False)
    code = config["infer_code"]
    keep = config["sampling"]["min_tokens_to_keep"]
    warpers = [TopPLogitsWarper(code["top_P"], min_tokens_to_keep=keep),
               TopKLogitsWarper(code["top_K"], min_tokens_to_keep=keep)]
    return assemble(voice, config, llama.to(device, dtype).eval(), warpers, device)


def assemble(voice, config, llama, warpers, device):
    """A Peer of `llama` (called as ChatTTS calls LlamaModel) and `warpers` (called as
    transformers' logits warpers are, (input_ids, scores) -> scores), with the voice's Embed
    tables, Decoder and Vocos on `device`."""
    g = config["gpt"]
    embed = tensors(os.path.join(voice, "embed.safetensors"))
    d = config["decoder"]
    decoder = chattts.DVAE({k: d[k] for k in ("idim", "odim", "hidden", "n_layer", "bn_dim",
                                              "kernel", "dilation")}, d["dim"])
    decoder.load_state_dict(tensors(os.path.join(voice, "decoder.safetensors")), strict=False)
    vocos = chattts.Vocos(config["vocos"])
    vocos.load_state_dict(tensors(os.path.join(voice, "vocos.safetensors")), strict=False)
    return Peer(config, llama, embed["emb_text.weight"].to(device),
                [embed[f"emb_code.{q}.weight"].to(device) for q in range(g["num_vq"])],
                [embed[f"head_code.{q}.weight"].to(device) for q in range(g["num_vq"])],
                decoder.to(device).eval(), vocos.to(device).eval(), warpers, device)


def synchronize(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def penalize(logits, history, penalty=1.05, window=16):
    """ChatTTS's CustomRepetitionPenaltyLogitsProcessorRepeat over each head's last codes."""
    if history.shape[1] == 0:
        return logits
    counts = torch.nn.functional.one_hot(history[:, -window:], logits.shape[1]).sum(1)
    alpha = torch.pow(torch.tensor(penalty, device=logits.device), counts.float())
    return torch.where(logits < 0, logits * alpha, logits / alpha)


@torch.inference_mode()
def decode(peer, prompt, steps, dtype):
    """chattts_bench.cpp's loop: the embeddings and heads cast to the GPT's dtype, the warpers at
    0.7 / 20 as the bench fixes them (the voice's defaults too)."""
    from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper
    llama, device = peer.llama, peer.device
    emb_code = [e.to(dtype) for e in peer.emb_code]
    head_code = [h.to(dtype) for h in peer.head_code]
    num_vq = len(emb_code)
    top_p, top_k = TopPLogitsWarper(0.7, min_tokens_to_keep=3), TopKLogitsWarper(20, min_tokens_to_keep=3)
    ids = (torch.arange(prompt, device=device) % 1000 + 5)
    embeds = sum(torch.nn.functional.embedding(ids % 626, e) for e in emb_code)[None]
    out = llama(inputs_embeds=embeds, use_cache=True)
    past, hidden = out.past_key_values, out.last_hidden_state[:, -1]
    history = torch.zeros((num_vq, 0), dtype=torch.long, device=device)
    hiddens = []
    synchronize(device)
    start = time.perf_counter()
    for step in range(steps):
        logits = torch.stack([hidden @ h.T for h in head_code], 1)[0].float() / 0.3
        logits = penalize(logits, history)
        logits = top_k(None, top_p(None, logits))
        codes = torch.multinomial(torch.softmax(logits, -1), 1)
        codes = torch.clamp(codes, max=624)  # every step runs, as in chattts_bench
        history = torch.cat([history, codes], 1)
        hiddens.append(hidden)
        embeds = sum(torch.nn.functional.embedding(codes[q], emb_code[q]) for q in range(num_vq))[None]
        position = torch.tensor([[prompt + step]], device=device)
        out = llama(inputs_embeds=embeds, past_key_values=past, position_ids=position, use_cache=True)
        past, hidden = out.past_key_values, out.last_hidden_state[:, -1]
    synchronize(device)
    return time.perf_counter() - start, torch.stack(hiddens, 1)


@torch.inference_mode()
def vocode(peer, hidden):
    """The Decoder and Vocos on hidden states [B, T, hidden]: audio [B, hop·(2T - 1)], on the
    device, finished (synchronized)."""
    config = peer.config
    mel = peer.decoder(hidden.float().transpose(1, 2))
    x = peer.vocos.backbone(mel)
    log_mag, phase = peer.vocos.head.log_mag_phase(x)
    mag = torch.clip(torch.exp(log_mag), max=1e2)
    spec = torch.complex(mag * torch.cos(phase), mag * torch.sin(phase))
    window = peer.vocos.head.istft.window
    audio = torch.istft(spec, config["vocos"]["n_fft"], config["vocos"]["hop_length"],
                        config["vocos"]["n_fft"], window, center=True)
    synchronize(peer.device)
    return audio


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--voice", required=True)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--frames", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    print("| peer | dtype | prompt | decode steps/s (batch 1) | min..max | Decoder+Vocos | RTF |")
    print("|---|---|---|---|---|---|---|")
    for name, dtype in (("f32", torch.float32), ("f16", torch.float16)):
        peer = build(args.voice, dtype)
        decode(peer, args.prompt, 8, dtype)
        rates, hidden = [], None
        for _ in range(args.runs):
            seconds, hidden = decode(peer, args.prompt, args.steps, dtype)
            rates.append(args.steps / seconds)
        states = hidden[:, : args.frames // 2]
        vocode(peer, states)
        times = []
        for _ in range(args.runs):
            start = time.perf_counter()
            audio = vocode(peer, states)
            times.append(time.perf_counter() - start)
        audio_s = audio.shape[-1] / 24000
        t = statistics.median(times)
        print(f"| transformers LlamaModel + reference Decoder/Vocos | {name} | {args.prompt} | "
              f"{statistics.median(rates):.1f} | {min(rates):.1f}..{max(rates):.1f} | "
              f"{1e3 * t:.2f} ms for {audio_s:.2f} s | {t / audio_s:.5f} |")


if __name__ == "__main__":
    main()
