"""Checks of notebook 15 as declarations (``engine``): the parameter count of a row of the paper's Table 3, a
row's paired test against the base, and Holm's correction over the table's comparisons, against
``annotated.variations`` (``table3_parameters``, ``paired_test``, ``holm``)."""

import copy
import functools
import itertools
import math
import numbers
import statistics
from collections.abc import Callable

from scipy import stats

from annotated.support import record as recorder
from annotated.support.grading.engine import Declaration, Mistake, Probe, Value, check
from annotated.variations import FAMILY_ALPHA, holm, paired_test, table3_parameters

# Every row of Table 3 that changes a size, (label, vocab_size, N, d_model, d_ff, h, d_k), in an order where a
# mistake's count differs from the course's at the first row it is tried on (rows D and E change no size).
PAPER_VOCAB = 37000
PAPER_ROWS = [(label, PAPER_VOCAB, *sizes) for label, sizes in (
    ("(C) d_model=256", (6, 256, 2048, 8, None)), ("big", (6, 1024, 4096, 16, None)), ("base", (6, 512, 2048, 8, None)),
    *((f"(A) h={h}", (6, 512, 2048, h, None)) for h in (1, 4, 16, 32)),
    *((f"(B) d_k={d_k}", (6, 512, 2048, 8, d_k)) for d_k in (16, 32)),
    *((f"(C) N={n}", (n, 512, 2048, 8, None)) for n in (2, 4, 8)), ("(C) d_model=1024", (6, 1024, 2048, 8, None)),
    ("(C) d_ff=1024", (6, 512, 1024, 8, None)), ("(C) d_ff=4096", (6, 512, 4096, 8, None)))]
# Small sizes, each tried with its d_k and with d_k=None; every size differs within a set and between sets.
ROW_SIZES = [dict(vocab_size=11, N=1, d_model=18, d_ff=26, h=3, d_k=2),
             dict(vocab_size=29, N=2, d_model=14, d_ff=9, h=7, d_k=3),
             dict(vocab_size=13, N=3, d_model=20, d_ff=40, h=2, d_k=5)]
_ROW_ARGUMENTS = ("vocab_size", "N", "d_model", "d_ff", "h", "d_k")

# paired_test: seeds and the pooled spread's degrees of freedom (never seeds - 1), then cases (ds, spread) of BLEU
# and log-perplexity changes. The first set is the notebook's design: 4 seeds, a spread pooled over 18 rows of 4.
PAIRED_SIZES = [dict(seeds=4, freedom=54), dict(seeds=3, freedom=8), dict(seeds=6, freedom=15)]
PAIRED_CASES = [
    [([-3.4, -4.7, -2.1, -3.9], 1.1), ((0.8, -0.3, 1.9, 0.2), 0.9), ([0.052, -0.018, 0.113, 0.031], 0.061),
     ([0.5, -0.25, -0.5, 0.25], 0.5), ([1.6, 2.3, 0.9, 1.8], 0.7)],
    [([-1.2, -2.6, -0.7], 0.8), ((0.21, 0.35, 0.08), 0.12), ([2.9, 4.1, 3.2], 1.3), ([-0.4, 0.9, 0.1], 0.6)],
    [([0.7, -0.2, 1.1, 0.4, 0.9, 0.3], 0.5), ((-0.061, -0.094, -0.032, -0.075, -0.058, -0.049), 0.03),
     ([-2.8, -1.1, -3.6, -2.2, -0.9, -1.7], 1.2)],
]
PAIRED_KEYS = ("effect", "low", "high", "p")

# holm: comparisons m, then cases (p_values, alpha; None leaves the default out), where each usual mistake rejects
# another set than Holm's rule in some case. Names are the notebook's rows, or (row, score) pairs.
HOLM_SIZES = [dict(comparisons=8), dict(comparisons=5), dict(comparisons=12)]
_HOLM_KEYS = [("A1", "A2", "B8", "C-N1", "C-d64", "D-drop0", "D-ls0", "E"),
              (("A1", "BLEU"), ("A1", "log PPL"), ("B8", "BLEU"), ("B8", "log PPL"), ("E", "log PPL")),
              tuple(f"row {i}" for i in range(12))]
HOLM_CASES = [[(dict(zip(keys, ps)), alpha) for ps, alpha in cases] for keys, cases in zip(_HOLM_KEYS, [
    [  # alpha / (8 - k): 0.00625, 0.00714, 0.00833, 0.01, 0.0125, 0.0167, 0.025, 0.05
        ((0.0065, 0.3, 0.001, 0.016, 0.0095, 0.07, 0.013, 0.011), None),
        ((0.045, 0.9, 0.03, 0.055, 0.02, 0.5, 0.06, 0.05), 0.2),
        ((0.35, 0.0095, 0.006, 0.81, 0.002, 0.2, 0.6, 0.007), None),
        ((0.003, 0.0005, 0.0001, 0.004, 0.0008, 0.002, 0.0003, 0.001), 0.1)],
    [  # alpha / (5 - k): 0.01, 0.0125, 0.0167, 0.025, 0.05
        ((0.013, 0.004, 0.045, 0.016, 0.03), None), ((0.0125, 0.045, 0.0009, 0.024, 0.0095), 0.04),
        ((0.011, 0.3, 0.002, 0.022, 0.009), None)],
    [  # alpha / (12 - k): 0.00417, 0.00455, 0.005, 0.00556, 0.00625, 0.00714, 0.00833, 0.01, 0.0125, ...
        ((0.0044, 0.2, 0.001, 0.006, 0.0052, 0.9, 0.0048, 0.011, 0.5, 0.007, 0.0124, 0.012), None),
        ((0.3, 0.0002, 0.0045, 0.75, 0.015, 0.0009, 0.005, 0.008, 0.026, 0.018, 0.011, 0.04), 0.1),
        ((0.0041, 0.0042, 0.0046, 0.45, 0.0051, 0.00005, 0.95, 0.0061, 0.07, 0.0075, 0.033, 0.0099), None)]])]
# p-values exactly at their threshold, in numbers exact in binary floating point (alpha = 0.25, m = 4: the
# thresholds 0.0625, 0.125 and 0.25 are exact): p <= alpha / (m - k) rejects them.
HOLM_EDGES = [({"A1": 0.0625, "B8": 0.5, "C-N1": 0.75, "E": 0.375}, 0.25),
              ({"A1": 0.03125, "A16": 0.0625, "D-ls0": 0.125, "E": 0.25}, 0.25)]

SIZE_SETS = {"check_row_parameters": ROW_SIZES, "check_paired_test": PAIRED_SIZES, "check_holm": HOLM_SIZES}


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
    ffn = 2 * d * f + (0 if wrong.get("no_bias") or wrong.get("no_ff_bias") else f + d)
    norm = 0 if wrong.get("no_norms") else (d if wrong.get("gamma_only") else 2 * d)
    decoder_attentions, decoder_norms = (1, 2) if wrong.get("two_sublayers") else (
        1 if wrong.get("no_cross_attention") else 2, 3)
    layers = 1 if wrong.get("one_layer") else N
    encoder = layers * (attention + ffn + 2 * norm)
    decoder = layers * (decoder_attentions * attention + ffn + decoder_norms * norm)
    generator_bias = 0 if wrong.get("no_bias") or wrong.get("no_generator_bias") else V
    return wrong.get("tables", 1) * V * d + encoder + decoder + generator_bias


# (keywords of _row_count, the parts of the model it changes, what is wrong); two mistakes are named together only
# where they change different parts.
_ROW_MISTAKES = [
    (dict(no_bias=True), {"attention bias", "ff bias", "generator bias"},
     "every bias is missing (the attention projections', the feed-forward network's and the generator's): nn.Linear "
     "has a bias unless told otherwise, d_out numbers next to its d_in x d_out matrix"),
    (dict(no_attention_bias=True), {"attention bias"},
     "the biases of the attention projections are missing: W_Q and W_K have h * d_k each, W_V and W_O d_model each "
     "(the paper's matrices are bare, but the course builds them with nn.Linear)"),
    (dict(no_ff_bias=True), {"ff bias"},
     "the feed-forward network's biases are missing: FFN(x) = max(0, x W_1 + b_1) W_2 + b_2 has b_1 (d_ff numbers) "
     "and b_2 (d_model) besides its two matrices (§3.3)"),
    (dict(no_generator_bias=True), {"generator bias"},
     "the generator's bias is missing: its matrix is the shared embedding table, but its bias, vocab_size numbers, is "
     "its own"),
    (dict(tables=3), {"tables"},
     "the vocabulary table is counted three times (source embedding, target embedding, generator): with one shared "
     "vocabulary the three are one tensor (§3.4), counted once, vocab_size x d_model"),
    (dict(tables=2), {"tables"},
     "the vocabulary table is counted twice: with one shared vocabulary the source embedding, the target embedding "
     "and the generator's matrix are one tensor (§3.4), counted once, vocab_size x d_model"),
    (dict(no_norms=True), {"norms"},
     "the layer norms are missing: each has a gain and a bias of d_model numbers, one per sublayer (2 in an encoder "
     "layer, 3 in a decoder layer)"),
    (dict(gamma_only=True), {"norms"},
     "each layer norm counts d_model numbers; it has two vectors of d_model, the gain and the bias"),
    (dict(d_k_for_values=True), {"d_k"},
     "you sized W_V and W_O with d_k too: row B changes the width of queries and keys alone, the values keep d_v = "
     "d_model // h, so W_V is d_model x d_model and W_O d_model x d_model whatever d_k is"),
    (dict(d_k_ignored=True), {"d_k"},
     "your count ignores d_k: row B's narrower keys make W_Q and W_K d_model x (h * d_k), with h * d_k biases each; "
     "d_k = d_model // h only when d_k is None"),
    (dict(qk_one_head=True), {"d_k"},
     "W_Q and W_K have h * d_k columns, d_k for each of the h heads; you counted d_k"),
    (dict(none_as_64=True), {"none"},
     "with d_k=None you use 64, the base model's d_k written into your code: d_k is d_model // h whenever the row "
     "does not give it"),
    (dict(none_as_eighth=True), {"none"},
     "with d_k=None you use d_model // 8, the base model's h written into your code: d_k is d_model // h, with the "
     "row's h"),
    (dict(no_cross_attention=True), {"decoder"},
     "the decoder's encoder-decoder attention is missing: a decoder layer holds two MultiHeadAttention modules "
     "(self-attention and attention over the memory), so its attention counts twice"),
    (dict(two_sublayers=True), {"decoder"},
     "you counted a decoder layer with 2 sublayers, as an encoder layer: it has a third, the encoder-decoder "
     "attention, with its own layer norm"),
    (dict(full_heads=True), {"d_k"},
     "you gave each head its own d_model x d_model matrices: the h heads' W_i^Q are d_model x d_k each, side by side "
     "one d_model x (h * d_k) matrix (notebook 04); without a d_k of its own, a row's count does not depend on h"),
    (dict(one_layer=True), {"layers"},
     "you counted one layer per stack: the encoder and the decoder each stack N identical layers, each with its own "
     "parameters"),
]


def course_row_parameters(vocab_size: int, N: int = 6, d_model: int = 512, d_ff: int = 2048, h: int = 8,
                          d_k: int | None = None) -> int:
    """The parameters of ``make_variant``'s model for one row, by formula (tests/test_declarations_13_15.py
    compares it with ``table3_parameters``, which builds the model on the meta device)."""
    return _row_count(vocab_size, N, d_model, d_ff, h, d_k)


def _describe_row(row: tuple) -> str:
    return ", ".join(f"{k}={v}" for k, v in zip(_ROW_ARGUMENTS, row))


_PAPER_SET = {"rows": "every row of Table 3 at the paper's sizes"}


def _row_probes(device: str | None) -> list[Probe]:
    probes = [Probe(row[1:], f"{{what}} of {{name}}({_describe_row(row[1:])}) ({row[0]})", sizes=_PAPER_SET,
                    tags=dict(row=row[0])) for row in PAPER_ROWS]
    for sizes in ROW_SIZES:  # with its d_k (row B), and with d_k=None
        row = tuple(sizes[k] for k in _ROW_ARGUMENTS)
        for args, label in ((row, "small sizes, d_k given"), (row[:-1] + (None,), "small sizes, d_k=None")):
            probes.append(Probe(args, f"{{what}} of {{name}}({_describe_row(args)}) ({label})", sizes=sizes,
                                tags=dict(row=label)))
    return probes + [Probe((PAPER_VOCAB,), "{what} of {name}(%d)" % PAPER_VOCAB, tags=dict(defaults=True))]


def _counts(text: str | Callable, **wrong) -> Callable:
    """A ``find``: the learner's count is the formula's with ``wrong`` mistakes (or ``text`` (got, probe)
    says what is wrong) -> the message, with the row and both counts."""
    def find(found: dict, p: Probe) -> str | None:
        got = found["value"]
        if "defaults" in p.tags or not isinstance(got, int):
            return None
        why = text(got, p) if callable(text) else text if got == _row_count(*p.args, **wrong) else None
        return why and (f"row_parameters({_describe_row(p.args)}) counts {got:,} parameters ({p.tags['row']}); the "
                        f"course's model has {course_row_parameters(*p.args):,}. Your counts fit this: {why}.")
    return find


def _two_mistakes(got: int, p: Probe) -> str | None:
    """Two mistakes, of different parts of the model, that give the learner's count together."""
    pairs = itertools.combinations(_ROW_MISTAKES, 2)
    return next((f"two things: {t1}; and {t2}" for (m1, g1, t1), (m2, g2, t2) in pairs
                 if not g1 & g2 and _row_count(*p.args, **m1, **m2) == got), None)


def _one_model(found: dict, p: Probe) -> str | None:
    base, right = course_row_parameters(PAPER_VOCAB), course_row_parameters(*p.args)
    return None if found["value"] != base or p.args[-1] is not None or right == base else (
        f"your function gives {base:,}, the base model's count, for {p.tags['row']}, which has {right:,}: is the "
        "count of one model written into your code? Compute it from the arguments.")


def _defaults(found: dict, p: Probe) -> str | None:
    return None if "defaults" not in p.tags else (
        f"row_parameters({PAPER_VOCAB}) counts {found['value']:,}, but with every other argument left out it is "
        f"the base model, {course_row_parameters(PAPER_VOCAB):,} (as row_parameters({PAPER_VOCAB}, 6, 512, 2048, "
        "8, None) counts): give the parameters the defaults of the exercise's def line, N=6, d_model=512, "
        "d_ff=2048, h=8, d_k=None.")


def _off(got: int, p: Probe) -> str:
    return (f"nothing the check knows, {got - course_row_parameters(*p.args):+,} off. Count one piece at a time and "
            "compare with the course's modules: sum(p.numel() for p in NarrowKeyAttention(d_model, h, d_k)."
            "parameters()) (annotated.variations), the same for PositionwiseFeedForward(d_model, d_ff) and "
            "LayerNorm(d_model), then a layer of each kind, the two stacks, the one table and the generator's bias")


def _wrong_row(**wrong) -> Callable:
    def row_parameters(vocab_size, N=6, d_model=512, d_ff=2048, h=8, d_k=None):
        return _row_count(vocab_size, N, d_model, d_ff, h, d_k, **wrong)
    return row_parameters


def _counted_by_building(vocab_size, N=6, d_model=512, d_ff=2048, h=8, d_k=None):
    return table3_parameters(vocab_size, d_k, N=N, d_model=d_model, d_ff=d_ff, h=h)


def _row_hint(passed: list, sizes: dict, message: str) -> str:
    before = "".join(f"; ({', '.join(f'{k}={v}' for k, v in p.items())})" for p in passed if p is not _PAPER_SET)
    return (f"\nHint: the same function passed with every row of Table 3 at the paper's sizes{before} but not with "
            f"({', '.join(f'{k}={v}' for k, v in sizes.items())}): is a size written into your code (37000, 512, "
            "2048, 8, 64)? Use the arguments, and d_model // h when d_k is None.")


ROW = Declaration(
    check="check_row_parameters", function="row_parameters", roles=_ROW_ARGUMENTS, reference=course_row_parameters,
    probes=_row_probes, returns=Value("the count", kind="int", numpy=True), sizes_fix=_row_hint,
    mistakes=(
        Mistake("your function builds modules to count their parameters (it calls {found}...): count from the "
                "formulas instead (the check's formula is tested against models built on the meta device, "
                "table3_parameters); that is the exercise, and it is how the paper's sizes were chosen before anything "
                "was built.", "a model built",
                stage="source", example=_counted_by_building,
                source=r"\b(?:nn \. \w+|make_variant|make_model|table3_parameters|EncoderDecoder|\w*Attention|"
                       r"PositionwiseFeedForward|LayerNorm|Embeddings?|Generator|Linear) \("),
        *(Mistake("", ", ".join(k if v is True else f"{k}={v}" for k, v in wrong.items()).replace("_", " "),
                  find=_counts(text, **wrong), example=_wrong_row(**wrong)) for wrong, _, text in _ROW_MISTAKES),
        Mistake("", "two mistakes", find=_counts(_two_mistakes),
                example=_wrong_row(no_generator_bias=True, tables=2)),
        Mistake("", "the count of one model", find=_one_model,
                example=lambda vocab_size, N=6, d_model=512, d_ff=2048, h=8, d_k=None: course_row_parameters(37000)),
        Mistake("", "other defaults", find=_defaults,
                example=lambda vocab_size, N=8, d_model=512, d_ff=2048, h=8, d_k=None: course_row_parameters(
                    vocab_size, N, d_model, d_ff, h, d_k)),
        Mistake("", "a count off", find=_counts(_off), when=lambda p: p.sizes is _PAPER_SET,
                example=lambda *args: course_row_parameters(*args) + 1),
    ),
    passed=lambda name: (
        f"check_row_parameters passed: {name} equals table3_parameters on all {len(PAPER_ROWS)} rows of Table 3 that "
        f"change a size (base {course_row_parameters(PAPER_VOCAB):,}, big "
        f"{course_row_parameters(PAPER_VOCAB, 6, 1024, 4096, 16):,}, with one vocabulary of {PAPER_VOCAB}) and on "
        f"{2 * len(ROW_SIZES)} small rows, with and without a d_k of their own; the defaults are the base model."),
)


def check_row_parameters(row_parameters: Callable) -> None:
    """Check ``row_parameters(vocab_size, N=6, d_model=512, d_ff=2048, h=8, d_k=None) -> int`` against
    ``table3_parameters`` on every row of Table 3 at the paper's sizes, then on ``ROW_SIZES`` with and without d_k.

    Diagnoses: a result that is not an int (a float from /, a tensor; a NumPy integer passes); a model built to count
    it (its code names a module); any bias forgotten (all, the attention's, the feed-forward's, the generator's); the
    shared table counted twice or three times; layer norms forgotten or counted with their gain only; W_V and W_O
    sized with d_k (the values keep d_model // h); d_k ignored, or W_Q and W_K given d_k columns instead of h * d_k;
    d_k=None read as 64 or d_model // 8 (the base's d_k or h written in); the decoder's cross-attention forgotten, or a
    decoder layer counted with 2 sublayers; per-head d_model x d_model matrices; one layer per stack; any two of these
    together; defaults other than the base model's; the base model's count for every row, and sizes written into the
    code."""
    check(ROW, row_parameters)


# ---------------------------------------------------------------- 15.2 a row's paired test
# Equal up to float32's rounding (torch's default dtype) on changes of a few BLEU points, and on p-values down to 1e-8.
_close = functools.partial(math.isclose, rel_tol=1e-4, abs_tol=1e-6)
_close_p = functools.partial(math.isclose, rel_tol=1e-4, abs_tol=1e-12)


def _show(x) -> str:
    text = repr(x)
    return text if len(text) <= 120 else text[:117] + "..."


def _facts(ds, spread: float, freedom: int) -> dict:
    """What every recipe, right or wrong, is made of: n, the mean, the row's own standard deviation, the standard
    error and the statistic."""
    n, se = len(ds), spread / len(ds) ** 0.5
    return dict(n=n, mean=sum(ds) / n, own=statistics.stdev(ds), s=spread, f=freedom, se=se, t=sum(ds) / n / se)


def _t(q: float, f: float) -> float:
    return float(stats.t.ppf(q, f))


def _two_sided(statistic: float, f: float) -> float:
    return float(2 * stats.t.sf(abs(statistic), f))


# Half-widths of the interval and p-values: the course's, then each usual mistake's (a key may have several recipes).
_HALF_RIGHT = lambda c: _t(0.975, c["f"]) * c["se"]  # noqa: E731
_HALVES = {
    "normal": [lambda c: float(stats.norm.ppf(0.975)) * c["se"], lambda c: 1.96 * c["se"]],
    "two": [lambda c: 2 * c["se"]], "t95": [lambda c: _t(0.95, c["f"]) * c["se"]],
    "n-1": [lambda c: _t(0.975, c["n"] - 1) * c["se"]], "no sqrt": [lambda c: _t(0.975, c["f"]) * c["s"]],
    "by n": [lambda c: _t(0.975, c["f"]) * c["s"] / c["n"]],
    "own": [lambda c: _t(0.975, c["n"] - 1) * c["own"] / c["n"] ** 0.5,
            lambda c: _t(0.975, c["f"]) * c["own"] / c["n"] ** 0.5],
    "unpaired": [lambda c: _t(0.975, c["f"]) * c["s"] * (2 / c["n"]) ** 0.5],
}
_P_RIGHT = lambda c: _two_sided(c["t"], c["f"])  # noqa: E731
_PS = {
    "one-sided": [lambda c: float(stats.t.sf(abs(c["t"]), c["f"])), lambda c: float(stats.t.sf(c["t"], c["f"])),
                  lambda c: float(stats.t.cdf(c["t"], c["f"]))],
    "no abs": [lambda c: float(2 * stats.t.sf(c["t"], c["f"]))],
    "cdf": [lambda c: float(2 * stats.t.cdf(abs(c["t"]), c["f"]))],
    "normal": [lambda c: float(2 * stats.norm.sf(abs(c["t"])))], "n-1": [lambda c: _two_sided(c["t"], c["n"] - 1)],
    "no sqrt": [lambda c: _two_sided(c["mean"] / c["s"], c["f"])],
    "by n": [lambda c: _two_sided(c["mean"] / (c["s"] / c["n"]), c["f"])],
    "own": [lambda c: _two_sided(c["mean"] / (c["own"] / c["n"] ** 0.5), c["n"] - 1),
            lambda c: _two_sided(c["mean"] / (c["own"] / c["n"] ** 0.5), c["f"])],
    "unpaired": [lambda c: _two_sided(c["mean"] / (c["s"] * (2 / c["n"]) ** 0.5), c["f"])],
}
_CRITICAL = "stats.t.ppf(0.975, freedom)"
# key: the mistake in a few words, its example's recipes (half, p), and what is wrong; one key: the same mistake in
# the p-value and the interval, or in the one field it shows in.
_PAIRED_MISTAKES = {
    "normal": ("the normal distribution instead of Student's t", "normal", "normal",
               "you used the normal distribution instead of Student's t: the spread is itself estimated, from "
               "`freedom` degrees of freedom, so the statistic mean / (spread / sqrt(n)) follows a t distribution "
               f"with `freedom` degrees of freedom; p = 2 * stats.t.sf(abs(t), freedom), the interval's point "
               f"{_CRITICAL} (not stats.norm, not 1.96)"),
    "normal p": ("a normal p-value", None, "normal", "your p-value comes from the normal distribution (stats.norm): "
                 "the statistic follows Student's t with `freedom` degrees of freedom, p = 2 * stats.t.sf(abs(t), "
                 "freedom)"),
    "normal interval": ("a ±1.96 interval", "normal", None, "your interval is the mean ± 1.96 standard errors, the "
                        "normal distribution's 95% point: with a spread estimated from `freedom` degrees of freedom, "
                        f"the point is Student's, {_CRITICAL}, a little wider"),
    "two": ("a ±2 interval", "two", None, "your interval is the mean ± 2 standard errors, a round rule: the 95% point "
            f"of Student's t with the spread's degrees of freedom is {_CRITICAL}"),
    "t95": ("a one-sided point for the interval", "t95", None, "your interval uses stats.t.ppf(0.95, freedom), a "
            f"one-sided point (a 90% interval): a two-sided 95% interval leaves 2.5% out on each side, {_CRITICAL}"),
    "one-sided": ("a one-sided p-value", None, "one-sided", "your p-value is one-sided: the test asks whether the "
                  "row changed the score in either direction, so p is the chance of a statistic at least as far from "
                  "0 on either side, 2 * stats.t.sf(abs(t), freedom)"),
    "no abs": ("a p-value without abs()", None, "no abs", "your p-value is 2 * stats.t.sf(t, freedom) without abs(): "
               "for a negative mean change it is above 1. Take p = 2 * stats.t.sf(abs(t), freedom)"),
    "cdf": ("2 * stats.t.cdf for the p-value", None, "cdf", "your p-value is 2 * stats.t.cdf(abs(t), freedom), the "
            "chance of a statistic closer to 0, above 1 whenever t is not 0: the p-value is the chance of one farther "
            "out, 2 * stats.t.sf(abs(t), freedom)"),
    "n-1": ("len(ds) - 1 degrees of freedom", "n-1", "n-1", "you took len(ds) - 1 degrees of freedom: the spread is "
            "given, pooled over every row of the table, and its degrees of freedom are `freedom`, the sum of (seeds - "
            "1) over those rows; use them for the t distribution"),
    "no sqrt": ("the spread as the standard error", "no sqrt", "no sqrt", "you divided by the spread alone: the spread "
                "is that of one seed's difference; the mean of n of them varies less, its standard error is spread / "
                "sqrt(len(ds))"),
    "by n": ("the spread / n as the standard error", "by n", "by n", "you divided the spread by n: the standard error "
             "of a mean of n differences is spread / sqrt(n), not spread / n"),
    "own": ("the row's own standard deviation", "own", "own", "you used the row's own standard deviation "
            "(statistics.stdev(ds), as scipy.stats.ttest_1samp does): the rule pools the spread over every row, which "
            "is what `spread` is, with `freedom` degrees of freedom; the standard error is spread / sqrt(len(ds))"),
    "unpaired": ("the standard error of two independent means", "unpaired", "unpaired", "your standard error is "
                 "spread * sqrt(1/n + 1/n), that of a difference of two independent means: each paired difference "
                 "already is a difference, with standard deviation `spread`; their mean's standard error is spread / "
                 "sqrt(n)"),
}


def _field_mistake(got: list[float], right: list[float], candidates: dict, facts: list[dict], close) -> str | None:
    """The key of the candidate recipe that gives ``got`` on every case, where ``got`` is not ``right``."""
    if all(close(g, r) for g, r in zip(got, right)):
        return ""
    for key, recipes in candidates.items():
        for recipe in recipes:
            try:
                values = [recipe(c) for c in facts]
            except (ValueError, ZeroDivisionError):
                continue
            if all(close(g, v) for g, v in zip(got, values)):
                return key
    return None


def _number(found: dict, what: str) -> float | str:
    """A described value as one real number (a Python or NumPy number, a tensor or array of one), else what the
    learner's function did instead, in words."""
    kind, value = found["kind"], found.get("value")
    if kind == "none" or (kind == "value" and value is None):
        return f"returned None for {what}: did you forget to compute it?"
    if isinstance(value, bool):
        return f"returned {value} for {what}: return a number."
    if isinstance(value, (int, float)):  # a Python or NumPy number
        return float(value)
    if kind == "tensor" or "dtype" in found:  # a tensor, or a NumPy array
        dtype = found["dtype"]
        if kind == "tensor" and math.prod(found["shape"]) == 1 and found["values"] is not None and dtype.startswith(
                ("float", "int", "uint", "bfloat")):
            return float(found["values"].reshape(()).item())
        dtype = f"torch.{dtype}" if kind == "tensor" else dtype
        return (f"returned {found.get('type', 'Tensor')} of shape {tuple(found['shape'])} and dtype {dtype} for "
                f"{what}; return one real number, a float.")
    return f"should return {what} as a float, got {found.get('class', found['type'])}"


def _paired_case(found: dict) -> dict | list:
    """One call's result as the four numbers, or [the mistake, what the function returned instead]."""
    if found["kind"] == "none":
        return ["no result returned", "returned None: did you forget the `return` of the dict?"]
    entries = found.get("entries")
    if found["kind"] == "value" and found["type"] == "dict":
        entries = {k: recorder.describe(v) for k, v in found["value"].items()}
    if entries is None:
        what = f"a {found['type']}" + (f" of {found['length']} items" if found["type"] in ("tuple", "list") else "")
        return ["not a dict", f"returned {what}; return a dict with the keys 'effect', 'low', 'high' and 'p' (the "
                              "notebook reads test['effect'], test['p'] by name)."]
    missing = [k for k in PAIRED_KEYS if k not in entries]
    if missing:
        return ["keys missing", f"returned a dict with the keys {sorted(map(str, entries))}; it misses {missing}. "
                                "Return exactly the keys 'effect' (the mean change), 'low' and 'high' (its 95% "
                                "interval) and 'p' (the p-value)."]
    numbers = {k: _number(entries[k], f"'{k}'") for k in PAIRED_KEYS}
    wrong = next((v for v in numbers.values() if isinstance(v, str)), None)
    return ["not a number", wrong] if wrong else numbers


def _paired_read(found: dict) -> list:
    """The calls' results (an ``each`` probe's list) as the four numbers each, or why not."""
    cases = found.get("items") if found["kind"] == "sequence" else [recorder.describe(v) for v in found["value"]]
    return [_paired_case(c) for c in cases]


def _agree(got: dict | list, expected: dict) -> bool:
    return isinstance(got, dict) and all((_close_p if k == "p" else _close)(got[k], expected[k]) for k in PAIRED_KEYS)


def _paired_diagnosis(found: dict, p: Probe) -> tuple[str, str] | None:
    """The first thing wrong over the whole set of cases, in the order of the course's check: (the mistake's
    key, its message)."""
    got, calls = _paired_read(found), [f"{{name}}({ds!r}, {spread!r}, {freedom!r})" for ds, spread, freedom in p.args]
    bad = next((k for k, g in enumerate(got) if isinstance(g, list)), None)
    if bad is not None:
        return got[bad][0], f"{calls[bad]} {got[bad][1]}"
    expected = [paired_test(*args) for args in p.args]
    ok = [_agree(g, e) for g, e in zip(got, expected)]
    if all(ok):
        return None
    wrong = ok.index(False)
    shown = lambda d: "{" + ", ".join(f"'{k}': {d[k]:.6g}" for k in PAIRED_KEYS) + "}"  # noqa: E731
    where = f"{calls[wrong]} returned {shown(got[wrong])}; the course's paired_test gives {shown(expected[wrong])}"
    facts = [_facts(*args) for args in p.args]
    if not all(_close(g["effect"], e["effect"]) for g, e in zip(got, expected)):
        return "effect", f"{where}: the effect is the mean of the paired differences, sum(ds) / len(ds)."
    if any(g["low"] > g["high"] for g in got):
        return "low above high", f"{where}: your 'low' is above your 'high'; low = mean - half-width, high = mean + " \
                                 "half-width."
    if not all(_close((g["low"] + g["high"]) / 2, e["effect"]) for g, e in zip(got, expected)):
        return "centre", (f"{where}: the interval is centred on the mean change, mean ± {_CRITICAL} * spread / "
                          "sqrt(len(ds)).")
    half = _field_mistake([(g["high"] - g["low"]) / 2 for g in got], [_HALF_RIGHT(c) for c in facts], _HALVES,
                          facts, _close)
    pv = _field_mistake([g["p"] for g in got], [e["p"] for e in expected], _PS, facts, _close_p)
    if half is None or pv is None:
        return "other", (f"{where}. The standard error is spread / sqrt(len(ds)); the interval is the mean ± "
                         f"{_CRITICAL} times it, and p = 2 * stats.t.sf(abs(mean / standard error), freedom).")
    if not half and not pv:  # each field right within its tolerance, the whole case not: no recipe to name
        return "other", f"{where}."
    keys = [half] if half == pv else [k for k in ({"normal": "normal p"}.get(pv, pv),
                                                  {"normal": "normal interval"}.get(half, half)) if k]
    return keys[0], f"{where}: {'; and '.join(_PAIRED_MISTAKES[k][3] for k in keys)}."


def _paired_by(half: str | None = None, p: str | None = None, low: Callable = lambda mean, half: mean - half,
               high: Callable = lambda mean, half: mean + half, effect: Callable = lambda ds: sum(ds) / len(ds),
               p_of: Callable = lambda p: p, shape: Callable = lambda test: test) -> Callable:
    """A paired_test with one recipe of _HALVES for the interval and one of _PS for the p-value (None: the
    right ones), its 'low', 'high', 'effect' and 'p' made by hand, and its result reshaped."""
    def paired_test(ds, spread, freedom):
        c = _facts(ds, spread, freedom)
        h = (_HALVES[half][0] if half else _HALF_RIGHT)(c)
        mean = effect(ds)
        return shape({"effect": mean, "low": low(mean, h), "high": high(mean, h),
                      "p": p_of((_PS[p][0] if p else _P_RIGHT)(c))})
    return paired_test


def _paired_mistake(key: str, example: Callable, name: str = "", generic: bool = False) -> Mistake:
    def find(found: dict, p: Probe) -> str | None:
        diagnosis = _paired_diagnosis(found, p)
        return diagnosis[1] if diagnosis and diagnosis[0] == key else None
    return Mistake("", name or key, find=find, example=example, generic=generic)


def _paired_probe(sizes: dict, cases: list) -> Probe:
    """The cases' calls, judged together."""
    args = tuple((copy.deepcopy(ds), spread, sizes["freedom"]) for ds, spread in cases)
    return Probe(args, f"{{what}} of {{name}}(ds, spread, {sizes['freedom']}) on {len(cases)} rows of "
                 f"{sizes['seeds']} seeds", sizes=sizes, each=True,
                 accept=lambda got: all(_agree(g, paired_test(*a)) for g, a in zip(got[0], args)))


PAIRED = Declaration(
    check="check_paired_test", function="paired_test", roles=("ds", "spread", "freedom"), reference=paired_test,
    probes=lambda device: [_paired_probe(sizes, cases) for sizes, cases in zip(PAIRED_SIZES, PAIRED_CASES)],
    returns=Value("the tests", kind="list", precision=(1e-12, 1e-4), read=_paired_read),
    sizes_fix="Use len(ds), the number of paired seeds you are given, and the freedom argument.",
    in_place="A function must not change its inputs: whoever called it uses them again (the notebook reads every "
             "row's differences more than once). Work on copies: sorted(ds) rather than ds.sort().",
    mistakes=(
        _paired_mistake("no result returned", lambda ds, spread, freedom: None),
        _paired_mistake("not a dict", _paired_by(shape=lambda test: tuple(test.values()))),
        _paired_mistake("keys missing", _paired_by(shape=lambda test: {
            "effect": test["effect"], "interval": (test["low"], test["high"]), "p": test["p"]})),
        _paired_mistake("not a number", _paired_by(p_of=lambda p: p < 0.05)),
        _paired_mistake("effect", _paired_by(effect=statistics.median), "the effect not the mean", generic=True),
        _paired_mistake("low above high", _paired_by(low=lambda mean, half: mean + half,
                                                     high=lambda mean, half: mean - half), "'low' above 'high'"),
        _paired_mistake("centre", _paired_by(high=lambda mean, half: mean + 2 * half),
                        "an interval not centred on the mean", generic=True),
        *(_paired_mistake(key, _paired_by(half, p), name) for key, (name, half, p, _) in _PAIRED_MISTAKES.items()),
        _paired_mistake("other", _paired_by(p_of=lambda p: p * 1.5), "other numbers", generic=True),
    ),
    passed=lambda name: (
        f"check_paired_test passed: {name} gives the course's paired_test on {sum(map(len, PAIRED_CASES))} rows of "
        f"paired differences (BLEU and log-perplexity, {', '.join(str(s['seeds']) for s in PAIRED_SIZES)} seeds, the "
        f"spread's {', '.join(str(s['freedom']) for s in PAIRED_SIZES)} degrees of freedom): the mean change, its 95% "
        "interval with Student's t and the two-sided p-value, leaving ds as it was."),
)


def check_paired_test(paired_test_fn: Callable) -> None:
    """Check ``paired_test(ds, spread, freedom) -> dict`` against ``annotated.variations.paired_test`` on
    ``PAIRED_CASES``; the effect, the interval and the p-value must agree within 1e-4, relatively.

    Diagnoses: a result that is not a dict of the four keys, or a value that is not a number; the effect not the mean;
    'low' above 'high', or an interval not centred on the mean; the normal distribution instead of Student's t (in the
    p-value, the interval or both), or an interval of ±1.96 or ±2 standard errors; a one-sided point
    (stats.t.ppf(0.95)) for the interval; a one-sided p-value, one without abs() (above 1 for a negative change), or 2
    * stats.t.cdf (above 1); len(ds) - 1 degrees of freedom where the pooled spread's are given; the spread alone, or
    the spread / n, as the standard error; the row's own standard deviation (scipy.stats.ttest_1samp) instead of the
    pooled spread; the standard error of two independent means, spread * sqrt(2 / n); ds changed in place (sorted);
    the number of seeds written into the code."""
    check(PAIRED, paired_test_fn)


# ---------------------------------------------------------------- 15.3 Holm's correction
def _holm_variant(p_values: dict, alpha: float, how: str) -> set:
    """Holm's correction by one of the usual wrong recipes."""
    m = len(p_values)
    ascending = sorted(p_values.items(), key=lambda item: item[1])
    if how == "bonferroni":
        return {name for name, p in p_values.items() if p <= alpha / m}
    if how == "hochberg":  # step-up: everything up to the largest p-value under its threshold
        last = max((k for k, (_, p) in enumerate(ascending) if p <= alpha / (m - k)), default=-1)
        return {name for name, _ in ascending[: last + 1]}
    if how == "complement":
        return set(p_values) - holm(p_values, alpha)
    if how == "alpha written in":
        return holm(p_values, FAMILY_ALPHA)
    order = sorted(p_values.items(), key=lambda item: item[1], reverse=how == "descending")
    rejected = set()
    for k, (name, p) in enumerate(order):  # lenient: alpha / 0 at the last made alpha / 1 (else it raises)
        divisor = {"skip": m - k, "descending": m - k, "kept": m - k, "lenient": max(m - k - 1, 1),
                   "strict": m - k + 1, "reversed": k + 1}[how]
        if p < alpha / divisor or p == alpha / divisor and how != "kept":  # kept: one at its threshold kept
            rejected.add(name)
        elif how != "skip":
            break
    return rejected


_HOLM_MISTAKES = [
    ("bonferroni", "you compared every p-value with alpha / m (Bonferroni's correction): Holm's steps down, the k-th "
     "smallest against alpha / (m - k + 1), so that once the smallest are rejected the rest are tested less strictly"),
    ("skip", "you went on past the first p-value that fails its threshold: Holm's procedure stops there, and every "
     "larger p-value is kept, even one under its own threshold (break, not continue)"),
    ("hochberg", "you rejected every p-value up to the largest one under its threshold (a step-up, Hochberg's "
     "procedure): Holm's steps down from the smallest and stops at the first that fails"),
    ("lenient", "your thresholds are off by one: the smallest p-value is tested against alpha / m and the largest "
     "against alpha / 1; with k counting from 0 (enumerate), the divisor is m - k, you used m - k - 1"),
    ("strict", "your thresholds are off by one: the smallest p-value is tested against alpha / m, not alpha / (m + "
     "1); with k counting from 0 (enumerate) the divisor is m - k, from 1 it is m - k + 1"),
    ("reversed", "your thresholds go the wrong way: the smallest p-value is tested against the strictest, alpha / m, "
     "the next against alpha / (m - 1), and the largest against alpha; you began with alpha"),
    ("descending", "you sorted the p-values in descending order: Holm's procedure starts from the smallest "
     "(sorted(p_values.items(), key=lambda item: item[1])), tested against alpha / m"),
    ("complement", "you returned the comparisons that are not rejected: return the names whose no-change hypothesis "
     "is rejected, the ones the table reads as a change"),
    ("alpha written in", "alpha is ignored: the threshold uses 0.05 written into your code; use the argument alpha "
     "(0.05 is only its default)"),
]
_HOLM_HINTS = ((r"division by zero|divide by zero", "\nHint: a threshold alpha / 0. The largest of m p-values is "
                "tested against alpha / 1: with k counting from 0 (enumerate), the divisor is m - k, and your "
                "thresholds are off by one."),)


def _listed(names, p_values: dict) -> list:
    return sorted(names, key=lambda n: p_values[n])


def _holm_where(p: Probe, got) -> str:
    p_values, alpha = p.args[0], p.args[1] if len(p.args) > 1 else FAMILY_ALPHA
    return (f"holm({', '.join(_show(a) for a in p.args)}) returned {_show(_listed(got, p_values))}; Holm's correction "
            f"rejects {_show(_listed(holm(p_values, alpha), p_values))} (m = {len(p_values)}, alpha = {alpha})")


def _holm_mistake(how: str, message: str | Callable, name: str = "") -> Mistake:
    def wrong(p_values, alpha=FAMILY_ALPHA):
        return _holm_variant(p_values, alpha, how)
    text = message if callable(message) else lambda p: f"{_holm_where(p, wrong(*p.args))}: {message}."
    return Mistake(text, name or how, like=wrong)


def _at_threshold(p: Probe) -> str:
    p_values, alpha = p.args[0], p.args[1] if len(p.args) > 1 else FAMILY_ALPHA
    m, listed = len(p_values), _listed(holm(p_values, alpha), p_values)
    on = [name for k, name in enumerate(listed) if p_values[name] == alpha / (m - k)]
    return (f"holm({', '.join(_show(a) for a in p.args)}) returned "
            f"{_show(_listed(_holm_variant(p_values, alpha, 'kept'), p_values))}; Holm's correction rejects "
            f"{_show(listed)}: with alpha = {alpha} and m = {m} the thresholds are "
            f"{', '.join(f'{alpha / (m - k):.4g}' for k in range(m))}, and the p-value of {_show(on[0])}, "
            f"{p_values[on[0]]}, is exactly at its own; a p-value exactly at its threshold is kept: Holm's procedure "
            "rejects when p <= alpha / (m - k + 1) and stops at the first p-value above it (p > threshold, not p >= "
            "threshold).")


def _strangers(test: Callable) -> Callable:
    """A ``find``: names in the learner's set that are not keys of p_values, and ``test`` (them, the set,
    p_values) -> why, or None."""
    def find(found: dict, p: Probe) -> str | None:
        got, p_values = found["value"], p.args[0]
        strangers = [x for x in got if x not in p_values]
        why = test(strangers, got, p_values) if strangers else None
        return (f"holm({', '.join(_show(a) for a in p.args)}) returned {_show(got)}, with {_show(strangers[0])}, "
                f"which is not a key of p_values: {why}.") if why else None
    return find


def _numbers_only(got) -> bool:
    return all(isinstance(x, numbers.Number) and not isinstance(x, bool) for x in got)


def _holm_other_default(p_values, alpha=0.1):
    return holm(p_values, alpha)


def _not_a_set(found: dict, name: str, what: str) -> str:
    mapping = ", and a dict is not the names alone" if found.get("type") == "dict" else ""
    return (f"{name} returned a {found['type']}; return a set of the rejected names, set() when none is (the "
            f"notebook asks `key in rejected`{mapping}).")


def _holm_probes(device: str | None) -> list[Probe]:
    probes = [Probe(args, f"{{what}} of {{name}}({', '.join(_show(a) for a in args)})", sizes=sizes,
                    hints=_HOLM_HINTS)
              for sizes, cases in zip(HOLM_SIZES, HOLM_CASES)
              for args in ((p,) if a is None else (p, a) for p, a in cases)]
    return probes + [Probe(case, f"{{what}} of {{name}}({', '.join(_show(a) for a in case)}) (p-values at their "
                           "threshold)", hints=_HOLM_HINTS, tags=dict(edge=True)) for case in HOLM_EDGES]


HOLM = Declaration(
    check="check_holm", function="holm", roles=("p_values", "alpha"), reference=holm, probes=_holm_probes,
    returns=Value("the rejected names", kind="set", other=_not_a_set), consistent=True, errors_first=True,
    sizes_fix="Use len(p_values), the number of comparisons you are given.",
    in_place="Work on copies: a sorted list of its items, sorted(p_values.items(), key=...), rather than pop or del "
             "on the dict.",
    mistakes=(
        Mistake("", "the p-values, not the names", find=_strangers(
            lambda strangers, got, p_values: "your set holds the p-values themselves; return the names (the keys of "
            "p_values) of the rejected ones" if _numbers_only(got) and all(x in p_values.values() for x in got)
            else None), example=lambda p_values, alpha=0.05: {p_values[n] for n in holm(p_values, alpha)}),
        Mistake("", "positions, not the names", find=_strangers(
            lambda strangers, got, p_values: "your set holds positions (the k of the sorted order); return the names "
            "(the keys of p_values) of the rejected ones" if _numbers_only(got) and all(
                isinstance(x, numbers.Integral) for x in got) else None),
            example=lambda p_values, alpha=0.05: set(range(len(holm(p_values, alpha))))),
        Mistake("", "names not of p_values", find=_strangers(lambda *_: "return names that are keys of p_values"),
                example=lambda p_values, alpha=0.05: {str(n) + "!" for n in holm(p_values, alpha)}),
        *(_holm_mistake(how, message) for how, message in _HOLM_MISTAKES),
        _holm_mistake("kept", _at_threshold, "a p-value at its threshold kept"),
        Mistake(lambda p: f"{_holm_where(p, set())}: your function is right whenever alpha is given, and wrong when "
                "it is left out: its default must be alpha=0.05, the notebook's FAMILY_ALPHA (the def line of the "
                "exercise).", "another default", source=r"\balpha = (?!0\.05 \))[\d.]+ \)",
                when=lambda p: len(p.args) == 1, example=_holm_other_default),
    ),
    passed=lambda name: (
        f"check_holm passed: {name} rejects what the course's holm does on "
        f"{sum(map(len, HOLM_CASES)) + len(HOLM_EDGES)} tables of p-values "
        f"({', '.join(str(s['comparisons']) for s in HOLM_SIZES)} and 4 comparisons, alpha 0.05 by default or "
        "given), stepping down from the smallest against alpha / m, alpha / (m - 1), ... and stopping at the first "
        "that fails; p-values at their threshold are rejected."),
)


def check_holm(holm_fn: Callable) -> None:
    """Check ``holm(p_values, alpha=0.05) -> set`` against ``annotated.variations.holm`` on ``HOLM_CASES``, tables
    where every usual mistake rejects another set than Holm's rule, then on p-values exactly at their threshold.

    Diagnoses: a result that is not a set (a list, a dict), or a set of p-values or of positions instead of names;
    Bonferroni's alpha / m for every p-value; going on past the first p-value that fails (skipping it) or Hochberg's
    step-up; thresholds off by one either way (alpha / (m - k) with k from 1, which divides by zero at the last, or
    alpha / (m + 1) first) or in reverse order (alpha first); the p-values sorted in descending order; the names of
    the comparisons not rejected; alpha ignored (0.05 written into the code), or a default other than 0.05; a p-value
    at its threshold kept (< for <=); p_values changed in place (popped); the number of comparisons written into the
    code."""
    check(HOLM, holm_fn)


DECLARATIONS = {d.check: d for d in (ROW, PAIRED, HOLM)}
