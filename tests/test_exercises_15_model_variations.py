"""Notebook 15's checks: each passes on the course's code and on right answers written otherwise, and
names the mistake of a typical wrong answer."""

import math
import statistics

import numpy as np
import pytest
import torch
from scipy import stats

from annotated.support.grading.core import ExerciseFailed
from annotated.support.grading.variations import (
    _HALF_RIGHT, _HALVES, _P_RIGHT, _PS, HOLM_CASES, HOLM_EDGES, PAIRED_CASES, PAIRED_SIZES, _facts, _holm_variant,
    check_holm, check_paired_test, check_row_parameters,
)
from annotated.variations import holm, paired_test, table3_parameters


def not_done(*args):
    raise NotImplementedError()


# ---------------------------------------------------------------- 15.1 row_parameters


def row(vocab_size, N=6, d_model=512, d_ff=2048, h=8, d_k=None, *, attention_bias=True, ff_bias=True,
        generator_bias=True, tables=1, norm=2, values_with_d_k=False, ignore_d_k=False, qk_heads=True,
        default_d_k=None, decoder_attentions=2, decoder_norms=3, full_heads=False, layers=None):
    """A learner's count, piece by piece, with one mistake or another switched on."""
    d = d_model
    if d_k is None:
        d_k = default_d_k(d_model, h) if default_d_k else d_model // h
    if ignore_d_k:
        d_k = d_model // h
    d_v = d_k if values_with_d_k else d_model // h
    qk = h * d_k if qk_heads else d_k

    def linear(n_in, n_out, bias=True):
        return n_in * n_out + (n_out if bias else 0)

    attention = (2 * linear(d, qk, attention_bias) + linear(d, h * d_v, attention_bias)
                 + linear(h * d_v, d, attention_bias))
    if full_heads:
        attention = 4 * h * linear(d, d, attention_bias)
    ffn = linear(d, d_ff, ff_bias) + linear(d_ff, d, ff_bias)
    layer_norm = norm * d
    layers = N if layers is None else layers
    encoder = layers * (attention + ffn + 2 * layer_norm)
    decoder = layers * (decoder_attentions * attention + ffn + decoder_norms * layer_norm)
    return tables * vocab_size * d + encoder + decoder + (vocab_size if generator_bias else 0)


def wrong_row(**mistake):
    def row_parameters(vocab_size, N=6, d_model=512, d_ff=2048, h=8, d_k=None):
        return row(vocab_size, N, d_model, d_ff, h, d_k, **mistake)
    return row_parameters


def row_with_float_heads(vocab_size, N=6, d_model=512, d_ff=2048, h=8, d_k=None):
    d_k = d_model / h if d_k is None else d_k  # a float: the count comes back a float
    return row(vocab_size, N, d_model, d_ff, h, d_k)


def row_as_tensor(vocab_size, N=6, d_model=512, d_ff=2048, h=8, d_k=None):
    return torch.tensor(row(vocab_size, N, d_model, d_ff, h, d_k))


def row_by_building(vocab_size, N=6, d_model=512, d_ff=2048, h=8, d_k=None):
    return table3_parameters(vocab_size, d_k, N=N, d_model=d_model, d_ff=d_ff, h=h)


def row_base_written_in(vocab_size, N=6, d_model=512, d_ff=2048, h=8, d_k=None):
    return 63_119_496


def row_vocab_written_in(vocab_size, N=6, d_model=512, d_ff=2048, h=8, d_k=None):
    return row(37000, N, d_model, d_ff, h, d_k)


def row_other_defaults(vocab_size, N=8, d_model=512, d_ff=2048, h=8, d_k=None):
    return row(vocab_size, N, d_model, d_ff, h, d_k)


def row_in_one_expression(vocab_size, N=6, d_model=512, d_ff=2048, h=8, d_k=None):  # right
    d_k = d_k or d_model // h
    mha = 2 * (d_model + 1) * h * d_k + 2 * (d_model + 1) * d_model
    ffn = (d_model + 1) * d_ff + (d_ff + 1) * d_model
    return vocab_size * (d_model + 1) + N * (3 * mha + 2 * ffn + 10 * d_model)


def row_by_shapes(vocab_size, N=6, d_model=512, d_ff=2048, h=8, d_k=None):  # right: a list of shapes
    d_k = d_model // h if d_k is None else d_k
    d_v = d_model // h
    attention = [(d_model, h * d_k), (h * d_k,)] * 2 + [(d_model, h * d_v), (h * d_v,), (h * d_v, d_model), (d_model,)]
    ffn = [(d_model, d_ff), (d_ff,), (d_ff, d_model), (d_model,)]
    norm = [(d_model,), (d_model,)]
    encoder_layer = attention + ffn + 2 * norm
    decoder_layer = 2 * attention + ffn + 3 * norm
    shapes = N * (encoder_layer + decoder_layer) + [(vocab_size, d_model), (vocab_size,)]
    return sum(math.prod(s) for s in shapes)


def row_numpy(vocab_size, N=6, d_model=512, d_ff=2048, h=8, d_k=None):  # right: a numpy integer
    return np.int64(row(vocab_size, N, d_model, d_ff, h, d_k))


# ---------------------------------------------------------------- 15.2 paired_test


def paired_recipe(critical=lambda f, n: stats.t.ppf(0.975, f), p_of=lambda t, f, n: 2 * stats.t.sf(abs(t), f),
            error=lambda s, n: s / math.sqrt(n)):
    """A learner's paired_test, with the point of the interval, the p-value or the standard error written
    another way."""
    def paired_test(ds, spread, freedom):
        n = len(ds)
        mean = sum(ds) / n
        se = error(spread, n)
        half = float(critical(freedom, n)) * se
        return {"effect": mean, "low": mean - half, "high": mean + half, "p": float(p_of(mean / se, freedom, n))}
    return paired_test


def paired_ttest_1samp(ds, spread, freedom):  # the row's own spread and n - 1 freedom, as scipy does
    result = stats.ttest_1samp(ds, 0.0)
    low, high = result.confidence_interval(0.95)
    return {"effect": float(np.mean(ds)), "low": float(low), "high": float(high), "p": float(result.pvalue)}


def paired_as_tuple(ds, spread, freedom):
    test = paired_test(ds, spread, freedom)
    return test["effect"], test["low"], test["high"], test["p"]


def paired_with_an_interval_key(ds, spread, freedom):
    test = paired_test(ds, spread, freedom)
    return {"effect": test["effect"], "interval": (test["low"], test["high"]), "p": test["p"]}


def paired_sorting_in_place(ds, spread, freedom):  # sorts the caller's list (to look at the median)
    if isinstance(ds, list):
        ds.sort()
    return paired_test(ds, spread, freedom)


def paired_seeds_written_in(ds, spread, freedom):  # 4 seeds, the notebook's design
    mean = sum(ds) / 4
    half = stats.t.ppf(0.975, freedom) * spread / 2
    return {"effect": mean, "low": mean - half, "high": mean + half, "p": 2 * stats.t.sf(abs(mean) / (spread / 2), freedom)}


def paired_low_high_swapped(ds, spread, freedom):
    test = paired_test(ds, spread, freedom)
    return {**test, "low": test["high"], "high": test["low"]}


def paired_median(ds, spread, freedom):
    test = paired_test(ds, spread, freedom)
    shift = statistics.median(ds) - test["effect"]
    return {**test, "effect": test["effect"] + shift, "low": test["low"] + shift, "high": test["high"] + shift}


def paired_by_numpy(ds, spread, freedom):  # right: numpy, stats.t.interval, numpy floats returned
    d = np.asarray(ds, dtype=float)
    error = spread / np.sqrt(d.size)
    low, high = stats.t.interval(0.95, freedom, loc=d.mean(), scale=error)
    return {"effect": d.mean(), "low": low, "high": high, "p": 2 * stats.t.sf(np.abs(d.mean()) / error, freedom)}


def paired_by_statistics(ds, spread, freedom):  # right: statistics.fmean, 1 - cdf for the tail
    mean = statistics.fmean(ds)
    error = spread / math.sqrt(len(ds))
    t = mean / error
    point = stats.t.ppf(0.975, freedom)
    return {"p": 2 * (1 - stats.t.cdf(abs(t), freedom)), "effect": mean,
            "low": mean - point * error, "high": mean + point * error}


def paired_by_torch(ds, spread, freedom):  # right: float32 tensors, 0-d tensors returned
    d = torch.tensor(ds)
    error = spread / len(ds) ** 0.5
    t = d.mean() / error
    half = float(stats.t.ppf(0.975, freedom)) * error
    return {"effect": d.mean(), "low": d.mean() - half, "high": d.mean() + half,
            "p": torch.tensor(2 * stats.t.sf(abs(float(t)), freedom))}


# ---------------------------------------------------------------- 15.3 holm


def holm_by(how):
    """A learner's holm that makes one of the usual mistakes (the check's own recipes, as a learner
    would write them, are below; these are written independently)."""
    def holm(p_values, alpha=0.05):
        m = len(p_values)
        names = sorted(p_values, key=p_values.get, reverse=how == "descending")
        rejected = set()
        for k, name in enumerate(names):
            threshold = {"skip": alpha / (m - k), "descending": alpha / (m - k), "strict": alpha / (m - k + 1),
                         "reversed": alpha / (k + 1), "bonferroni": alpha / m}[how]
            if p_values[name] <= threshold:
                rejected.add(name)
            elif how not in ("skip", "bonferroni"):
                break
        return rejected
    return holm


def holm_from_one(p_values, alpha=0.05):  # enumerate from 1 with m - k: alpha / (m - 1) first, alpha / 0 last
    m = len(p_values)
    rejected = set()
    for k, (name, p) in enumerate(sorted(p_values.items(), key=lambda item: item[1]), start=1):
        if p > alpha / (m - k):
            break
        rejected.add(name)
    return rejected


def holm_from_one_guarded(p_values, alpha=0.05):  # the same, with alpha / 0 avoided: alpha / 1 at the last
    m = len(p_values)
    rejected = set()
    for k, (name, p) in enumerate(sorted(p_values.items(), key=lambda item: item[1]), start=1):
        if p > alpha / max(m - k, 1):
            break
        rejected.add(name)
    return rejected


def holm_step_up(p_values, alpha=0.05):  # Hochberg: from the largest down, everything from the first that passes
    ascending = sorted(p_values, key=p_values.get)
    m = len(ascending)
    for k in range(m - 1, -1, -1):
        if p_values[ascending[k]] <= alpha / (m - k):
            return set(ascending[: k + 1])
    return set()


def holm_kept(p_values, alpha=0.05):  # the names that are not rejected
    return set(p_values) - holm(p_values, alpha)


def holm_alpha_written_in(p_values, alpha=0.05):
    return holm(p_values, 0.05)


def holm_other_default(p_values, alpha=0.1):
    return holm(p_values, alpha)


def holm_strict(p_values, alpha=0.05):  # p < threshold: a p-value at its threshold is kept
    rejected = set()
    for k, (name, p) in enumerate(sorted(p_values.items(), key=lambda item: item[1])):
        if p >= alpha / (len(p_values) - k):
            break
        rejected.add(name)
    return rejected


def holm_as_list(p_values, alpha=0.05):
    return sorted(holm(p_values, alpha), key=p_values.get)


def holm_p_values(p_values, alpha=0.05):  # the p-values of the rejected ones, not their names
    return {p_values[name] for name in holm(p_values, alpha)}


def holm_positions(p_values, alpha=0.05):  # positions in the sorted order
    return set(range(len(holm(p_values, alpha))))


def holm_popping(p_values, alpha=0.05):  # takes the smallest out of the caller's dict, one at a time
    m, rejected, k = len(p_values), set(), 0
    while p_values:
        name = min(p_values, key=p_values.get)
        if p_values.pop(name) > alpha / (m - k):
            break
        rejected.add(name)
        k += 1
    return rejected


def holm_comparisons_written_in(p_values, alpha=0.05):  # 8 comparisons
    rejected = set()
    for k, (name, p) in enumerate(sorted(p_values.items(), key=lambda item: item[1])):
        if p > alpha / (8 - k):
            break
        rejected.add(name)
    return rejected


def holm_without_alpha(p_values):
    return holm(p_values)


def holm_while(p_values, alpha=0.05):  # right: a while loop over the sorted names
    names = sorted(p_values, key=lambda name: p_values[name])
    k = 0
    while k < len(names) and p_values[names[k]] <= alpha / (len(names) - k):
        k += 1
    return set(names[:k])


def holm_by_numpy(p_values, alpha=0.05):  # right: numpy, the first failure found with cumprod
    names = list(p_values)
    p = np.array([p_values[n] for n in names])
    order = np.argsort(p)
    passes = p[order] <= alpha / (len(p) - np.arange(len(p)))
    return {names[i] for i in order[np.cumprod(passes).astype(bool)]}


def holm_adjusted(p_values, alpha=0.05):  # right: Holm's adjusted p-values, max over the steps so far
    ascending = sorted(p_values.items(), key=lambda item: item[1])
    m, adjusted, rejected = len(ascending), 0.0, frozenset()
    for k, (name, p) in enumerate(ascending):
        adjusted = max(adjusted, min(1.0, (m - k) * p))
        if adjusted <= alpha:
            rejected |= {name}
    return rejected


WRONG_ANSWERS = [
    (check_row_parameters, not_done, "not done yet|NotImplementedError"),
    (check_row_parameters, wrong_row(attention_bias=False, ff_bias=False, generator_bias=False),
     r"every bias is missing"),
    (check_row_parameters, wrong_row(attention_bias=False), r"biases of the attention projections are missing"),
    (check_row_parameters, wrong_row(ff_bias=False), r"feed-forward network's biases are missing"),
    (check_row_parameters, wrong_row(generator_bias=False), r"generator's bias is missing"),
    (check_row_parameters, wrong_row(tables=3), r"counted three times"),
    (check_row_parameters, wrong_row(tables=2), r"counted twice"),
    (check_row_parameters, wrong_row(norm=0), r"layer norms are missing"),
    (check_row_parameters, wrong_row(norm=1), r"two vectors of d_model, the gain and the bias"),
    (check_row_parameters, wrong_row(values_with_d_k=True), r"\(B\) d_k=16.*sized W_V and W_O with d_k too"),
    (check_row_parameters, wrong_row(ignore_d_k=True), r"ignores d_k"),
    (check_row_parameters, wrong_row(qk_heads=False), r"h \* d_k columns.*you counted d_k"),
    (check_row_parameters, wrong_row(default_d_k=lambda d, h: 64), r"64, the base model's d_k written into your code"),
    (check_row_parameters, wrong_row(default_d_k=lambda d, h: d // 8), r"d_model // 8, the base model's h written"),
    (check_row_parameters, wrong_row(decoder_attentions=1, decoder_norms=2), r"decoder layer with 2 sublayers"),
    (check_row_parameters, wrong_row(decoder_attentions=1), r"encoder-decoder attention is missing"),
    (check_row_parameters, wrong_row(full_heads=True),
     r"\(\(C\) d_model=256\); .*its own d_model x d_model matrices"),
    (check_row_parameters, wrong_row(layers=1), r"one layer per stack"),
    (check_row_parameters, wrong_row(generator_bias=False, tables=2),
     r"two things: the generator's bias is missing.*and the vocabulary table is counted twice"),
    (check_row_parameters, row_with_float_heads,
     r"should return the count as an int \(a whole number\), got a float, .*// for a whole division"),
    (check_row_parameters, row_as_tensor, r"got a tensor of shape \(\): return a Python int"),
    (check_row_parameters, row_by_building, r"builds modules to count their parameters \(it calls table3_parameters\("),
    (check_row_parameters, row_base_written_in,
     r"gives 63,119,496, the base model's count, for \(C\) d_model=256.*written into your code"),
    (check_row_parameters, row_vocab_written_in,
     r"(?s)mismatch in the count of row_vocab_written_in\(vocab_size=11.*\(small sizes, d_k given\).*passed with every "
     r"row of Table 3 at the paper's "
     r"sizes but not with \(vocab_size=11.*written into your code"),
    (check_row_parameters, row_other_defaults, r"row_parameters\(37000\) counts .* defaults of the exercise"),
    (check_paired_test, not_done, "not done yet|NotImplementedError"),
    (check_paired_test, paired_recipe(critical=lambda f, n: stats.norm.ppf(0.975), p_of=lambda t, f, n: 2 * stats.norm.sf(abs(t))),
     r"the normal distribution instead of Student's t"),
    (check_paired_test, paired_recipe(critical=lambda f, n: 1.96), r"mean ± 1\.96 standard errors, the normal distribution's"),
    (check_paired_test, paired_recipe(p_of=lambda t, f, n: 2 * stats.norm.sf(abs(t))), r"p-value comes from the normal"),
    (check_paired_test, paired_recipe(critical=lambda f, n: 2), r"mean ± 2 standard errors, a round rule"),
    (check_paired_test, paired_recipe(critical=lambda f, n: stats.t.ppf(0.95, f)), r"stats\.t\.ppf\(0\.95, freedom\), a one-sided"),
    (check_paired_test, paired_recipe(p_of=lambda t, f, n: stats.t.sf(abs(t), f)), r"your p-value is one-sided"),
    (check_paired_test, paired_recipe(p_of=lambda t, f, n: stats.t.sf(t, f)), r"your p-value is one-sided"),
    (check_paired_test, paired_recipe(p_of=lambda t, f, n: 2 * stats.t.sf(t, f)), r"without abs\(\): .*above 1"),
    (check_paired_test, paired_recipe(p_of=lambda t, f, n: 2 * stats.t.cdf(abs(t), f)), r"2 \* stats\.t\.cdf\(abs\(t\)"),
    (check_paired_test, paired_recipe(critical=lambda f, n: stats.t.ppf(0.975, n - 1), p_of=lambda t, f, n: 2 * stats.t.sf(abs(t), n - 1)),
     r"len\(ds\) - 1 degrees of freedom: the spread is given, pooled"),
    (check_paired_test, paired_recipe(error=lambda s, n: s), r"divided by the spread alone.*spread / sqrt\(len\(ds\)\)"),
    (check_paired_test, paired_recipe(error=lambda s, n: s / n), r"divided the spread by n"),
    (check_paired_test, paired_recipe(error=lambda s, n: s * math.sqrt(2 / n)), r"two independent means"),
    (check_paired_test, paired_ttest_1samp, r"row's own standard deviation \(statistics\.stdev\(ds\), as scipy\.stats\.ttest_1samp"),
    (check_paired_test, paired_recipe(critical=lambda f, n: 1.96, p_of=lambda t, f, n: stats.t.sf(abs(t), f)),
     r"your p-value is one-sided.*; and your interval is the mean ± 1\.96"),
    (check_paired_test, paired_as_tuple, r"returned a tuple of 4 items; return a dict with the keys"),
    (check_paired_test, paired_with_an_interval_key, r"misses \['low', 'high'\]"),
    (check_paired_test, paired_sorting_in_place, r"changed its first argument `ds` in place.*sorted\(ds\)"),
    (check_paired_test, paired_low_high_swapped, r"your 'low' is above your 'high'"),
    (check_paired_test, paired_median, r"the effect is the mean of the paired differences"),
    (check_paired_test, paired_seeds_written_in,
     r"(?s)Hint: the same function passed with \(seeds=4, freedom=54\) but not with \(seeds=3, freedom=8\): is a size "
     r"written into your code"),
    (check_holm, not_done, "not done yet|NotImplementedError"),
    (check_holm, holm_by("bonferroni"), r"every p-value with alpha / m \(Bonferroni's correction\)"),
    (check_holm, holm_by("skip"), r"went on past the first p-value that fails"),
    (check_holm, holm_step_up, r"a step-up, Hochberg's procedure"),
    (check_holm, holm_from_one, r"(?s)raised ZeroDivisionError.*your thresholds are off by one"),
    (check_holm, holm_from_one_guarded, r"your thresholds are off by one: .*you used m - k - 1"),
    (check_holm, holm_by("strict"), r"off by one: the smallest p-value is tested against alpha / m, not alpha / \(m \+ 1\)"),
    (check_holm, holm_by("reversed"), r"your thresholds go the wrong way"),
    (check_holm, holm_by("descending"), r"sorted the p-values in descending order"),
    (check_holm, holm_kept, r"returned the comparisons that are not rejected"),
    (check_holm, holm_alpha_written_in, r"alpha is ignored: the threshold uses 0\.05 written into your code"),
    (check_holm, holm_other_default, r"wrong when it is left out: its default must be alpha=0\.05"),
    (check_holm, holm_strict, r"\{'A1': 0\.0625.*returned \[\].*thresholds are 0\.0625, 0\.08333, 0\.125, 0\.25, and the p-value of "
     r"'A1', 0\.0625, is exactly at its own; a p-value exactly at its threshold is kept"),
    (check_holm, holm_as_list, r"returned a list; return a set of the rejected names"),
    (check_holm, holm_p_values, r"your set holds the p-values themselves"),
    (check_holm, holm_positions, r"your set holds positions"),
    (check_holm, holm_popping, r"changed its first argument `p_values` in place \(now .*sorted\(p_values\.items\(\)"),
    (check_holm, holm_without_alpha, r"(?s)raised TypeError.*give your function the parameters of the exercise's"),
    (check_holm, holm_comparisons_written_in,
     r"(?s)Hint: the same function passed with \(comparisons=8\) but not with \(comparisons=5\): is a size written "
     r"into your code"),
]


@pytest.mark.parametrize("check, answer, message", WRONG_ANSWERS,
                         ids=[f"{c.__name__}-{getattr(a, '__name__', 'lambda')}-{i}"
                              for i, (c, a, _) in enumerate(WRONG_ANSWERS)])
def test_each_wrong_answer_gets_its_diagnosis(check, answer, message):
    with pytest.raises(ExerciseFailed, match=message):
        check(answer)


RIGHT_ANSWERS = [
    (check_row_parameters, wrong_row()),  # the piece-by-piece count with no mistake switched on
    (check_row_parameters, row_in_one_expression), (check_row_parameters, row_by_shapes),
    (check_row_parameters, row_numpy),
    (check_paired_test, paired_test), (check_paired_test, paired_recipe()), (check_paired_test, paired_by_numpy),
    (check_paired_test, paired_by_statistics), (check_paired_test, paired_by_torch),
    (check_holm, holm), (check_holm, holm_while), (check_holm, holm_by_numpy), (check_holm, holm_adjusted),
]


@pytest.mark.parametrize("check, answer", RIGHT_ANSWERS,
                         ids=[f"{c.__name__}-{getattr(a, '__name__', 'lambda')}-{i}"
                              for i, (c, a) in enumerate(RIGHT_ANSWERS)])
def test_each_check_passes_on_the_course_code_and_other_right_answers(check, answer, capsys):
    check(answer)
    assert f"{check.__name__} passed: " in capsys.readouterr().out


def test_the_paired_cases_put_every_recipe_of_a_mistake_away_from_the_rule_in_the_first_set():
    """On the first set alone, each wrong recipe for the interval's half-width and for the p-value differs from
    the rule's and from every other mistake's on some case, beyond the check's tolerance; so the first set names
    the mistake."""
    facts = [_facts(ds, spread, PAIRED_SIZES[0]["freedom"]) for ds, spread in PAIRED_CASES[0]]
    for right, recipes in ((_HALF_RIGHT, _HALVES), (_P_RIGHT, _PS)):
        vectors = {(key, i): [recipe(c) for c in facts] for key, group in recipes.items() for i, recipe in enumerate(group)}
        vectors[("right", 0)] = [right(c) for c in facts]
        for (a, va), (b, vb) in ((x, y) for x in vectors.items() for y in vectors.items() if x[0][0] < y[0][0]):
            assert any(not math.isclose(x, y, rel_tol=1e-3) for x, y in zip(va, vb)), (a, b)


def test_the_holm_cases_put_every_mistake_on_another_side_than_the_rule_in_every_set():
    """In each set of p-values every wrong recipe rejects, somewhere, another set than Holm's rule, and no two
    recipes agree on the whole set, so each set alone names the mistake."""
    recipes = ["bonferroni", "skip", "hochberg", "lenient", "strict", "reversed", "descending", "complement",
               "alpha written in"]
    for cases in HOLM_CASES:
        right = [holm(p, 0.05 if a is None else a) for p, a in cases]
        vectors = {how: [_holm_variant(p, 0.05 if a is None else a, how) for p, a in cases] for how in recipes}
        for how, vector in vectors.items():
            assert vector != right, how
        assert len({tuple(map(frozenset, v)) for v in vectors.values()}) == len(vectors)
        for p, _ in cases:
            assert len(set(p.values())) == len(p) and list(p.values()) != sorted(p.values())


def test_the_holm_edges_sit_exactly_on_thresholds_exact_in_binary_floating_point():
    for p_values, alpha in HOLM_EDGES:
        m = len(p_values)
        on = [p for k, p in enumerate(sorted(p_values.values())) if p == alpha / (m - k)]
        assert on and all((m - k) * (alpha / (m - k)) == alpha for k in range(m) if alpha / (m - k) in on)
        assert holm(p_values, alpha) != holm_strict(p_values, alpha)


def test_the_paired_lists_are_not_sorted_so_that_a_sort_shows():
    for cases in PAIRED_CASES:
        assert any(list(ds) != sorted(ds) for ds, _ in cases if isinstance(ds, list))
        for ds, _ in cases:
            assert len(ds) - 1 not in (s["freedom"] for s in PAIRED_SIZES)  # n - 1 never the pooled freedom


def test_a_check_leaves_the_global_random_state_as_it_was(capsys):
    before = torch.random.get_rng_state()
    for check, answer in RIGHT_ANSWERS[:1] + RIGHT_ANSWERS[4:5] + RIGHT_ANSWERS[9:10]:
        check(answer)
    assert torch.equal(torch.random.get_rng_state(), before)


def test_a_function_that_sorts_or_pops_leaves_the_checks_own_inputs_as_they_were():
    paired = [[(list(ds), spread) for ds, spread in cases] for cases in PAIRED_CASES]
    tables = [[(dict(p), a) for p, a in cases] for cases in HOLM_CASES]
    for check, answer in [(check_paired_test, paired_sorting_in_place), (check_holm, holm_popping)]:
        with pytest.raises(ExerciseFailed, match="in place"):
            check(answer)
    assert [[(list(ds), spread) for ds, spread in cases] for cases in PAIRED_CASES] == paired
    assert [[(dict(p), a) for p, a in cases] for cases in HOLM_CASES] == tables


def paired_as_numpy_array(ds, spread, freedom):  # every value an array of one number per seed: not one number
    test = paired_test(ds, spread, freedom)
    return {**test, "effect": np.asarray(ds) - test["effect"] + test["effect"]}


def paired_p_as_bool(ds, spread, freedom):
    test = paired_test(ds, spread, freedom)
    return {**test, "p": test["p"] < 0.05}


def test_a_value_that_is_not_one_real_number_is_named():
    with pytest.raises(ExerciseFailed, match=r"returned ndarray of shape \(4,\) and dtype float64 for 'effect'; "
                                              r"return one real number"):
        check_paired_test(paired_as_numpy_array)
    with pytest.raises(ExerciseFailed, match=r"returned True for 'p': return a number"):
        check_paired_test(paired_p_as_bool)
