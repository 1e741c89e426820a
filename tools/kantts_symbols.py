#!/usr/bin/env python3
"""The symbol inventories of a KAN-TTS Sambert voice, as its linguistic unit numbers them.

KAN-TTS (modelscope/KAN-TTS, kantts/utils/ling_unit/ling_unit.py, KanTtsLinguisticUnit) turns a
symbol string such as

    {ge$tone5$s_begin$word_begin$emotion_neutral$F7} {en_c$tone5$s_end$word_end$emotion_neutral$F7}

into one id per token and channel. The id of a value is its position in the channel's list, and
those lists are not stored in a voice: they are rebuilt at load time from the language's inventory
(kantts/preprocess/languages/<language>/PhoneSet.xml and tonelist.txt, in the installed kantts
package, not in the ModelScope voice folder), from fixed lists in the code and from the AM
config's `linguistic_unit.speaker_list`. symbol_lists() rebuilds them the same way, so that the
converter can write them into a voxd voice (src/families/sambert/symbols.h reads the result):

    sy                 "@" + each <phone>'s <name> of PhoneSet.xml in document order (the <id>
                       elements are ignored), then "@#1" .. "@#4"
    tone               "tone<line>" per line of tonelist.txt in file order, "tone_none" for an
                       empty line
    syllable_flag      SYLLABLE_FLAGS
    word_segment       WORD_SEGMENTS
    emo_category       EMOTION_TYPES
    speaker_category   speaker_list split at "," (the whole string stripped, the items not)

each followed by the reserved RESERVED_TAIL ("_" pad, "~" end, "@[MASK]" mask). No list is
sorted. Only the standard six channels (STANDARD_LFEAT_TYPES) are supported; the byte model
(byte_index,emo_category,speaker_category) and any other lfeat_type_list are refused.

Standard library only (runs on Debian's /usr/bin/python3):

    python3 tools/kantts_symbols.py INVENTORY_DIR --speaker-list F7,F74 [--lfeat-type-list ...]

prints the lists as JSON.
"""
import argparse
import json
import os
import sys
import xml.etree.ElementTree as ET

PHONESET_NAMESPACE = "http://schemas.alibaba-inc.com/tts"
PHONESET_FILE = "PhoneSet.xml"
TONELIST_FILE = "tonelist.txt"

# The languages KAN-TTS ships inventories for (kantts/preprocess/languages/__init__.py); an AM
# config naming another one is built with PinYin's (lang_symbols.py:get_language_symbols).
KNOWN_LANGUAGES = ("PinYin", "ZhHK", "WuuShanghai", "Sichuan")
DEFAULT_LANGUAGE = "PinYin"

# The channels, in the order the `$` fields of a token give them.
STANDARD_LFEAT_TYPES = ["sy", "tone", "syllable_flag", "word_segment", "emo_category",
                        "speaker_category"]
BYTE_LFEAT_TYPES = ["byte_index", "emo_category", "speaker_category"]

# Appended to every channel, in this order.
RESERVED_TAIL = ["_", "~", "@[MASK]"]

# Breaks appended to the phones of every language.
PROSODIC_BREAKS = ["#1", "#2", "#3", "#4"]

# Fixed by the format (the same for every language).
SYLLABLE_FLAGS = ["s_begin", "s_end", "s_none", "s_both", "s_middle"]
WORD_SEGMENTS = ["word_begin", "word_end", "word_middle", "word_both", "word_none"]
EMOTION_TYPES = (
    ["emotion_none", "emotion_neutral", "emotion_angry", "emotion_disgust", "emotion_fear",
     "emotion_happy", "emotion_sad", "emotion_surprise", "emotion_calm", "emotion_gentle",
     "emotion_relax", "emotion_lyrical", "emotion_serious", "emotion_disgruntled",
     "emotion_satisfied", "emotion_disappointed", "emotion_excited", "emotion_anxiety",
     "emotion_jealousy", "emotion_hate", "emotion_pity", "emotion_pleasure", "emotion_arousal",
     "emotion_dominance"]
    + [f"emotion_placeholder{i}" for i in range(1, 10)]
)


def read_phones(phoneset_path):
    """The <name> texts of the root's <phone> children, in document order, then the breaks.

    The names are taken as written (not stripped), as KAN-TTS takes them."""
    ns = "{" + PHONESET_NAMESPACE + "}"
    root = ET.parse(phoneset_path).getroot()
    phones = []
    for index, node in enumerate(root.findall(ns + "phone")):
        name = node.find(ns + "name")
        if name is None or not name.text:
            raise ValueError(f"{phoneset_path}: <phone> {index} has no <name> text")
        phones.append(name.text)
    if not phones:
        raise ValueError(f"{phoneset_path}: no <phone> element under the root in namespace "
                         f"{PHONESET_NAMESPACE}")
    return phones + PROSODIC_BREAKS


def read_tones(tonelist_path):
    """"tone<t>" per line of the file (t stripped), "tone_none" for an empty line.

    Lines are split as Python's text mode splits them ("\\n", "\\r\\n" or "\\r")."""
    with open(tonelist_path, "r", encoding="utf-8") as f:
        lines = f.readlines()
    return [f"tone{line.strip()}" if line.strip() else "tone_none" for line in lines]


def language(linguistic_unit):
    """The inventory folder name KAN-TTS uses for this `linguistic_unit` block."""
    name = linguistic_unit.get("language", DEFAULT_LANGUAGE)
    return name if name in KNOWN_LANGUAGES else DEFAULT_LANGUAGE


def inventory_dir(languages_dir, linguistic_unit):
    """The folder under kantts/preprocess/languages holding this block's inventory."""
    return os.path.join(languages_dir, language(linguistic_unit))


def _lfeat_types(linguistic_unit):
    field = "linguistic_unit.lfeat_type_list"
    value = linguistic_unit.get("lfeat_type_list")
    if not isinstance(value, str):
        raise ValueError(f"{field}: missing or not a string ({value!r})")
    types = value.strip().split(",")
    if types == BYTE_LFEAT_TYPES:
        raise ValueError(f"{field}: {value.strip()!r} is the byte model's, which voxd does not "
                         f"support; expected {','.join(STANDARD_LFEAT_TYPES)!r}")
    if types != STANDARD_LFEAT_TYPES:
        raise ValueError(f"{field}: {value.strip()!r} is not supported; expected "
                         f"{','.join(STANDARD_LFEAT_TYPES)!r}")
    return types


def _speakers(linguistic_unit):
    field = "linguistic_unit.speaker_list"
    value = linguistic_unit.get("speaker_list")
    if not isinstance(value, str):
        raise ValueError(f"{field}: missing or not a string ({value!r})")
    return value.strip().split(",")


def symbol_lists(inventory, linguistic_unit):
    """The ordered symbol list of every channel, as KanTtsLinguisticUnit builds them.

    `inventory` is a language folder holding PhoneSet.xml and tonelist.txt; `linguistic_unit` is
    the AM config's `linguistic_unit` mapping (lfeat_type_list, speaker_list; other keys are not
    read). Returns a JSON-able dict: "lfeat_type_list" (the channel names in field order) and one
    list per channel, its reserved tail included; a value's id is its index (for a value listed
    twice, KAN-TTS's dict keeps the last index). Raises ValueError naming the field for an
    unsupported lfeat_type_list or a missing speaker_list."""
    if not isinstance(linguistic_unit, dict):
        raise ValueError(f"linguistic_unit: not a mapping ({type(linguistic_unit).__name__})")
    types = _lfeat_types(linguistic_unit)
    speakers = _speakers(linguistic_unit)
    phones = read_phones(os.path.join(inventory, PHONESET_FILE))
    tones = read_tones(os.path.join(inventory, TONELIST_FILE))
    return {
        "lfeat_type_list": list(types),
        "sy": ["@" + p for p in phones] + RESERVED_TAIL,
        "tone": tones + RESERVED_TAIL,
        "syllable_flag": SYLLABLE_FLAGS + RESERVED_TAIL,
        "word_segment": WORD_SEGMENTS + RESERVED_TAIL,
        "emo_category": EMOTION_TYPES + RESERVED_TAIL,
        "speaker_category": speakers + RESERVED_TAIL,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("inventory", help="folder with PhoneSet.xml and tonelist.txt")
    parser.add_argument("--speaker-list", required=True, help="linguistic_unit.speaker_list")
    parser.add_argument("--lfeat-type-list", default=",".join(STANDARD_LFEAT_TYPES),
                        help="linguistic_unit.lfeat_type_list")
    args = parser.parse_args()
    unit = {"lfeat_type_list": args.lfeat_type_list, "speaker_list": args.speaker_list}
    try:
        lists = symbol_lists(args.inventory, unit)
    except (ValueError, OSError, ET.ParseError) as e:
        sys.exit(f"kantts_symbols: {e}")
    json.dump(lists, sys.stdout, ensure_ascii=False, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
