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
    (_linformer(weights_out=False), r"should return a pair \(output, weights\)"),
    (_linformer(scale=lambda q, E: math.sqrt(5)),
     r"(?s)mismatch in the output.*Hint: the same function passed with \(batch=2, n=9, k=3, d_k=5, d_v=6\)"),
    (lambda q, k, v, E, F: (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(-1) @ v,
     r"should return a pair \(output, weights\)"),
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

# ---------------------------------------------------------------- the classes of wrong answer every check meets
# (numerical range, shapes the signature allows, dtype, state, edge values)

_POSITIONS = torch.arange(512)  # a table made for the notebook's lengths
_MASK = torch.zeros(2048, 2048, dtype=torch.bool)  # a buffer every call fills


def band_from_a_table_of_514_positions(n, b):
    block = _POSITIONS[:n] // b
    offset = block[:, None] - block[None, :]
    return (offset == 0) | (offset == 1)


def band_in_a_global_buffer(n, b):
    block = torch.arange(n) // b
    offset = block[:, None] - block[None, :]
    _MASK[:n, :n] = (offset == 0) | (offset == 1)
    return _MASK[:n, :n]


def band_of_floor_n_over_b_blocks(n, b):
    blocks = n // b  # the last, shorter block (and n < b) forgotten
    band = torch.eye(blocks, dtype=torch.long) + torch.diag(torch.ones(max(blocks - 1, 0), dtype=torch.long), -1)
    mask = torch.zeros(n, n, dtype=torch.bool)
    mask[: blocks * b, : blocks * b] = torch.kron(band, torch.ones(b, b, dtype=torch.long)).bool()
    return mask


def band_by_kron(n, b):  # right: blocks of ones, cut to n
    blocks = -(-n // b)
    band = torch.eye(blocks, dtype=torch.long) + torch.diag(torch.ones(blocks - 1, dtype=torch.long), -1)
    return torch.kron(band, torch.ones(b, b, dtype=torch.long))[:n, :n].bool()


def band_by_loops(n, b):  # right: row by row, slices of the key axis
    mask = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        mask[i, max(0, (i // b - 1) * b): min(n, (i // b + 1) * b)] = True
    return mask


def _linformer_softmax(softmax):
    def linformer_attention(query, key, value, E, F):
        scores = query @ (E @ key).transpose(-2, -1) / math.sqrt(query.size(-1))
        weights = softmax(scores)
        return weights @ (F @ value), weights
    return linformer_attention


def _exp_over_sum(scores):
    e = scores.exp()
    return e / e.sum(-1, keepdim=True)


linformer_without_the_max_shift = _linformer_softmax(_exp_over_sum)
linformer_shifting_only_large_scores = _linformer_softmax(
    lambda s: _exp_over_sum(s - s.amax(-1, keepdim=True) if s.max() > 80 else s))
linformer_with_a_float32_softmax = _linformer_softmax(lambda s: s.softmax(-1, dtype=torch.float32))
linformer_with_the_max_shift = _linformer_softmax(lambda s: _exp_over_sum(s - s.amax(-1, keepdim=True)))  # right


def linformer_for_safety_in_float32(query, key, value, E, F):
    return _linformer()(query.float(), key.float(), value.float(), E.float(), F.float())


def linformer_transposing_1_and_2(query, key, value, E, F):
    weights = (query @ (E @ key).transpose(1, 2) / math.sqrt(query.size(-1))).softmax(-1)
    return weights @ (F @ value), weights


def linformer_by_einsum_of_three_dimensions(query, key, value, E, F):
    weights = (torch.einsum("bqd,kn,bnd->bqk", query, E, key) / math.sqrt(query.size(-1))).softmax(-1)
    return torch.einsum("bqk,kn,bnd->bqd", weights, F, value), weights


def linformer_by_einsum(query, key, value, E, F):  # right: any dimensions in front
    weights = (torch.einsum("...qd,kn,...nd->...qk", query, E, key) / math.sqrt(query.size(-1))).softmax(-1)
    return torch.einsum("...qk,kn,...nd->...qd", weights, F, value), weights


def linformer_squeezed(query, key, value, E, F):
    return _linformer()(query.squeeze(), key.squeeze(), value.squeeze(), E, F)


@torch.no_grad()
def linformer_without_gradients(query, key, value, E, F):
    return linformer_attention(query, key, value, E, F)


def linformer_with_fixed_projections(query, key, value, E, F):
    return linformer_attention(query, key, value, E.detach(), F.detach())


_OUTPUTS = {}


def linformer_into_a_global_buffer(query, key, value, E, F):
    out, weights = linformer_attention(query, key, value, E, F)
    buffer = _OUTPUTS.setdefault((out.shape, out.dtype), torch.empty_like(out))
    return buffer.copy_(out), weights


def linformer_by_the_courses_attention(query, key, value, E, F):  # right
    from annotated.attention import scaled_dot_product_attention
    return scaled_dot_product_attention(query, E @ key, F @ value)


def _shares(weights):
    s2 = torch.linalg.svdvals(weights.double()) ** 2
    return s2.cumsum(-1) / s2.sum(-1, keepdim=True)


def rank_without_the_slack(weights, energy):
    return (_shares(weights) < energy).sum(-1) + 1


def rank_by_searchsorted(weights, energy):
    kept = _shares(weights)
    goal = torch.full((*kept.shape[:-1], 1), energy, dtype=kept.dtype)
    return torch.searchsorted(kept.contiguous(), goal).squeeze(-1) + 1


def rank_by_argmax_without_the_slack(weights, energy):
    return (_shares(weights) >= energy).long().argmax(-1) + 1


def rank_in_float32(weights, energy):
    s2 = torch.linalg.svdvals(weights.float()) ** 2
    return (s2.cumsum(-1) / s2.sum(-1, keepdim=True) < energy - 1e-9).sum(-1) + 1


def rank_with_a_slack_of_1e_7(weights, energy):
    return (_shares(weights) < energy - 1e-7).sum(-1) + 1


def rank_refusing_energy_1(weights, energy):
    if not 0 < energy < 1:
        raise ValueError("energy must be a share below 1")
    return (_shares(weights) < energy - 1e-9).sum(-1) + 1


def rank_squeezed(weights, energy):
    return ((_shares(weights) < energy - 1e-9).sum(-1) + 1).squeeze()


def rank_by_argmax(weights, energy):  # right: the first share that reaches the goal, with the slack
    return (_shares(weights) >= energy - 1e-9).long().argmax(-1) + 1


def rank_by_eigenvalues(weights, energy):  # right: squared singular values are eigenvalues of W W^T
    w = weights.double()
    s2 = torch.linalg.eigvalsh(w @ w.transpose(-2, -1)).flip(-1).clamp_min(0)
    return (s2.cumsum(-1) / s2.sum(-1, keepdim=True) < energy - 1e-9).sum(-1) + 1


def rank_by_loops(weights, energy):  # right: one matrix and one rank at a time
    ranks = []
    for matrix in weights:
        s2 = (torch.linalg.svdvals(matrix.double()) ** 2).tolist()
        kept, rank = 0.0, 0
        while kept / sum(s2) < energy - 1e-9:
            kept, rank = kept + s2[rank], rank + 1
        ranks.append(max(rank, 1))
    return torch.tensor(ranks)


CLASS_WRONG_ANSWERS = [
    # sizes beyond a table made for the notebook's lengths; a buffer reused by every call
    (check_block_band_mask, band_from_a_table_of_514_positions,
     r"(?s)expected \(1030, 1030\), got \(512, 512\).*no table of positions made in advance"),
    (check_block_band_mask, band_in_a_global_buffer, r"a second call of band_in_a_global_buffer, on other inputs, changed"),
    # sizes not a multiple of the block, n < b, n = 1
    (check_block_band_mask, band_of_floor_n_over_b_blocks, r"mismatch in band_of_floor_n_over_b_blocks\(n=10, b=3\)"),
    # numerical range: very large and very negative scores
    (check_linformer_attention, linformer_without_the_max_shift, r"scores are large here.*overflows to inf in torch\.float32"),
    (check_linformer_attention, linformer_shifting_only_large_scores,
     r"all very negative here.*underflows to 0 in torch\.float32.*not only when the scores are large"),
    # dtype: float64 inputs
    (check_linformer_attention, linformer_with_a_float32_softmax,
     r"(?s)expected scalar type.*the inputs here are torch\.float64"),
    (check_linformer_attention, linformer_for_safety_in_float32, r"as torch\.float32 for torch\.float64 inputs"),
    # shapes: heads in front, a batch of one
    (check_linformer_attention, linformer_transposing_1_and_2, r"(?s)heads in front.*transpose\(-2, -1\)"),
    (check_linformer_attention, linformer_by_einsum_of_three_dimensions, r"(?s)einsum.*heads in front"),
    (check_linformer_attention, linformer_squeezed,
     r"the output of linformer_squeezed.*expected \(1, 7, 3\), got \(7, 3\)\. Your result lost dimensions of size 1"),
    # state: gradients through a layer whose E and F are learned
    (check_linformer_attention, linformer_without_gradients, r"without a gradient.*@torch\.no_grad\(\)"),
    (check_linformer_attention, linformer_with_fixed_projections, r"no gradient reaches E"),
    (check_linformer_attention, linformer_into_a_global_buffer,
     r"a second call of linformer_into_a_global_buffer, on other inputs, changed"),
    # edge values: energy = 1.0, with the rounding of the shares
    (check_rank_for_energy, rank_without_the_slack, r"a rank of an 7 x 7 matrix lies between 1 and 7.*energy - 1e-9"),
    (check_rank_for_energy, rank_by_searchsorted, r"lies between 1 and 7"),
    (check_rank_for_energy, rank_by_argmax_without_the_slack, r"(?s)energy=1\.0\).*energy - 1e-9"),
    (check_rank_for_energy, rank_refusing_energy_1, r"(?s)energy must be a share.*any energy in \(0, 1\]"),
    # float64: a nearly uniform matrix whose last ranks hold 1e-8 of the energy
    (check_rank_for_energy, rank_in_float32, r"nearly uniform.*float32"),
    (check_rank_for_energy, rank_with_a_slack_of_1e_7, r"nearly uniform.*a slack larger than 1e-9"),
    # shapes: a batch of one
    (check_rank_for_energy, rank_squeezed, r"expected \(1,\), got \(\)\. A batch of one"),
]


@pytest.mark.parametrize("check, wrong, message", CLASS_WRONG_ANSWERS, ids=[w.__name__ for _, w, _ in CLASS_WRONG_ANSWERS])
def test_check_rejects_a_wrong_answer_of_each_class(check, wrong, message, capsys):
    with pytest.raises(ExerciseFailed, match=message):
        check(wrong)


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
    (check_block_band_mask, band_by_kron),
    (check_block_band_mask, band_by_loops),
    (check_linformer_attention, linformer_with_the_max_shift),
    (check_linformer_attention, linformer_by_einsum),
    (check_linformer_attention, linformer_by_the_courses_attention),
    (check_rank_for_energy, rank_by_argmax),
    (check_rank_for_energy, rank_by_eigenvalues),
    (check_rank_for_energy, rank_by_loops),
], ids=["band-course", "band-isin", "linformer-course", "linformer-by-hand", "rank-course", "rank-by-hand",
        "band-kron", "band-loops", "linformer-max-shift", "linformer-einsum", "linformer-course-attention",
        "rank-argmax", "rank-eigenvalues", "rank-loops"])
def test_check_passes_on_the_course_code_and_on_other_right_answers(check, fn, capsys):
    check(fn)
    out = capsys.readouterr().out
    assert out.startswith(f"{check.__name__} passed: ") and out.count("\n") == 1


@pytest.mark.parametrize("check, wrong, message", WRONG_ANSWERS,
                         ids=[f"{c.__name__}-{i}" for i, (c, _, _) in enumerate(WRONG_ANSWERS)])
def test_check_names_the_mistake_of_a_typical_wrong_answer(check, wrong, message):
    with pytest.raises(ExerciseFailed, match=message):
        check(wrong)
