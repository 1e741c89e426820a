"""Tests of tools/convert_checkpoint.py and tools/symbols.py.

Tiny random FastSpeech2 and HiFi-GAN models (tools/reference/, the originals' module trees) are
saved in the originals' checkpoint formats with ming024-style configs, converted, and the voice
directory is checked. Run from the repository root:

    /usr/bin/python3 -m unittest discover -s tools/tests -v
"""
import contextlib
import copy
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import zipfile

import numpy as np
import torch

TOOLS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, TOOLS)

import chattts_codec  # noqa: E402
import convert_checkpoint  # noqa: E402
import make_test_voices as tiny  # noqa: E402
import safetensors_io  # noqa: E402
import symbols as symbol_tables  # noqa: E402
from reference import chattts  # noqa: E402

SYMBOLS = symbol_tables.MING024_SYMBOLS


def run_converter(argv):
    """Runs the converter in-process; returns (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = convert_checkpoint.main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


class SymbolTableTest(unittest.TestCase):
    def test_matches_ming024_ids(self):
        # Counted and looked up in ming024/FastSpeech2's text/symbols.py.
        self.assertEqual(len(SYMBOLS), 360)
        known = {"_": 0, "-": 1, "!": 2, " ": 11, "A": 12, "a": 38, "z": 63, "@AA": 64,
                 "@AA1": 66, "@ZH": 147, "@b": 148, "@a1": 171, "@rr": 356, "@sp": 357,
                 "@spn": 358, "@sil": 359}
        for symbol, index in known.items():
            self.assertEqual(SYMBOLS.index(symbol), index, symbol)
        self.assertEqual(len(symbol_tables.arpabet_symbols()), 84)
        self.assertEqual(len(symbol_tables.pinyin_symbols()), 209)
        self.assertEqual(len(set(SYMBOLS)), len(SYMBOLS))

    def test_the_arpabet_voice_table_is_the_committed_one(self):
        table = symbol_tables.arpabet_voice_symbols()
        self.assertEqual(len(table), 88)
        self.assertEqual(table[:2], ["_", "@AA"])
        self.assertEqual(table[-3:], ["@sp", "@spn", "@sil"])
        committed = os.path.join(os.path.dirname(__file__), "..", "..", "data", "symbols",
                                 "arpabet-en.txt")
        self.assertEqual(symbol_tables.read_symbols(committed), table)

    def test_file_round_trip_keeps_space_symbol(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "symbols.txt")
            symbol_tables.write_symbols(path, SYMBOLS)
            self.assertEqual(symbol_tables.read_symbols(path), SYMBOLS)

    def test_rejects_duplicates(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "symbols.txt")
            with open(path, "w") as f:
                f.write("_\na\na\n")
            with self.assertRaisesRegex(ValueError, "appears twice"):
                symbol_tables.read_symbols(path)


class ConverterTestCase(unittest.TestCase):
    """Builds, once per class, tiny checkpoints and configs in ming024/jik876 formats."""

    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory()
        cls.dir = cls._tmp.name
        cls.fs2_model = tiny.build_fastspeech2(tiny.TINY_MODEL_YAML, tiny.PREPROCESS_YAML,
                                               tiny.STATS_JSON, len(SYMBOLS), seed=11)
        cls.hifigan_model = tiny.build_hifigan(tiny.TINY_HIFIGAN_JSON, seed=12)
        cls.fs2_ckpt = cls.path("900000.pth.tar")
        tiny.save_fastspeech2_checkpoint(cls.fs2_model, cls.fs2_ckpt)
        cls.hifigan_ckpt = cls.path("g_02500000")
        tiny.save_hifigan_checkpoint(cls.hifigan_model, cls.hifigan_ckpt)
        cls.preprocess = cls.path("preprocess.yaml")
        tiny.write_yaml(cls.preprocess, tiny.PREPROCESS_YAML)
        cls.model_yaml = cls.path("model.yaml")
        tiny.write_yaml(cls.model_yaml, tiny.TINY_MODEL_YAML)
        cls.stats = cls.path("stats.json")
        tiny.write_json(cls.stats, tiny.STATS_JSON)
        cls.hifigan_config = cls.path("config.json")
        tiny.write_json(cls.hifigan_config, tiny.TINY_HIFIGAN_JSON)

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    @classmethod
    def path(cls, name):
        return os.path.join(cls.dir, name)

    def setUp(self):
        self._out = tempfile.TemporaryDirectory()
        self.out_root = self._out.name
        self.out = os.path.join(self.out_root, "voice")

    def tearDown(self):
        self._out.cleanup()

    def acoustic_args(self, **override):
        args = {"--fastspeech2": self.fs2_ckpt, "--preprocess-config": self.preprocess,
                "--model-config": self.model_yaml, "--stats": self.stats}
        args.update(override)
        return [x for k, v in args.items() if v is not None for x in (k, v)]

    def full_args(self, **override):
        args = {"--hifigan": self.hifigan_ckpt, "--hifigan-config": self.hifigan_config,
                "--out": self.out}
        args.update(override)
        acoustic = {k: v for k, v in args.items() if k not in
                    ("--hifigan", "--hifigan-config", "--out", "--vocoder-weights")}
        rest = {k: v for k, v in args.items() if k not in acoustic}
        return self.acoustic_args(**acoustic) + [x for k, v in rest.items() if v is not None
                                                 for x in (k, v)]

    def convert_ok(self, argv):
        code, out, err = run_converter(argv)
        self.assertEqual(code, 0, err)
        return out

    def convert_fails(self, argv, *fragments):
        """Runs a conversion that must fail with one stderr line holding every fragment."""
        code, _, err = run_converter(argv)
        self.assertEqual(code, 1)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        for fragment in fragments:
            self.assertIn(str(fragment), err)
        self.assertFalse(os.path.exists(self.out), "a failed run left an output directory")
        self.assertEqual([n for n in os.listdir(self.out_root) if ".tmp-" in n], [])
        return err

    def write_variant(self, name, writer, data):
        path = os.path.join(self.out_root, name)
        writer(path, data)
        return path

    def config(self, directory=None):
        with open(os.path.join(directory or self.out, "config.json")) as f:
            return json.load(f)


def state_numpy(model):
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}


class ConvertTest(ConverterTestCase):
    def test_tensors_round_trip_exactly(self):
        self.convert_ok(self.full_args())
        for filename, model in (("acoustic.safetensors", self.fs2_model),
                                ("vocoder.safetensors", self.hifigan_model)):
            stored = safetensors_io.load(os.path.join(self.out, filename))
            expected = state_numpy(model)
            self.assertEqual(sorted(stored), sorted(expected), filename)
            for name, array in expected.items():
                self.assertEqual(stored[name].dtype, array.dtype, name)
                np.testing.assert_array_equal(stored[name], array, err_msg=name)
        vocoder = safetensors_io.load(os.path.join(self.out, "vocoder.safetensors"))
        self.assertIn("conv_pre.weight_g", vocoder)
        self.assertIn("resblocks.11.convs2.2.weight_v", vocoder)

    def test_config_fields(self):
        self.convert_ok(self.full_args(**{"--name": "tiny-test"}))
        config = self.config()
        self.assertEqual(config["format"], "voxd-voice")
        self.assertEqual(config["version"], 1)
        self.assertEqual(config["name"], "tiny-test")
        self.assertEqual(config["language"], "en-us")
        self.assertEqual((config["sample_rate"], config["hop_length"], config["n_mels"]),
                         (22050, 256, 80))
        self.assertEqual(config["phonemes"], "arpabet")
        self.assertEqual(config["symbols"], "symbols.txt")
        self.assertNotIn("speakers", config)
        acoustic = config["acoustic"]
        self.assertEqual(acoustic["type"], "fastspeech2")
        self.assertEqual(acoustic["weights"], "acoustic.safetensors")
        expected_model = {k: v for k, v in tiny.TINY_MODEL_YAML.items() if k != "vocoder"}
        expected_model["postnet"] = {"postnet_embedding_dim": tiny.TINY_POSTNET_DIM,
                                     "postnet_kernel_size": 5, "postnet_n_convolutions": 5}
        self.assertEqual(acoustic["model"], expected_model)
        self.assertEqual(acoustic["pitch_feature_level"], "phoneme_level")
        self.assertEqual(acoustic["energy_feature_level"], "phoneme_level")
        self.assertEqual(acoustic["stats"], tiny.STATS_JSON)
        vocoder = config["vocoder"]
        self.assertEqual(vocoder["type"], "hifigan")
        self.assertEqual(vocoder["weights"], "vocoder.safetensors")
        self.assertEqual(vocoder["model"], {k: tiny.TINY_HIFIGAN_JSON[k] for k in
                                            convert_checkpoint.HIFIGAN_GENERATOR_FIELDS})

    def test_symbols_file(self):
        self.convert_ok(self.full_args())
        with open(os.path.join(self.out, "symbols.txt"), encoding="utf-8") as f:
            lines = f.read().split("\n")
        self.assertEqual(lines[:-1], SYMBOLS)
        self.assertEqual(lines[-1], "")
        self.assertEqual(lines[11], " ")

    def test_frame_level_features(self):
        pre = copy.deepcopy(tiny.PREPROCESS_YAML)
        pre["preprocessing"]["pitch"]["feature"] = "frame_level"
        path = self.write_variant("frame.yaml", tiny.write_yaml, pre)
        self.convert_ok(self.full_args(**{"--preprocess-config": path}))
        acoustic = self.config()["acoustic"]
        self.assertEqual(acoustic["pitch_feature_level"], "frame_level")
        self.assertEqual(acoustic["energy_feature_level"], "phoneme_level")

    def test_f16(self):
        self.convert_ok(self.full_args(**{"--dtype": "f16"}))
        for filename, model in (("acoustic.safetensors", self.fs2_model),
                                ("vocoder.safetensors", self.hifigan_model)):
            stored = safetensors_io.load(os.path.join(self.out, filename))
            for name, array in state_numpy(model).items():
                if array.dtype.kind != "f":
                    self.assertEqual(stored[name].dtype, array.dtype, name)
                    np.testing.assert_array_equal(stored[name], array, err_msg=name)
                elif name.endswith("_bins"):  # bucket edges stay exact
                    self.assertEqual(stored[name].dtype, np.float32, name)
                    np.testing.assert_array_equal(stored[name], array, err_msg=name)
                else:
                    self.assertEqual(stored[name].dtype, np.float16, name)
                    np.testing.assert_array_equal(stored[name], array.astype(np.float16),
                                                  err_msg=name)
        self.assertLess(os.path.getsize(os.path.join(self.out, "vocoder.safetensors")),
                        os.path.getsize(self.hifigan_ckpt) * 0.6)

    def test_dataparallel_prefix_and_bare_state_dict(self):
        wrapped = self.path("module.pth.tar")
        tiny.save_fastspeech2_checkpoint(self.fs2_model, wrapped, module_prefix=True)
        bare = os.path.join(self.out_root, "bare_generator.pt")
        torch.save(self.hifigan_model.state_dict(), bare)
        self.convert_ok(self.full_args(**{"--fastspeech2": wrapped, "--hifigan": bare}))
        acoustic = safetensors_io.load(os.path.join(self.out, "acoustic.safetensors"))
        self.assertIn("encoder.src_word_emb.weight", acoustic)
        self.assertFalse(any(k.startswith("module.") for k in acoustic))
        vocoder = safetensors_io.load(os.path.join(self.out, "vocoder.safetensors"))
        self.assertEqual(sorted(vocoder), sorted(self.hifigan_model.state_dict()))

    def test_legacy_serialization(self):
        # Checkpoints saved by torch < 1.6 (or with the zip format off) are not zip archives.
        legacy = os.path.join(self.out_root, "legacy.pth.tar")
        torch.save({"model": self.fs2_model.state_dict(), "optimizer": {"lr": 0.1}}, legacy,
                   _use_new_zipfile_serialization=False)
        self.convert_ok(self.full_args(**{"--fastspeech2": legacy}))
        stored = safetensors_io.load(os.path.join(self.out, "acoustic.safetensors"))
        np.testing.assert_array_equal(stored["mel_linear.weight"],
                                      state_numpy(self.fs2_model)["mel_linear.weight"])

    def test_zipped_generator_as_ming024_ships_it(self):
        inner = os.path.join(self.out_root, "generator_LJSpeech.pth.tar")
        tiny.save_hifigan_checkpoint(self.hifigan_model, inner)
        zipped = inner + ".zip"
        with zipfile.ZipFile(zipped, "w") as z:
            z.write(inner, "generator_LJSpeech.pth.tar")
        self.convert_ok(self.full_args(**{"--hifigan": zipped}))
        vocoder = safetensors_io.load(os.path.join(self.out, "vocoder.safetensors"))
        np.testing.assert_array_equal(vocoder["conv_post.weight_v"],
                                      state_numpy(self.hifigan_model)["conv_post.weight_v"])

    def test_multi_speaker(self):
        model_yaml = copy.deepcopy(tiny.TINY_MODEL_YAML)
        model_yaml["multi_speaker"] = True
        speakers = {"SSB0005": 0, "SSB0009": 1, "SSB0011": 2}
        model = tiny.build_fastspeech2(model_yaml, tiny.PREPROCESS_YAML, tiny.STATS_JSON,
                                       len(SYMBOLS), n_speakers=3, seed=5)
        ckpt = os.path.join(self.out_root, "multi.pth.tar")
        tiny.save_fastspeech2_checkpoint(model, ckpt)
        model_path = self.write_variant("multi.yaml", tiny.write_yaml, model_yaml)
        speakers_path = self.write_variant("speakers.json", tiny.write_json, speakers)
        args = self.full_args(**{"--fastspeech2": ckpt, "--model-config": model_path})
        self.convert_fails(args, model_path, "speakers.json")
        wrong = self.write_variant("two.json", tiny.write_json, {"a": 0, "b": 1})
        self.convert_fails(args + ["--speakers", wrong], ckpt, "speaker_emb.weight")
        self.convert_ok(args + ["--speakers", speakers_path])
        self.assertEqual(self.config()["speakers"], speakers)
        stored = safetensors_io.load(os.path.join(self.out, "acoustic.safetensors"))
        np.testing.assert_array_equal(stored["speaker_emb.weight"],
                                      model.speaker_emb.weight.detach().numpy())

    def test_finds_stats_through_preprocessed_path(self):
        # ming024's layout: config/<dataset>/preprocess.yaml, preprocessed_data/<dataset>/.
        root = os.path.join(self.out_root, "FastSpeech2")
        os.makedirs(os.path.join(root, "config", "Tiny"))
        os.makedirs(os.path.join(root, "preprocessed_data", "Tiny"))
        pre = os.path.join(root, "config", "Tiny", "preprocess.yaml")
        tiny.write_yaml(pre, tiny.PREPROCESS_YAML)
        tiny.write_json(os.path.join(root, "preprocessed_data", "Tiny", "stats.json"),
                        tiny.STATS_JSON)
        self.convert_ok(self.full_args(**{"--preprocess-config": pre, "--stats": None}))
        self.assertEqual(self.config()["acoustic"]["stats"], tiny.STATS_JSON)
        shutil.rmtree(self.out)
        self.convert_fails(self.full_args(**{"--stats": None}), self.preprocess, "stats.json")

    def test_custom_symbols_and_espeak_ipa(self):
        table = ["_"] + [f"s{i}" for i in range(40)]
        model = tiny.build_fastspeech2(tiny.TINY_MODEL_YAML, tiny.PREPROCESS_YAML,
                                       tiny.STATS_JSON, len(table), seed=7)
        ckpt = os.path.join(self.out_root, "ipa.pth.tar")
        tiny.save_fastspeech2_checkpoint(model, ckpt)
        symbols_path = os.path.join(self.out_root, "ipa.txt")
        symbol_tables.write_symbols(symbols_path, table)
        self.convert_ok(self.full_args(**{"--fastspeech2": ckpt}) +
                        ["--phonemes", "espeak-ipa", "--symbols", symbols_path])
        self.assertEqual(self.config()["phonemes"], "espeak-ipa")
        self.assertEqual(symbol_tables.read_symbols(os.path.join(self.out, "symbols.txt")),
                         table)

    def test_shared_vocoder(self):
        first = os.path.join(self.out_root, "first")
        self.convert_ok(self.full_args(**{"--out": first}))
        shared = os.path.join(first, "vocoder.safetensors")
        # The vocoder's config comes from the voice beside the weights...
        self.convert_ok(self.full_args(**{"--hifigan": None, "--hifigan-config": None,
                                          "--vocoder-weights": shared}))
        self.assertFalse(os.path.exists(os.path.join(self.out, "vocoder.safetensors")))
        vocoder = self.config()["vocoder"]
        self.assertEqual(vocoder["weights"], "../first/vocoder.safetensors")
        self.assertEqual(vocoder["model"], self.config(first)["vocoder"]["model"])
        self.assertTrue(os.path.isfile(os.path.normpath(os.path.join(self.out,
                                                                     vocoder["weights"]))))
        # ...or from an explicit --hifigan-config.
        self.convert_ok(self.full_args(**{"--hifigan": None, "--vocoder-weights": shared}) +
                        ["--force"])
        self.assertEqual(self.config()["vocoder"]["weights"], "../first/vocoder.safetensors")

    def test_vocoder_only_then_shared(self):
        vocoder_dir = os.path.join(self.out_root, "hifigan-v1")
        self.convert_ok(["--hifigan", self.hifigan_ckpt, "--hifigan-config", self.hifigan_config,
                         "--out", vocoder_dir])
        self.assertEqual(sorted(os.listdir(vocoder_dir)), ["vocoder.json", "vocoder.safetensors"])
        with open(os.path.join(vocoder_dir, "vocoder.json")) as f:
            meta = json.load(f)
        self.assertEqual(meta["format"], "voxd-vocoder")
        self.assertEqual((meta["sample_rate"], meta["hop_length"], meta["n_mels"]),
                         (22050, 256, 80))
        self.convert_ok(self.acoustic_args() + [
            "--vocoder-weights", os.path.join(vocoder_dir, "vocoder.safetensors"),
            "--out", self.out])
        self.assertEqual(self.config()["vocoder"]["weights"], "../hifigan-v1/vocoder.safetensors")

    def test_force_replaces(self):
        self.convert_ok(self.full_args())
        self.convert_fails_keeping_old(self.full_args(), "already exists")
        self.convert_ok(self.full_args(**{"--name": "second"}) + ["--force"])
        self.assertEqual(self.config()["name"], "second")
        self.assertEqual(sorted(os.listdir(self.out_root)), ["voice"])

    def convert_fails_keeping_old(self, argv, fragment):
        code, _, err = run_converter(argv)
        self.assertEqual(code, 1)
        self.assertIn(fragment, err)
        self.assertTrue(os.path.isfile(os.path.join(self.out, "config.json")))

    def test_help_runs_as_a_script(self):
        result = subprocess.run([sys.executable, os.path.join(TOOLS, "convert_checkpoint.py"),
                                 "--help"], capture_output=True, text=True, check=True)
        self.assertIn("--fastspeech2", result.stdout)
        self.assertIn("Example", result.stdout)


class ErrorTest(ConverterTestCase):
    def test_missing_file(self):
        missing = os.path.join(self.out_root, "nope.pth.tar")
        self.convert_fails(self.full_args(**{"--fastspeech2": missing}), missing, "no such file")
        self.convert_fails(self.full_args(**{"--hifigan-config": missing}), missing,
                           "no such file")

    def test_not_a_checkpoint(self):
        junk = os.path.join(self.out_root, "junk.pth.tar")
        with open(junk, "wb") as f:
            f.write(b"this is not a checkpoint\n" * 10)
        self.convert_fails(self.full_args(**{"--fastspeech2": junk}), junk,
                           "not a PyTorch checkpoint")
        listed = os.path.join(self.out_root, "list.pt")
        torch.save([1, 2, 3], listed)
        self.convert_fails(self.full_args(**{"--hifigan": listed}), listed, "not a checkpoint")

    def test_missing_keys(self):
        state = self.fs2_model.state_dict()
        del state["decoder.layer_stack.1.pos_ffn.w_2.weight"]
        ckpt = os.path.join(self.out_root, "partial.pth.tar")
        torch.save({"model": state}, ckpt)
        self.convert_fails(self.full_args(**{"--fastspeech2": ckpt}), ckpt,
                           "decoder.layer_stack.1.pos_ffn.w_2.weight")
        wrong_key = os.path.join(self.out_root, "wrong_key.pt")
        torch.save({"model": self.hifigan_model.state_dict(), "step": 3}, wrong_key)
        self.convert_fails(self.full_args(**{"--hifigan": wrong_key}), wrong_key,
                           "missing key 'generator'")
        # The generator given where the acoustic model belongs.
        self.convert_fails(self.full_args(**{"--fastspeech2": self.hifigan_ckpt}),
                           self.hifigan_ckpt, "missing key")

    def test_layer_count_differs_from_model_yaml(self):
        model_yaml = copy.deepcopy(tiny.TINY_MODEL_YAML)
        model_yaml["transformer"]["encoder_layer"] = 1
        path = self.write_variant("one_layer.yaml", tiny.write_yaml, model_yaml)
        self.convert_fails(self.full_args(**{"--model-config": path}), self.fs2_ckpt,
                           "2 encoder layers", "1")

    def test_embedding_rows_differ_from_symbols(self):
        table = os.path.join(self.out_root, "short.txt")
        symbol_tables.write_symbols(table, SYMBOLS[:100])
        self.convert_fails(self.full_args() + ["--symbols", table], self.fs2_ckpt,
                           "encoder.src_word_emb.weight", "361 rows", "100 symbols")

    def test_mel_channels_differ(self):
        pre = copy.deepcopy(tiny.PREPROCESS_YAML)
        pre["preprocessing"]["mel"]["n_mel_channels"] = 100
        model = tiny.build_fastspeech2(tiny.TINY_MODEL_YAML, pre, tiny.STATS_JSON, len(SYMBOLS))
        ckpt = os.path.join(self.out_root, "mel100.pth.tar")
        tiny.save_fastspeech2_checkpoint(model, ckpt)
        pre_path = self.write_variant("mel100.yaml", tiny.write_yaml, pre)
        self.convert_fails(self.full_args(**{"--fastspeech2": ckpt,
                                             "--preprocess-config": pre_path}),
                           self.hifigan_config, "num_mels is 80", "100 mel channels")
        # The checkpoint itself disagrees with its preprocess.yaml.
        self.convert_fails(self.full_args(**{"--preprocess-config": pre_path}), self.fs2_ckpt,
                           "mel_linear.weight")

    def test_upsampling_differs_from_hop_length(self):
        pre = copy.deepcopy(tiny.PREPROCESS_YAML)
        pre["preprocessing"]["stft"]["hop_length"] = 300
        pre_path = self.write_variant("hop300.yaml", tiny.write_yaml, pre)
        self.convert_fails(self.full_args(**{"--preprocess-config": pre_path}),
                           self.hifigan_config, "[8, 8, 2, 2]", "256", "300")

    def test_sample_rates_differ(self):
        config = dict(tiny.TINY_HIFIGAN_JSON, sampling_rate=24000)
        path = self.write_variant("hifigan24k.json", tiny.write_json, config)
        self.convert_fails(self.full_args(**{"--hifigan-config": path}), path, "24000", "22050")

    def test_hifigan_config_differs_from_checkpoint(self):
        config = dict(tiny.TINY_HIFIGAN_JSON, upsample_initial_channel=64)
        path = self.write_variant("wide.json", tiny.write_json, config)
        self.convert_fails(self.full_args(**{"--hifigan-config": path}), self.hifigan_ckpt,
                           "upsample_initial_channel")
        config = dict(tiny.TINY_HIFIGAN_JSON)
        del config["upsample_rates"]
        path = self.write_variant("partial.json", tiny.write_json, config)
        self.convert_fails(self.full_args(**{"--hifigan-config": path}), path,
                           "missing field 'upsample_rates'")

    def test_missing_config_field(self):
        pre = copy.deepcopy(tiny.PREPROCESS_YAML)
        del pre["preprocessing"]["audio"]["sampling_rate"]
        path = self.write_variant("nosr.yaml", tiny.write_yaml, pre)
        self.convert_fails(self.full_args(**{"--preprocess-config": path}), path,
                           "preprocessing.audio.sampling_rate")

    def test_pinyin_voices_refused_without_symbols(self):
        pre = copy.deepcopy(tiny.PREPROCESS_YAML)
        pre["preprocessing"]["text"]["language"] = "zh"
        path = self.write_variant("aishell3.yaml", tiny.write_yaml, pre)
        self.convert_fails(self.full_args(**{"--preprocess-config": path}), path,
                           "not supported by the voxd front end yet", "--symbols")
        table = os.path.join(self.out_root, "table.txt")
        symbol_tables.write_symbols(table, SYMBOLS)
        self.convert_ok(self.full_args(**{"--preprocess-config": path}) + ["--symbols", table])
        self.assertEqual(self.config()["language"], "zh")

    def test_needs_a_vocoder(self):
        self.convert_fails(self.acoustic_args() + ["--out", self.out], "vocoder")
        self.convert_fails(self.full_args(**{"--vocoder-weights": self.hifigan_ckpt}),
                           "not both")

    def test_refuses_arbitrary_pickles(self):
        evil = os.path.join(self.out_root, "evil.pth.tar")
        torch.save({"model": self.fs2_model.state_dict(), "hook": unittest.TestCase}, evil)
        self.convert_fails(self.full_args(**{"--fastspeech2": evil}), evil, "--unsafe-load")
        self.convert_ok(self.full_args(**{"--fastspeech2": evil}) + ["--unsafe-load"])

    def test_failure_while_writing_leaves_nothing(self):
        original = convert_checkpoint.write_json

        def broken(path, data):
            raise OSError(28, "No space left on device")

        convert_checkpoint.write_json = broken
        try:
            self.convert_fails(self.full_args(), "No space left on device")
        finally:
            convert_checkpoint.write_json = original
        self.assertEqual(os.listdir(self.out_root), [])


class ChatTTSTestCase(unittest.TestCase):
    """Builds, once per class, a tiny random ChatTTS asset/ folder and speaker strings."""

    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory()
        cls.dir = cls._tmp.name
        cls.asset = os.path.join(cls.dir, "asset")
        cls.models = tiny.write_chattts_assets(cls.asset, seed=21)
        cls.speakers = tiny.write_chattts_speakers(cls.dir, tiny.TINY_CHATTTS["gpt"]["hidden_size"],
                                                   seed=22)

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def setUp(self):
        self._out = tempfile.TemporaryDirectory()
        self.out_root = self._out.name
        self.out = os.path.join(self.out_root, "voice")

    def tearDown(self):
        self._out.cleanup()

    def args(self, asset=None, *extra):
        return ["--chattts", asset or self.asset, "--out", self.out, *extra]

    def convert_ok(self, argv):
        code, out, err = run_converter(argv)
        self.assertEqual(code, 0, err)
        return out

    def convert_fails(self, argv, *fragments):
        code, _, err = run_converter(argv)
        self.assertEqual(code, 1, err)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        for fragment in fragments:
            self.assertIn(str(fragment), err)
        self.assertFalse(os.path.exists(self.out), "a failed run left an output directory")
        return err

    def copy_asset(self):
        """A private copy of the asset folder to break."""
        path = os.path.join(self.out_root, "broken", "asset")
        shutil.copytree(self.asset, path)
        return path

    def config(self):
        with open(os.path.join(self.out, "config.json"), encoding="utf-8") as f:
            return json.load(f)

    def weights(self, name):
        return safetensors_io.load(os.path.join(self.out, name))


class ChatTTSConvertTest(ChatTTSTestCase):
    def test_config_fields(self):
        self.convert_ok(self.args(None, "--name", "tiny"))
        config = self.config()
        self.assertEqual((config["format"], config["version"], config["type"], config["name"]),
                         ("voxd-voice", 1, "chattts", "tiny"))
        self.assertEqual((config["sample_rate"], config["hop_length"], config["n_mels"]),
                         (24000, 256, 100))
        gpt = config["gpt"]
        sizes = tiny.TINY_CHATTTS["gpt"]
        for name in ("hidden_size", "num_attention_heads", "num_key_value_heads",
                     "num_hidden_layers", "intermediate_size", "rms_norm_eps", "rope_theta",
                     "max_position_embeddings", "num_vq", "num_audio_tokens"):
            self.assertEqual(gpt[name], sizes[name], name)
        self.assertEqual(gpt["num_text_tokens"], self.models[0].embed.emb_text.weight.shape[0])
        self.assertEqual((gpt["head_dim"], gpt["hidden_act"]), (16, "silu"))
        self.assertEqual((gpt["weights"], gpt["embed_weights"]),
                         ("gpt.safetensors", "embed.safetensors"))
        self.assertEqual(config["decoder"], dict(tiny.TINY_CHATTTS["decoder"], kernel=7,
                                                 dilation=2, dim=16,
                                                 weights="decoder.safetensors"))
        dvae = config["dvae"]
        self.assertEqual(dvae["decoder"], dict(tiny.TINY_CHATTTS["dvae_decoder"], kernel=7,
                                               dilation=2))
        self.assertEqual(dvae["encoder"], dict(tiny.TINY_CHATTTS["dvae_encoder"], kernel=7,
                                               dilation=2))
        self.assertEqual((dvae["dim"], dvae["vq"]), (16, tiny.TINY_CHATTTS["vq"]))
        vocos = config["vocos"]
        for name, value in tiny.TINY_CHATTTS["vocos"].items():
            self.assertEqual(vocos[name], value, name)
        tokens = config["tokenizer"]["tokens"]
        first = len(tiny.BERT_SPECIAL_TOKENS) + len(tiny.TINY_WORDPIECES)
        for token in ("[Stts]", "[Ptts]", "[spk_emb]", "[empty_spk]", "[Ebreak]", "[break_0]"):
            self.assertEqual(tokens[token], first + tiny.CHATTTS_SPECIAL_TOKENS.index(token))
        self.assertEqual(config["tokenizer"]["file"], "tokenizer/tokenizer.json")
        refine, code = config["refine_text"], config["infer_code"]
        self.assertEqual((refine["temperature"], refine["top_P"], refine["top_K"],
                          refine["repetition_penalty"], refine["max_new_token"],
                          refine["min_new_token"], refine["prompt"]),
                         (0.7, 0.7, 20, 1.0, 384, 0, ""))
        self.assertEqual((refine["eos"], refine["keep_below"]),
                         (tokens["[Ebreak]"], tokens["[break_0]"]))
        self.assertEqual((code["temperature"], code["top_P"], code["top_K"],
                          code["repetition_penalty"], code["max_new_token"],
                          code["min_new_token"], code["prompt"], code["eos"]),
                         (0.3, 0.7, 20, 1.05, 2048, 0, "[speed_5]", 625))
        self.assertEqual(config["sampling"], {"min_tokens_to_keep": 3, "repetition_window": 16})
        self.assertNotIn("speaker", config)

    def test_tensors(self):
        self.convert_ok(self.args())
        gpt, decoder, dvae, vocos = self.models
        llama = self.weights("gpt.safetensors")
        self.assertEqual(sorted(llama), sorted(gpt.gpt.state_dict()))
        for name, value in gpt.gpt.state_dict().items():
            np.testing.assert_array_equal(llama[name], value.numpy(), err_msg=name)
        embed = self.weights("embed.safetensors")
        self.assertEqual(sorted(embed), sorted(gpt.embed.state_dict()))
        self.assertIn("head_code.3.weight", embed)
        for name, value in gpt.embed.state_dict().items():  # weight norm folded back
            np.testing.assert_allclose(embed[name], value.numpy(), rtol=2e-6, atol=1e-7,
                                       err_msg=name)
        for filename, model in (("decoder.safetensors", decoder), ("dvae.safetensors", dvae),
                                ("vocos.safetensors", vocos)):
            stored = self.weights(filename)
            expected = {k: v for k, v in model.state_dict().items() if ".mel_spec." not in k}
            self.assertEqual(sorted(stored), sorted(expected), filename)
            for name, value in expected.items():
                np.testing.assert_array_equal(stored[name], value.numpy(), err_msg=name)
        self.assertIn("vq_layer.quantizer.rvqs.1.project_out.weight",
                      self.weights("dvae.safetensors"))
        self.assertIn("encoder.decoder_block.1.weight", self.weights("dvae.safetensors"))
        for name in convert_checkpoint.CHATTTS_TOKENIZER_FILES:
            with open(os.path.join(self.asset, "tokenizer", name), "rb") as a, \
                    open(os.path.join(self.out, "tokenizer", name), "rb") as b:
                self.assertEqual(a.read(), b.read(), name)

    def test_reference_runs_on_the_voice(self):
        # The converted files load into fresh reference modules and compute what the
        # originals' (weight-norm) state does.
        self.convert_ok(self.args())
        config = self.config()
        gpt, decoder, dvae, vocos = self.models

        def load(module, filename, strict=True):
            state = {k: torch.from_numpy(v.copy()) for k, v in self.weights(filename).items()}
            module.load_state_dict(state, strict=strict)
            return module.eval()

        fresh = chattts.GPT(config["gpt"])
        load(fresh.gpt, "gpt.safetensors")
        load(fresh.embed, "embed.safetensors")
        emb = torch.randn(1, 7, config["gpt"]["hidden_size"])
        with torch.no_grad():
            for head in ("text_logits", "code_logits"):
                torch.testing.assert_close(getattr(fresh.embed, head)(fresh(emb)[0]),
                                           getattr(gpt.embed, head)(gpt(emb)[0]),
                                           rtol=1e-5, atol=1e-5)
            hidden = torch.randn(1, config["gpt"]["hidden_size"], 5)
            d = chattts.DVAE({k: v for k, v in config["decoder"].items()
                              if k not in ("dim", "weights")}, config["decoder"]["dim"])
            torch.testing.assert_close(load(d, "decoder.safetensors")(hidden), decoder(hidden))
            codes = torch.randint(0, 625, (1, 4, 5))
            v = chattts.DVAE(config["dvae"]["decoder"], config["dvae"]["dim"],
                             config["dvae"]["vq"], encoder_config=config["dvae"]["encoder"])
            load(v, "dvae.safetensors", strict=False)
            torch.testing.assert_close(v(codes), dvae(codes))
            mel = torch.randn(1, 100, 6)
            voc = load(chattts.Vocos(config["vocos"]), "vocos.safetensors", strict=False)
            torch.testing.assert_close(voc(mel), vocos(mel))

    def test_speakers(self):
        self.convert_ok(self.args(None, "--spk-stat", self.speakers["spk_stat"],
                                  "--speaker", f"tiny={self.speakers['tiny']}"))
        speaker = self.config()["speaker"]
        self.assertEqual(speaker, {"spk_stat": {"std": "spk_stat.std", "mean": "spk_stat.mean"},
                                   "named": {"tiny": "speakers.tiny"},
                                   "weights": "speaker.safetensors"})
        stored = self.weights("speaker.safetensors")
        with open(self.speakers["spk_stat"], encoding="utf-8") as f:
            std, mean = chattts_codec.decode_spk_stat(f.read())
        with open(self.speakers["tiny"], encoding="utf-8") as f:
            vector = chattts_codec.decode_spk_emb(f.read())
        for name, expected in (("spk_stat.std", std), ("spk_stat.mean", mean),
                               ("speakers.tiny", vector)):
            self.assertEqual(stored[name].dtype, np.float16, name)
            np.testing.assert_array_equal(stored[name], expected, err_msg=name)

    def test_snapshot_folder_and_f16(self):
        # A HuggingFace snapshot holds asset/; the converter finds it.
        self.convert_ok(self.args(self.dir, "--dtype", "f16"))
        embed = self.weights("embed.safetensors")
        self.assertEqual(embed["emb_text.weight"].dtype, np.float16)
        self.assertEqual(self.config()["gpt"]["num_text_tokens"],
                         embed["emb_text.weight"].shape[0])

    def test_folded_embed_and_model_prefix_accepted(self):
        asset = self.copy_asset()
        path = os.path.join(asset, "Embed.safetensors")
        safetensors_io.save(path, {k: v.numpy() for k, v in
                                   self.models[0].embed.state_dict().items()})
        gpt_path = os.path.join(asset, "gpt", "model.safetensors")
        state = safetensors_io.load(gpt_path)
        state = {"model." + k: v for k, v in state.items()}
        state["model.embed_tokens.weight"] = np.zeros((10, 32), np.float32)
        safetensors_io.save(gpt_path, state)
        self.convert_ok(self.args(asset))
        self.assertEqual(sorted(self.weights("gpt.safetensors")),
                         sorted(self.models[0].gpt.state_dict()))

    def test_codec_round_trips(self):
        rng = np.random.default_rng(5)
        for n in range(30):
            data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
            self.assertEqual(chattts_codec.b14_decode(chattts_codec.b14_encode(data)), data)
        self.assertEqual(chattts_codec.b14_encode(b"\x00" * 7), "\u4e00" * 4)
        self.assertEqual(chattts_codec.b14_encode(b"\xff"), "\u8dc0\u3d01")
        vector = rng.standard_normal(32).astype(np.float16)
        np.testing.assert_array_equal(
            chattts_codec.decode_spk_emb(chattts_codec.encode_spk_emb(vector)), vector)


class ChatTTSErrorTest(ChatTTSTestCase):
    def test_missing_file(self):
        asset = self.copy_asset()
        for name in ("gpt/model.safetensors", "tokenizer/tokenizer.json", "Vocos.safetensors"):
            path = os.path.join(asset, name)
            os.rename(path, path + ".away")
            self.convert_fails(self.args(asset), path, "no such file")
            os.rename(path + ".away", path)
        self.convert_fails(self.args(os.path.join(self.out_root, "nowhere")), "no such directory")

    def test_truncated_file(self):
        asset = self.copy_asset()
        path = os.path.join(asset, "DVAE.safetensors")
        with open(path, "rb") as f:
            data = f.read()
        with open(path, "wb") as f:
            f.write(data[:len(data) // 2])
        self.convert_fails(self.args(asset), path, "truncated")
        with open(path, "wb") as f:
            f.write(data[:5])
        self.convert_fails(self.args(asset), path, "no header")
        with open(path, "wb") as f:
            f.write(b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!")
        self.convert_fails(self.args(asset), path, "not JSON")

    def test_missing_tensor(self):
        asset = self.copy_asset()
        for filename, key in (("Embed.safetensors",
                               "head_code.3.parametrizations.weight.original1"),
                              ("gpt/model.safetensors", "layers.1.mlp.down_proj.weight"),
                              ("Decoder.safetensors", "out_conv.weight"),
                              ("Vocos.safetensors", "head.out.bias"),
                              ("DVAE.safetensors", "vq_layer.quantizer.rvqs.0.project_out.bias")):
            path = os.path.join(asset, filename)
            original = safetensors_io.load(path)
            safetensors_io.save(path, {k: v for k, v in original.items() if k != key})
            self.convert_fails(self.args(asset), path, key)
            safetensors_io.save(path, original)

    def test_shape_differs_from_config(self):
        asset = self.copy_asset()
        path = os.path.join(asset, "gpt", "config.json")
        with open(path) as f:
            config = json.load(f)
        model = os.path.join(asset, "gpt", "model.safetensors")
        for field_name, value, fragment in (("intermediate_size", 48, "mlp.gate_proj.weight"),
                                            ("num_hidden_layers", 3, "has 2 layers"),
                                            ("num_attention_heads", 4, "k_proj")):
            tiny.write_json(path, dict(config, **{field_name: value}))
            self.convert_fails(self.args(asset), model, fragment)
        tiny.write_json(path, dict(config, num_audio_tokens=600))
        self.convert_fails(self.args(asset), os.path.join(asset, "Embed.safetensors"),
                           "emb_code.0.weight", "num_audio_tokens")
        tiny.write_json(path, dict(config, num_text_tokens=99))
        self.convert_fails(self.args(asset), "emb_text.weight", "num_text_tokens")
        tiny.write_json(path, dict(config, rope_scaling={"type": "linear", "factor": 2.0}))
        self.convert_fails(self.args(asset), path, "rope_scaling")
        del config["hidden_size"]
        tiny.write_json(path, config)
        self.convert_fails(self.args(asset), path, "missing field 'hidden_size'")

    def test_models_disagree(self):
        asset = self.copy_asset()
        # A Decoder for a GPT of another width.
        path = os.path.join(asset, "Decoder.safetensors")
        wide = tiny.chattts.DVAE(dict(tiny.TINY_CHATTTS["decoder"], idim=24), 16)
        safetensors_io.save(path, {k: v.numpy() for k, v in wide.state_dict().items()})
        self.convert_fails(self.args(asset), path, "takes 24 channels", "hidden_size 32")

    def test_tokenizer_vocab_differs_from_emb_text(self):
        asset = self.copy_asset()
        path = os.path.join(asset, "tokenizer", "tokenizer.json")
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        short = dict(data, added_tokens=data["added_tokens"][:-1])
        tiny.write_json(path, short)
        self.convert_fails(self.args(asset), path, "154 tokens", "155 rows")
        renamed = json.loads(json.dumps(data))
        for token in renamed["added_tokens"]:
            if token["content"] == "[spk_emb]":
                token["content"] = "[speaker]"
        tiny.write_json(path, renamed)
        self.convert_fails(self.args(asset), path, "[spk_emb]")
        tiny.write_json(path, dict(data, model={"type": "BPE", "vocab": {}}))
        self.convert_fails(self.args(asset), path, "WordPiece")

    def test_speaker_files(self):
        bad = os.path.join(self.out_root, "bad.txt")
        with open(bad, "w", encoding="utf-8") as f:
            f.write("not base16384")
        self.convert_fails(self.args(None, "--spk-stat", bad), bad, "spk_stat")
        self.convert_fails(self.args(None, "--speaker", f"x={bad}"), bad, "spk_emb")
        self.convert_fails(self.args(None, "--speaker", "no-file-given"), "NAME=FILE")
        other = os.path.join(self.out_root, "wide.txt")
        with open(other, "w", encoding="utf-8") as f:
            f.write(chattts_codec.encode_spk_stat(np.ones(8), np.zeros(8)))
        self.convert_fails(self.args(None, "--spk-stat", other), other, "8 values",
                           "hidden_size is 32")

    def test_not_with_other_models(self):
        self.convert_fails(self.args() + ["--hifigan", self.speakers["tiny"]], "--chattts")


FIXTURES = os.path.join(os.path.dirname(TOOLS), "tests", "fixtures")


class ChatTTSFixturesTest(unittest.TestCase):
    """tests/fixtures/chattts is what tools/reference/chattts_fixtures.py writes, and its
    sampling cases follow the draw rule the C++ side implements."""

    def test_regenerates_identically(self):
        from reference import chattts_fixtures
        committed = os.path.join(FIXTURES, "chattts")
        with tempfile.TemporaryDirectory() as tmp, \
                contextlib.redirect_stdout(io.StringIO()):
            chattts_fixtures.make(tmp)
            for root, _, names in os.walk(tmp):
                for name in names:
                    fresh = os.path.join(root, name)
                    old = os.path.join(committed, os.path.relpath(fresh, tmp))
                    if name.endswith(".json"):
                        with open(fresh) as a, open(old) as b:
                            self.assertEqual(json.load(a), json.load(b), old)
                        continue
                    # Float results may differ in the last bit on another CPU's BLAS.
                    new_t, old_t = safetensors_io.load(fresh), safetensors_io.load(old)
                    self.assertEqual(sorted(new_t), sorted(old_t), old)
                    for key, value in new_t.items():
                        np.testing.assert_allclose(value, old_t[key], rtol=1e-6, atol=1e-6,
                                                   err_msg=f"{old}: {key}")

    def test_sampling_draws(self):
        base = os.path.join(FIXTURES, "chattts", "sampling")
        for case in sorted(os.listdir(base)):
            io_ = safetensors_io.load(os.path.join(base, case, "io.safetensors"))
            cumulative = io_["probs"].astype(np.float64).cumsum(1)
            for row in range(cumulative.shape[0]):
                for draw, token in zip(io_["draws"][row], io_["tokens"][row]):
                    target = float(draw) * cumulative[row, -1]
                    self.assertEqual(int(np.argmax(cumulative[row] > target)), token, case)
                    self.assertGreater(io_["probs"][row, token], 0, case)

    def test_cached_logits_agree(self):
        io_ = safetensors_io.load(os.path.join(FIXTURES, "chattts", "gpt", "io.safetensors"))
        for name in ("hidden", "text_logits", "code_logits"):
            np.testing.assert_allclose(io_[name + "_cached"], io_[name], atol=1e-6)


VOICES = os.path.join(os.path.dirname(TOOLS), "tests", "fixtures", "voices")


class FixtureVoicesTest(unittest.TestCase):
    """The committed test voices are what tools/make_test_voices.py describes."""

    def check_voice(self, name, phonemes):
        directory = os.path.join(VOICES, name)
        with open(os.path.join(directory, "config.json")) as f:
            config = json.load(f)
        self.assertEqual((config["name"], config["phonemes"]), (name, phonemes))
        self.assertEqual((config["sample_rate"], config["hop_length"], config["n_mels"]),
                         (22050, 256, 80))
        table = symbol_tables.read_symbols(os.path.join(directory, config["symbols"]))
        acoustic = safetensors_io.load(os.path.join(directory, config["acoustic"]["weights"]))
        vocoder_path = os.path.normpath(os.path.join(directory, config["vocoder"]["weights"]))
        vocoder = safetensors_io.load(vocoder_path)
        model = config["acoustic"]["model"]
        convert_checkpoint.check_fastspeech2(acoustic, model, 80, len(table), 0, name)
        convert_checkpoint.check_hifigan(vocoder, config["vocoder"]["model"], name)
        self.assertEqual(model["transformer"]["encoder_hidden"], 32)
        self.assertEqual(config["vocoder"]["model"]["upsample_initial_channel"], 32)
        self.assertEqual(config["acoustic"]["pitch_feature_level"], "phoneme_level")
        self.assertNotIn("speakers", config)
        duration = "variance_adaptor.duration_predictor.linear_layer."
        self.assertFalse(acoustic[duration + "weight"].any())
        self.assertAlmostEqual(float(np.exp(acoustic[duration + "bias"][0]) - 1),
                               tiny.FRAMES_PER_PHONEME, places=4)
        size = sum(os.path.getsize(os.path.join(directory, n)) for n in os.listdir(directory))
        self.assertLess(size, 1.5 * 1024 * 1024)
        return config, table, vocoder_path

    def test_tiny_arpabet(self):
        config, table, vocoder = self.check_voice("tiny-arpabet", "arpabet")
        self.assertEqual(table, SYMBOLS)
        self.assertEqual(vocoder, os.path.join(VOICES, "tiny-arpabet", "vocoder.safetensors"))

    @unittest.skipUnless(os.path.isdir(os.path.join(VOICES, "tiny-ipa")), "not generated yet")
    def test_tiny_ipa_shares_the_vocoder(self):
        config, table, vocoder = self.check_voice("tiny-ipa", "espeak-ipa")
        self.assertEqual(table, symbol_tables.read_symbols(tiny.IPA_SYMBOLS))
        self.assertEqual(config["vocoder"]["weights"], "../tiny-arpabet/vocoder.safetensors")
        self.assertFalse(os.path.exists(os.path.join(VOICES, "tiny-ipa", "vocoder.safetensors")))

    def test_tiny_chattts(self):
        directory = os.path.join(VOICES, "tiny-chattts")
        with open(os.path.join(directory, "config.json"), encoding="utf-8") as f:
            config = json.load(f)
        self.assertEqual((config["type"], config["name"]), ("chattts", "tiny-chattts"))
        self.assertEqual(config["gpt"]["hidden_size"], tiny.TINY_CHATTTS["gpt"]["hidden_size"])
        self.assertEqual(config["speaker"]["named"], {"tiny": "speakers.tiny"})
        for section in ("gpt", "decoder", "dvae", "vocos"):
            safetensors_io.load(os.path.join(directory, config[section]["weights"]))
        embed = safetensors_io.load(os.path.join(directory, config["gpt"]["embed_weights"]))
        tokens = convert_checkpoint.read_chattts_tokenizer(
            os.path.join(directory, config["tokenizer"]["file"]),
            embed["emb_text.weight"].shape[0])
        self.assertEqual(tokens, config["tokenizer"]["tokens"])
        size = sum(os.path.getsize(os.path.join(root, n))
                   for root, _, names in os.walk(directory) for n in names)
        self.assertLess(size, 1.5 * 1024 * 1024)


if __name__ == "__main__":
    unittest.main()
