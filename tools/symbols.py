"""Symbol tables for voxd voices, and symbols.txt reading/writing.

`MING024_SYMBOLS` rebuilds the table of ming024/FastSpeech2's `text/symbols.py` in the same
order, so that symbol id n (the row of `encoder.src_word_emb.weight`) means what it meant when
the checkpoint was trained:

    "_"  "-"  "!'(),.:;? "  A-Z a-z  "@"+ARPAbet (84)  "@"+pinyin (209)  "@sp" "@spn" "@sil"

360 symbols in all: "@AA1" is 66, "@sp" is 357. ming024's encoder has one embedding row more
than the table (`len(symbols) + 1`); the last row is never indexed.

symbols.txt holds one symbol per line, line n (from 0) being id n. Lines are separated by "\\n"
only and are not stripped: ming024's table has a space symbol, written as a line of one space.
"""

PAD = "_"
SPECIAL = "-"
PUNCTUATION = "!'(),.:;? "
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
SILENCES = ["@sp", "@spn", "@sil"]

# CMUdict's phones in alphabetical order; vowels come bare and with stress 0, 1, 2.
_ARPABET_VOWELS = {"AA", "AE", "AH", "AO", "AW", "AY", "EH", "ER", "EY", "IH", "IY", "OW", "OY",
                   "UH", "UW"}
_ARPABET_PHONES = ["AA", "AE", "AH", "AO", "AW", "AY", "B", "CH", "D", "DH", "EH", "ER", "EY",
                   "F", "G", "HH", "IH", "IY", "JH", "K", "L", "M", "N", "NG", "OW", "OY", "P",
                   "R", "S", "SH", "T", "TH", "UH", "UW", "V", "W", "Y", "Z", "ZH"]

# Pinyin initials, then the finals each with tones 1-5, then the erhua "rr".
_PINYIN_INITIALS = ["b", "c", "ch", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "q", "r",
                    "s", "sh", "t", "w", "x", "y", "z", "zh"]
_PINYIN_FINALS = ["a", "ai", "an", "ang", "ao", "e", "ei", "en", "eng", "er", "i", "ia", "ian",
                  "iang", "iao", "ie", "ii", "iii", "in", "ing", "iong", "iou", "o", "ong", "ou",
                  "u", "ua", "uai", "uan", "uang", "uei", "uen", "uo", "v", "van", "ve", "vn"]


def arpabet_symbols():
    """CMUdict's 84 valid symbols in ming024's order (no "@" prefix)."""
    out = []
    for phone in _ARPABET_PHONES:
        out.append(phone)
        if phone in _ARPABET_VOWELS:
            out.extend(phone + stress for stress in "012")
    return out


def pinyin_symbols():
    """ming024's 209 pinyin symbols in its order (no "@" prefix)."""
    finals = [final + tone for final in _PINYIN_FINALS for tone in "12345"]
    return _PINYIN_INITIALS + finals + ["rr"]


def ming024_symbols():
    """The full ming024/FastSpeech2 symbol table, index = symbol id."""
    return ([PAD] + list(SPECIAL) + list(PUNCTUATION) + list(LETTERS)
            + ["@" + s for s in arpabet_symbols()]
            + ["@" + s for s in pinyin_symbols()]
            + SILENCES)


MING024_SYMBOLS = ming024_symbols()


def arpabet_voice_symbols():
    """The table of voxd's own ARPAbet voices (data/symbols/arpabet-en.txt): the pad, ming024's
    "@"-prefixed ARPAbet symbols and its silences (88 symbols; what the ARPAbet front end emits)."""
    return [PAD] + ["@" + s for s in arpabet_symbols()] + SILENCES


def read_symbols(path):
    """Reads a symbols.txt (one symbol per line, not stripped); raises ValueError on a bad table."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if text.endswith("\n"):
        text = text[:-1]
    symbols = text.split("\n") if text else []
    check_symbols(symbols, path)
    return symbols


def check_symbols(symbols, where):
    """Raises ValueError naming `where` if the table is empty, has an empty or duplicate symbol."""
    if not symbols:
        raise ValueError(f"{where}: the symbol table is empty")
    seen = {}
    for index, symbol in enumerate(symbols):
        if symbol == "" or "\n" in symbol or "\r" in symbol:
            raise ValueError(f"{where}: symbol {index} is empty or holds a line break")
        if symbol in seen:
            raise ValueError(f"{where}: symbol {symbol!r} appears twice (ids {seen[symbol]} "
                             f"and {index})")
        seen[symbol] = index


def write_symbols(path, symbols):
    """Writes `symbols` one per line, UTF-8, with a final newline."""
    check_symbols(symbols, path)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(symbols) + "\n")


if __name__ == "__main__":
    import sys
    if len(sys.argv) != 3 or sys.argv[1] != "arpabet":
        sys.exit("usage: tools/symbols.py arpabet OUT  (writes voxd's ARPAbet voice table)")
    write_symbols(sys.argv[2], arpabet_voice_symbols())
