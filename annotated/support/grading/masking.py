"""Checks of notebook 03's exercises: the padding, look-ahead and target masks of
``annotated.masks``, and the right shift of ``annotated.batching.Batch`` that makes the
decoder's input and labels.

A mask here is the course's: a bool tensor, True where a query may attend to a key, with
the shape of ``annotated.masks`` (padding ``(batch, 1, L)``, look-ahead ``(L, L)``, target
``(batch, L, L)``). Results that are not bool are named before any comparison: a float mask
of 0 and -inf (``nn.Transformer``'s additive form) or of 0 and 1, an integer mask. Token
tensors (the decoder's input and labels) must keep the dtype of the tokens.

Besides the notebook's sizes, each check runs a batch of one sentence of int32 ids (a
``.squeeze()`` drops its batch axis; ids keep their dtype), the look-ahead masks also at
5,001 positions (a table precomputed at 512 or 5,000 positions and sliced falls short), and
calls the function a second time to see that its first result did not change (a tensor kept
between calls and filled again).
"""

from collections.abc import Callable

import torch
import torch.nn as nn

from annotated.batching import Batch
from annotated.masks import padding_mask, subsequent_mask, target_mask
from annotated.support.grading.core import (
    ExerciseFailed, _aliasing, _call, _flat_tensors, _function, _generic, _hard_coded_hint,
    _run_on_all_sizes, _shape, _squeezed,
)

# Within a set all sizes differ (a swapped axis shows in the shape); from one set to the next
# every size changes, the pad index too, so a size or a pad index written into the code fails.
# The last set of each is a batch of one sentence (a .squeeze() drops its batch axis) of int32
# ids (ids that come back must keep that dtype); the look-ahead masks there and in
# LOOK_AHEAD_SIZES reach LONG positions, beyond a table precomputed at the 512 or 5,000
# positions of common maximum lengths.
LONG = 5001
PADDING_SIZES = [dict(batch=3, L=6, pad_idx=0), dict(batch=4, L=5, pad_idx=2),
                 dict(batch=2, L=7, pad_idx=9), dict(batch=1, L=8, pad_idx=5, ids="int32")]
LOOK_AHEAD_SIZES = [dict(size=5), dict(size=7), dict(size=3), dict(size=LONG)]
TARGET_SIZES = [dict(batch=3, L=6, pad_idx=0), dict(batch=2, L=5, pad_idx=4),
                dict(batch=4, L=7, pad_idx=1), dict(batch=1, L=LONG, pad_idx=3, ids="int32")]
SHIFT_SIZES = [dict(batch=2, L=6, pad_idx=0), dict(batch=3, L=5, pad_idx=7),
               dict(batch=4, L=8, pad_idx=1), dict(batch=1, L=LONG + 1, pad_idx=6, ids="int32")]
# Above this length a wrong mask is reported by its first difference only: the known mistakes'
# candidate masks would cost hundreds of megabytes.
SMALL = 64
SIZE_SETS = {
    "check_padding_mask": PADDING_SIZES,
    "check_subsequent_mask": LOOK_AHEAD_SIZES,
    "check_target_mask": TARGET_SIZES,
    "check_decoder_input_and_labels": SHIFT_SIZES,
}

# The other device the masks must be built on when asked: the GPU, where there is one. (The
# device 'meta', which every machine has, costs seconds at its first use: too slow for a
# notebook's check; the tests use it.)
OTHER_DEVICE: str | None = "cuda" if torch.cuda.is_available() else None

VOCAB = 12  # token ids 0 .. 11 in the checks' batches; every id but pad_idx is a real token

_CONVENTION = ("the course's masks are bool, True where a query may attend to a key "
               "(notebook 03, annotated.masks)")


# ---------------------------------------------------------------- results and inputs


def _not_a_tensor(result, name: str, what: str, kind: str) -> None:
    if result is None:
        raise ExerciseFailed(f"{name} returned None: did you forget the `return` of {what}?")
    if not torch.is_tensor(result):
        hint = ""
        if isinstance(result, (tuple, list)):
            hint = (f" of length {len(result)}: return the tensor itself, not a "
                    f"{type(result).__name__}")
        elif type(result).__module__ == "numpy" or isinstance(result, (int, float, bool)):
            hint = (": keep to torch operations, which return tensors (no .numpy(), .tolist() or "
                    ".item())")
        raise ExerciseFailed(
            f"{name} should return {what} as {kind} tensor, got {type(result).__name__}{hint}"
        )


def _mask(result, name: str, what: str, device: str = "cpu", asked: bool = False) -> torch.Tensor:
    """``result`` as the bool mask it must be, on ``device``: anything else is named."""
    _not_a_tensor(result, name, what, "a bool")
    if result.device.type != device:
        if asked:
            where = (f"the check asked for device={device!r}: create it there, device=device in "
                     "the torch.ones (or torch.arange) that builds it. target_mask needs this to "
                     "build the look-ahead mask where the tokens are, on a GPU in training.")
        elif device == "cpu":
            where = ("the check expects it on the cpu, where its inputs are: leave out .cuda() "
                     "and .to(...).")
        else:
            where = (f"the tokens are on {device}: build every tensor where the tokens are, "
                     "device=tokens.device (subsequent_mask(L, tokens.device)).")
        raise ExerciseFailed(f"{name} returned {what} on the device {result.device}, but {where}")
    if result.layout != torch.strided:
        raise ExerciseFailed(f"{name} returned {what} as a {result.layout} tensor; return an "
                             "ordinary (dense) bool tensor, without .to_sparse().")
    if result.dtype != torch.bool:
        raise ExerciseFailed(_dtype_message(result, name, what))
    return result


def _dtype_message(result: torch.Tensor, name: str, what: str) -> str:
    """Why a mask of another dtype than bool is wrong, from what it holds."""
    start = f"{name} returned {what} as a {result.dtype} tensor"
    if result.device.type == "meta":  # no values to look at
        return f"{start}; {_CONVENTION}."
    values = result.detach()
    if values.is_floating_point() and ((values == 0) | (values == float("-inf"))).all():
        return (
            f"{start} of 0.0 and -inf: that is the additive form of a mask, added to the "
            "scores, which nn.Transformer uses (generate_square_subsequent_mask returns one). But "
            f"{_CONVENTION}, and attention fills the scores with scores.masked_fill(~mask, "
            "float('-inf')). Return a bool tensor: a comparison (tokens != pad_idx) is one, and "
            "torch.ones(..., dtype=torch.bool) makes one."
        )
    if not values.is_complex() and ((values == 0) | (values == 1)).all():
        if values.is_floating_point():
            kind, invert = "0.0 and 1.0", "~ does not work on a float tensor at all"
        else:
            kind, invert = "0 and 1", ("~ on an integer tensor flips every bit (~1 is -2, ~0 is "
                                       "-1) instead of swapping True and False")
        return (
            f"{start} of {kind}: right in spirit, but {_CONVENTION}. masked_fill accepts only a "
            f"bool mask, and {invert}. A comparison (tokens != pad_idx, key <= query) is bool "
            "already: drop the .int(), .long() or .float(), and build tables with "
            "dtype=torch.bool."
        )
    return f"{start}; {_CONVENTION}: return the result of a comparison, or dtype=torch.bool."


def _token_tensor(result, name: str, what: str, like: torch.Tensor) -> torch.Tensor:
    """``result`` as a tensor of token ids: the dtype and device of the tokens ``like``."""
    _not_a_tensor(result, name, what, "a token")
    if result.device != like.device:
        raise ExerciseFailed(f"{name} returned {what} on the device {result.device}, but the "
                             f"target is on {like.device}: leave out .cuda() and .to(...).")
    if result.dtype != like.dtype:
        why = "(the embedding layer needs integer ids)"
        if not result.is_floating_point() and result.dtype != torch.bool:
            why = ("(the embedding layer takes int32 ids as well as int64 ones): no .long() "
                   "\"for the embedding\", and a tensor you create and fill takes the target's "
                   "dtype, torch.full(..., dtype=tgt.dtype), not torch.full's default int64")
        raise ExerciseFailed(
            f"{name} returned {what} as {result.dtype}; it holds token ids, taken from the "
            f"target, so it keeps the target's dtype, {like.dtype}: slice the target, do not "
            f"convert it {why}."
        )
    return result


def _tokens(g: torch.Generator, batch: int, L: int, pad_idx: int, pads: list[int],
            left: int | None = None, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    """(batch, L) random ids of ``dtype``, none equal to pad_idx, with pads[b] padding tokens
    at the end of row b (at the start of row ``left``). Row 0 begins with the smallest ids that
    are not the pad index, 0 among them when pad_idx != 0: an answer that compares with 0, or
    keeps only the ids above pad_idx, shows."""
    real_ids = torch.tensor([i for i in range(VOCAB) if i != pad_idx])
    tokens = real_ids[torch.randint(len(real_ids), (batch, L), generator=g)]
    tokens[0, :3] = real_ids[:3]
    for b, n in enumerate(pads):
        if n:
            if b == left:
                tokens[b, :n] = pad_idx
            else:
                tokens[b, L - n:] = pad_idx
    return tokens.to(dtype)


def _mismatch(got: torch.Tensor, expected: torch.Tensor, what: str) -> ExerciseFailed:
    """A mask that differs in a way no known mistake explains: where, with both masks shown."""
    wrong = got != expected
    first = tuple(wrong.nonzero()[0].tolist())
    message = (f"mismatch in {what}: {int(wrong.sum())} of its {wrong.numel()} entries differ "
               f"from the course's, the first at index {first}: yours {bool(got[first])}, "
               f"expected {bool(expected[first])}.")
    if got.numel() <= 128:
        message += f"\nexpected (1 = may attend):\n{expected.int()}\nyours:\n{got.int()}"
    return _generic(message)


def _ids(sizes: dict) -> torch.dtype:
    """The dtype of the token ids of a set of sizes: int64 unless the set says otherwise."""
    return {"int32": torch.int32}.get(sizes.get("ids"), torch.int64)


def _table_hint(L: int) -> str:
    """Why a look-ahead mask falls short at ``L`` positions, when ``L`` is the long length."""
    if L < LONG:
        return ""
    return (f"\nHint: here L = {L}, longer than a table precomputed at a fixed size (512 or "
            "5,000 positions) and sliced, table[:L, :L], which then stops short. Build the "
            "look-ahead mask from L on every call, subsequent_mask(L, tokens.device): it costs "
            "next to nothing.")


def _short_table(got: torch.Tensor, size: int) -> str:
    """A shape hint for a square mask smaller than (size, size): a sliced table."""
    n = got.shape[-1] if got.dim() else 0
    if got.dim() >= 2 and got.shape[-2] == n and 0 < n < size:
        return (f" Your mask stops at {n} positions: a table precomputed at that size and "
                "sliced, table[:size, :size], cannot serve a longer sentence. Build the mask "
                "from the size on every call.")
    return ""


_BROADCAST = r"must match the size of tensor|not broadcastable|doesn't match the broadcast shape"


def _unchanged_by_a_second_call(call_again: Callable, first, name: str, what: str) -> None:
    """``_aliasing``, after checking that the first result kept its shape (a tensor kept
    between calls and resized, .resize_, changes shape rather than numbers)."""
    shapes = [(t, tuple(t.shape)) for t in _flat_tensors(first)]

    def again():
        second = call_again()
        for t, shape in shapes:
            if tuple(t.shape) != shape:
                raise ExerciseFailed(
                    f"a second call of {name}, on other inputs, changed the shape of {what} "
                    f"that the first call had returned, from {shape} to {tuple(t.shape)}: your "
                    "function returns a tensor it keeps between calls (a global buffer, resized "
                    "or refilled), so every caller shares it. Create a new tensor on every call."
                )
        return second
    _aliasing(again, first, name, what)


def _hint(how: str) -> Callable:
    def hint(passed: list, sizes: dict, message: str) -> str:
        return _hard_coded_hint(passed, sizes, message, how)
    return hint


def _on_device(fn: Callable, name: str, args: tuple, device: str) -> torch.Tensor:
    """Call ``fn`` on tokens on ``device``, outside ``_call``, whose comparison of the inputs
    needs numbers ('meta' tensors have none); the call on the cpu has checked the rest."""
    try:
        return fn(*args)
    except Exception as err:  # noqa: BLE001 - any error of the learner's code is reported
        hint = ""
        if "device" in str(err):
            hint = ("\nHint: a tensor of yours is created on the cpu while the tokens are "
                    "elsewhere; build each one where the tokens are, device=tokens.device "
                    "(subsequent_mask(L, tokens.device)).")
        raise ExerciseFailed(
            f"with tokens on the device {device!r} (another device than the cpu, as on a GPU), "
            f"{name} raised {type(err).__name__}: {err}{hint}"
        ) from err


# ---------------------------------------------------------------- 3.1 the padding mask


def _padding_shape_hint(shape: tuple, batch: int, L: int) -> str:
    return {
        (batch, L): (" You have (batch, L): without its query axis the mask lines up with the "
                     "last two dimensions of the scores (L_q, L_k), and hides sentence n's "
                     "padding from query n of every sentence. Add the axis of size 1 in the "
                     "middle: (tokens != pad_idx).unsqueeze(-2)."),
        (batch, L, 1): (" You have (batch, L, 1): that broadcasts over the keys, not the "
                        "queries, so it hides whole query rows (the queries at padding "
                        "positions) and lets every query see the padding keys. The 1 goes in "
                        "the middle, (batch, 1, L): unsqueeze(-2), not unsqueeze(-1)."),
        (batch, 1, 1, L): (" You have (batch, 1, 1, L), with an axis for the heads: "
                           "MultiHeadAttention adds that axis itself (notebook 04); the mask of "
                           "notebook 03 has one dimension per dimension of the scores "
                           "(batch, L_q, L_k)."),
        (batch, L, L): (" You expanded it to (batch, L, L): keep the axis of size 1 and let "
                        "broadcasting repeat it. The same mask then serves any number of "
                        "queries, as in the decoder's cross-attention, where L_q is the "
                        "target's length and L the source's."),
        (1, batch, L): (" You have (1, batch, L): the axis of size 1 goes after the batch, "
                        "unsqueeze(-2) (or unsqueeze(1)), not unsqueeze(0)."),
    }.get(shape, "")


def _hard_coded_pad(got: torch.Tensor, tokens: torch.Tensor, pad_idx: int, full) -> str | None:
    """The id an answer compared with instead of pad_idx, if ``got`` equals the mask of the
    tokens unequal to that id (``full`` turns a (batch, L) comparison into the mask)."""
    for v in range(VOCAB):
        if v != pad_idx and torch.equal(got, full(tokens != v)):
            return (
                f"your mask hides the tokens equal to {v}, but here pad_idx = {pad_idx} (and "
                f"{v} is a real token): is the pad index written into your code? Compare with "
                "the pad_idx argument, tokens != pad_idx; the check runs several pad indices."
            )
    return None


def _padding_tokens(g: torch.Generator, sizes: dict) -> torch.Tensor:
    """The tokens of a set of sizes: sentence b padded with 2b tokens (a sentence alone, 2)."""
    batch, L, pad_idx = sizes["batch"], sizes["L"], sizes["pad_idx"]
    pads = [min(2 * b, L - 1) for b in range(batch)] if batch > 1 else [2]
    return _tokens(g, batch, L, pad_idx, pads, dtype=_ids(sizes))


def _call_text(name: str, what: str, tokens: torch.Tensor, pad_idx: int) -> str:
    """How the check called the function: the shape of the ids, their dtype if not int64."""
    dtype = "" if tokens.dtype == torch.int64 else f" {str(tokens.dtype).replace('torch.', '')}"
    return f"{name}({what} of shape {tuple(tokens.shape)}{dtype}, pad_idx={pad_idx})"


def _check_padding_once(fn: Callable, name: str, sizes: dict, g: torch.Generator) -> None:
    batch, L, pad_idx = sizes["batch"], sizes["L"], sizes["pad_idx"]
    tokens = _padding_tokens(g, sizes)
    expected = padding_mask(tokens, pad_idx)  # (batch, 1, L)
    call = _call_text(name, "tokens", tokens, pad_idx)
    got = _mask(_call(fn, tokens, pad_idx, roles=("tokens", "pad_idx")), name, "the padding mask")
    _shape(got, (batch, 1, L), f"the padding mask of {call}",
           # (batch, L) is the query axis not added, unless the batch is one sentence
           (_squeezed(got.shape, (batch, 1, L)) if batch == 1 else "")
           or _padding_shape_hint(tuple(got.shape), batch, L))
    if torch.equal(got, expected):
        return
    if torch.equal(got, ~expected):
        raise ExerciseFailed(
            "your padding mask is inverted: it is True at the padding and False at the real "
            f"tokens, but {_CONVENTION}: tokens != pad_idx, not ==. (nn.Transformer's "
            "key_padding_mask means the opposite, True = ignore: notebook 03's last section.)"
        )
    hard_coded = _hard_coded_pad(got, tokens, pad_idx, lambda m: m.unsqueeze(1))
    if hard_coded:
        raise ExerciseFailed(hard_coded)
    if pad_idx > 0 and torch.equal(got, (tokens > pad_idx).unsqueeze(1)):
        raise ExerciseFailed(
            f"your mask keeps only the ids above pad_idx = {pad_idx}: ids below it (0 .. "
            f"{pad_idx - 1} here, such as <s> or <unk>) are real tokens too. Hide the padding "
            "only: tokens != pad_idx."
        )
    raise _mismatch(got, expected, f"the padding mask of {call}")


def check_padding_mask(padding_mask_fn: Callable) -> None:
    """Check ``padding_mask(tokens, pad_idx)``: (batch, L) ids -> (batch, 1, L) bool, True at
    the real tokens, on the sizes and pad indices of ``PADDING_SIZES``.

    Diagnoses: an input changed in place, a result that is not a bool tensor (a float mask of
    0 and -inf or of 0 and 1, an integer mask), wrong shapes ((batch, L), (batch, L, 1),
    (batch, 1, 1, L), (batch, L, L), (1, batch, L)), the batch axis of a batch of one sentence
    dropped (a .squeeze()), an inverted mask, a pad index written into the code, ids below the
    pad index taken for padding, a result that a second call overwrites (a tensor kept between
    calls), and sizes written into the code.
    """
    name = _function(padding_mask_fn, "check_padding_mask", "padding_mask")
    g = torch.Generator().manual_seed(0)
    _run_on_all_sizes(lambda sizes: _check_padding_once(padding_mask_fn, name, sizes, g),
                      PADDING_SIZES, _hint("Read batch and L from tokens.shape, and compare "
                                           "with the pad_idx you are given."))
    sizes = PADDING_SIZES[0]  # again, then its sentences in reverse order: another mask
    tokens = _padding_tokens(g, sizes)
    first = _call(padding_mask_fn, tokens, sizes["pad_idx"])
    _unchanged_by_a_second_call(lambda: _call(padding_mask_fn, tokens.flip(0), sizes["pad_idx"]),
                                first, name, "the padding mask")
    pads = ", ".join(str(s["pad_idx"]) for s in PADDING_SIZES)
    print(
        f"check_padding_mask passed: {name} gives (batch, 1, L) bool masks, True at the real "
        f"tokens, equal to the course's padding_mask for {len(PADDING_SIZES)} batches with "
        f"pad indices {pads} (one of a single sentence of int32 ids), and a second call leaves "
        "the first mask as it was."
    )


# ---------------------------------------------------------------- 3.2 the look-ahead mask


def _look_ahead_mistake(got: torch.Tensor, size: int) -> str | None:
    ones = torch.ones(size, size, dtype=torch.bool)
    mistakes = [
        (ones.tril(-1),
         "the diagonal is excluded: query i must see key i, its own position. With the right "
         "shift (notebook 03), input i is the previous word (<s> for i = 0), not the one "
         "output i predicts; without the diagonal, query 0 sees nothing at all (a fully masked "
         "row). Keep the diagonal: tril(), or key j <= query i."),
        (ones.triu(1),
         "your look-ahead mask is inverted: True above the diagonal, where the future keys "
         "are. That is nn.Transformer's convention (True = masked out); in the course True "
         "means 'may attend': the lower triangle, diagonal included, tril()."),
        (ones.triu(),
         "you built the upper triangle: query i sees keys j >= i, the future, and none of the "
         "past. Query i may attend to keys j <= i: the lower triangle, tril() (row i is the "
         "query, column j the key)."),
        (ones,
         "your mask is True everywhere: nothing is hidden, so every position sees the future. "
         "Keep the lower triangle: tril()."),
    ]
    for candidate, message in mistakes:
        if torch.equal(got, candidate):
            return message
    return None


def _check_look_ahead_once(fn: Callable, name: str, sizes: dict) -> None:
    size = sizes["size"]
    expected = subsequent_mask(size)
    # nn.Transformer's float mask is -inf exactly where the course's is False.
    if size <= SMALL and not torch.equal(
            ~expected, nn.Transformer.generate_square_subsequent_mask(size) == float("-inf")):
        raise AssertionError("the course's look-ahead mask disagrees with nn.Transformer's")
    got = _mask(_call(fn, size, roles=("size",)), name, "the look-ahead mask")
    hint = _short_table(got, size)
    if tuple(got.shape) == (1, size, size):
        hint = (" (1, size, size) is the shape attention takes on a batch, after "
                "unsqueeze(0); subsequent_mask itself returns the one (size, size) table "
                "(notebook 03), which target_mask broadcasts against (batch, 1, L).")
    _shape(got, (size, size), f"{name}({size})", hint)
    if not torch.equal(got, expected):
        message = _look_ahead_mistake(got, size) if size <= SMALL else None
        if message:
            raise ExerciseFailed(message)
        raise _mismatch(got, expected, f"{name}({size})")
    if OTHER_DEVICE:  # the device argument: the mask is built where it is asked for
        got = _mask(_call(fn, size, OTHER_DEVICE, roles=("size", "device")), name,
                    "the look-ahead mask", device=OTHER_DEVICE, asked=True)
        call = f"{name}({size}, device={OTHER_DEVICE!r})"
        _shape(got, (size, size), call)
        if OTHER_DEVICE != "meta" and not torch.equal(got.cpu(), expected):
            raise _mismatch(got.cpu(), expected, call)


def check_subsequent_mask(subsequent_mask_fn: Callable) -> None:
    """Check ``subsequent_mask(size, device=None)``: the (size, size) bool look-ahead mask,
    True where key j <= query i, on the sizes of ``LOOK_AHEAD_SIZES``, and built on the
    device it is given (the GPU, ``OTHER_DEVICE``, where there is one).

    Diagnoses: a result that is not a bool tensor (nn.Transformer's float mask of 0 and -inf
    named as such), the shape (1, size, size), the diagonal excluded, the inverted mask
    (nn.Transformer's True = masked out), the upper triangle, a mask that hides nothing, a
    device ignored, a table precomputed at a fixed size (512 or 5,000 positions) that a longer
    mask outgrows, a result that a later call overwrites (a tensor kept between calls and
    refilled or resized), and sizes written into the code. It also checks the course's mask
    against ``nn.Transformer.generate_square_subsequent_mask``.
    """
    name = _function(subsequent_mask_fn, "check_subsequent_mask", "subsequent_mask")
    _run_on_all_sizes(lambda sizes: _check_look_ahead_once(subsequent_mask_fn, name, sizes),
                      LOOK_AHEAD_SIZES, _hint("Build the table from the size argument."))
    size = LOOK_AHEAD_SIZES[0]["size"]  # again, then a smaller size
    first = _call(subsequent_mask_fn, size)
    _unchanged_by_a_second_call(lambda: _call(subsequent_mask_fn, size - 2), first, name,
                                f"the mask of size {size}")
    shown = ", ".join(f"{s['size']:,}" for s in LOOK_AHEAD_SIZES)
    print(
        f"check_subsequent_mask passed: {name} gives the lower triangle, diagonal included, "
        f"for sizes {shown} (the course's subsequent_mask, and ~ of nn.Transformer's "
        "-inf mask), and a later call leaves an earlier mask as it was."
    )


# ---------------------------------------------------------------- 3.3 the target mask


def _target_mistake(got: torch.Tensor, tokens: torch.Tensor, pad_idx: int,
                    left_padded: bool = True) -> str | None:
    """Name the mistake behind a wrong (batch, L, L) target mask of ``tokens``, if known;
    ``left_padded``: the last sentence of ``tokens`` is padded at the start."""
    batch, L = tokens.shape
    keys = padding_mask(tokens, pad_idx)  # (batch, 1, L): real keys
    queries = keys.transpose(1, 2)  # (batch, L, 1): real queries
    causal = subsequent_mask(L)
    ones = torch.ones(L, L, dtype=torch.bool)
    expected = keys & causal
    mistakes = [
        (~expected,
         f"your target mask is inverted: True where a key is hidden, but {_CONVENTION}."),
        (keys | causal,
         "you combined the two masks with | (or): a key is then allowed when it is a real "
         "token OR in the past, so the future real tokens and the past padding are visible. "
         "Both conditions must hold: padding_mask & subsequent_mask."),
        (causal.expand(batch, L, L),
         "the padding keys are not hidden, only the future: the look-ahead mask alone. It "
         "happens to hide right padding from the real queries (that padding comes after them), "
         "but not from the queries at padding positions, and not left padding at all"
         + (": in the check's last sentence, padded at the start, the real queries see the "
            "padding. " if left_padded else ". ")
         + "Combine both masks: padding_mask(tokens, pad_idx) & subsequent_mask(L)."),
        (keys.expand(batch, L, L),
         "the future is not hidden, only the padding: query i sees the keys j > i. Combine "
         "both masks: padding_mask(tokens, pad_idx) & subsequent_mask(L)."),
        (queries & causal,
         "the padding hides query rows instead of key columns: your padding part has shape "
         "(batch, L, 1), which broadcasts over the keys. It must be (batch, 1, L), the "
         "padding_mask of exercise 3.1: the same keys hidden from every query."),
        (queries & keys & causal,
         "you also hid the queries at padding positions: their rows are all False, so a plain "
         "softmax gives them NaN, and NaN spreads into the gradients (notebook 03, 'Rows with "
         "nothing left to see'). The course hides padding keys only, columns: a query at a "
         "padding position still sees the real tokens, and the loss ignores its output. "
         "Combine padding_mask(tokens, pad_idx), (batch, 1, L), with subsequent_mask(L)."),
        (keys & ones.triu(1),
         "the look-ahead part is inverted: True above the diagonal (nn.Transformer's "
         "convention, True = masked out). The course's subsequent_mask is the lower triangle, "
         "True where key j <= query i."),
        (keys & ones.triu(),
         "the look-ahead part is the upper triangle: query i sees the future keys j >= i. It "
         "must be the lower triangle, key j <= query i: tril()."),
        (keys & ones.tril(-1),
         "the look-ahead part excludes the diagonal: query i must see key i, its own position "
         "(the input there is the previous word, after the right shift). Use tril(), not "
         "tril(-1)."),
    ]
    for candidate, message in mistakes:
        if torch.equal(got, candidate):
            return message
    return _hard_coded_pad(got, tokens, pad_idx, lambda m: m.unsqueeze(1) & causal)


def _target_shape_hint(shape: tuple, batch: int, L: int) -> str:
    return {
        (batch, 1, L, L): (" You have (batch, 1, L, L), with an axis for the heads: "
                           "MultiHeadAttention adds that axis itself; the target mask has one "
                           "dimension per dimension of the scores (batch, L_q, L_k)."),
        (L, L): (" You have (L, L), one table for the whole batch: the padding differs from "
                 "sentence to sentence, so the mask has a batch axis: (batch, 1, L) & (L, L) "
                 "broadcasts to (batch, L, L)."),
        (batch, 1, L): (" You have the shape of the padding mask alone: & it with the "
                        "look-ahead mask (L, L), and broadcasting gives (batch, L, L)."),
    }.get(shape, "")


def _target_tokens(g: torch.Generator, sizes: dict) -> torch.Tensor:
    """Right padding of 1, 2, ... tokens; the last sentence padded at the start instead."""
    batch, L, pad_idx = sizes["batch"], sizes["L"], sizes["pad_idx"]
    pads = [min(b + 1, L - 1) for b in range(batch - 1)] + [2]
    return _tokens(g, batch, L, pad_idx, pads, left=batch - 1, dtype=_ids(sizes))


def _check_target_once(fn: Callable, name: str, sizes: dict, g: torch.Generator) -> None:
    batch, L, pad_idx = sizes["batch"], sizes["L"], sizes["pad_idx"]
    tokens = _target_tokens(g, sizes)
    expected = target_mask(tokens, pad_idx)
    call = _call_text(name, "tokens", tokens, pad_idx)
    hints = ((_BROADCAST, _table_hint(L)),) if L >= LONG else ()
    got = _mask(_call(fn, tokens, pad_idx, hints=hints, roles=("tokens", "pad_idx")), name,
                "the target mask")
    _shape(got, (batch, L, L), f"the target mask of {call}",
           _squeezed(got.shape, (batch, L, L)) or _short_table(got, L)
           or _target_shape_hint(tuple(got.shape), batch, L))
    if not torch.equal(got, expected):
        message = _target_mistake(got, tokens, pad_idx) if L <= SMALL else None
        if message:
            raise ExerciseFailed(message)
        raise _mismatch(got, expected, f"the target mask of {call}")
    if OTHER_DEVICE:  # built where the tokens are
        got = _mask(_on_device(fn, name, (tokens.to(OTHER_DEVICE), pad_idx), OTHER_DEVICE), name,
                    "the target mask", device=OTHER_DEVICE)
        call = f"{call} on the device {OTHER_DEVICE!r}"
        _shape(got, (batch, L, L), f"the target mask of {call}")
        if OTHER_DEVICE != "meta" and not torch.equal(got.cpu(), expected):
            raise _mismatch(got.cpu(), expected, f"the target mask of {call}")


def check_target_mask(target_mask_fn: Callable) -> None:
    """Check ``target_mask(tokens, pad_idx)``: the (batch, L, L) bool mask of decoder
    self-attention, padding keys and future keys hidden, on the sizes of ``TARGET_SIZES``;
    each batch has sentences padded at the end and one padded at the start. Where there is a
    GPU (``OTHER_DEVICE``), once more on tokens there: the mask is built where the tokens are.

    Diagnoses: a result that is not a bool tensor, wrong shapes ((batch, 1, L, L), (L, L),
    (batch, 1, L)), the batch axis of a batch of one sentence dropped (a .squeeze()), an
    inverted mask, | instead of &, the padding or the look-ahead part missing, padding that
    hides query rows instead of key columns, padding queries hidden too, a look-ahead part
    inverted, upper-triangular or without its diagonal, a look-ahead table precomputed at a
    fixed size (512 or 5,000 positions) that a sentence of 5,001 tokens outgrows, a result that
    a second call overwrites (a tensor kept between calls), a pad index or sizes written into
    the code, and a look-ahead mask built on the cpu for tokens elsewhere.
    """
    name = _function(target_mask_fn, "check_target_mask", "target_mask")
    g = torch.Generator().manual_seed(1)
    _run_on_all_sizes(lambda sizes: _check_target_once(target_mask_fn, name, sizes, g),
                      TARGET_SIZES, _hint("Read L from tokens.shape (tokens.size(-1)) and "
                                          "compare with the pad_idx you are given."))
    sizes = TARGET_SIZES[0]  # again, then its sentences in reverse order: another mask
    tokens = _target_tokens(g, sizes)
    first = _call(target_mask_fn, tokens, sizes["pad_idx"])
    _unchanged_by_a_second_call(lambda: _call(target_mask_fn, tokens.flip(0), sizes["pad_idx"]),
                                first, name, "the target mask")
    print(
        f"check_target_mask passed: {name} equals the course's target_mask, padding & "
        f"look-ahead, for {len(TARGET_SIZES)} batches padded on the right and on the left (the "
        f"last a single sentence of {LONG:,} int32 ids), and a second call leaves the first "
        "mask as it was."
    )


# ---------------------------------------------------------------- 3.4 the right shift


def _target_batch(g: torch.Generator, batch: int, L: int, pad_idx: int,
                  dtype: torch.dtype = torch.int64) -> tuple[torch.Tensor, int, int]:
    """(batch, L) targets <s> y_1 .. y_n </s> and padding, n = L - 2, L - 4, ... (at least 1),
    so that the decoder's input holds padding too (a sentence alone: n = L - 3), as ids of
    ``dtype``; returns them with the ids of <s> and </s>."""
    bos, eos, *words = [i for i in range(VOCAB) if i != pad_idx]
    words = torch.tensor(words)
    tgt = torch.full((batch, L), pad_idx)
    for b in range(batch):
        n = max(1, L - 2 - 2 * b) if batch > 1 else L - 3
        tgt[b, 0] = bos
        tgt[b, 1 : n + 1] = words[torch.randint(len(words), (n,), generator=g)]
        tgt[b, n + 1] = eos
    return tgt.to(dtype), bos, eos


def _shift_mistake(tgt_in: torch.Tensor, tgt_y: torch.Tensor, tgt: torch.Tensor) -> str | None:
    """Name a wrong pair (input, labels) of the right shapes, (batch, L - 1) each."""
    first, last = tgt[:, :-1], tgt[:, 1:]  # without the last token, without the first
    same = torch.equal
    if same(tgt_in, last) and same(tgt_y, first):
        return ("you shifted the wrong way: your input is the target without its first token "
                "(it starts at y_1, not <s>) and your labels are the target without its last "
                "(they start with <s>), so output i is trained to give back the token it was "
                "fed. The input is tgt[:, :-1] (<s> y_1 .. y_n), the labels tgt[:, 1:] (y_1 .. "
                "</s>): each output predicts the next token.")
    if same(tgt_in, first) and same(tgt_y, first):
        return ("your labels are the decoder's input itself, tgt[:, :-1]: label i sits at "
                "input position i, which the look-ahead mask lets output i see (the "
                "diagonal), so the model learns to copy. The labels are the target without "
                "its first token, tgt[:, 1:]: output i predicts the token after the ones it sees.")
    if same(tgt_in, last) and same(tgt_y, last):
        return ("your input and your labels are both tgt[:, 1:]: the input lost its <s> and "
                "each label sits at its own input position, visible on the diagonal of the "
                "look-ahead mask. The input is tgt[:, :-1] (it starts with <s>), the labels "
                "tgt[:, 1:].")
    if same(tgt_in, last):
        return ("your input is the target without its first token: it lost <s>, and output 0 "
                "has nothing to start from. The decoder's input is the target without its "
                "last token, tgt[:, :-1]: <s> y_1 .. y_n.")
    if same(tgt_y, first):
        return ("your labels are the target without its last token: they start with <s>, "
                "which is never to be predicted. The labels are the target without its first "
                "token, tgt[:, 1:]: y_1 .. y_n </s>.")
    return None


def _triple(result, name: str) -> tuple:
    if isinstance(result, (tuple, list)) and len(result) == 3:
        return tuple(result)
    if torch.is_tensor(result):
        got = f"one tensor of shape {tuple(result.shape)}"
    elif isinstance(result, (tuple, list)):
        kinds = ", ".join(type(r).__name__ for r in result)
        got = f"a {type(result).__name__} of {len(result)} items ({kinds})"
    else:
        got = "None (a missing `return`?)" if result is None else type(result).__name__
    raise ExerciseFailed(
        f"{name} should return the triple (tgt_in, tgt_y, tgt_mask): the decoder's input, the "
        f"labels and the input's target mask; got {got}"
    )


def _full_length_message(got: torch.Tensor, tgt: torch.Tensor, what: str) -> str:
    """Why the input or the labels kept all L positions, when the reason is known."""
    if torch.equal(got, tgt):
        if what == "input":
            return (" Your input is the whole target, unshifted. Drop its last token, "
                    "tgt[:, :-1]: then input position i holds the token before label i (<s> "
                    "before y_1), and the label itself stays hidden, one position to the right "
                    "of what the look-ahead mask lets output i see.")
        return (" Your labels are the whole target: drop its first token, <s>, which is never "
                "predicted: tgt[:, 1:].")
    if what == "input" and torch.equal(got, tgt.roll(1, dims=1)):
        return (" torch.roll moved the last token (</s> or padding) round to the front, and "
                "kept the length. The target already begins with <s>: the shift is a slice, "
                "tgt[:, :-1], L - 1 positions.")
    if what == "input" and torch.equal(got, torch.cat([tgt[:, :1], tgt[:, :-1]], dim=1)):
        return (" You put <s> in front once more, but the target already begins with it "
                "(<s> y_1 .. y_n </s>): the input is the target without its last token, "
                "tgt[:, :-1].")
    if what == "labels" and torch.equal(got[:, :-1], tgt[:, 1:]):
        return (" You added a position at the end to keep the length L; the labels are "
                "tgt[:, 1:], L - 1 positions, one per position of the input.")
    return ""


def _tokens_text(ids: torch.Tensor) -> str:
    """Token ids for a message: all of them when few, else the first 12 of each row."""
    if ids.size(-1) <= 40:
        return str(ids.tolist())
    return str([row[:12] + ["..."] for row in ids.tolist()]).replace("'...'", "...")


def _check_shift_once(fn: Callable, name: str, sizes: dict, g: torch.Generator) -> None:
    batch, L, pad_idx = sizes["batch"], sizes["L"], sizes["pad_idx"]
    tgt, bos, eos = _target_batch(g, batch, L, pad_idx, _ids(sizes))
    reference = Batch(tgt, tgt, pad_idx)  # the course's shift and mask (the source is unused here)
    call = _call_text(name, "tgt", tgt, pad_idx)
    hints = ((_BROADCAST, _table_hint(L - 1)),) if L - 1 >= LONG else ()
    result = _triple(_call(fn, tgt, pad_idx, hints=hints, roles=("tgt", "pad_idx")), name)
    tgt_in = _token_tensor(result[0], name, "the decoder's input tgt_in", tgt)
    tgt_y = _token_tensor(result[1], name, "the labels tgt_y", tgt)
    for got, what in ((tgt_in, "input"), (tgt_y, "labels")):
        hint = _full_length_message(got, tgt, what) if tuple(got.shape) == (batch, L) else ""
        _shape(got, (batch, L - 1), f"the {what} of {call}, with the target <s> y_1 .. y_n </s> "
               "and padding", _squeezed(got.shape, (batch, L - 1)) or hint)
    if not (torch.equal(tgt_in, reference.tgt_in) and torch.equal(tgt_y, reference.tgt_y)):
        message = _shift_mistake(tgt_in, tgt_y, tgt)
        if message:
            raise ExerciseFailed(message)
        wrong, what = ((tgt_in, "input") if not torch.equal(tgt_in, reference.tgt_in)
                       else (tgt_y, "labels"))
        expected = reference.tgt_in if what == "input" else reference.tgt_y
        raise _generic(
            f"mismatch in the {what} of {call} (<s> = {bos}, </s> = {eos}):\nexpected "
            f"{_tokens_text(expected)}\nyours    {_tokens_text(wrong)}"
        )
    mask = _mask(result[2], name, "the target mask tgt_mask")
    hint = (_squeezed(mask.shape, (batch, L - 1, L - 1)) or _short_table(mask, L - 1)
            or _target_shape_hint(tuple(mask.shape), batch, L - 1))
    if tuple(mask.shape) == (batch, L, L):
        hint = (" That is the mask of the whole target; the decoder reads tgt_in, L - 1 "
                "positions: target_mask(tgt_in, pad_idx).")
    _shape(mask, (batch, L - 1, L - 1), f"the target mask of {call}", hint)
    if not torch.equal(mask, reference.tgt_mask):
        if torch.equal(mask, target_mask(tgt_y, pad_idx)):
            raise ExerciseFailed(
                "your mask is built from the labels; the decoder's self-attention runs over its "
                "input, so the keys to hide are the input's padding: target_mask(tgt_in, "
                "pad_idx). (They differ where a shorter sentence's input holds </s> and its "
                "label is padding.)"
            )
        message = _target_mistake(mask, tgt_in, pad_idx, left_padded=False) if L <= SMALL else None
        if message:
            raise ExerciseFailed(f"in tgt_mask, {message}")
        raise _mismatch(mask, reference.tgt_mask, f"the target mask of {call}")


def check_decoder_input_and_labels(decoder_input_and_labels: Callable) -> None:
    """Check ``decoder_input_and_labels(tgt, pad_idx) -> (tgt_in, tgt_y, tgt_mask)`` against
    ``annotated.batching.Batch``, on targets ``<s> y_1 .. y_n </s>`` padded at the end, of the
    sizes of ``SHIFT_SIZES``.

    Diagnoses: an input changed in place, a result that is not a triple, token tensors of
    another dtype (int32 ids converted to int64 with .long() or by a torch.full without
    dtype=), input or labels of the full length (the target unshifted, ``torch.roll``, <s> put
    in front again, a position added to the labels), the shift the wrong way, labels equal to
    the input, <s> dropped from the input, <s> kept in the labels, the batch axis of a batch of
    one sentence dropped (a .squeeze()), a mask of the whole target or of the labels, the
    target mask's own mistakes (check_target_mask, a look-ahead table too short for 5,001
    positions among them), a result that a second call overwrites, and sizes written into the
    code.
    """
    name = _function(decoder_input_and_labels, "check_decoder_input_and_labels",
                     "decoder_input_and_labels")
    g = torch.Generator().manual_seed(2)
    _run_on_all_sizes(lambda sizes: _check_shift_once(decoder_input_and_labels, name, sizes, g),
                      SHIFT_SIZES, _hint("Slice the target whatever its length, and use the "
                                         "pad_idx you are given."))
    sizes = SHIFT_SIZES[0]  # again, then its sentences in reverse order: another triple
    tgt, _, _ = _target_batch(g, sizes["batch"], sizes["L"], sizes["pad_idx"])
    first = _call(decoder_input_and_labels, tgt, sizes["pad_idx"])
    _unchanged_by_a_second_call(
        lambda: _call(decoder_input_and_labels, tgt.flip(0), sizes["pad_idx"]), first, name,
        "the input, labels and mask")
    print(
        f"check_decoder_input_and_labels passed: {name} gives the input <s> y_1 .. y_n, the "
        "labels y_1 .. </s> and the input's target mask, as the course's Batch does, for "
        f"{len(SHIFT_SIZES)} batches (the last a single sentence of {LONG + 1:,} int32 ids, "
        "kept int32): output i sees <s> y_1 .. y_i and predicts y_(i+1)."
    )
