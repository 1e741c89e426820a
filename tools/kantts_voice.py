"""KAN-TTS Sambert-HiFiGAN (ModelScope's Chinese voices) -> a voxd voice, for
tools/convert_checkpoint.py --kantts.

Reads a ModelScope model folder (voices/voices.json; per voice am/config.yaml +
am/ckpt/checkpoint_<N>.pth and voc/config.yaml + voc/ckpt/checkpoint_<N>.pth, the highest N), or
one voice folder holding am/ and voc/ (KAN-TTS training output arranged so). The acoustic and
vocoder state dicts are checked key by key and shape by shape against the module trees of
tools/reference/sambert.py and kantts_hifigan.py built from the configs (vocabulary sizes taken
from the checkpoint's tables), and the symbol inventories come from the voice's language
inventory (tools/kantts_symbols.py). Only the PyTorch KAN-TTS checkpoints are supported: the
TensorFlow checkpoints of old ModelScope revisions are refused by name.
"""
import os
import re
import xml.etree.ElementTree as ET

import numpy as np

import kantts_symbols

# Training-only tensors of MAS checkpoints (the aligner); KAN-TTS loads with strict=False.
IGNORED_PREFIXES = ("align_attention.",)
TENSORFLOW_MARKS = (".index", ".meta", ".pb")
# KAN-TTS's inventories (kantts_symbols.KNOWN_LANGUAGES) as the voice's language tag.
LANGUAGE_TAGS = {"PinYin": "zh-cn", "ZhHK": "yue", "WuuShanghai": "wuu", "Sichuan": "zh-sichuan"}


def _latest_checkpoint(cc, folder):
    """ckpt/checkpoint_<N>.pth with the highest N, as ModelScope's scan_ckpt picks it."""
    ckpt = os.path.join(folder, "ckpt")
    if not os.path.isdir(ckpt):
        raise cc.fail(folder, "no ckpt/ folder (expected ckpt/checkpoint_<steps>.pth)")
    names = os.listdir(ckpt)
    found = []
    for name in names:
        m = re.fullmatch(r"checkpoint_(\d+)\.pth", name)
        if m:
            found.append((int(m.group(1)), name))
    if not found:
        if any(n.endswith(TENSORFLOW_MARKS) or n.startswith("model.ckpt") or n == "checkpoint"
               for n in names):
            raise cc.fail(ckpt, "holds a TensorFlow checkpoint (an old ModelScope revision); "
                                "only the PyTorch KAN-TTS checkpoints (checkpoint_<steps>.pth) "
                                "are supported")
        raise cc.fail(ckpt, "no checkpoint_<steps>.pth in it")
    return os.path.join(ckpt, max(found)[1])


def _state(cc, path, keys, unsafe):
    """The state dict at ckpt[keys[0]][keys[1]]... as name -> numpy array."""
    ckpt = cc._torch_load(path, unsafe)
    for key in keys[:-1]:
        if not isinstance(ckpt, dict) or key not in ckpt:
            raise cc.fail(path, f"missing key '{key}' (a KAN-TTS checkpoint holds "
                                f"{{'model': ...}})")
        ckpt = ckpt[key]
    return cc.state_dict_to_numpy(ckpt, keys[-1], path)


def _check_against(cc, state, expected, path, what):
    """Every key of `expected` (name -> shape) present with its shape; nothing else but the
    ignored training-only tensors."""
    for name, shape in expected.items():
        if name not in state:
            raise cc.fail(path, f"missing tensor '{name}' of the {what} the config describes")
        if tuple(state[name].shape) != tuple(shape):
            raise cc.fail(path, f"tensor '{name}' has shape {list(state[name].shape)}, the "
                                f"config gives {list(shape)}")
    extra = sorted(n for n in state if n not in expected and not n.startswith(IGNORED_PREFIXES))
    if extra:
        raise cc.fail(path, f"tensors the config does not describe: {', '.join(extra[:4])}"
                            f"{' ...' if len(extra) > 4 else ''} (a config of another model?)")
    return {n: a for n, a in state.items() if n in expected}


def _table_rows(cc, state, name, path):
    if name not in state or state[name].ndim != 2:
        raise cc.fail(path, f"missing embedding table '{name}'")
    return int(state[name].shape[0])


def _flag(cc, params, name, path):
    value = params.get(name, False)
    if not isinstance(value, bool):
        raise cc.fail(path, f"field 'Model.KanTtsSAMBERT.params.{name}' must be true or false, "
                            f"got {value!r}")
    return value


def acoustic(cc, am_dir, unsafe):
    """(params, linguistic_unit, audio fields, sizes, state, checkpoint path, se, f0_mean_std) of
    the voice's Sambert. A personal voice's speaker embedding (SE: am/se.npy) and f0
    normalisation (NSF with nsf_norm_type mean_std: am/mvn.npy, rows mean and std) are read
    beside its checkpoint, as ModelScope's Voice reads them; None where the voice has none."""
    from reference import sambert
    config_path = os.path.join(am_dir, "config.yaml")
    config = cc.read_yaml(config_path)
    params = dict(cc.field(config, "Model.KanTtsSAMBERT.params", config_path))
    unit = cc.field(config, "linguistic_unit", config_path)
    for flag in ("FP", "using_byte"):
        if _flag(cc, params, flag, config_path):
            raise cc.fail(config_path, f"field 'Model.KanTtsSAMBERT.params.{flag}' is true; "
                                       "voxd converts Sambert with phone, tone, syllable flag and "
                                       "word segment input only")
    se_enabled = _flag(cc, params, "SE", config_path)
    nsf = _flag(cc, params, "NSF", config_path)
    path = _latest_checkpoint(cc, am_dir)
    state = _state(cc, path, ["model"], unsafe)
    tables = [("sy", "text_encoder.sy_emb.weight"), ("tone", "text_encoder.tone_emb.weight"),
              ("syllable_flag", "text_encoder.syllable_flag_emb.weight"),
              ("word_segment", "text_encoder.ws_emb.weight"), ("emotion", "emo_tokenizer.weight")]
    if not se_enabled:
        tables.append(("speaker", "spk_tokenizer.weight"))
    sizes = {key: _table_rows(cc, state, name, path) for key, name in tables}
    position = state.get("text_encoder.ling_enc.position_enc.position_enc")
    # An SE model has no speaker table: the reference is built with one of a row, left out of
    # the comparison, and the converter writes the embedding as the table (convert()).
    built = dict(params, **sizes, SE=False, NSF=False)
    if se_enabled:
        built["speaker"] = 1
    if position is not None and position.ndim == 3:
        built["max_len"] = int(position.shape[1])
    try:
        model = sambert.KanTtsSAMBERT(built)
    except (KeyError, ValueError, TypeError, NotImplementedError) as e:
        raise cc.fail(config_path, f"Model.KanTtsSAMBERT.params cannot build a Sambert ({e})")
    expected = {n: tuple(t.shape) for n, t in model.state_dict().items()
                if not (se_enabled and n == "spk_tokenizer.weight")}
    state = _check_against(cc, state, expected, path, "Sambert")
    se = None
    if se_enabled:
        se_path = os.path.join(am_dir, "se.npy")
        if not os.path.isfile(se_path):
            raise cc.fail(am_dir, "SE is true but there is no se.npy (the voice's speaker "
                                  "embedding) beside config.yaml")
        se = np.load(se_path).astype(np.float32).reshape(-1)
        if se.size != params.get("speaker_units"):
            raise cc.fail(se_path, f"holds {se.size} values, speaker_units is "
                                   f"{params.get('speaker_units')!r}")
    f0_mean_std = None
    if nsf:
        norm = params.get("nsf_norm_type", "mean_std")
        if norm not in ("mean_std", "global"):
            raise cc.fail(config_path, f"field 'Model.KanTtsSAMBERT.params.nsf_norm_type' is "
                                       f"{norm!r}; KAN-TTS knows 'mean_std' and 'global'")
        if norm == "mean_std":
            mvn_path = os.path.join(am_dir, "mvn.npy")
            if not os.path.isfile(mvn_path):
                raise cc.fail(am_dir, "NSF with nsf_norm_type mean_std needs mvn.npy (the f0's "
                                      "mean and std) beside config.yaml")
            mvn = np.load(mvn_path).astype(np.float64).reshape(-1)
            if mvn.size != 2:
                raise cc.fail(mvn_path, f"holds {mvn.size} values, expected the f0's mean and std")
            f0_mean_std = [float(mvn[0]), float(mvn[1])]
    audio = config.get("audio_config", {})
    return params, unit, audio, sizes, state, path, se, f0_mean_std


def vocoder(cc, voc_dir, unsafe):
    """(params, audio fields, state) of the voice's HiFiGAN generator."""
    from reference import kantts_hifigan
    config_path = os.path.join(voc_dir, "config.yaml")
    config = cc.read_yaml(config_path)
    params = dict(cc.field(config, "Model.Generator.params", config_path))
    path = _latest_checkpoint(cc, voc_dir)
    state = _state(cc, path, ["model", "generator"], unsafe)
    try:
        model = kantts_hifigan.Generator(**params)
    except (TypeError, ValueError, AssertionError, NotImplementedError) as e:
        raise cc.fail(config_path, f"Model.Generator.params cannot build the generator ({e})")
    expected = {n: tuple(t.shape) for n, t in model.state_dict().items()}
    state = _check_against(cc, state, expected, path, "HiFiGAN generator")
    return params, config.get("audio_config", {}), state, path


def find_voice(cc, folder, name):
    """The voice folder (holding am/ and voc/) and its name."""
    listing = os.path.join(folder, "voices", "voices.json")
    if os.path.isfile(listing):
        voices = cc.read_json(listing).get("voices")
        if not isinstance(voices, list) or not voices:
            raise cc.fail(listing, "field 'voices' must be a non-empty list of voice folders")
        present = [v for v in voices if os.path.isdir(os.path.join(folder, "voices", str(v)))]
        if name is None:
            if not present:
                raise cc.fail(listing, "none of its voices has a folder under voices/")
            name = present[0]
        elif name not in present:
            raise cc.fail(listing, f"no voice '{name}' (voices with a folder: "
                                   f"{', '.join(map(str, present)) or 'none'})")
        return os.path.join(folder, "voices", name), name
    if os.path.isdir(os.path.join(folder, "am")) and os.path.isdir(os.path.join(folder, "voc")):
        return folder, name or os.path.basename(os.path.abspath(folder))
    raise cc.fail(folder, "neither a ModelScope model folder (voices/voices.json) nor a voice "
                          "folder (am/ and voc/)")


def find_inventory(cc, voice_dir, explicit, language):
    """The folder of PhoneSet.xml and tonelist.txt: --kantts-languages/<language>, or the
    voice's own dict/ (older ModelScope releases ship one)."""
    candidates = []
    if explicit:
        candidates += [os.path.join(explicit, language), explicit]
    candidates.append(os.path.join(voice_dir, "dict"))
    for folder in candidates:
        if os.path.isfile(os.path.join(folder, "PhoneSet.xml")):
            return folder
    raise cc.fail(voice_dir, f"no phone inventory for language '{language}': give "
                             "--kantts-languages KAN-TTS/kantts/preprocess/languages (the "
                             "folder of <language>/PhoneSet.xml and tonelist.txt)")


def _audio_int(cc, audio, key, path):
    value = audio.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise cc.fail(path, f"field 'audio_config.{key}' must be a positive integer, got "
                            f"{value!r}")
    return value


def convert(cc, args):
    """--kantts: the voice `args.kantts_voice` (default: the first) -> a voxd sambert voice.
    `cc` is tools/convert_checkpoint.py (its readers, checks and writers)."""
    voice_dir, name = find_voice(cc, args.kantts, args.kantts_voice)
    params, unit, am_audio, sizes, am_state, am_path, se, f0_mean_std = acoustic(
        cc, os.path.join(voice_dir, "am"), args.unsafe_load)
    voc_params, voc_audio, voc_state, voc_path = vocoder(
        cc, os.path.join(voice_dir, "voc"), args.unsafe_load)
    am_config = os.path.join(voice_dir, "am", "config.yaml")
    voc_config = os.path.join(voice_dir, "voc", "config.yaml")
    rate = _audio_int(cc, am_audio, "sampling_rate", am_config)
    hop = _audio_int(cc, am_audio, "hop_length", am_config)
    if _audio_int(cc, voc_audio, "sampling_rate", voc_config) != rate:
        raise cc.fail(voc_config, f"audio_config.sampling_rate differs from the acoustic "
                                  f"model's {rate}")
    scales = voc_params.get("upsample_scales", [])
    product = 1
    for s in scales:
        product *= s
    if product != hop:
        raise cc.fail(voc_config, f"the upsample scales multiply to {product}, the acoustic "
                                  f"model's hop_length is {hop}")
    nsf = bool(params.get("NSF"))
    if bool(voc_params.get("nsf_params")) != nsf:
        raise cc.fail(voc_config, "nsf_params is set but the acoustic model makes no f0 (its NSF "
                                  "is false)" if not nsf else "the acoustic model makes f0 for "
                                  "an NSF vocoder, this one has no nsf_params")
    mel_channels = params.get("num_mels", 0) - (2 if nsf else 0)
    if voc_params.get("in_channels") != mel_channels:
        raise cc.fail(voc_config, f"in_channels {voc_params.get('in_channels')!r} differs from "
                                  f"the acoustic model's {mel_channels} mel channels (num_mels "
                                  f"{params.get('num_mels')!r}{', less f0 and voicing' if nsf else ''})")
    if nsf and voc_params["nsf_params"].get("sampling_rate") != rate:
        raise cc.fail(voc_config, f"nsf_params.sampling_rate "
                                  f"{voc_params['nsf_params'].get('sampling_rate')!r} differs from "
                                  f"the audio's {rate}")
    if not isinstance(unit, dict):
        raise cc.fail(am_config, "field 'linguistic_unit' must be a mapping")
    inventory = find_inventory(cc, voice_dir, args.kantts_languages,
                               kantts_symbols.language(unit))
    try:
        symbols = kantts_symbols.symbol_lists(inventory, unit)
    except ValueError as e:
        raise cc.fail(am_config, str(e)) from None
    except (OSError, ET.ParseError) as e:
        raise cc.fail(inventory, f"cannot read the phone inventory ({e})") from None
    if se is not None:
        # The speaker embedding stands for every speaker of the list: a table of its copies, one
        # a speaker (the mask's row left out, as ModelScope builds its tables).
        sizes["speaker"] = len(symbols["speaker_category"]) - 1
        am_state = dict(am_state)
        am_state["spk_tokenizer.weight"] = np.tile(se, (sizes["speaker"], 1))
    for channel, table in (("sy", "sy"), ("tone", "tone"), ("syllable_flag", "syllable_flag"),
                           ("word_segment", "word_segment"), ("emo_category", "emotion"),
                           ("speaker_category", "speaker")):
        count = len(symbols[channel])
        if sizes[table] not in (count, count - 1):  # ModelScope drops the mask row
            raise cc.fail(am_path, f"the {table} table has {sizes[table]} rows, the inventory "
                                   f"({inventory}) has {count} {channel} symbols")
    dtype = np.float16 if args.dtype == "f16" else np.float32
    out_name = args.name or name
    voice = {
        "format": "voxd-voice", "version": 1, "name": out_name, "type": "sambert",
        "language": LANGUAGE_TAGS[kantts_symbols.language(unit)],
        "sample_rate": rate, "hop_length": hop, "n_mels": mel_channels,
        "acoustic": {"type": "sambert", "weights": "acoustic.safetensors", "model": params,
                     "symbols": symbols},
        "vocoder": {"type": "kantts-hifigan", "weights": "vocoder.safetensors",
                    "model": voc_params},
    }
    if f0_mean_std is not None:
        voice["acoustic"]["f0_mean_std"] = f0_mean_std
    source = {"converter": "voxd tools/convert_checkpoint.py"}

    def write_voice(tmp):
        cc.safetensors_io.save(os.path.join(tmp, "acoustic.safetensors"),
                               cc.to_storage(am_state, dtype, am_path),
                               {**source, "source": os.path.basename(am_path)})
        cc.safetensors_io.save(os.path.join(tmp, "vocoder.safetensors"),
                               cc.to_storage(voc_state, dtype, voc_path),
                               {**source, "source": os.path.basename(voc_path)})
        cc.write_json(os.path.join(tmp, "config.json"), voice)

    cc.write_atomically(args.out, args.force, write_voice)
    speakers = [s for s in symbols["speaker_category"] if s not in kantts_symbols.RESERVED_TAIL]
    return (f"wrote Sambert-HiFiGAN voice '{out_name}' to {os.path.abspath(args.out)} "
            f"({len(am_state) + len(voc_state)} tensors, {rate} Hz, speakers "
            f"{', '.join(speakers)}, {args.dtype})")
