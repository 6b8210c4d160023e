"""Checks of notebook 04 as declarations (``engine``): the head split and merge of
``annotated.multi_head.MultiHeadAttention``, its whole forward pass with the paper's matrices given, and each
head's share of the output through its rows of W^O."""

import math
from collections.abc import Callable

import torch
from torch.func import functional_call

from annotated.multi_head import MultiHeadAttention
from annotated.support.grading.engine import Declaration, Mistake, Probe, Tensor, check

# A batch of one (a .squeeze() drops its axis) and a float64 set (a tensor created without dtype= is float32).
HEAD_SIZES = [dict(batch=2, L=3, h=5, d_k=6), dict(batch=4, L=7, h=2, d_k=3),
              dict(batch=1, L=5, h=3, d_k=2), dict(batch=3, L=1, h=4, d_k=7, dtype="float64")]
# Cross-attention, L_q != L_k, and batch != h: a mask without its head axis fails to broadcast.
MULTI_HEAD_SIZES = [dict(batch=2, L_q=3, L_k=5, h=4, d_k=6), dict(batch=4, L_q=6, L_k=2, h=3, d_k=5),
                    dict(batch=1, L_q=4, L_k=7, h=2, d_k=3)]
# The third: a batch of one and a W^O of (h * d_k, d_model) = (8, 9), not square; the fourth float64, d_k = 1.
CONTRIBUTION_SIZES = [dict(batch=3, L=4, h=2, d_k=5), dict(batch=2, L=6, h=3, d_k=7),
                      dict(batch=1, L=3, h=4, d_k=2, d_model=9),
                      dict(batch=4, L=2, h=5, d_k=1, dtype="float64")]
SIZE_SETS = {"check_split_heads": HEAD_SIZES, "check_merge_heads": HEAD_SIZES,
             "check_multi_head_attention": MULTI_HEAD_SIZES,
             "check_head_contributions": CONTRIBUTION_SIZES}


def _dtype(sizes: dict) -> torch.dtype:
    return {"float64": torch.float64}.get(sizes.get("dtype"), torch.float32)


def _of(dtype: torch.dtype) -> str:
    return "" if dtype == torch.float32 else f", {str(dtype).replace('torch.', '')}"


# An exception of a float64 pass that comes from mixing dtypes: where to look.
_DTYPE_ERROR = r"same dtype|expected scalar type|dtype|Double|Float"
_DTYPE_HINT = ("\nHint: the inputs here are float64. A tensor you create without dtype= (torch.zeros, torch.tensor "
               "of Python floats) is float32: create it with dtype=x.dtype (or torch.zeros_like(x)), and drop any "
               ".float().")


def _hints(dtype: torch.dtype) -> tuple:
    return ((_DTYPE_ERROR, _DTYPE_HINT),) if dtype != torch.float32 else ()


_HEADS_FIX = ("Read the sizes from the input (batch, L, d_model = x.shape, or batch, h, L, d_k = x.shape) "
              "and use the h you are given.")


# ---------------------------------------------------------------- 4.1 the split


def course_split(x: torch.Tensor, h: int) -> torch.Tensor:
    """(batch, L, d_model) -> (batch, h, L, d_k): MultiHeadAttention.split_heads."""
    batch, length, d_model = x.shape
    return x.view(batch, length, h, d_model // h).transpose(1, 2)


def _split_probes(device: str | None) -> list[Probe]:
    probes = []
    for sizes in HEAD_SIZES:
        batch, L, h, d_k = sizes["batch"], sizes["L"], sizes["h"], sizes["d_k"]
        dtype = _dtype(sizes)
        x = torch.arange(batch * L * h * d_k, dtype=dtype).view(batch, L, h * d_k)  # any regrouping shows
        probes.append(Probe((x, h), f"{{name}}(x of shape (batch={batch}, L={L}, d_model={h * d_k}){_of(dtype)}, "
                                    f"h={h})", sizes=sizes, hints=_hints(dtype), tags=dict(sizes)))
    x = torch.randn(2, 3, 8, generator=torch.Generator().manual_seed(0))  # in training, and twice
    return probes + [Probe((x, 2), "{name}(x of shape (batch=2, L=3, d_model=8), h=2)", grad=(0,), again=(x + 1, 2),
                           tags=dict(batch=2, L=3, h=2, d_k=4))]


SPLIT = Declaration(
    check="check_split_heads", function="split_heads", roles=("x", "h"), reference=course_split,
    probes=_split_probes, returns=Tensor("the split tensor"), sizes_fix=_HEADS_FIX,
    mistakes=(
        Mistake("You have (batch, L, h, d_k): the heads must come before the positions, so that attention runs "
                "over the L positions of each head; add .transpose(1, 2).", "the transpose missing", stage="shape",
                shape=lambda p: (p.tags["batch"], p.tags["L"], p.tags["h"], p.tags["d_k"]),
                example=lambda x, h: x.view(x.size(0), x.size(1), h, x.size(2) // h)),
        Mistake(lambda p: ("the shape is right but the numbers are grouped wrongly: view(batch, h, L, d_k) without a "
                           "transpose gives a head whole positions' vectors instead of its own d_k = "
                           f"{p.tags['d_k']} columns of every position. View as (batch, L, h, d_k) first, then "
                           ".transpose(1, 2)."), "a view to (batch, h, L, d_k) without a transpose",
                like=lambda x, h: x.reshape(x.size(0), h, x.size(1), x.size(2) // h)),
        Mistake("head i takes every h-th column (i, i + h, ...) instead of the block of d_k consecutive columns "
                "i*d_k .. (i+1)*d_k - 1: view as (batch, L, h, d_k), not (batch, L, d_k, h).", "every h-th column",
                like=lambda x, h: x.reshape(x.size(0), x.size(1), x.size(2) // h, h).permute(0, 3, 1, 2)),
    ),
    passed=("check_split_heads passed: head i of {name} holds columns i*d_k .. (i+1)*d_k - 1 of "
            f"every position, in shape (batch, h, L, d_k), for {len(HEAD_SIZES)} sets of sizes "
            "(a batch of one, float64), and lets gradients through."),
)


def check_split_heads(split_heads: Callable) -> None:
    """Check ``split_heads(x, h)``: (batch, L, d_model) -> (batch, h, L, d_k), on ``HEAD_SIZES``, then with
    gradients and twice.

    Diagnoses: an input changed in place, a result of another dtype (float64 made float32 by a .float() or a tensor
    created without dtype=) or device, the missing transpose, the view straight to (batch, h, L, d_k) (right shape,
    wrong grouping), heads that take every h-th column instead of a block, a dimension of size 1 dropped (a .squeeze()),
    no gradient (@torch.no_grad(), .detach(), .data), a result that a second call overwrites, and sizes written into the
    code."""
    check(SPLIT, split_heads)


# ---------------------------------------------------------------- 4.2 the merge


def course_merge(x: torch.Tensor) -> torch.Tensor:
    """(batch, h, L, d_k) -> (batch, L, h * d_k): MultiHeadAttention.merge_heads."""
    batch, h, length, d_k = x.shape
    return x.transpose(1, 2).reshape(batch, length, h * d_k)


def _merge_probes(device: str | None) -> list[Probe]:
    probes = []
    for sizes in HEAD_SIZES:
        batch, L, h, d_k = sizes["batch"], sizes["L"], sizes["h"], sizes["d_k"]
        dtype = _dtype(sizes)
        options = dict(sizes=sizes, hints=_hints(dtype), tags=dict(sizes))
        x = torch.arange(batch * h * L * d_k, dtype=dtype).view(batch, h, L, d_k)  # contiguous, as attention's
        probes.append(Probe((x,), f"{{name}}(x of shape (batch={batch}, h={h}, L={L}, d_k={d_k}){_of(dtype)})",
                            **options))
        y = torch.arange(batch * L * h * d_k, dtype=dtype).view(batch, L, h * d_k)  # a transposed view, as split's
        probes.append(Probe((course_split(y, h),), "the round trip {name}(split_heads(y)), which should give y back",
                            mistakes=False, **options))
    x = torch.randn(2, 3, 4, 5, generator=torch.Generator().manual_seed(0))  # in training, and twice
    return probes + [Probe((x,), "{name}(x of shape (batch=2, h=3, L=4, d_k=5))", grad=(0,), again=(x + 1,))]


MERGE = Declaration(
    check="check_merge_heads", function="merge_heads", roles=("x",), reference=course_merge,
    probes=_merge_probes, returns=Tensor("the merged tensor"), sizes_fix=_HEADS_FIX,
    mistakes=(
        Mistake("you merged without transposing back: reshape(batch, L, d_model) straight from (batch, h, L, d_k) "
                "mixes the positions. First .transpose(1, 2), then .reshape(batch, L, h * d_k).",
                "merged without transposing back",
                like=lambda x: x.reshape(x.size(0), x.size(2), x.size(1) * x.size(3))),
    ),
    passed=("check_merge_heads passed: {name} puts the h heads side by side, (batch, L, h * d_k), "
            f"and undoes the split, for {len(HEAD_SIZES)} sets of sizes (a batch of one, float64), "
            "and lets gradients through."),
)


def check_merge_heads(merge_heads: Callable) -> None:
    """Check ``merge_heads(x)``: (batch, h, L, d_k) -> (batch, L, h * d_k), the concatenation, on ``HEAD_SIZES``
    (and the round trip of a split), then with gradients and twice.

    Diagnoses: an input changed in place, a result of another dtype (float64 made float32 by a .float() or a tensor
    created without dtype=) or device, ``.view`` after the transpose (the tensor is not contiguous), the reshape without
    transposing back, a dimension of size 1 dropped (a .squeeze()), no gradient (@torch.no_grad(), .detach(), .data), a
    result that a second call overwrites, sizes written into the code, and a round trip that does not give back the
    input."""
    check(MERGE, merge_heads)


# ---------------------------------------------------------------- 4.3 the whole forward pass

_MHA_ROLES = ("query", "key", "value", "W_Q", "W_K", "W_V", "W_O", "h", "mask")
# A 3-D mask broadcast against 4-D scores (batch, h, L_q, L_k) without its head axis.
_BROADCAST_ERROR = r"must match the size of tensor|must match the existing size|doesn't match the broadcast shape|" \
                   r"not broadcastable"
_MASK_HEADS_HINT = ("\nHint: the mask is 3-D, (batch or 1, L_q or 1, L_k), and the heads' scores 4-D, (batch, h, L_q, "
                    "L_k): broadcasting lines the mask's batch axis up with the heads'. Give the mask an axis for the "
                    "heads, mask.unsqueeze(1), as MultiHeadAttention.forward does.")


def _course_module(weights: tuple, h: int) -> MultiHeadAttention:
    """The course's module holding the paper's matrices W (x @ W, in their dtype) and zero biases, on its
    explicit path (a query that sees nothing gets a zero output, as in notebook 02)."""
    with torch.random.fork_rng(devices=[]):  # its own initialization, overwritten below
        module = MultiHeadAttention(weights[0].size(0), h, fast=False).eval().to(weights[0].dtype)
    with torch.no_grad():
        for linear, W in zip((module.W_Q, module.W_K, module.W_V, module.W_O), weights):
            linear.weight.copy_(W.T)  # nn.Linear computes x @ weight.T + bias
            linear.bias.zero_()
    return module


def course_multi_head(query, key, value, W_Q, W_K, W_V, W_O, h, mask=None) -> torch.Tensor:
    """The course's MultiHeadAttention (its explicit path) called with the matrices as its parameters (weight =
    W.T) and zero biases: it keeps their dtype and lets gradients reach them."""
    with torch.random.fork_rng(devices=[]):  # its own initialization, replaced by the matrices
        module = MultiHeadAttention(W_Q.size(0), h, fast=False).eval()
    zero = torch.zeros(W_Q.size(0), dtype=query.dtype)
    params = {f"{layer}.{p}": t for layer, W in zip(("W_Q", "W_K", "W_V", "W_O"), (W_Q, W_K, W_V, W_O))
              for p, t in (("weight", W.T), ("bias", zero))}
    return functional_call(module, params, (query, key, value, mask))


def _multi_head_variant(query, key, value, weights: tuple, h: int, mask, scale: str = "sqrt_d_k",
                        split: str = "transpose", merge: str = "transpose", with_W_O: bool = True,
                        transposed: bool = False, inputs: str = "given", mask_mode: str = "heads",
                        fill: float = float("-inf"), zero_after: bool = True, dim: int = -1,
                        shift: bool = True) -> torch.Tensor:
    """Multi-head attention with one thing changed: the usual wrong answers, one per option (``shift`` False: a
    softmax written as exp(s) / sum(exp(s)), without the max shift)."""
    W_Q, W_K, W_V, W_O = (W.T if transposed else W for W in weights)
    if inputs == "query":  # key and value ignored: self-attention of the query
        key = value = query
    elif inputs == "key as value":
        value = key
    batch, d_model = query.size(0), query.size(-1)
    d_k = d_model // h

    def split_heads(x):  # "view": straight to (batch, h, L, d_k), no transpose
        return x.reshape(batch, h, -1, d_k) if split == "view" else x.reshape(batch, -1, h, d_k).transpose(1, 2)

    def merge_heads(x):  # "view": straight back to (batch, L, d_model), no transpose
        return x.reshape(batch, -1, d_model) if merge == "view" else x.transpose(1, 2).reshape(batch, -1, d_model)

    q, k, v = split_heads(query @ W_Q), split_heads(key @ W_K), split_heads(value @ W_V)
    divisor = {"sqrt_d_k": math.sqrt(d_k), "sqrt_d_model": math.sqrt(d_model), "none": 1.0, "d_k": float(d_k)}[scale]
    scores = q @ k.transpose(-2, -1) / divisor  # (batch, h, L_q, L_k)
    masked = mask is not None and mask_mode != "ignored"
    allowed = (~mask.unsqueeze(1) if mask_mode == "inverted" else mask.unsqueeze(1)) if masked else None
    scores = scores.masked_fill(~allowed, fill) if masked else scores
    plain = scores.exp() / scores.exp().sum(dim, keepdim=True)  # NaN far from zero (a row all masked: 0, as ours)
    attention = scores.softmax(dim=dim) if shift else plain.nan_to_num(0.0) if masked else plain
    if masked and zero_after:
        attention = attention.masked_fill(~allowed, 0.0)
    concat = merge_heads(attention @ v)  # (batch, L_q, d_model)
    return concat @ W_O if with_W_O else concat


def _variant(**options) -> Callable:
    """A wrong multi_head_attention, with the learner's signature."""
    def multi_head_attention(query, key, value, W_Q, W_K, W_V, W_O, h, mask=None):
        return _multi_head_variant(query, key, value, (W_Q, W_K, W_V, W_O), h, mask, **options)
    return multi_head_attention


def _padding(L_k: int, lengths: list) -> torch.Tensor:
    """(batch, 1, L_k): True at the first lengths[b] keys of sentence b."""
    return (torch.arange(L_k) < torch.tensor(lengths).unsqueeze(1)).unsqueeze(1)


def _weights(g: torch.Generator, d_model: int, dtype: torch.dtype = torch.float32) -> tuple:
    """The paper's matrices, (d_model, d_model), scaled so that the scores stay moderate."""
    return tuple(torch.randn(d_model, d_model, generator=g, dtype=dtype) / math.sqrt(d_model) for _ in range(4))


def _sized_probes(g: torch.Generator, sizes: dict) -> list[Probe]:
    batch, L_q, L_k, h, d_k = (sizes[k] for k in ("batch", "L_q", "L_k", "h", "d_k"))
    d_model = h * d_k
    weights = _weights(g, d_model)
    # query, key, value, and x for self-attention
    query, key, value, x = (torch.randn(batch, n, d_model, generator=g) for n in (L_q, L_k, L_k, L_q))
    padding = _padding(L_k, [max(1, L_k - 1 - b) for b in range(batch)])
    causal = torch.ones(L_q, L_q, dtype=torch.bool).tril().unsqueeze(0)  # (1, L_q, L_q)
    full = torch.rand(batch, L_q, L_k, generator=g) > 0.5  # (batch, L_q, L_k)
    full[..., 0] = True  # every query sees at least one key
    blind = full.clone()
    blind[0, 1] = False  # query 1 of sentence 0 may attend to nothing
    cases = [  # (what, query, key, value, mask)
        ("cross-attention without a mask", query, key, value, None),
        ("a padding mask (batch, 1, L_k)", query, key, value, padding),
        ("self-attention with a causal mask (1, L, L)", x, x, x, causal),
        ("a full mask (batch, L_q, L_k)", query, key, value, full),
        ("a query whose keys are all masked", query, key, value, blind),
    ]
    return [Probe((q, k, v, *weights, h, mask), "{what} with " + what, sizes=sizes,
                  hints=((_BROADCAST_ERROR, _MASK_HEADS_HINT),) if mask is not None else (),
                  tags=dict(sizes, sized=True, masked=mask is not None, blind=mask is blind, L_q=q.size(1)))
            for what, q, k, v, mask in cases]


_EXTREME = dict(batch=2, L_q=3, L_k=5, h=2, d_k=3)


def _extreme_inputs(g: torch.Generator, sign: float, scale: float) -> tuple:
    """Query, key, value and the four matrices of _EXTREME, float32, whose scores are sign * scale * m_a * c_j
    in every head (m_a in (1, 2, 3), c_j in (1, 3, 2, 5, 4), along one direction per sentence; W_Q and W_K
    orthogonal): so far apart that the softmax is one-hot, on key 0 when sign < 0, on key 3 when sign > 0."""
    batch, L_q, L_k, h, d_k = (_EXTREME[k] for k in ("batch", "L_q", "L_k", "h", "d_k"))
    d_model = h * d_k

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g, dtype=torch.float64)
    W_Q, W_K = (torch.linalg.qr(randn(d_model, d_model))[0] for _ in range(2))
    W_V, W_O = (randn(d_model, d_model) / math.sqrt(d_model) for _ in range(2))
    u = randn(batch, h, d_k)
    u = (u / u.norm(dim=-1, keepdim=True)).reshape(batch, 1, d_model)  # a unit vector per head
    m = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64).view(1, L_q, 1)
    c = torch.tensor([1.0, 3.0, 2.0, 5.0, 4.0], dtype=torch.float64).view(1, L_k, 1)
    size = math.sqrt(scale * math.sqrt(d_k))  # q . k / sqrt(d_k) = scale * m_a * c_j
    query = size * m * (u @ W_Q.T)
    key = sign * size * c * (u @ W_K.T)
    value = randn(batch, L_k, d_model)
    return tuple(t.float() for t in (query, key, value, W_Q, W_K, W_V, W_O))


def one_hot_output(value, W_V, W_O, mask, sign: float) -> torch.Tensor:
    """The output of _extreme_inputs when each query takes the value of its allowed key of the highest score."""
    c = torch.tensor([1.0, 3.0, 2.0, 5.0, 4.0])
    batch, L_k, _ = value.shape
    score = (sign * c).expand(batch, _EXTREME["L_q"], L_k)
    if mask is not None:
        score = score.masked_fill(~mask, float("-inf"))
    best = score.argmax(-1)  # (batch, L_q)
    chosen = torch.gather(value, 1, best.unsqueeze(-1).expand(-1, -1, value.size(-1)))
    return chosen @ W_V @ W_O


def _extreme_probes(g: torch.Generator) -> list[Probe]:
    """Scores far below zero (a softmax without its max shift gives 0/0; a mask filled with -1e4 lets the
    masked keys win) and far above zero (exp overflows)."""
    below = _extreme_inputs(g, -1.0, 3e4)  # scores from -3e4 down to -4.5e5
    above = _extreme_inputs(g, 1.0, 100.0)  # scores from 100 up to 1,500
    padding = _padding(_EXTREME["L_k"], [3, 2])  # it hides the keys of the lowest scores
    cases = [
        ("scores far below zero (-3e4 to -4.5e5), no mask", below, None, -1.0),
        ("scores far below zero (-3e4 to -4.5e5) and a padding mask (batch, 1, L_k)", below, padding, -1.0),
        ("scores far above zero (100 to 1,500), no mask", above, None, 1.0),
    ]
    return [Probe((*inputs, _EXTREME["h"], mask), "{what} with " + what,
                  tags=dict(extreme=True, what=what, sign=sign, masked=mask is not None))
            for what, inputs, mask, sign in cases]


def _float64_probe(g: torch.Generator) -> Probe:
    """float64 inputs that require gradients, with a padding mask, and a second call. d_k = 16, whose square
    root is exact in float32: a float32 constant in the scaling changes nothing, steps in float32 show."""
    batch, L_q, L_k, h, d_k = 2, 4, 3, 2, 16
    d_model = h * d_k
    weights = _weights(g, d_model, torch.float64)
    query, key, value = (torch.randn(batch, n, d_model, generator=g, dtype=torch.float64) for n in (L_q, L_k, L_k))
    padding = _padding(L_k, [L_k, L_k - 1])
    what = f"{{what}} for float64 inputs (batch={batch}, L_q={L_q}, L_k={L_k}, h={h}, d_k={d_k}) with a padding mask"
    return Probe((query, key, value, *weights, h, padding), what, grad=tuple(range(7)),
                 again=(query + 1, key, value, *weights, h, padding), hints=((_DTYPE_ERROR, _DTYPE_HINT),))


def _multi_head_probes(device: str | None) -> list[Probe]:
    g = torch.Generator().manual_seed(0)
    probes = [p for sizes in MULTI_HEAD_SIZES for p in _sized_probes(g, sizes)]
    return probes + _extreme_probes(g) + [_float64_probe(g)]


def _sized(p: Probe) -> bool:
    return p.tags.get("sized", False)


def _d(p: Probe) -> tuple[int, int]:
    return p.tags["d_k"], p.tags["h"] * p.tags["d_k"]


_NOTEBOOK_02 = "as scaled_dot_product_attention of notebook 02 does"


def _blind_nan(found: dict, p: Probe) -> str | None:
    if p.tags.get("blind") and found["values"] is not None and found["values"].isnan().any():
        return ("a query whose keys are all masked gets NaN: the softmax of a row of -inf is 0/0. The course gives it "
                f"zero weights, so a zero output, {_NOTEBOOK_02} (or your attention of exercise 2.1).")
    return None


def _not_finite(found: dict, p: Probe) -> str | None:
    if found["values"] is None or found["values"].isfinite().all():
        return None
    way = ("underflows: exp of every score is 0, and 0/0 is NaN" if p.tags["sign"] < 0 else
           "overflows: exp(100) is already inf in float32, and inf/inf is NaN")
    return (f"with {p.tags['what']}, your output holds NaN or inf: a softmax computed as exp(s) / sum(exp(s)) "
            f"without subtracting each row's maximum {way}. Subtract it every time (not only when the scores look "
            f"large), or use scores.softmax(dim=-1), {_NOTEBOOK_02}.")


def _masked(p: Probe) -> bool:
    return _sized(p) and p.tags["masked"]


_SPLIT = "Split as in exercise 4.1, view(batch, L, h, d_k) then transpose(1, 2)"
MULTI_HEAD_MISTAKES = (
    Mistake("You returned the heads: merge them back to (batch, L_q, d_model) (exercise 4.2) and multiply by W_O.",
            "the heads returned unmerged", stage="shape", when=_sized,
            shape=lambda p: (p.tags["batch"], p.tags["h"], p.tags["L_q"], p.tags["d_k"]),
            example=lambda *args: _variant()(*args).unflatten(-1, (args[7], -1)).transpose(1, 2)),
    Mistake("", "NaN for a query that sees nothing", find=_blind_nan, when=_sized,
            example=_variant(zero_after=False)),
) + tuple(Mistake(message, name, like=_variant(**wrong), when=when) for name, wrong, when, message in (
    ("uniform weights for a query that sees nothing", dict(fill=-1e4, zero_after=False),
     lambda p: _sized(p) and p.tags["blind"],
     "a query whose keys are all masked got uniform weights: your masked scores are filled with a finite number "
     "(such as -1e4 or -1e9), so the softmax shares the weight equally over the hidden keys. Fill with "
     f"float('-inf') and give such a query zero weights, {_NOTEBOOK_02}."),
    ("the mask ignored", dict(mask_mode="ignored"), _masked,
     "the mask was ignored: with a mask your output is the same as without one. Pass it to the attention, with "
     "an axis for the heads: mask.unsqueeze(1)."),
    ("an inverted mask", dict(mask_mode="inverted"), _masked,
     "your mask is inverted: keys where the mask is True were hidden. True means 'may attend' (notebook 03)."),
    ("W^O left out", dict(with_W_O=False), _sized,
     "you left out W^O: your output is Concat(head_1, ..., head_h) itself. MultiHead(Q, K, V) = Concat(head_1, "
     "..., head_h) W^O: multiply the merged heads by W_O (notebook 04, 'Why $W^O$?')."),
    ("scores divided by sqrt(d_model)", dict(scale="sqrt_d_model"), _sized, lambda p: (
        f"you divided the scores by sqrt(d_model) = {math.sqrt(_d(p)[1]):.4g} instead of sqrt(d_k) = "
        f"{math.sqrt(_d(p)[0]):.4g}: each head's queries and keys have d_k = d_model / h = {_d(p)[0]} dimensions "
        "(scaled_dot_product_attention of notebook 02, called on the split heads, reads d_k from them).")),
    ("no scaling", dict(scale="none"), _sized, lambda p: (
        f"you forgot the 1/sqrt(d_k) scaling of the scores (sqrt(d_k) = {math.sqrt(_d(p)[0]):.4g} here): call "
        "scaled_dot_product_attention (notebook 02) on the split heads, or divide by math.sqrt(d_k).")),
    ("scores divided by d_k", dict(scale="d_k"), _sized,
     lambda p: f"you divided the scores by d_k = {_d(p)[0]} instead of sqrt(d_k) = {math.sqrt(_d(p)[0]):.4g}."),
    ("the softmax over the queries", dict(dim=-2), _sized,
     "your softmax runs over the queries (dim=-2) instead of the keys: each query's weights must sum to 1 over "
     "the keys, softmax(dim=-1)."),
    ("split and merged without transposes", dict(split="view", merge="view"), _sized,
     "the heads are split without a transpose: view(batch, h, L, d_k) gives a head whole positions' vectors "
     f"instead of its own d_k columns (and the merge by view back undoes it, so the shapes all fit). {_SPLIT}; "
     "merge as in 4.2."),
    ("split without a transpose", dict(split="view"), _sized,
     "the heads are split without a transpose: view(batch, h, L, d_k) straight from (batch, L, d_model) has the "
     f"right shape but groups the wrong numbers. {_SPLIT}."),
    ("merged without transposing back", dict(merge="view"), _sized,
     "the heads are merged without transposing back: reshape(batch, L, d_model) straight from (batch, h, L, d_k) "
     "mixes the positions. Use the merge_heads of exercise 4.2: transpose(1, 2), then reshape."),
    ("the matrices transposed", dict(transposed=True), _sized,
     "you multiplied by the transposes of the matrices, x @ W.T: W_Q, W_K, W_V and W_O are the paper's matrices, "
     "used as x @ W_Q (nn.Linear stores the transpose)."),
    ("the key and value ignored", dict(inputs="query"), _sized,
     "your output ignores the key and value arguments: in cross-attention they come from elsewhere (the "
     "encoder): key @ W_K and value @ W_V."),
    ("the key used as the value", dict(inputs="key as value"), _sized, "your values are projected from the key: "
     "use value @ W_V."),
)) + (
    # scores far from zero
    Mistake("", "a softmax without its max shift", find=_not_finite, when=lambda p: p.tags.get("extreme", False),
            example=_variant(shift=False)),
    Mistake(lambda p: (f"with {p.tags['what']}, the masked keys took the weight: your masked scores are filled with a "
                       "finite number (such as -1e4), and every allowed score lies below it. Fill with float('-inf') "
                       f"(and give a query that sees nothing zero weights), {_NOTEBOOK_02}."),
            "masked scores filled with a finite number", like=_variant(fill=-1e4),
            when=lambda p: p.tags.get("extreme", False) and p.tags["masked"]),
)

MULTI_HEAD = Declaration(
    check="check_multi_head_attention", function="multi_head_attention", roles=_MHA_ROLES,
    reference=course_multi_head, probes=_multi_head_probes, returns=Tensor("the output"),
    mistakes=MULTI_HEAD_MISTAKES,
    sizes_fix="Read batch, L_q, L_k and d_model from the inputs' shapes, and d_k = d_model // h from the h you "
              "are given.",
    passed=("check_multi_head_attention passed: {name} equals the course's MultiHeadAttention and "
            f"nn.MultiheadAttention holding the same matrices, for {len(MULTI_HEAD_SIZES)} sets of "
            "sizes (a batch of one among them): cross-attention without a mask, with padding and "
            "full masks, self-attention with a causal mask, and a query that may attend to nothing; "
            "it stays exact for scores far below and far above zero and for float64 inputs, and "
            "lets gradients through."),
)


def check_multi_head_attention(multi_head_attention: Callable) -> None:
    """Check ``multi_head_attention(query, key, value, W_Q, W_K, W_V, W_O, h, mask=None)`` (x @ W, no biases)
    against the course's ``MultiHeadAttention`` holding the same matrices, on ``MULTI_HEAD_SIZES`` with and without
    masks, then scores far below and far above zero, and float64 inputs with gradients.

    Diagnoses: an input changed in place, a result of another kind, dtype or device, wrong shapes (the heads left
    unmerged, a batch of one dropped by a .squeeze()), no W^O, the scores divided by sqrt(d_model), by d_k or not at all
    instead of by sqrt(d_k), heads split or merged without the transpose, the matrices transposed (x @ W.T), the key and
    value ignored or the key used as the value, a mask ignored, inverted or not given its head axis, NaN or uniform
    weights for a query that sees nothing, the softmax over the queries instead of the keys, a softmax without its max
    shift (NaN for scores far below or far above zero, a shift applied only when the scores look large among them),
    masked scores filled with a finite number (-1e4) that the allowed scores go below, float64 inputs computed or
    returned in float32 (a .float(), a tensor created without dtype=), no gradient (@torch.no_grad(), .detach()), a
    result that a second call overwrites, and sizes written into the code."""
    check(MULTI_HEAD, multi_head_attention)


# ---------------------------------------------------------------- 4.4 each head's share


def _per_head(heads: torch.Tensor, W_O: torch.Tensor, rows: Callable) -> torch.Tensor:
    """(batch, h, L, d_model): term i is head i times the rows of W_O that ``rows(i)`` picks."""
    return torch.stack([heads[:, i] @ rows(i) for i in range(heads.size(1))], dim=1)


def course_contributions(heads: torch.Tensor, W_O: torch.Tensor) -> torch.Tensor:
    """Term i: head i times rows i*d_k .. (i+1)*d_k - 1 of W_O."""
    d_k = heads.size(-1)
    return _per_head(heads, W_O, lambda i: W_O[i * d_k : (i + 1) * d_k])


def _contribution_probes(device: str | None) -> list[Probe]:
    g, probes = torch.Generator().manual_seed(0), []
    for sizes in CONTRIBUTION_SIZES:
        batch, L, h, d_k = sizes["batch"], sizes["L"], sizes["h"], sizes["d_k"]
        d_model, dtype = sizes.get("d_model", h * d_k), _dtype(sizes)  # W_O is (h * d_k, d_model), square or not
        heads = torch.randn(batch, h, L, d_k, generator=g, dtype=dtype)  # before the merge
        W_O = torch.randn(h * d_k, d_model, generator=g, dtype=dtype) / math.sqrt(d_model)  # x @ W_O
        hints = ((r"invalid for input of size|must match|cannot be multiplied|size mismatch",
                  f"\nHint: here W_O is ({h * d_k}, {d_model}), not square: its rows are the h * d_k columns of the "
                  "concatenation, its columns the d_model features. Read d_model from W_O.size(-1), not from "
                  "h * d_k."),) if d_model != h * d_k else ()
        probes.append(Probe((heads, W_O), f"{{name}}(heads of shape (batch={batch}, h={h}, L={L}, d_k={d_k})"
                                          f"{_of(dtype)}, W_O of shape ({h * d_k}, {d_model}))",
                            sizes=sizes, hints=hints + _hints(dtype), tags=dict(sizes, d_model=d_model)))
    heads, W_O = torch.randn(2, 3, 4, 5, generator=g), torch.randn(15, 15, generator=g)
    return probes + [Probe((heads, W_O), "{name}(heads of shape (batch=2, h=3, L=4, d_k=5), W_O of shape (15, 15))",
                           again=(heads + 1, W_O), tags=dict(batch=2, L=4, h=3, d_k=5, d_model=15))]


def _mixed(found: dict, p: Probe) -> str | None:
    expected, got = course_contributions(*p.args), found["values"]
    if got is not None and got.shape == expected.shape and torch.allclose(
            got.sum(1).double(), expected.sum(1).double(), atol=1e-5, rtol=1e-4):
        return ("your terms add up to the output, Concat(...) W^O, but they are not each head's own: term i must "
                "depend on head i alone, head_i @ W_O[i*d_k:(i+1)*d_k].")
    return None


def _misplaced(found: dict, p: Probe) -> str | None:
    b, h, L, d = (p.tags[k] for k in ("batch", "h", "L", "d_model"))
    return ("The head axis comes second, as in heads: (batch, h, L, d_model)."
            if tuple(found["shape"]) in ((h, b, L, d), (b, L, h, d)) else None)


CONTRIBUTIONS = Declaration(
    check="check_head_contributions", function="head_contributions", roles=("heads", "W_O"),
    reference=course_contributions, probes=_contribution_probes, returns=Tensor("the contributions"),
    sizes_fix=_HEADS_FIX,
    mistakes=(
        Mistake("That is the sum over the heads, Concat(head_1, ..., head_h) W^O, the layer's output: keep the "
                "heads apart, one term per head.", "the sum of the terms", stage="shape",
                shape=lambda p: (p.tags["batch"], p.tags["L"], p.tags["d_model"]),
                example=lambda heads, W_O: course_contributions(heads, W_O).sum(1)),
        Mistake("", "the head axis misplaced", stage="shape", find=_misplaced,
                example=lambda heads, W_O: course_contributions(heads, W_O).transpose(1, 2)),
        Mistake("you took head i's block of columns of W_O (transposed), W_O[:, i*d_k:(i+1)*d_k].T: that is "
                "nn.Linear's orientation. Here Concat(...) @ W_O: head i meets rows i*d_k .. (i+1)*d_k - 1 of W_O.",
                "columns of W_O instead of rows", like=lambda heads, W_O: _per_head(
                    heads, W_O, lambda i: W_O[:, i * heads.size(-1): (i + 1) * heads.size(-1)].T)),
        Mistake("head i took every h-th row of W_O (i, i + h, ...): its rows are the block i*d_k .. (i+1)*d_k - 1, "
                "where its output sits in the concatenation.", "every h-th row",
                like=lambda heads, W_O: _per_head(heads, W_O, lambda i: W_O[i::heads.size(1)])),
        Mistake(lambda p: (f"your contributions are 1/h = 1/{p.tags['h']} of the right ones: the heads' terms add "
                           "up to the output, with no average."), "an average instead of a sum",
                like=lambda heads, W_O: course_contributions(heads, W_O) / heads.size(1)),
        Mistake("your contributions are the heads placed in their own slots of d_k features, with no W^O: multiply "
                "each head by its rows of W_O, head_i @ W_O[i*d_k:(i+1)*d_k].", "no W^O", like=lambda heads, W_O: course_contributions(
                    heads, torch.eye(W_O.size(0), dtype=heads.dtype))),
        Mistake("", "terms that mix the heads", find=_mixed,
                example=lambda heads, W_O: course_contributions(heads, W_O).sum(1, keepdim=True).expand(
                    -1, heads.size(1), -1, -1) / heads.size(1)),
    ),
    passed=("check_head_contributions passed: term i of {name} is head i times rows "
            "i*d_k .. (i+1)*d_k - 1 of W_O, and the h terms add up to Concat(heads) W^O, the "
            f"course's output projection, for {len(CONTRIBUTION_SIZES)} sets of sizes (a batch of "
            "one with a W_O of (h * d_k, d_model) = (8, 9), float64)."),
)


def check_head_contributions(head_contributions: Callable) -> None:
    """Check ``head_contributions(heads, W_O)``: (batch, h, L, d_k) heads and the paper's W_O (h * d_k, d_model) ->
    (batch, h, L, d_model), term i = head_i @ rows i*d_k .. (i+1)*d_k - 1 of W_O, on ``CONTRIBUTION_SIZES``.

    Diagnoses: an input changed in place, a result of another kind, dtype (float64 made float32 by a .float() or a
    tensor created without dtype=) or device, the sum returned instead of the terms, the head axis misplaced, columns of
    W_O instead of rows (nn.Linear's orientation), every h-th row, an average instead of a sum, heads placed in their
    slots without W_O, terms that add up right but mix the heads, d_model taken for h * d_k (a W_O that is not square
    fails), a dimension of size 1 dropped (a .squeeze()), a result that a second call overwrites, and sizes written into
    the code."""
    check(CONTRIBUTIONS, head_contributions)


DECLARATIONS = {d.check: d for d in (SPLIT, MERGE, MULTI_HEAD, CONTRIBUTIONS)}
