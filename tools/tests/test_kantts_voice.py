"""Tests of tools/convert_checkpoint.py --kantts (tools/kantts_voice.py).

A made-up ModelScope model folder: tiny random Sambert and HiFiGAN models (tools/reference/, the
originals' module trees) saved in KAN-TTS's checkpoint formats with KAN-TTS-style config.yaml
files, and the made-up phone inventory of tests/fixtures/sambert_symbols/inventory. Run from the
repository root:

    /usr/bin/python3 -m unittest discover -s tools/tests -v
"""
import contextlib
import io
import json
import os
import shutil
import sys
import tempfile
import unittest

import numpy as np
import torch
import yaml

TOOLS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(TOOLS)
sys.path.insert(0, TOOLS)

import convert_checkpoint  # noqa: E402
import kantts_symbols  # noqa: E402
import make_test_voices  # noqa: E402
import safetensors_io  # noqa: E402
from reference import kantts_hifigan, sambert  # noqa: E402

INVENTORY = os.path.join(REPO, "tests", "fixtures", "sambert_symbols", "inventory")
SAMBERT_CONFIG = os.path.join(REPO, "tests", "fixtures", "sambert", "basic", "config.json")
HIFIGAN_CONFIG = os.path.join(REPO, "tests", "fixtures", "kantts_hifigan", "v1_16k", "config.json")
UNIT = {"cleaners": "english_cleaners",
        "lfeat_type_list": "sy,tone,syllable_flag,word_segment,emo_category,speaker_category",
        "speaker_list": "F7,F74,M7"}


def run_converter(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = convert_checkpoint.main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def make_voice(folder, mask_rows=False):
    """voices/<folder> of a ModelScope model: am/ and voc/ with configs and checkpoints. Tables
    hold the inventory's sizes, one row fewer with `mask_rows` False (ModelScope's ignore_mask)."""
    lists = kantts_symbols.symbol_lists(INVENTORY, UNIT)
    drop = 0 if mask_rows else 1
    with open(SAMBERT_CONFIG) as f:
        params = json.load(f)["params"]
    sizes = {"sy": len(lists["sy"]) - drop, "tone": len(lists["tone"]) - drop,
             "syllable_flag": len(lists["syllable_flag"]) - drop,
             "word_segment": len(lists["word_segment"]) - drop,
             "emotion": len(lists["emo_category"]) - drop,
             "speaker": len(lists["speaker_category"]) - drop}
    torch.manual_seed(0)
    am = sambert.KanTtsSAMBERT(dict(params, **sizes))
    with open(HIFIGAN_CONFIG) as f:
        gen_params = dict(json.load(f)["params"], in_channels=params["num_mels"])
    gen = kantts_hifigan.Generator(**gen_params)
    audio = {"sampling_rate": 16000, "hop_length": 200, "n_mels": 80}
    os.makedirs(os.path.join(folder, "am", "ckpt"))
    os.makedirs(os.path.join(folder, "voc", "ckpt"))
    with open(os.path.join(folder, "am", "config.yaml"), "w") as f:
        yaml.safe_dump({"audio_config": audio, "model_type": "sambert",
                        "Model": {"KanTtsSAMBERT": {"params": params}},
                        "linguistic_unit": UNIT}, f)
    with open(os.path.join(folder, "voc", "config.yaml"), "w") as f:
        yaml.safe_dump({"audio_config": audio, "Model": {"Generator": {"params": gen_params}}}, f)
    # The converter takes the highest step count (numerically: 2400 over 900); 900 is no
    # checkpoint at all.
    with open(os.path.join(folder, "am", "ckpt", "checkpoint_900.pth"), "wb") as f:
        f.write(b"not a checkpoint")
    torch.save({"model": am.state_dict(), "optimizer": {}, "steps": 2400},
               os.path.join(folder, "am", "ckpt", "checkpoint_2400.pth"))
    torch.save({"model": {"generator": gen.state_dict()}, "steps": 10},
               os.path.join(folder, "voc", "ckpt", "checkpoint_10.pth"))
    return am, gen


class KanTtsConvertTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.model = os.path.join(self.tmp, "speech_sambert-hifigan_tts_zh-cn_16k")
        os.makedirs(os.path.join(self.model, "voices"))
        with open(os.path.join(self.model, "voices", "voices.json"), "w") as f:
            json.dump({"voices": ["gone", "zhitian_emo"]}, f)
        self.am, self.gen = make_voice(os.path.join(self.model, "voices", "zhitian_emo"))
        self.languages = os.path.join(self.tmp, "languages")
        shutil.copytree(INVENTORY, os.path.join(self.languages, "PinYin"))

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def convert(self, *extra):
        return run_converter(["--kantts", self.model, "--kantts-languages", self.languages,
                              "--out", os.path.join(self.tmp, "out"), *extra])

    def test_a_modelscope_folder_becomes_a_voice(self):
        code, out, err = self.convert()
        self.assertEqual(code, 0, err)
        self.assertIn("wrote Sambert-HiFiGAN voice 'zhitian_emo'", out)
        voice_dir = os.path.join(self.tmp, "out")
        with open(os.path.join(voice_dir, "config.json")) as f:
            voice = json.load(f)
        self.assertEqual(voice["type"], "sambert")
        self.assertEqual(voice["acoustic"]["type"], "sambert")
        self.assertEqual(voice["vocoder"]["type"], "kantts-hifigan")
        self.assertEqual(voice["sample_rate"], 16000)
        self.assertEqual(voice["acoustic"]["symbols"],
                         kantts_symbols.symbol_lists(INVENTORY, UNIT))
        acoustic = safetensors_io.load(os.path.join(voice_dir, "acoustic.safetensors"))
        for name, tensor in self.am.state_dict().items():
            np.testing.assert_array_equal(acoustic[name], tensor.numpy(), name)
        vocoder = safetensors_io.load(os.path.join(voice_dir, "vocoder.safetensors"))
        self.assertEqual(set(vocoder), set(self.gen.state_dict()))

    def test_a_voice_folder_and_the_mask_rows_of_plain_kantts(self):
        folder = os.path.join(self.tmp, "trained")
        make_voice(folder, mask_rows=True)
        code, out, err = run_converter(["--kantts", folder, "--kantts-languages", self.languages,
                                        "--out", os.path.join(self.tmp, "v2")])
        self.assertEqual(code, 0, err)
        self.assertIn("'trained'", out)

    def expect_error(self, fragment, *extra):
        code, _, err = self.convert(*extra)
        self.assertEqual(code, 1, err)
        self.assertIn(fragment, err)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "out")))

    def test_unknown_voice_missing_inventory_and_missing_checkpoint(self):
        self.expect_error("no voice 'nobody' (voices with a folder: zhitian_emo)",
                          "--kantts-voice", "nobody")
        code, _, err = run_converter(["--kantts", self.model, "--out",
                                      os.path.join(self.tmp, "out")])
        self.assertIn("no phone inventory for language 'PinYin'", err)
        os.remove(os.path.join(self.model, "voices", "zhitian_emo", "voc", "ckpt",
                               "checkpoint_10.pth"))
        self.expect_error("no checkpoint_<steps>.pth in it")

    def test_a_tensorflow_checkpoint_is_refused_by_name(self):
        ckpt = os.path.join(self.model, "voices", "zhitian_emo", "am", "ckpt")
        shutil.rmtree(ckpt)
        os.makedirs(ckpt)
        for name in ("checkpoint", "model.ckpt-2400.index", "model.ckpt-2400.data-00000-of-00001"):
            open(os.path.join(ckpt, name), "w").close()
        self.expect_error("only the PyTorch KAN-TTS checkpoints")

    def test_a_config_that_does_not_match_the_checkpoint(self):
        path = os.path.join(self.model, "voices", "zhitian_emo", "am", "config.yaml")
        with open(path) as f:
            config = yaml.safe_load(f)
        config["Model"]["KanTtsSAMBERT"]["params"]["decoder_num_units"] = 32
        with open(path, "w") as f:
            yaml.safe_dump(config, f)
        self.expect_error("has shape")

    def test_tables_that_do_not_fit_the_inventory(self):
        path = os.path.join(self.languages, "PinYin", "tonelist.txt")
        with open(path, "a") as f:
            f.write("9\n")
        self.expect_error("the tone table has")

    def test_variants_voxd_does_not_convert(self):
        path = os.path.join(self.model, "voices", "zhitian_emo", "am", "config.yaml")
        with open(path) as f:
            config = yaml.safe_load(f)
        config["Model"]["KanTtsSAMBERT"]["params"]["FP"] = True
        with open(path, "w") as f:
            yaml.safe_dump(config, f)
        self.expect_error("field 'Model.KanTtsSAMBERT.params.FP' is true")


class PersonalVoiceTest(unittest.TestCase):
    """A personal voice as ModelScope's personal TTS trains them: SE (am/se.npy in place of the
    speaker table) and NSF (f0 and voicing after the mel, am/mvn.npy, a HiFiGAN-NSF vocoder)."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.voice = os.path.join(self.tmp, "personal")
        params, gen_params = make_test_voices.sambert_fixture_sizes()
        self.params = dict(params, SE=True, NSF=True, num_mels=params["num_mels"] + 2)
        gen_params = dict(gen_params, nsf_params={"nb_harmonics": 7, "sampling_rate": 16000})
        self.am, _ = make_test_voices.write_modelscope_voice(
            self.voice, self.params, gen_params, seed=5, f0_mean_std=(150.0, 30.0))
        self.out = os.path.join(self.tmp, "out")

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def convert(self):
        return run_converter(["--kantts", self.voice, "--kantts-languages", INVENTORY,
                              "--out", self.out])

    def expect_error(self, fragment):
        code, _, err = self.convert()
        self.assertEqual(code, 1, err)
        self.assertIn(fragment, err)
        self.assertFalse(os.path.exists(self.out))

    def edit(self, part, change):
        path = os.path.join(self.voice, part, "config.yaml")
        with open(path) as f:
            config = yaml.safe_load(f)
        change(config["Model"])
        with open(path, "w") as f:
            yaml.safe_dump(config, f)

    def test_the_embedding_stands_for_every_speaker_and_f0_keeps_its_mean_and_std(self):
        code, _, err = self.convert()
        self.assertEqual(code, 0, err)
        with open(os.path.join(self.out, "config.json")) as f:
            voice = json.load(f)
        self.assertEqual(voice["acoustic"]["f0_mean_std"], [150.0, 30.0])
        self.assertEqual(voice["n_mels"], self.params["num_mels"] - 2)
        self.assertEqual(voice["vocoder"]["model"]["nsf_params"]["nb_harmonics"], 7)
        se = np.load(os.path.join(self.voice, "am", "se.npy")).reshape(-1)
        table = safetensors_io.load(os.path.join(self.out, "acoustic.safetensors"))[
            "spk_tokenizer.weight"]
        speakers = len(voice["acoustic"]["symbols"]["speaker_category"])
        self.assertEqual(table.shape, (speakers - 1, self.params["speaker_units"]))
        for row in table:
            np.testing.assert_array_equal(row, se)

    def test_missing_embedding_mean_and_std_and_a_vocoder_without_a_source(self):
        os.rename(os.path.join(self.voice, "am", "se.npy"), os.path.join(self.tmp, "se.npy"))
        self.expect_error("SE is true but there is no se.npy")
        os.rename(os.path.join(self.tmp, "se.npy"), os.path.join(self.voice, "am", "se.npy"))
        os.remove(os.path.join(self.voice, "am", "mvn.npy"))
        self.expect_error("needs mvn.npy")
        self.edit("am", lambda m: m["KanTtsSAMBERT"]["params"].update(nsf_norm_type="global"))
        self.edit("voc", lambda m: m["Generator"]["params"].pop("nsf_params"))
        self.expect_error("tensors the config does not describe: source_downs.0.conv1d.bias")
        # A plain HiFiGAN (its checkpoint and config agree) cannot read f0.
        path = os.path.join(self.voice, "voc", "config.yaml")
        with open(path) as f:
            plain = kantts_hifigan.Generator(**yaml.safe_load(f)["Model"]["Generator"]["params"])
        torch.save({"model": {"generator": plain.state_dict()}, "steps": 1},
                   os.path.join(self.voice, "voc", "ckpt", "checkpoint_1.pth"))
        self.expect_error("the acoustic model makes f0 for an NSF vocoder, this one has no "
                          "nsf_params")


if __name__ == "__main__":
    unittest.main()
