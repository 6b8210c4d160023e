"""German–English sentence pairs (Multi30k) and the tokenizers that split them into words.

The paper trains on WMT 2014 English–German, 4.5 million sentence pairs (§5.1). The
course uses Multi30k, 29,000 pairs of image captions, small enough to train on a laptop.
Tokens come from spaCy's rule-based tokenizers for German and English ("blank"
pipelines: no statistical model to download), lowercased.

Notebook: ``09_translating_german_to_english.ipynb``.
Fetch the data ahead of time with ``python -m annotated.data download [--dest DIR]``.
"""

import functools
import gzip
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from annotated.support.download import resolve_data_dir

if TYPE_CHECKING:
    from spacy.tokenizer import Tokenizer

SPLITS = ("train", "val", "test_2016_flickr")


@functools.lru_cache(maxsize=None)
def spacy_tokenizer(lang: str) -> "Tokenizer":
    """spaCy's rule-based tokenizer for ``lang`` ("de", "en"), built once and cached."""
    import spacy  # imported here: spaCy takes seconds to import and only tokenizing needs it

    return spacy.blank(lang).tokenizer


def tokenizer(lang: str) -> Callable[[str], list[str]]:
    """A function from a sentence to its lowercased tokens.

    ``tokenizer("de")("Zwei Männer.")`` gives ``["zwei", "männer", "."]``.
    """
    split = spacy_tokenizer(lang)

    def tokenize(text: str) -> list[str]:
        return [token.lower_ for token in split(text)]

    return tokenize


def read_lines(path: str | Path) -> list[str]:
    """The lines of a gzip-compressed UTF-8 text file, stripped of surrounding whitespace."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.strip() for line in f]


def load_pairs(split: str, data_dir: str | Path | None = None) -> list[tuple[str, str]]:
    """The (German, English) sentence pairs of a Multi30k split.

    ``data_dir`` is a directory holding the raw ``<split>.<lang>.gz`` files; without it,
    the environment variable ``ANNOTATED_DATA_DIR``, else a download cache
    (see ``annotated.support.download``).
    """
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose one of {SPLITS}")
    directory = resolve_data_dir(data_dir)
    german = read_lines(directory / f"{split}.de.gz")
    english = read_lines(directory / f"{split}.en.gz")
    if len(german) != len(english):
        raise ValueError(
            f"{split}: {len(german)} German lines but {len(english)} English lines; line i of "
            f"one file must translate line i of the other"
        )
    return list(zip(german, english))


if __name__ == "__main__":
    from annotated.support.download import main

    raise SystemExit(main())
