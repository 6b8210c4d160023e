"""Notebook 11's checks: each passes on the course's code and names the mistake of a typical
wrong answer."""

import math

import pytest
import torch

from annotated.linformer import linformer_attention, rank_for_energy
from annotated.local_attention import block_band_mask
from annotated.support.grading.core import ExerciseFailed
from annotated.support.grading.cost import check_block_band_mask, check_linformer_attention, check_rank_for_energy


def not_done(*args):
    raise NotImplementedError()


def _band(offsets, step=0):
    def mask(n, b):
        block = torch.arange(n) // (b + step)
        offset = block[:, None] - block[None, :]
        return torch.isin(offset, torch.tensor(offsets))
    return mask


WRONG_BANDS = [
    (not_done, r"not done"),
    (_band((0,)), r"its own block only"),
    (_band((0, -1)), r"block after it"),
    (_band((-1, 0, 1)), r"blocks on both sides"),
    (lambda n, b: block_band_mask(n, b).tril(), r"causal=True"),
    (lambda n, b: (torch.arange(n)[:, None] - torch.arange(n)[None, :]).abs() < b, r"window of positions \|i - j\| < b"),
    (_band((0, 1), step=1), r"blocks hold b \+ 1"),
    (lambda n, b: block_band_mask(n, b).int(), r"torch.int32 tensor; the course's masks are bool"),
    (lambda n, b: block_band_mask(n, 3), r"(?s)mismatch in .*Hint: the same function passed with \(n=10, b=3\)"),
    (lambda n, b: block_band_mask(10, b), r"wrong shape|expected \(16, 16\)"),
]


def _linformer(swap=False, scale=None, dim=-1, values_with_e=False, weights_out=True):
    def fn(query, key, value, E, F):
        if swap:
            E, F = F, E
        if values_with_e:
            F = E
        s = scale(query, E) if scale else math.sqrt(query.size(-1))
        w = (query @ (E @ key).transpose(-2, -1) / s).softmax(dim=dim)
        out = w @ (F @ value)
        return (out, w) if weights_out else out
    return fn


WRONG_LINFORMERS = [
    (not_done, r"not done"),
    (_linformer(swap=True), r"E and F are swapped"),
    (_linformer(scale=lambda q, E: 1.0), r"not divided by sqrt\(d_k\)"),
    (_linformer(scale=lambda q, E: math.sqrt(E.size(0))), r"divided by sqrt\(k\)"),
    (_linformer(dim=-2), r"softmax runs over the queries"),
    (_linformer(values_with_e=True), r"values are projected with E"),
    (_linformer(weights_out=False), r"must return a pair"),
    (_linformer(scale=lambda q, E: math.sqrt(5)),
     r"(?s)mismatch in the output.*Hint: the same function passed with \(batch=2, n=9, k=3, d_k=5, d_v=6\)"),
    (lambda q, k, v, E, F: (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(-1) @ v, r"must return a pair"),
]


def _ranks(square=True, plus_one=True, strict=True):
    def fn(weights, energy):
        s = torch.linalg.svdvals(weights.double())
        s = s**2 if square else s
        kept = s.cumsum(-1) / s.sum(-1, keepdim=True)
        short = (kept < energy - 1e-9) if strict else (kept <= energy + 1e-9)
        return short.sum(-1) + (1 if plus_one else 0)
    return fn


WRONG_RANKS = [
    (not_done, r"not done"),
    (_ranks(square=False), r"square them first"),
    (_ranks(plus_one=False), r"one too small"),
    (_ranks(strict=False), r"not <= energy"),
    (lambda w, e: torch.full(w.shape[:1], w.size(-1)), r"every rank is the full L"),
    (lambda w, e: rank_for_energy(w, e).double(), r"torch.float64 tensor; a rank is an integer"),
    (lambda w, e: rank_for_energy(w, e).sum(), r"One rank per matrix"),
    (lambda w, e: rank_for_energy(w, 0.9), r"(?s)Hint: the same function passed with \(batch=3, L=10, energy=0.9\)"),
]

WRONG_ANSWERS = (
    [(check_block_band_mask, wrong, message) for wrong, message in WRONG_BANDS]
    + [(check_linformer_attention, wrong, message) for wrong, message in WRONG_LINFORMERS]
    + [(check_rank_for_energy, wrong, message) for wrong, message in WRONG_RANKS]
)


@pytest.mark.parametrize("check, fn", [
    (check_block_band_mask, block_band_mask),
    (check_block_band_mask, lambda n, b: torch.isin(torch.arange(n)[:, None] // b - torch.arange(n)[None, :] // b,
                                                   torch.tensor([0, 1]))),
    (check_linformer_attention, linformer_attention),
    (check_linformer_attention, _linformer()),
    (check_rank_for_energy, rank_for_energy),
    (check_rank_for_energy, _ranks()),
], ids=["band-course", "band-isin", "linformer-course", "linformer-by-hand", "rank-course", "rank-by-hand"])
def test_check_passes_on_the_course_code_and_on_other_right_answers(check, fn, capsys):
    check(fn)
    out = capsys.readouterr().out
    assert out.startswith(f"{check.__name__} passed: ") and out.count("\n") == 1


@pytest.mark.parametrize("check, wrong, message", WRONG_ANSWERS,
                         ids=[f"{c.__name__}-{i}" for i, (c, _, _) in enumerate(WRONG_ANSWERS)])
def test_check_names_the_mistake_of_a_typical_wrong_answer(check, wrong, message):
    with pytest.raises(ExerciseFailed, match=message):
        check(wrong)
