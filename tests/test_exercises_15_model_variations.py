"""Notebook 13's checks: each passes on the course's code and on right answers written otherwise, and
names the mistake of a typical wrong answer."""

import math
import statistics
import warnings

import numpy as np
import pytest
import torch

from annotated.support.grading.core import ExerciseFailed
from annotated.support.grading.variations import (
    COMPARE_CASES, COMPARE_EDGES, POOLED_RUNS, check_compare_to_base, check_pooled_std, check_row_parameters,
)
from annotated.variations import compare_to_base, pooled_std, table3_parameters


def not_done(*args):
    raise NotImplementedError()


# ---------------------------------------------------------------- 13.1 row_parameters


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


# ---------------------------------------------------------------- 13.2 pooled_std


def pooled_by_numpy(runs):  # right
    rows = [np.asarray(s, dtype=float) for s in runs.values() if len(s) > 1]
    if not rows:
        raise ValueError("no row has two seeds")
    return float(np.sqrt(sum(((r - r.mean()) ** 2).sum() for r in rows) / sum(len(r) - 1 for r in rows)))


def pooled_by_statistics(runs):  # right: statistics.variance (n - 1) weighted by n - 1
    rows = [s for s in runs.values() if len(s) >= 2]
    if not rows:
        raise ValueError("no row has two seeds")
    return math.sqrt(sum(statistics.variance(s) * (len(s) - 1) for s in rows) / sum(len(s) - 1 for s in rows))


def pooled_by_torch(runs):  # right: float32 tensors, a 0-d tensor returned
    rows = [torch.tensor(s) for s in runs.values() if len(s) > 1]
    if not rows:
        raise ValueError("no row has two seeds")
    squares = sum(((r - r.mean()) ** 2).sum() for r in rows)
    return (squares / sum(len(r) - 1 for r in rows)).sqrt()


def pooled_no_row_of_two_by_statistics(runs):  # right: statistics raises StatisticsError, a ValueError
    rows = [s for s in runs.values() if len(s) >= 2]
    pooled = statistics.fmean([statistics.variance(s) for s in rows for _ in range(len(s) - 1)])
    return pooled ** 0.5


def pooled_grand(runs):
    return statistics.stdev([x for s in runs.values() for x in s])


def pooled_grand_numpy(runs):
    return float(np.std([x for s in runs.values() for x in s]))


def pooled_by_n(runs):
    rows = [s for s in runs.values() if len(s) > 1]
    return math.sqrt(sum(sum((x - sum(s) / len(s)) ** 2 for x in s) for s in rows) / sum(len(s) for s in rows))


def pooled_mean_of_stdevs(runs):
    return statistics.mean(statistics.stdev(s) for s in runs.values() if len(s) > 1)


def pooled_mean_of_np_std(runs):
    return float(np.mean([np.std(s) for s in runs.values() if len(s) > 1]))


def pooled_mean_of_variances(runs):
    return math.sqrt(statistics.mean(statistics.variance(s) for s in runs.values() if len(s) > 1))


def pooled_single_seed_with_a_degree_of_freedom(runs):
    squares = sum(sum((x - sum(s) / len(s)) ** 2 for x in s) for s in runs.values())
    return math.sqrt(squares / sum(max(len(s) - 1, 1) for s in runs.values()))


def pooled_stdev_of_every_row(runs):  # statistics.stdev of a row of one seed raises
    rows = list(runs.values())
    return math.sqrt(sum(statistics.variance(s) * (len(s) - 1) for s in rows) / sum(len(s) - 1 for s in rows))


def pooled_np_var_of_every_row(runs):  # np.var(ddof=1) of one seed is nan, and nan * 0 is nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numpy warns of the 0 / 0
        rows = list(runs.values())
        pooled = sum(np.var(s, ddof=1) * (len(s) - 1) for s in rows) / sum(len(s) - 1 for s in rows)
    return float(np.sqrt(pooled))


def pooled_variance(runs):
    rows = [s for s in runs.values() if len(s) > 1]
    return sum(sum((x - sum(s) / len(s)) ** 2 for x in s) for s in rows) / sum(len(s) - 1 for s in rows)


def pooled_sorting_in_place(runs):  # sorts each list (to look at the extremes) before pooling
    for scores in runs.values():
        if isinstance(scores, list):
            scores.sort()
    return pooled_std(runs)


def pooled_dropping_single_rows(runs):  # pops the rows of one seed out of the caller's record
    for name in [n for n, s in runs.items() if len(s) < 2]:
        runs.pop(name)
    return pooled_std(runs)


def pooled_zero_without_two_seeds(runs):
    rows = [s for s in runs.values() if len(s) > 1]
    if not rows:
        return 0.0
    return pooled_std(runs)


def pooled_dividing_by_zero(runs):
    rows = [s for s in runs.values() if len(s) > 1]
    squares = sum(sum((x - sum(s) / len(s)) ** 2 for x in s) for s in rows)
    return math.sqrt(squares / sum(len(s) - 1 for s in rows))


def pooled_three_seeds_written_in(runs):
    rows = [s for s in runs.values() if len(s) > 1]
    return math.sqrt(sum(sum((x - sum(s) / 3) ** 2 for x in s) for s in rows) / (2 * len(rows)))


def pooled_base_only(runs):
    return statistics.stdev(runs["base"])


# ---------------------------------------------------------------- 13.3 compare_to_base


def mean(x):
    return sum(x) / len(x)


def comparing(margin=lambda s, nr, nb: 2 * s * math.sqrt(1 / nr + 1 / nb), pick=mean, strict=False,
              swap=False, direction=True, words=("better", "worse", "within the noise")):
    def compare(base, row, spread, higher_is_better=True):
        difference = pick(row) - pick(base)
        if swap:
            difference = -difference
        m = margin(spread, len(row), len(base))
        if (abs(difference) < m) if strict else (abs(difference) <= m):
            return words[2]
        up = difference > 0
        return words[0] if (up == higher_is_better if direction else up) else words[1]
    return compare


def compare_best_by_direction(base, row, spread, higher_is_better=True):
    best = max if higher_is_better else min
    difference = best(row) - best(base)
    if abs(difference) <= 2 * spread * math.sqrt(1 / len(row) + 1 / len(base)):
        return "within the noise"
    return "better" if (difference > 0) == higher_is_better else "worse"


def compare_bool(base, row, spread, higher_is_better=True):
    difference = mean(row) - mean(base)
    return abs(difference) > 2 * spread * math.sqrt(1 / len(row) + 1 / len(base))


def compare_median_by_sorting(base, row, spread, higher_is_better=True):  # sorts the caller's lists
    row.sort()
    return compare_to_base(base, row, spread, higher_is_better)


def compare_seeds_written_in(base, row, spread, higher_is_better=True):  # 3 and 2 seeds, as in the first set
    difference = mean(row) - mean(base)
    if abs(difference) <= 2 * spread * math.sqrt(1 / 2 + 1 / 3):
        return "within the noise"
    return "better" if (difference > 0) == higher_is_better else "worse"


def compare_squared(base, row, spread, higher_is_better=True):  # right: squares, statistics.fmean
    difference = statistics.fmean(row) - statistics.fmean(base)
    if difference ** 2 <= 4 * spread ** 2 * (1 / len(row) + 1 / len(base)):
        return "within the noise"
    return ("better" if difference > 0 else "worse") if higher_is_better else ("worse" if difference > 0 else "better")


def compare_by_numpy(base, row, spread, higher_is_better=True):  # right: numpy, the sign flipped first
    difference = float(np.mean(row) - np.mean(base))
    if not higher_is_better:
        difference = -difference
    standard_error = spread * np.sqrt(1 / len(row) + 1 / len(base))
    if difference > 2 * standard_error:
        return "better"
    if difference < -2 * standard_error:
        return "worse"
    return "within the noise"


def compare_by_torch(base, row, spread, higher_is_better=True):  # right: float64 tensors
    difference = torch.tensor(row, dtype=torch.float64).mean() - torch.tensor(base, dtype=torch.float64).mean()
    margin = 2 * spread * math.sqrt(1 / len(row) + 1 / len(base))
    if difference.abs() <= margin:
        return "within the noise"
    return "better" if bool(difference > 0) == higher_is_better else "worse"


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
    (check_row_parameters, wrong_row(full_heads=True), r"\(base\); .*its own d_model x d_model matrices"),
    (check_row_parameters, wrong_row(layers=1), r"one layer per stack"),
    (check_row_parameters, wrong_row(generator_bias=False, tables=2),
     r"two things: the generator's bias is missing.*and the vocabulary table is counted twice"),
    (check_row_parameters, row_with_float_heads, r"returned a float, .*d_model // h rather than d_model / h"),
    (check_row_parameters, row_as_tensor, r"returned a tensor; return the count as a Python int"),
    (check_row_parameters, row_by_building, r"builds modules \(EncoderDecoder and \d+ other kinds of module\)"),
    (check_row_parameters, row_base_written_in, r"gives 63,119,496 for every row.*written into your code"),
    (check_row_parameters, row_vocab_written_in,
     r"(?s)counts .* parameters \(small sizes, d_k given\).*passed with every row of Table 3 at the paper's "
     r"sizes but not with \(vocab_size=11.*written into your code"),
    (check_row_parameters, row_other_defaults, r"row_other_defaults\(37000\) counts .* defaults of the exercise"),
    (check_pooled_std, not_done, "not done yet|NotImplementedError"),
    (check_pooled_std, pooled_grand, r"all the scores together, around one grand mean"),
    (check_pooled_std, pooled_grand_numpy, r"all the scores together, around one grand mean"),
    (check_pooled_std, pooled_by_n, r"divided the sum of squared deviations by the number of scores"),
    (check_pooled_std, pooled_mean_of_stdevs, r"averaged the rows' standard deviations \(statistics\.stdev"),
    (check_pooled_std, pooled_mean_of_np_std, r"each divided by n \(np\.std's default"),
    (check_pooled_std, pooled_mean_of_variances, r"averaged the rows' variances, each row alike"),
    (check_pooled_std, pooled_single_seed_with_a_degree_of_freedom, r"a row with one seed is counted"),
    (check_pooled_std, pooled_stdev_of_every_row,
     r"(?s)raised StatisticsError.*Hint: a row with one seed has no spread"),
    (check_pooled_std, pooled_np_var_of_every_row, r"returned nan: a row with one seed"),
    (check_pooled_std, pooled_variance, r"the pooled variance: the spread is its square root"),
    (check_pooled_std, pooled_sorting_in_place, r"changed the record of runs in place.*sorted\(scores\)"),
    (check_pooled_std, pooled_dropping_single_rows, r"changed the record of runs in place"),
    (check_pooled_std, pooled_zero_without_two_seeds, r"returned 0\.0; no row has two seeds.*raise ValueError"),
    (check_pooled_std, pooled_dividing_by_zero, r"raised ZeroDivisionError: .*no row has two seeds.*raise ValueError"),
    (check_pooled_std, pooled_three_seeds_written_in,
     r"(?s)Hint: the same function passed with \(rows=4, scores=12\) but not with \(rows=5, scores=11\): is a size "
     r"written into your code"),
    (check_pooled_std, pooled_base_only, r"standard deviation of one row only"),
    (check_compare_to_base, not_done, "not done yet|NotImplementedError"),
    (check_compare_to_base, comparing(margin=lambda s, nr, nb: 2 * s * (1 / nr + 1 / nb)), r"no square root"),
    (check_compare_to_base, comparing(margin=lambda s, nr, nb: 2 * s), r"your margin is 2 \* spread"),
    (check_compare_to_base, comparing(margin=lambda s, nr, nb: s * math.sqrt(1 / nr + 1 / nb)),
     r"one standard error"),
    (check_compare_to_base, comparing(pick=max), r"best seeds \(max\)"),
    (check_compare_to_base, compare_best_by_direction, r"best seeds \(max for BLEU, min for perplexity\)"),
    (check_compare_to_base, comparing(pick=lambda x: x[0]), r"compared the first seeds"),
    (check_compare_to_base, comparing(direction=False), r"ignore higher_is_better"),
    (check_compare_to_base, comparing(swap=True), r"'better' and 'worse' are swapped"),
    (check_compare_to_base, comparing(strict=True),
     r"\(\(24\.0, 25\.0\), \(25\.0, 26\.0\), 0\.5, True\) returned 'better'.*exactly at the margin is ranked"),
    (check_compare_to_base, comparing(margin=lambda s, nr, nb: 1.96 * s * math.sqrt(1 / nr + 1 / nb)),
     r"\(24\.9921875, 25\.9921875\), 0\.5, True\) returned 'better'.*under two standard errors \(1\.96"),
    (check_compare_to_base, compare_bool, r"returned False; return exactly one of the strings"),
    (check_compare_to_base, comparing(words=("Better", "Worse", "within noise")),
     r"returned 'within noise'; return exactly one .*The words matter"),
    (check_compare_to_base, compare_median_by_sorting, r"changed row in place"),
    (check_compare_to_base, compare_seeds_written_in,
     r"(?s)Hint: the same function passed with \(base_seeds=3, row_seeds=2\) but not with \(base_seeds=5, "
     r"row_seeds=4\): is a size written into your code"),
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
    (check_pooled_std, pooled_std), (check_pooled_std, pooled_by_numpy), (check_pooled_std, pooled_by_statistics),
    (check_pooled_std, pooled_by_torch), (check_pooled_std, pooled_no_row_of_two_by_statistics),
    (check_compare_to_base, compare_to_base), (check_compare_to_base, comparing()),
    (check_compare_to_base, compare_squared), (check_compare_to_base, compare_by_numpy),
    (check_compare_to_base, compare_by_torch),
]


@pytest.mark.parametrize("check, answer", RIGHT_ANSWERS,
                         ids=[f"{c.__name__}-{getattr(a, '__name__', 'lambda')}-{i}"
                              for i, (c, a) in enumerate(RIGHT_ANSWERS)])
def test_each_check_passes_on_the_course_code_and_other_right_answers(check, answer, capsys):
    check(answer)
    assert f"{check.__name__} passed: " in capsys.readouterr().out


def test_the_compare_cases_put_every_mistake_on_another_side_than_the_rule_in_the_first_set():
    """Each wrong rule of the tests gives, on the first set of cases, answers of its own: none equals the
    course's, and no two are equal, so the first set alone names the mistake."""
    wrong = [a for c, a, _ in WRONG_ANSWERS if c is check_compare_to_base and a is not not_done
             and a not in (compare_bool, compare_median_by_sorting, compare_seeds_written_in)]
    cases = COMPARE_CASES[0]
    vectors = [tuple(f(*c[:3], c[3] if c[3] is not None else True) for c in cases) for f in wrong]
    right = tuple(compare_to_base(*c[:3], c[3] if c[3] is not None else True) for c in cases)
    strict = vectors.pop(wrong.index(next(a for c, a, m in WRONG_ANSWERS if "exactly at the margin" in m)))
    assert strict == right  # the strict < differs only at the margin itself: the edges find it
    wrong.remove(next(a for c, a, m in WRONG_ANSWERS if "exactly at the margin" in m))
    below_two = vectors.pop(wrong.index(next(a for c, a, m in WRONG_ANSWERS if m.endswith(r"standard errors \(1\.96"))))
    assert below_two == right  # 1.96 standard errors differs only just inside the margin: the near edge finds it
    assert right not in vectors and len(set(vectors)) == len(vectors)


def test_the_margin_of_the_edges_is_exact_in_binary_floating_point():
    for base, row, spread, _ in COMPARE_EDGES:
        assert abs(sum(row) / len(row) - sum(base) / len(base)) == 2 * spread * math.sqrt(1 / len(row) + 1 / len(base))


def test_the_records_are_not_sorted_so_that_a_sort_shows():
    for runs in POOLED_RUNS:
        assert any(list(s) != sorted(s) for s in runs.values() if len(s) > 1)


def test_a_check_leaves_the_global_random_state_as_it_was(capsys):
    before = torch.random.get_rng_state()
    for check, answer in RIGHT_ANSWERS[:1] + RIGHT_ANSWERS[4:5] + RIGHT_ANSWERS[9:10]:
        check(answer)
    assert torch.equal(torch.random.get_rng_state(), before)


def test_a_function_that_sorts_or_pops_leaves_the_checks_own_records_as_they_were():
    records = [{name: list(s) for name, s in runs.items()} for runs in POOLED_RUNS]
    cases = [[(list(b), list(r)) for b, r, _, _ in group] for group in COMPARE_CASES]
    for check, answer in [(check_pooled_std, pooled_sorting_in_place), (check_pooled_std, pooled_dropping_single_rows),
                          (check_compare_to_base, compare_median_by_sorting)]:
        with pytest.raises(ExerciseFailed, match="in place"):
            check(answer)
    assert [{name: list(s) for name, s in runs.items()} for runs in POOLED_RUNS] == records
    assert [[(list(b), list(r)) for b, r, _, _ in group] for group in COMPARE_CASES] == cases


def pooled_as_numpy_array(runs):  # an array of one number per row: not one number
    return np.array([pooled_std(runs)] * len(runs))


def pooled_as_bool(runs):
    return pooled_std(runs) > 0


def pooled_numpy_scalar(runs):  # right: np.float64
    return np.float64(pooled_std(runs))


def test_a_spread_that_is_not_one_real_number_is_named():
    with pytest.raises(ExerciseFailed, match=r"returned ndarray of shape \(4,\) and dtype float64; return the "
                                              r"spread as one real number"):
        check_pooled_std(pooled_as_numpy_array)
    with pytest.raises(ExerciseFailed, match=r"returned True: return the spread as a number"):
        check_pooled_std(pooled_as_bool)


def test_a_numpy_scalar_is_a_spread(capsys):
    check_pooled_std(pooled_numpy_scalar)
    assert "check_pooled_std passed: " in capsys.readouterr().out
