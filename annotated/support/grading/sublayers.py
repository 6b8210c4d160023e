"""Checks of notebook 06 as declarations (``engine``): the feed-forward network (``FFN``), layer normalization
(``NORM``) and the residual connection in both orders (``CONNECTION``), with the check's own recording modules
(``record.build``): a dropout that zeroes fixed entries, a norm that answers to ``gamma`` and ``beta``."""

import itertools
import math
from collections.abc import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from annotated.feed_forward import PositionwiseFeedForward
from annotated.support import record as recorder
from annotated.support.grading.core import _hard_coded_hint, _sizes
from annotated.support.grading.engine import Declaration, Mistake, Probe, Tensor, _clone, _equal, check

FFN_SIZES = [dict(batch=2, L=3, d_model=6, d_ff=10), dict(batch=4, L=5, d_model=8, d_ff=12),
             dict(batch=3, L=7, d_model=5, d_ff=9), dict(batch=1, L=4, d_model=7, d_ff=11)]  # one sentence last
# (batch, L, d_model), a batch of one, one sentence (L, d_model) and (batch, h, L, d_model): the last dimension only.
NORM_SIZES = [dict(batch=2, L=5, d_model=8), dict(batch=3, L=4, d_model=6), dict(batch=1, L=9, d_model=12),
              dict(L=7, d_model=10), dict(batch=5, h=2, L=3, d_model=4)]
NORM_OFFSET = 1000.0  # the common offset of the features in the float32 pass that tests it
SUBLAYER_SIZES = [dict(batch=2, L=5, d_model=6), dict(batch=3, L=4, d_model=10), dict(batch=1, L=7, d_model=8)]
SIZE_SETS = {"check_feed_forward": FFN_SIZES, "check_layer_norm": NORM_SIZES,
             "check_sublayer_connection": SUBLAYER_SIZES}
DROPOUT_P = 0.25  # of the stand-in dropout
_SEED = 20170612  # the global seed before each call: F.dropout(t, dropout.p, dropout.training) draws a known mask


def _recording(name: str):
    """A stand-in class, named as the class it stands for, that keeps the tensors it is called with in ``calls``."""
    def make(cls):
        forward, init = cls.forward, cls.__init__

        def __init__(self, *args, **kwargs):
            init(self, *args, **kwargs)
            self.calls = []

        def recorded(self, t):
            self.calls.append(t.detach().clone())
            return forward(self, t)
        cls.__init__, cls.forward, cls.__name__, cls.__qualname__ = __init__, recorded, name, name
        cls._get_name = lambda self: name
        return cls
    return make


@_recording("Dropout")
class _FixedDropout(nn.Dropout):
    """An ``nn.Dropout`` that zeroes the same entries at every call (drawn per number of entries, in memory order,
    so a network that flattens the positions gets the same ones zeroed)."""

    def __init__(self, p: float = DROPOUT_P, seed: int = 0):
        super().__init__(p)
        self.seed = seed

    def keep(self, shape: torch.Size) -> torch.Tensor:
        g = torch.Generator().manual_seed(self.seed + shape.numel())
        return (torch.rand(shape.numel(), generator=g) >= self.p).view(shape)

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0:
            return t
        if self.inplace:
            return t.mul_(self.keep(t.shape).to(t.device, t.dtype)).div_(1 - self.p)
        return t * self.keep(t.shape).to(t.device, t.dtype) / (1 - self.p)


@_recording("LayerNorm")
class _Norm(nn.LayerNorm):  # answers to gamma and beta too
    gamma = property(lambda self: self.weight)
    beta = property(lambda self: self.bias)


@_recording("PositionwiseFeedForward")
class _Sublayer(PositionwiseFeedForward):
    def forward(self, t: torch.Tensor) -> torch.Tensor:
        out = super().forward(t)
        return out if len(self.calls) == 1 else out / 2  # a later call differs, as one with dropout would


def _functional(dropout: nn.Module) -> Callable:
    """t -> the mask, with its 1/(1 - p), that F.dropout(t, dropout.p, training=True) draws after the probe's seed."""
    def keep(t: torch.Tensor) -> torch.Tensor:
        with torch.random.fork_rng():
            torch.manual_seed(_SEED)
            return F.dropout(torch.ones(t.shape, dtype=t.dtype), dropout.p, True)
    return keep


def _dropout(p: float = DROPOUT_P, seed: int = 1, training: bool = True) -> nn.Module:
    return recorder.build(f"{__name__}._FixedDropout", p=p, seed=seed).train(training)


def _probe(args: tuple, label: str, reference: Callable, dropout: nn.Module, tags: dict, **options) -> Probe:
    """A probe that also accepts F.dropout(t, dropout.p, dropout.training) (right too, another mask)."""
    with torch.no_grad():
        functional = reference(*_clone(args), keep=_functional(dropout) if dropout.training else None)
    return Probe(args, label, seed=_SEED, tags=dict(eval=not dropout.training, **tags),
                 accept=lambda got: _equal(got[0], functional), **options)


def _functional_eval(reference: Callable, dropout: int) -> Mistake:
    """F.dropout(t, p) in evaluation mode: ``reference`` with the mask F.dropout draws."""
    return Mistake("with the dropout in evaluation mode (dropout.training is False) your function still drops entries: "
                   "F.dropout(t, p) drops whatever the mode, as its training argument is True by default. Call the "
                   "module, dropout(t), which follows the mode (or pass training=dropout.training).",
                   "F.dropout in evaluation mode", when=lambda p: p.tags["eval"],
                   like=lambda *args: reference(*args, keep=_functional(args[dropout])))


# ---------------------------------------------------------------- the feed-forward network (6.1)

_FFN_MATMUL = (r"cannot be multiplied|size mismatch|mat1 and mat2|must match the size of tensor",
               "\nHint: the matrices are given as in the paper's x W_1: W_1 is (d_model, d_ff) and W_2 (d_ff, "
               "d_model), so x @ W_1 then @ W_2, with no .T (nn.Linear stores its weight the other way round).")


def course_feed_forward(x, W_1, b_1, W_2, b_2, dropout, keep=None) -> torch.Tensor:
    """The course's network, nn.Linear's way (the dropout as the mask ``keep``: F.dropout's)."""
    hidden = F.relu(F.linear(x, W_1.T, b_1))                           # (batch, L, d_ff)
    hidden = dropout(hidden) if keep is None else hidden * keep(hidden)
    return F.linear(hidden, W_2.T, b_2)                                # (batch, L, d_model)


def _ffn_probes(device: str | None) -> list[Probe]:
    g, probes = torch.Generator().manual_seed(0), []

    def probe(args, sizes=None, dropout=None, setting="", **options):
        (d_model, d_ff), dropout = args[1].shape, dropout or _dropout()
        label = (f"{{what}} of {{name}}(x of shape {tuple(args[0].shape)}, W_1 ({d_model}, {d_ff}), b_1, W_2 "
                 f"({d_ff}, {d_model}), b_2, dropout{setting})")
        probes.append(_probe((*args, dropout), label, course_feed_forward, dropout, {}, sizes=sizes,
                             hints=(_FFN_MATMUL,), **options))

    for sizes in FFN_SIZES:
        batch, L, d_model, d_ff = sizes.values()
        args = (torch.randn(batch, L, d_model, generator=g), torch.randn(d_model, d_ff, generator=g) / d_model**0.5,
                torch.randn(d_ff, generator=g), torch.randn(d_ff, d_model, generator=g) / d_ff**0.5,
                torch.randn(d_model, generator=g))
        probe(args, sizes)
    probe(args, again=(torch.randn(args[0].shape, generator=g), *args[1:], _dropout()))
    probe(tuple(t.double() for t in args), dropout=_dropout(p=0.0), setting=", all float64", grad=(0, 1, 2, 3, 4))
    probe(args, dropout=_dropout(training=False), setting=" in evaluation mode")
    return probes


_WHERE = "the course applies it to the hidden layer, dropout(relu(x @ W_1 + b_1)) @ W_2 + b_2"


def _dropout_calls(found: dict, p: Probe) -> str | None:
    x, d_model, d_ff, calls = p.args[0], *p.args[1].shape, found["calls"][5].get("items", [])
    if not calls:
        return (f"your function never called the dropout it was given: {_WHERE} (the check's dropout zeroes fixed "
                "entries, so where it acts shows).")
    if len(calls) > 1:
        return f"your function called dropout {len(calls)} times; call it once, on the ReLU's output."
    first = calls[0]
    if first["shape"][-1] != d_model or math.prod(first["shape"]) != x.numel():
        return None  # compared by their entries: a network that flattens the positions is named too
    if first["values"] is not None and torch.equal(first["values"].reshape(x.shape), x):
        return f"dropout was applied to the input x: {_WHERE}."
    return (f"dropout was applied to a tensor of width d_model = {d_model}, after the second layer: {_WHERE}, of "
            f"width d_ff = {d_ff}. The dropout after the whole sublayer belongs to the residual connection (6.3).")


def _mixes(found: dict, p: Probe) -> str | None:
    """The first position right and a later one wrong: the output at a position depends on others."""
    got, expected = found["values"], course_feed_forward(*_clone(p.args))
    if got is None or got.dim() < 3 or got.shape != expected.shape or not _equal(got[:, 0], expected[:, 0]):
        return None
    return ("your network mixes positions: the output at position 0 is right, at later positions it is not. It acts "
            "on every position's vector on its own: x @ W_1, with no reshape that moves positions into the features.")


def _ffn(relu=1, b_1="inside", b_2=True, act=F.relu) -> Callable:
    """A wrong network: ``relu`` ReLUs (2: after the second layer too; -1: there only), b_1 "inside",
    None or "after" the ReLU, b_2 or not, another activation."""
    def feed_forward(x, W_1, b_1_, W_2, b_2_, dropout):
        hidden = x @ W_1 + (b_1_ if b_1 == "inside" else 0)
        hidden = act(hidden) if relu in (1, 2) else hidden
        hidden = hidden + b_1_ if b_1 == "after" else hidden
        out = dropout(hidden) @ W_2 + (b_2_ if b_2 else 0)
        return out.relu() if relu in (2, -1) else out
    return feed_forward


_FFN_FORMULA = "FFN(x) = max(0, x W_1 + b_1) W_2 + b_2"
FFN_MISTAKES = (
    _functional_eval(course_feed_forward, 5),
    Mistake("", "where the dropout is called", find=_dropout_calls,
            example=lambda x, W_1, b_1, W_2, b_2, dropout: F.relu(x @ W_1 + b_1) @ W_2 + b_2),
) + tuple(Mistake(message, name, like=_ffn(**wrong)) for name, wrong, message in (
    ("a ReLU after the second layer too", dict(relu=2),
     f"a ReLU after the second layer as well: max(0, .) comes once, between the layers, {_FFN_FORMULA}."),
    ("the ReLU after the second layer", dict(relu=-1),
     f"the ReLU is after the second layer instead of between the two: {_FFN_FORMULA}."),
    ("no ReLU", dict(relu=0), "there is no ReLU: without max(0, .) the two layers collapse into one linear map. "
     "Apply torch.relu to x @ W_1 + b_1."),
    ("GELU", dict(act=F.gelu), "you used GELU: the paper's activation is max(0, .), the ReLU."),
    ("no b_1", dict(b_1=None), f"b_1 is missing: {_FFN_FORMULA}."),
    ("no b_2", dict(b_2=False), f"b_2 is missing: {_FFN_FORMULA}."),
    ("no biases", dict(b_1=None, b_2=False), f"both biases are missing: {_FFN_FORMULA}."),
    ("b_1 after the ReLU", dict(b_1="after"), "b_1 is added after the ReLU: it goes inside, max(0, x W_1 + b_1)."),
)) + (
    Mistake("", "positions mixed", find=_mixes, example=lambda *args: course_feed_forward(*args).cumsum(dim=1)),
)

FFN = Declaration(
    check="check_feed_forward", function="feed_forward", roles=("x", "W_1", "b_1", "W_2", "b_2", "dropout"),
    reference=course_feed_forward, probes=_ffn_probes, returns=Tensor("the output"), mistakes=FFN_MISTAKES,
    sizes_fix="Read every size from the inputs (x.shape, W_1.shape).",
    passed=(f"check_feed_forward passed: {{name}} computes max(0, x W_1 + b_1) W_2 + b_2 with dropout on the hidden "
            f"layer, as the course's PositionwiseFeedForward does, for {len(FFN_SIZES)} sets of sizes, with the "
            "dropout in training and in evaluation mode, and in float64 with gradients reaching x and the weights."),
)


def check_feed_forward(feed_forward: Callable) -> None:
    """Check ``feed_forward(x, W_1, b_1, W_2, b_2, dropout)``, §3.3's network with dropout on the hidden layer,
    against ``PositionwiseFeedForward`` on ``FFN_SIZES``, in training and evaluation mode and in float64.

    Diagnoses: wrong shape (a batch of one squeezed away), dtype or device, an input changed in place, transposed
    weights (the product's error, with a hint), dropout never called, on the input, after the second layer or called
    twice, a ReLU after the second layer (too, or instead), no ReLU, GELU, b_1 or b_2 or both missing, b_1 after the
    ReLU, positions that mix, sizes written into the code, a result a second call overwrites, the dropout's mode changed
    (dropout.eval()), F.dropout dropping in evaluation mode, a float64 input computed in float32, and gradients that do
    not reach x or a weight (@torch.no_grad(), .detach()). Reading ``dropout.p`` or ``dropout.training``, and F.dropout
    with the module's p and mode, are accepted (the global generator is seeded before each call, so its mask can be
    drawn again)."""
    check(FFN, feed_forward)


# ---------------------------------------------------------------- layer normalization (6.2)

_KEEPDIM = (r"must match the size of tensor", "\nHint: a statistic per position has to keep its dimension to "
            "broadcast against x: x.mean(dim=-1, keepdim=True), (batch, L, 1), not (batch, L).")


def _norm_input(sizes: dict, g: torch.Generator) -> torch.Tensor:
    """Positions of very different scales and offsets, one constant (variance 0), one of standard deviation 0.01
    (where eps inside or outside the square root differs)."""
    d_model = sizes["d_model"]
    lead = tuple(n for k, n in sizes.items() if k != "d_model")  # (batch, h, L), (batch, L) or (L,)
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
                centred: bool | None = True) -> torch.Tensor:
    """Layer norm in float64 with the usual mistakes switched on by the arguments (``centred`` None: the mean
    not subtracted; False: RMS norm, the mean of squares for the scale too)."""
    x = x.double()
    mean = x.mean(dim=dims, keepdim=True)
    var = x.var(dim=dims, keepdim=True, unbiased=unbiased)
    if not centred:
        mean = torch.zeros_like(mean)
        var = var if centred is None else (x * x).mean(dim=dims, keepdim=True)
    root = {"inside": lambda: torch.sqrt(var + eps), "outside": lambda: torch.sqrt(var) + eps,
            "variance": lambda: var + eps}[eps_at]()
    xhat, gamma, beta = (x - mean) / root, gamma.double(), beta.double()
    return {"right": gamma * xhat + beta, "none": xhat, "no beta": gamma * xhat,
            "no gamma": xhat + beta, "swapped": beta * xhat + gamma}[affine]


_VARIANCE = ("you used the unbiased variance (dividing by d_model - 1, as x.var() and x.std() do by default), but "
             "layer norm divides by d_model, as nn.LayerNorm does: x.var(dim=-1, keepdim=True, unbiased=False)")
_EPS = {
    "outside": "eps is outside the square root, std + eps, where nn.LayerNorm has it inside, sqrt(var + eps)",
    "variance": "you divided by the variance + eps instead of its square root, sqrt(var + eps)",
}
_AFFINE = {
    "none": "gamma and beta are missing: multiply by gamma and add beta, gamma * xhat + beta",
    "no beta": "beta is missing: gamma * xhat + beta",
    "no gamma": "gamma is missing: gamma * xhat + beta",
    "swapped": "gamma and beta are swapped: gamma multiplies, beta is added, gamma * xhat + beta",
}


def _norm_probes(device: str | None) -> list[Probe]:
    g, probes = torch.Generator().manual_seed(0), []

    def probe(args, shape="", affine="gamma, beta", **options):
        probes.append(Probe(args, f"{{what}} of {{name}}(x{shape}, {affine}, eps={args[3]})", **options))

    def gamma_beta(d_model: int) -> tuple:
        return torch.rand(d_model, generator=g) * 1.5 + 0.5, torch.randn(d_model, generator=g)

    for sizes in NORM_SIZES:
        x = _norm_input(sizes, g)
        gamma, beta = gamma_beta(sizes["d_model"])
        for eps in (1e-5, 0.5):
            probe((x, gamma, beta, eps), f" of shape ({_sizes(sizes)})", sizes=sizes, hints=(_KEEPDIM,))
    probe((x, gamma, beta, 1), hints=(_KEEPDIM,))
    probes.append(Probe((x, gamma, beta, 1e-5), "{what}", again=(x * 2 + 1, gamma, beta, 1e-5)))
    # Features that share a large offset, in float32: a one-pass variance, mean(x^2) - mean(x)^2,
    # loses every digit there (F.layer_norm is off by 1.5e-4 at most; one pass by 0.1 to 1, or NaN).
    sizes, g = NORM_SIZES[0], torch.Generator().manual_seed(1)
    x = torch.randn(*sizes.values(), generator=g) + NORM_OFFSET
    gamma, beta = gamma_beta(sizes["d_model"])
    probe((x, gamma, beta, 1e-5), f" of shape ({_sizes(sizes)}), every feature {NORM_OFFSET:.0f} + a spread of about 1",
          precision=2e-3, tags={"offset": True})
    probe((_norm_input(sizes, g).double(), gamma.double(), beta.double(), 1e-5), f" of shape ({_sizes(sizes)})",
          "gamma, beta all float64", grad=(0, 1, 2))
    probe((_norm_input(dict(L=4, d_model=4), g), gamma[:4], beta[:4], 1e-5), " of shape (L=4, d_model=4)",
          hints=(_KEEPDIM,))  # L = d_model
    return probes


def _norm_nan(got: torch.Tensor, p: Probe) -> str | None:
    x, d_model = p.args[0], p.args[0].size(-1)
    rows = got.reshape(-1, d_model)
    if rows[1].isnan().any() and rows[2:].isfinite().all():
        return (f"a constant position ({x.reshape(-1, d_model)[1, 0].item():.0f} in every feature: variance 0) gives "
                "NaN: 0 / 0. eps keeps the division finite: (x - mean) / sqrt(var + eps), with the eps argument.")
    return None


def _combined(got: torch.Tensor, p: Probe) -> str | None:
    """The unbiased variance, eps misplaced, gamma and beta wrong: each, or several at once."""
    for unbiased, eps_at, affine in itertools.product((False, True), ("inside", "outside", "variance"),
                                                      ("right", "none", "no beta", "no gamma", "swapped")):
        if (unbiased, eps_at, affine) != (False, "inside", "right") and _equal(
                got, _normalized(*p.args, unbiased=unbiased, eps_at=eps_at, affine=affine)):
            found = [_VARIANCE] * unbiased + [_EPS.get(eps_at)] * (eps_at != "inside") + [_AFFINE.get(affine)] * (
                affine != "right")
            return f"{found[0]}." if len(found) == 1 else f"{len(found)} mistakes at once: {'; and '.join(found)}."
    return None


def _other_dims(got: torch.Tensor, p: Probe) -> str | None:
    x, d_model = p.args[0], p.args[0].size(-1)
    if x.dim() == 2:
        return None if not any(_equal(got, _normalized(*p.args, dims=dims)) for dims in [(0,), (0, 1)]) else (
            "on a single sentence (L, d_model) you normalized over the positions (or everything): layer norm acts on "
            "the last dimension, dim=-1, whatever comes in front.")
    for dims, what in [((0,), "the batch (dim=0)"), ((1,), "the positions (dim=1)"),
                       ((-2, -1), "each whole sentence"), ((0, 1, 2), "the whole tensor")]:
        if x.dim() == 3 and _equal(got, _normalized(*p.args, dims=dims)):
            return (f"you normalized over {what}: layer norm standardizes each position over its own d_model = "
                    f"{d_model} features, the last dimension: x.mean(dim=-1, keepdim=True), and the variance too.")
    return None


def _one_pass(got: torch.Tensor, p: Probe) -> str | None:
    x, gamma, beta, eps = p.args
    if not p.tags.get("offset"):
        return None
    error = got.double() - F.layer_norm(x.double(), x.shape[-1:], gamma.double(), beta.double(), eps)
    return (f"for features that share a large offset, {NORM_OFFSET:.0f} + a spread of about 1, your result is off by "
            f"up to {float(error.abs().nan_to_num(float('inf')).max()):.2g} (the course's float32 LayerNorm by less "
            "than 2e-4): is the variance computed in one pass, mean(x**2) - mean(x)**2? Both terms are near "
            f"{NORM_OFFSET**2:.0e}, and their difference is mostly float32's rounding (even negative). Subtract the "
            "mean first: x.var(dim=-1, keepdim=True, unbiased=False).")


def _norm_by(dims=(-1,), **options) -> Callable:
    """Layer norm over ``dims`` with one usual mistake (a known mistake's example), in x's dtype."""
    return lambda x, gamma, beta, eps: _normalized(x, gamma, beta, eps, dims, **options).to(x.dtype)


def _found(test: Callable) -> Callable:
    """A ``find`` on the numbers of the result: test(numbers, probe) -> message, or None."""
    return lambda found, p: None if found["values"] is None else test(found["values"], p)


NORM_MISTAKES = (
    Mistake("", "NaN for a constant position", find=_found(_norm_nan),
            example=lambda x, gamma, beta, eps: _norm_by()(x, gamma, beta, 0.0)),
    Mistake(lambda p: f"with eps={p.args[3]} your function gives what it gave with eps=1e-5: the eps argument is "
            "ignored (is 1e-5 written into your code?).", "eps ignored", when=lambda p: p.args[3] != 1e-5,
            like=lambda x, gamma, beta, eps: _norm_by()(x, gamma, beta, 1e-5)),
    Mistake("", "the variance, eps or gamma and beta", find=_found(_combined), example=_norm_by(unbiased=True)),
    Mistake("you divided x by the root of its mean square without subtracting the mean: that is RMS norm (later "
            "practice), not layer norm, (x - mean) / sqrt(var + eps).", "RMS norm", like=_norm_by(centred=False)),
    Mistake("the mean is not subtracted: divide x - mean by the standard deviation, (x - mean) / sqrt(var + eps).",
            "the mean not subtracted", like=_norm_by(centred=None)),
    Mistake("", "statistics over other dimensions", find=_found(_other_dims), example=_norm_by(dims=(1,))),
    Mistake("", "a one-pass variance", find=_found(_one_pass),
            example=lambda x, gamma, beta, eps: (lambda m: gamma * (x - m) / torch.sqrt(
                (x * x).mean(-1, keepdim=True) - m * m + eps) + beta)(x.mean(-1, keepdim=True))),
)


def _norm_hint(passed: list, sizes: dict, message: str) -> str:
    if "batch" not in sizes and any("batch" in p for p in passed):
        return ("\nHint: it works for (batch, L, d_model) inputs but not for a single sentence (L, d_model): compute "
                "the statistics over the last dimension, dim=-1, whatever comes in front.")
    if "h" in sizes:
        return ("\nHint: it works for (batch, L, d_model) and (L, d_model) inputs but not for (batch, h, L, d_model): "
                "compute the statistics over dim=-1, and read d_model as x.size(-1), not x.size(2).")
    return _hard_coded_hint(passed, sizes, message, "Read d_model from the input, x.size(-1), or use mean and var "
                            "over dim=-1.")


NORM = Declaration(
    check="check_layer_norm", function="layer_norm", roles=("x", "gamma", "beta", "eps"),
    reference=lambda x, gamma, beta, eps: F.layer_norm(x, x.shape[-1:], gamma, beta, eps), probes=_norm_probes,
    returns=Tensor("the normalized tensor"), mistakes=NORM_MISTAKES, sizes_fix=_norm_hint,
    passed=("check_layer_norm passed: {name} equals the course's LayerNorm and F.layer_norm on (batch, L, d_model), "
            "(L, d_model) and (batch, h, L, d_model) inputs, with eps 1e-5, 0.5 and 1 (an int), positions of very "
            f"different scales and a constant one, features sharing an offset of {NORM_OFFSET:.0f}, and in float64 "
            "with gradients reaching x, gamma and beta."),
)


def check_layer_norm(layer_norm: Callable) -> None:
    """Check ``layer_norm(x, gamma, beta, eps)`` against ``F.layer_norm`` on ``NORM_SIZES`` (positions of very
    different scales, one constant), eps 1e-5, 0.5 and 1, features sharing ``NORM_OFFSET`` and float64.

    Diagnoses: wrong shape (a batch of one squeezed away), dtype or device, an input changed in place, NaN on a constant
    position (no eps), the eps argument ignored, the unbiased variance, eps outside the square root, the variance
    instead of its root, gamma or beta missing or swapped (and two of these at once), RMS norm, the mean not subtracted,
    statistics over the batch, the positions or a whole sentence, a missing keepdim (hint), code that only works for
    3-dimensional inputs (or not for 4-dimensional ones), a one-pass variance mean(x^2) - mean(x)^2 (it cancels on the
    offset features), a result a second call overwrites, a float64 input computed in float32, and gradients that do not
    reach x, gamma or beta (@torch.no_grad(), .detach())."""
    check(NORM, layer_norm)


# ---------------------------------------------------------------- the residual connection (6.3)

_PRE, _POST = "x + dropout(sublayer(norm(x)))", "norm(x + dropout(sublayer(x)))"


def course_connection(x, sublayer, norm, dropout, norm_first: bool, keep=None) -> torch.Tensor:
    """The course's SublayerConnection with the given modules (the dropout as the mask ``keep``: F.dropout's)."""
    drop = dropout if keep is None else (lambda t: t * keep(t))
    if norm_first:
        return x + drop(sublayer(norm(x)))   # pre-norm
    return norm(x + drop(sublayer(x)))       # post-norm: the paper's LayerNorm(x + Sublayer(x))


def _connection_probes(device: str | None) -> list[Probe]:
    g, probes = torch.Generator().manual_seed(0), []

    def modules(d_model: int, dtype=torch.float32, training=True, p=DROPOUT_P) -> tuple:
        """The sublayer (the course's network), the norm (gamma and beta away from 1 and 0) and the dropout."""
        ffn = recorder.build(f"{__name__}._Sublayer", d_model=d_model, d_ff=3 * d_model)
        norm = recorder.build(f"{__name__}._Norm", normalized_shape=d_model)
        with torch.no_grad():
            for t in ffn.parameters():
                t.copy_(torch.randn(t.shape, generator=g) / t.size(-1) ** 0.5)
            norm.weight.copy_(torch.rand(d_model, generator=g) + 0.5)
            norm.bias.copy_(torch.randn(d_model, generator=g))
        return tuple(m.to(dtype).train(training) for m in (ffn, norm, _dropout(p, seed=2, training=training)))

    def probe(x, mods, norm_first, sizes=None, setting="", **options):
        order = f"with norm_first={norm_first} ({'pre-norm' if norm_first else 'post-norm'}): "
        label = f"{{what}} of {{name}}(x of shape {tuple(x.shape)}, sublayer, norm, dropout, norm_first={norm_first})"
        probes.append(_probe((x, *mods, norm_first), label + setting, course_connection, mods[2], dict(order=order),
                             sizes=sizes, **options))

    for sizes in SUBLAYER_SIZES:
        x, mods = torch.randn(*sizes.values(), generator=g) * 2 + 0.5, modules(sizes["d_model"])
        for norm_first in (False, True):  # a second call with the other order: the first result stays
            probe(x, mods, norm_first, sizes, again=(x, *mods, not norm_first))
    x = probes[0].args[0]  # the first set's
    for norm_first in (False, True):
        probe(x, modules(x.size(-1), training=False), norm_first, setting=", the modules in evaluation mode")
    for norm_first in (False, True):
        mods = modules(x.size(-1), torch.float64, p=0.0)
        for module, weight in zip(mods, ("W_1.weight", "weight")):  # as the old check: a bias's gradient, a sum of
            module.requires_grad_(False)                           # the recorder's weights, may be 0
            module.get_parameter(weight).requires_grad_()
        probe(x.double(), mods, norm_first, setting=", all float64", grad=(0, 1, 2))
    return probes


_USES = {"sublayer": "the residual connection wraps it, sublayer(...), and adds its output to x.",
         "dropout": "the paper applies dropout to the output of each sub-layer, before the residual sum (§5.4): "
                    "dropout(sublayer(...)), with the dropout passed in."}


def _connection_calls(found: dict, p: Probe) -> str | None:
    """A module never called, or called more than once (the check's sublayer differs at a second call)."""
    norm = "the layer norm forgotten? " + (
        f"Pre-norm normalizes the sublayer's input: {_PRE}. " if p.args[4] else
        f"Post-norm normalizes the sum: {_POST}. ") + "Use the norm passed in."
    for i, what in enumerate(("sublayer", "norm", "dropout"), 1):
        n = len(found["calls"][i].get("items", []))
        if n == 0 and (what != "dropout" or not p.tags["eval"]):
            return f"your function never called the {what} it was given: {_USES.get(what, norm)}"
        if n > 1 and what != "norm":
            return (f"your function called the {what} {n} times ({p.tags['order'][5:-2]}); call it once and reuse "
                    "the result.")
    return None


def _orders(found: dict, p: Probe) -> str | None:
    """The other order's result: norm_first ignored, or the two orders swapped (the second call's result)."""
    args, norm_first = _clone(p.args), p.args[4]
    if found["again"] is None or not _equal(found["values"], course_connection(*args[:4], not norm_first)):
        return None
    both = f"norm_first=False must give post-norm, {_POST}, and norm_first=True pre-norm, {_PRE}."
    if _equal(found["again"]["values"], course_connection(*_clone(p.args)[:4], norm_first)):
        return f"the orders are swapped: {both}"
    return f"norm_first is ignored: your function always computes {'post' if norm_first else 'pre'}-norm. {both}"


def _order(norm_first: bool, message: str, formula: Callable) -> Mistake:
    """A wrong formula of one order: formula(x, S, N, D)."""
    return Mistake(lambda p: p.tags["order"] + message, message.split(":")[0][:50],
                   when=lambda p: p.args[4] == norm_first, like=lambda x, S, N, D, norm_first: formula(x, S, N, D),
                   example=lambda x, S, N, D, first: (formula(x, S, N, D) if first == norm_first
                                                      else course_connection(x, S, N, D, first)))


CONNECTION_MISTAKES = (
    _functional_eval(course_connection, 3),
    Mistake("", "a module not called, or called twice", find=_connection_calls,
            example=lambda x, S, N, D, norm_first: course_connection(x, S, lambda t: t, D, norm_first)),
    Mistake("", "the orders swapped, or norm_first ignored", find=_orders,
            example=lambda x, S, N, D, norm_first: course_connection(x, S, N, D, not norm_first)),
    *(_order(True, message + _PRE + ".", formula) for message, formula in (
        ("the residual is added after the norm: norm(x) + dropout(sublayer(norm(x))). In pre-norm the residual path "
         "carries x itself, untouched (the identity path hands the gradient down a deep stack): ",
         lambda x, S, N, D: N(x) + D(S(N(x)))),
        ("a second norm at the end: pre-norm normalizes the sublayer's input only: ",
         lambda x, S, N, D: N(x + D(S(N(x))))),
        ("dropout is applied to the sum, so it drops parts of the residual x too: it belongs on the sublayer's "
         "output, ", lambda x, S, N, D: D(x + S(N(x)))),
        ("dropout is applied to the sublayer's input: it belongs on its output (§5.4), ",
         lambda x, S, N, D: x + S(D(N(x)))),
        ("the norm is applied to the sublayer's output: in pre-norm it comes first, ",
         lambda x, S, N, D: x + D(N(S(x)))),
        ("the residual is missing: add x, ", lambda x, S, N, D: D(S(N(x)))))),
    *(_order(False, message + _POST + ".", formula) for message, formula in (
        ("dropout is applied after the norm: it goes on the sublayer's output, before the sum (§5.4): ",
         lambda x, S, N, D: D(N(x + S(x)))),
        ("dropout is applied to the sum, so it drops parts of the residual x too: it belongs on the sublayer's "
         "output, ", lambda x, S, N, D: N(D(x + S(x)))),
        ("the norm is applied to the sublayer's output only: post-norm normalizes the sum, ",
         lambda x, S, N, D: x + N(D(S(x)))),
        ("the norm is applied to x only: post-norm normalizes the sum, ", lambda x, S, N, D: N(x) + D(S(x))),
        ("the residual is missing: add x before the norm, ", lambda x, S, N, D: N(D(S(x)))))),
)

CONNECTION = Declaration(
    check="check_sublayer_connection", function="sublayer_connection",
    roles=("x", "sublayer", "norm", "dropout", "norm_first"), reference=course_connection,
    probes=_connection_probes, returns=Tensor("the output"), mistakes=CONNECTION_MISTAKES,
    sizes_fix="Use x's own shape; the modules you are given work on any size.",
    passed=("check_sublayer_connection passed: {name} gives post-norm, norm(x + dropout(sublayer(x))), for "
            "norm_first=False and pre-norm, x + dropout(sublayer(norm(x))), for norm_first=True, as the course's "
            f"SublayerConnection does, for {len(SUBLAYER_SIZES)} sets of sizes, with the modules in training and in "
            "evaluation mode, and in float64 with gradients reaching x, the sublayer and the norm."),
)


def check_sublayer_connection(sublayer_connection: Callable) -> None:
    """Check ``sublayer_connection(x, sublayer, norm, dropout, norm_first)`` in both orders against
    ``SublayerConnection``, with the check's recording modules, on ``SUBLAYER_SIZES``, in training and evaluation
    mode and float64. The norm may be computed from its attributes; F.dropout with the module's p and mode passes.

    Diagnoses: wrong shape (a batch of one squeezed away), dtype or device, an input changed in place, the sublayer, the
    norm or the dropout never called (the sublayer or the dropout called twice), a module's mode changed (.eval() or
    .train() left behind), F.dropout dropping in evaluation mode, a result a second call overwrites, a float64 input
    computed in float32, gradients that do not reach x, the sublayer or the norm (@torch.no_grad(), .detach()), the
    orders swapped, norm_first ignored, and in post-norm: dropout after the norm or on the sum, the norm on the
    sublayer's output or on x only, the residual missing; in pre-norm: the residual added after the norm, a second norm
    at the end, dropout on the sum or on the sublayer's input, the norm after the sublayer, the residual missing."""
    check(CONNECTION, sublayer_connection)


DECLARATIONS = {d.check: d for d in (FFN, NORM, CONNECTION)}
