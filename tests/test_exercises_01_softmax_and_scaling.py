"""The checks of notebook 01's exercises: each passes on the course's code and names the
mistake of typical wrong answers (collected with the others by tests/test_exercises.py)."""

import math

import pytest
import torch

from annotated.softmax import softmax
from annotated.support.grading import (
    ExerciseFailed,
    check_score_variances,
    check_softmax_with_temperature,
    check_stable_softmax,
)


def not_done(*args):
    raise NotImplementedError()


# ---------------------------------------------------------------- stable_softmax


def _stable(shift="row max", max_dim=None, sum_dim=None, keepdim=True, divide=True):
    """A configurable softmax, to write the usual wrong answers in one line each."""
    def stable_softmax(x, dim=-1):
        m_dim = dim if max_dim is None else max_dim
        if shift == "row max":
            z = x - x.amax(dim=m_dim, keepdim=keepdim)
        elif shift == "global max":
            z = x - x.max()
        elif shift == "row mean":
            z = x - x.mean(dim=m_dim, keepdim=True)
        elif shift == "row min":
            z = x - x.amin(dim=m_dim, keepdim=True)
        elif shift == "divide by max":
            z = x / x.amax(dim=m_dim, keepdim=True)
        else:
            z = x
        e = torch.exp(z)
        if not divide:
            return e
        if sum_dim == "all":
            return e / e.sum()
        return e / e.sum(dim=dim if sum_dim is None else sum_dim, keepdim=keepdim)
    return stable_softmax


def softmax_ignoring_dim(x, dim=-1):
    z = x - x.amax(dim=-1, keepdim=True)
    return z.exp() / z.exp().sum(dim=-1, keepdim=True)


def softmax_with_max_pair(x, dim=-1):
    e = torch.exp(x - x.max(dim=dim, keepdim=True))  # a (values, indices) pair
    return e / e.sum(dim=dim, keepdim=True)


def softmax_calling_torch(x, dim=-1):
    return torch.softmax(x, dim=dim)


def softmax_calling_functional(x, dim=-1):
    return torch.nn.functional.softmax(x - x.amax(dim=dim, keepdim=True), dim=dim)


def softmax_in_place(x, dim=-1):
    x -= x.amax(dim=dim, keepdim=True)  # changes the caller's scores
    return x.exp() / x.exp().sum(dim=dim, keepdim=True)


def softmax_hard_coded(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim).reshape(2, 3, 1)  # the first set's (batch, rows)


def softmax_in_float64(x, dim=-1):
    return _stable()(x.double(), dim)  # float64 weights for float32 scores


# ---------------------------------------------------------------- softmax_with_temperature


def _temperature(how="divide", refuse=True, stable=True):
    def softmax_with_temperature(x, temperature):
        if refuse and temperature <= 0:
            raise ValueError(f"temperature must be positive, got {temperature}")
        z = x / temperature if how in ("divide", "after", "power") else x
        if how == "multiply":
            z = x * temperature
        elif how == "subtract":
            z = x - temperature
        elif how == "sqrt":
            z = x / math.sqrt(temperature)
        elif how in ("after", "power"):
            z = x
        if stable:
            z = z - z.amax(dim=-1, keepdim=True)
        p = z.exp() / z.exp().sum(dim=-1, keepdim=True)
        if how == "after":
            return p / temperature
        if how == "power":
            return p ** (1 / temperature)
        return p
    return softmax_with_temperature


def temperature_refusing_with_an_assert(x, temperature):
    assert temperature > 0
    return softmax(x, temperature=temperature)


def temperature_hard_coded(x, temperature):
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    z = (x / temperature).view(3, 5)  # the first set's (rows, n)
    return torch.softmax(z, dim=-1)


# ---------------------------------------------------------------- score_variances


def _variances(dots="sum", stat="var", scale="sqrt", order="raw first", draws=2, shape="pairs"):
    def score_variances(d_k, n_pairs, sample):
        q = sample(n_pairs, d_k) if shape == "pairs" else sample(d_k, n_pairs)
        k = q if draws == 1 else sample(*q.shape)
        if draws == 3:
            sample(n_pairs, d_k)
        if dots == "sum":
            s = (q * k).sum(dim=-1)
        elif dots == "mean":
            s = (q * k).mean(dim=-1)
        elif dots == "products":
            s = (q * k).flatten()
        elif dots == "over pairs":
            s = (q * k).sum(dim=0)
        elif dots == "matmul":
            s = (q @ k.T).flatten()
        if scale == "sqrt":
            scaled = (s / math.sqrt(d_k)).var()
        elif scale == "none":
            scaled = s.var()
        elif scale == "d_k":
            scaled = (s / d_k).var()
        elif scale == "variance by sqrt":
            scaled = s.var() / math.sqrt(d_k)
        elif scale == "sqrt(9)":
            scaled = (s / 3.0).var()
        pair = [s.var(), scaled]
        if stat == "std":
            pair = [p.sqrt() for p in pair]
        if order == "swapped":
            pair = pair[::-1]
        return torch.stack(pair)
    return score_variances


def variances_from_torch_randn(d_k, n_pairs, sample):
    q, k = torch.randn(n_pairs, d_k), torch.randn(n_pairs, d_k)
    dots = (q * k).sum(dim=-1)
    return torch.stack([dots.var(), (dots / math.sqrt(d_k)).var()])


def variances_hard_coded(d_k, n_pairs, sample):
    q, k = sample(n_pairs, 9), sample(n_pairs, 9)  # the first set's d_k
    dots = (q * k).sum(dim=-1)
    return torch.stack([dots.var(), (dots / 3).var()])


def variances_as_floats(d_k, n_pairs, sample):
    q, k = sample(n_pairs, d_k), sample(n_pairs, d_k)
    dots = (q * k).sum(dim=-1)
    return dots.var().item(), (dots / math.sqrt(d_k)).var().item()


def variances_population(d_k, n_pairs, sample):
    q, k = sample(n_pairs, d_k), sample(n_pairs, d_k)
    dots = (q * k).sum(dim=-1)
    return torch.stack([dots.var(correction=0), dots.var(correction=0) / d_k])


def variances_as_in_the_notebook(d_k, n_pairs, sample):
    q, k = sample(n_pairs, d_k), sample(n_pairs, d_k)
    dots = (q * k).sum(dim=-1)  # (n_pairs,)
    return torch.stack([dots.var(), (dots / math.sqrt(d_k)).var()])


def variances_divided_afterwards(d_k, n_pairs, sample):
    dots = (sample(n_pairs, d_k) * sample(n_pairs, d_k)).sum(dim=-1)
    return torch.stack([dots.var(), dots.var() / d_k])  # Var(X / c) = Var(X) / c^2


WRONG_ANSWERS = [
    # (check, wrong answer, what the message must say)
    (check_stable_softmax, not_done, r"raised NotImplementedError"),
    (check_stable_softmax, _stable(shift="none"),
     r"NaN or inf for scores around 1000.*overflows float32.*x\.amax\(dim=dim, keepdim=True\)"),
    (check_stable_softmax, _stable(shift="global max"),
     r"rows of very different scale.*maximum of the whole tensor.*underflows to 0, and 0 / 0"),
    (check_stable_softmax, _stable(shift="row mean"),
     r"spread about \+-\d+ .*smaller than the row's maximum \(its mean, its minimum\?\).*overflows"),
    (check_stable_softmax, _stable(shift="row min"), r"smaller than the row's maximum"),
    (check_stable_softmax, _stable(shift="divide by max"),
     r"divided the scores by their maximum; subtract it instead"),
    (check_stable_softmax, _stable(max_dim=0),
     r"subtracted the maximum along dimension 0, but the softmax runs along dimension 2 \(the last\)"),
    (check_stable_softmax, _stable(keepdim=False),
     r"(?s)must match the size of tensor.*\nHint: a max or a sum along a dimension without keepdim=True"),
    (check_stable_softmax, softmax_with_max_pair,
     r"(?s)torch\.return_types\.max.*\nHint: x\.max\(dim=\.\.\.\) returns a pair \(values, indices\)"),
    (check_stable_softmax, _stable(sum_dim="all"), r"divided by the sum of the whole tensor"),
    (check_stable_softmax, _stable(sum_dim=0),
     r"sum to 1 along dimension 0, but the softmax runs along dimension 2 \(the last\) \(dim=-1\)"),
    (check_stable_softmax, _stable(divide=False), r"exponentials are not divided by their sum"),
    (check_stable_softmax, softmax_ignoring_dim,
     r"asked for the softmax along dim=1, your function took it along the last dimension"),
    (check_stable_softmax, softmax_calling_torch, r"calls torch\.softmax: the exercise is to build"),
    (check_stable_softmax, softmax_calling_functional, r"calls Tensor\.softmax"),
    (check_stable_softmax, softmax_in_place, r"changed its first argument `x` in place: 30 of its 30"),
    (check_stable_softmax, softmax_in_float64, r"as torch\.float64 for torch\.float32 inputs"),
    (check_stable_softmax, softmax_hard_coded,
     r"(?s)fixed shape \[2, 3, 1\].*size written into your code"),
    (check_softmax_with_temperature, not_done, r"raised NotImplementedError"),
    (check_softmax_with_temperature, _temperature(how="multiply"),
     r"multiplied the scores by the temperature instead of dividing: at T = 2\.0 .*entropy"),
    (check_softmax_with_temperature, _temperature(how="subtract"),
     r"same weights as temperature 1: the temperature has no effect"),
    (check_softmax_with_temperature, _temperature(how="sqrt"), r"divided the scores by sqrt\(temperature\)"),
    (check_softmax_with_temperature, _temperature(how="after"),
     r"divided the weights by the temperature after the softmax, so each row sums to 1/2\.0 = 0\.5"),
    (check_softmax_with_temperature, _temperature(how="power"),
     r"raised the weights to the power 1/temperature without normalizing"),
    (check_softmax_with_temperature, _temperature(stable=False),
     r"NaN or inf with scores x \+ 1000 and temperature 3\.0: .* reach 334"),
    (check_softmax_with_temperature, _temperature(refuse=False),
     r"temperature=0\.0\) returned without an error.*raise ValueError"),
    (check_softmax_with_temperature, temperature_refusing_with_an_assert,
     r"temperature=0\.0\) raised AssertionError.*raise a ValueError instead"),
    (check_softmax_with_temperature, temperature_hard_coded,
     r"(?s)fixed shape \[3, 5\].*passed with \(rows=3, n=5\) but not with \(rows=6, n=2\)"),
    (check_score_variances, not_done, r"raised NotImplementedError"),
    (check_score_variances, _variances(stat="std"), r"returned standard deviations, .* not variances"),
    (check_score_variances, _variances(order="swapped"), r"the two numbers are swapped"),
    (check_score_variances, _variances(dots="mean"), r"averaged the products q_i k_i instead of summing"),
    (check_score_variances, _variances(dots="products"),
     r"variance of the 27000 products q_i k_i \(about 1\)"),
    (check_score_variances, _variances(dots="over pairs"), r"summed over the pairs \(dim=0\)"),
    (check_score_variances, _variances(dots="matmul"), r"q @ k\.T scores every q with every k"),
    (check_score_variances, _variances(scale="none"), r"second number equals the first"),
    (check_score_variances, _variances(scale="d_k"),
     r"divided the scores by d_k = 9 instead of sqrt\(d_k\) = 3"),
    (check_score_variances, _variances(scale="variance by sqrt"),
     r"divided the variance by sqrt\(d_k\).*Var\(cX\) = c\^2 Var\(X\)"),
    (check_score_variances, _variances(scale="sqrt(9)"),
     r"divided the scores by sqrt\(9\), but here d_k = 25.*\nHint: the same function passed with "
     r"\(d_k=9, n_pairs=3000\) but not with \(d_k=25, n_pairs=2000\)"),
    (check_score_variances, _variances(draws=1), r"drew one sample only: q and k must be independent"),
    (check_score_variances, _variances(draws=3), r"drew 3 samples: draw q and k once"),
    (check_score_variances, _variances(shape="transposed"),
     r"drew a sample of shape \(9, 3000\).*one row per pair"),
    (check_score_variances, variances_from_torch_randn, r"never called sample"),
    (check_score_variances, variances_hard_coded,
     r"(?s)drew a sample of shape \(2000, 9\).*passed with \(d_k=9, n_pairs=3000\) but not with "
     r"\(d_k=25, n_pairs=2000\): is a size written into your code"),
    (check_score_variances, variances_as_floats, r"returned a tuple of two numbers; return them as one tensor"),
]


@pytest.mark.parametrize("check, wrong, message", WRONG_ANSWERS,
                         ids=[f"{c.__name__}-{m[:30]}" for c, _, m in WRONG_ANSWERS])
def test_check_names_the_mistake_of_a_typical_wrong_answer(check, wrong, message):
    with pytest.raises(ExerciseFailed, match=message):
        check(wrong)


@pytest.mark.parametrize("check, fn", [
    (check_stable_softmax, softmax),
    (check_stable_softmax, _stable()),
    (check_softmax_with_temperature, lambda x, temperature: softmax(x, temperature=temperature)),
    (check_softmax_with_temperature, _temperature()),
    (check_score_variances, variances_as_in_the_notebook),
    (check_score_variances, variances_divided_afterwards),
    (check_score_variances, variances_population),
], ids=["course softmax", "stable", "course softmax with T", "temperature", "notebook variances",
        "variance divided by d_k", "population variance"])
def test_check_passes_on_the_course_code_and_equivalent_answers(check, fn, capsys):
    check(fn)
    assert capsys.readouterr().out.startswith(f"{check.__name__} passed: ")


def test_the_library_softmax_is_usable_again_after_the_check():
    with pytest.raises(ExerciseFailed):
        check_stable_softmax(softmax_calling_torch)
    x = torch.randn(3, 4)
    assert torch.softmax is not None and "softmax" not in torch.Tensor.__dict__
    torch.testing.assert_close(x.softmax(-1), softmax(x))


def test_the_score_variances_are_about_d_k_and_1_for_every_distribution():
    from annotated.support.grading.softmax import DISTRIBUTIONS, VARIANCE_SIZES, _sampler
    g = torch.Generator().manual_seed(0)
    for sizes, kind in zip(VARIANCE_SIZES, DISTRIBUTIONS):
        sample, _ = _sampler(kind, g)
        raw, scaled = variances_as_in_the_notebook(sizes["d_k"], sizes["n_pairs"], sample).tolist()
        assert abs(raw / sizes["d_k"] - 1) < 0.15 and abs(scaled - 1) < 0.15, (kind, raw, scaled)
