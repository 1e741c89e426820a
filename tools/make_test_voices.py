#!/usr/bin/env python3
"""Regenerates the small test voices in tests/fixtures/voices/ (deterministic for one torch).

Each voice is made the way a user makes one: tiny randomly initialised (seeded) FastSpeech2 and
HiFi-GAN reference models (tools/reference/, the originals' module trees and state-dict names)
are saved in the originals' checkpoint formats with ming024-style YAML/JSON configs, and
tools/convert_checkpoint.py converts them. The voices produce noise, not speech; tests use them
for lengths and plumbing.

  tiny-arpabet  ming024's symbol table (arpabet), phoneme-level pitch/energy, single speaker,
                hidden 32, HiFi-GAN V1 shape with upsample_initial_channel 32, 22050 Hz, hop 256
  tiny-ipa      phonemes espeak-ipa, symbols data/symbols/espeak-ipa-en.txt, shares
                tiny-arpabet's vocoder.safetensors through --vocoder-weights
  tiny-chattts  a ChatTTS voice: a random asset/ folder in the layout 2noise/ChatTTS releases
                (gpt/config.json + model.safetensors, Embed/Decoder/DVAE/Vocos.safetensors,
                tokenizer/ with a small WordPiece vocabulary of our own plus ChatTTS's 50
                tokens) at TINY_CHATTTS's sizes, a spk_stat string and one speaker, converted
                with --chattts (--chattts-assets DIR writes only the asset folder)
  tiny-sambert  a Sambert-HiFiGAN voice: a made-up ModelScope voice folder (am/ and voc/ with
                KAN-TTS's config.yaml and checkpoint_<N>.pth files) at the sizes of the Sambert
                fixture "basic" and the KAN-TTS HiFiGAN fixture "v1_16k", over the made-up phone
                inventory of tests/fixtures/sambert_symbols (speakers F7, F74, M7), the duration
                head set for about 4 frames a token, converted with --kantts
  tiny-sambert-nsf  a personal Sambert-HiFiGAN voice as ModelScope's personal TTS trains them:
                tiny-sambert's sizes with a speaker embedding (SE, am/se.npy) in place of the
                speaker table, an f0 and a voicing channel after the mel (NSF, normalised by
                am/mvn.npy) and a HiFiGAN-NSF vocoder of 7 harmonics
  tiny-sambert-zh  tiny-sambert's sizes over KAN-TTS's PinYin phone names
                (tests/fixtures/sambert_symbols/pinyin), so that it reads Chinese text

    /usr/bin/python3 tools/make_test_voices.py [--out tests/fixtures/voices] [--only NAME]
"""
import argparse
import json
import math
import os
import sys
import tempfile

import numpy as np
import torch

TOOLS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, TOOLS)

import chattts_codec  # noqa: E402
import convert_checkpoint  # noqa: E402
import safetensors_io  # noqa: E402
import symbols as symbol_tables  # noqa: E402
import kantts_symbols  # noqa: E402
from reference import chattts, chattts_fixtures, fastspeech2, hifigan  # noqa: E402
from reference import kantts_hifigan, sambert, sambert_fixtures  # noqa: E402

DEFAULT_OUT = os.path.join(os.path.dirname(TOOLS), "tests", "fixtures", "voices")
IPA_SYMBOLS = os.path.join(os.path.dirname(TOOLS), "data", "symbols", "espeak-ipa-en.txt")
FIXTURES = os.path.join(os.path.dirname(TOOLS), "tests", "fixtures")
SAMBERT_INVENTORY = os.path.join(FIXTURES, "sambert_symbols", "inventory")
# KAN-TTS's PinYin phone names: the inventory of a voice that reads Chinese text.
PINYIN_INVENTORY = os.path.join(FIXTURES, "sambert_symbols", "pinyin")
SAMBERT_UNIT = {"cleaners": "english_cleaners",
                "lfeat_type_list": "sy,tone,syllable_flag,word_segment,emo_category,"
                                   "speaker_category",
                "speaker_list": "F7,F74,M7"}

# A ming024 model.yaml shrunk to hidden 32 (the original: 4/6 layers, hidden 256, filter 1024).
TINY_MODEL_YAML = {
    "transformer": {"encoder_layer": 2, "encoder_head": 2, "encoder_hidden": 32,
                    "decoder_layer": 2, "decoder_head": 2, "decoder_hidden": 32,
                    "conv_filter_size": 64, "conv_kernel_size": [9, 1],
                    "encoder_dropout": 0.2, "decoder_dropout": 0.2},
    "variance_predictor": {"filter_size": 32, "kernel_size": 3, "dropout": 0.5},
    "variance_embedding": {"pitch_quantization": "linear", "energy_quantization": "linear",
                           "n_bins": 256},
    "multi_speaker": False,
    "max_seq_len": 1000,
    "vocoder": {"model": "HiFi-GAN", "speaker": "LJSpeech"},
}
TINY_POSTNET_DIM = 32  # ming024 hard-codes 512; the reference makes it an argument

# ming024's preprocess.yaml for LJSpeech, paths aside.
PREPROCESS_YAML = {
    "dataset": "Tiny",
    "path": {"corpus_path": "/nonexistent", "lexicon_path": "lexicon/librispeech-lexicon.txt",
             "raw_path": "./raw_data/Tiny", "preprocessed_path": "./preprocessed_data/Tiny"},
    "preprocessing": {
        "val_size": 512,
        "text": {"text_cleaners": ["english_cleaners"], "language": "en"},
        "audio": {"sampling_rate": 22050, "max_wav_value": 32768.0},
        "stft": {"filter_length": 1024, "hop_length": 256, "win_length": 1024},
        "mel": {"n_mel_channels": 80, "mel_fmin": 0, "mel_fmax": 8000},
        "pitch": {"feature": "phoneme_level", "normalization": True},
        "energy": {"feature": "phoneme_level", "normalization": True},
    },
}
# ming024's LJSpeech stats.json values: [min, max, mean, std].
STATS_JSON = {"pitch": [-2.917079304729967, 11.391254536985784, 207.6309860026605,
                        46.77559025098988],
              "energy": [-1.431044578552246, 8.184337615966797, 37.32621679053821,
                         26.044180782835863]}

# jik876's config_v1.json with upsample_initial_channel 32 (V1 has 512).
TINY_HIFIGAN_JSON = {
    "resblock": "1", "num_gpus": 0, "batch_size": 16, "learning_rate": 0.0002,
    "adam_b1": 0.8, "adam_b2": 0.99, "lr_decay": 0.999, "seed": 1234,
    "upsample_rates": [8, 8, 2, 2], "upsample_kernel_sizes": [16, 16, 4, 4],
    "upsample_initial_channel": 32, "resblock_kernel_sizes": [3, 7, 11],
    "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]],
    "segment_size": 8192, "num_mels": 80, "num_freq": 1025, "n_fft": 1024, "hop_size": 256,
    "win_size": 1024, "sampling_rate": 22050, "fmin": 0, "fmax": 8000, "fmax_for_loss": None,
    "num_workers": 4,
    "dist_config": {"dist_backend": "nccl", "dist_url": "tcp://localhost:54321", "world_size": 1},
}

FRAMES_PER_PHONEME = 5  # every phoneme of a test voice lasts this many frames


def reference_acoustic_config(model_yaml, preprocess_yaml, stats):
    """The config dict tools/reference/fastspeech2.FastSpeech2 takes (a voice's acoustic section)."""
    pre = preprocess_yaml["preprocessing"]
    return {"model": model_yaml, "stats": stats, "n_mels": pre["mel"]["n_mel_channels"],
            "pitch_feature_level": pre["pitch"]["feature"],
            "energy_feature_level": pre["energy"]["feature"]}


def build_fastspeech2(model_yaml, preprocess_yaml, stats, n_symbols, n_speakers=0, seed=0,
                      postnet_dim=TINY_POSTNET_DIM, frames_per_phoneme=FRAMES_PER_PHONEME):
    """A randomly initialised reference FastSpeech2 with ming024's embedding of n_symbols + 1 rows.

    The duration predictor's output layer is zeroed with its bias set to
    log(1 + frames_per_phoneme), so every phoneme lasts exactly frames_per_phoneme frames
    (round(exp(log_d) - 1)) instead of a random, often zero, count.
    """
    torch.manual_seed(seed)
    model = fastspeech2.FastSpeech2(reference_acoustic_config(model_yaml, preprocess_yaml, stats),
                                    n_symbols + 1, n_speakers, postnet_embedding_dim=postnet_dim)
    with torch.no_grad():
        linear = model.variance_adaptor.duration_predictor.linear_layer
        linear.weight.zero_()
        linear.bias.fill_(math.log(1 + frames_per_phoneme))
    return model.eval()


def build_hifigan(config, seed=0):
    """A randomly initialised reference HiFi-GAN generator (weight norm split, as trained)."""
    torch.manual_seed(seed)
    return hifigan.Generator(config).eval()


def save_fastspeech2_checkpoint(model, path, module_prefix=False):
    """Saves as ming024's train.py does: {"model": state_dict, "optimizer": ...}."""
    state = model.state_dict()
    if module_prefix:
        state = {"module." + k: v for k, v in state.items()}
    optimizer = torch.optim.Adam(model.parameters(), lr=0.001)
    torch.save({"model": state, "optimizer": optimizer.state_dict()}, path)


def save_hifigan_checkpoint(model, path):
    """Saves as jik876's train.py does: {"generator": state_dict}."""
    torch.save({"generator": model.state_dict()}, path)


def write_yaml(path, data):
    import yaml
    with open(path, "w", encoding="utf-8") as f:
        yaml.safe_dump(data, f, sort_keys=False)


def write_json(path, data):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=4)


def make_voice(out_dir, work, symbols, *, phonemes, seed, vocoder_weights=None, name=None,
               model_yaml_data=TINY_MODEL_YAML, hifigan_json=TINY_HIFIGAN_JSON,
               postnet_dim=TINY_POSTNET_DIM, frames_per_phoneme=FRAMES_PER_PHONEME):
    """Builds random checkpoints and configs in `work`, then converts them into `out_dir`.

    The defaults make the tiny test voices; tools/make_bench_voices.py passes full sizes.
    """
    pre, model_yaml, stats = (os.path.join(work, n) for n in
                              ("preprocess.yaml", "model.yaml", "stats.json"))
    write_yaml(pre, PREPROCESS_YAML)
    write_yaml(model_yaml, model_yaml_data)
    write_json(stats, STATS_JSON)
    symbols_path = os.path.join(work, "symbols.txt")
    symbol_tables.write_symbols(symbols_path, symbols)
    ckpt = os.path.join(work, f"{seed}.pth.tar")
    save_fastspeech2_checkpoint(
        build_fastspeech2(model_yaml_data, PREPROCESS_YAML, STATS_JSON, len(symbols), seed=seed,
                          postnet_dim=postnet_dim, frames_per_phoneme=frames_per_phoneme),
        ckpt)
    argv = ["--fastspeech2", ckpt, "--preprocess-config", pre, "--model-config", model_yaml,
            "--stats", stats, "--symbols", symbols_path, "--phonemes", phonemes,
            "--out", out_dir, "--force"]
    if name:
        argv += ["--name", name]
    if vocoder_weights:
        argv += ["--vocoder-weights", vocoder_weights]
    else:
        hifigan_config = os.path.join(work, "config.json")
        write_json(hifigan_config, hifigan_json)
        generator = os.path.join(work, "g_00000000")
        save_hifigan_checkpoint(build_hifigan(hifigan_json, seed=seed + 1), generator)
        argv += ["--hifigan", generator, "--hifigan-config", hifigan_config]
    if convert_checkpoint.main(argv) != 0:
        raise SystemExit(f"converting {out_dir} failed")


# ---------------------------------------------------------------------------------------------
# ChatTTS: a tiny random voice in the layout of 2noise/ChatTTS's released asset/ folder

# The release's sizes shrunk (ChatTTS/config/config.py: GPT hidden 768, 12 heads, 20 layers,
# intermediate 3072; Decoder hidden 512 x 12 layers; DVAE hidden 256 x 12; Vocos dim 512,
# intermediate 1536, 8 layers). num_audio_tokens stays 626 (5^4 GFSQ codes + EOS).
TINY_CHATTTS = {
    "gpt": {"hidden_size": 32, "num_attention_heads": 2, "num_key_value_heads": 2,
            "num_hidden_layers": 2, "intermediate_size": 64, "max_position_embeddings": 4096,
            "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "num_audio_tokens": 626,
            "num_vq": 4},
    "decoder": {"idim": 16, "odim": 16, "hidden": 24, "n_layer": 2, "bn_dim": 8},
    "dvae_decoder": {"idim": 16, "odim": 16, "hidden": 24, "n_layer": 2, "bn_dim": 8},
    "dvae_encoder": {"idim": 16, "odim": 32, "hidden": 24, "n_layer": 2, "bn_dim": 8},
    "dvae_dim": 16,
    "vq": {"dim": 32, "levels": [5, 5, 5, 5], "G": 2, "R": 2},
    "vocos": {"input_channels": 100, "dim": 32, "intermediate_dim": 64, "num_layers": 2,
              "n_fft": 1024, "hop_length": 256, "padding": "center"},
}

# ChatTTS's 50 tokens after BERT's vocabulary, in the release's order as far as public notes
# tell ([break_0] must come after [uv_break], [laugh] and [lbreak]: ChatTTS keeps refined ids
# below [break_0]'s).
CHATTTS_SPECIAL_TOKENS = (
    ["[Sasr]", "[Pasr]", "[Easr]", "[Stts]", "[Ptts]", "[Etts]", "[Sbreak]", "[Pbreak]",
     "[Ebreak]", "[uv_break]", "[v_break]", "[lbreak]", "[llbreak]", "[undefine]", "[laugh]",
     "[spk_emb]", "[empty_spk]", "[music]", "[pure]"]
    + [f"[break_{i}]" for i in range(8)] + [f"[laugh_{i}]" for i in range(3)]
    + [f"[oral_{i}]" for i in range(10)] + [f"[speed_{i}]" for i in range(10)])
BERT_SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
# A small vocabulary of our own: punctuation, digits, letters, some hanzi and word pieces.
TINY_WORDPIECES = (list("，。！？、,.!?'") + list("0123456789")
                   + list("abcdefghijklmnopqrstuvwxyz")
                   + list("你好我是的了在有不这人们他一个中国说话今天声音")
                   + ["the", "hello", "world"]
                   + ["##" + c for c in "abcdefghijklmnopqrstuvwxyz"] + ["##ing", "##ed"])


def write_chattts_tokenizer(folder):
    """A BERT WordPiece tokenizer (transformers' BertTokenizerFast files) with ChatTTS's tokens
    added after the vocabulary; returns its size (emb_text's rows)."""
    os.makedirs(folder, exist_ok=True)
    vocab = {token: i for i, token in enumerate(BERT_SPECIAL_TOKENS + TINY_WORDPIECES)}
    added = [{"id": vocab[t], "content": t, "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": False, "special": True}
             for t in BERT_SPECIAL_TOKENS]
    added += [{"id": len(vocab) + i, "content": t, "single_word": False, "lstrip": False,
               "rstrip": False, "normalized": False, "special": True}
              for i, t in enumerate(CHATTTS_SPECIAL_TOKENS)]
    cls, sep = vocab["[CLS]"], vocab["[SEP]"]
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "BertNormalizer", "clean_text": True,
                       "handle_chinese_chars": True, "strip_accents": None, "lowercase": True},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}},
                       {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "[SEP]", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 1}},
                     {"SpecialToken": {"id": "[SEP]", "type_id": 1}}],
            "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [cls], "tokens": ["[CLS]"]},
                               "[SEP]": {"id": "[SEP]", "ids": [sep], "tokens": ["[SEP]"]}}},
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100, "vocab": vocab},
    }
    special = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
               "cls_token": "[CLS]", "mask_token": "[MASK]"}
    config = dict(special, tokenizer_class="BertTokenizer", do_lower_case=True,
                  tokenize_chinese_chars=True, strip_accents=None, model_max_length=512,
                  clean_up_tokenization_spaces=True)
    for name, data in (("tokenizer.json", tokenizer), ("tokenizer_config.json", config),
                       ("special_tokens_map.json", special)):
        with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
            json.dump(data, f, ensure_ascii=False, indent=2)
    return len(vocab) + len(CHATTTS_SPECIAL_TOKENS)


def llama_config_json(gpt):
    """asset/gpt/config.json: a transformers LlamaConfig plus ChatTTS's fields (num_text_tokens
    is null in the release; the converter reads it from Embed.safetensors)."""
    return {"architectures": ["LlamaModel"], "attention_bias": False, "attention_dropout": 0.0,
            "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
            "hidden_size": gpt["hidden_size"], "initializer_range": 0.02,
            "intermediate_size": gpt["intermediate_size"],
            "max_position_embeddings": gpt["max_position_embeddings"], "mlp_bias": False,
            "model_type": "llama", "num_attention_heads": gpt["num_attention_heads"],
            "num_audio_tokens": gpt["num_audio_tokens"],
            "num_hidden_layers": gpt["num_hidden_layers"],
            "num_key_value_heads": gpt["num_key_value_heads"], "num_text_tokens": None,
            "num_vq": gpt["num_vq"], "pretraining_tp": 1, "rms_norm_eps": gpt["rms_norm_eps"],
            "rope_scaling": None, "rope_theta": gpt["rope_theta"], "spk_KL": False,
            "spk_emb_dim": 192, "tie_word_embeddings": False, "torch_dtype": "float32",
            "use_cache": False, "vocab_size": 32000}


def split_weight_norm(weight, generator):
    """A folded head weight -> (g, v) as parametrizations.weight.original0/1 store it: v is the
    weight with each row scaled by a random factor, g the row norms, so g·v/‖v‖ = weight."""
    scale = 0.5 + 1.5 * torch.rand(weight.shape[0], 1, generator=generator)
    return weight.norm(dim=1, keepdim=True), weight * scale


def _state(module, prefix=""):
    return {prefix + k: v.detach().float().numpy().copy() for k, v in module.state_dict().items()}


def build_chattts_models(sizes=TINY_CHATTTS, seed=0):
    """Seeded random reference models: (gpt, decoder, dvae, vocos), float32, eval."""
    generator = torch.Generator().manual_seed(seed)
    text_tokens = len(BERT_SPECIAL_TOKENS) + len(TINY_WORDPIECES) + len(CHATTTS_SPECIAL_TOKENS)
    gpt = chattts.GPT(dict(sizes["gpt"], num_text_tokens=text_tokens))
    decoder = chattts.DVAE(dict(sizes["decoder"]), sizes["decoder"]["odim"])
    dvae = chattts.DVAE(dict(sizes["dvae_decoder"]), sizes["dvae_dim"], sizes["vq"],
                        encoder_config=dict(sizes["dvae_encoder"]))
    vocos = chattts.Vocos(dict(sizes["vocos"]))
    for model in (gpt, decoder, dvae, vocos):
        chattts_fixtures.randomize(model, generator)
    chattts_fixtures.random_weight_norm_heads(gpt.embed, generator)
    with torch.no_grad():
        coef = 0.5 + torch.rand(decoder.coef.shape, generator=generator)
        decoder.coef.copy_(coef)
        dvae.coef.copy_(coef)  # the release's two files hold one coef
    return tuple(m.float().eval() for m in (gpt, decoder, dvae, vocos))


def write_chattts_assets(asset_dir, sizes=TINY_CHATTTS, seed=0):
    """Writes a ChatTTS asset/ folder (gpt/, tokenizer/, Embed, Decoder, DVAE, Vocos) of random
    reference models; returns the models."""
    generator = torch.Generator().manual_seed(seed + 1)
    models = build_chattts_models(sizes, seed)
    gpt, decoder, dvae, vocos = models
    os.makedirs(os.path.join(asset_dir, "gpt"), exist_ok=True)
    write_json(os.path.join(asset_dir, "gpt", "config.json"), llama_config_json(sizes["gpt"]))
    safetensors_io.save(os.path.join(asset_dir, "gpt", "model.safetensors"), _state(gpt.gpt),
                        {"format": "pt"})
    embed = {}
    for name, value in gpt.embed.state_dict().items():
        if name.startswith("head_"):
            g, v = split_weight_norm(value, generator)
            base = name[:-len(".weight")] + ".parametrizations.weight."
            embed[base + "original0"] = g.numpy().copy()
            embed[base + "original1"] = v.numpy().copy()
        else:
            embed[name] = value.numpy().copy()
    safetensors_io.save(os.path.join(asset_dir, "Embed.safetensors"), embed)
    for filename, model in (("Decoder.safetensors", decoder), ("DVAE.safetensors", dvae),
                            ("Vocos.safetensors", vocos)):
        safetensors_io.save(os.path.join(asset_dir, filename), _state(model))
    size = write_chattts_tokenizer(os.path.join(asset_dir, "tokenizer"))
    assert size == gpt.embed.emb_text.weight.shape[0]
    return models


def write_chattts_speakers(folder, hidden, seed=0):
    """spk_stat.txt (the string ChatTTS keeps in config.py) and speaker-<name>.txt spk_emb
    strings, sampled as Speaker.sample_random does (randn · std + mean, in float16)."""
    generator = torch.Generator().manual_seed(seed)
    std = (0.5 + torch.rand(hidden, generator=generator)).half()
    mean = (0.5 * torch.randn(hidden, generator=generator)).half()
    paths = {"spk_stat": os.path.join(folder, "spk_stat.txt")}
    with open(paths["spk_stat"], "w", encoding="utf-8") as f:
        f.write(chattts_codec.encode_spk_stat(std.numpy(), mean.numpy()))
    for name in ("tiny",):
        z = torch.randn(hidden, generator=generator).half()
        spk = (z.float() * std.float()).half().float().add(mean.float()).half()
        paths[name] = os.path.join(folder, f"speaker-{name}.txt")
        with open(paths[name], "w", encoding="utf-8") as f:
            f.write(chattts_codec.encode_spk_emb(spk.numpy()))
    return paths


def make_chattts_voice(out_dir, work, sizes=TINY_CHATTTS, seed=0, name=None):
    """Builds the asset folder and speaker strings in `work`, then converts them into out_dir."""
    asset = os.path.join(work, "asset")
    write_chattts_assets(asset, sizes, seed)
    speakers = write_chattts_speakers(work, sizes["gpt"]["hidden_size"], seed + 2)
    argv = ["--chattts", asset, "--spk-stat", speakers["spk_stat"], "--out", out_dir, "--force"]
    argv += [x for n, p in speakers.items() if n != "spk_stat" for x in ("--speaker", f"{n}={p}")]
    if name:
        argv += ["--name", name]
    if convert_checkpoint.main(argv) != 0:
        raise SystemExit(f"converting {out_dir} failed")


def sambert_fixture_sizes():
    """tiny-sambert's sizes: the Sambert params of the fixture "basic" and the Generator params of
    the KAN-TTS HiFiGAN fixture "v1_16k" (reading the Sambert's mel)."""
    with open(os.path.join(FIXTURES, "sambert", "basic", "config.json")) as f:
        params = json.load(f)["params"]
    with open(os.path.join(FIXTURES, "kantts_hifigan", "v1_16k", "config.json")) as f:
        gen_params = dict(json.load(f)["params"], in_channels=params["num_mels"])
    return params, gen_params


def write_modelscope_voice(voice, params, gen_params, seed=0, log_duration=1.6,
                           f0_mean_std=(180.0, 40.0), inventory=SAMBERT_INVENTORY):
    """A ModelScope voice folder `voice` (am/ and voc/, each config.yaml and ckpt/checkpoint_1.pth
    as KAN-TTS writes them) of a random Sambert of `params` over `inventory`, its
    duration head set for log durations near `log_duration`, and a random Generator of
    `gen_params`. With params SE, the checkpoint has no speaker table and am/se.npy holds a
    random speaker embedding; with params NSF (mean_std), am/mvn.npy holds `f0_mean_std`.
    Returns the two modules."""
    lists = kantts_symbols.symbol_lists(inventory, SAMBERT_UNIT)
    # ModelScope's checkpoints leave out the mask's row of each table.
    sizes = {"sy": len(lists["sy"]) - 1, "tone": len(lists["tone"]) - 1,
             "syllable_flag": len(lists["syllable_flag"]) - 1,
             "word_segment": len(lists["word_segment"]) - 1,
             "emotion": len(lists["emo_category"]) - 1,
             "speaker": len(lists["speaker_category"]) - 1}
    am = sambert.KanTtsSAMBERT(dict(params, **sizes, SE=False, NSF=False))
    sambert_fixtures._randomize(am, (log_duration, 0.5), torch.Generator().manual_seed(seed))
    torch.manual_seed(seed + 1)
    gen = kantts_hifigan.Generator(**gen_params)
    audio = {"sampling_rate": 16000, "hop_length": 200, "n_mels": params["num_mels"]}
    am_state = am.state_dict()
    for part, config in (("am", {"audio_config": audio, "model_type": "sambert",
                                 "Model": {"KanTtsSAMBERT": {"params": params}},
                                 "linguistic_unit": SAMBERT_UNIT}),
                         ("voc", {"audio_config": audio,
                                  "Model": {"Generator": {"params": gen_params}}})):
        os.makedirs(os.path.join(voice, part, "ckpt"))
        write_yaml(os.path.join(voice, part, "config.yaml"), config)
    if params.get("SE"):
        del am_state["spk_tokenizer.weight"]
        embedding = torch.randn(1, params["speaker_units"],
                                generator=torch.Generator().manual_seed(seed + 2))
        np.save(os.path.join(voice, "am", "se.npy"), embedding.numpy())
    if params.get("NSF") and params.get("nsf_norm_type", "mean_std") == "mean_std":
        np.save(os.path.join(voice, "am", "mvn.npy"),
                np.array(f0_mean_std, dtype=np.float32).reshape(2, 1))
    torch.save({"model": am_state, "steps": 1},
               os.path.join(voice, "am", "ckpt", "checkpoint_1.pth"))
    torch.save({"model": {"generator": gen.state_dict()}, "steps": 1},
               os.path.join(voice, "voc", "ckpt", "checkpoint_1.pth"))
    return am, gen


def convert_modelscope_voice(voice, out_dir, name=None, inventory=SAMBERT_INVENTORY):
    """tools/convert_checkpoint.py --kantts on `voice` (over `inventory`) into out_dir."""
    argv = ["--kantts", voice, "--kantts-languages", inventory, "--out", out_dir,
            "--force"] + (["--name", name] if name else [])
    if convert_checkpoint.main(argv) != 0:
        raise SystemExit(f"converting {out_dir} failed")


def make_sambert_voice(out_dir, work, seed=0):
    """Writes tiny-sambert's ModelScope voice folder in `work`, then converts it into out_dir."""
    params, gen_params = sambert_fixture_sizes()
    voice = os.path.join(work, "tiny-sambert")
    # Log durations near 1.6 (about 4 frames a token), as the parity fixtures set them.
    write_modelscope_voice(voice, params, gen_params, seed, log_duration=1.6)
    convert_modelscope_voice(voice, out_dir)


def make_sambert_nsf_voice(out_dir, work, seed=4):
    """tiny-sambert-nsf: tiny-sambert's sizes as a personal voice (SE and NSF, see the module's
    docstring), written as a ModelScope voice folder in `work` and converted into out_dir."""
    params, gen_params = sambert_fixture_sizes()
    params = dict(params, SE=True, NSF=True, nsf_norm_type="mean_std",
                  num_mels=params["num_mels"] + 2)
    gen_params = dict(gen_params, nsf_params={"nb_harmonics": 7, "sampling_rate": 16000})
    voice = os.path.join(work, "tiny-sambert-nsf")
    write_modelscope_voice(voice, params, gen_params, seed, log_duration=1.6)
    convert_modelscope_voice(voice, out_dir)


def make_sambert_zh_voice(out_dir, work, seed=6):
    """tiny-sambert-zh: tiny-sambert's sizes over KAN-TTS's PinYin inventory, so that it reads
    Chinese text through voxd's Mandarin front end."""
    params, gen_params = sambert_fixture_sizes()
    voice = os.path.join(work, "tiny-sambert-zh")
    write_modelscope_voice(voice, params, gen_params, seed, log_duration=1.6,
                           inventory=PINYIN_INVENTORY)
    convert_modelscope_voice(voice, out_dir, inventory=PINYIN_INVENTORY)


VOICES = ("tiny-arpabet", "tiny-ipa", "tiny-chattts", "tiny-sambert", "tiny-sambert-nsf",
          "tiny-sambert-zh")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=DEFAULT_OUT, help="where the voice directories go")
    parser.add_argument("--only", choices=VOICES, help="write this voice alone")
    parser.add_argument("--chattts-assets", metavar="DIR", help="only write tiny-chattts's "
                        "ChatTTS asset/ folder (and spk_stat.txt, speaker-tiny.txt) under DIR")
    args = parser.parse_args()
    torch.use_deterministic_algorithms(True)
    if args.chattts_assets:
        write_chattts_assets(os.path.join(args.chattts_assets, "asset"))
        write_chattts_speakers(args.chattts_assets, TINY_CHATTTS["gpt"]["hidden_size"], 2)
        return
    wanted = [args.only] if args.only else VOICES
    arpabet = os.path.join(args.out, "tiny-arpabet")
    if "tiny-arpabet" in wanted:
        with tempfile.TemporaryDirectory() as work:
            make_voice(arpabet, work, symbol_tables.MING024_SYMBOLS, phonemes="arpabet", seed=1)
    if "tiny-ipa" in wanted:
        if not os.path.isfile(IPA_SYMBOLS):
            raise SystemExit(f"{IPA_SYMBOLS}: no such file (the espeak-ipa symbol table)")
        with tempfile.TemporaryDirectory() as work:
            make_voice(os.path.join(args.out, "tiny-ipa"), work,
                       symbol_tables.read_symbols(IPA_SYMBOLS), phonemes="espeak-ipa", seed=3,
                       vocoder_weights=os.path.join(arpabet, "vocoder.safetensors"))
    if "tiny-chattts" in wanted:
        with tempfile.TemporaryDirectory() as work:
            make_chattts_voice(os.path.join(args.out, "tiny-chattts"), work)
    if "tiny-sambert" in wanted:
        with tempfile.TemporaryDirectory() as work:
            make_sambert_voice(os.path.join(args.out, "tiny-sambert"), work)
    if "tiny-sambert-nsf" in wanted:
        with tempfile.TemporaryDirectory() as work:
            make_sambert_nsf_voice(os.path.join(args.out, "tiny-sambert-nsf"), work)
    if "tiny-sambert-zh" in wanted:
        with tempfile.TemporaryDirectory() as work:
            make_sambert_zh_voice(os.path.join(args.out, "tiny-sambert-zh"), work)


if __name__ == "__main__":
    main()
