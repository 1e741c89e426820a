"""Tests of tools/kantts_symbols.py (standard library only). Run from the repository root:

    /usr/bin/python3 -m unittest tools/tests/test_kantts_symbols.py -v

With KANTTS_SRC naming an extracted KAN-TTS source tree (the folder holding kantts/), the lists of
its own languages are also checked against its KanTtsLinguisticUnit.
"""
import json
import os
import sys
import tempfile
import unittest

TOOLS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, TOOLS)

import kantts_symbols  # noqa: E402
from reference import sambert_symbol_fixtures as fixtures  # noqa: E402

STANDARD = ",".join(kantts_symbols.STANDARD_LFEAT_TYPES)
PHONESET = """<?xml version="1.0" encoding="utf-8"?>
<phoneSet xmlns="http://schemas.alibaba-inc.com/tts">
  <phone><id>9</id><name>b_c</name></phone>
  <phone><id>1</id><name>a_c</name></phone>
  {extra}
</phoneSet>
"""


def _inventory(folder, tones="1\n\n2\n", extra=""):
    with open(os.path.join(folder, "PhoneSet.xml"), "w", encoding="utf-8") as f:
        f.write(PHONESET.format(extra=extra))
    with open(os.path.join(folder, "tonelist.txt"), "w", encoding="utf-8", newline="") as f:
        f.write(tones)
    return folder


class SymbolListsTest(unittest.TestCase):
    def test_fixture_lists_are_current(self):
        with open(os.path.join(fixtures.DEFAULT_OUT, "symbols.json"), encoding="utf-8") as f:
            stored = json.load(f)
        self.assertEqual(kantts_symbols.symbol_lists(fixtures.INVENTORY, fixtures.LINGUISTIC_UNIT),
                         stored)

    def test_order_and_tails(self):
        with tempfile.TemporaryDirectory() as d:
            lists = kantts_symbols.symbol_lists(
                _inventory(d, tones="1\r\n\r\n2"),
                {"lfeat_type_list": STANDARD + "\n", "speaker_list": " F7,M7 "})
        tail = ["_", "~", "@[MASK]"]
        self.assertEqual(lists["sy"], ["@b_c", "@a_c", "@#1", "@#2", "@#3", "@#4"] + tail)
        self.assertEqual(lists["tone"], ["tone1", "tone_none", "tone2"] + tail)
        self.assertEqual(lists["speaker_category"], ["F7", "M7"] + tail)
        self.assertEqual(len(lists["emo_category"]), 36)
        self.assertEqual(lists["syllable_flag"][3], "s_both")
        self.assertEqual(lists["word_segment"][4], "word_none")

    def test_refusals_name_the_field(self):
        with tempfile.TemporaryDirectory() as d:
            _inventory(d)
            for unit, field in [
                ({"lfeat_type_list": "byte_index,emo_category,speaker_category",
                  "speaker_list": "F7"}, "lfeat_type_list"),
                ({"lfeat_type_list": "sy,tone", "speaker_list": "F7"}, "lfeat_type_list"),
                ({"speaker_list": "F7"}, "lfeat_type_list"),
                ({"lfeat_type_list": STANDARD}, "speaker_list"),
                ({"lfeat_type_list": STANDARD, "speaker_list": ["F7"]}, "speaker_list"),
            ]:
                with self.assertRaisesRegex(ValueError, f"^linguistic_unit.{field}: "):
                    kantts_symbols.symbol_lists(d, unit)
            _inventory(d, extra="<phone><id>3</id></phone>")
            with self.assertRaisesRegex(ValueError, "<phone> 2 has no <name>"):
                kantts_symbols.symbol_lists(d, {"lfeat_type_list": STANDARD, "speaker_list": "F7"})

    @unittest.skipUnless(os.environ.get("KANTTS_SRC"), "KANTTS_SRC not set")
    def test_languages_equal_the_original(self):
        src = os.environ["KANTTS_SRC"]
        languages = os.path.join(src, "kantts", "preprocess", "languages")
        fixtures._stub_missing_modules()
        fixtures._forget_kantts()
        sys.path.insert(0, src)
        try:
            from kantts.utils.ling_unit.ling_unit import KanTtsLinguisticUnit
            for language in kantts_symbols.KNOWN_LANGUAGES:
                unit = {"cleaners": "english_cleaners", "lfeat_type_list": STANDARD,
                        "speaker_list": "F7,F74,F7", "language": language}
                original = KanTtsLinguisticUnit(
                    {"linguistic_unit": unit, "Model": {"KanTtsSAMBERT": {"params": {}}}})
                lists = kantts_symbols.symbol_lists(
                    kantts_symbols.inventory_dir(languages, unit), unit)
                fixtures.check_lists(lists, fixtures.original_lists(original))
        finally:
            sys.path.remove(src)
            fixtures._forget_kantts()


if __name__ == "__main__":
    unittest.main()
