"""German–English sentence pairs (Multi30k) and the tokenizers that split them into words.

The paper trains on WMT 2014 English–German, 4.5 million sentence pairs (§5.1). The
course uses Multi30k, 29,000 pairs of image captions, small enough to train on a laptop.
Tokens come from spaCy's rule-based tokenizers for German and English ("blank"
pipelines: no statistical model to download), lowercased.

Notebook: ``10_data_and_byte_pairs.ipynb``.
Fetch the data ahead of time with ``python -m annotated.data download [--dest DIR]``.
"""

import functools
import gzip
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from annotated.support import translation_guards as guards
from annotated.support.download import explaining_read_errors, resolve_data_dir
from annotated.support.translation_guards import guarded

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


def word_splitter(lang: str) -> Callable[[str], tuple[list[str], list[bool]]]:
    """A function from a sentence to its lowercased words and, for each, whether a space
    follows it: what byte-pair encoding needs to give the text back (``annotated.bpe``).

    ``word_splitter("en")("Two dogs.")`` gives ``(["two", "dogs", "."], [True, False, False])``.
    Runs of spaces count as one space.
    """
    split = spacy_tokenizer(lang)

    def words_and_spaces(text: str) -> tuple[list[str], list[bool]]:
        tokens = [token for token in split(text) if not token.is_space]
        return [token.lower_ for token in tokens], [bool(token.whitespace_) for token in tokens]

    return words_and_spaces


def read_lines(path: str | Path) -> list[str]:
    """The lines of a gzip-compressed UTF-8 text file, stripped of surrounding whitespace.

    A byte-order mark before the first line is dropped ("utf-8-sig"), and so are blank lines
    at the very end. A file that is not gzip, is cut short or is not UTF-8 raises
    ``DataError`` naming it and the fix.
    """
    with gzip.open(path, "rt", encoding="utf-8-sig") as f:
        lines = [line.strip() for line in f]
    while lines and not lines[-1]:  # blank lines after the last sentence
        lines.pop()
    return lines


def load_pairs(split: str, data_dir: str | Path | None = None) -> list[tuple[str, str]]:
    """The (German, English) sentence pairs of a Multi30k split ("train", "val", "test_2016_flickr").

    ``data_dir`` is a directory holding the raw ``<split>.<lang>.gz`` files; without it,
    the environment variable ``ANNOTATED_DATA_DIR``, else a download cache
    (see ``annotated.support.download``). Line i of the German file translates line i of
    the English file.
    """
    directory = resolve_data_dir(data_dir)
    german = read_lines(directory / f"{split}.de.gz")
    english = read_lines(directory / f"{split}.en.gz")
    return list(zip(german, english, strict=True))


# Read errors (not gzip, cut short, not UTF-8) become a DataError naming the file and the fix
# (annotated/support/download.py), which the notebook's cell leaves out.
read_lines = explaining_read_errors(read_lines)

# The input guard (annotated/support/translation_guards.py), which the notebook's cells leave out: a
# known split, and two files of as many lines, none empty, else a DataError naming the file and the line.
# It is handed SPLITS and read_lines: the guards' module does not import this one, which imports it.
load_pairs = guarded(load_pairs, functools.partial(guards.load_pairs_inputs, splits=SPLITS, read_lines=read_lines))


if __name__ == "__main__":
    from annotated.support.download import main

    raise SystemExit(main())
