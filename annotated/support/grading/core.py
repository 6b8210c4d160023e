"""What every check of ``annotated.support.grading`` shares: the failure it raises, the tolerances of its
comparisons, and messages about the learner's function that the engine and the chapter modules write.

Every check runs on two or three sets of sizes. Within a set all sizes differ, so a transposed or swapped
tensor shows in the shape; from one set to the next every size changes, so an answer with a size written
into it (``d_k = 4``, ``view(2, 3, 2, 4)``) fails.
"""

import torch

from annotated.support.errors import CourseError

# float32 sums in another order differ by about 1e-6; float64's by about 1e-15 (a step computed in float32
# then converted back, by about 1e-7).
ATOL, RTOL = 1e-5, 1e-4
ATOL64, RTOL64 = 1e-10, 1e-8


class ExerciseFailed(CourseError, AssertionError):
    """A check found a mistake; the message says which one and how to fix it. In a notebook it shows as its
    message only: the check's own frames say nothing about the learner's code."""

    def _render_traceback_(self) -> list[str]:  # IPython's hook for how an error is shown
        return f"ExerciseFailed: {self}".splitlines()


def _describe(args: tuple) -> str:
    """The arguments of a call, short: a tensor by its shape, a module of several lines by its class."""
    def short(a) -> str:
        if torch.is_tensor(a):
            return f"tensor of shape {tuple(a.shape)}"
        text = repr(a)
        if isinstance(a, torch.nn.Module) and ("\n" in text or len(text) > 40):
            return f"a {type(a).__name__} module"  # not its whole structure
        return text
    return ", ".join(short(a) for a in args)


def _a(word: str) -> str:
    return f"{'an' if word[:1].lower() in 'aeiou' else 'a'} {word}"


def _function(fn, check: str, what: str) -> str:
    """The name of the learner's function ``fn``; anything that cannot be called is refused."""
    if callable(fn):
        return getattr(fn, "__name__", what)
    if fn is None:
        got = "None (the result of calling a function that returns nothing?)"
    elif isinstance(fn, str):
        got = f"the string {fn!r}"
    elif torch.is_tensor(fn) or isinstance(fn, (tuple, list)):
        size = f"shape {tuple(fn.shape)}" if torch.is_tensor(fn) else f"{len(fn)} items"
        got = f"a {type(fn).__name__} of {size} (the result of calling your function?)"
    else:
        got = _a(type(fn).__name__)
    raise ExerciseFailed(
        f"{check} takes your function itself and calls it on inputs of its own, but it got {got}. "
        f"Pass the function's name, without parentheses or arguments: {check}({what})."
    )


def _named_argument(i: int, params: list, roles: tuple) -> str:
    """'its second argument `k` (the key)': the i-th argument, by position, its name in ``params`` and role."""
    ordinal = ("first", "second", "third", "fourth", "fifth")[i] if i < 5 else f"argument number {i + 1}"
    text = f"its {ordinal} argument"
    if i < len(params):
        text += f" `{params[i]}`"
    if i < len(roles) and (i >= len(params) or params[i] != roles[i]):
        text += f" (the {roles[i]})"
    return text


_IN_PLACE = (
    "A function must not change its inputs: whoever calls it uses them again (the model reuses its tensors after the "
    "call, and this check compares your result with results computed from them). Use operations that return a new "
    "tensor: `x = x / 2` rather than `x /= 2` or `x.div_(2)`, `x.transpose(1, 2)` rather than `x.transpose_(1, 2)`, "
    "`~mask` rather than `mask.logical_not_()`, `x.masked_fill(...)` rather than `x.masked_fill_(...)`: a method "
    "whose name ends in `_`, and `+=`, `-=`, `*=`, `/=` on a tensor, change it in place."
)


_DTYPE_HINTS = {
    "complex": (
        "A complex result carries an imaginary part that a real model cannot use (casting it "
        "to a real dtype would silently drop it): keep every step real, with no 1j, no "
        "torch.complex or torch.fft, and no Python number such as (-2) ** 0.5, which is complex."
    ),
    "bool": "A bool tensor is a comparison or a mask, not numbers: return the computed values.",
    "integer": (
        "An integer tensor has lost the fractions: compute in floating point (torch.arange(n) "
        "is int64 unless given dtype=torch.float32) and do not convert with .long() or .int()."
    ),
}


# Why inputs of another dtype come back float32: the usual causes, and the fix.
_TO_FLOAT32 = (
    "A float32 result usually comes from a .float() (or .to(torch.float32)) \"for safety\", from a one-hot or mask "
    "turned into numbers with .float(), or from a tensor created without dtype= (torch.zeros, torch.ones, torch.full, "
    "torch.empty and torch.tensor of Python floats are float32 unless told otherwise). Convert to the input's dtype "
    "instead, .to(x.dtype), and create tensors with dtype=x.dtype (or torch.zeros_like(x))."
)


def _same(got: torch.Tensor, candidate: torch.Tensor, atol: float = ATOL) -> bool:
    """True when ``got`` equals ``candidate`` up to float32 rounding (NaN never equals)."""
    return got.shape == candidate.shape and torch.allclose(got.double(), candidate.double(), atol=atol, rtol=RTOL)


def _rows(weights: torch.Tensor) -> str:
    return "[" + ", ".join(f"{s:.4f}" for s in weights.sum(-1).flatten()[:6].tolist()) + ", ...]"


def _sizes(sizes: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in sizes.items())


def _hard_coded_hint(passed: list, sizes: dict, message: str, how: str) -> str:
    before = "; ".join(f"({_sizes(p)})" for p in passed)
    hint = f"\nHint: the same function passed with {before} but not with ({_sizes(sizes)})"
    if "written into your code" in message:  # the message already says what to do
        return hint + "."
    return f"{hint}: is a size written into your code? {how}"


def _squeezed(got_shape, expected_shape) -> str:
    """The hint for a result whose shape is ``expected_shape`` with dimensions of size 1 dropped (a
    ``.squeeze()``, which drops a batch of one sentence or a single query too); "" otherwise."""
    got, expected = tuple(got_shape), tuple(expected_shape)
    if got == expected or len(got) >= len(expected) or 1 not in expected:
        return ""
    i = 0  # match got as a subsequence of expected, skipping only sizes 1
    for size in expected:
        if i < len(got) and got[i] == size:
            i += 1
        elif size != 1:
            return ""
    return "" if i != len(got) else (
        " Your result lost dimensions of size 1: .squeeze() without a dimension drops every dimension of size 1, so "
        "a batch of one sentence, a single query or a single key loses its dimension too. Leave the shape alone, or "
        "squeeze only a dimension you added yourself, .squeeze(dim).")
