"""annotated.data: spaCy tokenizers and the Multi30k sentence pairs."""

import gzip
import os
from pathlib import Path

import pytest

from annotated.data import SPLITS, load_pairs, read_lines, spacy_tokenizer, tokenizer
from annotated.support.download import DOWNLOAD_COMMAND, ENV_VAR
from annotated.support.errors import DataError

REAL_DATA = os.environ.get(ENV_VAR)
needs_real_data = pytest.mark.skipif(
    not REAL_DATA,
    reason=f"{ENV_VAR} is unset; point it at the Multi30k .gz files (../shared/data/multi30k)",
)


def test_german_tokens_are_lowercased_with_punctuation_split_off():
    tokens = tokenizer("de")("Zwei junge Männer, draußen.")
    assert tokens == ["zwei", "junge", "männer", ",", "draußen", "."]


def test_english_tokenizer_splits_contractions_as_spacy_does():
    assert tokenizer("en")("A dog doesn't swim.") == ["a", "dog", "does", "n't", "swim", "."]


def test_each_language_builds_its_spacy_tokenizer_once():
    assert spacy_tokenizer("de") is spacy_tokenizer("de")
    assert spacy_tokenizer("de") is not spacy_tokenizer("en")


def test_read_lines_strips_whitespace_and_the_final_newline(tmp_path):
    path = tmp_path / "x.de.gz"
    path.write_bytes(gzip.compress(" Ein Hund. \nZwei Katzen.\n".encode("utf-8")))
    assert read_lines(path) == ["Ein Hund.", "Zwei Katzen."]


def test_an_unknown_split_names_the_valid_ones():
    with pytest.raises(ValueError, match="test_2016_flickr"):
        load_pairs("test")


@needs_real_data
@pytest.mark.parametrize("split, size", [("train", 29_000), ("val", 1_014), ("test_2016_flickr", 1_000)])
def test_each_split_has_its_published_number_of_pairs(split, size):
    pairs = load_pairs(split)
    assert len(pairs) == size
    assert all(german and english for german, english in pairs), "no empty sentence"


@needs_real_data
def test_line_i_of_the_german_file_translates_line_i_of_the_english_file():
    pairs = load_pairs("train", data_dir=REAL_DATA)
    assert pairs[0] == (
        "Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche.",
        "Two young, White males are outside near many bushes.",
    )
    assert pairs[-1] == (
        "Ein Mann in Shorts und Hawaiihemd lehnt sich über das Geländer eines Lotsenboots, "
        "mit Nebel und Bergen im Hintergrund.",
        "A man in shorts and a Hawaiian shirt leans over the rail of a pilot boat, "
        "with fog and mountains in the background.",
    )


def test_splits_match_the_files_the_download_module_knows():
    from annotated.support.download import MULTI30K_FILES

    assert {f"{split}.{lang}.gz" for split in SPLITS for lang in ("de", "en")} == set(MULTI30K_FILES)


# Files that are not what read_lines expects. The standard files are checked by SHA-256 before
# they are read, so these reach read_lines through a file of one's own or load_pairs pointed at
# a folder without that check (resolve_data_dir replaced below).


def write_gz(path, text: str, encoding: str = "utf-8") -> None:
    path.write_bytes(gzip.compress(text.encode(encoding), mtime=0))


@pytest.fixture
def unchecked_folder(monkeypatch):
    """load_pairs reads data_dir as it is, without comparing SHA-256 hashes (in its guard and in
    itself: both resolve data_dir with annotated.support.download.resolve_data_dir)."""
    import annotated.support.download

    monkeypatch.setattr(annotated.support.download, "check_local_dir", lambda directory, *_, **__: Path(directory))


def test_a_latin1_file_names_the_file_the_line_and_both_fixes(tmp_path):
    path = tmp_path / "mine.de.gz"
    write_gz(path, "Ein Hund.\nZwei Männer.\n", encoding="latin-1")
    with pytest.raises(DataError) as caught:
        read_lines(path)
    message = str(caught.value)
    assert str(path) in message and "line 2" in message and "not UTF-8" in message
    assert "iconv" in message and f"{DOWNLOAD_COMMAND} --dest {tmp_path}" in message
    assert isinstance(caught.value, ValueError)  # `except ValueError` (UnicodeDecodeError's base) still works


def test_a_truncated_gzip_file_is_named_as_truncated(tmp_path):
    path = tmp_path / "train.de.gz"
    whole = gzip.compress(("Ein Hund läuft.\n" * 200).encode("utf-8"))
    path.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(DataError, match="truncated") as caught:
        read_lines(path)
    assert str(path) in str(caught.value) and DOWNLOAD_COMMAND in str(caught.value)


def test_a_file_that_is_not_gzip_says_so(tmp_path):
    path = tmp_path / "train.en.gz"
    path.write_text("A dog runs.\n", encoding="utf-8")
    with pytest.raises(DataError, match="not gzip-compressed") as caught:
        read_lines(path)
    assert str(path) in str(caught.value) and "gzip FILE" in str(caught.value)


def test_corrupt_gzip_data_is_named_as_corrupt(tmp_path):
    path = tmp_path / "val.en.gz"
    data = bytearray(gzip.compress(b"A dog runs.\n", mtime=0))
    data[-6] ^= 0xFF  # inside the CRC-32 of the trailer
    path.write_bytes(bytes(data))
    with pytest.raises(DataError, match="corrupt gzip data") as caught:
        read_lines(path)
    assert str(path) in str(caught.value)


def test_load_pairs_names_the_file_that_cannot_be_read(tmp_path, unchecked_folder):
    write_gz(tmp_path / "val.de.gz", "Ein Hund.\n")
    write_gz(tmp_path / "val.en.gz", "A café.\n", encoding="latin-1")
    with pytest.raises(DataError, match=r"val\.en\.gz: line 1 is not UTF-8"):
        load_pairs("val", data_dir=tmp_path)


def test_a_byte_order_mark_does_not_stay_in_the_first_sentence(tmp_path, unchecked_folder):
    write_gz(tmp_path / "val.de.gz", "\ufeffEin Hund.\nZwei Katzen.\n")
    write_gz(tmp_path / "val.en.gz", "\ufeffA dog.\nTwo cats.\n")
    assert read_lines(tmp_path / "val.de.gz") == ["Ein Hund.", "Zwei Katzen."]
    assert load_pairs("val", data_dir=tmp_path)[0] == ("Ein Hund.", "A dog.")


def test_an_empty_line_on_one_side_names_the_file_the_line_and_its_partner(tmp_path, unchecked_folder):
    write_gz(tmp_path / "val.de.gz", "Ein Hund.\nZwei Katzen.\nDrei Vögel.\n")
    write_gz(tmp_path / "val.en.gz", "A dog.\n\nThree birds.\n")
    with pytest.raises(DataError) as caught:
        load_pairs("val", data_dir=tmp_path)
    message = str(caught.value)
    assert f"{tmp_path / 'val.en.gz'}, line 2: empty sentence" in message
    assert "'Zwei Katzen.'" in message  # what the empty line should have translated


@pytest.mark.parametrize("german, english, message", [
    # A pair empty on both sides in the middle is refused too.
    ("Ein Hund.\n\nDrei Vögel.\n\n", "A dog.\n\nThree birds.\n", r"val\.de\.gz, line 2: empty sentence.*empty too"),
    ("Ein Hund.\nZwei Katzen.\n", "A dog.\n", r"val\.de\.gz has 2 lines but .*val\.en\.gz has 1"),
    ("", "", r"val\.de\.gz holds no sentences"),
], ids=["empty-on-both-sides", "different-lengths", "empty-files"])
def test_files_that_do_not_pair_up_name_the_file_and_the_problem(tmp_path, unchecked_folder, german, english,
                                                                 message):
    write_gz(tmp_path / "val.de.gz", german)
    write_gz(tmp_path / "val.en.gz", english)
    with pytest.raises(DataError, match=message):
        load_pairs("val", data_dir=tmp_path)


def test_blank_lines_after_the_last_sentence_are_not_sentences(tmp_path, unchecked_folder):
    write_gz(tmp_path / "val.de.gz", "Ein Hund.\nZwei Katzen.\n\n  \n")
    write_gz(tmp_path / "val.en.gz", "A dog.\r\nTwo cats.\r\n")
    assert load_pairs("val", data_dir=tmp_path) == [("Ein Hund.", "A dog."), ("Zwei Katzen.", "Two cats.")]


def test_two_splits_at_once_say_that_data_dir_is_not_a_split(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no folder named "val" here
    with pytest.raises(FileNotFoundError, match="give one split at a time"):
        load_pairs("train", "val")
