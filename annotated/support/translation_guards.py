"""The input guards of notebooks 09–11's modules, kept out of the code the notebook teaches.

A program needs its functions to refuse bad input with one clear line (a string where a list of
sentences belongs would be translated letter by letter; ``batch_size=0`` would loop forever); a
lesson reads better without those lines. So the taught functions and methods of
``annotated.data``, ``annotated.vocab``, ``annotated.bpe``, ``annotated.beam_search`` and
``annotated.evaluation`` hold no guard, and each of those modules ends by wrapping them with
:func:`guarded` and the matching check below. Whoever imports the package (the command line,
``annotated.translate``, the tests) gets the guarded versions; the notebook's cells define the plain
ones, which give the same results on valid input.
"""

import functools
import inspect
from collections import Counter
from collections.abc import Callable

from annotated.support.checks import (
    check_beam_arguments, check_decoding_inputs, check_finite_weights, check_not_text, check_sizes, check_tokens,
)


def guarded(function: Callable, check: Callable, by_name: bool = True) -> Callable:
    """``function``, calling ``check(**arguments)`` first with every argument by name (defaults
    included). ``check`` raises on bad input; it may return a dict of arguments to replace (a
    one-pass iterator it had to read, as a list). ``by_name=False``: ``check(*args, **kwargs)`` as
    given, for a function called so often (a word at a time) that binding names would slow it."""
    signature = inspect.signature(function)
    if not by_name:
        @functools.wraps(function)
        def checked_fast(*args, **kwargs):
            check(*args, **kwargs)
            return function(*args, **kwargs)

        return checked_fast

    @functools.wraps(function)
    def checked(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        replaced = check(**bound.arguments)
        if replaced:
            bound.arguments.update(replaced)
        return function(*bound.args, **bound.kwargs)

    return checked


# ------------------------------------------------------------------------ annotated.data

def load_pairs_inputs(split, data_dir, *, splits: tuple[str, ...], read_lines: Callable, **_):
    """A known split, and two files whose line i translates each other: the same number of lines,
    none empty (else a DataError naming the file and the line). Reads the two files once more than
    ``load_pairs`` itself (tens of milliseconds) so that a bad file gets its clear message.

    ``splits`` and ``read_lines`` are annotated.data's, given by that module when it wraps
    ``load_pairs`` (``functools.partial``): it imports this module, so this one does not import it."""
    from annotated.support.download import check_aligned, resolve_data_dir

    if split not in splits:
        raise ValueError(f"unknown split {split!r}; choose one of {splits}")
    directory = resolve_data_dir(data_dir)
    german_path, english_path = directory / f"{split}.de.gz", directory / f"{split}.en.gz"
    check_aligned(german_path, read_lines(german_path), english_path, read_lines(english_path))
    return {"data_dir": directory}


# ----------------------------------------------------------------------- annotated.vocab

def vocab_inputs(itos, default_index, **_):
    check_not_text(itos, "itos", "a list of tokens")
    if len(set(itos)) != len(itos):
        repeated = sorted(t for t, n in Counter(itos).items() if n > 1)[:5]
        raise ValueError(f"tokens must be unique, found {repeated} more than once")
    default_index_inputs(itos, default_index)


def default_index_inputs(itos, index):
    if index is not None and not 0 <= index < len(itos):
        raise ValueError(f"default index {index} is outside the vocabulary 0..{len(itos) - 1}")


def set_default_index_inputs(self, index, **_):
    default_index_inputs(self.itos, index)


def lookup_indices_inputs(tokens, **_):
    check_not_text(tokens, "tokens", "a list of tokens")  # a str would be looked up letter by letter


def lookup_tokens_inputs(self, indices, **_):
    indices = list(indices)
    for index in indices:
        if not 0 <= index < len(self.itos):  # a negative id would silently count from the end
            raise IndexError(f"id {index} is outside the vocabulary (0..{len(self.itos) - 1})")
    return {"indices": indices}


def build_vocab_inputs(iterator, min_freq, **_):
    if min_freq < 1:
        raise ValueError(f"min_freq must be at least 1, got {min_freq}")
    return {"iterator": [check_tokens(tokens) for tokens in iterator]}  # read once, checked


# ------------------------------------------------------------------------- annotated.bpe

def learn_bpe_inputs(num_merges, **_):
    check_sizes(allow_zero=True, num_merges=num_merges)


def segment_inputs(self, word):
    if not word:
        raise ValueError("cannot segment an empty word; split the text into words first")


def encode_inputs(words, spaces, **_):
    check_not_text(words, "words", "a list of words")
    if len(spaces) != len(words):
        raise ValueError(f"got {len(words)} words but {len(spaces)} space flags; give one flag per word")


def detokenize_inputs(pieces, **_):
    check_not_text(pieces, "pieces", "a list of pieces")


# ----------------------------------------------------------------- annotated.beam_search

def beam_search_inputs(model, src, src_mask, beam_size, max_len, length_penalty, bos_idx, eos_idx, pad_idx, **_):
    check_decoding_inputs(model, src, src_mask, max_len, bos_idx, eos_idx, pad_idx)  # or a clear error
    check_beam_arguments(beam_size, length_penalty)


# ------------------------------------------------------------------ annotated.evaluation

def translate_inputs(model, sentences, max_len, batch_size, **_):
    check_not_text(sentences, "sentences")  # a str would be translated character by character
    check_sizes(max_len=max_len, batch_size=batch_size)
    check_finite_weights(model)  # greedy decoding (beam_size None or 1) is not guarded by beam_search_inputs


def corpus_bleu_inputs(hypotheses, references, **_):
    check_not_text(hypotheses, "hypotheses")
    check_not_text(references, "references")
    if not hypotheses:
        raise ValueError("BLEU of an empty corpus is undefined: give at least one hypothesis and its reference")
    if len(hypotheses) != len(references):
        raise ValueError(
            f"got {len(hypotheses)} hypotheses but {len(references)} references; "
            f"BLEU needs one reference per hypothesis, in the same order"
        )


def cache_in_step(model, memory, src_mask, ys, cache=None) -> None:
    """``next_token_logits``'s cache must hold every position of ``ys`` but the newest."""
    held = cache[0]["self_k"].size(2) if cache and "self_k" in cache[0] else 0
    if cache and held != ys.size(1) - 1:
        raise ValueError(f"the cache holds {held} positions but ys has {ys.size(1)} tokens; it must hold "
                         f"all but the newest: call next_token_logits once per new token, from init_cache")
