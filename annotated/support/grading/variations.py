"""Checks of notebook 15's exercises: the parameter count of a row of the paper's Table 3, the spread
between seeds pooled over rows, and the rule that reads a row against the base, against
``annotated.variations`` (``table3_parameters``, ``pooled_std``, ``compare_to_base``).

The count is tried on every row of Table 3 at the paper's sizes (one shared vocabulary of 37000),
then on small sizes where every size differs, each with a d_k of its own and with d_k = None. The two
statistics are tried on made-up records of BLEU scores and perplexities, rows of one seed and rows of
several, lists and tuples; the rule also on a difference exactly at its margin (numbers exact in
binary floating point), which is not ranked.
"""

import copy
import functools
import itertools
import math
import numbers
from collections.abc import Callable

import torch
import torch.nn as nn

from annotated.support.grading.core import (
    ExerciseFailed, _call, _function, _generic, _hard_coded_hint, _run_on_all_sizes,
)
from annotated.variations import compare_to_base, pooled_std, table3_parameters

# ---------------------------------------------------------------- sizes

# Every row of the paper's Table 3 whose count differs in kind (rows D and E change no size; E's
# learned table is not part of this exercise): (label, vocab_size, N, d_model, d_ff, h, d_k).
PAPER_VOCAB = 37000
PAPER_ROWS = [
    ("base", PAPER_VOCAB, 6, 512, 2048, 8, None),
    ("(A) h=1", PAPER_VOCAB, 6, 512, 2048, 1, None),
    ("(A) h=4", PAPER_VOCAB, 6, 512, 2048, 4, None),
    ("(A) h=16", PAPER_VOCAB, 6, 512, 2048, 16, None),
    ("(A) h=32", PAPER_VOCAB, 6, 512, 2048, 32, None),
    ("(B) d_k=16", PAPER_VOCAB, 6, 512, 2048, 8, 16),
    ("(B) d_k=32", PAPER_VOCAB, 6, 512, 2048, 8, 32),
    ("(C) N=2", PAPER_VOCAB, 2, 512, 2048, 8, None),
    ("(C) N=4", PAPER_VOCAB, 4, 512, 2048, 8, None),
    ("(C) N=8", PAPER_VOCAB, 8, 512, 2048, 8, None),
    ("(C) d_model=256", PAPER_VOCAB, 6, 256, 2048, 8, None),
    ("(C) d_model=1024", PAPER_VOCAB, 6, 1024, 2048, 8, None),
    ("(C) d_ff=1024", PAPER_VOCAB, 6, 512, 1024, 8, None),
    ("(C) d_ff=4096", PAPER_VOCAB, 6, 512, 4096, 8, None),
    ("big", PAPER_VOCAB, 6, 1024, 4096, 16, None),
]
# Small sizes, each tried with its d_k and with d_k=None (d_model // h = 6, 2 and 10). Within a set
# every size differs, from one set to the next every size changes.
ROW_SIZES = [dict(vocab_size=11, N=1, d_model=18, d_ff=26, h=3, d_k=2),
             dict(vocab_size=29, N=2, d_model=14, d_ff=9, h=7, d_k=3),
             dict(vocab_size=13, N=3, d_model=20, d_ff=40, h=2, d_k=5)]
_ROW_ARGUMENTS = ("vocab_size", "N", "d_model", "d_ff", "h", "d_k")

# Records of a benchmark, row name -> scores (one per seed): BLEU (every row three seeds), then
# BLEU with rows of one to four seeds, then perplexities as tuples, a row of five seeds among them.
# No list is sorted, so that a sort shows.
POOLED_RUNS = [
    {"base": [25.3, 24.8, 25.6], "(A) h=1": [24.1, 24.9, 24.4], "(B) d_k=16": [24.7, 25.2, 24.5],
     "(C) N=2": [23.6, 22.5, 23.9]},
    {"base": [25.4, 24.6, 25.9, 25.1], "(A) h=4": [24.2, 25.3], "(C) d_model=256": [23.9, 23.2, 23.4],
     "(D) P_drop=0.0": [24.4], "(E) learned positions": [25.0]},
    {"base": (5.12, 4.87, 5.31, 4.95, 5.06), "(C) d_ff=4096": (4.71, 4.93), "big": (4.41,)},
]
SIZE_SETS_POOLED = [dict(rows=len(r), scores=sum(map(len, r.values()))) for r in POOLED_RUNS]
# No row with two seeds: the spread cannot be measured.
POOLED_EDGES = [{"base": [25.2], "(A) h=16": [24.7]}, {}]

# compare_to_base: for each set a number of seeds for the base and for the row, and cases
# (base, row, spread, higher_is_better); None for higher_is_better leaves the default out of the
# call. Each case puts the difference of the means somewhere between the margins of the usual
# mistakes, or the best or the first seeds on another side than the means.
COMPARE_SIZES = [dict(base_seeds=3, row_seeds=2), dict(base_seeds=5, row_seeds=4),
                 dict(base_seeds=2, row_seeds=6)]
COMPARE_CASES = [
    [  # spread 0.4: margin 0.730; without the sqrt 0.667, 2 * spread 0.8, one standard error 0.365
        ([25.0, 25.6, 25.2], [25.8, 26.1], 0.4, None),     # +0.683: within (without the sqrt: better)
        ([25.0, 25.6, 25.2], [26.05, 25.95], 0.4, None),   # +0.733: better (2 * spread: within)
        ([25.0, 25.6, 25.2], [24.6, 24.9], 0.4, True),     # -0.517: within (one standard error: worse)
        ([25.0, 25.6, 25.2], [26.3, 24.3], 0.4, True),     # +0.033: within (first seeds: better)
        ([5.1, 4.8, 5.4], [4.2, 4.1], 0.4, False),         # perplexity -0.95: better
        ([5.1, 4.8, 5.4], [5.3, 6.1], 0.4, False),         # perplexity +0.6: within
        ([24.6, 26.2, 25.0], [27.2, 24.0], 0.4, True),     # +0.333: within (best seeds: better)
    ],
    [  # spread 0.3: margin 0.402; without the sqrt 0.270, 2 * spread 0.6, one standard error 0.201
        ([25.0, 24.4, 25.5, 24.9, 25.2], [24.3, 24.7, 24.5, 24.5], 0.3, None),   # -0.5: worse
        ([25.0, 24.4, 25.5, 24.9, 25.2], [25.6, 25.3, 25.2, 25.3], 0.3, True),   # +0.35: within
        ([4.9, 5.2, 5.0, 5.3, 4.6], [4.5, 4.7, 4.4, 4.6], 0.3, False),          # ppl -0.45: better
        ([4.9, 5.2, 5.0, 5.3, 4.6], [5.6, 5.3, 5.4, 5.5], 0.3, False),          # ppl +0.5: worse
        ([4.9, 5.2, 5.0, 5.3, 4.6], [5.2, 4.8, 5.3, 5.1], 0.3, False),          # ppl +0.1: within
        ([25.0, 24.4, 25.5, 24.9, 25.2], [25.3, 25.1, 24.8, 24.9], 0.3, None),   # +0.025: within
        ([25.0, 24.4, 25.5, 24.9, 25.2], [25.3, 25.1, 25.2, 25.36], 0.3, True),  # +0.24: within
        ([25.0, 24.4, 25.5, 24.9, 25.2], [25.6, 25.5, 25.6, 25.58], 0.3, True),  # +0.57: better
    ],
    [  # spread 0.5: margin 0.816; without the sqrt 0.667, 2 * spread 1.0, one standard error 0.408
        ([26.0, 25.0], [26.4, 26.2, 26.1, 26.5, 26.0, 26.2], 0.5, None),   # +0.733: within
        ([26.0, 25.0], [26.3, 26.4, 26.5, 26.6, 26.2, 26.2], 0.5, None),   # +0.867: better
        ([26.0, 25.0], [25.1, 24.7, 24.9, 25.0, 25.3, 24.6], 0.5, None),   # -0.6: within
        ([5.0, 5.4], [4.3, 4.2, 4.4, 4.1, 4.4, 4.2], 0.5, False),          # ppl -0.933: better
    ],
]
# A difference exactly at the margin, in numbers exact in binary floating point: 2 and 2 seeds,
# spread 0.5, margin 2 * 0.5 * sqrt(1/2 + 1/2) = 1.0 and means 1.0 apart. Not ranked.
COMPARE_EDGES = [((24.0, 25.0), (25.0, 26.0), 0.5, True), ((6.5, 5.5), (4.5, 5.5), 0.5, False)]
# Just inside that margin, 1 - 1/128 (exact in binary): within the noise for the course's rule and for a strict
# <, ranked by a margin of fewer than about 1.984 standard errors (1.96 or 1.645, the normal distribution's
# two- and one-sided 95% points).
COMPARE_NEAR_EDGE = ((24.0, 25.0), (24.9921875, 25.9921875), 0.5, True)
RESULTS = ("better", "worse", "within the noise")

SIZE_SETS = {
    "check_row_parameters": ROW_SIZES,
    "check_pooled_std": SIZE_SETS_POOLED,
    "check_compare_to_base": COMPARE_SIZES,
}


def _hint(how: str) -> Callable:
    def hint(passed: list, sizes: dict, message: str) -> str:
        return _hard_coded_hint(passed, sizes, message, how)
    return hint


# ---------------------------------------------------------------- 15.1 the parameters of a row


def _row_count(vocab: int, N: int, d_model: int, d_ff: int, h: int, d_k: int | None, **wrong) -> int:
    """The parameters of make_variant for one row, one shared vocabulary, by formula; each keyword
    makes one of the usual mistakes."""
    d, f, V = d_model, d_ff, vocab
    if d_k is None:
        d_k = 64 if wrong.get("none_as_64") else d // 8 if wrong.get("none_as_eighth") else d // h
    if wrong.get("d_k_ignored"):
        d_k = d // h
    d_v = d_k if wrong.get("d_k_for_values") else d // h
    b = 0 if wrong.get("no_bias") or wrong.get("no_attention_bias") else 1  # nn.Linear's bias, or none
    qk = d_k if wrong.get("qk_one_head") else h * d_k  # the columns of W_Q and of W_K
    vo = h * d_v  # the columns of W_V, the rows of W_O: d_model, unless d_v is taken for d_k
    attention = 2 * (d * qk + qk * b) + (d * vo + vo * b) + (vo * d + d * b)
    if wrong.get("full_heads"):  # h matrices of d x d for each of W_Q, W_K, W_V, W_O
        attention = 4 * h * (d * d + d * b)
    ff_bias = 0 if wrong.get("no_bias") or wrong.get("no_ff_bias") else f + d
    ffn = 2 * d * f + ff_bias
    norm = 0 if wrong.get("no_norms") else (d if wrong.get("gamma_only") else 2 * d)
    decoder_attentions, decoder_norms = 2, 3
    if wrong.get("no_cross_attention"):
        decoder_attentions = 1
    if wrong.get("two_sublayers"):
        decoder_attentions, decoder_norms = 1, 2
    layers = 1 if wrong.get("one_layer") else N
    encoder = layers * (attention + ffn + 2 * norm)
    decoder = layers * (decoder_attentions * attention + ffn + decoder_norms * norm)
    tables = wrong.get("tables", 1) * V * d
    generator_bias = 0 if wrong.get("no_bias") or wrong.get("no_generator_bias") else V
    return tables + encoder + decoder + generator_bias


# (keywords of _row_count, what is wrong); a mistake is recognized only when it explains the
# learner's count on every row of a set in which it changes the count.
_ROW_MISTAKES = [
    (dict(no_bias=True),
     "every bias is missing (the attention projections', the feed-forward network's and the "
     "generator's): nn.Linear has a bias unless told otherwise, d_out numbers next to its "
     "d_in x d_out matrix"),
    (dict(no_attention_bias=True),
     "the biases of the attention projections are missing: W_Q and W_K have h * d_k each, W_V and W_O "
     "d_model each (the paper's matrices are bare, but the course builds them with nn.Linear)"),
    (dict(no_ff_bias=True),
     "the feed-forward network's biases are missing: FFN(x) = max(0, x W_1 + b_1) W_2 + b_2 has b_1 "
     "(d_ff numbers) and b_2 (d_model) besides its two matrices (§3.3)"),
    (dict(no_generator_bias=True),
     "the generator's bias is missing: its matrix is the shared embedding table, but its bias, "
     "vocab_size numbers, is its own"),
    (dict(tables=3),
     "the vocabulary table is counted three times (source embedding, target embedding, generator): with "
     "one shared vocabulary the three are one tensor (§3.4), counted once, vocab_size x d_model"),
    (dict(tables=2),
     "the vocabulary table is counted twice: with one shared vocabulary the source embedding, the target "
     "embedding and the generator's matrix are one tensor (§3.4), counted once, vocab_size x d_model"),
    (dict(no_norms=True),
     "the layer norms are missing: each has a gain and a bias of d_model numbers, one per sublayer "
     "(2 in an encoder layer, 3 in a decoder layer)"),
    (dict(gamma_only=True),
     "each layer norm counts d_model numbers; it has two vectors of d_model, the gain and the bias"),
    (dict(d_k_for_values=True),
     "you sized W_V and W_O with d_k too: row B changes the width of queries and keys alone, the values "
     "keep d_v = d_model // h, so W_V is d_model x d_model and W_O d_model x d_model whatever d_k is"),
    (dict(d_k_ignored=True),
     "your count ignores d_k: row B's narrower keys make W_Q and W_K d_model x (h * d_k), with h * d_k "
     "biases each; d_k = d_model // h only when d_k is None"),
    (dict(qk_one_head=True),
     "W_Q and W_K have h * d_k columns, d_k for each of the h heads; you counted d_k"),
    (dict(none_as_64=True),
     "with d_k=None you use 64, the base model's d_k written into your code: d_k is d_model // h "
     "whenever the row does not give it"),
    (dict(none_as_eighth=True),
     "with d_k=None you use d_model // 8, the base model's h written into your code: d_k is "
     "d_model // h, with the row's h"),
    (dict(no_cross_attention=True),
     "the decoder's encoder-decoder attention is missing: a decoder layer holds two MultiHeadAttention "
     "modules (self-attention and attention over the memory), so its attention counts twice"),
    (dict(two_sublayers=True),
     "you counted a decoder layer with 2 sublayers, as an encoder layer: it has a third, the "
     "encoder-decoder attention, with its own layer norm"),
    (dict(full_heads=True),
     "you gave each head its own d_model x d_model matrices: the h heads' W_i^Q are d_model x d_k "
     "each, side by side one d_model x (h * d_k) matrix (notebook 04); without a d_k of its own, a "
     "row's count does not depend on h"),
    (dict(one_layer=True),
     "you counted one layer per stack: the encoder and the decoder each stack N identical layers, each "
     "with its own parameters"),
]


_GROUPS = {"no_bias": {"attention bias", "ff bias", "generator bias"}, "no_attention_bias": {"attention bias"},
           "no_ff_bias": {"ff bias"}, "no_generator_bias": {"generator bias"}, "tables": {"tables"},
           "no_norms": {"norms"}, "gamma_only": {"norms"}, "d_k_for_values": {"d_k"}, "d_k_ignored": {"d_k"},
           "qk_one_head": {"d_k"}, "full_heads": {"d_k"}, "none_as_64": {"none"}, "none_as_eighth": {"none"},
           "no_cross_attention": {"decoder"}, "two_sublayers": {"decoder"}, "one_layer": {"layers"}}


def _row_mistake(rows: list[tuple], got: list[int]) -> str | None:
    """The mistake, or pair of mistakes (of different parts of the model), that gives the learner's
    counts on all ``rows``."""
    for m, text in _ROW_MISTAKES:
        if all(_row_count(*r, **m) == n for r, n in zip(rows, got)):
            return text
    for (m1, t1), (m2, t2) in itertools.combinations(_ROW_MISTAKES, 2):
        if set().union(*(_GROUPS[k] for k in m1)) & set().union(*(_GROUPS[k] for k in m2)):
            continue
        if all(_row_count(*r, **m1, **m2) == n for r, n in zip(rows, got)):
            return f"two things: {t1}; and {t2}"
    return None


@functools.lru_cache(maxsize=128)
def _expected(vocab: int, N: int, d_model: int, d_ff: int, h: int, d_k: int | None) -> int:
    """``table3_parameters`` (a model built on the meta device), checked against the formula; kept,
    since a learner runs the check again and again."""
    with torch.random.fork_rng(devices=[]):
        count = table3_parameters(vocab, d_k, N=N, d_model=d_model, d_ff=d_ff, h=h)
    assert count == _row_count(vocab, N, d_model, d_ff, h, d_k), "the check's formula differs from make_variant"
    return count


def _describe_row(row: tuple) -> str:
    return ", ".join(f"{k}={v}" for k, v in zip(_ROW_ARGUMENTS, row))


def _counted_row(fn: Callable, name: str, args: tuple) -> int:
    """The learner's count for one row, refused unless it is an int computed without building modules."""
    built = []
    init = nn.Module.__init__

    def spy(self, *a, **kw):
        built.append(type(self).__name__)
        init(self, *a, **kw)

    nn.Module.__init__ = spy
    try:
        result = _call(fn, *args, roles=_ROW_ARGUMENTS[: len(args)])
    finally:
        nn.Module.__init__ = init
    call = f"{name}({', '.join(map(repr, args))})"
    if built:
        kinds = list(dict.fromkeys(built))
        what = kinds[-1] + (f" and {len(kinds) - 1} other kinds of module" if len(kinds) > 1 else "")
        raise ExerciseFailed(
            f"{call} builds modules ({what}) to count their parameters: count from the formulas instead "
            "(the check itself compares with a model built on the meta device, table3_parameters); that is "
            "the exercise, and it is how the paper's sizes were chosen before anything was built."
        )
    if result is None:
        raise ExerciseFailed(f"{call} returned None: did you forget the `return` of the count?")
    if isinstance(result, bool) or not isinstance(result, numbers.Integral):
        if isinstance(result, float):
            raise ExerciseFailed(
                f"{call} returned a float, {result!r}: a count is a whole number; keep to integer arithmetic "
                "(d_model // h rather than d_model / h) and return an int."
            )
        if torch.is_tensor(result):
            raise ExerciseFailed(f"{call} returned a tensor; return the count as a Python int.")
        raise ExerciseFailed(f"{call} should return the count as an int, got {type(result).__name__}")
    return int(result)


def _check_rows(fn: Callable, name: str, rows: list[tuple], labels: list[str]) -> None:
    expected = [_expected(*r) for r in rows]
    got = [_counted_row(fn, name, r) for r in rows]
    if got == expected:
        return
    wrong = next(i for i, (n, e) in enumerate(zip(got, expected)) if n != e)
    where = (f"{name}({_describe_row(rows[wrong])}) counts {got[wrong]:,} parameters ({labels[wrong]}); "
             f"the course's model has {expected[wrong]:,}")
    mistake = _row_mistake(rows, got)
    if mistake:
        raise ExerciseFailed(f"{where}. Your counts fit this: {mistake}.")
    if len(set(got)) == 1 and len(set(expected)) > 1:
        raise ExerciseFailed(
            f"{name} gives {got[0]:,} for every row ({len(rows)} rows, from {min(expected):,} to "
            f"{max(expected):,} parameters): is the count of one model written into your code? Compute it "
            "from the arguments."
        )
    raise _generic(
        f"{where}, {got[wrong] - expected[wrong]:+,} off. Count one piece at a time and compare with "
        "the course's modules: sum(p.numel() for p in NarrowKeyAttention(d_model, h, d_k).parameters()) "
        "(annotated.variations), the same for PositionwiseFeedForward(d_model, d_ff) and "
        "LayerNorm(d_model), then a layer of each kind, the two stacks, the one table and the "
        "generator's bias."
    )


def _small_rows(sizes: dict) -> list[tuple]:
    """The rows of a set of small sizes: with its d_k (row B), and with d_k=None."""
    row = tuple(sizes[k] for k in _ROW_ARGUMENTS)
    return [row, row[:-1] + (None,)]


def check_row_parameters(row_parameters: Callable) -> None:
    """Check ``row_parameters(vocab_size, N=6, d_model=512, d_ff=2048, h=8, d_k=None) -> int``
    against ``annotated.variations.table3_parameters`` (the row's model built on the meta device) for
    every row of Table 3 at the paper's sizes (one shared vocabulary of 37000: the base, rows A, B and
    C, the big model), then for the small sizes of ``ROW_SIZES``, each with a d_k of its own and with
    d_k=None; then calls it with the vocabulary alone, to see that the defaults are the base model.

    Diagnoses: a result that is not an int (a float from /, a tensor); a model built to count it; any
    bias forgotten (all, the attention's, the feed-forward's, the generator's); the shared table
    counted twice or three times; layer norms forgotten or counted with their gain only; W_V and W_O
    sized with d_k (the values keep d_model // h); d_k ignored, or W_Q and W_K given d_k columns
    instead of h * d_k; d_k=None read as 64 or d_model // 8 (the base's d_k or h written in); the
    decoder's cross-attention forgotten, or a decoder layer counted with 2 sublayers; per-head
    d_model x d_model matrices; one layer per stack; any two of these together; defaults other than
    the base model's; the same number for every row, and sizes written into the code."""
    name = _function(row_parameters, "check_row_parameters", "row_parameters")
    paper = [r[1:] for r in PAPER_ROWS]
    _check_rows(row_parameters, name, paper, [r[0] for r in PAPER_ROWS])
    passed = []
    for sizes in ROW_SIZES:
        try:
            _check_rows(row_parameters, name, _small_rows(sizes), ["small sizes, d_k given", "small sizes, d_k=None"])
        except ExerciseFailed as err:
            if getattr(err, "generic", False):
                before = "".join(f"; ({', '.join(f'{k}={v}' for k, v in p.items())})" for p in passed)
                raise ExerciseFailed(
                    f"{err}\nHint: the same function passed with every row of Table 3 at the paper's sizes"
                    f"{before} but not with ({', '.join(f'{k}={v}' for k, v in sizes.items())}): is a size "
                    "written into your code (37000, 512, 2048, 8, 64)? Use the arguments, and d_model // h "
                    "when d_k is None."
                ) from None
            raise
        passed.append(sizes)
    base = _expected(*paper[0])
    n = _counted_row(row_parameters, name, (PAPER_VOCAB,))
    if n != base:
        raise ExerciseFailed(
            f"{name}({PAPER_VOCAB}) counts {n:,}, but with every other argument left out it is the base "
            f"model, {base:,} (as {name}({PAPER_VOCAB}, 6, 512, 2048, 8, None) counts): give the parameters "
            "the defaults of the exercise's def line, N=6, d_model=512, d_ff=2048, h=8, d_k=None."
        )
    big = _expected(*paper[-1])
    print(
        f"check_row_parameters passed: {name} equals table3_parameters on all {len(PAPER_ROWS)} rows of Table 3 "
        f"that change a size (base {base:,}, big {big:,}, with one vocabulary of {PAPER_VOCAB}) and on "
        f"{2 * len(ROW_SIZES)} small rows, with and without a d_k of their own; the defaults are the base model."
    )


# ---------------------------------------------------------------- 15.2 the spread between seeds


def _rows_of(runs: dict, at_least: int = 2) -> list[list[float]]:
    return [list(s) for s in runs.values() if len(s) >= at_least]


def _std(scores: list[float], ddof: int = 1) -> float:
    mean = sum(scores) / len(scores)
    return (sum((x - mean) ** 2 for x in scores) / (len(scores) - ddof)) ** 0.5


def _pooled_variant(runs: dict, how: str) -> float:
    """The spread by one of the usual wrong recipes."""
    several = _rows_of(runs)
    everything = [x for s in runs.values() for x in s]
    squares = sum(sum((x - sum(s) / len(s)) ** 2 for x in s) for s in several)
    freedom = sum(len(s) - 1 for s in several)
    if how == "grand":  # one mean for every score
        return _std(everything)
    if how == "grand_n":
        return _std(everything, ddof=0)
    if how == "grand_several":  # the rows of one seed left out, but still one grand mean
        return _std([x for s in several for x in s])
    if how == "by_n":
        return (squares / sum(len(s) for s in several)) ** 0.5
    if how == "by_n_all":
        return (squares / len(everything)) ** 0.5
    if how == "mean_of_stds":
        return sum(_std(s) for s in several) / len(several)
    if how == "mean_of_stds_n":
        return sum(_std(s, ddof=0) for s in several) / len(several)
    if how == "mean_of_stds_zeros":  # a row of one seed counted with a spread of 0
        return sum(_std(s) if len(s) > 1 else 0.0 for s in runs.values()) / len(runs)
    if how == "mean_of_stds_n_zeros":  # np.std (ddof=0) of every row, one seed giving 0
        return sum(_std(s, ddof=0) for s in runs.values()) / len(runs)
    if how == "mean_of_variances":
        return (sum(_std(s) ** 2 for s in several) / len(several)) ** 0.5
    if how == "single_freedom":  # a row of one seed adds 0 to the squares and 1 to the freedom
        return (squares / sum(max(len(s) - 1, 1) for s in runs.values())) ** 0.5
    if how == "variance":
        return squares / freedom
    if how == "first_row":
        return _std(list(next(iter(runs.values()))))
    raise ValueError(how)


_POOLED_MISTAKES = [
    (("grand", "grand_n", "grand_several"),
     "you took the standard deviation of all the scores together, around one grand mean: the differences "
     "between the rows, which are what the benchmark measures, are counted as noise. Take each score's "
     "deviation from its own row's mean"),
    (("by_n", "by_n_all"),
     "you divided the sum of squared deviations by the number of scores; each row's mean uses up one "
     "degree of freedom, so divide by the sum of (seeds - 1) over the rows with two seeds or more (the "
     "unbiased n - 1, as statistics.stdev and np.std(ddof=1) do; np.std divides by n unless given ddof=1)"),
    (("mean_of_stds",),
     "you averaged the rows' standard deviations (statistics.stdev of each row, then the mean): pool the "
     "variances instead, sqrt(sum of squared deviations / sum of (seeds - 1)), so that a row of four seeds "
     "weighs more than a row of two and the square root comes last"),
    (("mean_of_stds_n",),
     "you averaged the rows' standard deviations, each divided by n (np.std's default, ddof=0): pool the "
     "variances, sqrt(sum of squared deviations / sum of (seeds - 1))"),
    (("mean_of_stds_zeros", "mean_of_stds_n_zeros", "single_freedom"),
     "a row with one seed is counted: it has no spread to measure (its deviation from its own mean is 0), "
     "and counting it as a spread of 0 or a degree of freedom makes the noise look smaller than it is. "
     "Skip the rows with fewer than two seeds"),
    (("mean_of_variances",),
     "you averaged the rows' variances, each row alike: pool them weighted by their degrees of freedom, "
     "sum of squared deviations / sum of (seeds - 1), so that a row of four seeds weighs more than a "
     "row of two"),
    (("variance",),
     "your result is the pooled variance: the spread is its square root, sqrt(sum of squared "
     "deviations / sum of (seeds - 1))"),
    (("first_row",),
     "your result is the standard deviation of one row only: pool every row with two seeds or more"),
]


def _close(a: float, b: float) -> bool:
    """Equal up to the rounding of float32 (torch's default dtype) on scores of about 25."""
    return math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-6)


def _show_runs(runs: dict) -> str:
    text = repr(runs)
    return text if len(text) <= 120 else text[:117] + "..."


def _unchanged(call: str, before, after, what: str) -> None:
    if before != after or [type(v) for v in _values(before)] != [type(v) for v in _values(after)]:
        now = _show_runs(after) if isinstance(after, dict) else repr(after)
        raise ExerciseFailed(
            f"{call} changed {what} in place (now {now}): "
            "a function must not change its inputs, whoever called it uses them again (the notebook's "
            "record of runs, the scores of the base). Work on copies: sorted(scores) rather than "
            "scores.sort(), a new dict or list rather than del, pop or append on the one you were given."
        )


def _values(x) -> list:
    return list(x.values()) if isinstance(x, dict) else list(x) if isinstance(x, (list, tuple)) else [x]


def _real(result, call: str, what: str) -> float:
    """A result that stands for one real number: a Python or numpy number, or a tensor or array
    holding one number (torch and numpy are fine for the sums)."""
    if result is None:
        raise ExerciseFailed(f"{call} returned None: did you forget the `return` of {what}?")
    if isinstance(result, bool):
        raise ExerciseFailed(f"{call} returned {result}: return {what} as a number.")
    if torch.is_tensor(result) or type(result).__module__ == "numpy":
        shape = tuple(getattr(result, "shape", ()))
        if torch.is_tensor(result):
            unreal = result.is_complex() or result.dtype == torch.bool
        else:
            unreal = getattr(getattr(result, "dtype", None), "kind", "O") not in "fiu"
        if math.prod(shape) != 1 or unreal:
            raise ExerciseFailed(f"{call} returned {type(result).__name__} of shape {shape} and dtype "
                                 f"{getattr(result, 'dtype', '?')}; return {what} as one real number, a float.")
        return float(result.item())
    if not isinstance(result, numbers.Real):
        raise ExerciseFailed(f"{call} should return {what} as a float, got {type(result).__name__}")
    return float(result)


_ONE_SEED_HINTS = (
    (r"division by zero|at least two data points|divide by zero",
     "\nHint: a row with one seed has no spread (its seeds - 1 is 0): skip the rows with fewer than two "
     "seeds, len(scores) >= 2."),
)


def _pooled_call(fn: Callable, name: str, runs: dict):
    """Call the learner's function on a copy of ``runs`` (a function that sorts or pops must not change
    the check's own record for the next run), then compare the copy with ``runs``."""
    given = copy.deepcopy(runs)
    call = f"{name}({_show_runs(runs)})"
    result = _call(fn, given, hints=_ONE_SEED_HINTS, roles=("runs",))
    _unchanged(call, runs, given, "the record of runs")
    return result, call


def _check_pooled_once(fn: Callable, name: str, sizes: dict) -> None:
    runs = POOLED_RUNS[SIZE_SETS_POOLED.index(sizes)]
    try:
        result, call = _pooled_call(fn, name, runs)
    except ExerciseFailed as err:
        if _ONE_SEED_HINTS[0][1] in str(err):  # the cause is known: not a size written in
            err.generic = False
        raise
    got = _real(result, call, "the spread")
    expected = pooled_std(runs)
    if math.isnan(got):
        raise ExerciseFailed(
            f"{call} returned nan: a row with one seed has no spread (0 / 0 with n - 1 = 0, or np.std(ddof=1) "
            "of one score): skip the rows with fewer than two seeds."
        )
    if _close(got, expected):
        return
    for recipes, message in _POOLED_MISTAKES:
        for how in recipes:
            if _close(got, _pooled_variant(runs, how)):
                raise ExerciseFailed(f"{call} returned {got:.4f}, the pooled spread is {expected:.4f}: {message}.")
    raise _generic(
        f"{call} returned {got:.6g}; the spread pooled over the rows with two seeds or more is "
        f"{expected:.6g}: sqrt(sum over those rows of the squared deviations from the row's own mean / sum "
        "of (seeds - 1))."
    )


def check_pooled_std(pooled_std_fn: Callable) -> None:
    """Check ``pooled_std(runs) -> float`` against ``annotated.variations.pooled_std`` on made-up records
    of a benchmark (row name -> a list or tuple of scores, one per seed): rows of three seeds each, rows
    of one to four seeds, perplexities as tuples; then on records without a row of two seeds, which must
    raise ValueError.

    Diagnoses: a result that is not a number; the standard deviation of all the scores around one grand
    mean (row differences counted as noise); dividing by n instead of n - 1 (np.std's default); the
    rows' standard deviations averaged (statistics.stdev per row, then the mean), or their variances
    averaged without weights; rows with one seed counted (a spread of 0, a degree of freedom), or
    dividing by zero on them (an exception or nan); the variance without its square root; one row
    only; the record or its lists changed in place (sorted, popped); no ValueError, or another
    exception, when no row has two seeds; row names or numbers of seeds written into the code."""
    name = _function(pooled_std_fn, "check_pooled_std", "pooled_std")
    _run_on_all_sizes(lambda sizes: _check_pooled_once(pooled_std_fn, name, sizes), SIZE_SETS_POOLED,
                      _hint("Loop over runs.values() (or .items()) and take len(scores) of each row."))
    for runs in POOLED_EDGES:
        call = f"{name}({_show_runs(runs)})"
        why = ("no row has two seeds, so there is no spread to measure: raise ValueError with a message "
               "that says so (a spread of 0 would rank every difference, and an exception of another "
               "kind or a nan tells the caller nothing)")
        try:
            result, _ = _pooled_call(pooled_std_fn, name, runs)
        except ExerciseFailed as err:
            if isinstance(err.__cause__, ValueError):  # statistics.StatisticsError is one too
                continue
            if err.__cause__ is None:
                raise
            raise ExerciseFailed(f"{call} raised {type(err.__cause__).__name__}: {err.__cause__}; {why}.") from None
        raise ExerciseFailed(f"{call} returned {result!r}; {why}.")
    print(
        f"check_pooled_std passed: {name} pools the spread between seeds as the course's pooled_std does on "
        f"{len(POOLED_RUNS)} records ({', '.join(str(s['rows']) + ' rows' for s in SIZE_SETS_POOLED)}; rows "
        "of one seed skipped, lists and tuples), leaves them as they were, and raises ValueError when no "
        "row has two seeds."
    )


# ---------------------------------------------------------------- 15.3 a row against the base


def _mean(x) -> float:
    return sum(x) / len(x)


def _rule(base, row, spread, higher_is_better, margin_of=None, pick=_mean, strict=False, sign=1,
          ignore_direction=False) -> str:
    """The course's rule, or one of the usual mistakes."""
    if higher_is_better is None:
        higher_is_better = True
    difference = sign * (pick(row) - pick(base))
    margin = (margin_of or (lambda s, nr, nb: 2 * s * (1 / nr + 1 / nb) ** 0.5))(spread, len(row), len(base))
    if (abs(difference) < margin) if strict else (abs(difference) <= margin):
        return "within the noise"
    return "better" if (difference > 0) == (higher_is_better or ignore_direction) else "worse"


_COMPARE_MISTAKES = [
    (dict(margin_of=lambda s, nr, nb: 2 * s * (1 / nr + 1 / nb)),
     "your margin has no square root: two standard errors of a difference of means are 2 * spread * "
     "sqrt(1/seeds of the row + 1/seeds of the base) (variances add, standard deviations do not)"),
    (dict(margin_of=lambda s, nr, nb: 2 * s),
     "your margin is 2 * spread, the spread of single runs: the means of several seeds vary less, by "
     "sqrt(1/seeds of the row + 1/seeds of the base); the margin is 2 * spread * that square root"),
    (dict(margin_of=lambda s, nr, nb: s * (1 / nr + 1 / nb) ** 0.5),
     "your margin is one standard error: the course's rule ranks a difference only beyond two, "
     "2 * spread * sqrt(1/seeds of the row + 1/seeds of the base)"),
    (dict(pick=max),
     "you compared the best seeds (max): compare the means of the seeds; the best of several runs is "
     "itself noise, and it grows with the number of seeds"),
    (dict(pick=lambda x: x[0]),
     "you compared the first seeds: compare the means of all the seeds, sum(row) / len(row) against "
     "sum(base) / len(base)"),
    (dict(ignore_direction=True),
     "you ignore higher_is_better: for a perplexity (higher_is_better=False) lower is better, so a row "
     "whose mean is below the base's by more than the margin is 'better'"),
    (dict(sign=-1),
     "'better' and 'worse' are swapped: the difference is the row's mean minus the base's; with "
     "higher_is_better a positive difference beyond the margin is 'better'"),
]
_BEST_OF_DIRECTION = (
    "you compared the best seeds (max for BLEU, min for perplexity): compare the means of the seeds; the best "
    "of several runs is itself noise, and it grows with the number of seeds")
_BELOW_TWO = ("your margin is under two standard errors (1.96 or 1.645, the normal distribution's two- and one-sided "
              "95% points, would do this): the course's rule ranks a difference only beyond 2 * spread * "
              "sqrt(1/seeds of the row + 1/seeds of the base), with exactly 2, a round rule fixed before the results")
_STRICT = ("a difference exactly at the margin is ranked: the rule ranks a difference only beyond two standard "
           "errors, abs(difference) > margin; at the margin itself it is 'within the noise' (<= margin)")


def _compare_call(fn: Callable, name: str, case: tuple) -> tuple[str, str]:
    base, row, spread, higher = case
    args = (base, row, spread) if higher is None else (base, row, spread, higher)
    shown = ", ".join(map(repr, args))
    call = f"{name}({shown})"
    given = copy.deepcopy(args)  # the check's own lists stay as they are, whatever the function does
    result = _call(fn, *given, roles=("base", "row", "spread", "higher_is_better")[: len(args)])
    _unchanged(call, base, given[0], "base")
    _unchanged(call, row, given[1], "row")
    if isinstance(result, str) and result in RESULTS:
        return result, call
    if isinstance(result, bool) or result is None:
        what = "None (no `return`?)" if result is None else str(result)
    else:
        what = repr(result)
    near = ""
    if isinstance(result, str) and result.strip().lower().replace("_", " ") in RESULTS + ("within noise", "noise"):
        near = " The words matter: the notebook's table and the benchmark compare these strings exactly."
    raise ExerciseFailed(f"{call} returned {what}; return exactly one of the strings 'better', 'worse' or "
                         f"'within the noise'.{near}")


def _check_compare_once(fn: Callable, name: str, sizes: dict) -> None:
    cases = COMPARE_CASES[COMPARE_SIZES.index(sizes)]
    results = [_compare_call(fn, name, case) for case in cases]
    got = [r for r, _ in results]
    expected = [compare_to_base(*c[:3], c[3] if c[3] is not None else True) for c in cases]
    if got == expected:
        return
    wrong = next(i for i, (g, e) in enumerate(zip(got, expected)) if g != e)
    base, row, spread, _ = cases[wrong]
    where = (f"{results[wrong][1]} returned {got[wrong]!r}; the course's rule gives {expected[wrong]!r} (the means "
             f"differ by {_mean(row) - _mean(base):+.3f}, the margin is 2 * {spread} * sqrt(1/{len(row)} + "
             f"1/{len(base)}) = {2 * spread * (1 / len(row) + 1 / len(base)) ** 0.5:.3f})")
    if all(g == _rule(*c, pick=max if c[3] in (None, True) else min) for g, c in zip(got, cases)):
        raise ExerciseFailed(f"{where}: {_BEST_OF_DIRECTION}.")
    for keywords, message in _COMPARE_MISTAKES:
        if all(g == _rule(*c, **keywords) for g, c in zip(got, cases)):
            raise ExerciseFailed(f"{where}: {message}.")
    raise _generic(f"{where}. A difference counts only beyond the margin, abs(difference) > margin; then "
                   "'better' when the row is higher and higher_is_better (or lower and not), 'worse' otherwise.")


def check_compare_to_base(compare_to_base_fn: Callable) -> None:
    """Check ``compare_to_base(base, row, spread, higher_is_better=True) -> str`` against
    ``annotated.variations.compare_to_base`` on rows of BLEU scores and perplexities with several numbers
    of seeds (``COMPARE_SIZES``), each difference of means placed between the margins of the usual
    mistakes, then on two differences exactly at the margin (numbers exact in binary floating point),
    which are 'within the noise'.

    Diagnoses: a result other than the three strings (a bool, other words); the margin without its square
    root, 2 * spread alone, or one standard error instead of two; the best seeds or the first seeds
    compared instead of the means; higher_is_better ignored (perplexity: lower is better); 'better' and
    'worse' swapped; a margin of fewer standard errors than two (1.96); a difference exactly at the
    margin ranked (< for <=); the scores changed in place
    (sorted); numbers of seeds written into the code."""
    name = _function(compare_to_base_fn, "check_compare_to_base", "compare_to_base")
    _run_on_all_sizes(lambda sizes: _check_compare_once(compare_to_base_fn, name, sizes), COMPARE_SIZES,
                      _hint("Use len(row) and len(base), the numbers of seeds you are given."))
    for case in COMPARE_EDGES:
        got, call = _compare_call(compare_to_base_fn, name, case)
        if got != "within the noise":
            near, near_call = _compare_call(compare_to_base_fn, name, COMPARE_NEAR_EDGE)
            if near != "within the noise":  # a difference inside the margin ranked too: the margin is too small
                raise ExerciseFailed(
                    f"{call} returned {got!r}, and {near_call} returned {near!r}: the means differ by 0.9921875, "
                    f"inside the margin 2 * 0.5 * sqrt(1/2 + 1/2) = 1.0; {_BELOW_TWO}."
                )
            raise ExerciseFailed(
                f"{call} returned {got!r}: the means differ by exactly the margin, 2 * 0.5 * sqrt(1/2 + 1/2) "
                f"= 1.0; {_STRICT}."
            )
    cases = sum(map(len, COMPARE_CASES)) + len(COMPARE_EDGES)
    print(
        f"check_compare_to_base passed: {name} reads {cases} rows against their base as the course's "
        "compare_to_base does (BLEU and perplexity, 2 to 6 seeds), ranking a difference of means only "
        "beyond 2 * spread * sqrt(1/seeds of the row + 1/seeds of the base), and not at the margin itself."
    )
