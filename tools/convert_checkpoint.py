#!/usr/bin/env python3
"""Converts FastSpeech2 (ming024) and HiFi-GAN (jik876) PyTorch checkpoints to a voxd voice.

A voice directory (docs/voice-format.md) holds config.json, symbols.txt, acoustic.safetensors
and vocoder.safetensors; tensors keep the original state-dict names (weight norm stays split in
weight_g/weight_v; voxd folds it at load). Checks the checkpoints against their configs and each
other first, and writes through a temporary directory, so a failed run leaves nothing behind.

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
"""
import argparse
import io
import json
import math
import os
import pickle
import shutil
import sys
import tempfile
import zipfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

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
    dtype = np.float16 if args.dtype == "f16" else np.float32
    if not args.fastspeech2 and not args.hifigan:
        raise ConvertError("nothing to convert: give --fastspeech2 and/or --hifigan")
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
    out = parser.add_argument_group("output")
    out.add_argument("--out", required=True, metavar="DIR", help="voice directory to create")
    out.add_argument("--name", help="voice name (default: the directory's name)")
    out.add_argument("--language", help="eSpeak language of the voice (default: from "
                     "preprocess.yaml, 'en' becoming 'en-us')")
    out.add_argument("--dtype", choices=["f32", "f16"], default="f32",
                     help="storage type of the weights (default f32)")
    out.add_argument("--phonemes", choices=["arpabet", "espeak-ipa"], default="arpabet",
                     help="the front end's phoneme set (default arpabet, as ming024's English)")
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
