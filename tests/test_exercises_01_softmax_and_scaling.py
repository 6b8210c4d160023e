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


def softmax_shifted_when_large(x, dim=-1):
    if x.max() > 80:  # shifts only when exp could overflow: scores far below zero give 0 / 0
        x = x - x.amax(dim=dim, keepdim=True)
    e = torch.exp(x)
    return e / e.sum(dim=dim, keepdim=True)


def softmax_in_float32_for_safety(x, dim=-1):
    x = x.float()  # float64 scores come back float32
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)


def softmax_into_zeros(x, dim=-1):
    out = torch.zeros(x.shape)  # float32 whatever the dtype of x
    out[...] = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return out / out.sum(dim=dim, keepdim=True)


def softmax_computed_in_float32(x, dim=-1):
    y = x.float()  # float32 steps, converted back: the dtype is right, the precision is not
    e = torch.exp(y - y.amax(dim=dim, keepdim=True))
    return (e / e.sum(dim=dim, keepdim=True)).to(x.dtype)


def softmax_squeezed(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return (e / e.sum(dim=dim, keepdim=True)).squeeze()  # drops a batch of one


def softmax_for_3d_scores(x, dim=-1):
    d = dim % 3  # 3-D scores only: dim=-1 of a 4-D tensor becomes dimension 2
    e = torch.exp(x - x.amax(dim=d, keepdim=True))
    return e / e.sum(dim=d, keepdim=True)


_BUFFERS = {}


def softmax_into_a_global_buffer(x, dim=-1):
    out = _BUFFERS.setdefault((tuple(x.shape), x.dtype), torch.empty_like(x))  # reused by every call
    torch.exp(x - x.amax(dim=dim, keepdim=True), out=out)
    out /= out.sum(dim=dim, keepdim=True)
    return out


def softmax_with_a_detached_max(x, dim=-1):
    m = x.max(dim=dim, keepdim=True).values.detach()  # the shift's gradient is zero anyway
    e = torch.exp(x - m)
    return e / torch.sum(e, dim, keepdim=True)


def softmax_by_logsumexp(x, dim=-1):
    return torch.exp(x - torch.logsumexp(x, dim=dim, keepdim=True))


def softmax_along_the_last_after_movedim(x, dim=-1):
    y = x.movedim(dim, -1)
    e = torch.exp(y - y.amax(-1, keepdim=True))
    return (e / e.sum(-1, keepdim=True)).movedim(-1, dim)


def softmax_in_place_on_its_own_tensor(x, dim=-1):
    z = x - x.amax(dim=dim, keepdim=True)  # a new tensor: changing it in place is fine
    z.exp_()
    z /= z.sum(dim=dim, keepdim=True)
    return z


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


def _refuse(temperature):
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")


def temperature_shifted_when_large(x, temperature):
    _refuse(temperature)
    z = x / temperature
    if z.max() > 80:  # shifts only when exp could overflow
        z = z - z.amax(dim=-1, keepdim=True)
    return z.exp() / z.exp().sum(dim=-1, keepdim=True)


def temperature_in_float32_for_safety(x, temperature):
    _refuse(temperature)
    return softmax(x.float(), temperature=temperature)


def temperature_squeezed(x, temperature):
    _refuse(temperature)
    return softmax(x, temperature=temperature).squeeze()


def temperature_along_dimension_1(x, temperature):
    _refuse(temperature)
    return softmax(x, dim=1, temperature=temperature)  # the last dimension of (rows, n) only


def temperature_into_a_global_buffer(x, temperature):
    _refuse(temperature)
    out = _BUFFERS.setdefault(("T", tuple(x.shape), x.dtype), torch.empty_like(x))
    out.copy_(softmax(x, temperature=temperature))
    return out


def temperature_with_a_default_and_not_positive(x, temperature=1.0):
    if not temperature > 0:  # also refuses NaN
        raise ValueError(f"temperature must be positive, got {temperature}")
    z = x / temperature
    return torch.exp(z - torch.logsumexp(z, dim=-1, keepdim=True))


# ---------------------------------------------------------------- score_variances


def _variances(dots="sum", stat="var", scale="sqrt", order="raw first", draws=2, shape="pairs"):
    def score_variances(d_k, n_pairs, sample):
        q = sample(n_pairs, d_k) if shape == "pairs" else sample(d_k, n_pairs)
        k = q if draws == 1 else sample(*q.shape)
        if draws == 3:  # a third draw, used for the scores (an unused one changes nothing the check reads)
            q = sample(n_pairs, d_k)
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


_PAIR = torch.zeros(2)


def variances_into_a_global_tensor(d_k, n_pairs, sample):
    q, k = sample(n_pairs, d_k), sample(n_pairs, d_k)
    dots = (q * k).sum(dim=-1)
    _PAIR[0], _PAIR[1] = dots.var(), (dots / math.sqrt(d_k)).var()  # every call returns _PAIR
    return _PAIR


def variances_into_a_new_tensor(d_k, n_pairs, sample):
    dots = torch.einsum("nd,nd->n", sample(n_pairs, d_k), sample(n_pairs, d_k))
    out = torch.empty(2, dtype=dots.dtype)  # a new tensor on every call
    out[0], out[1] = dots.var(), (dots / d_k**0.5).var()
    return out


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
    (check_stable_softmax, softmax_calling_functional, r"calls torch\.nn\.functional\.softmax"),
    (check_stable_softmax, softmax_in_place, r"changed its first argument `x` in place: 30 of its 30"),
    (check_stable_softmax, softmax_in_float64, r"as torch\.float64 for torch\.float32 inputs"),
    (check_stable_softmax, softmax_hard_coded,
     r"(?s)fixed shape \[2, 3, 1\].*size written into your code"),
    (check_stable_softmax, softmax_shifted_when_large,
     r"NaN or weights that do not sum to 1 for scores around -1000.*maximum only when the scores "
     r"are large"),
    (check_stable_softmax, softmax_in_float32_for_safety,
     r"as torch\.float32 for torch\.float64 inputs.*a \.float\(\) .*\"for safety\""),
    (check_stable_softmax, softmax_into_zeros,
     r"as torch\.float32 for torch\.float64 inputs.*tensor created without dtype="),
    (check_stable_softmax, softmax_computed_in_float32,
     r"for float64 inputs, the float64 reference and the weights of softmax_computed_in_float32\(x of "
     r"dtype float64, dim=1\) differ "
     r"by up to .*a step computes in float32 and converts back"),
    (check_stable_softmax, softmax_squeezed,
     r"expected \(1, 1, 6\), got \(6,\).*lost dimensions of size 1: \.squeeze\(\)"),
    (check_stable_softmax, softmax_for_3d_scores,
     r"with x of shape \(2, 3, 4, 5\) \(4 dimensions; the earlier scores had 3\) and dim=-1: your "
     r"softmax runs along dimension 2, but dim=-1 asks for dimension 3"),
    (check_stable_softmax, softmax_into_a_global_buffer,
     r"a second call of softmax_into_a_global_buffer, on other inputs, changed the weights that "
     r"the first call had returned.*global buffer"),
    (check_softmax_with_temperature, not_done, r"raised NotImplementedError"),
    (check_softmax_with_temperature, _temperature(how="multiply"),
     r"multiplied the scores by the temperature instead of dividing: at T = 2\.0 .*entropy"),
    (check_softmax_with_temperature, _temperature(how="subtract"),
     r"same weights as with temperature 1: the temperature has no effect"),
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
    (check_softmax_with_temperature, temperature_shifted_when_large,
     r"NaN or weights that do not sum to 1 for scores x - 1000 at temperature 0\.5.*maximum only "
     r"when the scores are large"),
    (check_softmax_with_temperature, temperature_in_float32_for_safety,
     r"as torch\.float32 for torch\.float64 inputs.*\.float\(\)"),
    (check_softmax_with_temperature, temperature_squeezed,
     r"x of shape \(1, 4\), temperature=2\.0\): expected \(1, 4\), got \(4,\).*\.squeeze\(\)"),
    (check_softmax_with_temperature, temperature_along_dimension_1,
     r"with x of shape \(2, 3, 5\), your softmax runs along dimension 1; it runs along the last"),
    (check_softmax_with_temperature, temperature_into_a_global_buffer,
     r"a second call of temperature_into_a_global_buffer, on other inputs, changed the weights"),
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
    (check_score_variances, variances_as_floats, r"got a tuple of 2 numbers: return them as one tensor"),
    (check_score_variances, variances_into_a_global_tensor,
     r"a second call of variances_into_a_global_tensor, on other inputs, changed the pair of "
     r"variances that the first call had returned"),
]


@pytest.mark.parametrize("check, wrong, message", WRONG_ANSWERS,
                         ids=[f"{c.__name__}-{m[:30]}" for c, _, m in WRONG_ANSWERS])
def test_check_names_the_mistake_of_a_typical_wrong_answer(check, wrong, message):
    with pytest.raises(ExerciseFailed, match=message):
        check(wrong)


@pytest.mark.parametrize("check, fn", [
    (check_stable_softmax, softmax),
    (check_stable_softmax, _stable()),
    (check_stable_softmax, softmax_with_a_detached_max),
    (check_stable_softmax, softmax_by_logsumexp),
    (check_stable_softmax, softmax_along_the_last_after_movedim),
    (check_stable_softmax, softmax_in_place_on_its_own_tensor),
    (check_softmax_with_temperature, lambda x, temperature: softmax(x, temperature=temperature)),
    (check_softmax_with_temperature, _temperature()),
    (check_softmax_with_temperature, temperature_with_a_default_and_not_positive),
    (check_score_variances, variances_as_in_the_notebook),
    (check_score_variances, variances_divided_afterwards),
    (check_score_variances, variances_population),
    (check_score_variances, variances_into_a_new_tensor),
], ids=["course softmax", "stable", "detached max", "logsumexp", "movedim", "in place on its own",
        "course softmax with T", "temperature", "temperature with a default",
        "notebook variances", "variance divided by d_k", "population variance",
        "einsum into a new tensor"])
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
    from annotated.support.grading.softmax import DISTRIBUTIONS, VARIANCE_SIZES, sampler
    for sizes, kind in zip(VARIANCE_SIZES, DISTRIBUTIONS):
        sample = sampler(kind, seed=0)
        raw, scaled = variances_as_in_the_notebook(sizes["d_k"], sizes["n_pairs"], sample).tolist()
        assert abs(raw / sizes["d_k"] - 1) < 0.15 and abs(scaled - 1) < 0.15, (kind, raw, scaled)
