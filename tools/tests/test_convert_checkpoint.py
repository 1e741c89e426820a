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

import convert_checkpoint  # noqa: E402
import make_test_voices as tiny  # noqa: E402
import safetensors_io  # noqa: E402
import symbols as symbol_tables  # noqa: E402

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


if __name__ == "__main__":
    unittest.main()
