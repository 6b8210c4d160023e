"""annotated.data: spaCy tokenizers and the Multi30k sentence pairs."""

import gzip
import os

import pytest

from annotated.data import SPLITS, load_pairs, read_lines, spacy_tokenizer, tokenizer
from annotated.support.download import ENV_VAR

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
