"""Checks of notebook 06's exercises: the position-wise feed-forward network
(``annotated.feed_forward``), layer normalization (``annotated.layer_norm``, compared with
``torch.nn.functional.layer_norm`` as well) and the residual connection in both orders
(``annotated.residual.SublayerConnection``).

The network, the norm and the dropout a learner's function receives are the check's own
modules: each records what it is called with, so the check can say which one was never
called, or called on the wrong tensor. The dropout is a stand-in that zeroes the same
entries at every call (and scales the rest by 1/(1 - p), as ``nn.Dropout`` in training),
so where it acts shows in the result and the result is deterministic.
"""

import itertools
from collections.abc import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from annotated.feed_forward import PositionwiseFeedForward
from annotated.layer_norm import LayerNorm
from annotated.residual import SublayerConnection
from annotated.support.grading.core import (
    ExerciseFailed, _assert_close, _call, _function, _generic, _hard_coded_hint, _run_on_all_sizes,
    _same, _shape, _tensor,
)

FFN_SIZES = [
    dict(batch=2, L=3, d_model=6, d_ff=10),
    dict(batch=4, L=5, d_model=8, d_ff=12),
    dict(batch=3, L=7, d_model=5, d_ff=9),
]
# Two (batch, L, d_model) sets, then one sentence alone, (L, d_model).
NORM_SIZES = [dict(batch=2, L=5, d_model=8), dict(batch=3, L=4, d_model=6), dict(L=7, d_model=10)]
SUBLAYER_SIZES = [dict(batch=2, L=5, d_model=6), dict(batch=3, L=4, d_model=10)]
SIZE_SETS = {
    "check_feed_forward": FFN_SIZES,
    "check_layer_norm": NORM_SIZES,
    "check_sublayer_connection": SUBLAYER_SIZES,
}
DROPOUT_P = 0.25  # of the stand-in dropout


class _Recorded(nn.Module):
    """``module``, with a record of every tensor it was called with; ``label`` is how a
    message shows it."""

    def __init__(self, module: Callable, label: str):
        super().__init__()
        self.module, self.label = module, label
        self.inputs: list[torch.Tensor] = []

    def __repr__(self) -> str:
        return self.label

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        self.inputs.append(t.detach().clone())
        return self.module(t)


class _FixedDropout(nn.Module):
    """Dropout that zeroes the same entries at every call (a fixed pattern per shape) and
    multiplies the others by 1/(1 - p), as nn.Dropout does in training."""

    def __init__(self, p: float = DROPOUT_P, seed: int = 0):
        super().__init__()
        self.p, self.seed = p, seed

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        shape_seed = sum(n * 7919**i for i, n in enumerate(t.shape))
        g = torch.Generator().manual_seed(self.seed + shape_seed)
        keep = torch.rand(t.shape, generator=g) >= self.p
        return t * keep.to(t.device, t.dtype) / (1 - self.p)


def _called(what: str, recorded: _Recorded, name: str, use: str) -> None:
    """Refuse a module that was never called."""
    if not recorded.inputs:
        raise ExerciseFailed(
            f"{name} never called the {what} it was given: {use}"
        )


# ---------------------------------------------------------------- the feed-forward network (6.1)

_FFN_MATMUL = (
    r"cannot be multiplied|size mismatch|mat1 and mat2|must match the size of tensor",
    "\nHint: the matrices are given as in the paper's x W_1: W_1 is (d_model, d_ff) and W_2 "
    "(d_ff, d_model), so x @ W_1 then @ W_2, with no .T (nn.Linear stores its weight the other "
    "way round, (out_features, in_features), and computes x @ weight.T).",
)


def _check_ffn_once(fn: Callable, name: str, sizes: dict, g: torch.Generator) -> None:
    batch, L, d_model, d_ff = sizes["batch"], sizes["L"], sizes["d_model"], sizes["d_ff"]
    x = torch.randn(batch, L, d_model, generator=g)
    W_1 = torch.randn(d_model, d_ff, generator=g) / d_model**0.5
    b_1 = torch.randn(d_ff, generator=g)
    W_2 = torch.randn(d_ff, d_model, generator=g) / d_ff**0.5
    b_2 = torch.randn(d_model, generator=g)
    dropout = _FixedDropout(seed=1)

    # The course's module with the same numbers: nn.Linear holds W^T; the stand-in dropout.
    course = PositionwiseFeedForward(d_model, d_ff)
    with torch.no_grad():
        course.W_1.weight.copy_(W_1.T)
        course.W_1.bias.copy_(b_1)
        course.W_2.weight.copy_(W_2.T)
        course.W_2.bias.copy_(b_2)
    course.dropout = dropout
    with torch.no_grad():
        expected = course(x)  # (batch, L, d_model)

    recorded = _Recorded(dropout, "dropout")
    call = (f"{name}(x of shape (batch={batch}, L={L}, d_model={d_model}), "
            f"W_1 ({d_model}, {d_ff}), b_1, W_2 ({d_ff}, {d_model}), b_2, dropout)")
    roles = ("x", "W_1", "b_1", "W_2", "b_2", "dropout")
    result = _call(fn, x, W_1, b_1, W_2, b_2, recorded, roles=roles, hints=(_FFN_MATMUL,))
    got = _tensor(result, name, "the output", like=x)
    _shape(got, (batch, L, d_model), call)
    if _same(got, expected):
        if len(recorded.inputs) != 1:
            raise ExerciseFailed(f"{name} called dropout {len(recorded.inputs)} times; call it "
                                 "once, on the ReLU's output.")
        return

    # float64 pieces, for the mistakes; the stand-in dropout zeroes the same entries again.
    xd, W_1d, b_1d, W_2d, b_2d = (t.double() for t in (x, W_1, b_1, W_2, b_2))
    drop = dropout
    hidden = xd @ W_1d + b_1d  # (batch, L, d_ff), before the ReLU
    inputs = recorded.inputs
    if not inputs:
        raise ExerciseFailed(
            f"{name} never called the dropout it was given: the course applies it to the ReLU's "
            "output, dropout(relu(x @ W_1 + b_1)) @ W_2 + b_2 (the paper's formula has none; "
            "the check's dropout zeroes fixed entries, so where it acts shows in the result)."
        )
    if len(inputs) > 1:
        raise ExerciseFailed(f"{name} called dropout {len(inputs)} times; call it once, on the "
                             "ReLU's output.")
    if inputs[0].shape[-1] == d_model and inputs[0].shape == x.shape:
        if torch.equal(inputs[0], x):
            raise ExerciseFailed(
                "dropout was applied to the input x: the course applies it to the hidden layer, "
                "the ReLU's output of width d_ff, dropout(relu(x @ W_1 + b_1)) @ W_2 + b_2."
            )
        raise ExerciseFailed(
            f"dropout was applied to a tensor of width d_model = {d_model}, after the second "
            f"layer: the course applies it to the hidden layer (width d_ff = {d_ff}), between "
            "the ReLU and W_2. The dropout after the whole sublayer belongs to the residual "
            "connection (exercise 6.3)."
        )
    no_b_1 = drop((xd @ W_1d).relu())  # the hidden layer without its bias
    mistakes = [
        ((drop(hidden.relu()) @ W_2d + b_2d).relu(),
         "a ReLU after the second layer as well: the paper's max(0, .) comes once, between the "
         "layers, FFN(x) = max(0, x W_1 + b_1) W_2 + b_2; the output itself may be negative (it "
         "is added to the residual stream)."),
        ((drop(hidden) @ W_2d + b_2d).relu(),
         "the ReLU is after the second layer instead of between the two: FFN(x) = max(0, x W_1 "
         "+ b_1) W_2 + b_2, the ReLU on the hidden layer of width d_ff."),
        (drop(hidden) @ W_2d + b_2d,
         "there is no ReLU: without max(0, .) the two layers collapse into one linear map, "
         "x (W_1 W_2) + (b_1 W_2 + b_2). Apply torch.relu to x @ W_1 + b_1."),
        (drop(F.gelu(hidden)) @ W_2d + b_2d,
         "you used GELU: the paper's activation is max(0, .), the ReLU (GELU is later practice, "
         "in BERT and GPT)."),
        (no_b_1 @ W_2d + b_2d,
         "b_1 is missing: the hidden layer is max(0, x W_1 + b_1), the bias added before the "
         "ReLU."),
        (drop(hidden.relu()) @ W_2d,
         "b_2 is missing: the output is max(0, x W_1 + b_1) W_2 + b_2."),
        (no_b_1 @ W_2d,
         "both biases are missing: FFN(x) = max(0, x W_1 + b_1) W_2 + b_2 (nn.Linear has its "
         "bias by default)."),
        (drop((xd @ W_1d).relu() + b_1d) @ W_2d + b_2d,
         "b_1 is added after the ReLU: it goes inside, max(0, x W_1 + b_1), so that the ReLU "
         "cuts at a learned threshold."),
    ]
    for candidate, message in mistakes:
        if _same(got, candidate):
            raise ExerciseFailed(message)
    # Position-wise: changing one position may change that position's output only.
    other = x.clone()
    other[:, 0] = torch.randn(batch, d_model, generator=g)
    again = _tensor(_call(fn, other, W_1, b_1, W_2, b_2, _FixedDropout(seed=1), roles=roles),
                    name, "the output", like=x)
    if again.shape == got.shape and not torch.equal(again[:, 1:], got[:, 1:]):
        raise ExerciseFailed(
            "your network mixes positions: changing the input at position 0 changed the output "
            "at other positions. The network acts on every position's vector on its own: matrix "
            "products over the last dimension, x @ W_1, with no reshape that moves positions "
            "into the features."
        )
    _assert_close(got, expected, call)


def _ffn_hint(passed: list, sizes: dict, message: str) -> str:
    return _hard_coded_hint(passed, sizes, message,
                            "Read every size from the inputs (x.shape, W_1.shape).")


def check_feed_forward(feed_forward: Callable) -> None:
    """Check ``feed_forward(x, W_1, b_1, W_2, b_2, dropout)``, the network of §3.3 with the
    course's optional dropout on the hidden layer, against ``PositionwiseFeedForward`` on
    the sizes of ``FFN_SIZES``.

    Diagnoses: wrong shape, dtype or device, an input changed in place, transposed weights
    (the product's error, with a hint), dropout never called, on the input, after the second
    layer or called twice, a ReLU after the second layer (too, or instead), no ReLU, GELU,
    b_1 or b_2 or both missing, b_1 after the ReLU, positions that mix, and sizes written
    into the code.
    """
    name = _function(feed_forward, "check_feed_forward", "feed_forward")
    g = torch.Generator().manual_seed(0)
    with torch.random.fork_rng():  # building the course's module must not move the learner's seed
        _run_on_all_sizes(lambda sizes: _check_ffn_once(feed_forward, name, sizes, g), FFN_SIZES,
                          _ffn_hint)
    print(
        f"check_feed_forward passed: {name} computes max(0, x W_1 + b_1) W_2 + b_2 with dropout on "
        f"the hidden layer, as the course's PositionwiseFeedForward does, for {len(FFN_SIZES)} "
        "sets of sizes."
    )


# ---------------------------------------------------------------- layer normalization (6.2)

_KEEPDIM = (
    r"must match the size of tensor",
    "\nHint: a statistic per position has to keep its dimension to broadcast against x: "
    "x.mean(dim=-1, keepdim=True), (batch, L, 1), not (batch, L).",
)


def _norm_input(sizes: dict, g: torch.Generator) -> torch.Tensor:
    """Positions of very different scales and offsets, one of them constant (variance 0) and one
    of standard deviation 0.01, where eps = 1e-5 inside or outside the square root differs."""
    d_model = sizes["d_model"]
    lead = (sizes["batch"], sizes["L"]) if "batch" in sizes else (sizes["L"],)
    x = torch.randn(*lead, d_model, generator=g)
    count = x[..., 0].numel()
    scales = torch.tensor([0.01, 1.0, 5.0, 0.3, 20.0])[torch.arange(count) % 5].view(*lead, 1)
    # Offsets in units of the scale: a large offset on a small spread loses float32 digits.
    offsets = torch.tensor([2.0, -3.0, 0.0, 1.5])[torch.arange(count) % 4].view(*lead, 1)
    x = (x + offsets) * scales
    x.view(-1, d_model)[1] = 3.0  # a constant position
    return x


def _normalized(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, eps: float, dims=(-1,),
                unbiased: bool = False, eps_at: str = "inside", affine: str = "right",
                centred: bool = True) -> torch.Tensor:
    """Layer norm in float64 with the usual mistakes switched on by the arguments."""
    x = x.double()
    mean = x.mean(dim=dims, keepdim=True)
    var = x.var(dim=dims, keepdim=True, unbiased=unbiased)
    if not centred:  # RMS norm: no mean subtracted, mean of squares for the scale
        mean, var = torch.zeros_like(mean), (x * x).mean(dim=dims, keepdim=True)
    if eps_at == "inside":
        xhat = (x - mean) / torch.sqrt(var + eps)
    elif eps_at == "outside":
        xhat = (x - mean) / (torch.sqrt(var) + eps)
    else:  # the variance, not its square root
        xhat = (x - mean) / (var + eps)
    gamma, beta = gamma.double(), beta.double()
    return {"right": gamma * xhat + beta, "none": xhat, "no beta": gamma * xhat,
            "no gamma": xhat + beta, "swapped": beta * xhat + gamma}[affine]


_VARIANCE = {
    True: "you used the unbiased variance (dividing by d_model - 1, as x.var() and x.std() do by "
          "default), but layer norm divides by d_model, as nn.LayerNorm does: "
          "x.var(dim=-1, keepdim=True, unbiased=False)",
}
_EPS = {
    "outside": "eps is outside the square root, std + eps, where nn.LayerNorm has it inside, "
               "sqrt(var + eps)",
    "variance": "you divided by the variance + eps instead of its square root, sqrt(var + eps)",
}
_AFFINE = {
    "none": "gamma and beta are missing: multiply by gamma and add beta, gamma * xhat + beta",
    "no beta": "beta is missing: gamma * xhat + beta",
    "no gamma": "gamma is missing: gamma * xhat + beta",
    "swapped": "gamma and beta are swapped: gamma multiplies, beta is added, gamma * xhat + beta",
}


def _norm_mistake(got, x, gamma, beta, eps, sizes) -> str | None:
    """Name what differs from layer norm, trying every combination of the usual mistakes."""
    variants = itertools.product((False, True), ("inside", "outside", "variance"),
                                 ("right", "none", "no beta", "no gamma", "swapped"))
    for unbiased, eps_at, affine in variants:
        if (unbiased, eps_at, affine) == (False, "inside", "right"):
            continue
        if _same(got, _normalized(x, gamma, beta, eps, unbiased=unbiased, eps_at=eps_at,
                                  affine=affine)):
            found = [_VARIANCE[True]] if unbiased else []
            found += [_EPS[eps_at]] if eps_at != "inside" else []
            found += [_AFFINE[affine]] if affine != "right" else []
            if len(found) == 1:
                return f"{found[0]}."
            return f"{len(found)} mistakes at once: " + "; and ".join(found) + "."
    if _same(got, _normalized(x, gamma, beta, eps, centred=False)):
        return (
            "you divided x by the root of its mean square without subtracting the mean: that is "
            "RMS norm (Zhang and Sennrich, 2019, later practice), not the paper's layer norm, "
            "which subtracts the mean and divides by the standard deviation."
        )
    xd = x.double()
    uncentred = xd / torch.sqrt(xd.var(dim=-1, keepdim=True, unbiased=False) + eps)
    if _same(got, gamma.double() * uncentred + beta.double()):
        return ("the mean is not subtracted: divide x - mean by the standard deviation, "
                "(x - mean) / sqrt(var + eps).")
    names = {0: "the batch (dim=0)", 1: "the positions (dim=1)"}
    if x.dim() == 3:
        for dims, what in [((0,), names[0]), ((1,), names[1]), ((-2, -1), "each whole sentence"),
                           ((0, 1, 2), "the whole tensor")]:
            if _same(got, _normalized(x, gamma, beta, eps, dims=dims)):
                return (
                    f"you normalized over {what}: layer norm standardizes each position over its "
                    f"own d_model = {sizes['d_model']} features, the last dimension, "
                    "x.mean(dim=-1, keepdim=True) and the same for the variance."
                )
    elif _same(got, _normalized(x, gamma, beta, eps, dims=(0,))) or _same(
            got, _normalized(x, gamma, beta, eps, dims=(0, 1))):
        return (
            "on a single sentence (L, d_model) you normalized over the positions (or everything): "
            "layer norm acts on the last dimension, dim=-1, whatever comes in front."
        )
    return None


def _check_norm_once(fn: Callable, name: str, sizes: dict, g: torch.Generator) -> None:
    d_model = sizes["d_model"]
    x = _norm_input(sizes, g)
    gamma = torch.rand(d_model, generator=g) * 1.5 + 0.5
    beta = torch.randn(d_model, generator=g)
    roles = ("x", "gamma", "beta", "eps")
    shape = ", ".join(f"{k}={v}" for k, v in sizes.items())
    for eps in (1e-5, 0.5):
        course = LayerNorm(d_model, eps)
        with torch.no_grad():
            course.gamma.copy_(gamma)
            course.beta.copy_(beta)
            expected = course(x)
        if not _same(expected, F.layer_norm(x, (d_model,), gamma, beta, eps)):  # not torch.testing: slow to import
            raise AssertionError("the course's LayerNorm differs from F.layer_norm: a bug of the course")
        call = f"{name}(x of shape ({shape}), gamma, beta, eps={eps})"
        got = _tensor(_call(fn, x, gamma, beta, eps, roles=roles, hints=(_KEEPDIM,)), name,
                      "the normalized tensor", like=x)
        _shape(got, tuple(x.shape), call)
        if _same(got, expected):
            continue
        constant = x.view(-1, d_model)[1]
        if got.view(-1, d_model)[1].isnan().any() and got.view(-1, d_model)[2:].isfinite().all():
            raise ExerciseFailed(
                f"a constant position ({constant[0].item():.0f} in every feature: variance 0) "
                "gives NaN: 0 / 0. eps keeps the division finite: (x - mean) / sqrt(var + eps), "
                "with the eps argument."
            )
        if eps != 1e-5:
            first = _normalized(x, gamma, beta, 1e-5)
            if _same(got, first):
                raise ExerciseFailed(
                    f"with eps={eps} your function gives what it gave with eps=1e-5: the eps "
                    "argument is ignored (is 1e-5 written into your code?). Use the eps given."
                )
        message = _norm_mistake(got, x, gamma, beta, eps, sizes)
        if message:
            raise ExerciseFailed(message)
        _assert_close(got, expected, call)


def _norm_hint(passed: list, sizes: dict, message: str) -> str:
    if "batch" not in sizes and "batch" in passed[-1]:
        return (
            "\nHint: it works for (batch, L, d_model) inputs but not for a single sentence "
            "(L, d_model): compute the statistics over the last dimension, dim=-1, whatever "
            "comes in front."
        )
    return _hard_coded_hint(passed, sizes, message, "Read d_model from the input, x.size(-1), "
                            "or use mean and var over dim=-1.")


def check_layer_norm(layer_norm: Callable) -> None:
    """Check ``layer_norm(x, gamma, beta, eps)`` against ``annotated.layer_norm.LayerNorm`` and
    ``F.layer_norm``, on (batch, L, d_model) and (L, d_model) inputs (``NORM_SIZES``) whose
    positions have very different scales, one of them constant, with eps 1e-5 and 0.5.

    Diagnoses: wrong shape, dtype or device, an input changed in place, NaN on a constant
    position (no eps), the eps argument ignored, the unbiased variance, eps outside the
    square root, the variance instead of its root, gamma or beta missing or swapped (and two
    of these at once), RMS norm, the mean not subtracted, statistics over the batch, the
    positions or a whole sentence, a missing keepdim (hint), and code that only works for
    3-dimensional inputs.
    """
    name = _function(layer_norm, "check_layer_norm", "layer_norm")
    g = torch.Generator().manual_seed(0)
    _run_on_all_sizes(lambda sizes: _check_norm_once(layer_norm, name, sizes, g), NORM_SIZES,
                      _norm_hint)
    print(
        f"check_layer_norm passed: {name} equals the course's LayerNorm and F.layer_norm on "
        "(batch, L, d_model) and (L, d_model) inputs, with eps 1e-5 and 0.5, positions of very "
        "different scales and a constant one."
    )


# ---------------------------------------------------------------- the residual connection (6.3)


def _modules(ffn: nn.Module, norm: nn.Module, dropout: nn.Module) -> tuple[_Recorded, ...]:
    """The sublayer, the norm and the dropout, recorded, as the learner's function gets them."""
    return (_Recorded(ffn, "sublayer (a PositionwiseFeedForward)"),
            _Recorded(norm, "norm (a LayerNorm)"), _Recorded(dropout, f"dropout (p={DROPOUT_P})"))


def _check_sublayer_once(fn: Callable, name: str, sizes: dict, g: torch.Generator) -> None:
    batch, L, d_model = sizes["batch"], sizes["L"], sizes["d_model"]
    x = torch.randn(batch, L, d_model, generator=g) * 2 + 0.5
    ffn = PositionwiseFeedForward(d_model, 3 * d_model).requires_grad_(False)
    norm = LayerNorm(d_model).requires_grad_(False)
    with torch.no_grad():  # the check's own numbers; gamma and beta away from 1 and 0
        for p in ffn.parameters():
            p.copy_(torch.randn(p.shape, generator=g) / p.size(-1) ** 0.5)
        norm.gamma.copy_(torch.rand(d_model, generator=g) + 0.5)
        norm.beta.copy_(torch.randn(d_model, generator=g))
    dropout = _FixedDropout(seed=2)
    # The pieces, their results in float64, for the mistakes.
    S, N, D = (lambda t: ffn(t).double()), (lambda t: norm(t).double()), dropout
    xd = x.double()
    formulas = {"post": N(x + dropout(ffn(x))), "pre": xd + D(S(norm(x)))}
    roles = ("x", "sublayer", "norm", "dropout", "norm_first")
    for norm_first in (False, True):
        course = SublayerConnection(d_model, dropout=DROPOUT_P, norm_first=norm_first)
        course.norm, course.dropout = norm, dropout
        with torch.no_grad():
            expected = course(x, ffn)
        sublayer, recorded_norm, recorded_dropout = _modules(ffn, norm, dropout)
        order = "pre-norm" if norm_first else "post-norm"
        call = (f"{name}(x of shape (batch={batch}, L={L}, d_model={d_model}), ..., "
                f"norm_first={norm_first})")
        with torch.no_grad():
            result = _call(fn, x, sublayer, recorded_norm, recorded_dropout, norm_first,
                           roles=roles)
        got = _tensor(result, name, "the output", like=x)
        _shape(got, (batch, L, d_model), call)
        if _same(got, expected):
            for what, recorded in (("sublayer", sublayer), ("norm", recorded_norm),
                                   ("dropout", recorded_dropout)):
                if len(recorded.inputs) != 1:
                    raise ExerciseFailed(f"{name} called the {what} {len(recorded.inputs)} times "
                                         f"(norm_first={norm_first}, {order}); call it once and "
                                         "reuse the result.")
            continue
        _called("sublayer", sublayer, name, "the residual connection wraps it, sublayer(...), "
                "and adds its output to x.")
        _called("norm", recorded_norm, name,
                "the layer norm forgotten? "
                + ("Pre-norm normalizes the sublayer's input: x + dropout(sublayer(norm(x)))."
                   if norm_first else
                   "Post-norm normalizes the sum: norm(x + dropout(sublayer(x))), the paper's "
                   "LayerNorm(x + Sublayer(x)).")
                + " Use the norm passed in: it holds the layer's own gamma and beta.")
        _called("dropout", recorded_dropout, name,
                "the paper applies dropout to the output of each sub-layer, before it is added "
                "to the sub-layer input and normalized (§5.4): dropout(sublayer(...)). Use the "
                "dropout passed in (the module knows whether the model is training).")
        if norm_first:
            mistakes = [
                (formulas["post"], None),
                (N(x) + D(S(norm(x))),
                 "the residual is added after the norm: norm(x) + dropout(sublayer(norm(x))). "
                 "In pre-norm the residual path carries x itself, untouched, x + dropout("
                 "sublayer(norm(x))): that identity path is what hands the gradient down a deep "
                 "stack (notebook 06, section 4). Keep x and normalize a copy: "
                 "x + dropout(sublayer(norm(x)))."),
                (N(x + dropout(ffn(norm(x)))),
                 "a second norm at the end: pre-norm normalizes the sublayer's input only, "
                 "x + dropout(sublayer(norm(x))), and leaves the sum unnormalized (the stack "
                 "ends with one more layer norm instead)."),
                (D(xd + S(norm(x))),
                 "dropout is applied to the sum, so it drops parts of the residual x too: it "
                 "belongs on the sublayer's output only, x + dropout(sublayer(norm(x)))."),
                (xd + S(dropout(norm(x))),
                 "dropout is applied to the sublayer's input: it belongs on its output, "
                 "x + dropout(sublayer(norm(x))) (§5.4)."),
                (xd + D(N(ffn(x))),
                 "the norm is applied to the sublayer's output: in pre-norm it comes first, on "
                 "the sublayer's input, x + dropout(sublayer(norm(x)))."),
                (D(S(norm(x))),
                 "the residual is missing: add x, x + dropout(sublayer(norm(x)))."),
            ]
        else:
            mistakes = [
                (formulas["pre"], None),
                (D(N(x + ffn(x))),
                 "dropout is applied after the norm: the paper applies it to the sublayer's "
                 "output before the residual sum, norm(x + dropout(sublayer(x))) (§5.4)."),
                (N(dropout(x + ffn(x))),
                 "dropout is applied to the sum, so it drops parts of the residual x too: it "
                 "belongs on the sublayer's output only, norm(x + dropout(sublayer(x)))."),
                (xd + N(dropout(ffn(x))),
                 "the norm is applied to the sublayer's output only: post-norm normalizes the "
                 "sum, norm(x + dropout(sublayer(x))), the paper's LayerNorm(x + Sublayer(x))."),
                (N(x) + D(S(x)),
                 "the norm is applied to x only: post-norm normalizes the sum, "
                 "norm(x + dropout(sublayer(x)))."),
                (N(dropout(ffn(x))),
                 "the residual is missing: add x before the norm, norm(x + dropout(sublayer(x)))."),
            ]
        for candidate, message in mistakes:
            if not _same(got, candidate):
                continue
            if message is not None:
                raise ExerciseFailed(f"with norm_first={norm_first} ({order}): {message}")
            # The other order's formula: the flag ignored, or the two orders swapped.
            other = _call(fn, x, *_modules(ffn, norm, dropout), not norm_first, roles=roles)
            other = _tensor(other, name, "the output", like=x)
            if _same(other, formulas["pre" if norm_first else "post"]):
                raise ExerciseFailed(
                    "the orders are swapped: norm_first=False must give the paper's post-norm, "
                    "norm(x + dropout(sublayer(x))), and norm_first=True pre-norm, "
                    "x + dropout(sublayer(norm(x))), as the course's SublayerConnection does."
                )
            kind = "post-norm" if norm_first else "pre-norm"
            raise ExerciseFailed(
                f"norm_first is ignored: your function always computes {kind}. norm_first=False "
                "must give the paper's post-norm, norm(x + dropout(sublayer(x))), and "
                "norm_first=True pre-norm, x + dropout(sublayer(norm(x)))."
            )
        for what, recorded in (("sublayer", sublayer), ("norm", recorded_norm),
                               ("dropout", recorded_dropout)):
            if len(recorded.inputs) > 1:
                raise _generic(f"{name} called the {what} {len(recorded.inputs)} times "
                               f"(norm_first={norm_first}, {order}); each is used once.")
        _assert_close(got, expected, f"{call}, against the course's SublayerConnection")


def _sublayer_hint(passed: list, sizes: dict, message: str) -> str:
    return _hard_coded_hint(passed, sizes, message,
                            "Use x's own shape; the modules you are given work on any size.")


def check_sublayer_connection(sublayer_connection: Callable) -> None:
    """Check ``sublayer_connection(x, sublayer, norm, dropout, norm_first)`` in both orders
    against ``annotated.residual.SublayerConnection``, with the course's feed-forward network
    as the sublayer, a LayerNorm of random gamma and beta, and a dropout that zeroes fixed
    entries, on the sizes of ``SUBLAYER_SIZES``.

    Diagnoses: wrong shape, dtype or device, an input changed in place, the sublayer, the
    norm or the dropout never called (or called twice), the orders swapped, norm_first
    ignored, and in post-norm: dropout after the norm or on the sum, the norm on the
    sublayer's output or on x only, the residual missing; in pre-norm: the residual added
    after the norm, a second norm at the end, dropout on the sum or on the sublayer's input,
    the norm after the sublayer, the residual missing.
    """
    name = _function(sublayer_connection, "check_sublayer_connection", "sublayer_connection")
    g = torch.Generator().manual_seed(0)
    with torch.random.fork_rng():  # building the modules must not move the learner's seed
        _run_on_all_sizes(lambda sizes: _check_sublayer_once(sublayer_connection, name, sizes, g),
                          SUBLAYER_SIZES, _sublayer_hint)
    print(
        f"check_sublayer_connection passed: {name} gives post-norm, "
        "norm(x + dropout(sublayer(x))), for norm_first=False and pre-norm, "
        "x + dropout(sublayer(norm(x))), for norm_first=True, "
        f"as the course's SublayerConnection does, for {len(SUBLAYER_SIZES)} sets of sizes."
    )
