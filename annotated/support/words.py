"""Whole words back into text: the joining rules of the word-level path (``--bpe-merges 0``).

The course's models read and write byte-pair pieces, which ``annotated.bpe.detokenize`` joins by
their ``@@`` marks (notebook 10, section 3). A model trained on whole words (``BPE_MERGES = 0`` in
notebook 11, ``--bpe-merges 0`` on the command line) writes spaCy's word tokens, which carry no such
marks: :func:`detokenize_words` undoes what the English tokenizer split off (punctuation, ``'s``,
``n't``, hyphens, quotes). ``tests/test_evaluation.py`` checks that it gives every test reference
back from its tokens, lowercased.

Pieces and a literal ``@``: byte-pair pieces mark a join with ``@@`` (notebook 10), so an ``@`` of the
text itself next to a mark cannot be told from it: ``x@@y`` came back as ``x@ @y`` and ``max@web.de`` as
``max@ web.de``. ``annotated.bpe`` therefore writes every ``@`` of a word as :data:`LITERAL_AT` (``＠``,
the fullwidth at sign) inside its pieces, while learning merges and while segmenting, and its
``detokenize`` turns it back into ``@``: the text comes back exactly, whatever it holds. A word that
holds ``＠`` itself is refused (text goes through ``annotated.support.input_text.clean_sentence``,
whose NFKC turns it into ``@``). The checks of ``annotated.bpe``'s arguments are here too.
"""

import functools
import numbers
from collections.abc import Callable, Mapping

from annotated.support.checks import check_not_text, check_sizes

LITERAL_AT = "\uff20"  # FULLWIDTH COMMERCIAL AT: a literal "@" inside byte-pair pieces

NO_SPACE_BEFORE = {".", ",", "!", "?", ";", ":", ")", "]", "}", "%", "...", "n't", "-"}
NO_SPACE_AFTER = {"(", "[", "{", "-"}  # "-": the tokenizer splits "t-shirt" into "t", "-", "shirt"


def detokenize_words(tokens: list[str]) -> str:
    """Join word tokens into text: no space before punctuation, closing brackets and clitics
    ("'s", "n't"), none after opening brackets, none around hyphens, and double quotes
    hug what they enclose."""
    check_not_text(tokens, "tokens", "a list of tokens")
    tokens = list(tokens)
    bad = next((i for i, token in enumerate(tokens) if not isinstance(token, str)), None)
    if bad is not None:
        raise TypeError(f"tokens[{bad}] is a {type(tokens[bad]).__name__}, not a str: give the tokens as text "
                        f"(vocab.lookup_tokens(ids) turns ids into tokens)")
    text, glue_next, inside_quotes = "", True, False
    for token in tokens:
        glue = glue_next or token in NO_SPACE_BEFORE or token.startswith("'")
        glue_next = token in NO_SPACE_AFTER
        if token == '"':
            glue = glue or inside_quotes  # a closing quote: glue it to the word before
            glue_next = not inside_quotes  # an opening quote: glue the next word to it
            inside_quotes = not inside_quotes
        text += token if glue else " " + token
    return text


# ---------------------------------------------------------------------------------------------
# Byte-pair pieces (annotated.bpe): a literal "@" escaped, words and merges checked


def _check_word(word, name: str) -> None:
    """A word of a byte-pair model: a non-empty str without whitespace (a piece is written between spaces,
    in the pieces of a sentence and in bpe_codes.txt) and without LITERAL_AT (which stands for "@")."""
    if not isinstance(word, str):
        raise TypeError(f"{name} is a {type(word).__name__}, not a str: words are strings")
    if not word:
        raise ValueError(f"{name} is empty: a word has at least one character; split the text into words first")
    if any(char.isspace() for char in word):
        raise ValueError(f"{name} {word!r} holds whitespace: pieces are written between spaces (in a sentence "
                         f"and in bpe_codes.txt), so a word cannot hold one; split it into words "
                         f"(annotated.data.word_splitter)")
    if LITERAL_AT in word:
        raise ValueError(f"{name} {word!r} holds U+FF20 FULLWIDTH COMMERCIAL AT, which stands for '@' inside "
                         f"byte-pair pieces; write '@' (unicodedata.normalize('NFKC', text) does)")


def spell_inputs(word) -> None:
    """``spell``'s word: a non-empty str (its last character gets the end mark)."""
    if not isinstance(word, str) or not word:
        _check_word(word, "word")


def escape_at(word: str) -> str:
    """``word`` with every "@" written as LITERAL_AT, so that no "@" of a piece is taken for a join mark."""
    return word.replace("@", LITERAL_AT) if "@" in word else word


def unescape_at(text: str) -> str:
    """Text from pieces with each LITERAL_AT back as "@"."""
    return text.replace(LITERAL_AT, "@")


def learn_bpe_words(word_counts, num_merges, min_frequency, **_) -> dict:
    """``learn_bpe``'s word counts: a dict word -> count (an integer >= 0; a negative count would subtract
    pairs), each word a str as :func:`_check_word` wants; ``min_frequency`` a positive integer. Returns the
    counts with every "@" escaped, so that the merges speak the alphabet of the pieces."""
    if not isinstance(word_counts, Mapping):
        raise TypeError(f"word_counts must be a dict word -> count (e.g. a Counter of the training words), got "
                        f"{type(word_counts).__name__}")
    for word, count in word_counts.items():
        _check_word(word, "a word of word_counts")
        if not isinstance(count, numbers.Integral) or isinstance(count, bool) or count < 0:
            raise ValueError(f"word_counts[{word!r}] = {count!r}: a count is how often the word occurs, an integer "
                             f">= 0")
    check_sizes(min_frequency=min_frequency)
    if any("@" in word for word in word_counts):
        return {"word_counts": {escape_at(word): count for word, count in word_counts.items()}}
    return {}


def check_merges(encoder) -> None:
    """A BytePairEncoder's merges: pairs of two non-empty strings without whitespace, as bpe_codes.txt
    writes them ('left right' on a line) and reads them back."""
    for i, pair in enumerate(encoder.merges):
        if len(pair) != 2 or not all(isinstance(p, str) and p and not any(c.isspace() for c in p) for p in pair):
            raise ValueError(f"merge {i} {pair!r} is not a pair of two pieces without whitespace, ('left', 'right'): "
                             f"bpe_codes.txt could not hold it; give the merges learn_bpe learned")


def encode_words(words, spaces, **_) -> dict:
    """``BytePairEncoder.encode``'s words (each a str :func:`_check_word` accepts) and flags (each True or
    False); returned as lists, so that an iterator read here is not empty for ``encode``."""
    if isinstance(words, (str, bytes)):
        return {}  # check_not_text names it (annotated.support.translation_guards.encode_inputs)
    words, spaces = list(words), list(spaces)
    for i, word in enumerate(words):
        _check_word(word, f"words[{i}]")
    for i, space in enumerate(spaces):
        if space not in (True, False):
            raise TypeError(f"spaces[{i}] is {space!r}: give True where a space follows the word, else False")
    return {"words": words, "spaces": spaces}


def escaped_segment(segment: Callable) -> Callable:
    """``BytePairEncoder.segment`` of the word with every "@" escaped (a word with LITERAL_AT refused)."""

    @functools.wraps(segment)
    def segment_escaped(self, word):
        if not isinstance(word, str) or LITERAL_AT in word:
            _check_word(word, "word")
        return segment(self, escape_at(word) if "@" in word else word)

    return segment_escaped


def unescaped(detokenize: Callable) -> Callable:
    """``detokenize``, then every LITERAL_AT back as "@"."""

    @functools.wraps(detokenize)
    def detokenize_unescaped(pieces):
        if not isinstance(pieces, (str, bytes)):
            pieces = list(pieces)
            bad = next((i for i, piece in enumerate(pieces) if not isinstance(piece, str)), None)
            if bad is not None:
                raise TypeError(f"pieces[{bad}] is a {type(pieces[bad]).__name__}, not a str: give the pieces as "
                                f"text (vocab.lookup_tokens(ids) turns ids into pieces)")
        return unescape_at(detokenize(pieces))

    return detokenize_unescaped
