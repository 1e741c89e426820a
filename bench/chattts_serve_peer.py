"""The original ChatTTS served the ways its users serve it, on the benchmark's random weights:
the peer of `voxd serve` in scripts/gpu-check.py's chattts-serve mode.

The model is bench/chattts_peer.py's (transformers' LlamaModel fed embeddings, the Embed tables
in float32, ChatTTS's repetition penalty and transformers' TopP/TopK warpers, the reference
Decoder and Vocos) on a voice from bench/make_chattts_bench_voice.py whose infer_code has
min_new_token = max_new_token = L (scripts/gpu-check.py derives it). Around it, `OriginalChat`
does what the original's `Chat.infer(texts, skip_refine_text=True, split_text=False,
stream=...)` does (ChatTTS/core.py _infer and _infer_code, model/gpt.py generate):
  * each text in the code prompt '[Stts][empty_spk][speed_5]{text}[Ptts]' (no speaker given),
    tokenized by the voice's WordPiece tokenizer (tokenizers, which BertTokenizerFast wraps),
    left-padded into one batch with an attention mask; position ids from the mask's cumulative
    sum; the prompt embedded by emb_text; LlamaModel with past_key_values and the mask grown by
    one each step;
  * each step: the four code heads on the last hidden state (float32), / temperature, the
    repetition penalty over each row's last 16 codes, the warpers, softmax, torch.multinomial;
    the four codes' embeddings summed for the next step; a row that has finished keeps being
    computed until every row has (finish flags), as the original's batch does;
  * the end token: masked at every step (min_new_token = L covers every length), and each row
    draws it at the step equal to its length, n·L codes for a request of n sentences, so its
    hidden states are those of its n·L codes (the original stops a row at its end token and
    keeps the states before it);
  * the Decoder and Vocos on the batch's hidden states zero-padded to the longest, moved to the
    host (.cpu(), as the original returns numpy); row r's audio is its first hop·(2·n_r - 1)
    samples, what its frames alone make;
  * stream=True as the original streams: a result every 24 steps (stream_batch) in which any row
    was unfinished, the first two passed (pass_first_n_batches), each later one decoding all the
    hidden states so far and sending at most 12,000 new samples (stream_speed), and after the
    last result the rest.
skip_refine_text=True (as many users call it; voxd's requests send refine_text false): the
bench voice's refine-text vocabulary is a small one, so that stage would measure nothing of the
release. split_text=False: the default (True) would split a multi-sentence text, generate its
first sentence alone and sample a speaker from that audio through the DVAE encoder, which the
reference lacks; skipping it leaves the original less work.

Three ways, each under N requests sent at once (time 0):
  sequential  one request at a time, in order (a queue with one worker);
  batched     infer() on lists: the queue taken B requests at a time, padded together;
  threads     one thread per request, all calling infer() on the one model.
For each: TTFA (non-streaming, the audio comes when infer() returns), audio-s/s, torch.cuda's
peak and steady (after the round) reserved and allocated memory, each way from an emptied cache.
Then stream=True rounds that step N up (sequential: one stream, the most it serves at once;
batched: all N in one list, the best case for that way) until a stream falls behind real time or
fails (the batched way, with --past-real-time, on through its steps for its best throughput):
the most real-time streams (a lower bound when every round kept up; most_realtime_exact
false in the JSON). Then --random requests of random length (bench/serve_workload.py's, the
first of the 1,000 voxd gets) through the batched way, with the reserved memory before and
after. Prints Markdown rows and, with --json, writes them (after each part) for
scripts/gpu-check.py.

Needs torch, transformers and tokenizers (the GPU machine has them; Debian's python3 here lacks
the last two: tests/tools/test_chattts_serve_bench.py runs OriginalChat around a stand-in for
LlamaModel). On the CPU with the tiny fixture voice, where transformers is installed:
--device cpu --voice tests/fixtures/voices/tiny-chattts --tokens 16.

    python3 bench/chattts_serve_peer.py --voice DIR [--device cuda] [--dtype f32] \\
        [--sentences 3] [--sequential 4] [--batched 32 --batch 8] [--threads 8] \\
        [--search-batched 1,2,4,8,16,32,64] [--past-real-time] [--search-threads 1,2,4,8] \\
        [--random 32] [--deadline 210] [--json OUT]
"""
import argparse
import dataclasses
import json
import os
import sys
import threading
import time

import torch

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
import chattts_peer  # noqa: E402
import serve_workload as workload  # noqa: E402

STREAM_BATCH = 24     # InferCodeParams.stream_batch
PASS_FIRST = 2        # InferCodeParams.pass_first_n_batches
STREAM_SPEED = 12000  # InferCodeParams.stream_speed: most new samples a stream result sends

WAYS = {"sequential": "one request at a time", "batched": "infer() on lists of B",
        "threads": "one thread per request"}


@dataclasses.dataclass
class Job:
    """A request in the service: its text, the codes it makes, when it was sent (perf_counter)
    and what it got; `audio`, when a list, also gets the samples of each arrival (float32)."""
    text: str
    tokens: int
    sent: float = 0.0
    record: workload.Record = dataclasses.field(default_factory=workload.Record)
    audio: list | None = None


def jobs_of(requests, tokens_per_sentence):
    return [Job(r.text, r.sentences * tokens_per_sentence) for r in requests]


class OriginalChat:
    """Chat.infer(texts, skip_refine_text=True, split_text=False, stream=...) on one Peer;
    `encode` turns a prompt's text into token ids. Safe to call from several threads at once."""

    def __init__(self, peer, encode):
        self.peer, self.encode = peer, encode
        config = peer.config
        code = config["infer_code"]
        self.template = (config["prompts"]["infer_code_without_speaker"]
                         .replace("{txt_smp}", "").replace("{prompt}", code["prompt"]))
        self.temperature, self.penalty, self.eos = (code["temperature"],
                                                    code["repetition_penalty"], code["eos"])
        self.window = config["sampling"]["repetition_window"]
        self.hop = config["vocos"]["hop_length"]
        self.dtype = next(peer.llama.parameters()).dtype

    def infer(self, jobs, stream):
        """Makes the jobs' audio as one batch, each arrival into its record; a failure (CUDA out
        of memory) becomes every job's error."""
        try:
            self._infer(jobs, stream)
        except RuntimeError as e:
            for job in jobs:
                job.record.error = f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"

    def prompts(self, jobs):
        """Left-padded prompt ids [B, T] and their mask, as the original's tokenizer.encode."""
        rows = [self.encode(self.template.replace("{text}", job.text)) for job in jobs]
        width = max(len(row) for row in rows)
        ids = torch.zeros(len(rows), width, dtype=torch.long)
        mask = torch.zeros(len(rows), width, dtype=torch.bool)
        for r, row in enumerate(rows):
            ids[r, width - len(row):] = torch.tensor(row, dtype=torch.long)
            mask[r, width - len(row):] = True
        return ids.to(self.peer.device), mask.to(self.peer.device)

    @torch.inference_mode()
    def _infer(self, jobs, stream):
        peer, device = self.peer, self.peer.device
        ids, mask = self.prompts(jobs)
        rows, width = ids.shape
        lengths = torch.tensor([job.tokens for job in jobs], device=device)
        longest = max(job.tokens for job in jobs)
        attention = torch.ones(rows, width + longest + 1, dtype=torch.long, device=device)
        attention[:, :width] = mask
        position = mask.long().cumsum(-1) - 1
        position.masked_fill_(~mask, 1)
        embeds = torch.nn.functional.embedding(ids, peer.emb_text).to(self.dtype)
        out = peer.llama(inputs_embeds=embeds, attention_mask=attention[:, :width],
                         position_ids=position, use_cache=True)
        position = position[:, -1:]
        num_vq = len(peer.emb_code)
        history = torch.zeros((rows * num_vq, 0), dtype=torch.long, device=device)
        finish = torch.zeros(rows, dtype=torch.bool, device=device)
        end = torch.zeros(rows, dtype=torch.long, device=device)
        hiddens, stream_iter, sent, results = [], 0, 0, 0
        for step in range(longest + 1):
            hidden = out.last_hidden_state[:, -1].float()
            hiddens.append(hidden)
            logits = torch.stack([hidden @ h.T for h in peer.head_code], 1)
            logits = logits.reshape(rows * num_vq, -1)
            logits = chattts_peer.penalize(logits / self.temperature, history, self.penalty,
                                           self.window)
            for warp in peer.warpers:
                logits = warp(None, logits)
            logits[:, self.eos] = float("-inf")
            codes = torch.multinomial(torch.softmax(logits, -1), 1)
            history = torch.cat([history, codes], 1)
            finish |= lengths == step
            not_finished = ~finish
            end += not_finished
            stream_iter += int(not_finished.any())
            if stream and stream_iter > 0 and stream_iter % STREAM_BATCH == 0:
                sent, results = self.stream_result(jobs, hiddens, end, sent, results)
            if finish.all():
                break
            codes = codes.view(rows, num_vq)
            embeds = sum(torch.nn.functional.embedding(codes[:, q], peer.emb_code[q])
                         for q in range(num_vq))[:, None].to(self.dtype)
            position = position + 1
            out = peer.llama(inputs_embeds=embeds, attention_mask=attention[:, :width + step + 1],
                             position_ids=position, past_key_values=out.past_key_values,
                             use_cache=True)
        if stream:
            self.stream_result(jobs, hiddens, end, sent, results, last=True)
        else:
            self.deliver(jobs, self.audio(hiddens, end), end, 0, None)

    def audio(self, hiddens, end):
        """The Decoder and Vocos on each row's hidden states so far, zero-padded, on the host."""
        longest = int(end.max())
        states = torch.stack(hiddens, 1)[:, :longest]
        keep = torch.arange(longest, device=states.device)[None, :] < end[:, None]
        return chattts_peer.vocode(self.peer, states * keep[..., None]).cpu().numpy()

    def stream_result(self, jobs, hiddens, end, sent, results, last=False):
        """One of generate()'s stream results as _infer sends it; `last` also sends the rest.
        Returns the samples sent so far and the results counted."""
        wav = self.audio(hiddens, end)
        results += 1
        if results > PASS_FIRST:
            stop = min(sent + STREAM_SPEED, wav.shape[1])
            self.deliver(jobs, wav, end, sent, stop)
            sent = stop
        if last:
            self.deliver(jobs, wav, end, sent, None)
        return sent, results

    def deliver(self, jobs, wav, end, start, stop):
        """Samples [start, stop) of the batch's audio (stop None: to its end) reach each job now:
        those of them within the job's own audio."""
        now = time.perf_counter()
        stop = wav.shape[1] if stop is None else stop
        for row, (job, frames) in enumerate(zip(jobs, end.tolist())):
            own = self.hop * (2 * frames - 1) if frames > 0 else 0
            samples = max(0, min(stop, own) - start)
            if samples > 0:
                job.record.arrivals.append((now - job.sent, samples))
                if job.audio is not None:
                    job.audio.append(wav[row, start:start + samples])


def serve(chat, way, jobs, stream, batch=1):
    """Sends every job at once and serves them `way`; returns the wall seconds until the last."""
    start = time.perf_counter()
    for job in jobs:
        job.sent = start
    if way == "sequential":
        for job in jobs:
            chat.infer([job], stream)
    elif way == "batched":
        for k in range(0, len(jobs), batch):
            chat.infer(jobs[k:k + batch], stream)
    elif way == "threads":
        threads = [threading.Thread(target=chat.infer, args=([job], stream)) for job in jobs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    else:
        raise ValueError(f"unknown way {way!r}")
    return time.perf_counter() - start


def memory(device):
    """torch.cuda's allocator: peaks since the last reset and the amounts now (None on the CPU)."""
    if not device.startswith("cuda"):
        return None
    torch.cuda.synchronize()
    return {"peak_reserved": torch.cuda.max_memory_reserved(),
            "peak_allocated": torch.cuda.max_memory_allocated(),
            "reserved": torch.cuda.memory_reserved(), "allocated": torch.cuda.memory_allocated()}


def fresh_memory(device):
    """Each way from an emptied cache, its peaks counted from there."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def summarize(jobs, wall, slack):
    return workload.summarize([job.record for job in jobs], wall, workload.RATE, slack)


def search(chat, way, steps, requests_of, deadline, slack, rows, label, past_real_time=False):
    """stream=True rounds of n requests for n in `steps` (batched: all n in one list) until one
    falls behind or fails; with `past_real_time`, on through the steps after one falls behind
    (the way's throughput still grows with the list), until one fails. Returns (the most real-time
    streams, None if no round ran; whether that is the most, a round having fallen behind after
    it; the rounds)."""
    most, fell_behind, rounds = None, False, []
    for n in steps:
        if time.monotonic() > deadline:
            rows.append(f"| {label} | stream, {n} at once | not run: past the deadline |")
            break
        jobs = requests_of(n)
        wall = serve(chat, way, jobs, True, batch=n)
        summary = summarize(jobs, wall, slack)
        rounds.append({"concurrency": n, "summary": summary})
        rows.append(row(label, f"stream, {n} at once", summary, None))
        if not fell_behind and not workload.all_kept_up(summary):
            fell_behind, most = True, most or 0
        elif not fell_behind:
            most = n
        if fell_behind and (not past_real_time or summary["errors"]):
            break  # a failing round (out of memory, say) only fails larger lists too
    return most, fell_behind, rounds


def row(label, round_label, summary, mem):
    cells = [label, round_label] + workload.round_cells(summary)
    if mem is not None:
        cells += [f"{workload.gib(mem['peak_reserved'])} / {workload.gib(mem['peak_allocated'])}",
                  f"{workload.gib(mem['reserved'])} / {workload.gib(mem['allocated'])}"]
    else:
        cells += ["-", "-"]
    return workload.markdown_row(cells)


def run(chat, args, deadline, print_row=print, save=lambda result: None):
    """Every part of the benchmark that time allows; returns the JSON-ready result, given to
    `save` after each part too (so that a run cut short leaves what it measured)."""
    device = chat.peer.device
    tokens = args.tokens

    def fixed(n):
        return jobs_of(workload.fixed_requests(n, args.sentences), tokens)

    serve(chat, "sequential", jobs_of(workload.fixed_requests(1, 1), tokens), False)  # warm-up
    result = {"ways": {}, "random": None}
    for way, count, steps in (("sequential", args.sequential, [1]),
                              ("batched", args.batched, args.search_batched),
                              ("threads", args.threads, args.search_threads)):
        label = WAYS[way].replace("B", str(args.batch)) if way == "batched" else WAYS[way]
        entry = {"label": label, "main": None, "search": [], "most_realtime": None,
                 "most_realtime_exact": False}
        result["ways"][way] = entry
        if time.monotonic() > deadline:
            print_row(f"| {label} | {count} at once | not run: past the deadline |")
            continue
        fresh_memory(device)
        jobs = fixed(count)
        wall = serve(chat, way, jobs, False, batch=args.batch)
        summary, mem = summarize(jobs, wall, args.slack), memory(device)
        entry["main"] = {"concurrency": count, "summary": summary, "memory": mem}
        print_row(row(label, f"{count} at once", summary, mem))
        rows = []
        entry["most_realtime"], entry["most_realtime_exact"], entry["search"] = search(
            chat, way, steps, fixed, deadline, args.slack, rows, label,
            past_real_time=args.past_real_time and way == "batched")
        # One request at a time serves one stream at once, however many are queued.
        entry["most_realtime_exact"] |= way == "sequential" and entry["most_realtime"] == 1
        for line in rows:
            print_row(line)
        save(result)
    if args.random and time.monotonic() <= deadline:
        before = memory(device)
        jobs = jobs_of(workload.random_requests(args.random, args.seed,
                                                *workload.parse_range(args.random_sentences)),
                       tokens)
        wall = serve(chat, "batched", jobs, False, batch=args.batch)
        summary, after = summarize(jobs, wall, args.slack), memory(device)
        result["random"] = {"requests": args.random, "summary": summary,
                            "before": before, "after": after}
        label = WAYS["batched"].replace("B", str(args.batch))
        print_row(row(label, f"{args.random} of random length", summary, after))
        if before is not None:
            print_row(f"  random-length requests: reserved {workload.gib(before['reserved'])} GiB "
                      f"before, {workload.gib(after['reserved'])} GiB after")
        save(result)
    elif args.random:
        print_row(f"| random length | {args.random} requests | not run: past the deadline |")
    return result


HEADER = workload.markdown_header(
    ["original ChatTTS", "round"] + workload.ROUND_COLUMNS
    + ["peak reserved / allocated GiB", "steady reserved / allocated GiB"])


def steps_list(text):
    return [int(x) for x in text.split(",") if x.strip()]


def parser():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--voice", required=True, help="a bench voice whose infer_code has "
                   "min_new_token = max_new_token (the codes a sentence makes)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="f32", choices=["f32", "f16", "bf16"],
                   help="the LlamaModel's dtype (default f32, the original's)")
    p.add_argument("--tokens", type=int, default=None,
                   help="codes per sentence (default: the voice's infer_code.max_new_token)")
    p.add_argument("--sentences", type=int, default=3, help="sentences per request of a round")
    p.add_argument("--sequential", type=int, default=4, help="requests at once, sequential way")
    p.add_argument("--batched", type=int, default=32, help="requests at once, batched way")
    p.add_argument("--batch", type=int, default=8, help="texts per infer() list (B)")
    p.add_argument("--threads", type=int, default=8, help="requests (threads) at once")
    p.add_argument("--search-batched", type=steps_list, default=[1, 2, 4, 8, 16, 32, 64])
    p.add_argument("--search-threads", type=steps_list, default=[1, 2, 4, 8])
    p.add_argument("--past-real-time", action="store_true",
                   help="the batched search goes on through its steps after a round falls "
                        "behind, for the way's best throughput (the most real-time streams are "
                        "still those before the first round that fell behind)")
    p.add_argument("--random", type=int, default=32, help="random-length requests (0: none)")
    p.add_argument("--random-sentences", default="1-4")
    p.add_argument("--seed", type=int, default=1, help="of the random lengths and of torch")
    p.add_argument("--slack", type=float, default=0.0,
                   help="seconds a chunk may come after its playback time and still keep up")
    p.add_argument("--deadline", type=float, default=210.0,
                   help="seconds after which no further round starts")
    p.add_argument("--json", help="write the results here")
    return p


def original_chat(voice, dtype, device):
    """(OriginalChat on the voice, in `dtype` (f32, f16, bf16) on `device`, its WordPiece
    tokenizer from the voice's file; the codes a sentence makes: infer_code's max_new_token)."""
    import tokenizers
    config = json.load(open(os.path.join(voice, "config.json")))
    tokenizer = tokenizers.Tokenizer.from_file(os.path.join(voice, config["tokenizer"]["file"]))
    torch_dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[dtype]
    chat = OriginalChat(chattts_peer.build(voice, torch_dtype, device),
                        lambda text: tokenizer.encode(text, add_special_tokens=False).ids)
    code = config["infer_code"]
    if code["min_new_token"] != code["max_new_token"]:
        print(f"note: the voice's infer_code min_new_token {code['min_new_token']} != "
              f"max_new_token {code['max_new_token']}: voxd's sentences may end early")
    return chat, code["max_new_token"]


def main():
    args = parser().parse_args()
    start = time.monotonic()
    torch.manual_seed(args.seed)
    import transformers
    chat, tokens = original_chat(args.voice, args.dtype, args.device)
    args.tokens = args.tokens or tokens
    device_name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {device_name}, "
          f"LlamaModel {args.dtype}, {args.tokens} codes a sentence, {args.sentences} sentences "
          f"a request ({args.sentences * args.tokens * 2 * chat.hop / workload.RATE:.2f} s of "
          f"audio), built in {time.monotonic() - start:.1f} s", flush=True)
    print(HEADER, flush=True)
    meta = {"device": device_name, "torch": torch.__version__,
            "transformers": transformers.__version__, "dtype": args.dtype,
            "tokens_per_sentence": args.tokens, "sentences": args.sentences, "batch": args.batch}

    def save(result):
        if args.json:
            with open(args.json, "w") as f:
                json.dump({**meta, **result}, f, indent=1)
    run(chat, args, start + args.deadline, lambda line: print(line, flush=True), save)


if __name__ == "__main__":
    main()
