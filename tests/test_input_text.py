"""``annotated.support.input_text``: text is checked for its encoding, its invisible characters and
its letters before a model sees it."""

import pytest

from annotated.support.errors import DataError
from annotated.support.input_text import clean_sentence, decode_input, has_latin_letters, untranslatable


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-32", "utf-32-be"])
def test_utf16_and_utf32_with_a_byte_order_mark_are_read_with_a_note(encoding):
    data = "Zwei Hunde.\nEin Mann.\n".encode(encoding)
    if encoding.endswith("-be"):
        data = ("\ufeff" + "Zwei Hunde.\nEin Mann.\n").encode(encoding)
    text, notes = decode_input(data)
    assert text == "Zwei Hunde.\nEin Mann.\n"
    assert len(notes) == 1 and f"stdin is {encoding[:6].upper()}" in notes[0] and "PowerShell" in notes[0]


def test_a_utf8_byte_order_mark_is_dropped_silently():
    assert decode_input("\ufeffEin Mann.".encode("utf-8")) == ("Ein Mann.", [])


def test_bytes_that_are_not_utf8_are_refused_with_the_place_and_the_fix():
    with pytest.raises(DataError, match=r"stdin is not UTF-8: line 2, byte 2 is the byte 0xE4, .* --encoding latin-1"):
        decode_input("Ein Mann.\nMädchen.\n".encode("latin-1"))
    assert decode_input("Mädchen.".encode("latin-1"), encoding="latin-1") == ("Mädchen.", [])
    with pytest.raises(DataError, match="stdin is not ascii: line 1, byte 2"):
        decode_input("Mädchen.".encode("utf-8"), encoding="ascii")


def test_utf16_without_a_mark_is_refused_but_a_stray_nul_is_left_for_cleaning():
    with pytest.raises(DataError, match="holds NUL bytes .* probably UTF-16LE without a byte-order mark"):
        decode_input("Ein Mann.\n".encode("utf-16-le"))
    text, _ = decode_input(b"Ein \0Mann.")
    assert clean_sentence(text)[0] == "Ein Mann."


def test_controls_and_invisible_characters_are_removed_and_named():
    text, notes = clean_sentence("Ein\u200b Mann\u00ad\x07 mit\u00a0Hut\u202e.\x1b")
    assert text == "Ein Mann mit Hut."
    assert notes == ["removed 5 control or invisible character(s) (U+200B ZERO WIDTH SPACE, U+00AD SOFT HYPHEN, "
                     "U+0007 BEL, U+202E RIGHT-TO-LEFT OVERRIDE, U+001B ESC)"]
    assert clean_sentence("Ein Mann.") == ("Ein Mann.", [])


def test_letters_are_composed_as_in_the_training_data():
    assert clean_sentence("la\u0308uft") == ("l\u00e4uft", [])


def test_a_replacement_character_gets_a_note():
    assert "U+FFFD" in clean_sentence("M\ufffddchen")[1][0]


@pytest.mark.parametrize("text, letters", [("Ein Mann.", True), ("Straße", True), ("123 --- !", False),
                                           ("", False), ("日本語", False), ("Привет", False)])
def test_latin_letters_are_what_a_german_sentence_has(text, letters):
    assert has_latin_letters(text) is letters


def test_fullwidth_latin_is_made_ordinary_with_a_note_and_then_translated():
    # Before: "Ｅｉｎ Ｈｕｎｄ" (an East Asian keyboard's letters) had no LATIN letter by name: "no letter to translate".
    text, notes = clean_sentence("Ｅｉｎ\u3000Ｈｕｎｄ\u3000läuft．")
    assert text == "Ein Hund läuft." and has_latin_letters(text) and untranslatable(text) is None
    assert notes == ["turned 10 fullwidth or halfwidth character(s) into ordinary ones "
                     "('Ｅｉｎ\u3000Ｈｕｎｄ\u3000läuft．' -> 'Ein Hund läuft.')"]
    assert has_latin_letters("Ｅｉｎ")  # by script, before cleaning too
    assert clean_sentence("½ Liter, ﬁx")[0] == "½ Liter, ﬁx"  # NFKC of the width forms alone, not of "½" or "ﬁ"


@pytest.mark.parametrize("text, problem", [
    ("مرحبا", "is written in the Arabic script, which the model does not know ('مرحبا')"),
    ("Привет, мир", "is written in the Cyrillic script, which the model does not know ('Привет, мир')"),
    ("日本語 と Привет", "is written in the Chinese (Han), Hiragana and Cyrillic scripts, which the model does not know"),
    ("123 --- !", "has no letter to translate ('123 --- !')"),
    ("😀", "has no letter to translate ('😀')"),
])
def test_a_line_in_another_script_is_named_not_called_letterless(text, problem):
    # Before: Arabic text got the diagnosis of "123": "no letter to translate".
    assert untranslatable(text).startswith(problem)


@pytest.mark.parametrize("text", ["Ein Hund läuft.", "Ｅｉｎ Ｈｕｎｄ", "", "   "])
def test_a_line_with_latin_letters_or_none_at_all_has_no_problem(text):
    assert untranslatable(text) is None


def test_a_character_the_model_never_saw_is_named_in_a_note():
    # Before: the emoji reached the model as <unk> and the translation dropped it without a word.
    text, notes = clean_sentence("Ein Hund 😀 läuft.")
    assert text == "Ein Hund 😀 läuft."
    assert notes == ["the model never saw U+1F600 GRINNING FACE (its training sentences hold none): it reads it as "
                     "unknown, and the translation leaves it out"]
    _, notes = clean_sentence("Ein Hund und Собака kosten 5 €.")
    assert notes == ["the model never saw U+20AC EURO SIGN, letters of the Cyrillic script (its training sentences "
                     "hold none): it reads them as unknown, and the translation leaves them out"]
    # what German sentences hold gets no note: umlauts, ß, typographic quotes and dashes, ASCII symbols
    assert clean_sentence("„Straße“ – 5 + 3 = 8 $, 20 % <ja>")[1] == []


@pytest.mark.parametrize("call, message", [
    (lambda: decode_input("Ein Mann."), "data must be bytes, got str: it is text already"),
    (lambda: clean_sentence(b"Ein Mann."), r"text must be a str, got bytes; decode it first: decode_input\(data\)"),
    (lambda: clean_sentence(None), "text must be a str, got NoneType"),
    (lambda: has_latin_letters(3), "text must be a str, got int"),
    (lambda: untranslatable(["Ein Mann."]), "text must be a str, got list"),
])
def test_what_is_not_text_is_named(call, message):
    with pytest.raises(TypeError, match=message):
        call()
