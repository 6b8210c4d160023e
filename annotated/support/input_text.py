"""Text checked before it reaches the model: its encoding, its invisible characters, its letters.

A model answers whatever it is given with a fluent sentence, so text that is not what its
writer meant must be stopped before it: a file in UTF-16 (what Windows PowerShell's ``>``
writes) read as UTF-8 is a stream of NUL bytes and nonsense, Latin-1 umlauts become U+FFFD,
a control character or a zero-width space pasted from a web page is a token the model never
saw, a line without a letter (``123``, ``---``) has nothing to translate, and one in another
script (Arabic, Cyrillic) is in letters the model does not know.

* :func:`decode_input` turns bytes into text: UTF-8 (a byte-order mark is dropped), UTF-16
  and UTF-32 recognised by their byte-order mark and converted with a note; text that is a
  quarter or more NUL bytes (UTF-16 or UTF-32 without a mark), or bytes that are not UTF-8,
  are a :class:`DataError` that names the line and the fix (``--encoding latin-1``, or
  ``iconv``). A few NUL bytes are control characters, for :func:`clean_sentence` to remove.
* :func:`clean_sentence` removes control and invisible characters (NUL, BEL, ESC, zero-width
  spaces, direction marks, soft hyphens), turns every other kind of space into a plain one,
  composes letters (NFC: ``a`` + combining diaeresis -> ``ä``, as in the training data) and
  turns fullwidth and halfwidth forms into ordinary ones (NFKC of those alone: ``Ｅｉｎ`` ->
  ``Ein``, what an East Asian keyboard types), saying what it changed; and it names a symbol
  (an emoji, ``€``) or a letter of another script that the model never saw, which the
  translation leaves out.
* :func:`has_latin_letters`: whether a line holds a letter of the Latin script, which every
  German sentence does; :func:`untranslatable` says why a line is not translated: no letter at
  all, or only letters of scripts the model does not know (named).
"""

import codecs
import unicodedata

from annotated.support.errors import DataError

# Byte-order marks, longest first: UTF-32's little-endian mark starts with UTF-16's.
BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF8, "utf-8-sig"),
        (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))
# Unicode categories removed from a sentence: controls, format characters (zero-width spaces and
# joiners, direction marks, soft hyphens, byte-order marks), private use, lone surrogates, unassigned.
INVISIBLE = {"Cc", "Cf", "Co", "Cs", "Cn"}
CONVERT_FIX = "convert it to UTF-8 (iconv -f {encoding} -t UTF-8 FILE > FILE.utf8), or pass --encoding {encoding}"


def _check_text(text, name: str = "text") -> None:
    if not isinstance(text, str):
        fix = "; decode it first: decode_input(data)" if isinstance(text, (bytes, bytearray)) else ""
        raise TypeError(f"{name} must be a str, got {type(text).__name__}{fix}")


def _where(data: bytes, at: int) -> str:
    """'line L, byte B' of byte offset ``at`` in ``data``."""
    newline = b"\n"
    line, line_start = data.count(newline, 0, at) + 1, data.rfind(newline, 0, at) + 1
    return f"line {line}, byte {at - line_start + 1}"


def decode_input(data: bytes, source: str = "stdin", encoding: str | None = None) -> tuple[str, list[str]]:
    """``data`` as text, and notes on what was converted. ``encoding`` None: UTF-8, or the
    encoding a byte-order mark names; anything else is a :class:`DataError` naming the place
    and the fix."""
    if not isinstance(data, (bytes, bytearray)):
        fix = ": it is text already; give it to clean_sentence" if isinstance(data, str) else ""
        raise TypeError(f"data must be bytes, got {type(data).__name__}{fix}")
    if encoding is not None:
        try:
            return data.decode(encoding), []
        except UnicodeDecodeError as error:
            raise DataError(f"{source} is not {encoding}: {_where(data, error.start)} cannot be read "
                            f"({error.reason}); give the file's encoding with --encoding") from None
    for bom, name in BOMS:
        if data.startswith(bom):
            try:
                text = data.decode(name)
            except UnicodeDecodeError as error:
                raise DataError(f"{source} starts with the byte-order mark of {name.upper()} but is damaged at byte "
                                f"{error.start}; save it again as UTF-8") from None
            if name == "utf-8-sig":
                return text, []  # a byte-order mark Windows editors write; nothing else changes
            return text, [f"{source} is {name.upper()} (it starts with that byte-order mark, as Windows PowerShell's "
                          f"> writes): read as such; save it as UTF-8 to avoid this note"]
    nul = data.find(b"\0")
    if nul >= 0 and data.count(b"\0") * 4 >= len(data):  # a few NULs are control characters, removed later
        guess = "UTF-16LE" if nul % 2 else "UTF-16BE"
        raise DataError(f"{source} holds NUL bytes ({_where(data, nul)}): it is not UTF-8 text, probably {guess} "
                        f"without a byte-order mark; " + CONVERT_FIX.format(encoding=guess))
    try:
        return data.decode("utf-8"), []
    except UnicodeDecodeError as error:
        bad = data[error.start:error.start + 1].hex().upper()
        raise DataError(f"{source} is not UTF-8: {_where(data, error.start)} is the byte 0x{bad}, which UTF-8 does "
                        f"not allow there (German umlauts in Latin-1 or Windows-1252 look like this); "
                        + CONVERT_FIX.format(encoding="latin-1")) from None


def check_no_undecodable(text: str, source: str) -> None:
    """Raise a DataError when ``text`` holds the stand-ins Python puts for bytes that were not
    UTF-8 (a command-line argument in Latin-1 arrives as lone surrogates U+DC80..U+DCFF)."""
    _check_text(text)
    bad = next((i for i, c in enumerate(text) if 0xDC80 <= ord(c) <= 0xDCFF), None)
    if bad is not None:
        raise DataError(f"{source} is not UTF-8: character {bad + 1} was the byte 0x{ord(text[bad]) - 0xDC00:02X} "
                        f"(German umlauts in Latin-1 look like this); set your terminal to UTF-8, or give the "
                        f"sentence on stdin with --encoding latin-1")


CONTROL_NAMES = {0x00: "NUL", 0x07: "BEL", 0x08: "BACKSPACE", 0x0B: "VERTICAL TAB", 0x0C: "FORM FEED",
                 0x1B: "ESC", 0x7F: "DEL"}  # controls have no name in unicodedata


def _name(char: str) -> str:
    return f"U+{ord(char):04X} {unicodedata.name(char, CONTROL_NAMES.get(ord(char), ''))}".rstrip()


def _is_width_form(char: str) -> bool:
    """A fullwidth or halfwidth form (U+FF01..U+FFEE, U+3000): NFKC gives its ordinary character."""
    return unicodedata.decomposition(char).startswith(("<wide>", "<narrow>"))


def _script(char: str) -> str:
    """The script of a letter, from its Unicode name: 'Arabic', 'Cyrillic', 'Greek', 'Chinese (Han)', ..."""
    name = unicodedata.name(char, "")
    if name.startswith("CJK"):
        return "Chinese (Han)"
    return name.split(" ")[0].capitalize() if name else f"U+{ord(char):04X}"


def _is_latin(char: str) -> bool:
    return unicodedata.name(char, "").startswith(("LATIN", "FULLWIDTH LATIN", "HALFWIDTH LATIN"))


def _never_seen(char: str) -> bool:
    """A symbol outside ASCII (emoji, currency, arrows, degrees) or a letter of a script other than Latin:
    German sentences, and the course's training data, hold none."""
    category = unicodedata.category(char)
    if category.startswith("S"):
        return not char.isascii()
    return char.isalpha() and not _is_latin(char)


def clean_sentence(text: str) -> tuple[str, list[str]]:
    """``text`` without control or invisible characters, other spaces made plain ones, letters
    composed (NFC), fullwidth and halfwidth forms made ordinary ones (NFKC of those alone); and a
    note on each kind of change, and on the characters the model never saw (none when nothing was)."""
    _check_text(text)
    composed = unicodedata.normalize("NFC", text)
    wide = [char for char in composed if _is_width_form(char)]
    if wide:  # only these: NFKC of the whole text would also turn "½" into "1⁄2" and "ﬁ" into "fi"
        composed = "".join(unicodedata.normalize("NFKC", c) if _is_width_form(c) else c for c in composed)
    removed, kept = [], []
    for char in composed:
        category = unicodedata.category(char)
        if char == "\t" or category in ("Zs", "Zl", "Zp"):
            kept.append(" ")
        elif category in INVISIBLE:
            removed.append(char)
        else:
            kept.append(char)
    notes = []
    if wide:
        before = unicodedata.normalize("NFC", text).strip()[:20]
        after = "".join(unicodedata.normalize("NFKC", c) if _is_width_form(c) else c for c in before)
        notes.append(f"turned {len(wide)} fullwidth or halfwidth character(s) into ordinary ones "
                     f"('{before}' -> '{after}')")
    if removed:
        names = ", ".join(_name(c) for c in dict.fromkeys(removed))
        notes.append(f"removed {len(removed)} control or invisible character(s) ({names})")
    if "\ufffd" in composed:
        notes.append("holds U+FFFD, the mark of a character lost when the text was converted from another "
                     "encoding; the translation may miss a word")
    cleaned = "".join(kept)
    unseen = [char for char in dict.fromkeys(cleaned) if _never_seen(char)]
    symbols = [_name(char) for char in unseen if not char.isalpha()]
    scripts = list(dict.fromkeys(_script(char) for char in unseen if char.isalpha()))
    if not has_latin_letters(cleaned):
        scripts = []  # a line of other letters alone is not translated at all: untranslatable() says so
    if symbols or scripts:
        named = symbols[:5] + (["..."] if len(symbols) > 5 else []) + [f"letters of the {s} script" for s in scripts]
        one = len(symbols) == 1 and not scripts
        notes.append(f"the model never saw {', '.join(named)} (its training sentences hold none): it reads "
                     f"{'it' if one else 'them'} as unknown, and the translation leaves {'it' if one else 'them'} out")
    return cleaned, notes


def has_latin_letters(text: str) -> bool:
    """Whether ``text`` holds a letter of the Latin script (a-z, ä, ö, ü, ß, é, ..., fullwidth ones too)."""
    _check_text(text)
    return any(char.isalpha() and _is_latin(char) for char in text)


def untranslatable(text: str) -> str | None:
    """Why the model cannot translate ``text``, or None when it can (it holds a Latin letter) or the
    line is blank: 'has no letter to translate (...)', or 'is written in the Arabic script, which the
    model does not know (...)', naming every script of its letters (the model knows Latin letters only)."""
    _check_text(text)
    if not text.strip() or has_latin_letters(text):
        return None
    shown = repr(text.strip()[:30])
    scripts = list(dict.fromkeys(_script(char) for char in text if char.isalpha()))
    if not scripts:
        return f"has no letter to translate ({shown})"
    named = " and ".join([", ".join(scripts[:-1]), scripts[-1]] if len(scripts) > 1 else scripts)
    return f"is written in the {named} script{'s' if len(scripts) > 1 else ''}, which the model does not know ({shown})"
