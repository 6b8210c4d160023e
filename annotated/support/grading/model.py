"""Checks of notebook 07's exercises: the decoder layer's forward pass, the tied embeddings and
generator, and the parameter count of ``annotated.model.make_model``.

Each compares with the course's own modules (``DecoderLayer``, ``Embeddings``, ``Generator``,
``make_model`` and ``count_parameters``) and, where PyTorch has the same piece, with it too
(``nn.TransformerDecoderLayer``, ``nn.Transformer``).

The count is a declaration (``annotated.support.grading.engine``, an int, its config sent as data by
``record.build``), judged by the grader in its own process. The decoder layer and the tied embeddings
are still code run where the learner's function runs: see ``check_decoder_layer_forward`` and
``check_tied_embeddings``."""

import contextlib
import inspect
import itertools
import math
from collections.abc import Callable

import torch
import torch.nn as nn

from annotated.feed_forward import PositionwiseFeedForward
from annotated.masks import subsequent_mask
from annotated.model import DecoderLayer, TransformerConfig, count_parameters, make_model
from annotated.multi_head import MultiHeadAttention
from annotated.positional import sinusoidal_table
from annotated.support import record as recorder
from annotated.support.grading.core import (
    ExerciseFailed, _aliasing, _assert_close, _assert_close64, _call, _function, _generic,
    _gradients_flow, _hard_coded_hint, _modes, _modes_kept, _run_on_all_sizes, _same, _shape,
    _squeezed, _tensor,
)
from annotated.support.grading.engine import Declaration, Mistake, Probe, Value, check
from annotated.support.reference import copy_layer_norm_from_torch, copy_mha_from_torch

# Within a set every size differs (so a swapped tensor shows in its shape); from one set to
# the next every size changes (so a size written into the code fails). d_k = d_model / h is
# 6, 5 and 2, never 4. The last set is a batch of one sentence (a .squeeze() drops it).
LAYER_SIZES = [dict(batch=3, L_tgt=5, L_src=7, d_model=12, h=2, d_ff=20),
               dict(batch=2, L_tgt=6, L_src=4, d_model=15, h=3, d_ff=22),
               dict(batch=1, L_tgt=4, L_src=8, d_model=14, h=7, d_ff=9)]
# The dropout of the sublayer connections in the check of training and evaluation modes.
LAYER_DROPOUT = 0.5
TIE_SIZES = [dict(src_vocab=13, tgt_vocab=11, d_model=6),
             dict(src_vocab=9, tgt_vocab=17, d_model=10)]
COUNT_SIZES = [dict(src_vocab=13, tgt_vocab=11, d_model=12, d_ff=20, h=2, N=3),
               dict(src_vocab=37, tgt_vocab=29, d_model=24, d_ff=40, h=4, N=2),
               dict(src_vocab=7, tgt_vocab=19, d_model=30, d_ff=50, h=5, N=4)]
SIZE_SETS = {"check_decoder_layer_forward": LAYER_SIZES, "check_tied_embeddings": TIE_SIZES,
             "check_parameter_count": COUNT_SIZES}


@contextlib.contextmanager
def _one_thread():
    """Run on one thread, then restore the setting: the check's layers are tiny, and threads
    cost more than they bring (measured on a busy two-core machine: 0.07 s instead of 1.4 s
    for the decoder layer's check)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


# ---------------------------------------------------------------- the decoder layer


class _Layer(DecoderLayer):
    """The course's DecoderLayer with a one-line repr, so that an error message that lists the
    arguments of the learner's call names the layer without printing all its modules."""

    def __repr__(self) -> str:
        attn, ff = self.self_attn, self.feed_forward
        order = "pre-norm" if self.sublayer[0].norm_first else "post-norm"
        return (f"DecoderLayer(d_model={attn.d_model}, h={attn.h}, "
                f"d_ff={ff.W_1.out_features}, {order})")


# Named as the course's class, so an error such as "'DecoderLayer' object has no attribute" reads
# as it would in the notebook.
_Layer.__name__ = _Layer.__qualname__ = "DecoderLayer"


def _randomize(module: nn.Module, g: torch.Generator) -> None:
    """Random values for every parameter, layer norms included (gamma around 1, beta and the
    biases around 0), so that each parameter, and so each mistake, shows in the output."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if p.dim() > 1:
                bound = 1 / math.sqrt(p.size(1))
                p.copy_((torch.rand(p.shape, generator=g) * 2 - 1) * bound)
            elif "norm" in name and name.endswith("weight"):
                p.copy_(1 + 0.5 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.5 * torch.randn(p.shape, generator=g))


def _decoder_layers(sizes: dict, norm_first: bool, g: torch.Generator) -> tuple[_Layer, nn.Module]:
    """The course's decoder layer and PyTorch's, holding the same random weights."""
    d, h, d_ff = sizes["d_model"], sizes["h"], sizes["d_ff"]
    with torch.random.fork_rng(devices=[]):  # the layers' own initialization, overwritten below
        theirs = nn.TransformerDecoderLayer(d, h, d_ff, dropout=0.0, batch_first=True,
                                            norm_first=norm_first)
        ours = _Layer(d, MultiHeadAttention(d, h), MultiHeadAttention(d, h),
                      PositionwiseFeedForward(d, d_ff), dropout=0.0, norm_first=norm_first)
    _randomize(theirs, g)
    copy_mha_from_torch(ours.self_attn, theirs.self_attn)
    copy_mha_from_torch(ours.src_attn, theirs.multihead_attn)
    with torch.no_grad():
        ff = ours.feed_forward
        for mine, its in ((ff.W_1, theirs.linear1), (ff.W_2, theirs.linear2)):
            mine.weight.copy_(its.weight)
            mine.bias.copy_(its.bias)
    for sublayer, norm in zip(ours.sublayer, (theirs.norm1, theirs.norm2, theirs.norm3)):
        copy_layer_norm_from_torch(sublayer.norm, norm)
    return ours, theirs


_ATTENTION_SIGNATURE = inspect.signature(MultiHeadAttention.forward)


def _bound(args: tuple, kwargs: dict) -> dict | None:
    """The arguments of a MultiHeadAttention call by name (query, key, value, mask)."""
    try:
        bound = _ATTENTION_SIGNATURE.bind(None, *args, **kwargs)
    except TypeError:
        return None
    bound.apply_defaults()
    return bound.arguments


def _is(t, expected: torch.Tensor) -> bool:
    """``t`` is ``expected``, or a tensor of the same shape and values."""
    if t is expected:
        return True
    if not torch.is_tensor(t) or t.shape != expected.shape:
        return False
    if t.dtype == torch.bool or expected.dtype == torch.bool:
        return t.dtype == expected.dtype and torch.equal(t, expected)
    return _same(t, expected)


class _Recorder:
    """Forward hooks on the layer and its parts: which module ran, in what order, with which
    inputs and outputs."""

    PARTS = ("self_attn", "src_attn", "feed_forward")

    def __init__(self, layer: DecoderLayer):
        self.events: list = []  # ("call" | "return", name, args, kwargs, output)
        modules = {"layer": layer, **{p: getattr(layer, p) for p in self.PARTS}}
        for i, sublayer in enumerate(layer.sublayer):
            modules[f"sublayer {i}"] = sublayer
            modules[f"norm {i}"] = sublayer.norm
        self.handles = []
        for name, module in modules.items():
            self.handles.append(module.register_forward_pre_hook(self._pre(name), with_kwargs=True))
            self.handles.append(module.register_forward_hook(self._post(name), with_kwargs=True))

    def _pre(self, name):
        def hook(module, args, kwargs):
            self.events.append(("call", name, args, kwargs, None))
        return hook

    def _post(self, name):
        def hook(module, args, kwargs, output):
            self.events.append(("return", name, args, kwargs, output))
        return hook

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()

    def calls(self, name: str) -> list:
        return [(args, kwargs) for kind, n, args, kwargs, _ in self.events if kind == "call" and n == name]

    def returns(self, name: str) -> list:
        return [out for kind, n, _, _, out in self.events if kind == "return" and n == name]

    def parts_in_order(self) -> list[str]:
        """The attention and feed-forward modules in the order they were called."""
        return [n for kind, n, *_ in self.events if kind == "call" and n in self.PARTS]

    def enclosing(self) -> list[tuple[str, int | None]]:
        """Each call of a part with the index of the sublayer connection it ran inside (None
        when outside all of them)."""
        open_sublayers, found = [], []
        for kind, name, *_ in self.events:
            if name.startswith("sublayer "):
                if kind == "call":
                    open_sublayers.append(int(name.split()[1]))
                elif open_sublayers:
                    open_sublayers.pop()
            elif kind == "call" and name in self.PARTS:
                found.append((name, open_sublayers[-1] if open_sublayers else None))
        return found


_ROLE = {"self_attn": "the masked self-attention", "src_attn": "the encoder-decoder attention",
         "feed_forward": "the feed-forward network"}
_CORRECT = ("x = layer.sublayer[0](x, lambda y: layer.self_attn(y, y, y, tgt_mask)); "
            "x = layer.sublayer[1](x, lambda y: layer.src_attn(y, memory, memory, src_mask)); "
            "return layer.sublayer[2](x, layer.feed_forward)")


def _sublayer_input(rec: _Recorder, i: int, norm_first: bool):
    """What the sublayer function of connection ``i`` received: x, or norm(x) in pre-norm."""
    calls = rec.calls(f"sublayer {i}")
    if not calls:
        return None, None
    args, kwargs = calls[0]
    x_in = args[0] if args else kwargs.get("x")
    if not norm_first:
        return x_in, x_in
    normed = rec.returns(f"norm {i}")
    return x_in, (normed[0] if normed else None)


def _attention_mistake(rec: _Recorder, part: str, x, memory, src_mask, tgt_mask,
                       norm_first: bool) -> str | None:
    """A wrong input of the self- or the cross-attention, named."""
    calls = rec.calls(part)
    if not calls:
        return None
    arguments = _bound(*calls[0])
    if arguments is None:
        return None
    query, key, value, mask = (arguments[k] for k in ("query", "key", "value", "mask"))
    index = dict(rec.enclosing()).get(part)  # the connection the call ran inside
    x_in, y = _sublayer_input(rec, index, norm_first) if index is not None else (None, None)
    if part == "self_attn":
        if _is(key, memory) or _is(value, memory):
            return ("your masked self-attention reads the memory: in self-attention the queries, "
                    "keys and values are all the decoder's own states, layer.self_attn(y, y, y, "
                    "tgt_mask); the memory is for the second sublayer, layer.src_attn.")
        if mask is None:
            return ("your self-attention has no mask: each target position then sees the later "
                    "positions, the very words it is trained to predict (and the padding). Pass "
                    "tgt_mask, which hides both (§3.2.3): layer.self_attn(y, y, y, tgt_mask).")
        if _is(mask, src_mask):
            return ("your self-attention got src_mask, the source's padding mask, where it needs "
                    "tgt_mask (no look-ahead, no target padding): the two masks are swapped. "
                    "Self-attention over the target takes tgt_mask, the attention over the "
                    "memory src_mask.")
        if not _is(mask, tgt_mask):
            return ("your self-attention's mask is not the tgt_mask you are given (a causal mask "
                    "built in your function, or tgt_mask reshaped?): pass tgt_mask itself, "
                    "(batch, L_tgt, L_tgt), which hides the padding of the target as well as the "
                    "later positions; MultiHeadAttention adds the head axis itself.")
    else:
        if _is(query, memory) and not _is(key, memory):
            return ("your encoder-decoder attention takes its queries from the memory and its keys "
                    "and values from the decoder: the other way round. The queries come from the "
                    "decoder, the keys and values from the encoder's output (§3.2.3): "
                    "layer.src_attn(y, memory, memory, src_mask).")
        if _is(query, memory):
            return ("your encoder-decoder attention takes its queries from the memory too: they "
                    "come from the decoder (the sublayer's input y), so that each target position "
                    "asks its own question of the source: layer.src_attn(y, memory, memory, "
                    "src_mask).")
        if not _is(key, memory) or not _is(value, memory):
            which = "keys" if not _is(key, memory) else "values"
            if torch.is_tensor(key) and key.shape == x.shape and not _is(key, memory):
                return ("your encoder-decoder attention reads the decoder instead of the encoder: "
                        "its keys and values must be the memory (the encoder's output), so that "
                        "the target can look at the source sentence; with the decoder's own "
                        "states it is a second self-attention. Use layer.src_attn(y, memory, "
                        "memory, src_mask).")
            return (f"the {which} of your encoder-decoder attention are not `memory` as you were "
                    "given it (normalized, or changed?): pass memory itself, as keys and as "
                    "values: layer.src_attn(y, memory, memory, src_mask).")
        if mask is None:
            return ("your encoder-decoder attention has no mask: it attends to the padding of the "
                    "source. Pass src_mask: layer.src_attn(y, memory, memory, src_mask).")
        if _is(mask, tgt_mask) or (torch.is_tensor(mask) and mask.shape[-2:] == tgt_mask.shape[-2:]):
            return ("you gave the encoder-decoder attention the causal mask tgt_mask: its keys are "
                    "the source positions, which the decoder may all see (the source is known in "
                    "full); only the source's padding is hidden. Use src_mask there.")
        if not _is(mask, src_mask):
            return ("your encoder-decoder attention's mask is not the src_mask you are given: "
                    "use src_mask itself.")
    role = _ROLE[part]
    if norm_first and y is not None and not _is(query, y) and _is(query, x_in):
        return (f"{role} reads x, not the argument of its function: in pre-norm "
                "(norm_first=True) the sublayer connection calls its function on norm(x), so "
                "the lambda must use what it receives, `lambda y: ...(y, ...)`, not the x outside "
                "it (in post-norm the two are the same, which hides the mistake there).")
    return None


def _layer_mistake(rec: _Recorder, x, memory, src_mask, tgt_mask, norm_first: bool,
                   finished: bool, result=None) -> str | None:
    """Name what the recorded calls show to be wrong; None when they show nothing."""
    parts = rec.parts_in_order()
    counts = {p: parts.count(p) for p in _Recorder.PARTS}
    if finished and not any(counts.values()):
        return ("your function called none of layer.self_attn, layer.src_attn and "
                "layer.feed_forward: a decoder layer is these three sublayers, each wrapped in "
                f"its sublayer connection: {_CORRECT}.")
    if counts["self_attn"] == 2 and not counts["src_attn"]:
        return ("you used layer.self_attn for both attentions: the encoder-decoder attention has "
                "its own weights, layer.src_attn (a decoder layer holds two MultiHeadAttention "
                "modules): layer.src_attn(y, memory, memory, src_mask).")
    if counts["src_attn"] == 2 and not counts["self_attn"]:
        return ("you used layer.src_attn for both attentions: the masked self-attention has its "
                "own weights, layer.self_attn(y, y, y, tgt_mask).")
    if counts["self_attn"] == 1 and counts["src_attn"] == 1:
        own, cross = _bound(*rec.calls("self_attn")[0]), _bound(*rec.calls("src_attn")[0])
        if (own and cross and _is(own["key"], memory) and torch.is_tensor(cross["key"])
                and cross["key"].shape == x.shape):
            return ("you swapped the two attention modules: layer.self_attn is the masked "
                    "self-attention, layer.src_attn the attention over the memory (src for "
                    "source); each has weights of its own, trained for its role. Use "
                    "layer.self_attn(y, y, y, tgt_mask) first, then layer.src_attn(y, memory, "
                    "memory, src_mask).")
    for part in ("self_attn", "src_attn"):
        mistake = _attention_mistake(rec, part, x, memory, src_mask, tgt_mask, norm_first)
        if mistake:
            return mistake
    for part, n in counts.items():
        if n > 1:
            return (f"your function called layer.{part} {n} times; each sublayer runs once: "
                    f"{_CORRECT}.")
    if finished:
        for part, n in counts.items():
            if not n:
                return (f"your function never called layer.{part}, {_ROLE[part]}: a decoder layer "
                        f"has three sublayers, {_CORRECT}.")
    expected = [p for p in _Recorder.PARTS if counts[p]]
    if parts != expected:
        got = " -> ".join(parts)
        return (f"your sublayers run in the order {got}; the decoder layer's order (Figure 1, "
                "§3.1) is masked self-attention, then encoder-decoder attention over the memory, "
                "then the feed-forward network: self_attn -> src_attn -> feed_forward.")
    enclosing = rec.enclosing()
    for part, index in enclosing:
        if index is None:
            if not rec.calls("sublayer 0") and not rec.calls("sublayer 1") and not rec.calls("sublayer 2"):
                if any(rec.calls(f"norm {i}") for i in range(3)):
                    order = "pre-norm (norm_first=True)" if norm_first else "post-norm"
                    return ("you wrote the residual connection and layer norm yourself, with the "
                            "norms of layer.sublayer; this layer is "
                            f"{order}, and your order of norm and residual is not its own. Call "
                            "the sublayer connection itself, layer.sublayer[i](x, fn): it puts the "
                            "norm where the layer's norm_first says (notebook 06).")
                return ("no sublayer connection: each sublayer must be wrapped in its residual "
                        "connection and layer norm, layer.sublayer[i](x, fn), which computes "
                        "LayerNorm(x + Dropout(fn(x))) (post-norm); without it the layer has no "
                        f"residual path and no norm. {_CORRECT}.")
            return (f"{_ROLE[part]} runs outside any sublayer connection: wrap it, "
                    f"layer.sublayer[i](x, fn), as the others. {_CORRECT}.")
    indices = [index for _, index in enclosing]
    if indices != list(range(len(indices))):
        pairs = ", ".join(f"{p} in sublayer[{i}]" for p, i in enclosing)
        return (f"you wrapped {pairs}: each sublayer has its own connection, with its own layer "
                "norm (its own gamma and beta): sublayer[0] for the self-attention, sublayer[1] "
                "for the encoder-decoder attention, sublayer[2] for the feed-forward network.")
    # The residual stream: each connection takes the output of the one before.
    previous = x
    for i in range(3):
        calls, outputs = rec.calls(f"sublayer {i}"), rec.returns(f"sublayer {i}")
        if not calls:
            break
        args, kwargs = calls[0]
        given = args[0] if args else kwargs.get("x")
        if not _is(given, previous):
            if i > 0 and _is(given, x):
                return (f"layer.sublayer[{i}] gets the layer's input x instead of the output of "
                        f"layer.sublayer[{i - 1}]: the sublayers form a chain, each takes the "
                        "output of the one before: x = layer.sublayer[0](x, ...), then "
                        "x = layer.sublayer[1](x, ...) with that new x.")
            if i > 0 and torch.is_tensor(given) and _is(given, previous + _rec_input(rec, i - 1)):
                return (f"you added the residual yourself around layer.sublayer[{i - 1}]: the "
                        "sublayer connection already adds x (it returns LayerNorm(x + "
                        "Dropout(fn(x)))); adding x again counts the residual twice. Use its "
                        "output as it is.")
            return None  # no known mistake: the comparison says what differs
        if not outputs:
            break
        previous = outputs[0]
    if finished and torch.is_tensor(result) and rec.returns("sublayer 2"):
        last = rec.returns("sublayer 2")[0]
        if not _is(result, last):
            if _is(result, last + _rec_input(rec, 2)):
                return ("you added the residual yourself after layer.sublayer[2]: the sublayer "
                        "connection already adds it; return its output as it is.")
            return ("your function does not return the output of the last sublayer connection, "
                    "layer.sublayer[2](x, layer.feed_forward): return it as it is.")
    return None


def _rec_input(rec: _Recorder, i: int):
    """The x given to sublayer connection ``i``."""
    args, kwargs = rec.calls(f"sublayer {i}")[0]
    return args[0] if args else kwargs.get("x")


_LAYER_ROLES = ("layer", "x", "memory", "src_mask", "tgt_mask")
_NOT_CALLABLE_HINT = (
    "\nHint: a sublayer connection takes a function and calls it itself, on x (or norm(x)): "
    "pass layer.feed_forward, or lambda y: layer.self_attn(y, y, y, tgt_mask), not the result "
    "of calling them."
)
_ATTRIBUTE_HINT = (
    "\nHint: a DecoderLayer holds layer.self_attn, layer.src_attn (two MultiHeadAttention), "
    "layer.feed_forward (a PositionwiseFeedForward) and layer.sublayer (a list of three "
    "SublayerConnection, called as layer.sublayer[i](x, fn))."
)


def _layer_inputs(sizes: dict, g: torch.Generator) -> tuple:
    """x, memory, src_mask and tgt_mask for a layer of ``sizes``, with padding in both masks."""
    batch, L_tgt, L_src, d = sizes["batch"], sizes["L_tgt"], sizes["L_src"], sizes["d_model"]
    x = torch.randn(batch, L_tgt, d, generator=g)
    memory = torch.randn(batch, L_src, d, generator=g)
    src_keep = torch.ones(batch, L_src, dtype=torch.bool)
    src_keep[0, -2:] = False  # the first source sentence ends in two paddings
    tgt_keep = torch.ones(batch, L_tgt, dtype=torch.bool)
    tgt_keep[-1, -2:] = False  # the last target sentence too
    src_mask = src_keep.unsqueeze(1)  # (batch, 1, L_src)
    tgt_mask = tgt_keep.unsqueeze(1) & subsequent_mask(L_tgt)  # (batch, L_tgt, L_tgt)
    return x, memory, src_mask, tgt_mask


def _check_layer_once(fn: Callable, name: str, sizes: dict, norm_first: bool,
                      g: torch.Generator) -> None:
    batch, L_tgt, L_src, d = sizes["batch"], sizes["L_tgt"], sizes["L_src"], sizes["d_model"]
    ours, theirs = _decoder_layers(sizes, norm_first, g)
    x, memory, src_mask, tgt_mask = _layer_inputs(sizes, g)

    with torch.no_grad():
        expected = ours(x, memory, src_mask, tgt_mask)
        # PyTorch's masks mean the opposite (True = may not look), one per head: (batch * h,
        # L_q, L_k). (Its key-padding masks would give the same, at a second of import time.)
        h = sizes["h"]
        library = theirs(x, memory, tgt_mask=~tgt_mask.repeat_interleave(h, 0),
                         memory_mask=~src_mask.expand(batch, L_tgt, L_src).repeat_interleave(h, 0))
    if not _same(expected, library):  # the course's layer computes what PyTorch's does
        raise RuntimeError("the course's DecoderLayer and nn.TransformerDecoderLayer differ")

    rec = _Recorder(ours)
    order = "pre-norm" if norm_first else "post-norm"
    call = (f"{name}(layer ({order}), x of shape {tuple(x.shape)}, memory of shape "
            f"{tuple(memory.shape)}, src_mask, tgt_mask)")
    modes = _modes(ours)
    try:
        try:
            result = _call(fn, ours, x, memory, src_mask, tgt_mask, roles=_LAYER_ROLES,
                           hints=((r"'DecoderLayer' object has no attribute", _ATTRIBUTE_HINT),
                                  (r"'Tensor' object is not callable", _NOT_CALLABLE_HINT)))
        except ExerciseFailed as err:
            if not getattr(err, "generic", False):
                raise
            # A result passed where a function is due: the error's own hint says it best.
            called_a_result = "object is not callable" in str(err)
            mistake = None if called_a_result else _layer_mistake(
                rec, x, memory, src_mask, tgt_mask, norm_first, finished=False)
            if mistake:
                first = str(err).splitlines()[0].split(" Fix: ")[0]  # the error, not its remedy
                raise ExerciseFailed(f"{mistake}\n(Your function stopped with: {first})") from None
            raise
        if rec.calls("layer"):
            raise ExerciseFailed(
                f"{name} calls the layer itself, layer(x, memory, src_mask, tgt_mask), which runs "
                "the course's forward: write the forward pass from the layer's parts, "
                "layer.sublayer[i], layer.self_attn, layer.src_attn and layer.feed_forward."
            )
        _modes_kept(ours, modes, name)
        got = _tensor(result, name, "the layer's output", like=x)
        hint = _squeezed(got.shape, (batch, L_tgt, d))
        if tuple(got.shape) == (batch, L_src, d):
            hint = (f" Yours has L_src = {L_src} positions, the memory's: the output has one row "
                    "per target position, the queries' (the decoder's states).")
        _shape(got, (batch, L_tgt, d), call, hint)
        if _same(got, expected):
            return
        mistake = _layer_mistake(rec, x, memory, src_mask, tgt_mask, norm_first, finished=True,
                                 result=got)
        if mistake:
            raise ExerciseFailed(mistake)
        _assert_close(got, expected, f"the output of {call}")
    finally:
        rec.remove()


def _course_layer(sizes: dict, norm_first: bool, g: torch.Generator) -> _Layer:
    """The course's decoder layer with random weights and LAYER_DROPOUT in its sublayer
    connections (the attention and the feed-forward network keep none)."""
    d, h, d_ff = sizes["d_model"], sizes["h"], sizes["d_ff"]
    with torch.random.fork_rng(devices=[]):
        layer = _Layer(d, MultiHeadAttention(d, h), MultiHeadAttention(d, h),
                       PositionwiseFeedForward(d, d_ff), dropout=LAYER_DROPOUT, norm_first=norm_first)
    _randomize(layer, g)
    return layer


def _check_layer_modes(fn: Callable, name: str, sizes: dict, norm_first: bool,
                       g: torch.Generator) -> None:
    """The same layer with dropout in its connections: in evaluation mode the output has no
    dropout and the gradient reaches x and memory; in training mode the dropout acts; the
    function leaves the layer's mode as it found it; a second call does not overwrite the
    first result; and a float64 layer gives a float64 output."""
    layer = _course_layer(sizes, norm_first, g)
    order = "pre-norm" if norm_first else "post-norm"
    roles = _LAYER_ROLES
    hints = ((r"'DecoderLayer' object has no attribute", _ATTRIBUTE_HINT),
             (r"'Tensor' object is not callable", _NOT_CALLABLE_HINT))
    setting = f"a {order} layer whose sublayer connections have dropout p = {LAYER_DROPOUT}"
    shape = (sizes["batch"], sizes["L_tgt"], sizes["d_model"])

    # 1. Evaluation mode: no dropout, whatever p is; gradients reach both inputs.
    layer.eval()
    x, memory, src_mask, tgt_mask = _layer_inputs(sizes, g)
    with torch.no_grad():
        expected = layer(x, memory, src_mask, tgt_mask)
    x.requires_grad_()
    memory.requires_grad_()
    modes = _modes(layer)
    got = _call(fn, layer, x, memory, src_mask, tgt_mask, roles=roles, hints=hints)
    _modes_kept(layer, modes, name)
    got = _tensor(got, name, "the layer's output", like=x)
    _shape(got, shape, f"{name}(...) on {setting}, in evaluation mode")
    if not _same(got, expected):
        raise ExerciseFailed(
            f"in evaluation mode (layer.eval()), on {setting}, your output differs from the "
            "layer's, though it equals it without dropout: your function applies dropout in "
            "evaluation mode. F.dropout(t, p) drops unless given training=False (its default "
            "is True); use the connection itself, layer.sublayer[i](x, fn), or its module "
            "layer.sublayer[i].dropout, which knows the mode (or F.dropout(t, p, "
            "training=layer.training))."
        )
    _gradients_flow(got, {"x": x, "memory": memory}, name, "the layer's output")

    # 2. Training mode: the connections' dropout acts; the first result stays as it was.
    layer.train()
    x2, memory2, _, _ = _layer_inputs(sizes, g)
    layer.eval()
    with torch.no_grad():
        without = layer(x2, memory2, src_mask, tgt_mask)
    layer.train()
    modes = _modes(layer)

    def in_training():
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            return _call(fn, layer, x2, memory2, src_mask, tgt_mask, roles=roles, hints=hints)

    trained = _aliasing(in_training, got, name, "the layer's output")
    _modes_kept(layer, modes, name)
    trained = _tensor(trained, name, "the layer's output", like=x2)
    _shape(trained, shape, f"{name}(...) on {setting}, in training mode")
    if _same(trained, without):
        raise ExerciseFailed(
            f"in training mode (layer.train()), on {setting}, your output is the output without "
            "dropout: your function ignores the dropout of the sublayer connections, which "
            "§5.4 applies to the output of every sublayer in training. Call the connections "
            "themselves, layer.sublayer[i](x, fn); if you write the residual by hand, apply "
            "layer.sublayer[i].dropout to the sublayer's output before adding it; and do not "
            "switch the layer to evaluation mode (layer.eval()) inside the function."
        )

    # 3. float64: the layer and its inputs in float64, the output too.
    layer.eval()
    layer.double()
    x3, memory3, _, _ = _layer_inputs(sizes, g)
    x3, memory3 = x3.double(), memory3.double()
    with torch.no_grad():
        expected = layer(x3, memory3, src_mask, tgt_mask)
    try:
        got = _call(fn, layer, x3, memory3, src_mask, tgt_mask, roles=roles, hints=hints)
    except ExerciseFailed as err:
        if not getattr(err, "generic", False):
            raise
        raise _generic(
            f"with a float64 layer (layer.double()) and float64 x and memory: {err}\nHint: keep "
            "the dtype of the inputs: no .float() on them or on the layer, and dtype=x.dtype for "
            "a tensor you create."
        ) from None
    got = _tensor(got, name, "the layer's output", like=x3)
    _shape(got, shape, f"{name}(...) on a float64 layer")
    _assert_close64(got, expected, f"the output of {name} on a float64 {order} layer")


def _layer_hint(passed: list, sizes: dict, message: str) -> str:
    if sizes["batch"] == 1:
        return (f"\nHint: the same function passed with batches of several sentences but not with "
                f"a batch of one ({', '.join(f'{k}={v}' for k, v in sizes.items())}): does a "
                ".squeeze() drop the batch dimension? squeeze() without a dimension drops every "
                "dimension of size 1; leave the shapes alone, or squeeze only a dimension you "
                "added yourself, .squeeze(dim).")
    return _hard_coded_hint(
        passed, sizes, message, "Read every size from the inputs (batch, L_tgt, d_model = "
        "x.shape), or better, write no size at all: the layer's modules know theirs.")


def check_decoder_layer_forward(decoder_layer_forward: Callable) -> None:
    """Check ``decoder_layer_forward(layer, x, memory, src_mask, tgt_mask)`` against
    ``DecoderLayer.forward`` and ``nn.TransformerDecoderLayer`` holding the same random weights,
    post-norm and pre-norm, on the sizes of ``LAYER_SIZES`` (the last a batch of one sentence),
    with padding in both masks. Then, on a layer whose sublayer connections have dropout
    ``LAYER_DROPOUT``: in evaluation mode the output has no dropout and the gradient reaches x
    and memory, in training mode the dropout acts, and a second call leaves the first result
    as it was; and a float64 layer with float64 inputs gives float64 at float64 precision.

    Diagnoses: the layer called whole; self_attn used for both attentions (or src_attn), or the
    two swapped; the self-attention reading the memory, without a mask, with src_mask (masks
    swapped) or with a mask of its own; the cross-attention reading the decoder instead of the
    memory, with its queries from the memory, with the causal mask, without a mask; a lambda
    that reads the outer x (wrong in pre-norm only); a sublayer called twice or never; sublayers
    in the wrong order; no sublayer connection, a residual and norm written by hand, a part
    outside its connection, the connections' indices mixed up, a module's result passed where
    the connection wants the function; a sublayer fed the layer's input instead of the previous
    output, the residual added twice; sizes written into the code, and a batch of one sentence
    squeezed away; the layer's mode changed (layer.eval() left behind); dropout ignored in
    training mode, or applied in evaluation mode; no gradient (torch.no_grad, .detach()); a
    result kept in a buffer that the next call overwrites; float64 turned into float32.
    """
    name = _function(decoder_layer_forward, "check_decoder_layer_forward", "decoder_layer_forward")
    g = torch.Generator().manual_seed(7)

    def once(sizes: dict) -> None:
        for norm_first in (False, True):
            _check_layer_once(decoder_layer_forward, name, sizes, norm_first, g)

    with _one_thread():
        _run_on_all_sizes(once, LAYER_SIZES, _layer_hint)
        for norm_first in (False, True):
            _check_layer_modes(decoder_layer_forward, name, LAYER_SIZES[0], norm_first, g)
    print(
        f"check_decoder_layer_forward passed: {name} equals the course's DecoderLayer and "
        "PyTorch's nn.TransformerDecoderLayer with the same weights, post-norm and pre-norm, "
        f"with padded source and target, for {len(LAYER_SIZES)} sets of sizes (one a single "
        "sentence): masked self-attention, then attention over the memory, then the "
        "feed-forward network. With dropout in its connections it drops in training mode and "
        "not in evaluation mode, leaves the layer's mode alone, lets gradients reach x and "
        "memory, and keeps float64."
    )


# ---------------------------------------------------------------- the tied embeddings


def _only_parameter(module: nn.Module, dim: int) -> list[nn.Parameter]:
    return [p for p in module.parameters() if p.dim() == dim]


def _not_shared(got: nn.Parameter, target: nn.Parameter, what: str, with_what: str,
                fix: str = "generator.proj.weight = tgt_embed.lut.weight") -> str:
    """Why two matrices that must be one Parameter are not; ``fix`` is the assignment that ties
    them."""
    if got.shape == target.shape and got.data_ptr() == target.data_ptr():
        return (f"{what} and {with_what} share their memory but are two Parameter objects (made "
                "with nn.Parameter(...) around the other's tensor, or with .data = ...): the model "
                "lists both, so count_parameters counts the matrix twice, and each receives its "
                f"own gradient. Assign the Parameter itself, as make_model does: {fix}.")
    if got.shape == target.shape and torch.equal(got.detach(), target.detach()):
        return (f"{what} holds a copy of {with_what}'s values, a separate tensor: equal now, they "
                "part at the first update, since each gets its own gradient. Tying (§3.4) makes "
                f"them one tensor: assign the Parameter itself, {fix}.")
    if got.dim() == 2 and got.shape == target.shape[::-1] and torch.equal(got.detach(), target.detach().T):
        return (f"{what} is the transpose of {with_what}. No transpose is needed: nn.Linear stores "
                "its weight as (out_features, in_features) = (vocab_size, d_model), the table's "
                "own shape, and computes x @ weight.T, so logits = x E^T + b with weight = E. "
                f"Assign the table itself: {fix}.")
    return (f"{what} is not tied to {with_what}: it is a matrix of its own. Tying (§3.4) makes "
            f"them one Parameter: {fix}.")


def _check_tie_once(fn: Callable, name: str, src_vocab: int, tgt_vocab: int, d: int,
                    share: bool, g: torch.Generator) -> None:
    call = (f"{name}(src_vocab_size={src_vocab}, tgt_vocab_size={tgt_vocab}, d_model={d}, "
            f"share_embeddings={share})")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        result = _call(fn, src_vocab, tgt_vocab, d, share,
                       roles=("src_vocab_size", "tgt_vocab_size", "d_model", "share_embeddings"))
    if result is None:
        raise ExerciseFailed(f"{name} returned None: did you forget the `return` of the three "
                             "modules (src_embed, tgt_embed, generator)?")
    if not isinstance(result, (tuple, list)) or len(result) != 3:
        got = (f"a {type(result).__name__} of {len(result)} items"
               if isinstance(result, (tuple, list)) else type(result).__name__)
        raise ExerciseFailed(f"{name} should return three modules (src_embed, tgt_embed, "
                             f"generator), got {got}")
    for what, module in zip(("src_embed", "tgt_embed", "generator"), result):
        if not isinstance(module, nn.Module):
            raise ExerciseFailed(
                f"{name} returned {type(module).__name__} as {what}; return modules "
                "(Embeddings, Embeddings, Generator): a model registers the parameters of the "
                "modules it holds, and a bare tensor or function would not be trained."
            )
    src_embed, tgt_embed, generator = result
    tables = {}
    for what, module, vocab in (("src_embed", src_embed, src_vocab), ("tgt_embed", tgt_embed, tgt_vocab)):
        matrices = _only_parameter(module, 2)
        if len(matrices) != 1:
            raise ExerciseFailed(f"{what} should hold one table of shape ({vocab}, {d}), vocab_size "
                                 f"x d_model; it holds {len(matrices)} matrices")
        table = matrices[0]
        if tuple(table.shape) == (d, vocab):
            raise ExerciseFailed(f"{what}'s table has shape {tuple(table.shape)}, (d_model, "
                                 f"vocab_size): the arguments are swapped; Embeddings(vocab_size, "
                                 "d_model) has one row per token.")
        tables[what] = table
    E_src, E_tgt = tables["src_embed"], tables["tgt_embed"]
    if not share and E_src is E_tgt:
        raise ExerciseFailed(
            "with share_embeddings=False the source embedding must keep a table of its own: the "
            "two languages have two vocabularies (here of sizes "
            f"{src_vocab} and {tgt_vocab}). Only the target embedding and the generator are tied "
            "then; the source joins them only with share_embeddings=True."
        )
    _shape(E_tgt, (tgt_vocab, d), f"the table of tgt_embed in {call} (tgt_vocab_size, d_model)")
    _shape(E_src, (src_vocab, d), f"the table of src_embed in {call} (src_vocab_size, d_model)")
    weights, biases = _only_parameter(generator, 2), _only_parameter(generator, 1)
    if len(weights) != 1:
        raise ExerciseFailed(f"the generator should hold one matrix; it holds {len(weights)}")
    W = weights[0]
    if not biases:
        raise ExerciseFailed(
            "your generator has no bias. The paper does not mention one; the course's Generator "
            "has it (nn.Linear's default, as in the Harvard Annotated Transformer), and the "
            f"check counts its {tgt_vocab} numbers: build it with Generator(d_model, "
            "tgt_vocab_size) and tie its weight only."
        )
    if tuple(biases[0].shape) == (d,) and d != tgt_vocab:
        raise ExerciseFailed(
            f"your generator's bias has d_model = {d} entries, not tgt_vocab_size = {tgt_vocab}: "
            "Generator(vocab_size, d_model) has its arguments swapped; it maps d_model to the "
            "vocabulary, Generator(d_model, tgt_vocab_size)."
        )
    if W is not E_tgt:
        if W is E_src:
            raise ExerciseFailed(
                "your generator shares the source embedding's table: it scores target tokens, so "
                "it is tied to the target embedding, generator.proj.weight = tgt_embed.lut.weight "
                "(the source joins them only with share_embeddings=True)."
            )
        raise ExerciseFailed(_not_shared(W, E_tgt, "the generator's weight", "the target embedding"))
    if share and E_src is not E_tgt:
        raise ExerciseFailed(_not_shared(E_src, E_tgt, "with share_embeddings=True, the source "
                                         "embedding's table", "the target embedding",
                                         "src_embed.lut.weight = tgt_embed.lut.weight"))
    _shape(biases[0], (tgt_vocab,), f"the generator's bias in {call}")
    for what, module in zip(("src_embed", "tgt_embed", "generator"), result):
        frozen = [n for n, p in module.named_parameters() if not p.requires_grad]
        if frozen:
            raise ExerciseFailed(
                f"{what}.{frozen[0]} does not require a gradient (requires_grad=False): "
                "training would never change it, and count_parameters leaves it out. A tied "
                "table is trained by the gradients of all its uses; leave requires_grad as "
                "nn.Embedding and nn.Linear make it (no requires_grad_(False))."
            )
    distinct = count_parameters(nn.ModuleList(result))
    expected_count = tgt_vocab * d + tgt_vocab + (0 if share else src_vocab * d)
    if distinct != expected_count:
        raise _generic(
            f"the three modules hold {distinct:,} distinct parameters, but the tied pieces have "
            f"{expected_count:,} (the target table, {tgt_vocab} x {d}, counted once"
            f"{'' if share else f', the source table, {src_vocab} x {d}'}, and the generator's "
            f"bias, {tgt_vocab}): does a module hold a parameter it should not?"
        )

    # What the pieces compute: E[tokens] * sqrt(d_model), and x E^T + b.
    for module in result:
        module.eval()  # a PositionalEncoding's dropout, if there is one, acts only in training
    tokens = torch.randint(0, min(src_vocab, tgt_vocab), (2, 5), generator=g)
    for what, module, table in (("src_embed", src_embed, E_src), ("tgt_embed", tgt_embed, E_tgt)):
        with torch.no_grad():
            got = _tensor(_call(module, tokens, roles=("tokens",)), what, "the embeddings")
            rows = table[tokens]
            expected = rows * math.sqrt(d)
        _shape(got, (2, 5, d), f"{what}(tokens of shape (2, 5))")
        if _same(got, expected):
            continue
        if _same(got, rows):
            raise ExerciseFailed(
                f"{what} returns the table's rows without the factor sqrt(d_model) = "
                f"{math.sqrt(d):.4f}: §3.4, \"In the embedding layers, we multiply those weights by "
                "sqrt(d_model)\". Use the course's Embeddings (annotated.positional), not a bare "
                "nn.Embedding."
            )
        if _same(got, expected + sinusoidal_table(5, d)):
            raise ExerciseFailed(
                f"{what} adds the positional encoding: return the Embeddings alone (make_model "
                "puts a PositionalEncoding after it in an nn.Sequential; this exercise asks for "
                "the parts that hold the vocabulary's table)."
            )
        _assert_close(got, expected, f"{what}(tokens), compared with table[tokens] * sqrt(d_model)")
    x = torch.randn(2, 5, d, generator=g)
    with torch.no_grad():
        got = _tensor(_call(generator, x, roles=("x",)), "generator", "the logits", like=x)
        logits = x @ E_tgt.T + biases[0]
    _shape(got, (2, 5, tgt_vocab), "generator(x of shape (2, 5, d_model))")
    if not _same(got, logits):
        if _same(got, logits.log_softmax(-1)):
            raise ExerciseFailed(
                "your generator returns log-probabilities (log_softmax of the logits); the "
                "course's Generator stops at the logits, x E^T + b: the loss (F.cross_entropy "
                "takes logits) and the decoder take the log_softmax themselves (section 4 of "
                "notebook 07)."
            )
        if _same(got, logits.softmax(-1)):
            raise ExerciseFailed(
                "your generator returns probabilities (a softmax); the course's Generator stops at "
                "the logits, x E^T + b, which the loss and the decoder take as they are."
            )
        if _same(got, (x @ E_tgt.T) * math.sqrt(d) + biases[0]) or _same(got, logits * math.sqrt(d)):
            raise ExerciseFailed(
                "your generator multiplies by sqrt(d_model): that factor belongs to the embedding "
                "layers only (§3.4); the pre-softmax linear map is x E^T + b."
            )
        _assert_close(got, logits, "generator(x), compared with x @ E^T + b")


def _check_tie_fresh(fn: Callable, name: str, src_vocab: int, tgt_vocab: int, d: int) -> None:
    """Two calls with the same arguments build two sets of modules: nothing of the first is
    reused by the second (a global, or a cache such as functools.lru_cache)."""
    roles = ("src_vocab_size", "tgt_vocab_size", "d_model", "share_embeddings")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        first = _call(fn, src_vocab, tgt_vocab, d, False, roles=roles)
        second = _call(fn, src_vocab, tgt_vocab, d, False, roles=roles)
    mine = {id(p) for m in first for p in m.parameters()}
    shared = {id(p) for m in second for p in m.parameters()} & mine
    if shared:
        raise ExerciseFailed(
            f"two calls of {name}({src_vocab}, {tgt_vocab}, {d}, False) returned modules that "
            f"share {len(shared)} Parameter(s): your function keeps modules or tables between "
            "calls (a global, a default argument, a cache such as functools.lru_cache), so two "
            "models built with it would share, and train, the same weights. Build new modules on "
            "every call; only the three modules of one call share their table."
        )


def _tie_hint(passed: list, sizes: dict, message: str) -> str:
    return _hard_coded_hint(passed, sizes, message,
                            "Build every module from the sizes you are given.")


def check_tied_embeddings(tied_embeddings: Callable) -> None:
    """Check ``tied_embeddings(src_vocab_size, tgt_vocab_size, d_model, share_embeddings)
    -> (src_embed, tgt_embed, generator)``: the target embedding and the generator share one
    Parameter, and the source joins them with ``share_embeddings`` (§3.4, ``make_model``).
    Runs the sizes of ``TIE_SIZES``, each with and without sharing (sharing with one vocabulary,
    of the target's size), then calls the function twice with the same arguments: the second
    call's modules must hold Parameters of their own.

    Diagnoses: not three modules; a table of swapped shape; the source tied although
    share_embeddings is False, or not tied although it is True; the generator tied to the
    source, holding a copy of the values, a second Parameter over the same memory, a transpose,
    or a matrix of its own; a generator without bias or with its sizes swapped; a parameter
    that does not require a gradient (frozen); extra parameters; embeddings without the
    sqrt(d_model) factor or with the positional encoding added; a generator that returns
    log-probabilities or probabilities, or scales by sqrt(d_model); sizes written into the
    code; and modules kept between calls (a second call returns the same Parameters).
    """
    name = _function(tied_embeddings, "check_tied_embeddings", "tied_embeddings")
    g = torch.Generator().manual_seed(3)

    def once(sizes: dict) -> None:
        V_src, V_tgt, d = sizes["src_vocab"], sizes["tgt_vocab"], sizes["d_model"]
        _check_tie_once(tied_embeddings, name, V_src, V_tgt, d, False, g)
        _check_tie_once(tied_embeddings, name, V_tgt, V_tgt, d, True, g)

    with _one_thread():
        _run_on_all_sizes(once, TIE_SIZES, _tie_hint)
    V_src, V_tgt, d = (TIE_SIZES[0][k] for k in ("src_vocab", "tgt_vocab", "d_model"))
    _check_tie_fresh(tied_embeddings, name, V_src, V_tgt, d)
    print(
        f"check_tied_embeddings passed: {name}'s generator and target embedding are one "
        "Parameter (the source's too with share_embeddings=True), the embeddings scale by "
        f"sqrt(d_model) and the generator returns logits, for {len(TIE_SIZES)} sets of sizes; "
        f"with one vocabulary of {V_tgt} and d_model = {d}, tying all three keeps "
        f"{V_tgt * d + V_tgt:,} parameters instead of {3 * V_tgt * d + V_tgt:,}."
    )


# ---------------------------------------------------------------- the parameter count


def _count(c: TransformerConfig, **wrong) -> int:
    """The parameters of make_model(c) by the formulas of notebook 07, section 7; each keyword
    makes one of the usual mistakes."""
    d, f, N, h = c.d_model, c.d_ff, c.N, c.h
    bias = 0 if wrong.get("no_attention_bias") or wrong.get("no_bias") else d
    attention = 4 * (d * d + bias)
    if wrong.get("full_heads"):  # h matrices of d_model x d_model for each of W^Q, W^K, W^V, W^O
        attention = 4 * h * (d * d + bias)
    if wrong.get("full_heads_qkv"):  # ... for W^Q, W^K, W^V only
        attention = 3 * h * (d * d + bias) + d * d + bias
    ff_bias = 0 if wrong.get("no_ff_bias") or wrong.get("no_bias") else f + d
    ffn = 2 * d * f + ff_bias
    if wrong.get("one_ff_map"):
        ffn = d * f + (0 if wrong.get("no_ff_bias") or wrong.get("no_bias") else f)
    norm = 0 if wrong.get("no_norms") else (d if wrong.get("gamma_only") else 2 * d)
    final = 2 * norm if c.norm_first else 0
    if wrong.get("no_final_norms"):
        final = 0
    if wrong.get("final_norms_always"):
        final = 2 * norm
    cross = 0 if wrong.get("no_cross_attention") or wrong.get("no_cross_sublayer") else 1
    cross_norm = 0 if wrong.get("no_cross_sublayer") else 1
    layers = 1 if wrong.get("one_layer") else N
    encoder = layers * (attention + ffn + 2 * norm)
    decoder = layers * ((1 + cross) * attention + ffn + (2 + cross_norm) * norm)
    share = (c.share_embeddings and not wrong.get("share_ignored")) or wrong.get("always_shared")
    tables = c.tgt_vocab_size if share else c.src_vocab_size + c.tgt_vocab_size
    tables += wrong.get("extra_tables", 0) * c.tgt_vocab_size
    gen_bias = 0 if wrong.get("no_generator_bias") or wrong.get("no_bias") else c.tgt_vocab_size
    positions = wrong.get("positions", 0) * c.max_len * d
    return tables * d + encoder + decoder + final + gen_bias + positions


# (keywords of _count, what is wrong): named from the first configuration where the count is wrong,
# so the configurations come in an order where no two mistakes give the same count there (tested).
_COUNT_MISTAKES = [
    (dict(no_bias=True),
     "every bias is missing (the attention projections', the feed-forward network's and the "
     "generator's): nn.Linear has a bias unless told otherwise, d_out numbers next to its "
     "d_in x d_out matrix"),
    (dict(no_attention_bias=True),
     "the biases of the attention projections are missing, 4 d_model per MultiHeadAttention. "
     "The paper's W^Q, W^K, W^V, W^O are bare matrices, but the course builds them with "
     "nn.Linear, which adds a bias (notebook 04, as nn.MultiheadAttention does)"),
    (dict(no_ff_bias=True),
     "the feed-forward network's biases are missing: FFN(x) = max(0, x W_1 + b_1) W_2 + b_2 has "
     "b_1 (d_ff numbers) and b_2 (d_model) besides its two matrices (§3.3)"),
    (dict(no_generator_bias=True),
     "the generator's bias is missing: its matrix is the tied embedding, but its bias, "
     "tgt_vocab_size numbers, is its own (section 4 of notebook 07; the paper does not mention one)"),
    (dict(no_norms=True),
     "the layer norms are missing: each has a gamma and a beta of d_model numbers, one per "
     "sublayer (2 in an encoder layer, 3 in a decoder layer), plus a final one per stack in "
     "pre-norm"),
    (dict(gamma_only=True),
     "each layer norm counts d_model numbers; it has two vectors of d_model, gamma and beta"),
    (dict(no_final_norms=True),
     "the final layer norms of the pre-norm stacks are missing: with norm_first=True the "
     "encoder and the decoder each end with one more LayerNorm (2 d_model each); post-norm stacks "
     "have none"),
    (dict(final_norms_always=True),
     "you counted a final layer norm per stack in post-norm too: only pre-norm stacks "
     "(norm_first=True) end with one (the course follows the paper, whose post-norm stack needs "
     "none; nn.Transformer adds one anyway)"),
    (dict(no_cross_attention=True),
     "the decoder's encoder-decoder attention is missing: a decoder layer holds two "
     "MultiHeadAttention modules (self-attention and attention over the memory), so 2 x 4 "
     "(d_model^2 + d_model)"),
    (dict(no_cross_sublayer=True),
     "you counted a decoder layer as an encoder layer: it has a third sublayer, the "
     "encoder-decoder attention, with its own layer norm"),
    (dict(extra_tables=1),
     "a vocabulary table is counted once too often: the generator's matrix is the target "
     "embedding's table (always tied in make_model), and with share_embeddings=True the source "
     "embedding is that same table; a tied matrix is one tensor, counted once"),
    (dict(extra_tables=2),
     "the tied table is counted three times (source, target, generator): with "
     "share_embeddings=True the three are one tensor, counted once"),
    (dict(share_ignored=True),
     "share_embeddings is ignored: with share_embeddings=True the source and target embeddings "
     "are one table, counted once"),
    (dict(always_shared=True),
     "you counted one table for both languages whatever share_embeddings says: with "
     "share_embeddings=False the source has its own table, src_vocab_size x d_model"),
    (dict(positions=1),
     "you counted the positional encoding's table: it is a buffer, computed from the sine "
     "formula and never trained, not a parameter (notebook 05)"),
    (dict(positions=2),
     "you counted the positional encoding's tables: they are buffers, computed from the sine "
     "formula and never trained, not parameters (notebook 05)"),
    (dict(full_heads=True),
     "you gave each head its own d_model x d_model matrices: the h heads' W_i^Q are d_model x "
     "d_k each, with d_k = d_model / h, side by side one d_model x d_model matrix (notebook 04); "
     "the count of an attention does not depend on h"),
    (dict(full_heads_qkv=True),
     "you gave each head its own d_model x d_model matrices W_i^Q, W_i^K, W_i^V: they are "
     "d_model x d_k each, with d_k = d_model / h, side by side one d_model x d_model matrix "
     "(notebook 04); the count of an attention does not depend on h"),
    (dict(one_ff_map=True),
     "the feed-forward network has two linear maps, d_model -> d_ff and d_ff -> d_model (§3.3); "
     "you counted one"),
    (dict(one_layer=True),
     "you counted one layer per stack: the encoder and the decoder each stack N identical "
     "layers, each with its own parameters (copy.deepcopy)"),
]


def _config(**fields) -> TransformerConfig:
    """A config that a probe sends as data (``record.build``)."""
    return recorder.build("annotated.model.TransformerConfig", **fields)


def _variants(sizes: dict) -> list[TransformerConfig]:
    """The configurations of a set of sizes: post-norm and pre-norm, tied with one vocabulary
    (of the target's size) and untied."""
    common = dict(N=sizes["N"], d_model=sizes["d_model"], d_ff=sizes["d_ff"], h=sizes["h"])
    V_src, V_tgt = sizes["src_vocab"], sizes["tgt_vocab"]
    return [_config(src_vocab_size=V_src, tgt_vocab_size=V_tgt, **common),
            _config(src_vocab_size=V_tgt, tgt_vocab_size=V_tgt, share_embeddings=True, **common),
            _config(src_vocab_size=V_src, tgt_vocab_size=V_tgt, norm_first=True, **common),
            _config(src_vocab_size=V_tgt, tgt_vocab_size=V_tgt, share_embeddings=True, norm_first=True, **common)]


# The paper's base and big models, with one shared vocabulary of 37000 (Table 3 counts 65M and 213M).
PAPER_MODELS = {"base": (dict(), 65), "big": (dict(d_model=1024, d_ff=4096, h=16), 213)}
_PAPER_SET = {"models": "the paper's base and big, one vocabulary of 37000"}


def _describe_config(c: TransformerConfig) -> str:
    tied = "shared" if c.share_embeddings else "separate"
    return (f"N={c.N}, d_model={c.d_model}, d_ff={c.d_ff}, h={c.h}, src_vocab_size="
            f"{c.src_vocab_size}, tgt_vocab_size={c.tgt_vocab_size}, {tied} embeddings, "
            f"{'pre-norm' if c.norm_first else 'post-norm'}")


def course_parameter_count(config: TransformerConfig) -> int:
    """count_parameters(make_model(config)) by formula (tests/test_declarations_07_09.py compares it with
    the model built, and the stacks with nn.Transformer's, on every probe)."""
    return _count(config)


def _count_probes(device: str | None) -> list[Probe]:
    probes = [Probe((c,), f"{{what}} of {{name}}({_describe_config(c)})", sizes=sizes)
              for sizes in COUNT_SIZES for c in _variants(sizes)]
    for model, (fields, _) in PAPER_MODELS.items():
        c = _config(src_vocab_size=37000, tgt_vocab_size=37000, share_embeddings=True, **fields)
        probes.append(Probe((c,), f"{{what}} of {{name}}(the paper's {model} model: {_describe_config(c)})",
                            sizes=_PAPER_SET))
    return probes


def _earlier(c: TransformerConfig) -> list[TransformerConfig]:
    """The configurations of the probes before ``c``'s, which a learner failing at ``c`` passed."""
    configs = [q.args[0] for q in _count_probes(None)]
    return configs[: configs.index(c)] if c in configs else []


def _fits(c: TransformerConfig, got: int, **wrong) -> bool:
    """The learner's count at ``c`` is the formula's with ``wrong``, which is right wherever they passed."""
    return _count(c, **wrong) == got and all(_count(e, **wrong) == _count(e) for e in _earlier(c))


def _counts(text: Callable, generic: bool = False) -> Callable:
    """A ``find``: ``text`` (the learner's count, the config) says what is wrong -> the message, with the
    configuration and both counts."""
    def find(found: dict, p: Probe) -> str | None:
        c, got = p.args[0], found["value"]
        why = text(got, c)
        if not why:
            return None
        return (f"parameter_count counts {got:,} parameters for ({_describe_config(c)}); make_model builds "
                f"{_count(c):,}{'' if generic else '. Your count fits this: '}{why}.")
    return find


def _two_mistakes(got: int, c: TransformerConfig) -> str | None:
    for (m1, t1), (m2, t2) in itertools.combinations(_COUNT_MISTAKES, 2):
        if not set(m1) & set(m2) and _fits(c, got, **m1, **m2):
            return f"two things: {t1}; and {t2}"
    return None


def _one_model(found: dict, p: Probe) -> str | None:
    """The count of another probe's configuration, whatever the config."""
    others = {_count(c) for q in _count_probes(None) for c in q.args} - {_count(p.args[0])}
    if found["value"] not in others:
        return None
    return (f"parameter_count gives {found['value']:,} for ({_describe_config(p.args[0])}), the count of another "
            f"configuration; make_model builds {_count(p.args[0]):,} here: is the count of one model written into "
            "your code? Compute it from the fields of the config.")


def _off(got: int, c: TransformerConfig) -> str:
    return (f", {got - _count(c):+,} off. Count one piece at a time and compare with the course's modules: "
            "sum(p.numel() for p in MultiHeadAttention(d_model, h).parameters()), the same for "
            "PositionwiseFeedForward(d_model, d_ff) and LayerNorm(d_model), then a layer of each kind, the stacks, "
            "the tables and the generator's bias")


def _wrong_count(**wrong) -> Callable:
    def parameter_count(config):
        return _count(config, **wrong)
    return parameter_count


def _counted_by_building(config):
    return count_parameters(make_model(config))


COUNT = Declaration(
    check="check_parameter_count", function="parameter_count", roles=("config",),
    reference=course_parameter_count, probes=_count_probes, returns=Value("the count", kind="int"),
    sizes_fix="Read every size from the config: config.d_model, config.N, ...",
    mistakes=(
        Mistake("your function builds modules to count their parameters (it calls {found}...): count by hand from "
                "the formulas instead (the check's formula is tested against a built model); that is the exercise, "
                "and it works for models too large to build.", "a model built", stage="source",
                example=_counted_by_building,
                source=r"\b(?:nn \. \w+|make_model|EncoderDecoder|Encoder|Decoder|\w*Layer|\w*Attention|"
                       r"PositionwiseFeedForward|LayerNorm|Embeddings?|Generator|Linear|torch_reference) \("),
        *(Mistake("", ", ".join(k if v is True else f"{k}={v}" for k, v in wrong.items()).replace("_", " "),
                  find=_counts(lambda got, c, wrong=wrong, text=text: text if _fits(c, got, **wrong) else None),
                  example=_wrong_count(**wrong)) for wrong, text in _COUNT_MISTAKES),
        Mistake("", "two mistakes", find=_counts(_two_mistakes),
                example=_wrong_count(no_cross_attention=True, extra_tables=1)),
        Mistake("", "the count of one model", find=_one_model, example=lambda config: 63_119_496),
        Mistake("", "a count off", find=_counts(_off, generic=True), generic=True,
                example=lambda config: _count(config) + 1),
    ),
    passed=lambda name: (
        f"check_parameter_count passed: {name} equals count_parameters(make_model(config)) for "
        f"{len(COUNT_SIZES) * 4} configurations (post-norm and pre-norm, shared and separate embeddings); with one "
        "shared vocabulary of 37000 it counts " + " and ".join(
            f"{model} {n:,} ({100 * (n - m * 1e6) / (m * 1e6):+.1f}% from Table 3's {m}M)"
            for model, (f, m) in PAPER_MODELS.items()
            for n in [_count(TransformerConfig(37000, 37000, share_embeddings=True, **f))]) + "."),
)


def check_parameter_count(parameter_count: Callable) -> None:
    """Check ``parameter_count(config) -> int`` against ``count_parameters(make_model(config))``
    on the sizes of ``COUNT_SIZES``, each post-norm and pre-norm, with shared and with separate
    embeddings, then on the paper's base and big models (Table 3), whose counts the passing line reports
    (tests/test_declarations_07_09.py checks the formula against the built model, and the stacks against
    ``nn.Transformer``'s own, on every probe).

    Diagnoses: a result that is not an int; a model built to count it (its code names a module); any bias
    forgotten (all, the attention's, the feed-forward's, the generator's); layer norms forgotten or counted
    with gamma only; the pre-norm final norms forgotten, or counted in post-norm too; the
    decoder's cross-attention forgotten (with or without its norm); a tied table counted twice
    or three times, share_embeddings ignored either way; the positional tables counted; per-head
    d_model x d_model matrices; one feed-forward map; one layer per stack; any two of these
    together; the count of another configuration (one model's count written in), and sizes written into
    the code.
    """
    check(COUNT, parameter_count)


DECLARATIONS = {"check_parameter_count": COUNT}
