"""Checks of notebook 03 as declarations (``engine``): the padding, look-ahead and target masks of
``annotated.masks`` (bool, True where a query may attend to a key) and the right shift of
``annotated.batching.Batch`` that makes the decoder's input and labels."""

from collections.abc import Callable

import torch

from annotated.batching import Batch
from annotated.masks import padding_mask, subsequent_mask, target_mask
from annotated.support.grading.engine import Declaration, Items, Mistake, Probe, Tensor, check

# Within a set all sizes differ; every size and the pad index change from one set to the next. The last
# set is a batch of one sentence (a .squeeze() drops its axis) of int32 ids (ids keep their dtype), its
# masks LONG positions, beyond a table precomputed at 512 or 5,000 positions.
LONG = 5001
PADDING_SIZES = [dict(batch=3, L=6, pad_idx=0), dict(batch=4, L=5, pad_idx=2),
                 dict(batch=2, L=7, pad_idx=9), dict(batch=1, L=8, pad_idx=5, ids="int32")]
LOOK_AHEAD_SIZES = [dict(size=5), dict(size=7), dict(size=3), dict(size=LONG)]
TARGET_SIZES = [dict(batch=3, L=6, pad_idx=0), dict(batch=2, L=5, pad_idx=4),
                dict(batch=4, L=7, pad_idx=1), dict(batch=1, L=LONG, pad_idx=3, ids="int32")]
SHIFT_SIZES = [dict(batch=2, L=6, pad_idx=0), dict(batch=3, L=5, pad_idx=7),
               dict(batch=4, L=8, pad_idx=1), dict(batch=1, L=LONG + 1, pad_idx=6, ids="int32")]
SMALL = 64  # above this length the known mistakes' candidate masks would cost hundreds of megabytes
SIZE_SETS = {"check_padding_mask": PADDING_SIZES, "check_subsequent_mask": LOOK_AHEAD_SIZES,
             "check_target_mask": TARGET_SIZES, "check_decoder_input_and_labels": SHIFT_SIZES}
# The other device in a notebook ('meta' costs seconds at its first use: the grader and the tests use it).
OTHER_DEVICE: str | None = "cuda" if torch.cuda.is_available() else None
VOCAB = 12  # token ids 0 .. 11 in the checks' batches; every id but pad_idx is a real token
_CONVENTION = "the course's masks are bool, True where a query may attend to a key (notebook 03, annotated.masks)"


# ---------------------------------------------------------------- what a mask must be


def _dtype_message(found: dict, name: str, what: str, args: tuple = ()) -> str:
    """Why a mask of another dtype than bool is wrong, from what it holds."""
    start, values = f"{name} returned {what} as a torch.{found['dtype']} tensor", found["values"]
    if values is None:  # 'meta': no values to look at
        return f"{start}; {_CONVENTION}."
    if values.is_floating_point() and ((values == 0) | (values == float("-inf"))).all():
        return (f"{start} of 0.0 and -inf: that is the additive form of a mask, which nn.Transformer uses. But "
                f"{_CONVENTION}, and attention fills the scores with scores.masked_fill(~mask, float('-inf')). "
                "Return a bool tensor: a comparison (tokens != pad_idx) is one.")
    if not values.is_complex() and ((values == 0) | (values == 1)).all():
        kind, invert = (("0.0 and 1.0", "~ does not work on a float tensor") if values.is_floating_point() else
                        ("0 and 1", "~ on an integer tensor flips every bit (~1 is -2)"))
        return (f"{start} of {kind}: right in spirit, but {_CONVENTION}. masked_fill accepts only a bool mask, and "
                f"{invert}. A comparison is bool already: drop the .int(), .long() or .float(), and build tables "
                "with dtype=torch.bool.")
    return f"{start}; {_CONVENTION}: return the result of a comparison, or dtype=torch.bool."


def _mask(what: str, like: int | None = 0, device_from: int | None = None, label: str | None = None) -> Tensor:
    return Tensor(what, dtype="bool", like=like, device_from=device_from, kind="a bool", label=label,
                  dtype_message=_dtype_message)


# ---------------------------------------------------------------- inputs


def _tokens(g: torch.Generator, batch: int, L: int, pad_idx: int, pads: list[int],
            left: int | None = None, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    """(batch, L) random ids of ``dtype``, none equal to pad_idx, with pads[b] padding tokens at the end of
    row b (at the start of row ``left``). Row 0 begins with the smallest ids that are not the pad index (0
    among them when pad_idx != 0): an answer that compares with 0, or keeps the ids above pad_idx, shows."""
    real_ids = torch.tensor([i for i in range(VOCAB) if i != pad_idx])
    tokens = real_ids[torch.randint(len(real_ids), (batch, L), generator=g)]
    tokens[0, :3] = real_ids[:3]
    for b, n in enumerate(pads):  # n = 0: an empty slice
        tokens[b, slice(None, n) if b == left else slice(L - n, None)] = pad_idx
    return tokens.to(dtype)


def _ids(sizes: dict) -> torch.dtype:
    return {"int32": torch.int32}.get(sizes.get("ids"), torch.int64)


def _call_text(name: str, what: str, tokens: torch.Tensor, pad_idx: int) -> str:
    """How the check called the function: the shape of the ids, their dtype if not int64."""
    dtype = "" if tokens.dtype == torch.int64 else f" {str(tokens.dtype).replace('torch.', '')}"
    return f"{name}({what} of shape {tuple(tokens.shape)}{dtype}, pad_idx={pad_idx})"


def _table_hint(L: int) -> str:
    """Why a look-ahead mask falls short at ``L`` positions, when ``L`` is the long length."""
    return "" if L < LONG else (
        f"\nHint: here L = {L}, longer than a table precomputed at a fixed size (512 or 5,000 positions) and "
        "sliced, table[:L, :L]. Build the look-ahead mask from L on every call, subsequent_mask(L, tokens.device).")


def _short_table(found: dict, probe: Probe) -> str | None:
    """A shape hint for a square mask smaller than (size, size): a sliced table."""
    shape, size = found["shape"], probe.tags["L"]
    n = shape[-1] if shape else 0
    if len(shape) >= 2 and shape[-2] == n and 0 < n < size:
        return (f"Your mask stops at {n} positions: a table precomputed at that size and sliced cannot serve a "
                "longer sentence. Build the mask from the size on every call.")
    return None


_BROADCAST = r"must match the size of tensor|not broadcastable|doesn't match the broadcast shape"


def _on_device_error(device: str) -> Callable:
    """The message of an exception with tokens on another device than the cpu."""
    return lambda err, name: (
        f"with tokens on the device {device!r} (as on a GPU), {name} raised {err['type']}: {err['message']}" + (
            "\nHint: a tensor of yours is created on the cpu while the tokens are elsewhere; build each one where "
            "the tokens are, device=tokens.device (subsequent_mask(L, tokens.device))."
            if "device" in err["message"] else ""))


def _small(probe: Probe) -> bool:
    return probe.tags.get("L", 0) <= SMALL


def _hard_coded_pad(got: torch.Tensor | None, tokens: torch.Tensor, pad_idx: int, full: Callable) -> str | None:
    """The id an answer compared with instead of pad_idx, if ``got`` equals the mask of the tokens unequal
    to that id (``full`` turns a (batch, L) comparison into the mask)."""
    for v in range(VOCAB) if got is not None else ():
        if v != pad_idx and torch.equal(got, full(tokens != v)):
            return (f"your mask hides the tokens equal to {v}, but here pad_idx = {pad_idx} (and {v} is a real "
                    "token): is the pad index written into your code? Compare with the pad_idx argument.")
    return None


def _probe(tokens: torch.Tensor, pad_idx: int, what: str = "tokens", **options) -> Probe:
    return Probe((tokens, pad_idx), "{what} of " + _call_text("{name}", what, tokens, pad_idx), **options)


# ---------------------------------------------------------------- 3.1 the padding mask


def _padding_tokens(g: torch.Generator, sizes: dict) -> torch.Tensor:
    """The tokens of a set of sizes: sentence b padded with 2b tokens (a sentence alone, 2)."""
    batch, L, pad_idx = sizes["batch"], sizes["L"], sizes["pad_idx"]
    pads = [min(2 * b, L - 1) for b in range(batch)] if batch > 1 else [2]
    return _tokens(g, batch, L, pad_idx, pads, dtype=_ids(sizes))


def _padding_probes(device: str | None) -> list[Probe]:
    g = torch.Generator().manual_seed(0)
    probes = [_probe(_padding_tokens(g, s), s["pad_idx"], sizes=s, tags=dict(s)) for s in PADDING_SIZES]
    sizes = PADDING_SIZES[0]  # again, then its sentences in reverse order: another mask
    tokens = _padding_tokens(g, sizes)
    return probes + [_probe(tokens, sizes["pad_idx"], again=(tokens.flip(0), sizes["pad_idx"]), tags=dict(sizes))]


PADDING_MISTAKES = tuple(Mistake(message, name, stage="shape", shape=shape, example=example, when=when)
                         for name, shape, message, example, when in (
    ("the query axis missing", lambda p: (p.tags["batch"], p.tags["L"]),
     "You have (batch, L): without its query axis the mask lines up with the scores' (L_q, L_k), and hides "
     "sentence n's padding from query n of every sentence. Add the axis of size 1 in the middle: "
     "(tokens != pad_idx).unsqueeze(-2).", lambda tokens, pad_idx: tokens != pad_idx, lambda p: p.tags["batch"] > 1),
    ("the axis of size 1 last", lambda p: (p.tags["batch"], p.tags["L"], 1),
     "You have (batch, L, 1): that broadcasts over the keys, not the queries, so it hides whole query rows and "
     "lets every query see the padding keys. The 1 goes in the middle: unsqueeze(-2).",
     lambda tokens, pad_idx: (tokens != pad_idx).unsqueeze(-1), lambda p: True),
    ("an axis for the heads", lambda p: (p.tags["batch"], 1, 1, p.tags["L"]),
     "You have (batch, 1, 1, L), with an axis for the heads: MultiHeadAttention adds that axis itself "
     "(notebook 04); this mask has one dimension per dimension of the scores (batch, L_q, L_k).",
     lambda tokens, pad_idx: (tokens != pad_idx)[:, None, None, :], lambda p: True),
    ("expanded over the queries", lambda p: (p.tags["batch"], p.tags["L"], p.tags["L"]),
     "You expanded it to (batch, L, L): keep the axis of size 1 and let broadcasting repeat it, so that the mask "
     "serves any number of queries (cross-attention).",
     lambda tokens, pad_idx: (tokens != pad_idx).unsqueeze(1).expand(-1, tokens.size(1), -1), lambda p: True),
    ("the axis of size 1 first", lambda p: (1, p.tags["batch"], p.tags["L"]),
     "You have (1, batch, L): the axis of size 1 goes after the batch, unsqueeze(-2), not unsqueeze(0).",
     lambda tokens, pad_idx: (tokens != pad_idx).unsqueeze(0), lambda p: True),
)) + (
    Mistake(f"your padding mask is inverted: it is True at the padding, but {_CONVENTION}: tokens != pad_idx, not "
            "==. (nn.Transformer's key_padding_mask means the opposite, True = ignore.)", "an inverted mask",
            like=lambda tokens, pad_idx: ~padding_mask(tokens, pad_idx)),
    Mistake("", "a pad index written into the code",
            find=lambda found, p: _hard_coded_pad(found["values"], p.args[0], p.args[1], lambda m: m.unsqueeze(1)),
            example=lambda tokens, pad_idx: (tokens != 0).unsqueeze(1)),
    Mistake(lambda p: (f"your mask keeps only the ids above pad_idx = {p.args[1]}: ids below it (0 .. "
                       f"{p.args[1] - 1} here, such as <s> or <unk>) are real tokens too: tokens != pad_idx."),
            "ids below the pad index taken for padding", when=lambda p: p.args[1] > 0,
            like=lambda tokens, pad_idx: (tokens > pad_idx).unsqueeze(1)),
)

PADDING = Declaration(
    check="check_padding_mask", function="padding_mask", roles=("tokens", "pad_idx"), reference=padding_mask,
    probes=_padding_probes, returns=_mask("the padding mask"), mistakes=PADDING_MISTAKES,
    sizes_fix="Read batch and L from tokens.shape, and compare with the pad_idx you are given.",
    passed=(f"check_padding_mask passed: {{name}} gives (batch, 1, L) bool masks, True at the real "
            f"tokens, equal to the course's padding_mask for {len(PADDING_SIZES)} batches with "
            f"pad indices {', '.join(str(s['pad_idx']) for s in PADDING_SIZES)} (one of a single sentence of "
            "int32 ids), and a second call leaves the first mask as it was."),
)


def check_padding_mask(padding_mask_fn: Callable) -> None:
    """Check ``padding_mask(tokens, pad_idx)``: (batch, L) ids -> (batch, 1, L) bool, True at the real tokens, on
    the sizes and pad indices of ``PADDING_SIZES``.

    Diagnoses: an input changed in place, a result that is not a bool tensor (a float mask of 0 and -inf or of 0 and 1,
    an integer mask), wrong shapes ((batch, L), (batch, L, 1), (batch, 1, 1, L), (batch, L, L), (1, batch, L)), the
    batch axis of a batch of one sentence dropped (a .squeeze()), an inverted mask, a pad index written into the code,
    ids below the pad index taken for padding, a result that a second call overwrites (a tensor kept between calls), and
    sizes written into the code."""
    check(PADDING, padding_mask_fn, OTHER_DEVICE)


# ---------------------------------------------------------------- 3.2 the look-ahead mask


def _look_ahead_probes(device: str | None) -> list[Probe]:
    probes = []
    for sizes in LOOK_AHEAD_SIZES:
        size = sizes["size"]
        probes.append(Probe((size,), f"{{name}}({size})", sizes=sizes, tags=dict(L=size)))
        if device:  # the device argument: the mask is built where it is asked for
            probes.append(Probe((size, device), f"{{name}}({size}, device={device!r})", sizes=sizes, tags=dict(L=size),
                                compare=device != "meta", mistakes=False))
    size = LOOK_AHEAD_SIZES[0]["size"]  # again, then a smaller size
    return probes + [Probe((size,), f"{{name}}({size})", again=(size - 2,), again_what=f"the mask of size {size}",
                           tags=dict(L=size))]


def _triangle(part: str, diagonal: int = 0) -> Callable:
    return lambda size, device=None: getattr(torch.ones(size, size, dtype=torch.bool, device=device), part)(diagonal)


LOOK_AHEAD_MISTAKES = (
    Mistake("(1, size, size) is the shape attention takes on a batch; subsequent_mask returns the one (size, size) "
            "table, which target_mask broadcasts against (batch, 1, L).", "a batch axis added",
            stage="shape", shape=lambda p: (1, p.tags["L"], p.tags["L"]),
            example=lambda size, device=None: subsequent_mask(size, device).unsqueeze(0)),
    Mistake("", "a table of a fixed size, sliced", stage="shape", find=_short_table,
            example=lambda size, device=None: torch.ones(512, 512, dtype=torch.bool).tril()[:size, :size].to(
                device or "cpu")),
) + tuple(Mistake(message, name, like=_triangle(*wrong), when=_small) for name, wrong, message in (
    ("the diagonal excluded", ("tril", -1),
     "the diagonal is excluded: query i must see key i, its own position (after the right shift, input i is the "
     "previous word); without it query 0 sees nothing at all. Keep the diagonal: tril()."),
    ("an inverted mask", ("triu", 1),
     "your look-ahead mask is inverted: True above the diagonal. That is nn.Transformer's convention (True = masked "
     "out); in the course True means 'may attend': the lower triangle, diagonal included, tril()."),
    ("the upper triangle", ("triu",),
     "you built the upper triangle: query i sees keys j >= i, the future. Query i may attend to keys j <= i: the "
     "lower triangle, tril()."),
    ("nothing hidden", ("tril", 10**6),
     "your mask is True everywhere: nothing is hidden, so every position sees the future. Keep the lower "
     "triangle: tril()."),
))

LOOK_AHEAD = Declaration(
    check="check_subsequent_mask", function="subsequent_mask", roles=("size", "device"),
    reference=subsequent_mask, probes=_look_ahead_probes, mistakes=LOOK_AHEAD_MISTAKES,
    returns=_mask("the look-ahead mask", like=None, device_from=1), sizes_fix="Build the table from the size argument.",
    passed=("check_subsequent_mask passed: {name} gives the lower triangle, diagonal included, "
            f"for sizes {', '.join(format(s['size'], ',') for s in LOOK_AHEAD_SIZES)} "
            "(the course's subsequent_mask, and ~ of nn.Transformer's -inf mask), and a later call leaves an "
            "earlier mask as it was."),
)


def check_subsequent_mask(subsequent_mask_fn: Callable) -> None:
    """Check ``subsequent_mask(size, device=None)``: the (size, size) bool look-ahead mask, True where key j <=
    query i, on ``LOOK_AHEAD_SIZES``, built on the device it is given.

    Diagnoses: a result that is not a bool tensor (nn.Transformer's float mask of 0 and -inf named as such), the shape
    (1, size, size), the diagonal excluded, the inverted mask (nn.Transformer's True = masked out), the upper triangle,
    a mask that hides nothing, a device ignored, a table precomputed at a fixed size (512 or 5,000 positions) that a
    longer mask outgrows, a result that a later call overwrites (a tensor kept between calls and refilled or resized),
    and sizes written into the code."""
    check(LOOK_AHEAD, subsequent_mask_fn, OTHER_DEVICE)


# ---------------------------------------------------------------- 3.3 the target mask


def _target_tokens(g: torch.Generator, sizes: dict) -> torch.Tensor:
    """Right padding of 1, 2, ... tokens; the last sentence padded at the start instead."""
    batch, L, pad_idx = sizes["batch"], sizes["L"], sizes["pad_idx"]
    pads = [min(b + 1, L - 1) for b in range(batch - 1)] + [2]
    return _tokens(g, batch, L, pad_idx, pads, left=batch - 1, dtype=_ids(sizes))


def _target_probes(device: str | None) -> list[Probe]:
    g, probes = torch.Generator().manual_seed(1), []
    for sizes in TARGET_SIZES:
        L, pad_idx, tokens, tags = sizes["L"], sizes["pad_idx"], _target_tokens(g, sizes), dict(sizes, left_padded=True)
        hints = ((_BROADCAST, _table_hint(L)),) if L >= LONG else ()
        probes.append(_probe(tokens, pad_idx, sizes=sizes, hints=hints, tags=tags))
        if device:  # built where the tokens are
            call = _call_text("{name}", "tokens", tokens, pad_idx)
            probes.append(Probe((tokens.to(device), pad_idx), "{what} of " + call + f" on the device {device!r}",
                                sizes=sizes, tags=tags, compare=device != "meta", mistakes=False,
                                on_error=_on_device_error(device)))
    sizes = TARGET_SIZES[0]  # again, then its sentences in reverse order: another mask
    tokens = _target_tokens(g, sizes)
    return probes + [_probe(tokens, sizes["pad_idx"], again=(tokens.flip(0), sizes["pad_idx"]),
                            tags=dict(sizes, left_padded=True))]


def _wrong_target(combine: Callable) -> Callable:
    """A wrong target mask: combine(real keys (batch, 1, L), real queries (batch, L, 1), look-ahead, ones)."""
    def wrong(tokens, pad_idx):
        L, keys = tokens.size(-1), padding_mask(tokens, pad_idx)
        return combine(keys, keys.transpose(1, 2), subsequent_mask(L, tokens.device),
                       torch.ones(L, L, dtype=torch.bool, device=tokens.device))
    return wrong


_BOTH = "Combine both masks: padding_mask(tokens, pad_idx) & subsequent_mask(L)."
# The usual wrong target masks: (name, the wrong mask, its message, or a function of the probe).
_WRONG_TARGETS = (
    ("an inverted mask", _wrong_target(lambda k, q, c, o: ~(k & c)),
     f"your target mask is inverted: True where a key is hidden, but {_CONVENTION}."),
    ("| instead of &", _wrong_target(lambda k, q, c, o: k | c),
     "you combined the two masks with | (or): a key is then allowed when it is a real token OR in the past. Both "
     "must hold: padding_mask & subsequent_mask."),
    ("the padding part missing", _wrong_target(lambda k, q, c, o: c.expand(k.size(0), -1, -1)), lambda p: (
        "the padding keys are not hidden, only the future: the look-ahead mask alone hides right padding from the "
        "real queries, but not from the queries at padding positions, and not left padding at all"
        + (" (the check's last sentence is padded at the start). " if p.tags["left_padded"] else ". ") + _BOTH)),
    ("the look-ahead part missing", _wrong_target(lambda k, q, c, o: k.expand(-1, c.size(0), -1)),
     "the future is not hidden, only the padding: query i sees the keys j > i. " + _BOTH),
    ("padding that hides queries", _wrong_target(lambda k, q, c, o: q & c),
     "the padding hides query rows instead of key columns: your padding part is (batch, L, 1). It must be "
     "(batch, 1, L), the padding_mask of exercise 3.1."),
    ("padding queries hidden too", _wrong_target(lambda k, q, c, o: q & k & c),
     "you also hid the queries at padding positions: their rows are all False, so a plain softmax gives them NaN, "
     "which spreads into the gradients. Hide padding keys only (the loss ignores those queries' outputs). " + _BOTH),
    ("the look-ahead part inverted", _wrong_target(lambda k, q, c, o: k & o.triu(1)),
     "the look-ahead part is inverted: True above the diagonal (nn.Transformer's convention). The course's "
     "subsequent_mask is the lower triangle, True where key j <= query i."),
    ("the look-ahead part upper-triangular", _wrong_target(lambda k, q, c, o: k & o.triu()),
     "the look-ahead part is the upper triangle: query i sees the future keys j >= i. Use tril()."),
    ("the look-ahead part without its diagonal", _wrong_target(lambda k, q, c, o: k & o.tril(-1)),
     "the look-ahead part excludes the diagonal: query i must see key i, its own position. Use tril(), not tril(-1)."),
)


_TARGET_SHAPES = (
    ("an axis for the heads", lambda p: (p.tags["batch"], 1, p.tags["L"], p.tags["L"]),
     "You have (batch, 1, L, L), with an axis for the heads: MultiHeadAttention adds that axis itself; the "
     "target mask has one dimension per dimension of the scores (batch, L_q, L_k).",
     lambda tokens, pad_idx: target_mask(tokens, pad_idx).unsqueeze(1)),
    ("one table for the whole batch", lambda p: (p.tags["L"], p.tags["L"]),
     "You have (L, L), one table for the whole batch: the padding differs from sentence to sentence, and "
     "(batch, 1, L) & (L, L) broadcasts to (batch, L, L).", lambda tokens, pad_idx: target_mask(tokens, pad_idx)[0]),
    ("the padding mask alone", lambda p: (p.tags["batch"], 1, p.tags["L"]),
     "You have the shape of the padding mask alone: & it with the look-ahead mask (L, L).", padding_mask),
)


TARGET_MISTAKES = (
    Mistake("", "a table of a fixed size, sliced", stage="shape", find=_short_table,
            example=lambda tokens, pad_idx: target_mask(tokens, pad_idx)[..., :512, :512]),
    *(Mistake(message, name, stage="shape", shape=shape, example=example, when=lambda p: p.tags["batch"] != 1)
      for name, shape, message, example in _TARGET_SHAPES),
    *(Mistake(message, name, like=wrong, when=_small) for name, wrong, message in _WRONG_TARGETS),
    Mistake("", "a pad index written into the code", when=_small,
            find=lambda found, p: _hard_coded_pad(found["values"], p.args[0], p.args[1],
                                                  lambda m: m.unsqueeze(1) & subsequent_mask(p.args[0].size(-1))),
            example=lambda tokens, pad_idx: target_mask(tokens, 0)),
)

TARGET = Declaration(
    check="check_target_mask", function="target_mask", roles=("tokens", "pad_idx"), reference=target_mask,
    probes=_target_probes, returns=_mask("the target mask"), mistakes=TARGET_MISTAKES,
    sizes_fix="Read L from tokens.shape (tokens.size(-1)) and compare with the pad_idx you are given.",
    passed=(f"check_target_mask passed: {{name}} equals the course's target_mask, padding & "
            f"look-ahead, for {len(TARGET_SIZES)} batches padded on the right and on the left (the "
            f"last a single sentence of {LONG:,} int32 ids), and a second call leaves the first "
            "mask as it was."),
)


def check_target_mask(target_mask_fn: Callable) -> None:
    """Check ``target_mask(tokens, pad_idx)``: the (batch, L, L) bool mask of decoder self-attention, padding and
    future keys hidden, on ``TARGET_SIZES`` (one sentence of each batch padded at the start), on another device too.

    Diagnoses: a result that is not a bool tensor, wrong shapes ((batch, 1, L, L), (L, L), (batch, 1, L)), the batch
    axis of a batch of one sentence dropped (a .squeeze()), an inverted mask, | instead of &, the padding or the
    look-ahead part missing, padding that hides query rows instead of key columns, padding queries hidden too, a
    look-ahead part inverted, upper-triangular or without its diagonal, a look-ahead table precomputed at a fixed size
    (512 or 5,000 positions) that a sentence of 5,001 tokens outgrows, a result that a second call overwrites (a tensor
    kept between calls), a pad index or sizes written into the code, and a look-ahead mask built on the cpu for tokens
    elsewhere."""
    check(TARGET, target_mask_fn, OTHER_DEVICE)


# ---------------------------------------------------------------- 3.4 the right shift


def _target_batch(g: torch.Generator, batch: int, L: int, pad_idx: int,
                  dtype: torch.dtype = torch.int64) -> tuple[torch.Tensor, int, int]:
    """(batch, L) targets <s> y_1 .. y_n </s> and padding, n = L - 2, L - 4, ... (at least 1; a sentence
    alone: L - 3), so that the decoder's input holds padding too; with the ids of <s> and </s>."""
    bos, eos, *words = [i for i in range(VOCAB) if i != pad_idx]
    words, tgt = torch.tensor(words), torch.full((batch, L), pad_idx)
    for b in range(batch):
        n = max(1, L - 2 - 2 * b) if batch > 1 else L - 3
        tgt[b, 0], tgt[b, n + 1] = bos, eos
        tgt[b, 1 : n + 1] = words[torch.randint(len(words), (n,), generator=g)]
    return tgt.to(dtype), bos, eos


def course_shift(tgt: torch.Tensor, pad_idx: int) -> tuple:
    """The course's (tgt_in, tgt_y, tgt_mask), from ``annotated.batching.Batch``."""
    batch = Batch(tgt, tgt, pad_idx)  # the source is unused here
    return batch.tgt_in, batch.tgt_y, batch.tgt_mask


def _ids_dtype(found: dict, name: str, what: str, args: tuple) -> str:
    dtype = getattr(torch, found["dtype"])
    why = ("(the embedding layer takes int32 ids as well as int64 ones): no .long(), and a tensor you fill takes "
           "the target's dtype, torch.full(..., dtype=tgt.dtype)" if not dtype.is_floating_point and
           dtype != torch.bool else "(the embedding layer needs integer ids)")
    return (f"{name} returned {what} as {dtype}; it holds token ids, so it keeps the target's dtype, "
            f"{args[0].dtype}: slice the target, do not convert it {why}.")


def _token_ids(what: str, label: str) -> Tensor:
    return Tensor(what, dtype="ids", like=0, kind="a token", label=label, dtype_message=_ids_dtype)


def _shift_probes(device: str | None) -> list[Probe]:
    g, probes = torch.Generator().manual_seed(2), []
    for i, sizes in enumerate([*SHIFT_SIZES, SHIFT_SIZES[0]]):  # the first again, then reversed: another triple
        L, pad_idx, again = sizes["L"], sizes["pad_idx"], i == len(SHIFT_SIZES)
        tgt, bos, eos = _target_batch(g, sizes["batch"], L, pad_idx, _ids(sizes))
        probes.append(Probe((tgt, pad_idx), "{what} of " + _call_text("{name}", "tgt", tgt, pad_idx) +
                            f" (<s> = {bos}, </s> = {eos})", sizes=None if again else sizes,
                            again=(tgt.flip(0), pad_idx) if again else None,
                            hints=((_BROADCAST, _table_hint(L - 1)),) if L - 1 >= LONG else (),
                            tags=dict(sizes, L=L - 1, left_padded=False)))
    return probes


def _first(t):   # the target without its last token: <s> y_1 .. y_n
    return t[:, :-1]


def _last(t):    # the target without its first token: y_1 .. </s>
    return t[:, 1:]


def _shift(tgt_in: Callable = _first, tgt_y: Callable = _last, mask: Callable | None = None) -> Callable:
    """A right shift with one thing changed (a known mistake, or its example)."""
    def decoder_input_and_labels(tgt, pad_idx):
        x, y = tgt_in(tgt), tgt_y(tgt)
        return x, y, target_mask(x, pad_idx) if mask is None else mask(tgt, x, y, pad_idx)
    return decoder_input_and_labels


def _added_position(found: dict, p: Probe) -> str | None:
    values, tgt = found["values"], p.args[0]
    if values is not None and values.dim() == 2 and values.shape == tgt.shape and torch.equal(values[:, :-1],
                                                                                             tgt[:, 1:]):
        return "You added a position at the end to keep the length L; the labels are tgt[:, 1:], L - 1 positions."
    return None


_INPUT, _LABELS = "The input is tgt[:, :-1] (<s> y_1 .. y_n)", "the labels tgt[:, 1:] (y_1 .. </s>)"
SHIFT_MISTAKES = (
    *(Mistake(message, name, stage="shape", like=_shift(**wrong), items=items) for name, wrong, items, message in (
        ("the input unshifted", dict(tgt_in=lambda t: t), (0,),
         "Your input is the whole target, unshifted. Drop its last token, tgt[:, :-1], so that input i holds the token "
         "before label i and the label itself stays hidden from output i."),
        ("torch.roll", dict(tgt_in=lambda t: t.roll(1, dims=1)), (0,),
         "torch.roll moved the last token round to the front, and kept the length. The target already begins with "
         "<s>: the shift is a slice, tgt[:, :-1]."),
        ("<s> put in front again", dict(tgt_in=lambda t: torch.cat([t[:, :1], t[:, :-1]], dim=1)), (0,),
         "You put <s> in front once more, but the target already begins with it: the input is tgt[:, :-1]."),
        ("the labels unshifted", dict(tgt_y=lambda t: t), (1,),
         "Your labels are the whole target: drop its first token, <s>, which is never predicted: tgt[:, 1:]."))),
    Mistake("", "a position added to the labels", stage="shape", item=1, find=_added_position,
            example=_shift(tgt_y=lambda t: torch.cat([t[:, 1:], t[:, -1:]], dim=1))),
    Mistake("That is the mask of the whole target; the decoder reads tgt_in, L - 1 positions: "
            "target_mask(tgt_in, pad_idx).", "the mask of the whole target", stage="shape", item=2,
            shape=lambda p: (p.args[0].size(0), p.args[0].size(1), p.args[0].size(1)),
            example=_shift(mask=lambda tgt, x, y, pad: target_mask(tgt, pad))),
    Mistake("", "a table of a fixed size, sliced", stage="shape", item=2, find=_short_table,
            example=_shift(mask=lambda tgt, x, y, pad: target_mask(x, pad)[..., :512, :512])),
    *(Mistake(message, name, stage="shape", item=2, when=lambda p: p.tags["batch"] > 1, shape=shape,
              example=_shift(mask=lambda tgt, x, y, pad, wrong=wrong: wrong(x, pad)))
      for name, shape, message, wrong in _TARGET_SHAPES),  # (the probes' tags say L - 1: the input's length)
    *(Mistake(message, name, like=_shift(**wrong), items=items) for name, wrong, items, message in (
        ("shifted the wrong way", dict(tgt_in=_last, tgt_y=_first), (0, 1),
         f"you shifted the wrong way, so output i is trained to give back the token it was fed. {_INPUT}, {_LABELS}."),
        ("labels equal to the input", dict(tgt_y=_first), (0, 1),
         "your labels are the decoder's input itself, tgt[:, :-1]: output i sees label i (the diagonal of the "
         f"look-ahead mask), so the model learns to copy. {_INPUT}, {_LABELS}."),
        ("input and labels both without <s>", dict(tgt_in=_last), (0, 1),
         "your input and your labels are both tgt[:, 1:]: the input lost its <s> and each label is visible at its "
         f"own input position. {_INPUT}, {_LABELS}."),
        ("<s> dropped from the input", dict(tgt_in=_last, tgt_y=lambda t: t[:, 1:].flip(0)), (0,),
         f"your input is the target without its first token: it lost <s>, and output 0 has nothing to start from. "
         f"{_INPUT}."),
        ("<s> kept in the labels", dict(tgt_in=lambda t: t[:, :-1].flip(0), tgt_y=_first), (1,),
         "your labels are the target without its last token: they start with <s>, which is never to be predicted: "
         "tgt[:, 1:]."),
        ("the mask of the labels", dict(mask=lambda tgt, x, y, pad: target_mask(y, pad)), (2,),
         "your mask is built from the labels; the decoder's self-attention runs over its input: "
         "target_mask(tgt_in, pad_idx)."))),
    # (Without a sentence padded at the start, "padding queries hidden too" gives the mask of
    # "padding that hides queries": the first names both.)
    *(Mistake(message, name, prefix="in tgt_mask, ", when=_small, items=(2,),
              like=_shift(mask=lambda tgt, x, y, pad, wrong=wrong: wrong(x, pad)))
      for name, wrong, message in _WRONG_TARGETS if name != "padding queries hidden too"),
    Mistake("", "a pad index written into the code", prefix="in tgt_mask, ", item=2, when=_small,
            find=lambda found, p: _hard_coded_pad(found["values"], p.args[0][:, :-1], p.args[1],
                                                  lambda m: m.unsqueeze(1) & subsequent_mask(p.args[0].size(1) - 1)),
            example=_shift(mask=lambda tgt, x, y, pad: target_mask(x, 0))),
)


SHIFT = Declaration(
    check="check_decoder_input_and_labels", function="decoder_input_and_labels", roles=("tgt", "pad_idx"),
    reference=course_shift, probes=_shift_probes,
    returns=Items((_token_ids("the decoder's input tgt_in", "the input"), _token_ids("the labels tgt_y", "the labels"),
                   _mask("the target mask tgt_mask", label="the target mask")),
                  what=("the triple (tgt_in, tgt_y, tgt_mask): the decoder's input, the "
                        "labels and the input's target mask"), again_what="the input, labels and mask"),
    mistakes=SHIFT_MISTAKES, sizes_fix="Slice the target whatever its length, and use the pad_idx you are given.",
    passed=("check_decoder_input_and_labels passed: {name} gives the input <s> y_1 .. y_n, the "
            "labels y_1 .. </s> and the input's target mask, as the course's Batch does, for "
            f"{len(SHIFT_SIZES)} batches (the last a single sentence of {LONG + 1:,} int32 ids, "
            "kept int32): output i sees <s> y_1 .. y_i and predicts y_(i+1)."),
)


def check_decoder_input_and_labels(decoder_input_and_labels: Callable) -> None:
    """Check ``decoder_input_and_labels(tgt, pad_idx) -> (tgt_in, tgt_y, tgt_mask)`` against
    ``annotated.batching.Batch``, on targets ``<s> y_1 .. y_n </s>`` padded at the end, of ``SHIFT_SIZES``.

    Diagnoses: an input changed in place, a result that is not a triple, token tensors of another dtype (int32 ids
    converted to int64 with .long() or by a torch.full without dtype=), input or labels of the full length (the target
    unshifted, ``torch.roll``, <s> put in front again, a position added to the labels), the shift the wrong way, labels
    equal to the input, <s> dropped from the input, <s> kept in the labels, the batch axis of a batch of one sentence
    dropped (a .squeeze()), a mask of the whole target or of the labels, the target mask's own mistakes
    (check_target_mask, a look-ahead table too short for 5,001 positions among them), a result that a second call
    overwrites, and sizes written into the code."""
    check(SHIFT, decoder_input_and_labels, OTHER_DEVICE)


DECLARATIONS = {d.check: d for d in (PADDING, LOOK_AHEAD, TARGET, SHIFT)}
