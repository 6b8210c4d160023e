"""The machinery every check of ``annotated.support.grading`` shares: calling the learner's
function safely, checking what it returns, comparing with the course's code, and running on
several sets of sizes.

Before any comparison, every call of the learner's function is checked the same way: its
tensor arguments must come back unchanged (a copy of each is kept), and each result must be
a tensor, real and floating (a complex, integer or bool result is named, never cast), of the
inputs' dtype and on their device. An exception of the function is reported with its type,
its message, the line of the function it came from and the shapes of the inputs.

Every check runs on two or three sets of sizes. Within a set all sizes differ, so a
transposed or swapped tensor shows in the shape; from one set to the next every size
changes, so an answer with a size written into it (``d_k = 4``, ``view(2, 3, 2, 4)``)
fails.
"""

import inspect
import os
import re
import traceback
from collections.abc import Callable

import torch

from annotated.support.errors import CourseError

# Tolerances of the comparisons: float32 sums in a different order differ by about 1e-6.
ATOL, RTOL = 1e-5, 1e-4
# The same for float64 inputs: float64 sums in another order differ by about 1e-15, and a step
# computed in float32 then converted back shows as an error of about 1e-7.
ATOL64, RTOL64 = 1e-10, 1e-8


class ExerciseFailed(CourseError, AssertionError):
    """A check found a mistake; the message says which one and how to fix it.

    In a notebook it shows as its message only: the frames of the check itself say
    nothing about the learner's code (an exception of the learner's function is named,
    with its line, in the message)."""

    def _render_traceback_(self) -> list[str]:  # IPython's hook for how an error is shown
        return f"{type(self).__name__}: {self}".splitlines()


def _generic(message: str) -> ExerciseFailed:
    """A failure no known mistake explains (an exception, a shape, a plain mismatch): when
    it appears only with the later sizes, the check adds that the sizes are the suspect."""
    err = ExerciseFailed(message)
    err.generic = True
    return err


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


_ORDINALS = ("first", "second", "third", "fourth", "fifth")
_TORCH_DIR = os.path.dirname(torch.__file__)
_IN_PLACE = (
    "A function must not change its inputs: whoever calls it uses them again (the model "
    "reuses its tensors after the call, and this check compares your result with results "
    "computed from them). Use operations that return a new tensor: `x = x / 2` rather than "
    "`x /= 2` or `x.div_(2)`, `x.transpose(1, 2)` rather than `x.transpose_(1, 2)`, `~mask` "
    "rather than `mask.logical_not_()`, `x.masked_fill(...)` rather than `x.masked_fill_(...)`: "
    "a method whose name ends in `_`, and `+=`, `-=`, `*=`, `/=` on a tensor, change it in place."
)


def _snapshot(args: tuple) -> list:
    """A copy of each tensor argument, with its shape and layout, to see afterwards whether the
    call changed it."""
    return [
        (a.detach().clone(), a.shape, a.stride(), a.storage_offset(), a.dtype)
        if torch.is_tensor(a) else None
        for a in args
    ]


def _change(arg: torch.Tensor, before: tuple) -> str | None:
    """How ``arg`` differs from its snapshot ``before``; None when it does not."""
    copy, shape, stride, offset, dtype = before
    if arg.shape != shape:
        return f"its shape went from {tuple(shape)} to {tuple(arg.shape)}"
    if arg.dtype != dtype:
        return f"its dtype went from {dtype} to {arg.dtype}"
    if arg.stride() != stride or arg.storage_offset() != offset:
        return "its layout in memory changed (a transpose_ of two dimensions of the same size?)"
    now = arg.detach()
    same = now == copy
    if now.is_floating_point():
        same |= now.isnan() & copy.isnan()
    if not same.all():
        return f"{int((~same).sum())} of its {same.numel()} numbers changed"
    return None


def _argument(fn: Callable, i: int, roles: tuple) -> str:
    """'its second argument `k` (the key)': the i-th argument, by position, name and role."""
    try:
        params = [p.name for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):  # a builtin or an object without a signature
        params = []
    return _named_argument(i, params, roles)


def _named_argument(i: int, params: list, roles: tuple) -> str:
    """The i-th argument described by its position, its name in ``params`` and its role."""
    ordinal = _ORDINALS[i] if i < len(_ORDINALS) else f"argument number {i + 1}"
    text = f"its {ordinal} argument"
    if i < len(params):
        text += f" `{params[i]}`"
    if i < len(roles) and (i >= len(params) or params[i] != roles[i]):
        text += f" (the {roles[i]})"
    return text


def _modified(fn: Callable, args: tuple, before: list, roles: tuple) -> str | None:
    """Which argument the call changed in place, and how; None when all are as they were."""
    for i, (arg, snapshot) in enumerate(zip(args, before)):
        how = _change(arg, snapshot) if snapshot is not None else None
        if how:
            return f"{_argument(fn, i, roles)} in place: {how}"
    return None


def _where(err: BaseException) -> str:
    """The line of the learner's code an exception came from: its last frame outside torch
    and this file (the first frame is the call in ``_call``)."""
    frames = [f for f in traceback.extract_tb(err.__traceback__)[1:]
              if not f.filename.startswith(_TORCH_DIR) and f.filename != __file__]
    if not frames:
        return ""
    frame = frames[-1]
    line = f": {frame.line.strip()}" if frame.line else ""
    return f"\n  in {frame.name}, line {frame.lineno}{line}"


def _call(fn: Callable, *args, hints: tuple = (), roles: tuple = ()):
    """Call the learner's function; an exception becomes a message that says where to look,
    and a function that changes one of its inputs is named.

    ``hints`` are extra (pattern, hint) pairs: a hint is added when its pattern is found in
    the exception's message. ``roles`` name the arguments (query, key, ...)."""
    name = getattr(fn, "__name__", "your function")
    before = _snapshot(args)
    try:
        result = fn(*args)
    except NotImplementedError as err:
        frames = [f for f in traceback.extract_tb(err.__traceback__)[1:]
                  if not f.filename.startswith(_TORCH_DIR) and f.filename != __file__]
        inner = frames[-1].name if frames else name
        if inner not in (name, "<module>"):  # an earlier exercise that this one calls
            raise ExerciseFailed(
                f"{name} calls {inner}, which raised NotImplementedError: that earlier exercise is "
                f"not done yet. Write {inner} first (its cell says `# YOUR CODE HERE`), run its "
                "cell, then run this cell and this check again."
            ) from None
        raise ExerciseFailed(
            f"{name} raised NotImplementedError: the exercise is not done yet. Replace "
            "`# YOUR CODE HERE` and `raise NotImplementedError()` in its cell with your code, "
            "run that cell, then run this check again."
        ) from None
    except (Exception, SystemExit) as err:  # SystemExit: exit() or sys.exit() in the function
        text = str(err)
        hint = ""
        if "view size is not compatible" in text:
            # The classic merge mistake: transpose(1, 2) then view.
            hint = (
                "\nHint: after transpose(1, 2) the tensor is no longer contiguous in memory, so "
                ".view cannot merge its dimensions; use .reshape(...) (or .contiguous().view(...))."
            )
        fixed = re.search(r"shape '(\[[-\d, ]*\])' is invalid for input of size (\d+)", text)
        if fixed:
            hint = (
                f"\nHint: your function reshapes to the fixed shape {fixed.group(1)}, which does "
                f"not fit the {fixed.group(2)} numbers of this input: is a size written into your "
                "code? Read every size from the input's shape (batch, L, d_model = x.shape); the "
                "check calls your function with several sizes."
            )
        if isinstance(err, SystemExit):
            hint = "\nHint: exit() and sys.exit() stop the program; return the result instead."
        if isinstance(err, TypeError) and len(traceback.extract_tb(err.__traceback__)) == 1:
            # The call itself failed, before any line of the function ran: its parameters.
            passed = ", ".join(roles[: len(args)]) or f"{len(args)} arguments"
            hint = (f"\nHint: the check calls {name}({passed}) here: give your function the "
                    "parameters of the exercise's `def` line.")
        for pattern, extra in hints:
            if re.search(pattern, text):
                hint += extra
        message = f"{name}({_describe(args)}) raised {type(err).__name__}: {err}{_where(err)}{hint}"
        changed = _modified(fn, args, before, roles)
        if changed:
            message += (f"\nBefore that, {name} changed {changed}; a function must not change "
                        "its inputs: use operations that return a new tensor.")
        raise _generic(message) from err
    changed = _modified(fn, args, before, roles)
    if changed:
        raise ExerciseFailed(f"{name} changed {changed}. {_IN_PLACE}")
    return result


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


# Why inputs of another dtype come back float32: the two usual causes, and the fix of each.
_TO_FLOAT32 = (
    "A float32 result usually comes from a .float() (or .to(torch.float32)) \"for safety\", "
    "from a one-hot or mask turned into numbers with .float(), or from a tensor created without "
    "dtype= (torch.zeros, torch.ones, torch.full, torch.empty and torch.tensor of Python floats "
    "are float32 unless told otherwise). Convert to the input's dtype instead, .to(x.dtype), "
    "and create tensors with dtype=x.dtype (or torch.zeros_like(x))."
)


def _shape(got: torch.Tensor, expected: tuple, what: str, hint: str = "") -> None:
    if tuple(got.shape) != tuple(expected):
        raise _generic(
            f"wrong shape for {what}: expected {tuple(expected)}, got {tuple(got.shape)}.{hint}"
        )


def _same(got: torch.Tensor, candidate: torch.Tensor, atol: float = ATOL) -> bool:
    """True when ``got`` equals ``candidate`` up to float32 rounding (NaN never equals)."""
    if got.shape != candidate.shape:
        return False
    return torch.allclose(got.double(), candidate.double(), atol=atol, rtol=RTOL)


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


# ---------------------------------------------------------------- helpers every check can use


def _float64(*tensors: torch.Tensor) -> tuple:
    """float64 copies of the floating tensors among ``tensors`` (the others as they are), for a
    pass in float64."""
    return tuple(t.double() if torch.is_tensor(t) and t.is_floating_point() else t
                 for t in tensors)


def _modes(module: torch.nn.Module) -> dict:
    """The training flag of ``module`` and of each of its submodules, by name, to compare
    before and after a call."""
    return {n or "the model": m.training for n, m in module.named_modules()}


def _squeezed(got_shape, expected_shape) -> str:
    """A hint for a result whose shape is ``expected_shape`` with dimensions of size 1 dropped
    (a ``.squeeze()``, which drops a batch of one sentence or a single query too); "" otherwise.
    Add it to the message of a wrong shape (``_shape(got, expected, what, hint)``)."""
    got, expected = tuple(got_shape), tuple(expected_shape)
    if got == expected or len(got) >= len(expected) or 1 not in expected:
        return ""
    i = 0  # match got as a subsequence of expected, skipping only sizes 1
    for size in expected:
        if i < len(got) and got[i] == size:
            i += 1
        elif size != 1:
            return ""
    if i != len(got):
        return ""
    return (" Your result lost dimensions of size 1: .squeeze() without a dimension drops every "
            "dimension of size 1, so a batch of one sentence, a single query or a single key "
            "loses its dimension too. Leave the shape alone, or squeeze only a dimension you "
            "added yourself, .squeeze(dim).")
