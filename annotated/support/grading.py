"""Checks for the exercises in ``exercises/``: each runs a learner's function on small
inputs, compares the result with the course's own code, and names the mistake when there
is one.

    from annotated.support.grading import check_attention
    check_attention(attention)   # prints one line when it passes, raises ExerciseFailed if not

The references: ``torch.nn.functional.scaled_dot_product_attention`` and
``annotated.attention.scaled_dot_product_attention`` (notebook 02), the head split and
merge of ``annotated.multi_head.MultiHeadAttention`` (notebook 04) and
``annotated.positional.sinusoidal_table`` (notebook 05). Each check first compares with a
list of typical mistakes, so a wrong answer gets a diagnosis rather than a table of numbers.

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
import math
import os
import re
import traceback
import warnings
from collections.abc import Callable

import torch
import torch.nn.functional as F

from annotated.attention import scaled_dot_product_attention
from annotated.positional import sinusoidal_table
from annotated.support.errors import CourseError

# Tolerances of the comparisons: float32 sums in a different order differ by about 1e-6.
ATOL, RTOL = 1e-5, 1e-4

# The sizes each check runs. Attention: two 3-D sets (batch, L, d) and one 4-D set
# (batch, h, L, d), as multi-head attention calls it; d_k is never 4, the d_k of a
# hand-worked example, no size repeats inside a set, and d_k changes between sets.
ATTENTION_SIZES = [
    dict(lead=(2,), L_q=3, L_k=5, d_k=6, d_v=7),
    dict(lead=(3,), L_q=7, L_k=4, d_k=10, d_v=5),
    dict(lead=(4, 5), L_q=2, L_k=6, d_k=9, d_v=3),  # lead = (batch, h)
]
HEAD_SIZES = [dict(batch=2, L=3, h=5, d_k=6), dict(batch=4, L=7, h=2, d_k=3)]
TABLE_SIZES = [(50, 16), (9, 22), (120, 6)]  # (max_len, d_model)


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
    return ", ".join(
        f"tensor of shape {tuple(a.shape)}" if torch.is_tensor(a) else repr(a) for a in args
    )


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
    ordinal = _ORDINALS[i] if i < len(_ORDINALS) else f"argument number {i + 1}"
    try:
        params = [p.name for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):  # a builtin or an object without a signature
        params = []
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
    except NotImplementedError:
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


def _tensor(result, name: str, what: str, like: torch.Tensor | None = None) -> torch.Tensor:
    """``result`` as the tensor it must be, checked before any comparison converts it: a dense,
    real floating tensor on the device of ``like`` (an input) and of its dtype; without
    ``like``, on the CPU and of any real floating dtype (the caller checks which)."""
    if result is None:
        raise ExerciseFailed(f"{name} returned None: did you forget the `return` of {what}?")
    if not torch.is_tensor(result):
        hint = ""
        if isinstance(result, tuple):
            hint = f" of length {len(result)}: return the tensor itself, not a tuple"
        elif type(result).__module__ == "numpy" or isinstance(result, (list, int, float)):
            hint = (": keep to torch operations, which return tensors (no .numpy(), .tolist() "
                    "or .item())")
        raise ExerciseFailed(
            f"{name} should return {what} as a tensor, got {type(result).__name__}{hint}"
        )
    device = like.device if like is not None else torch.device("cpu")
    if result.device != device:
        where = (f"the inputs are on {device}: build every tensor where the inputs are, with no "
                 ".cuda() or .to(...), and device=x.device (an input's) for a tensor you create."
                 if like is not None else
                 "the check expects it on the cpu, where torch creates tensors unless told "
                 "otherwise: leave out .cuda(), .to(...) and device=... (a model moves its "
                 "tensors with model.to(device)).")
        raise ExerciseFailed(f"{name} returned {what} on the device {result.device}, but {where}")
    if result.layout != torch.strided:
        raise ExerciseFailed(
            f"{name} returned {what} as a {result.layout} tensor; return an ordinary (dense) "
            "tensor, without .to_sparse()."
        )
    expected = like.dtype if like is not None else torch.float32
    if not result.dtype.is_floating_point:
        same = ", the dtype of the inputs" if like is not None else ""
        kind = ("complex" if result.is_complex() else "bool" if result.dtype == torch.bool
                else "integer")
        raise ExerciseFailed(
            f"{name} returned {what} as a {result.dtype} tensor, {_a(kind)} one; expected a real "
            f"floating tensor, {expected}{same}. {_DTYPE_HINTS[kind]}"
        )
    if like is not None and result.dtype != expected:
        raise ExerciseFailed(
            f"{name} returned {what} as {result.dtype} for {expected} inputs; it must keep the "
            f"dtype of its inputs, {expected} (in a model, another dtype changes the precision, "
            "or the dtype, of every later step). Remove the conversion (.double(), .half(), "
            ".to(...)) or the dtype=... of a tensor you create."
        )
    return result


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


def _assert_close(got: torch.Tensor, expected: torch.Tensor, what: str, atol: float = ATOL) -> None:
    """The last resort when no known mistake fits: NaN or inf named as such, otherwise
    torch's report of what differs where."""
    if got.shape == expected.shape:
        bad = ~got.isfinite() & expected.isfinite()
        if bad.any():
            first = tuple(bad.nonzero()[0].tolist())
            raise _generic(
                f"{what} contains NaN or inf in {int(bad.sum())} of its {bad.numel()} numbers, "
                f"where the reference has finite numbers (the first at index {first}: "
                f"{got[first].item()} instead of {expected[first].item():.4g}). Look for a "
                "division by zero, a log or sqrt of a number <= 0, or a tensor left uninitialized "
                "(torch.empty)."
            )
    try:
        torch.testing.assert_close(got.double(), expected.double(), atol=atol, rtol=RTOL)
    except AssertionError as err:
        raise _generic(f"mismatch in {what}, compared with the reference:\n{err}") from None


def _rows(weights: torch.Tensor) -> str:
    return "[" + ", ".join(f"{s:.4f}" for s in weights.sum(-1).flatten()[:6].tolist()) + ", ...]"


def _sizes(sizes: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in sizes.items())


def _run_on_all_sizes(check_once: Callable, size_sets: list, describe: Callable) -> None:
    """Run ``check_once(sizes)`` on each set; a failure no known mistake explains that shows
    only after earlier sets passed gets a hint that a size is written into the code."""
    passed = []
    for sizes in size_sets:
        try:
            check_once(sizes)
        except ExerciseFailed as err:
            if passed and getattr(err, "generic", False):
                raise ExerciseFailed(f"{err}{describe(passed, sizes, str(err))}") from None
            raise
        passed.append(sizes)


def _hard_coded_hint(passed: list, sizes: dict, message: str, how: str) -> str:
    before = "; ".join(f"({_sizes(p)})" for p in passed)
    hint = f"\nHint: the same function passed with {before} but not with ({_sizes(sizes)})"
    if "written into your code" in message:  # the message already says what to do
        return hint + "."
    return f"{hint}: is a size written into your code? {how}"


# ---------------------------------------------------------------- exercise 02: attention

# The errors of a matrix product whose shapes do not fit: what query @ key.T gives.
_MATMUL_ERROR = (r"must match the size of tensor|cannot be multiplied|Expected size for first two"
                 r"|size mismatch|mat1 and mat2|\bx\.T\b")
_TRANSPOSE_HINT = (
    "\nHint: the scores query @ key^T need the last two dimensions of the key swapped, "
    "(..., L_k, d_k) -> (..., d_k, L_k): key.transpose(-2, -1), not key.transpose(1, 2) or "
    "key.T. key.T reverses all the dimensions of a tensor with more than two ((batch, L_k, d_k) "
    "becomes (d_k, L_k, batch)), and key.transpose(1, 2) is right for 3-D inputs only."
)


_ROLES = ("query", "key", "value", "mask")


def _call_attention(attention: Callable, *args):
    """Call the learner's attention; ``key.T`` on a 3-D or 4-D key is named, whether the
    shapes then fail or happen to fit, from the warning torch gives for it."""
    warn_always = torch.is_warn_always_enabled()
    torch.set_warn_always(True)  # torch warns about x.T once per process otherwise
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                hints = ((_MATMUL_ERROR, _TRANSPOSE_HINT),)
                result, error = _call(attention, *args, hints=hints, roles=_ROLES), None
            except ExerciseFailed as err:
                result, error = None, err
    finally:
        torch.set_warn_always(warn_always)
    if any("x.T" in str(w.message) for w in caught):
        raise ExerciseFailed(
            "you used .T on a tensor with more than two dimensions (key.T?): .T reverses all of "
            "them, so a key (batch, L_k, d_k) becomes (d_k, L_k, batch), and the scores pair the "
            "wrong numbers or fail (torch warns that this use of .T is deprecated). Swap the "
            "last two dimensions only: key.transpose(-2, -1) (or key.mT)."
        )
    if error is not None:
        raise error
    return result


def _attention_pair(result, name: str, sizes: dict,
                    query: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Unpack (output, weights) and check both: tensors of the query's dtype and device, and
    their shapes."""
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        got = type(result).__name__
        if torch.is_tensor(result):
            got = f"one tensor of shape {tuple(result.shape)}"
        elif isinstance(result, (tuple, list)):
            kinds = ", ".join(type(r).__name__ for r in result)
            got = f"a {got} of {len(result)} items ({kinds})"
        raise ExerciseFailed(f"{name} should return a pair (output, weights), got {got}")
    output = _tensor(result[0], name, "the output", like=query)
    weights = _tensor(result[1], name, "the weights", like=query)
    L_q, L_k, d_v, lead = sizes["L_q"], sizes["L_k"], sizes["d_v"], tuple(sizes["lead"])
    hint = ""
    if tuple(weights.shape) == (*lead, L_k, L_q):
        hint = (" Your weights are transposed: one row per query and one column per key comes "
                "from query @ key.transpose(-2, -1).")
    _shape(weights, (*lead, L_q, L_k), "the weights (..., L_q, L_k)", hint)
    _shape(output, (*lead, L_q, d_v), "the output (..., L_q, d_v)")
    return output, weights


def _fitted_scale(weights: torch.Tensor, raw: torch.Tensor) -> float | None:
    """The c for which weights == softmax(raw / c), or None when no such c fits.

    log weights - their row mean == (raw - its row mean) / c: a least-squares fit of 1/c."""
    weights, raw = weights.double(), raw.double()
    if not (weights > 0).all():
        return None
    centred_log = weights.log() - weights.log().mean(-1, keepdim=True)
    centred_raw = raw - raw.mean(-1, keepdim=True)
    inverse = float((centred_log * centred_raw).sum() / (centred_raw**2).sum())
    if inverse <= 0 or not _same(weights, (raw * inverse).softmax(-1), atol=1e-4):
        return None
    return 1 / inverse


def _scale_mistake(weights: torch.Tensor, raw: torch.Tensor, sizes: dict) -> str | None:
    """Name a wrong scaling of the scores, if the weights are softmax(raw / c) for a wrong c."""
    d_k = sizes["d_k"]
    mistakes = [
        (1.0, "you forgot the 1/sqrt(d_k) scaling: your weights equal softmax(Q K^T) without the "
              f"division by sqrt(d_k) = {math.sqrt(d_k):.4g}. Divide the scores by "
              "math.sqrt(d_k) before the softmax (paper §3.2.1)."),
        (d_k, f"you divided the scores by d_k = {d_k} instead of sqrt(d_k) = {math.sqrt(d_k):.4g}: "
              "use math.sqrt(d_k)."),
        (1 / math.sqrt(d_k), "you multiplied the scores by sqrt(d_k) instead of dividing by it."),
    ]
    for c, message in mistakes:
        if _same(weights, (raw / c).softmax(-1)):
            return message
    c = _fitted_scale(weights, raw)
    if c is None or math.isclose(c, math.sqrt(d_k), rel_tol=1e-3):
        return None
    # A square root of another size of the inputs: d_k read from the wrong dimension.
    names = {f"dimension {i} of the query": n for i, n in enumerate(sizes["lead"])}
    names.update({"L_q, dimension -2 of the query": sizes["L_q"], "L_k, the number of keys":
                  sizes["L_k"], "d_v, the width of the values": sizes["d_v"]})
    for what, n in names.items():
        if math.isclose(c * c, n, rel_tol=1e-3):
            return (
                f"you divided the scores by sqrt({n}) = {c:.4g}, and {n} is {what} here, not "
                f"d_k = {d_k}: read d_k from the last dimension, d_k = query.size(-1), which is "
                "right whatever dimensions come in front."
            )
    return (
        f"you divided the scores by {c:.4g}, but here d_k = {d_k}, so sqrt(d_k) = "
        f"{math.sqrt(d_k):.4g}: is d_k (or its square root) written into your code? The check "
        "runs several sizes: read it from the input, d_k = query.size(-1), and divide by "
        "math.sqrt(d_k)."
    )


def _reference(q, k, v, mask=None, with_torch: bool = True):
    """The course's attention; checked against PyTorch's where no query is fully masked
    (PyTorch gives such a query NaN, the course zero)."""
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    if with_torch:
        torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    return out, weights


def _padding_mask(sizes: dict) -> torch.Tensor:
    """(batch, 1, L_k), or (batch, 1, 1, L_k) with heads: sequence b has L_k - 1 - b keys
    (at least 1), so every sequence hides some keys and every query sees some."""
    batch, L_k = sizes["lead"][0], sizes["L_k"]
    lengths = torch.tensor([max(1, L_k - 1 - b) for b in range(batch)])
    mask = torch.arange(L_k) < lengths.unsqueeze(1)  # (batch, L_k)
    return mask.view(batch, *[1] * len(sizes["lead"]), L_k)


def _check_masked(name: str, sizes: dict, mask, weights, output, expected, unmasked, what) -> None:
    """Diagnose the weights of a mask under which every query sees at least one key."""
    full = mask.expand(*sizes["lead"], sizes["L_q"], sizes["L_k"])
    hidden = weights[~full]
    if weights.isnan().any():
        raise ExerciseFailed(
            f"with {what} your weights contain NaN although every query may attend to some key; "
            "fill the masked scores with float('-inf') (not the weights), before the softmax."
        )
    if not _same(hidden, torch.zeros_like(hidden)):
        if _same(weights[full], torch.zeros_like(weights[full])):
            raise ExerciseFailed(
                "your mask is inverted: keys where the mask is True got zero weight. True means "
                "'may attend', so hide the keys where it is False: scores.masked_fill(~mask, "
                "float('-inf'))."
            )
        if _same(weights, unmasked):
            raise ExerciseFailed(
                f"the mask was ignored: with {what} your weights are the same as without one. "
                "Fill the scores where the mask is False with float('-inf') before the softmax."
            )
        raise ExerciseFailed(
            f"with {what}, keys where the mask is False still get weight (up to "
            f"{hidden.abs().max():.4f}); fill their scores with float('-inf') before the softmax "
            "so they get exactly 0."
        )
    expected_out, expected_w = expected
    if not _same(weights, expected_w):
        if _same(weights, unmasked * full):
            raise ExerciseFailed(
                "the mask was applied after the softmax: the masked keys got weight 0, but the "
                f"rows no longer sum to 1 (sums {_rows(weights)}). Mask the scores with "
                "float('-inf') before the softmax, so the softmax shares the weight among the "
                "keys that remain."
            )
        _assert_close(weights, expected_w, f"the attention weights with {what}")
    _assert_close(output, expected_out, f"the output with {what}")


def _check_attention_once(attention: Callable, name: str, sizes: dict, g: torch.Generator) -> None:
    lead, L_q, L_k, d_k, d_v = sizes["lead"], sizes["L_q"], sizes["L_k"], sizes["d_k"], sizes["d_v"]
    q = torch.randn(*lead, L_q, d_k, generator=g)
    k = torch.randn(*lead, L_k, d_k, generator=g)
    v = torch.randn(*lead, L_k, d_v, generator=g)
    raw = q @ k.transpose(-2, -1)  # unscaled scores (..., L_q, L_k)
    unmasked = (raw / math.sqrt(d_k)).softmax(-1)
    ones = (1,) * len(lead)

    # 1. No mask.
    expected_out, expected_w = _reference(q, k, v)
    output, weights = _attention_pair(_call_attention(attention, q, k, v), name, sizes, q)
    if weights.isnan().any():
        raise ExerciseFailed("the weights contain NaN although no mask was given")
    if not _same(weights.sum(-1), torch.ones(*lead, L_q)):
        if _same(weights.sum(-2), torch.ones(*lead, L_k)):
            raise ExerciseFailed(
                "softmax over the wrong dimension: each column of your weights sums to 1 "
                "(softmax(dim=-2), over the queries), but each query's weights over the keys, "
                "a row, must sum to 1: use softmax(dim=-1)."
            )
        raise ExerciseFailed(
            f"the rows of your weights should each sum to 1 (a softmax over the keys, dim=-1); "
            f"their sums are {_rows(weights)}"
        )
    if not _same(weights, expected_w):
        message = _scale_mistake(weights, raw, sizes)
        if message:
            raise ExerciseFailed(message)
        _assert_close(weights, expected_w, "the attention weights (no mask)")
    _assert_close(output, expected_out, "the output weights @ value (no mask)")

    # 2. A padding mask, (batch, 1, L_k): the same keys hidden from every query.
    mask = _padding_mask(sizes)
    result = _call_attention(attention, q, k, v, mask)
    output, weights = _attention_pair(result, name, sizes, q)
    _check_masked(name, sizes, mask, weights, output, _reference(q, k, v, mask), unmasked,
                  "a padding mask")

    # 3. The same mask, and each hidden key's score far above the kept ones (about 1e4 / sqrt(d_k)
    # more). Masking after the softmax and renormalizing agrees with masking before until here:
    # exp(kept - hidden) underflows to 0, even in float64, and 0 / 0 is NaN.
    q_big = q.clone()
    q_big[..., 0] = q[..., 0].abs() + 1  # every query positive along dimension 0
    hidden_keys = (~mask).transpose(-2, -1) & (torch.arange(d_k) == 0)  # (..., L_k, d_k)
    k_big = torch.where(hidden_keys, torch.tensor(1e4), k)
    raw_big = q_big @ k_big.transpose(-2, -1) / math.sqrt(d_k)
    expected = _reference(q_big, k_big, v, mask)
    output, weights = _attention_pair(_call_attention(attention, q_big, k_big, v, mask), name,
                                      sizes, q_big)
    kept_sums = weights.double().sum(-1)
    if weights.isnan().any() or (kept_sums < 0.5).any():
        full = mask.expand_as(raw_big)
        raise ExerciseFailed(
            "the weights of the kept keys vanish (NaN or 0, row sums "
            f"{_rows(weights)}) when a masked key's score is far above theirs (scaled scores here: "
            f"masked keys {raw_big[~full].min():.0f} or more, kept keys {raw_big[full].max():.1f} "
            "or less): that is the "
            "softmax taken over all the keys, the masked weights zeroed and the rest renormalized "
            "afterwards. It agrees with masking first only while the kept weights stay above "
            "zero; here exp(kept - max) underflows to 0 and renormalizing gives 0 / 0. Fill the "
            "masked scores with float('-inf') before the softmax, so a masked key takes no part "
            "in it."
        )
    _check_masked(name, sizes, mask, weights, output, expected, raw_big.softmax(-1),
                  "a padding mask and a masked key of large score")

    # 4. A causal mask, (1, L_q, L_k): query i sees keys 0 .. i, the same for every sequence.
    mask = torch.ones(L_q, L_k, dtype=torch.bool).tril().view(*ones, L_q, L_k)
    output, weights = _attention_pair(_call_attention(attention, q, k, v, mask), name, sizes, q)
    _check_masked(name, sizes, mask, weights, output, _reference(q, k, v, mask), unmasked,
                  "a causal mask (1, L_q, L_k)")

    # 5. A query whose keys are all masked: zero weights and zero output, not NaN.
    mask = torch.rand(*lead, L_q, L_k, generator=g) > 0.4
    mask[..., 0] = True
    mask.view(-1, L_q, L_k)[0, 1] = False  # query 1 of the first sequence may attend to nothing
    expected_out, expected_w = _reference(q, k, v, mask, with_torch=False)
    output, weights = _attention_pair(_call_attention(attention, q, k, v, mask), name, sizes, q)
    if weights.isnan().any() or output.isnan().any():
        raise ExerciseFailed(
            "a query whose keys are all masked gets NaN: the softmax of a row of -inf is 0/0. "
            "Such a query sees nothing, so the course gives it zero weights: after the "
            "softmax, weights.masked_fill(~mask, 0.0)."
        )
    if _same(weights.reshape(-1, L_q, L_k)[0, 1], torch.full((L_k,), 1 / L_k)):
        raise ExerciseFailed(
            f"a query whose keys are all masked got uniform weights 1/L_k = {1 / L_k:.4f}: the "
            "scores were filled with a finite number (such as -1e9), so the softmax spread evenly "
            "over keys it may not see. The course gives such a query zero weights: after the "
            "softmax, weights.masked_fill(~mask, 0.0)."
        )
    _assert_close(weights, expected_w, "the attention weights with a fully masked row")
    _assert_close(output, expected_out, "the output with a fully masked row")


def _attention_hint(passed: list, sizes: dict, message: str) -> str:
    if len(sizes["lead"]) > len(passed[-1]["lead"]):
        hint = (
            "\nHint: it works for (batch, L, d) inputs but not for (batch, h, L, d): every step "
            "must act on the last dimensions, whatever comes in front (d_k = query.size(-1), "
            "softmax(dim=-1)"
        )
        if _TRANSPOSE_HINT in message:
            return hint + ")."
        return hint + (", and transpose the last two dimensions of the key, "
                       "key.transpose(-2, -1), not key.transpose(1, 2) or key.T).")
    return _hard_coded_hint(passed, sizes, message,
                            "Read every size from the inputs, d_k = query.size(-1).")


def check_attention(attention: Callable) -> None:
    """Check ``attention(query, key, value, mask=None) -> (output, weights)``.

    Runs three sets of sizes (``ATTENTION_SIZES``), the last with heads in front, each
    without a mask, with a padding mask (batch, 1, L_k), with a masked key whose score
    dwarfs the kept ones, with a causal mask (1, L_q, L_k) and with a query whose keys are
    all masked. Masks have as many dimensions as the scores.

    Diagnoses: an input changed in place, a result of another kind (not a pair of real
    floating tensors of the inputs' dtype and device), wrong shapes, softmax over the wrong
    dimension, a missing or wrong 1/sqrt(d_k) scaling (d_k hard-coded or read from the
    wrong dimension too), a mask that is ignored, inverted, applied after the softmax, or
    applied after it with the rows renormalized, NaN or uniform weights for a query whose
    keys are all masked, ``key.T``, and code that only works for 3-dimensional inputs.
    """
    name = _function(attention, "check_attention", "attention")
    g = torch.Generator().manual_seed(0)
    _run_on_all_sizes(lambda sizes: _check_attention_once(attention, name, sizes, g),
                      ATTENTION_SIZES, _attention_hint)
    print(
        f"check_attention passed: {name} matches the course's attention (and "
        "F.scaled_dot_product_attention, except for fully masked queries) on 3-D (batch, L, d) "
        "and 4-D (batch, h, L, d) inputs of three sets of sizes: without a mask, with padding "
        "and causal masks, with a masked key whose score dwarfs the kept ones, and with a "
        "query whose keys are all masked (zero weights, not NaN)."
    )


# ---------------------------------------------------------------- exercise 04: heads


def _check_split_once(split_heads: Callable, name: str, sizes: dict) -> None:
    batch, L, h, d_k = sizes["batch"], sizes["L"], sizes["h"], sizes["d_k"]
    d_model = h * d_k
    # Distinct numbers: every way of regrouping them gives a different tensor.
    x = torch.arange(batch * L * d_model, dtype=torch.float32).view(batch, L, d_model)
    expected = x.view(batch, L, h, d_k).transpose(1, 2)  # (batch, h, L, d_k)

    got = _tensor(_call(split_heads, x, h, roles=("x", "h")), name, "the split tensor", like=x)
    hint = ""
    if tuple(got.shape) == (batch, L, h, d_k):
        hint = (" You have (batch, L, h, d_k): the heads must come before the positions, so "
                "that attention runs over the L positions of each head; add .transpose(1, 2).")
    call = f"{name}(x of shape (batch={batch}, L={L}, d_model={d_model}), h={h})"
    _shape(got, (batch, h, L, d_k), call, hint)
    if _same(got, expected):
        return
    if _same(got, x.view(batch, h, L, d_k)):
        raise ExerciseFailed(
            "the shape is right but the numbers are grouped wrongly: view(batch, h, L, d_k) "
            "without a transpose cuts each sequence's memory into h consecutive blocks, so a head "
            "gets whole positions' vectors (features of different positions mixed) instead of "
            f"its own d_k = {d_k} columns of every position. View as (batch, L, h, d_k) first, "
            "then .transpose(1, 2)."
        )
    if _same(got, x.view(batch, L, d_k, h).permute(0, 3, 1, 2)):
        raise ExerciseFailed(
            "head i takes every h-th column (i, i + h, i + 2h, ...) instead of the block of "
            "d_k consecutive columns i*d_k .. (i+1)*d_k - 1: view as (batch, L, h, d_k), "
            "not (batch, L, d_k, h)."
        )
    _assert_close(got, expected, f"{name}(x, h={h})")


def _heads_hint(passed: list, sizes: dict, message: str) -> str:
    return _hard_coded_hint(
        passed, sizes, message, "Read the sizes from the input (batch, L, d_model = x.shape, or "
        "batch, h, L, d_k = x.shape) and use the h you are given.")


def check_split_heads(split_heads: Callable) -> None:
    """Check ``split_heads(x, h)``: (batch, L, d_model) -> (batch, h, L, d_k), on the two
    sets of sizes of ``HEAD_SIZES``.

    Diagnoses: an input changed in place, a result of another dtype or device, the missing
    transpose, the view straight to (batch, h, L, d_k) (right shape, wrong grouping), heads
    that take every h-th column instead of a block, and sizes written into the code.
    """
    name = _function(split_heads, "check_split_heads", "split_heads")
    _run_on_all_sizes(lambda sizes: _check_split_once(split_heads, name, sizes), HEAD_SIZES,
                      _heads_hint)
    print(
        f"check_split_heads passed: head i of {name} holds columns i*d_k .. (i+1)*d_k - 1 of "
        f"every position, in shape (batch, h, L, d_k), for {len(HEAD_SIZES)} sets of sizes."
    )


def _check_merge_once(merge_heads: Callable, name: str, sizes: dict) -> None:
    batch, L, h, d_k = sizes["batch"], sizes["L"], sizes["h"], sizes["d_k"]
    d_model = h * d_k
    # Contiguous, like the output of attention: the state merge_heads receives in the model.
    x = torch.arange(batch * h * L * d_k, dtype=torch.float32).view(batch, h, L, d_k)
    expected = x.transpose(1, 2).reshape(batch, L, d_model)  # (batch, L, d_model)

    got = _tensor(_call(merge_heads, x, roles=("x",)), name, "the merged tensor", like=x)
    _shape(got, (batch, L, d_model), f"{name}(x of shape (batch={batch}, h={h}, L={L}, d_k={d_k}))")
    if not _same(got, expected):
        if _same(got, x.reshape(batch, L, d_model)):
            raise ExerciseFailed(
                "you merged without transposing back: reshape(batch, L, d_model) straight from "
                "(batch, h, L, d_k) mixes the positions. First .transpose(1, 2), to "
                "(batch, L, h, d_k), then .reshape(batch, L, h * d_k)."
            )
        _assert_close(got, expected, f"{name}(x)")

    # The round trip: merging the split of y gives y back.
    y = torch.arange(batch * L * d_model, dtype=torch.float32).view(batch, L, d_model)
    split = y.view(batch, L, h, d_k).transpose(1, 2)  # (batch, h, L, d_k)
    merged = _tensor(_call(merge_heads, split, roles=("x",)), name, "the merged tensor", like=split)
    _assert_close(merged, y,
                  f"the round trip {name}(split_heads(y)), which should give y back")


def check_merge_heads(merge_heads: Callable) -> None:
    """Check ``merge_heads(x)``: (batch, h, L, d_k) -> (batch, L, h * d_k), the
    concatenation, on the two sets of sizes of ``HEAD_SIZES``.

    Diagnoses: an input changed in place, a result of another dtype or device, ``.view``
    after the transpose (the tensor is not contiguous), the reshape without transposing
    back, sizes written into the code, and a round trip that does not give back the input.
    """
    name = _function(merge_heads, "check_merge_heads", "merge_heads")
    _run_on_all_sizes(lambda sizes: _check_merge_once(merge_heads, name, sizes), HEAD_SIZES,
                      _heads_hint)
    print(
        f"check_merge_heads passed: {name} puts the h heads side by side, (batch, L, h * d_k), "
        f"and undoes the split, for {len(HEAD_SIZES)} sets of sizes."
    )


# ---------------------------------------------------------------- exercise 05: positions


def _table(max_len: int, d_model: int, exponents: torch.Tensor, order: str = "sin-cos") -> torch.Tensor:
    """A sinusoid table in float64 with the given exponent per column pair, for the mistakes."""
    pos = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)  # (max_len, 1)
    angles = pos / 10000.0 ** exponents  # (max_len, d_model / 2) or (max_len, d_model)
    if angles.size(1) == d_model:  # one exponent per column, not per pair
        table = torch.empty(max_len, d_model, dtype=torch.float64)
        table[:, 0::2] = torch.sin(angles[:, 0::2])
        table[:, 1::2] = torch.cos(angles[:, 1::2])
        return table
    sin, cos = torch.sin(angles), torch.cos(angles)
    if order == "halves":
        return torch.cat([sin, cos], dim=1)
    table = torch.empty(max_len, d_model, dtype=torch.float64)
    table[:, 0::2], table[:, 1::2] = (sin, cos) if order == "sin-cos" else (cos, sin)
    return table


def _fitted_width(got: torch.Tensor, max_len: int, d_model: int) -> float | None:
    """The D for which ``got`` is the table with exponents 2i/D, or None when none fits.

    Row 1 holds sin(f_i) and cos(f_i) with f_i = 1 / 10000^(2i/D) <= 1, so asin gives f_i."""
    if d_model < 4:
        return None
    two_i = torch.arange(2, d_model, 2, dtype=torch.float64)  # pairs 1 .. d_model/2 - 1
    freq = torch.asin(got[1, 2::2].double().clamp(-1, 1))
    if not (freq > 0).all() or not (freq < 1).all():
        return None
    widths = two_i * math.log(10000.0) / -freq.log()
    width = float(widths.median())
    exponents = torch.arange(0, d_model, 2, dtype=torch.float64) / width
    if not _same(got, _table(max_len, d_model, exponents), atol=1e-3):
        return None
    return width


def _check_table_once(fn: Callable, name: str, max_len: int, d_model: int) -> None:
    expected = sinusoidal_table(max_len, d_model)
    call = f"{name}(max_len={max_len}, d_model={d_model})"
    got = _tensor(_call(fn, max_len, d_model, roles=("max_len", "d_model")), name, "the table")
    hint = " Rows are positions, columns dimensions." if tuple(got.shape) == (d_model, max_len) else ""
    _shape(got, (max_len, d_model), call, hint)
    if got.dtype != torch.float32:
        raise ExerciseFailed(
            f"{call} is a {got.dtype} table; the embeddings it is added to are float32, and a "
            f"{got.dtype} table would turn the sum into {got.dtype}. Build it in float32, "
            "as the instructions say (torch.arange(..., dtype=torch.float32))."
        )
    if got.isnan().any() or got.isinf().any():
        raise ExerciseFailed(
            f"{name}'s table contains NaN or inf; every entry is a sine or cosine, in [-1, 1]"
        )
    if _same(got, expected, atol=1e-4):
        return
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # 2i, per pair
    row0 = ", ".join(f"{x:.0f}" for x in got[0, :4].tolist())
    mistakes = [
        (_table(max_len, d_model, two_i / d_model, "cos-sin"),
         f"sin and cos are swapped: position 0 should read [0, 1, 0, 1, ...] (sin 0 = 0 in the "
         f"even dimensions 2i, cos 0 = 1 in the odd dimensions 2i + 1), yours reads [{row0}, ...]."),
        (_table(max_len, d_model, two_i / d_model, "halves"),
         "your sines fill the first half of the dimensions and the cosines the second; the "
         "paper interleaves them, sin in dimension 2i and cos in 2i + 1: table[:, 0::2] = sin, "
         "table[:, 1::2] = cos."),
        (_table(max_len, d_model, two_i / 2 / d_model),
         "the exponent is i/d_model where the paper has 2i/d_model (2i is the index of the "
         "even dimension): use torch.arange(0, d_model, 2) / d_model."),
        (_table(max_len, d_model, torch.arange(d_model, dtype=torch.float64) / d_model),
         "dimension 2i + 1 uses the exponent (2i + 1)/d_model: the sine and cosine of a pair share "
         "one frequency, 1 / 10000^(2i/d_model), so the exponent steps by pairs, not by columns."),
        (_table(max_len, d_model, two_i),
         "the exponent is 2i where the paper has 2i/d_model: divide by d_model."),
    ]
    for candidate, message in mistakes:
        if _same(got, candidate, atol=1e-4):
            raise ExerciseFailed(message)
    # pos * 10000^(2i/d_model) has angles up to 10^5.5, beyond float32's precision for
    # sine: compare the first two pairs only, whose angles stay small.
    wrong_sign = _table(max_len, d_model, -two_i / d_model)
    if _same(got[:, :4], wrong_sign[:, :4], atol=1e-3):
        raise ExerciseFailed(
            "you multiplied pos by 10000^(2i/d_model) instead of dividing (a lost minus sign in "
            "exp(-2i * log(10000) / d_model)?): the angle is pos / 10000^(2i/d_model)."
        )
    width = _fitted_width(got, max_len, d_model)
    if width is not None:
        raise ExerciseFailed(
            f"your frequencies are those of d_model = {width:.0f}, but this table has d_model = "
            f"{d_model}: is a width written into your code? The exponent is 2i/d_model with the "
            "d_model argument."
        )
    _assert_close(got, expected, call, atol=1e-4)


def _table_hint(passed: list, sizes: tuple, message: str) -> str:
    return _hard_coded_hint(
        [dict(max_len=m, d_model=d) for m, d in passed], dict(max_len=sizes[0], d_model=sizes[1]),
        message, "Build the table from the max_len and d_model arguments.")


def check_sinusoidal_table(sinusoidal_table_fn: Callable) -> None:
    """Check ``sinusoidal_table(max_len, d_model)`` against the paper's §3.5 formula, on the
    sizes of ``TABLE_SIZES``.

    Diagnoses: wrong shape, a dtype other than float32 (complex, integer and bool named as
    such), a table off the cpu, sin and cos swapped, sines and cosines in two halves instead
    of interleaved, the exponent i/d_model instead of 2i/d_model, a separate frequency for
    the odd dimensions, a missing /d_model, pos multiplied instead of divided, and a d_model
    (or another size) written into the code.
    """
    name = _function(sinusoidal_table_fn, "check_sinusoidal_table", "sinusoidal_table")
    _run_on_all_sizes(lambda sizes: _check_table_once(sinusoidal_table_fn, name, *sizes),
                      TABLE_SIZES, _table_hint)
    shapes = ", ".join(f"({m}, {d})" for m, d in TABLE_SIZES)
    print(
        f"check_sinusoidal_table passed: {name} puts sin(pos / 10000^(2i/d_model)) in "
        f"dimension 2i and the cosine of the same angle in dimension 2i + 1, for the "
        f"(max_len, d_model) sizes {shapes}."
    )
