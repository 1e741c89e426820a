#!/usr/bin/env python3
"""Converts FastSpeech2 (ming024) and HiFi-GAN (jik876) PyTorch checkpoints, a ChatTTS
(2noise) asset folder, or a Sambert-HiFiGAN (KAN-TTS) voice, to a voxd voice.

A voice directory (docs/voice-format.md) holds config.json, symbols.txt, acoustic.safetensors
and vocoder.safetensors; tensors keep the original state-dict names (weight norm stays split in
weight_g/weight_v; voxd folds it at load). A ChatTTS voice holds config.json, gpt, embed,
decoder, dvae and vocos .safetensors (the asset files' tensor names, the heads' weight norm
folded), tokenizer/ and, with --spk-stat or --speaker, speaker.safetensors. Checks the inputs
against their configs and each other first, and writes through a temporary directory, so a
failed run leaves nothing behind.

Example (ming024's LJSpeech model and its HiFi-GAN, from a FastSpeech2 checkout):

    /usr/bin/python3 tools/convert_checkpoint.py \\
        --fastspeech2 output/ckpt/LJSpeech/900000.pth.tar \\
        --preprocess-config config/LJSpeech/preprocess.yaml \\
        --model-config config/LJSpeech/model.yaml \\
        --stats preprocessed_data/LJSpeech/stats.json \\
        --hifigan hifigan/generator_LJSpeech.pth.tar --hifigan-config hifigan/config.json \\
        --name ljspeech-fastspeech2 --out voices/ljspeech

A vocoder alone (--hifigan without --fastspeech2) gives a directory with vocoder.safetensors and
vocoder.json that other voices can share through --vocoder-weights.

ChatTTS (the asset/ folder of HuggingFace 2Noise/ChatTTS; spk_stat.txt holding the spk_stat
string of ChatTTS/config/config.py is optional):

    /usr/bin/python3 tools/convert_checkpoint.py --chattts ChatTTS/asset \\
        --spk-stat spk_stat.txt --name chattts --out voices/chattts

Sambert-HiFiGAN (a ModelScope model folder such as speech_sambert-hifigan_tts_zh-cn_16k, and
KAN-TTS's language inventories):

    /usr/bin/python3 tools/convert_checkpoint.py --kantts speech_sambert-hifigan_tts_zh-cn_16k \\
        --kantts-voice zhitian_emo --kantts-languages KAN-TTS/kantts/preprocess/languages \\
        --out voices/zhitian
"""
import argparse
import io
import json
import lzma
import math
import os
import pickle
import shutil
import struct
import sys
import tempfile
import zipfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import chattts_codec  # noqa: E402
import kantts_voice  # noqa: E402
import safetensors_io  # noqa: E402
import symbols as symbol_tables  # noqa: E402

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_IPA_SYMBOLS = os.path.join(REPO_ROOT, "data", "symbols", "espeak-ipa-en.txt")

# jik876/hifi-gan's config.json fields that shape the generator (the rest is training setup).
HIFIGAN_GENERATOR_FIELDS = ["resblock", "upsample_rates", "upsample_kernel_sizes",
                            "upsample_initial_channel", "resblock_kernel_sizes",
                            "resblock_dilation_sizes", "num_mels"]
# Bucket edges stay float32 under --dtype f16 so bucketizing pitch/energy is unchanged.
KEEP_F32_SUFFIXES = ("_bins",)


class ConvertError(Exception):
    """A one-line, user-facing reason the conversion cannot go on."""


def fail(path, what):
    """The error for `path` (a file, or a file and field) with the reason `what`."""
    return ConvertError(f"{path}: {what}")


# ---------------------------------------------------------------------------------------------
# Reading inputs


def require_file(path):
    """Raises ConvertError unless `path` is an existing regular file."""
    if not os.path.exists(path):
        raise fail(path, "no such file")
    if not os.path.isfile(path):
        raise fail(path, "not a regular file")


def read_json(path):
    """Parses a JSON file; errors name the file."""
    require_file(path)
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise fail(path, f"not valid JSON ({e})") from None


def read_yaml(path):
    """Parses a YAML file (ming024's configs); errors name the file."""
    require_file(path)
    try:
        import yaml
    except ImportError:
        raise ConvertError("reading YAML configs needs PyYAML (Debian: apt-get install "
                           "python3-yaml)") from None
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise fail(path, "not valid YAML (" + " ".join(str(e).split()) + ")") from None
    if not isinstance(data, dict):
        raise fail(path, "expected a YAML mapping at the top level")
    return data


def field(mapping, dotted, path, kind=None):
    """mapping["a"]["b"] for dotted "a.b"; errors name the file and the field."""
    value = mapping
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            raise fail(path, f"missing field '{dotted}'")
        value = value[part]
    if kind is int and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
        raise fail(path, f"field '{dotted}' must be a positive integer, got {value!r}")
    if kind is list and (not isinstance(value, list) or not value):
        raise fail(path, f"field '{dotted}' must be a non-empty list, got {value!r}")
    if kind is str and not isinstance(value, str):
        raise fail(path, f"field '{dotted}' must be a string, got {value!r}")
    return value


def _torch_archive(path):
    """True if `path` is a zip that torch.save wrote (it holds .../data.pkl)."""
    with zipfile.ZipFile(path) as z:
        return any(n == "data.pkl" or n.endswith("/data.pkl") for n in z.namelist())


# What a checkpoint may unpickle: containers, tensors, parameters and storages, no code.
_SAFE_GLOBALS = {("collections", "OrderedDict"), ("torch._utils", "_rebuild_tensor"),
                 ("torch._utils", "_rebuild_tensor_v2"), ("torch._utils", "_rebuild_parameter"),
                 ("torch._utils", "_rebuild_parameter_with_state"), ("torch", "Size")}


class _CheckingUnpickler(pickle.Unpickler):
    """Walks a pickle without running it: refuses every global outside _SAFE_GLOBALS, torch
    storage types and dtypes; the allowed ones become inert stubs."""

    def find_class(self, module, name):
        if (module, name) == ("collections", "OrderedDict"):
            return _Mapping
        allowed = (module, name) in _SAFE_GLOBALS
        if module == "torch" and not allowed:
            import torch
            allowed = name.endswith("Storage") or isinstance(getattr(torch, name, None),
                                                             torch.dtype)
        if not allowed:
            raise pickle.UnpicklingError(f"refusing to unpickle {module}.{name}")
        return _inert

    def persistent_load(self, pid):
        return None


def _inert(*args, **kwargs):
    return None


class _Mapping(dict):
    """Stands in for OrderedDict while checking; takes attributes (state dicts' _metadata)."""


def check_pickles(path):
    """Raises pickle.UnpicklingError("refusing ...") if loading `path` would run code.

    torch 1.13's torch.load(weights_only=True) rejects plain floats (as in every optimizer
    state) and it ignores pickle_module otherwise, so the pickles are walked here first: the
    zip format's data.pkl, or the legacy format's leading pickles (magic, version, system
    info, the object).
    """
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as z:
            for name in z.namelist():
                if name == "data.pkl" or name.endswith("/data.pkl"):
                    _CheckingUnpickler(io.BytesIO(z.read(name)), encoding="utf-8").load()
        return
    with open(path, "rb") as f:
        for _ in range(4):
            _CheckingUnpickler(f, encoding="utf-8").load()


def _torch_load(path, unsafe):
    """torch.load on the CPU, after check_pickles unless `unsafe`."""
    import torch
    try:
        if not unsafe:
            check_pickles(path)
        return torch.load(path, map_location="cpu")
    except pickle.UnpicklingError as e:
        if str(e).startswith("refusing"):
            raise fail(path, f"{e} (not plain tensors and containers); if you trust the file, "
                             "pass --unsafe-load") from None
        raise fail(path, f"not a PyTorch checkpoint (UnpicklingError: {e})") from None
    except Exception as e:  # torch raises many types for a file that is not a checkpoint
        reason = " ".join(str(e).split())[:120]
        raise fail(path, f"not a PyTorch checkpoint ({type(e).__name__}: {reason})") from None


def load_checkpoint(path, key, unsafe=False):
    """The state dict of a checkpoint as name -> numpy array.

    Takes ckpt[key] (ming024 saves {"model": ..., "optimizer": ...}, hifi-gan {"generator": ...})
    or a bare state dict, strips DataParallel's "module." prefix, and also opens ming024's
    `generator_*.pth.tar.zip` (a zip around one checkpoint) without unzipping it first.
    """
    require_file(path)
    if zipfile.is_zipfile(path) and not _torch_archive(path):
        with zipfile.ZipFile(path) as z:
            members = [m for m in z.infolist() if not m.is_dir()]
            if len(members) != 1:
                raise fail(path, f"a zip with {len(members)} files; expected one checkpoint")
            with tempfile.TemporaryDirectory() as tmp:
                inner = z.extract(members[0], tmp)
                ckpt = _torch_load(inner, unsafe)
    else:
        ckpt = _torch_load(path, unsafe)
    return state_dict_to_numpy(ckpt, key, path)


def state_dict_to_numpy(ckpt, key, path):
    """Picks the state dict out of a loaded checkpoint and converts its tensors to numpy."""
    import torch
    if not isinstance(ckpt, dict):
        raise fail(path, f"not a checkpoint: holds a {type(ckpt).__name__}, not a dict")
    if key in ckpt:
        state = ckpt[key]
        if not isinstance(state, dict):
            raise fail(path, f"'{key}' is a {type(state).__name__}, not a state dict")
    elif ckpt and all(torch.is_tensor(v) for v in ckpt.values()):
        state = ckpt
    else:
        found = ", ".join(sorted(map(str, ckpt))[:6]) or "nothing"
        raise fail(path, f"missing key '{key}' (found {found})")
    if not state:
        raise fail(path, f"'{key}' is an empty state dict")
    if all(name.startswith("module.") for name in state):
        state = {name[len("module."):]: value for name, value in state.items()}
    out = {}
    for name, value in state.items():
        if not torch.is_tensor(value):
            raise fail(path, f"'{name}' is a {type(value).__name__}, not a tensor")
        value = value.detach().cpu()
        if value.dtype in (torch.bfloat16, torch.float16, torch.float64):
            value = value.float()
        if value.dtype not in (torch.float32, torch.int32, torch.int64):
            raise fail(path, f"'{name}' has unsupported dtype {value.dtype}")
        out[name] = value.numpy().copy()
    return out


# ---------------------------------------------------------------------------------------------
# Checking the FastSpeech2 state dict


def count_layers(state, prefix):
    """Number of consecutive `prefix{i}.` indices present among the state dict's names."""
    indices = set()
    for name in state:
        if name.startswith(prefix):
            head = name[len(prefix):].split(".", 1)[0]
            if head.isdigit():
                indices.add(int(head))
    return len(indices)


def require_keys(state, keys, path, what):
    """Raises ConvertError naming the first of `keys` missing from `state`."""
    for key in keys:
        if key not in state:
            raise fail(path, f"missing key '{key}' (is this a {what} checkpoint of the "
                             "configured shape?)")


def check_shape(state, key, axis, expected, path, why):
    """Raises ConvertError if state[key].shape[axis] != expected."""
    actual = state[key].shape[axis] if state[key].ndim > axis else None
    if actual != expected:
        raise fail(path, f"'{key}' has shape {list(state[key].shape)}: {why} is {expected}")


def check_fastspeech2(state, model_cfg, n_mels, n_symbols, n_speakers, path):
    """Checks a ming024 FastSpeech2 state dict against model.yaml, mels, symbols, speakers."""
    t = model_cfg["transformer"]
    keys = ["encoder.src_word_emb.weight", "encoder.position_enc", "decoder.position_enc",
            "variance_adaptor.pitch_bins", "variance_adaptor.energy_bins",
            "variance_adaptor.pitch_embedding.weight", "variance_adaptor.energy_embedding.weight",
            "mel_linear.weight", "mel_linear.bias"]
    for predictor in ("duration", "pitch", "energy"):
        base = f"variance_adaptor.{predictor}_predictor."
        keys += [base + "conv_layer.conv1d_1.conv.weight", base + "conv_layer.conv1d_2.conv.weight",
                 base + "linear_layer.weight"]
    for stack, layers in (("encoder", t["encoder_layer"]), ("decoder", t["decoder_layer"])):
        for i in range(layers):
            base = f"{stack}.layer_stack.{i}."
            keys += [base + "slf_attn.w_qs.weight", base + "slf_attn.fc.weight",
                     base + "pos_ffn.w_1.weight", base + "pos_ffn.w_2.weight"]
    keys += [f"postnet.convolutions.{i}.0.conv.weight" for i in range(5)]
    if model_cfg["multi_speaker"]:
        keys.append("speaker_emb.weight")
    require_keys(state, keys, path, "ming024 FastSpeech2")

    for stack, layers in (("encoder", t["encoder_layer"]), ("decoder", t["decoder_layer"])):
        found = count_layers(state, f"{stack}.layer_stack.")
        if found != layers:
            raise fail(path, f"has {found} {stack} layers but model.yaml's "
                             f"transformer.{stack}_layer is {layers}")
    hidden = t["encoder_hidden"]
    emb = "encoder.src_word_emb.weight"
    check_shape(state, emb, 1, hidden, path, "transformer.encoder_hidden")
    rows = state[emb].shape[0]
    if rows not in (n_symbols, n_symbols + 1):
        raise fail(path, f"'{emb}' has {rows} rows but the symbol table has {n_symbols} symbols "
                         f"(expected {n_symbols + 1}: one per symbol plus ming024's spare row)")
    check_shape(state, "mel_linear.weight", 0, n_mels, path,
                "preprocess.yaml's preprocessing.mel.n_mel_channels")
    n_bins = model_cfg["variance_embedding"]["n_bins"]
    for kind in ("pitch", "energy"):
        check_shape(state, f"variance_adaptor.{kind}_embedding.weight", 0, n_bins, path,
                    "model.yaml's variance_embedding.n_bins")
    for stack in ("encoder", "decoder"):
        check_shape(state, f"{stack}.position_enc", 1, model_cfg["max_seq_len"] + 1, path,
                    "model.yaml's max_seq_len + 1")
    if model_cfg["multi_speaker"]:
        check_shape(state, "speaker_emb.weight", 0, n_speakers, path,
                    "the number of speakers in speakers.json")


def postnet_shape(state):
    """The postnet's sizes, read from its weights (ming024 hard-codes 512 channels, kernel 5 and
    5 convolutions; model.yaml does not say them, so the voice config records them)."""
    first = state["postnet.convolutions.0.0.conv.weight"]
    return {"postnet_embedding_dim": int(first.shape[0]), "postnet_kernel_size": int(first.shape[2]),
            "postnet_n_convolutions": count_layers(state, "postnet.convolutions.")}


# ---------------------------------------------------------------------------------------------
# Checking the HiFi-GAN state dict


def conv_weight(state, prefix, path):
    """The weight shape of a conv that may carry weight norm (weight_g/weight_v) or not."""
    if prefix + ".weight_v" in state:
        require_keys(state, [prefix + ".weight_g"], path, "HiFi-GAN generator")
        return state[prefix + ".weight_v"].shape
    require_keys(state, [prefix + ".weight"], path, "HiFi-GAN generator")
    return state[prefix + ".weight"].shape


def check_hifigan(state, model, path):
    """Checks a jik876 HiFi-GAN generator state dict against its config's generator fields."""
    rates, kernels = model["upsample_rates"], model["upsample_kernel_sizes"]
    pre = conv_weight(state, "conv_pre", path)
    if pre[0] != model["upsample_initial_channel"]:
        raise fail(path, f"conv_pre has {pre[0]} output channels but the config's "
                         f"upsample_initial_channel is {model['upsample_initial_channel']}")
    if pre[1] != model["num_mels"]:
        raise fail(path, f"conv_pre takes {pre[1]} mel channels but the config's num_mels is "
                         f"{model['num_mels']}")
    if count_layers(state, "ups.") != len(rates):
        raise fail(path, f"has {count_layers(state, 'ups.')} upsampling layers but the config "
                         f"lists {len(rates)} upsample_rates")
    for i, kernel in enumerate(kernels):
        shape = conv_weight(state, f"ups.{i}", path)
        if shape[2] != kernel:
            raise fail(path, f"ups.{i} has kernel size {shape[2]} but the config's "
                             f"upsample_kernel_sizes[{i}] is {kernel}")
    per_stage = min(len(model["resblock_kernel_sizes"]), len(model["resblock_dilation_sizes"]))
    blocks = count_layers(state, "resblocks.")
    if blocks != len(rates) * per_stage:
        raise fail(path, f"has {blocks} resblocks but the config implies "
                         f"{len(rates) * per_stage} ({len(rates)} stages x {per_stage} kernels)")
    convs = ["convs1.0", "convs1.1", "convs1.2", "convs2.0", "convs2.1", "convs2.2"] \
        if str(model["resblock"]) == "1" else ["convs.0", "convs.1"]
    for j in range(blocks):
        for conv in convs:
            conv_weight(state, f"resblocks.{j}.{conv}", path)
    conv_weight(state, "conv_post", path)


def hifigan_model(config, path):
    """The generator fields of a jik876 config.json, type-checked."""
    model = {}
    for name in HIFIGAN_GENERATOR_FIELDS:
        if name not in config:
            raise fail(path, f"missing field '{name}'")
        model[name] = config[name]
    model["resblock"] = str(model["resblock"])
    if model["resblock"] not in ("1", "2"):
        raise fail(path, f"field 'resblock' must be \"1\" or \"2\", got {config['resblock']!r}")
    for name in ("upsample_rates", "upsample_kernel_sizes", "resblock_kernel_sizes",
                 "resblock_dilation_sizes"):
        field(model, name, path, list)
    for name in ("upsample_initial_channel", "num_mels"):
        field(model, name, path, int)
    if len(model["upsample_rates"]) != len(model["upsample_kernel_sizes"]):
        raise fail(path, "upsample_rates and upsample_kernel_sizes differ in length")
    return model


# ---------------------------------------------------------------------------------------------
# Building the voice


def to_storage(state, dtype, path):
    """Float tensors as `dtype` (float32 or float16); integer tensors and *_bins unchanged."""
    out = {}
    for name, array in state.items():
        if array.dtype.kind == "f":
            keep = dtype == np.float16 and name.endswith(KEEP_F32_SUFFIXES)
            converted = array.astype(np.float32 if keep else dtype)
            if not np.array_equal(np.isfinite(array), np.isfinite(converted)):
                raise fail(path, f"'{name}' has values beyond float16's range; use --dtype f32")
            out[name] = converted
        else:
            out[name] = array
    return out


def find_beside(explicit, preprocess, preprocess_path, filename):
    """An explicit path, or `filename` in preprocess.yaml's path.preprocessed_path.

    ming024's configs name that folder relative to the repository root, which is where
    synthesize.py runs; looks there (two levels above config/<dataset>/) and in the current
    directory. Returns None if not found.
    """
    if explicit:
        return explicit
    paths = preprocess.get("path")
    folder = paths.get("preprocessed_path") if isinstance(paths, dict) else None
    if not isinstance(folder, str):
        return None
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(preprocess_path))))
    for base in (os.getcwd(), root):
        candidate = os.path.join(base, folder, filename)
        if os.path.isfile(candidate):
            return candidate
    return None


def read_stats(path):
    """ming024's stats.json: {"pitch": [min, max, mean, std], "energy": [...]}."""
    stats = read_json(path)
    out = {}
    for kind in ("pitch", "energy"):
        values = stats.get(kind) if isinstance(stats, dict) else None
        if (not isinstance(values, list) or len(values) != 4
                or not all(isinstance(v, (int, float)) and math.isfinite(v) for v in values)):
            raise fail(path, f"field '{kind}' must be [min, max, mean, std], got {values!r}")
        out[kind] = [float(v) for v in values]
    return out


def read_speakers(path):
    """ming024's speakers.json: {name: id} with ids 0..n-1."""
    speakers = read_json(path)
    if not isinstance(speakers, dict) or not speakers:
        raise fail(path, "expected a non-empty object mapping speaker names to ids")
    ids = sorted(speakers.values()) if all(
        isinstance(v, int) and not isinstance(v, bool) for v in speakers.values()) else None
    if ids != list(range(len(speakers))):
        raise fail(path, f"speaker ids must be 0..{len(speakers) - 1}, each once")
    return speakers


def read_symbol_file(path):
    """A symbols.txt as a list; errors name the file."""
    require_file(path)
    try:
        return symbol_tables.read_symbols(path)
    except UnicodeDecodeError:
        raise fail(path, "not UTF-8 text") from None
    except ValueError as e:
        raise ConvertError(str(e)) from None


def choose_symbols(args, language):
    """The symbol table and where it came from, following --phonemes/--symbols."""
    if args.symbols:
        return read_symbol_file(args.symbols), args.symbols
    if args.phonemes == "espeak-mnemonic":
        raise fail(args.preprocess_config, "--phonemes espeak-mnemonic needs --symbols FILE "
                   "(data/symbols/espeak-mnemonic-zh.txt for a Mandarin voice of voxd's)")
    if args.phonemes == "espeak-ipa":
        if not os.path.isfile(DEFAULT_IPA_SYMBOLS):
            raise fail(DEFAULT_IPA_SYMBOLS, "no such file; pass --symbols FILE for an "
                                            "espeak-ipa voice")
        return read_symbol_file(DEFAULT_IPA_SYMBOLS), DEFAULT_IPA_SYMBOLS
    if language.startswith("zh"):
        raise fail(args.preprocess_config,
                   f"language '{language}': Mandarin pinyin voices (AISHELL3) are not supported "
                   "by the voxd front end yet; pass --symbols FILE to convert anyway")
    return list(symbol_tables.MING024_SYMBOLS), "ming024/FastSpeech2 text/symbols.py"


def acoustic_part(args):
    """Loads and checks the FastSpeech2 side; returns (tensors, config fields, symbols)."""
    if not args.preprocess_config or not args.model_config:
        raise ConvertError("--fastspeech2 needs --preprocess-config and --model-config")
    pre_path, model_path = args.preprocess_config, args.model_config
    preprocess = read_yaml(pre_path)
    model_cfg = read_yaml(model_path)
    sample_rate = field(preprocess, "preprocessing.audio.sampling_rate", pre_path, int)
    hop_length = field(preprocess, "preprocessing.stft.hop_length", pre_path, int)
    n_mels = field(preprocess, "preprocessing.mel.n_mel_channels", pre_path, int)
    levels = {}
    for kind in ("pitch", "energy"):
        level = field(preprocess, f"preprocessing.{kind}.feature", pre_path, str)
        if level not in ("phoneme_level", "frame_level"):
            raise fail(pre_path, f"field 'preprocessing.{kind}.feature' must be phoneme_level "
                                 f"or frame_level, got {level!r}")
        levels[kind] = level
    for name in ("encoder_layer", "encoder_head", "encoder_hidden", "decoder_layer",
                 "decoder_head", "decoder_hidden", "conv_filter_size"):
        field(model_cfg, f"transformer.{name}", model_path, int)
    field(model_cfg, "transformer.conv_kernel_size", model_path, list)
    for name in ("filter_size", "kernel_size"):
        field(model_cfg, f"variance_predictor.{name}", model_path, int)
    field(model_cfg, "variance_embedding.n_bins", model_path, int)
    field(model_cfg, "max_seq_len", model_path, int)
    multi_speaker = bool(field(model_cfg, "multi_speaker", model_path))

    language = args.language
    if not language:
        text = preprocess["preprocessing"].get("text")
        language = str(text.get("language", "en") if isinstance(text, dict) else "en")
        language = "en-us" if language == "en" else language
    symbols, _ = choose_symbols(args, language)

    stats_path = find_beside(args.stats, preprocess, pre_path, "stats.json")
    if stats_path is None:
        raise fail(pre_path, "stats.json not found under path.preprocessed_path; pass --stats")
    stats = read_stats(stats_path)
    speakers = None
    if multi_speaker:
        speakers_path = find_beside(args.speakers, preprocess, pre_path, "speakers.json")
        if speakers_path is None:
            raise fail(model_path, "multi_speaker is true but speakers.json was not found under "
                                   "path.preprocessed_path; pass --speakers")
        speakers = read_speakers(speakers_path)

    state = load_checkpoint(args.fastspeech2, "model", args.unsafe_load)
    check_fastspeech2(state, model_cfg, n_mels, len(symbols),
                      len(speakers) if speakers else 0, args.fastspeech2)
    model_json = {k: v for k, v in model_cfg.items() if k != "vocoder"}
    model_json["postnet"] = postnet_shape(state)
    fields = {"language": language, "sample_rate": sample_rate, "hop_length": hop_length,
              "n_mels": n_mels, "speakers": speakers,
              "acoustic": {"type": "fastspeech2", "weights": "acoustic.safetensors",
                           "model": model_json,
                           "pitch_feature_level": levels["pitch"],
                           "energy_feature_level": levels["energy"],
                           "stats": stats}}
    return state, fields, symbols


def shared_vocoder_config(weights_path, explicit_config):
    """The hifi-gan config (path, dict) for a shared vocoder file: --hifigan-config, else the
    vocoder.json or voice config.json beside the weights."""
    if explicit_config:
        return explicit_config, read_json(explicit_config)
    folder = os.path.dirname(os.path.abspath(weights_path))
    for filename in ("vocoder.json", "config.json"):
        path = os.path.join(folder, filename)
        if not os.path.isfile(path):
            continue
        top = read_json(path)
        section = top if filename == "vocoder.json" else top.get("vocoder", {})
        if isinstance(section, dict) and isinstance(section.get("model"), dict):
            model = dict(section["model"])
            for name, key in (("sampling_rate", "sample_rate"), ("hop_size", "hop_length")):
                if key in top:
                    model[name] = top[key]
            return path, model
    raise fail(weights_path, "no vocoder.json or voice config.json beside it; pass "
                             "--hifigan-config")


def vocoder_part(args):
    """Loads and checks the HiFi-GAN side; returns (tensors or None, model, config path, config)."""
    if args.hifigan and args.vocoder_weights:
        raise ConvertError("give --hifigan (write a vocoder) or --vocoder-weights (share one), "
                           "not both")
    if args.hifigan:
        if not args.hifigan_config:
            raise ConvertError("--hifigan needs --hifigan-config (jik876's config_v1.json or "
                               "ming024's hifigan/config.json)")
        config_path, config = args.hifigan_config, read_json(args.hifigan_config)
        if not isinstance(config, dict):
            raise fail(config_path, "expected a JSON object")
        model = hifigan_model(config, config_path)
        state = load_checkpoint(args.hifigan, "generator", args.unsafe_load)
        check_hifigan(state, model, args.hifigan)
        return state, model, config_path, config
    require_file(args.vocoder_weights)
    config_path, config = shared_vocoder_config(args.vocoder_weights, args.hifigan_config)
    if not isinstance(config, dict):
        raise fail(config_path, "expected a JSON object")
    model = hifigan_model(config, config_path)
    try:
        shared = safetensors_io.load(args.vocoder_weights)
    except Exception as e:  # a truncated or foreign file
        raise fail(args.vocoder_weights, f"not a safetensors file ({type(e).__name__})") from None
    check_hifigan(shared, model, args.vocoder_weights)
    return None, model, config_path, config


def check_pair(acoustic_fields, model, config_path, config, acoustic_source):
    """The acoustic model's mels, hop and sample rate against the vocoder's."""
    rates = model["upsample_rates"]
    hop = math.prod(rates)
    if model["num_mels"] != acoustic_fields["n_mels"]:
        raise fail(config_path, f"num_mels is {model['num_mels']} but the FastSpeech2 model "
                                f"({acoustic_source}) outputs {acoustic_fields['n_mels']} mel "
                                "channels")
    if hop != acoustic_fields["hop_length"]:
        raise fail(config_path, f"upsample_rates {rates} multiply to {hop} but "
                                f"preprocess.yaml's hop_length is {acoustic_fields['hop_length']}")
    rate = config.get("sampling_rate")
    if rate is not None and rate != acoustic_fields["sample_rate"]:
        raise fail(config_path, f"sampling_rate is {rate} but preprocess.yaml's sampling_rate "
                                f"is {acoustic_fields['sample_rate']}")


def check_vocoder_alone(model, config_path, config):
    """A vocoder's own config: hop_size, if given, must be the product of upsample_rates."""
    hop = math.prod(model["upsample_rates"])
    if "hop_size" in config and config["hop_size"] != hop:
        raise fail(config_path, f"upsample_rates {model['upsample_rates']} multiply to {hop} "
                                f"but hop_size is {config['hop_size']}")
    return hop


def write_atomically(out_dir, force, write):
    """Calls write(tmp_dir) then renames tmp_dir to out_dir; on failure nothing is left."""
    out_dir = os.path.abspath(out_dir)
    parent = os.path.dirname(out_dir)
    if os.path.exists(out_dir) and not force:
        raise fail(out_dir, "already exists; pass --force to replace it")
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="." + os.path.basename(out_dir) + ".tmp-", dir=parent)
    old = None
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)
        write(tmp)
        if os.path.exists(out_dir):
            old = tmp + ".old"
            os.rename(out_dir, old)
        os.rename(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old and os.path.exists(old) and not os.path.exists(out_dir):
            os.rename(old, out_dir)
        raise
    if old:
        shutil.rmtree(old, ignore_errors=True)


def format_json(value, indent=0):
    """JSON with objects one field a line and lists (of numbers, of lists) on one line."""
    if isinstance(value, dict) and value:
        pad = " " * (indent + 2)
        items = [f"{pad}{json.dumps(str(k), ensure_ascii=False)}: {format_json(v, indent + 2)}"
                 for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def write_json(path, data):
    with open(path, "w", encoding="utf-8") as f:
        f.write(format_json(data) + "\n")


def convert(args):
    """Runs the conversion described by parsed arguments; returns a summary line."""
    if args.chattts:
        return convert_chattts(args)
    if args.kantts:
        if args.fastspeech2 or args.hifigan or args.vocoder_weights:
            raise ConvertError("--kantts converts a whole Sambert-HiFiGAN voice; give it "
                               "without --fastspeech2, --hifigan or --vocoder-weights")
        return kantts_voice.convert(sys.modules[__name__], args)
    dtype = np.float16 if args.dtype == "f16" else np.float32
    if not args.fastspeech2 and not args.hifigan:
        raise ConvertError("nothing to convert: give --fastspeech2 and/or --hifigan, --kantts or "
                           "--chattts")
    if args.fastspeech2 and not args.hifigan and not args.vocoder_weights:
        raise ConvertError("a voice needs a vocoder: give --hifigan CKPT or --vocoder-weights "
                           "PATH")
    out_dir = os.path.abspath(args.out)
    name = args.name or os.path.basename(out_dir)
    voc_state, model, config_path, config = vocoder_part(args)
    source = {"converter": "voxd tools/convert_checkpoint.py"}

    if not args.fastspeech2:  # a vocoder to share
        hop = check_vocoder_alone(model, config_path, config)
        tensors = to_storage(voc_state, dtype, args.hifigan)
        meta = {"format": "voxd-vocoder", "version": 1, "type": "hifigan",
                "weights": "vocoder.safetensors", "sample_rate": config.get("sampling_rate"),
                "hop_length": hop, "n_mels": model["num_mels"], "model": model}

        def write_vocoder(tmp):
            safetensors_io.save(os.path.join(tmp, "vocoder.safetensors"), tensors,
                                {**source, "source": os.path.basename(args.hifigan)})
            write_json(os.path.join(tmp, "vocoder.json"),
                       {k: v for k, v in meta.items() if v is not None})

        write_atomically(out_dir, args.force, write_vocoder)
        return f"wrote vocoder {out_dir} ({len(tensors)} tensors, {args.dtype})"

    ac_state, fields, symbols = acoustic_part(args)
    check_pair(fields, model, config_path, config, args.fastspeech2)
    ac_tensors = to_storage(ac_state, dtype, args.fastspeech2)
    voc_tensors = to_storage(voc_state, dtype, args.hifigan) if voc_state is not None else None
    voc_weights = ("vocoder.safetensors" if voc_tensors is not None
                   else os.path.relpath(os.path.abspath(args.vocoder_weights), out_dir))
    voice = {"format": "voxd-voice", "version": 1, "name": name, "language": fields["language"],
             "sample_rate": fields["sample_rate"], "hop_length": fields["hop_length"],
             "n_mels": fields["n_mels"], "phonemes": args.phonemes, "symbols": "symbols.txt"}
    if fields["speakers"]:
        voice["speakers"] = fields["speakers"]
    voice["acoustic"] = fields["acoustic"]
    voice["vocoder"] = {"type": "hifigan", "weights": voc_weights, "model": model}

    def write_voice(tmp):
        safetensors_io.save(os.path.join(tmp, "acoustic.safetensors"), ac_tensors,
                            {**source, "source": os.path.basename(args.fastspeech2)})
        if voc_tensors is not None:
            safetensors_io.save(os.path.join(tmp, "vocoder.safetensors"), voc_tensors,
                                {**source, "source": os.path.basename(args.hifigan)})
        symbol_tables.write_symbols(os.path.join(tmp, "symbols.txt"), symbols)
        write_json(os.path.join(tmp, "config.json"), voice)

    write_atomically(out_dir, args.force, write_voice)
    return (f"wrote voice '{name}' to {out_dir} ({len(ac_tensors)} acoustic tensors, "
            f"{len(symbols)} symbols, vocoder {voc_weights}, {args.dtype})")


# ---------------------------------------------------------------------------------------------
# ChatTTS (2noise/ChatTTS's released asset/ folder)

# What ChatTTS's code fixes rather than its asset files (ChatTTS/config/config.py, core.py,
# model/processors.py at 1092c1f), recorded in the voice so that voxd need not know them.
CHATTTS_FILES = ("gpt/config.json", "gpt/model.safetensors", "Embed.safetensors",
                 "Decoder.safetensors", "DVAE.safetensors", "Vocos.safetensors",
                 "tokenizer/tokenizer.json")
CHATTTS_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
CHATTTS_N_MELS = 100
CHATTTS_AUDIO = {"sample_rate": 24000, "hop_length": 256, "n_mels": CHATTTS_N_MELS}
CHATTTS_VQ = {"levels": [5, 5, 5, 5], "R": 2}  # config.VQ; G is read from the weights
CHATTTS_DILATION = 2  # DVAEDecoder's default dilation, in no weight
CHATTTS_VOCOS = {"n_fft": 1024, "hop_length": 256, "win_length": 1024, "padding": "center"}
CHATTTS_REFINE_TEXT = {"prompt": "", "temperature": 0.7, "top_P": 0.7, "top_K": 20,
                       "repetition_penalty": 1.0, "max_new_token": 384, "min_new_token": 0}
CHATTTS_INFER_CODE = {"prompt": "[speed_5]", "temperature": 0.3, "top_P": 0.7, "top_K": 20,
                      "repetition_penalty": 1.05, "max_new_token": 2048, "min_new_token": 0}
CHATTTS_SAMPLING = {"min_tokens_to_keep": 3, "repetition_window": 16}
CHATTTS_PROMPTS = {"refine_text": "[Sbreak]{text}[Pbreak]{prompt}",
                   "infer_code": "[Stts][spk_emb]{txt_smp}{prompt}{text}[Ptts]",
                   "infer_code_without_speaker": "[Stts][empty_spk]{txt_smp}{prompt}{text}[Ptts]"}
# Tokens ChatTTS's code looks up by name; the voice records their ids.
CHATTTS_TOKENS = ("[Stts]", "[Ptts]", "[spk_emb]", "[empty_spk]", "[Sbreak]", "[Pbreak]",
                  "[Ebreak]", "[break_0]")
# Tensors of the Llama checkpoint that voxd does not use (transformers' own embedding table,
# which ChatTTS deletes after loading, and rotary caches some exports carry).
CHATTTS_GPT_DROPPED = ("embed_tokens.weight", "lm_head.weight")
# Buffers of torchaudio's MelSpectrogram (window, mel filterbank) in the feature extractors:
# fixed by sample_rate/n_fft/n_mels, used only to turn audio into mels; not copied.
CHATTTS_MEL_BUFFERS = ("feature_extractor.mel_spec.", "preprocessor_mel.mel_spec.")

_SAFETENSORS_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16,
                       "BF16": np.uint16, "I64": np.int64, "I32": np.int32}


def read_safetensors(path):
    """A safetensors file as name -> numpy array (BF16 widened to float32), checking the header
    and every tensor's extent, so a truncated or foreign file is one line naming it."""
    require_file(path)
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise fail(path, f"not a safetensors file ({len(raw)} bytes, no header)")
    (length,) = struct.unpack("<Q", raw[:8])
    if 8 + length > len(raw):
        raise fail(path, f"truncated: its header says {length} bytes but the file has "
                         f"{len(raw)}")
    try:
        header = json.loads(raw[8:8 + length])
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise fail(path, "not a safetensors file (its header is not JSON)") from None
    if not isinstance(header, dict):
        raise fail(path, "not a safetensors file (its header is not a JSON object)")
    base, out = 8 + length, {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = _SAFETENSORS_DTYPES[info["dtype"]]
            shape = [int(n) for n in info["shape"]]
            begin, end = (int(n) for n in info["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise fail(path, f"'{name}': unsupported or malformed header entry {info!r}") \
                from None
        expected = int(np.prod(shape)) * np.dtype(dtype).itemsize
        if base + end > len(raw):
            raise fail(path, f"truncated: '{name}' ends at byte {base + end} but the file has "
                             f"{len(raw)}")
        if end - begin != expected:
            raise fail(path, f"'{name}': {end - begin} bytes of data for shape {shape} "
                             f"{info['dtype']} ({expected} expected)")
        array = np.frombuffer(raw[base + begin:base + end],
                              dtype=np.dtype(dtype).newbyteorder("<")).reshape(shape)
        if info["dtype"] == "BF16":
            array = (array.astype(np.uint32) << 16).view(np.float32)
        out[name] = array.astype(array.dtype.newbyteorder("="))
    if not out:
        raise fail(path, "holds no tensors")
    return out


def _shape(state, key, expected, path, why):
    """Raises ConvertError unless state[key] exists with shape `expected`."""
    if key not in state:
        raise fail(path, f"missing tensor '{key}'")
    if list(state[key].shape) != list(expected):
        raise fail(path, f"'{key}' has shape {list(state[key].shape)} but {why} make it "
                         f"{list(expected)}")


def chattts_gpt_config(path):
    """asset/gpt/config.json (a transformers LlamaConfig with ChatTTS's extra fields) -> the
    voice's gpt section, without the sizes read from Embed.safetensors."""
    config = read_json(path)
    if not isinstance(config, dict):
        raise fail(path, "expected a JSON object")
    out = {}
    for name in ("hidden_size", "intermediate_size", "num_attention_heads",
                 "num_hidden_layers", "num_audio_tokens", "num_vq"):
        out[name] = field(config, name, path, int)
    kv = config.get("num_key_value_heads") or out["num_attention_heads"]
    head_dim = config.get("head_dim") or out["hidden_size"] // out["num_attention_heads"]
    if out["hidden_size"] % out["num_attention_heads"] and not config.get("head_dim"):
        raise fail(path, f"hidden_size {out['hidden_size']} is not a multiple of "
                         f"num_attention_heads {out['num_attention_heads']}")
    if not isinstance(kv, int) or out["num_attention_heads"] % kv:
        raise fail(path, f"field 'num_key_value_heads' must divide num_attention_heads, got {kv!r}")
    act = config.get("hidden_act", "silu")
    if act != "silu":
        raise fail(path, f"field 'hidden_act' is {act!r}; ChatTTS's Llama uses 'silu'")
    for name in ("attention_bias", "mlp_bias"):
        if config.get(name):
            raise fail(path, f"field '{name}' is true; ChatTTS's Llama has no biases")
    if config.get("rope_scaling"):
        raise fail(path, f"field 'rope_scaling' is {config['rope_scaling']!r}; only plain "
                         "rotary embeddings are supported")
    rms_eps = config.get("rms_norm_eps", 1e-6)     # LlamaConfig's defaults
    theta = config.get("rope_theta", 10000.0)
    for name, value in (("rms_norm_eps", rms_eps), ("rope_theta", theta)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise fail(path, f"field '{name}' must be a positive number, got {value!r}")
    text = config.get("num_text_tokens")  # null in the released config
    if text is not None and (isinstance(text, bool) or not isinstance(text, int) or text <= 0):
        raise fail(path, f"field 'num_text_tokens' must be a positive integer or null, got "
                         f"{text!r}")
    out.update(num_key_value_heads=kv, head_dim=head_dim, rms_norm_eps=float(rms_eps),
               rope_theta=float(theta), hidden_act="silu",
               max_position_embeddings=int(config.get("max_position_embeddings", 2048)),
               num_text_tokens=text)
    return out


def check_chattts_llama(state, gpt, path):
    """The Llama tensors of asset/gpt/model.safetensors against its config.json; returns the
    tensors voxd keeps (transformers' 'model.' prefix, if any, stripped)."""
    if state and all(k.startswith("model.") for k in state):
        state = {k[len("model."):]: v for k, v in state.items()}
    kept = {k: v for k, v in state.items()
            if k not in CHATTTS_GPT_DROPPED and not k.endswith("rotary_emb.inv_freq")}
    h, layers = gpt["hidden_size"], gpt["num_hidden_layers"]
    q_dim = gpt["num_attention_heads"] * gpt["head_dim"]
    kv_dim = gpt["num_key_value_heads"] * gpt["head_dim"]
    inner = gpt["intermediate_size"]
    found = count_layers(kept, "layers.")
    if found != layers:
        raise fail(path, f"has {found} layers but config.json's num_hidden_layers is {layers}")
    why = "config.json's sizes"
    for i in range(layers):
        p = f"layers.{i}."
        for name, shape in (("self_attn.q_proj.weight", [q_dim, h]),
                            ("self_attn.k_proj.weight", [kv_dim, h]),
                            ("self_attn.v_proj.weight", [kv_dim, h]),
                            ("self_attn.o_proj.weight", [h, q_dim]),
                            ("mlp.gate_proj.weight", [inner, h]),
                            ("mlp.up_proj.weight", [inner, h]),
                            ("mlp.down_proj.weight", [h, inner]),
                            ("input_layernorm.weight", [h]),
                            ("post_attention_layernorm.weight", [h])):
            _shape(kept, p + name, shape, path, why)
    _shape(kept, "norm.weight", [h], path, why)
    return kept


def fold_weight_norm_np(g, v):
    """torch's weight_norm (dim 0): w = v · (g / ‖v‖) with the norm of each row of v."""
    v64 = v.astype(np.float64)
    norm = np.sqrt((v64.reshape(v.shape[0], -1) ** 2).sum(1)).reshape([-1] + [1] * (v.ndim - 1))
    return (v64 * (g.astype(np.float64) / norm)).astype(np.float32)


def check_chattts_embed(state, gpt, path):
    """Embed.safetensors: emb_text, emb_code.{q}, head_text, head_code.{q} (weight norm folded).
    Fills gpt['num_text_tokens'] from emb_text when config.json leaves it null."""
    h, vq, audio = gpt["hidden_size"], gpt["num_vq"], gpt["num_audio_tokens"]
    if "emb_text.weight" not in state:
        raise fail(path, "missing tensor 'emb_text.weight'")
    rows = state["emb_text.weight"].shape[0]
    if gpt["num_text_tokens"] is None:
        gpt["num_text_tokens"] = int(rows)
    text = gpt["num_text_tokens"]
    _shape(state, "emb_text.weight", [text, h], path, "gpt/config.json's num_text_tokens and "
                                                      "hidden_size")
    found = count_layers(state, "emb_code.")
    if found != vq:
        raise fail(path, f"has {found} emb_code tables but gpt/config.json's num_vq is {vq}")
    out = {"emb_text.weight": state["emb_text.weight"]}
    heads = [("head_text", text)] + [(f"head_code.{q}", audio) for q in range(vq)]
    for q in range(vq):
        key = f"emb_code.{q}.weight"
        _shape(state, key, [audio, h], path, "gpt/config.json's num_audio_tokens and hidden_size")
        out[key] = state[key]
    for head, n in heads:
        g = head + ".parametrizations.weight.original0"
        v = head + ".parametrizations.weight.original1"
        why = "the embedding sizes"
        if g in state or v in state:
            _shape(state, g, [n, 1], path, why)
            _shape(state, v, [n, h], path, why)
            out[head + ".weight"] = fold_weight_norm_np(state[g], state[v])
        else:
            if head + ".weight" not in state:
                raise fail(path, f"missing tensor '{g}' (or a folded '{head}.weight')")
            _shape(state, head + ".weight", [n, h], path, why)
            out[head + ".weight"] = state[head + ".weight"]
    return out


def chattts_decoder_shape(state, prefix, path):
    """The sizes of a DVAEDecoder (conv_in, ConvNeXt blocks, conv_out) read from its weights,
    every block checked."""
    key = prefix + "conv_in.0.weight"
    if key not in state or state[key].ndim != 3:
        raise fail(path, f"missing tensor '{key}'" if key not in state else
                   f"'{key}' has shape {list(state[key].shape)}, not a Conv1d weight")
    bn_dim, idim = (int(n) for n in state[key].shape[:2])
    hidden_key = prefix + "conv_in.2.weight"
    if hidden_key not in state:
        raise fail(path, f"missing tensor '{hidden_key}'")
    hidden = int(state[hidden_key].shape[0])
    n_layer = count_layers(state, prefix + "decoder_block.")
    if n_layer == 0:
        raise fail(path, f"missing tensor '{prefix}decoder_block.0.dwconv.weight'")
    kernel = int(state[prefix + "decoder_block.0.dwconv.weight"].shape[-1]) \
        if prefix + "decoder_block.0.dwconv.weight" in state else 7
    out_key = prefix + "conv_out.weight"
    if out_key not in state:
        raise fail(path, f"missing tensor '{out_key}'")
    odim = int(state[out_key].shape[0])
    why = f"{prefix}conv_in's {hidden} channels"
    _shape(state, prefix + "conv_in.0.bias", [bn_dim], path, f"{key}'s shape")
    _shape(state, hidden_key, [hidden, bn_dim, 3], path, f"{key}'s shape")
    _shape(state, prefix + "conv_in.2.bias", [hidden], path, why)
    for i in range(n_layer):
        p = f"{prefix}decoder_block.{i}."
        for name, shape in (("dwconv.weight", [hidden, 1, kernel]), ("dwconv.bias", [hidden]),
                            ("norm.weight", [hidden]), ("norm.bias", [hidden]),
                            ("pwconv1.weight", [4 * hidden, hidden]),
                            ("pwconv1.bias", [4 * hidden]),
                            ("pwconv2.weight", [hidden, 4 * hidden]),
                            ("pwconv2.bias", [hidden]), ("weight", [hidden])):
            _shape(state, p + name, shape, path, why)
    _shape(state, out_key, [odim, hidden, 1], path, why)
    return {"idim": idim, "odim": odim, "hidden": hidden, "n_layer": n_layer,
            "bn_dim": bn_dim, "kernel": kernel, "dilation": CHATTTS_DILATION}


def check_chattts_dvae(state, path, in_channels, what):
    """Decoder.safetensors or DVAE.safetensors: coef, decoder.*, out_conv; `in_channels` is what
    the decoder must take after the 2-frame interleave (GPT hidden / 2, or vq dim / 2)."""
    _shape(state, "coef", [1, CHATTTS_N_MELS, 1], path, "ChatTTS's 100 mel bins")
    dec = chattts_decoder_shape(state, "decoder.", path)
    if dec["idim"] != in_channels:
        raise fail(path, f"'decoder.conv_in.0.weight' takes {dec['idim']} channels but {what} "
                         f"gives {in_channels}")
    _shape(state, "out_conv.weight", [CHATTTS_N_MELS, dec["odim"], 3], path,
           "decoder.conv_out's channels and 100 mel bins")
    return {"decoder": dec, "dim": dec["odim"]}


def check_chattts_vq(state, gpt, dvae_dim, path):
    """DVAE.safetensors' GFSQ: vq_layer.quantizer.rvqs.{g}.project_{in,out} -> the vq section."""
    prefix = "vq_layer.quantizer.rvqs."
    groups = count_layers(state, prefix)
    if groups == 0:
        raise fail(path, f"missing tensor '{prefix}0.project_out.weight' (the GFSQ)")
    levels, r = CHATTTS_VQ["levels"], CHATTTS_VQ["R"]
    if groups * r != gpt["num_vq"]:
        raise fail(path, f"has {groups} GFSQ groups of {r} residuals but gpt/config.json's "
                         f"num_vq is {gpt['num_vq']}")
    if math.prod(levels) + 1 != gpt["num_audio_tokens"]:
        raise fail(path, f"GFSQ levels {levels} give {math.prod(levels)} codes but "
                         f"gpt/config.json's num_audio_tokens is {gpt['num_audio_tokens']} "
                         "(codes + EOS)")
    per_group = 2 * dvae_dim // groups
    why = f"the decoder's {dvae_dim} input channels (2 frames x {dvae_dim} = {groups} groups)"
    for g in range(groups):
        p = f"{prefix}{g}."
        _shape(state, p + "project_out.weight", [per_group, len(levels)], path, why)
        _shape(state, p + "project_out.bias", [per_group], path, why)
        if p + "project_in.weight" in state:
            _shape(state, p + "project_in.weight", [len(levels), per_group], path, why)
    return {"dim": 2 * dvae_dim, "levels": list(levels), "G": groups, "R": r}


def check_chattts_encoder(state, dvae, vq, path):
    """The DVAE's encoder side (audio -> codes, for audio speaker prompts), if present."""
    if not any(k.startswith("encoder.") for k in state):
        return None
    enc = chattts_decoder_shape(state, "encoder.", path)
    _shape(state, "downsample_conv.0.weight", [dvae["dim"], CHATTTS_N_MELS, 3], path,
           "the decoder's dim and 100 mel bins")
    _shape(state, "downsample_conv.2.weight", [dvae["dim"], dvae["dim"], 4], path,
           "the decoder's dim")
    if enc["idim"] != dvae["dim"] or enc["odim"] != vq["dim"]:
        raise fail(path, f"the encoder maps {enc['idim']} -> {enc['odim']} channels but the "
                         f"DVAE needs {dvae['dim']} -> {vq['dim']}")
    return enc


def check_chattts_vocos(state, path):
    """Vocos.safetensors (VocosBackbone + ISTFTHead) -> the vocos section."""
    key = "backbone.embed.weight"
    if key not in state or state[key].ndim != 3:
        raise fail(path, f"missing tensor '{key}'")
    dim, channels, _ = (int(n) for n in state[key].shape)
    layers = count_layers(state, "backbone.convnext.")
    if layers == 0:
        raise fail(path, "missing tensor 'backbone.convnext.0.dwconv.weight'")
    inner_key = "backbone.convnext.0.pwconv1.weight"
    if inner_key not in state:
        raise fail(path, f"missing tensor '{inner_key}'")
    inner = int(state[inner_key].shape[0])
    why = f"backbone.embed's {dim} channels"
    if channels != CHATTTS_N_MELS:
        raise fail(path, f"'{key}' takes {channels} mel bins but the Decoder and DVAE make "
                         f"{CHATTTS_N_MELS}")
    _shape(state, key, [dim, CHATTTS_N_MELS, 7], path, why)
    for name in ("backbone.embed.bias", "backbone.norm.weight", "backbone.norm.bias",
                 "backbone.final_layer_norm.weight", "backbone.final_layer_norm.bias"):
        _shape(state, name, [dim], path, why)
    for i in range(layers):
        p = f"backbone.convnext.{i}."
        for name, shape in (("dwconv.weight", [dim, 1, 7]), ("dwconv.bias", [dim]),
                            ("norm.weight", [dim]), ("norm.bias", [dim]),
                            ("pwconv1.weight", [inner, dim]), ("pwconv1.bias", [inner]),
                            ("pwconv2.weight", [dim, inner]), ("pwconv2.bias", [dim]),
                            ("gamma", [dim])):
            _shape(state, p + name, shape, path, why)
    n_fft = CHATTTS_VOCOS["n_fft"]
    _shape(state, "head.out.weight", [n_fft + 2, dim], path, f"n_fft {n_fft} and {why}")
    _shape(state, "head.out.bias", [n_fft + 2], path, f"n_fft {n_fft}")
    if "head.istft.window" in state:
        _shape(state, "head.istft.window", [n_fft], path, f"n_fft {n_fft}")
    return dict(input_channels=channels, dim=dim, intermediate_dim=inner, num_layers=layers,
                sample_rate=CHATTTS_AUDIO["sample_rate"], **CHATTTS_VOCOS)


def read_chattts_tokenizer(path, num_text_tokens):
    """asset/tokenizer/tokenizer.json (a BERT WordPiece tokenizer, transformers' fast format):
    its vocabulary size must equal emb_text's rows; returns the ids of CHATTTS_TOKENS."""
    data = read_json(path)
    model = data.get("model") if isinstance(data, dict) else None
    if not isinstance(model, dict) or not isinstance(model.get("vocab"), dict):
        raise fail(path, "missing field 'model.vocab' (not a tokenizers tokenizer.json)")
    if model.get("type") != "WordPiece":
        raise fail(path, f"field 'model.type' is {model.get('type')!r}; ChatTTS's tokenizer "
                         "is BERT WordPiece")
    ids = dict(model["vocab"])
    added = data.get("added_tokens") or []
    if not isinstance(added, list):
        raise fail(path, "field 'added_tokens' must be a list")
    for token in added:
        if not isinstance(token, dict) or "content" not in token or "id" not in token:
            raise fail(path, f"malformed added_tokens entry {token!r}")
        ids[token["content"]] = token["id"]
    if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids.values()):
        raise fail(path, "token ids must be non-negative integers")
    size = max(ids.values()) + 1
    if size != num_text_tokens:
        raise fail(path, f"vocabulary has {size} tokens but Embed.safetensors' emb_text has "
                         f"{num_text_tokens} rows")
    missing = [t for t in CHATTTS_TOKENS if t not in ids]
    if missing:
        raise fail(path, f"missing ChatTTS token {missing[0]}")
    return {t: ids[t] for t in CHATTTS_TOKENS}


def read_spk_stat(path, hidden):
    """A text file holding ChatTTS's spk_stat string (base16384 of float16 std then mean)."""
    require_file(path)
    try:
        with open(path, encoding="utf-8") as f:
            std, mean = chattts_codec.decode_spk_stat(f.read())
    except (UnicodeDecodeError, ValueError) as e:
        raise fail(path, f"not a ChatTTS spk_stat string ({e})") from None
    if len(std) != hidden:
        raise fail(path, f"spk_stat holds {len(std)} values per half but the GPT's hidden_size "
                         f"is {hidden}")
    return std, mean


def read_speaker(spec, hidden):
    """NAME=FILE, FILE holding a spk_emb string (base16384 of LZMA2 of float16)."""
    name, sep, path = spec.partition("=")
    if not sep or not name or not all(c.isalnum() or c in "-_." for c in name):
        raise ConvertError(f"--speaker {spec!r}: expected NAME=FILE, NAME of letters, digits, "
                           "'-', '_' or '.'")
    require_file(path)
    try:
        with open(path, encoding="utf-8") as f:
            vector = chattts_codec.decode_spk_emb(f.read())
    except (UnicodeDecodeError, ValueError, lzma.LZMAError) as e:
        raise fail(path, f"not a ChatTTS spk_emb string ({e})") from None
    if len(vector) != hidden:
        raise fail(path, f"speaker has {len(vector)} values but the GPT's hidden_size is {hidden}")
    return name, vector


def find_chattts_assets(folder):
    """The asset folder itself, or the one inside `folder` (a HuggingFace 2Noise/ChatTTS
    snapshot holds asset/)."""
    if os.path.isdir(os.path.join(folder, "asset")) and not os.path.isdir(
            os.path.join(folder, "gpt")):
        folder = os.path.join(folder, "asset")
    if not os.path.isdir(folder):
        raise fail(folder, "no such directory")
    for name in CHATTTS_FILES:
        require_file(os.path.join(folder, name))
    return folder


def chattts_part(args):
    """Reads and checks a ChatTTS asset folder; returns (files to write, voice config)."""
    assets = find_chattts_assets(args.chattts)
    path = {name: os.path.join(assets, name) for name in CHATTTS_FILES}
    gpt = chattts_gpt_config(path["gpt/config.json"])
    llama = check_chattts_llama(read_safetensors(path["gpt/model.safetensors"]), gpt,
                                path["gpt/model.safetensors"])
    embed = check_chattts_embed(read_safetensors(path["Embed.safetensors"]), gpt,
                                path["Embed.safetensors"])
    tokens = read_chattts_tokenizer(path["tokenizer/tokenizer.json"], gpt["num_text_tokens"])

    decoder_state = read_safetensors(path["Decoder.safetensors"])
    half = gpt["hidden_size"] // 2
    decoder = check_chattts_dvae(decoder_state, path["Decoder.safetensors"], half,
                                 f"the GPT's hidden_size {gpt['hidden_size']} (2 frames x {half})")
    dvae_state = read_safetensors(path["DVAE.safetensors"])
    dec_key = "decoder.conv_in.0.weight"
    if dec_key not in dvae_state:
        raise fail(path["DVAE.safetensors"], f"missing tensor '{dec_key}'")
    dvae_in = int(dvae_state[dec_key].shape[1])
    vq = check_chattts_vq(dvae_state, gpt, dvae_in, path["DVAE.safetensors"])
    dvae = check_chattts_dvae(dvae_state, path["DVAE.safetensors"], vq["dim"] // 2,
                              f"the GFSQ's {vq['dim']} channels (2 frames x {vq['dim'] // 2})")
    dvae["vq"] = vq
    dvae["encoder"] = check_chattts_encoder(dvae_state, dvae, vq, path["DVAE.safetensors"])
    vocos_state = read_safetensors(path["Vocos.safetensors"])
    vocos = check_chattts_vocos(vocos_state, path["Vocos.safetensors"])

    speaker = {}
    speaker_tensors = {}
    if args.spk_stat:
        std, mean = read_spk_stat(args.spk_stat, gpt["hidden_size"])
        speaker_tensors.update({"spk_stat.std": std, "spk_stat.mean": mean})
        speaker["spk_stat"] = {"std": "spk_stat.std", "mean": "spk_stat.mean"}
    named = {}
    for spec in args.speaker or []:
        name, vector = read_speaker(spec, gpt["hidden_size"])
        if name in named:
            raise ConvertError(f"--speaker {name}: given twice")
        named[name] = "speakers." + name
        speaker_tensors[named[name]] = vector
    if named:
        speaker["named"] = named

    def without_mel_buffers(state):
        return {k: v for k, v in state.items() if not k.startswith(CHATTTS_MEL_BUFFERS)}

    dtype = np.float16 if args.dtype == "f16" else np.float32
    files = {
        "gpt.safetensors": (to_storage(llama, dtype, path["gpt/model.safetensors"]),
                            "gpt/model.safetensors"),
        "embed.safetensors": (to_storage(embed, dtype, path["Embed.safetensors"]),
                              "Embed.safetensors"),
        "decoder.safetensors": (to_storage(without_mel_buffers(decoder_state), dtype,
                                           path["Decoder.safetensors"]), "Decoder.safetensors"),
        "dvae.safetensors": (to_storage(without_mel_buffers(dvae_state), dtype,
                                        path["DVAE.safetensors"]), "DVAE.safetensors"),
        "vocos.safetensors": (to_storage(without_mel_buffers(vocos_state), dtype,
                                         path["Vocos.safetensors"]), "Vocos.safetensors"),
    }
    if speaker_tensors:  # float16 as ChatTTS keeps them, whatever --dtype says
        files["speaker.safetensors"] = ({k: v.astype(np.float16)
                                         for k, v in speaker_tensors.items()}, "speaker strings")
        speaker["weights"] = "speaker.safetensors"

    gpt_section = dict(gpt, weights="gpt.safetensors", embed_weights="embed.safetensors")
    decoder_section = dict(decoder["decoder"], dim=decoder["dim"],
                           weights="decoder.safetensors")
    dvae_section = {"weights": "dvae.safetensors", "decoder": dvae["decoder"],
                    "dim": dvae["dim"], "vq": vq, "encoder": dvae["encoder"]}
    name = args.name or os.path.basename(os.path.abspath(args.out))
    voice = {"format": "voxd-voice", "version": 1, "name": name, "type": "chattts",
             "language": "zh", **CHATTTS_AUDIO,
             "tokenizer": {"file": "tokenizer/tokenizer.json", "tokens": tokens},
             "gpt": gpt_section, "decoder": decoder_section, "dvae": dvae_section,
             "vocos": dict(vocos, weights="vocos.safetensors"),
             "refine_text": dict(CHATTTS_REFINE_TEXT, eos=tokens["[Ebreak]"],
                                 keep_below=tokens["[break_0]"]),
             "infer_code": dict(CHATTTS_INFER_CODE, eos=gpt["num_audio_tokens"] - 1),
             "sampling": dict(CHATTTS_SAMPLING), "prompts": dict(CHATTTS_PROMPTS)}
    if speaker:
        voice["speaker"] = speaker
    tokenizer_files = [os.path.join(assets, "tokenizer", n) for n in CHATTTS_TOKENIZER_FILES
                       if os.path.isfile(os.path.join(assets, "tokenizer", n))]
    return files, voice, tokenizer_files


def convert_chattts(args):
    """--chattts: a ChatTTS asset folder -> a voxd chattts voice directory."""
    if args.fastspeech2 or args.hifigan or args.vocoder_weights:
        raise ConvertError("--chattts converts a whole ChatTTS voice; give it without "
                           "--fastspeech2, --hifigan or --vocoder-weights")
    files, voice, tokenizer_files = chattts_part(args)
    source = {"converter": "voxd tools/convert_checkpoint.py"}

    def write_voice(tmp):
        for filename, (tensors, origin) in files.items():
            safetensors_io.save(os.path.join(tmp, filename), tensors,
                                {**source, "source": origin})
        os.makedirs(os.path.join(tmp, "tokenizer"))
        for src in tokenizer_files:
            shutil.copyfile(src, os.path.join(tmp, "tokenizer", os.path.basename(src)))
        write_json(os.path.join(tmp, "config.json"), voice)

    write_atomically(args.out, args.force, write_voice)
    count = sum(len(t) for t, _ in files.values())
    return (f"wrote ChatTTS voice '{voice['name']}' to {os.path.abspath(args.out)} ({count} "
            f"tensors, {voice['gpt']['num_text_tokens']} text tokens, {args.dtype})")


def build_parser():
    parser = argparse.ArgumentParser(
        prog="convert_checkpoint.py", description=__doc__.split("\n\n")[0],
        epilog="\n\n".join(__doc__.split("\n\n")[2:]),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    fs2 = parser.add_argument_group("acoustic model (ming024/FastSpeech2)")
    fs2.add_argument("--fastspeech2", metavar="CKPT", help="checkpoint, e.g. 900000.pth.tar")
    fs2.add_argument("--preprocess-config", metavar="YAML", help="its preprocess.yaml")
    fs2.add_argument("--model-config", metavar="YAML", help="its model.yaml")
    fs2.add_argument("--stats", metavar="JSON", help="its stats.json (default: found through "
                     "preprocess.yaml's path.preprocessed_path)")
    fs2.add_argument("--speakers", metavar="JSON", help="its speakers.json, for multi-speaker "
                     "models (default: found like --stats)")
    voc = parser.add_argument_group("vocoder (jik876/hifi-gan)")
    voc.add_argument("--hifigan", metavar="CKPT", help="generator checkpoint (g_02500000, "
                     "generator_LJSpeech.pth.tar or its .zip)")
    voc.add_argument("--hifigan-config", metavar="JSON", help="its config.json")
    voc.add_argument("--vocoder-weights", metavar="PATH", help="reference this existing "
                     "vocoder.safetensors instead of writing a copy")
    chat = parser.add_argument_group("ChatTTS (2noise/ChatTTS's released asset/ folder)")
    chat.add_argument("--chattts", metavar="DIR", help="the asset folder (gpt/, tokenizer/, "
                      "Embed, Decoder, DVAE and Vocos .safetensors), or the folder holding it")
    chat.add_argument("--spk-stat", metavar="FILE", help="a text file holding ChatTTS's "
                      "spk_stat string (Config.spk_stat in ChatTTS/config/config.py), for "
                      "random speakers")
    chat.add_argument("--speaker", metavar="NAME=FILE", action="append", help="a named "
                      "speaker: FILE holds a spk_emb string (as sample_random_speaker() "
                      "returns); may be repeated")
    kan = parser.add_argument_group("Sambert-HiFiGAN (modelscope/KAN-TTS, ModelScope's voices)")
    kan.add_argument("--kantts", metavar="DIR", help="a ModelScope model folder (voices/"
                     "voices.json, voices/<name>/am and voc) or one voice folder with am/ and "
                     "voc/")
    kan.add_argument("--kantts-voice", metavar="NAME", help="which voice of voices.json "
                     "(default: the first, ModelScope's default)")
    kan.add_argument("--kantts-languages", metavar="DIR", help="KAN-TTS's kantts/preprocess/"
                     "languages folder, for the phone inventory (default: the voice's dict/)")
    out = parser.add_argument_group("output")
    out.add_argument("--out", required=True, metavar="DIR", help="voice directory to create")
    out.add_argument("--name", help="voice name (default: the directory's name)")
    out.add_argument("--language", help="eSpeak language of the voice (default: from "
                     "preprocess.yaml, 'en' becoming 'en-us')")
    out.add_argument("--dtype", choices=["f32", "f16"], default="f32",
                     help="storage type of the weights (default f32)")
    out.add_argument("--phonemes", choices=["arpabet", "espeak-ipa", "espeak-mnemonic"],
                     default="arpabet", help="the front end's phoneme set (default arpabet, as "
                     "ming024's English; espeak-mnemonic for voxd's Mandarin voices)")
    out.add_argument("--symbols", metavar="FILE", help="symbol table, one per line (default: "
                     "ming024's for arpabet, data/symbols/espeak-ipa-en.txt for espeak-ipa)")
    out.add_argument("--force", action="store_true", help="replace DIR if it exists")
    out.add_argument("--unsafe-load", action="store_true", help="let torch.load unpickle "
                     "arbitrary objects (only for checkpoints you trust)")
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        print(convert(args))
    except ConvertError as e:
        print(f"convert_checkpoint: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # writing the voice: permissions, disk full
        print(f"convert_checkpoint: error: {e.filename or args.out}: {e.strerror or e}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
