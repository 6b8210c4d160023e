"""Checks of notebook 13's exercises (``engine``): local attention's band-of-blocks mask, Linformer's attention
over projected keys and values, and the rank that keeps a share of a matrix's energy."""

import math
import operator
from collections.abc import Callable

import torch

from annotated.linformer import linformer_attention, rank_for_energy
from annotated.local_attention import block_band_mask
from annotated.support.grading.core import _hard_coded_hint
from annotated.support.grading.engine import Declaration, Items, Mistake, Probe, Tensor, check

# b dividing n and not, n beyond a table made for 1,024 positions; then the edges n = 1, b = 1, b > n.
BAND_SIZES = [dict(n=10, b=3), dict(n=16, b=5), dict(n=9, b=2), dict(n=1030, b=7)]
BAND_EDGES = [dict(n=1, b=4), dict(n=7, b=1), dict(n=6, b=8)]
# Heads in front (h) in the last set: (batch, h, n, d_k) as in a model's attention.
LINFORMER_SIZES = [dict(batch=2, n=9, k=3, d_k=5, d_v=6), dict(batch=3, n=12, k=4, d_k=8, d_v=7),
                   dict(batch=1, n=7, k=2, d_k=6, d_v=3), dict(batch=4, h=3, n=11, k=5, d_k=10, d_v=9)]
# Shares the identity reaches exactly (9/10, 6/8, 3/5, 3/6) show a <= for <; energy = 1.0 in float64, whose nearly
# uniform matrix keeps 1e-8 of its energy in each last rank; then a batch of one.
RANK_SIZES = [dict(batch=3, L=10, energy=0.9), dict(batch=2, L=8, energy=0.75), dict(batch=4, L=5, energy=0.6),
              dict(batch=5, L=7, energy=1.0)]
RANK_EDGES = [dict(batch=1, L=6, energy=0.5)]
SIZE_SETS = {"check_block_band_mask": BAND_SIZES, "check_linformer_attention": LINFORMER_SIZES,
             "check_rank_for_energy": RANK_SIZES}


def _band(offsets: tuple, step: int = 0) -> Callable:
    """A band of blocks of b + step positions: True where query block - key block is in ``offsets``."""
    def band(n: int, b: int) -> torch.Tensor:
        block = torch.arange(n) // (b + step)
        return torch.isin(block.unsqueeze(1) - block.unsqueeze(0), torch.tensor(offsets))
    return band


BAND = Declaration(
    check="check_block_band_mask", function="block_band_mask", roles=("n", "b"), reference=block_band_mask,
    probes=lambda device: [Probe((s["n"], s["b"]), f"{{name}}(n={s['n']}, b={s['b']})",
                                 sizes=s if s in BAND_SIZES else None) for s in BAND_SIZES + BAND_EDGES]
    + [Probe((12, 4), "{name}(n=12, b=4)", again=(12, 3))],
    sizes_fix=("Read n and b from the arguments, and build the mask for this n (no table of "
               "positions made in advance for some largest length)."),
    returns=Tensor("the mask", dtype="bool", like=None, kind="a bool", dtype_message=lambda found, name, what, a: (
        f"{name}(n={a[0]}, b={a[1]}) returned {what} as a torch.{found['dtype']} tensor; the course's masks are "
        "bool, True = may attend (notebook 03): compare, e.g. (offset == 0) | (offset == 1).")),
    mistakes=(
        Mistake("each query sees its own block only; Image Transformer's memory block adds the block before it: "
                "query block - key block in {0, 1}.", "its own block only", like=_band((0,))),
        Mistake("each query sees its block and the block after it; the memory block is the one before: key block = "
                "query block - 1, not + 1 (rows are queries, columns keys).", "the block after", like=_band((0, -1))),
        Mistake("each query sees the blocks on both sides; the memory block is only the one before.",
                "blocks on both sides", like=_band((-1, 0, 1))),
        Mistake("your mask hides the future inside the memory block: that is causal=True; the exercise asks for the "
                "plain band, every key of both blocks.", "the causal band",
                like=lambda n, b: block_band_mask(n, b).tril()),
        *(Mistake(f"your band is a window of positions |i - j| {op} b around each query; blocks are fixed groups of b "
                  "positions, block = position // b.", f"a window {op} b",
                  like=lambda n, b, f=f: f((torch.arange(n)[:, None] - torch.arange(n)[None, :]).abs(), b))
          for op, f in (("<", operator.lt), ("<=", operator.le))),
        Mistake(lambda p: f"your blocks hold b + 1 = {p.args[1] + 1} positions: block = position // b.",
                "blocks of b + 1", like=_band((0, 1), step=1)),
    ),
    passed=lambda name: (f"check_block_band_mask passed: {name} equals the course's band of blocks for "
                         + ", ".join(f"(n={s['n']}, b={s['b']})" for s in BAND_SIZES + BAND_EDGES) + "."),
)


def check_block_band_mask(block_band_mask_fn: Callable) -> None:
    """Check ``block_band_mask(n, b)``: (n, n) bool, True where key j's block is query i's or the one before.

    Diagnoses: not a bool tensor, the wrong shape, its own block only, the block after, blocks on both sides, the causal
    mask, a window of positions instead of blocks, blocks of b + 1, sizes written into the code or a table made for a
    largest length, a result that a second call overwrites (a global buffer)."""
    check(BAND, block_band_mask_fn)


def _linformer(scale: Callable | None = None, dim: int = -1, swap: bool = False, values: str = "F") -> Callable:
    """Linformer with one mistake: ``scale`` (q, E) -> the divisor, ``dim`` the softmax's, E and F swapped, the
    values projected with E."""
    def linformer(q, k, v, E, F_):
        E, F_ = (F_, E) if swap else (E, F_)
        divisor = scale(q, E) if scale else math.sqrt(q.size(-1))
        weights = (q @ (E @ k).transpose(-2, -1) / divisor).softmax(dim=dim)
        return weights @ ((E if values == "E" else F_) @ v), weights
    return linformer


def _linformer_probes(device: str | None) -> list[Probe]:
    """``LINFORMER_SIZES``; scores far above and below 0 (``tags["overflow"]``: what NaN or inf in the weights there
    means); gradients (E and F are learned); a second call; and E = F = I with k = n (attention itself)."""
    g = torch.Generator().manual_seed(11)

    def probe(args: tuple, where: str = "", **options) -> Probe:
        q, key, v, E = args[:4]
        kind = "" if q.dtype == torch.float32 else f", {q.dtype}"
        return Probe(args, f"{{what}} of {{name}}(query {tuple(q.shape)}, key {tuple(key.shape)}, value "
                     f"{tuple(v.shape)}, E, F of {tuple(E.shape)}{kind}){where}", **options)

    def args(batch, n, k, d_k, d_v, h=None):
        lead = (batch,) if h is None else (batch, h)
        shapes = ((*lead, n, d_k), (*lead, n, d_k), (*lead, n, d_v), (k, n), (k, n))
        return tuple(torch.randn(*shape, generator=g) for shape in shapes)

    def far(dtype: torch.dtype, sign: int) -> tuple:
        """Scores all beyond what exp takes in ``dtype``, exact in any order of the products: small integers,
        d_k = 4, E of three ones per row, a last feature that adds one large number (batch 2, n 8, k 3, d_v 5)."""
        big = sign * (140 if dtype == torch.float32 else 600)  # scores = (small integer + 3 big) / 2
        q = torch.cat([torch.randint(-2, 3, (2, 8, 3), generator=g), torch.full((2, 8, 1), big)], -1)
        key = torch.cat([torch.randint(-2, 3, (2, 8, 3), generator=g), torch.ones(2, 8, 1, dtype=torch.long)], -1)
        E = torch.zeros(3, 8, dtype=dtype)
        for row in range(3):
            E[row, torch.randperm(8, generator=g)[:3]] = 1.0
        F_ = torch.randn(3, 8, generator=g, dtype=dtype)
        return q.to(dtype), key.to(dtype), torch.randn(2, 8, 5, generator=g, dtype=dtype), E, F_

    probes = [probe(args(**sizes), sizes=sizes) for sizes in LINFORMER_SIZES]
    fix = "Subtract each row's maximum before exp, for every input (softmax(dim=-1) does it)"
    for dtype, limit in ((torch.float32, 88.7), (torch.float64, 709.8)):
        hints = ((r"expected (m1 and m2|both arguments|scalar type)|same dtype", "\nHint: the inputs here are "
                  "torch.float64: keep every step in the inputs' dtype (no .float(), no dtype=torch.float32 in "
                  "softmax or in a tensor you create)."),) * (dtype == torch.float64)
        probes += [probe(far(dtype, 1), " with large scores", hints=hints, tags=dict(overflow=(
                       f"the scores are large here (every one above +{limit:.0f}), and your weights contain NaN or "
                       f"inf: exp(s) overflows to inf in {dtype} above {limit}, and inf / inf is NaN. {fix}."))),
                   probe(far(dtype, -1), " with very negative scores", hints=hints, tags=dict(overflow=(
                       f"the scores are all very negative here (every one below -{limit:.0f}), and your weights "
                       f"contain NaN or inf: exp(s) underflows to 0 in {dtype}, and 0 / 0 is NaN. {fix}, not only "
                       "when the scores are large.")))]
    probes.append(probe(args(**LINFORMER_SIZES[0]), " with inputs that require grad", grad=(0, 1, 2, 3, 4)))
    first, second = far(torch.float32, 1), far(torch.float32, 1)
    q, eye = torch.randn(2, 6, 8, generator=g), torch.eye(6)
    return probes + [Probe(first, "{what}", again=second),
                     Probe((q, q, q, eye, eye), "{what} of {name} with k = n and E = F = I")]


def _exp_over_sum(q, k, v, E, F_):
    e = (q @ (E @ k).transpose(-2, -1) / math.sqrt(q.size(-1))).exp()
    return e / e.sum(-1, keepdim=True) @ (F_ @ v), e / e.sum(-1, keepdim=True)


LINFORMER = Declaration(
    check="check_linformer_attention", function="linformer_attention", roles=("query", "key", "value", "E", "F"),
    reference=linformer_attention, probes=_linformer_probes, sizes_fix=lambda passed, sizes, message: (
        f"\nHint: the same function passed with inputs (batch, n, d_k) but not with heads in front, (batch, "
        f"h={sizes['h']}, n, d_k): count dimensions from the end, transpose(-2, -1) rather than transpose(1, 2); "
        "E @ key works with any dimensions in front (an einsum written for three does not)." if "h" in sizes
        else _hard_coded_hint(passed, sizes, message, "Read the sizes from the tensors' shapes.")),
    returns=Items((Tensor("the output"), Tensor("the weights")),
                  what="a pair (output, weights), as scaled_dot_product_attention does", again_what="the output"),
    mistakes=(
        Mistake("", "the weights n x n", stage="shape", item=1, example=lambda q, k, v, E, F_: (
                    linformer_attention(q, k, v, E, F_)[0], (q @ k.transpose(-2, -1)).softmax(-1)),
                find=lambda found, p: (" The weights are n x k: each query against the k projected keys."
                                       if found["shape"][-1] == p.args[3].size(1) else None)),
        Mistake("", "a softmax without its max shift", item=1, example=_exp_over_sum, find=lambda found, p: p.tags.get(
            "overflow") if found["values"] is not None and not found["values"].isfinite().all() else None),
        Mistake("E and F are swapped: E projects the keys, F the values.", "E and F swapped", items=(0,),
                like=_linformer(swap=True)),
        Mistake("the scores are not divided by sqrt(d_k) (§3.2.1).", "no scaling", items=(0,),
                like=_linformer(scale=lambda q, E: 1.0)),
        Mistake(lambda p: (f"the scores are divided by sqrt(k) = {math.sqrt(p.args[3].size(0)):.3f}; the scale is "
                           f"sqrt(d_k) = {math.sqrt(p.args[0].size(-1)):.3f}, the width of a query, whatever the "
                           "number of projected rows."), "scaled by sqrt(k)", items=(0,),
                like=_linformer(scale=lambda q, E: math.sqrt(E.size(0)))),
        Mistake("the softmax runs over the queries (dim=-2); each query's weights over the k projected keys must sum "
                "to 1: softmax(dim=-1).", "the softmax over the queries", items=(0,), like=_linformer(dim=-2)),
        Mistake("the values are projected with E; Linformer gives them their own F.", "the values projected with E",
                items=(0,), like=_linformer(values="E")),
        Mistake("the output is right but the weights are not: return the softmax weights, (..., n, k), whose rows "
                "sum to 1.", "the weights wrong", items=(0,), like=linformer_attention,
                example=lambda *args: (linformer_attention(*args)[0], 2 * linformer_attention(*args)[1])),
    ),
    passed=lambda name: (f"check_linformer_attention passed: {name} equals the course's linformer_attention on "
                         f"{len(LINFORMER_SIZES)} sizes (heads in front among them) and on scores far above and below "
                         "0 in float32 and float64, and attention itself (F.scaled_dot_product_attention) with "
                         "E = F = I."),
)


def check_linformer_attention(linformer_attention_fn: Callable) -> None:
    """Check ``linformer_attention(query, key, value, E, F)``: softmax(Q (EK)^T / sqrt(d_k)) (FV) and its (..., n, k)
    weights.

    Diagnoses: not a pair, wrong shapes, a batch of one squeezed away, E and F swapped, no scaling, scaling by sqrt(k),
    the softmax over the queries, the values projected with E, weights not returned, dimensions counted from the front
    (heads in front), a softmax without the max shift (large scores) or with it only when scores are large (very
    negative scores), a result of another dtype (float64 inputs), gradients cut (@torch.no_grad(), .detach()), a result
    that a second call overwrites, sizes written into the code."""
    check(LINFORMER, linformer_attention_fn)


def _rank(weights, energy, square=True, plus_one=True, strict=True):
    s = torch.linalg.svdvals(weights.double()) ** (2 if square else 1)
    kept = s.cumsum(-1) / s.sum(-1, keepdim=True)
    return ((kept < energy - 1e-9) if strict else (kept <= energy + 1e-9)).sum(-1) + (1 if plus_one else 0)


def _rank_probes(device: str | None) -> list[Probe]:
    """The identity, nearly uniform, uniform and random softmax matrices of each set of sizes (energy = 1.0 on
    float64 matrices). ``tags``: the call, as messages name it, and what energy = 1.0 asks of the comparison."""
    g, probes = torch.Generator().manual_seed(12), []
    for sizes in RANK_SIZES + RANK_EDGES:
        batch, L, energy = sizes["batch"], sizes["L"], sizes["energy"]
        dtype = torch.float64 if energy == 1.0 else torch.float32
        weights = (3 * torch.randn(batch, L, L, generator=g, dtype=dtype)).softmax(-1)
        weights[0] = torch.eye(L)  # the identity: every direction holds 1/L of the energy
        uniform = torch.full((L, L), 1.0 / L, dtype=dtype)
        if batch > 2:  # nearly uniform: L - 1 directions of singular value 1e-4 each (1e-8 of the energy)
            weights[1] = (1 - 1e-4) * uniform + 1e-4 * torch.eye(L, dtype=dtype)
        weights[-1] = uniform if batch > 1 else weights[-1]  # uniform: rank 1
        call = f"(weights {tuple(weights.shape)}{', float64' * (dtype == torch.float64)}, energy={energy})"
        hints = ((r"", "\nenergy = 1.0 (all of the energy) is a goal the exercise allows: any energy in (0, 1]."),)
        rounding = (" The share kept by all the ranks is 1 only up to rounding (it can come out as "
                    "0.9999999999999999): compare with energy - 1e-9, as the exercise says, so that energy = 1.0 is "
                    "reached.")
        probes.append(Probe((weights, energy), "{what} of {name}" + call, sizes=sizes if sizes in RANK_SIZES else None,
                            hints=hints * (energy == 1.0),
                            tags=dict(call="rank_for_energy" + call, rounding=rounding * (energy == 1.0))))
    return probes


def _out_of_range(found: dict, p: Probe) -> str | None:
    got, L = found["values"].long(), p.args[0].shape[-1]
    if bool((got > L).any()) or bool((got < 1).any()):
        return f"{p.tags['call']} gives ranks {got.tolist()}: a rank of an {L} x {L} matrix lies between 1 and {L}." \
               + p.tags["rounding"]
    return None


def _nearly_uniform(found: dict, p: Probe) -> str | None:
    got, expected, L = found["values"].long(), rank_for_energy(*p.args), p.args[0].shape[-1]
    if len(got) > 2 and int(got[1]) != int(expected[1]) and bool((got == expected)[2:].all()):
        return (f"{p.tags['call']} gives ranks {got.tolist()}, the course's rank_for_energy {expected.tolist()}: "
                f"matrix 1 is nearly uniform, 0.9999 / {L} everywhere plus 1e-4 on the diagonal; its last {L - 1} "
                "ranks hold 1e-8 of its energy each, which float32 (about 7 digits) rounds away, and so does a slack "
                "larger than 1e-9. Compute the singular values in float64 (weights.double()) and compare the shares "
                "with energy - 1e-9.")
    return None


RANK = Declaration(
    check="check_rank_for_energy", function="rank_for_energy", roles=("weights", "energy"),
    reference=rank_for_energy, probes=_rank_probes,
    sizes_fix="Read the sizes from weights.shape and use the energy you are given.",
    returns=Tensor("the ranks", dtype="ids", like=None, dtypes=("integer",), kind="an integer",
                   dtype_message=lambda found, name, what, args: (
                       f"{name}(weights {tuple(args[0].shape)}, energy={args[1]}) is a torch.{found['dtype']} tensor; "
                       "a rank is an integer: count with .sum(-1).")),
    mistakes=(
        Mistake("", "one rank per matrix", stage="shape", example=lambda w, e: rank_for_energy(w, e).max(),
                find=lambda found, p: "A batch of one: the batch dimension is gone (a .squeeze() drops every "
                "dimension of size 1); keep it." if p.args[0].shape[0] == 1 and found["shape"] == []
                else "One rank per matrix: reduce over dim=-1."),
        Mistake("you accumulated the singular values themselves; the energy is the sum of their squares: square "
                "them first.", "singular values not squared", like=lambda w, e: _rank(w, e, square=False)),
        Mistake("your rank is one too small: the count of ranks still short of the goal, plus one, is the first rank "
                "that reaches it.", "off by one", like=lambda w, e: _rank(w, e, plus_one=False)),
        Mistake("a rank whose share equals the goal already reaches it: count the shares < energy, not <= energy.",
                "<= for <", like=lambda w, e: _rank(w, e, strict=False)),
        Mistake("every rank is the full L: the share kept must be compared with energy.", "the full rank",
                like=lambda w, e: torch.full((w.shape[0],), w.shape[-1])),
        Mistake("", "a rank out of range", find=_out_of_range, generic=True,
                example=lambda w, e: rank_for_energy(w, e) + w.shape[-1]),
        Mistake("", "float32 shares", find=_nearly_uniform,
                example=lambda w, e: _rank(w, e - 1e-7)),  # a slack above 1e-9, as float32's rounding
        Mistake("", "other ranks", generic=True, example=lambda w, e: rank_for_energy(w, e).clamp(max=2),
                find=lambda found, p: (
                    f"{p.tags['call']} gives ranks {found['values'].tolist()}, the course's rank_for_energy "
                    f"{rank_for_energy(*p.args).tolist()}; the identity (matrix 0) needs ceil(energy * L) = "
                    f"{math.ceil(p.args[1] * p.args[0].shape[-1] - 1e-9)}.{p.tags['rounding']}")),
    ),
    passed=lambda name: (
        f"check_rank_for_energy passed: {name} equals the course's rank_for_energy on {len(RANK_SIZES + RANK_EDGES)} "
        "batches of attention matrices, the identity, uniform and nearly uniform attention among them, "
        "energy = 1.0 included."),
)


def check_rank_for_energy(rank_for_energy_fn: Callable) -> None:
    """Check ``rank_for_energy(weights, energy)``: per matrix, the smallest rank keeping ``energy`` of the squared
    singular values.

    Diagnoses: not a tensor, one rank for all, a batch of one squeezed away, floats, singular values not squared, off by
    one, <= for <, the full rank whatever the energy, a rank beyond 1 .. L (energy = 1.0 compared without the slack),
    shares in float32 or with a slack above 1e-9 (a nearly uniform matrix), energy = 1.0 refused, sizes written into the
    code."""
    check(RANK, rank_for_energy_fn)


DECLARATIONS = {d.check: d for d in (BAND, LINFORMER, RANK)}
