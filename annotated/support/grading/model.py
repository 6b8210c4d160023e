"""Checks of notebook 07's exercises, as declarations (``engine``): the decoder layer's forward pass, the tied
embeddings and generator, and the parameter count of ``make_model``, against the course's own modules (and, in
tests/test_declarations_07_09.py, nn.TransformerDecoderLayer and nn.Transformer)."""

import contextlib
import itertools
import math
from collections.abc import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from annotated.feed_forward import PositionwiseFeedForward
from annotated.masks import subsequent_mask
from annotated.model import DecoderLayer, Generator, TransformerConfig, count_parameters, make_model
from annotated.multi_head import MultiHeadAttention
from annotated.positional import Embeddings, PositionalEncoding, sinusoidal_table
from annotated.support import record as recorder
from annotated.support.grading.core import _hard_coded_hint, _same
from annotated.support.grading.engine import Declaration, Mistake, Probe, Tensor, Value, check

# Within a set every size differs (a swapped tensor shows in its shape); from one set to the next every size changes
# (a size written in fails). d_k is 6, 5 and 2, never 4; the last set is a batch of one sentence (a .squeeze()).
LAYER_SIZES = [dict(batch=3, L_tgt=5, L_src=7, d_model=12, h=2, d_ff=20),
               dict(batch=2, L_tgt=6, L_src=4, d_model=15, h=3, d_ff=22),
               dict(batch=1, L_tgt=4, L_src=8, d_model=14, h=7, d_ff=9)]
# Tried first: the source as long as the target, where swapping the memory and the decoder's states (or the two
# masks) gives numbers to compare instead of an exception.
SAME_LENGTHS = dict(batch=3, L_tgt=7, L_src=7, d_model=12, h=2, d_ff=20)
LAYER_DROPOUT = 0.5  # the sublayer connections' dropout in the check of training and evaluation modes
TIE_SIZES = [dict(src_vocab=13, tgt_vocab=11, d_model=6),
             dict(src_vocab=9, tgt_vocab=17, d_model=10)]
COUNT_SIZES = [dict(src_vocab=13, tgt_vocab=11, d_model=12, d_ff=20, h=2, N=3),
               dict(src_vocab=37, tgt_vocab=29, d_model=24, d_ff=40, h=4, N=2),
               dict(src_vocab=7, tgt_vocab=19, d_model=30, d_ff=50, h=5, N=4)]
SIZE_SETS = {"check_decoder_layer_forward": LAYER_SIZES, "check_tied_embeddings": TIE_SIZES,
             "check_parameter_count": COUNT_SIZES}


@contextlib.contextmanager
def _one_thread():
    """One thread, then the setting restored: the check's layers are tiny, and threads cost more than they bring."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


# ---------------------------------------------------------------- the decoder layer


class _Layer(DecoderLayer):
    """The course's DecoderLayer, with a one-line repr for a message that lists the call's arguments."""

    def __repr__(self) -> str:
        return (f"DecoderLayer(d_model={self.self_attn.d_model}, h={self.self_attn.h}, d_ff="
                f"{self.feed_forward.W_1.out_features}, {'pre' if self.sublayer[0].norm_first else 'post'}-norm)")


_Layer.__name__ = _Layer.__qualname__ = "DecoderLayer"  # "'DecoderLayer' object has no attribute" as in the notebook


def _decoder_layer(d_model: int, h: int, d_ff: int, dropout: float, norm_first: bool) -> _Layer:
    """The course's decoder layer (what a probe sends as data, ``record.build``, with its weights)."""
    with torch.random.fork_rng(devices=[]):  # its own initialization, overwritten by _randomize
        return _Layer(d_model, MultiHeadAttention(d_model, h), MultiHeadAttention(d_model, h),
                      PositionwiseFeedForward(d_model, d_ff), dropout=dropout, norm_first=norm_first)


def _randomize(module: nn.Module, g: torch.Generator) -> nn.Module:
    """Random values for every parameter (the norms' gamma around 1), so that each mistake shows in the output."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if p.dim() > 1:
                p.copy_((torch.rand(p.shape, generator=g) * 2 - 1) * (1 / math.sqrt(p.size(1))))
            else:
                p.copy_(("norm" in name and name.endswith("weight")) + 0.5 * torch.randn(p.shape, generator=g))
    return module


def _layer_inputs(sizes: dict, g: torch.Generator) -> tuple:
    """x, memory, src_mask (batch, 1, L_src) and tgt_mask (batch, L_tgt, L_tgt), with padding in both masks."""
    batch, L_tgt, L_src, d = (sizes[k] for k in ("batch", "L_tgt", "L_src", "d_model"))
    x, memory = torch.randn(batch, L_tgt, d, generator=g), torch.randn(batch, L_src, d, generator=g)
    src_keep, tgt_keep = torch.ones(batch, L_src, dtype=torch.bool), torch.ones(batch, L_tgt, dtype=torch.bool)
    src_keep[0, -2:] = tgt_keep[-1, -2:] = False  # the first source and the last target end in two paddings
    return x, memory, src_keep.unsqueeze(1), tgt_keep.unsqueeze(1) & subsequent_mask(L_tgt)


_SEED = 20170612  # the global generator's seed before each call: a dropout drawn from it draws the same masks


def course_layer_forward(layer, x, memory, src_mask, tgt_mask, *, self_attn="self_attn", self_qkv="y y y",
                         self_mask="tgt", src_attn="src_attn", cross_qkv="y m m", cross_mask="src",
                         order=("self", "cross", "ff"), wrap=(0, 1, 2), connection="module", feed="chain"):
    """``DecoderLayer.forward``, its dropout drawn right after ``_SEED``, or a wrong one: the attentions' modules,
    inputs (y: the sublayer's argument, m: memory, M: memory normalized, x: the layer's input) and masks (tgt, src,
    none, causal), the sublayers' order and connections; ``connection`` "module", "none" (x + fn(x)), "post by hand",
    "no dropout" (by hand), "dropout always" (F.dropout); ``feed`` "chain", "x" (sublayer[1] gets the layer's
    input), "twice" or "twice last" (the residual added again around the first or the last)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(_SEED)
        masks = {"tgt": tgt_mask, "src": src_mask, "none": None, "causal": subsequent_mask(x.size(1)).unsqueeze(0)}
        named = lambda y: {"y": y, "m": memory, "x": x, "M": layer.sublayer[1].norm(memory)}  # noqa: E731
        attend = lambda attn, qkv, mask: lambda y: getattr(layer, attn)(  # noqa: E731
            *(named(y)[n] for n in qkv.split()), masks[mask])
        steps = {"self": attend(self_attn, self_qkv, self_mask), "cross": attend(src_attn, cross_qkv, cross_mask),
                 "ff": layer.feed_forward}
        start = x
        for step, i in zip(order, wrap):
            c, fn = layer.sublayer[i], steps[step]
            drop = (lambda t: F.dropout(t, c.dropout.p)) if connection == "dropout always" else (lambda t: t)
            source = start if feed == "x" and i == 1 else x
            if connection in ("module", "none"):
                out = c(source, fn) if connection == "module" else source + fn(source)
            elif connection == "post by hand" or not c.norm_first:
                out = c.norm(source + drop(fn(source)))
            else:
                out = source + drop(fn(c.norm(source)))
            x = out + source if (feed, i) in (("twice", 0), ("twice last", 2)) else out
        return x


def _layer_probes(device: str | None) -> list[Probe]:
    g, probes = torch.Generator().manual_seed(7), []
    hints = ((r"'DecoderLayer' object has no attribute", _ATTRIBUTE_HINT),
             (r"'Tensor' object is not callable", _NOT_CALLABLE_HINT))

    def layer(sizes, norm_first, dropout=0.0):
        return _randomize(recorder.build(f"{__name__}._decoder_layer", d_model=sizes["d_model"], h=sizes["h"],
                                         d_ff=sizes["d_ff"], dropout=dropout, norm_first=norm_first), g)

    def probe(args, setting, **options):
        order, x, memory = "pre-norm" if args[0].sublayer[0].norm_first else "post-norm", args[1], args[2]
        label = (f"{{what}} of {{name}}(layer ({order}{setting}), x of shape {tuple(x.shape)}, memory of shape "
                 f"{tuple(memory.shape)}, src_mask, tgt_mask)")
        probes.append(Probe(args, label, hints=hints, seed=_SEED, tags=dict(
            norm_first=order == "pre-norm", eval=not args[0].training, dropout=args[0].sublayer[0].dropout.p > 0),
            **options))

    for sizes in (SAME_LENGTHS, *LAYER_SIZES):  # SAME_LENGTHS first: a mistake that swaps the two is named
        for norm_first in (False, True):
            probe((layer(sizes, norm_first), *_layer_inputs(sizes, g)), "",
                  sizes=None if sizes is SAME_LENGTHS else sizes)
    sizes, setting = LAYER_SIZES[0], f", dropout p = {LAYER_DROPOUT} in its sublayer connections"
    for norm_first in (False, True):  # in evaluation mode, gradients; in training mode, a second call
        probe((layer(sizes, norm_first, LAYER_DROPOUT).eval(), *_layer_inputs(sizes, g)),
              setting + ", in evaluation mode", grad=(1, 2))
        probe((layer(sizes, norm_first, LAYER_DROPOUT), *_layer_inputs(sizes, g)), setting + ", in training mode",
              again=(layer(sizes, norm_first, LAYER_DROPOUT), *_layer_inputs(sizes, g)))
    for norm_first in (False, True):
        x, memory, src_mask, tgt_mask = _layer_inputs(sizes, g)
        probe((layer(sizes, norm_first).double(), x.double(), memory.double(), src_mask, tgt_mask), ", float64")
    return probes


_CORRECT = ("x = layer.sublayer[0](x, lambda y: layer.self_attn(y, y, y, tgt_mask)); x = layer.sublayer[1](x, "
            "lambda y: layer.src_attn(y, memory, memory, src_mask)); return layer.sublayer[2](x, layer.feed_forward)")
_NOT_CALLABLE_HINT = ("\nHint: a sublayer connection takes a function and calls it itself, on x (or norm(x)): pass "
                      "layer.feed_forward, or lambda y: layer.self_attn(y, y, y, tgt_mask), not their result.")
_ATTRIBUTE_HINT = ("\nHint: a DecoderLayer holds layer.self_attn, layer.src_attn (two MultiHeadAttention), "
                   "layer.feed_forward and layer.sublayer (three SublayerConnection, called as "
                   "layer.sublayer[i](x, fn)).")
_STEPS = (("self_attn", "the masked self-attention", "self"), ("src_attn", "the encoder-decoder attention", "cross"),
          ("feed_forward", "the feed-forward network", "ff"))
_CROSS = "layer.src_attn(y, memory, memory, src_mask)"
_READS_DECODER = ("your encoder-decoder attention reads the decoder instead of the encoder: its keys and values are "
                  f"the memory (the encoder's output), so that the target can look at the source sentence: {_CROSS}.")
_MEMORY_CHANGED = ("the {} of your encoder-decoder attention are not `memory` as you were given it (normalized, or "
                   f"changed?): pass memory itself, as keys and as values: {_CROSS}.")
_ORDER = ("your sublayers run in the order {}; a decoder layer's (Figure 1, §3.1) is self_attn -> src_attn -> "
          "feed_forward.")


def _reads_x(role: str) -> str:
    return (f"{role} reads x, not the argument of its function: in pre-norm (norm_first=True) the sublayer connection "
            "calls its function on norm(x), so the lambda must use what it receives, `lambda y: ...(y, ...)` (in "
            "post-norm the two are the same, which hides the mistake there).")


def _layer_mistake(message, name: str, when=lambda p: True, **wrong) -> Mistake:
    return Mistake(message, name, when=when, like=lambda layer, x, memory, src_mask, tgt_mask: course_layer_forward(
        layer, x, memory, src_mask, tgt_mask, **wrong))


LAYER_MISTAKES = (
    Mistake("your function calls the layer itself, layer(x, memory, src_mask, tgt_mask), which runs the course's "
            "forward: write it from the layer's parts, layer.sublayer[i], layer.self_attn, layer.src_attn and "
            "layer.feed_forward.", "the layer called whole", stage="source", source=r"\blayer (?:\(|\. forward \()",
            example=lambda layer, x, memory, src_mask, tgt_mask: layer(x, memory, src_mask, tgt_mask)),
    _layer_mistake("you used layer.self_attn for both attentions: the encoder-decoder attention has weights of its "
                   f"own, {_CROSS}.", "self_attn for both attentions", src_attn="self_attn"),
    _layer_mistake("you used layer.src_attn for both attentions: the masked self-attention has weights of its own, "
                   "layer.self_attn(y, y, y, tgt_mask).", "src_attn for both attentions", self_attn="src_attn"),
    _layer_mistake("you swapped the two attention modules: layer.self_attn is the masked self-attention, "
                   "layer.src_attn the attention over the memory (src for source), each with weights trained for its "
                   "role.", "the attention modules swapped", self_attn="src_attn", src_attn="self_attn"),
    _layer_mistake("your masked self-attention reads the memory: its queries, keys and values are all the decoder's "
                   "own states, layer.self_attn(y, y, y, tgt_mask); the memory is for layer.src_attn.",
                   "the self-attention reads the memory", self_qkv="y m m"),
    _layer_mistake("your self-attention has no mask: each target position then sees the later positions, the very "
                   "words it is trained to predict (and the padding). Pass tgt_mask, which hides both (§3.2.3).",
                   "no mask in the self-attention", self_mask="none"),
    _layer_mistake("your self-attention got src_mask, the source's padding mask, where it needs tgt_mask: the two "
                   "masks are swapped (the attention over the memory takes src_mask).", "the masks swapped",
                   self_mask="src", cross_mask="tgt"),
    _layer_mistake("your self-attention's mask is not the tgt_mask you are given (a causal mask of your own, or "
                   "tgt_mask reshaped?): pass tgt_mask itself, which hides the target's padding as well as the later "
                   "positions.", "a mask of its own in the self-attention", self_mask="causal"),
    _layer_mistake(_READS_DECODER, "the cross-attention reads the decoder", cross_qkv="y y y"),
    _layer_mistake(_READS_DECODER, "the cross-attention reads the decoder, with tgt_mask", cross_qkv="y y y",
                   cross_mask="tgt"),
    _layer_mistake("your encoder-decoder attention takes its queries from the memory and its keys and values from the "
                   f"decoder: the other way round (§3.2.3): {_CROSS}.", "the cross-attention's queries and keys "
                   "swapped", cross_qkv="m y y"),
    _layer_mistake("your encoder-decoder attention takes its queries from the memory too: they come from the decoder "
                   f"(y), so that each target position asks its own question of the source: {_CROSS}.",
                   "the cross-attention's queries from the memory", cross_qkv="m m m"),
    _layer_mistake(_MEMORY_CHANGED.format("keys"), "the memory changed", cross_qkv="y M M"),
    _layer_mistake(_MEMORY_CHANGED.format("values"), "the memory changed in the values", cross_qkv="y m M"),
    _layer_mistake(f"your encoder-decoder attention has no mask: it attends to the padding of the source: {_CROSS}.",
                   "no mask in the cross-attention", cross_mask="none"),
    _layer_mistake("you gave the encoder-decoder attention the causal mask tgt_mask: the decoder may see every source "
                   "position, only the source's padding is hidden: use src_mask there.",
                   "the causal mask in the cross-attention", cross_mask="tgt"),
    _layer_mistake(_ORDER.format("self_attn -> feed_forward -> src_attn"), "the feed-forward second",
                   order=("self", "ff", "cross")),
    _layer_mistake(_ORDER.format("src_attn -> self_attn -> feed_forward"), "the attentions' order",
                   order=("cross", "self", "ff")),
    *(_layer_mistake(f"you wrapped {', '.join(f'{s[0]} in sublayer[{i}]' for s, i in zip(_STEPS, wrap))}: each "
                     "sublayer has its own connection, with its own layer norm: sublayer[0] for the self-attention, "
                     "sublayer[1] for the encoder-decoder attention, sublayer[2] for the feed-forward network.",
                     f"the connections {wrap}", wrap=wrap)
      for wrap in itertools.product(range(3), repeat=3) if len(set(wrap)) in (1, 3) and wrap != (0, 1, 2)),
    *(_layer_mistake(f"your function never called layer.{part}, {role}: a decoder layer has three sublayers, "
                     f"{_CORRECT}.", f"{part} never called", order=tuple(s[2] for s in _STEPS if s[2] != step),
                     wrap=tuple(i for i, s in enumerate(_STEPS) if s[2] != step))
      for part, role, step in _STEPS[1:]),  # without self_attn: fed x, below
    _layer_mistake(f"your function called layer.feed_forward 2 times; each sublayer runs once: {_CORRECT}.",
                   "feed_forward called twice", order=("self", "cross", "ff", "ff"), wrap=(0, 1, 2, 2)),
    _layer_mistake("no sublayer connection: each sublayer is wrapped in its residual connection and layer norm, "
                   f"layer.sublayer[i](x, fn), LayerNorm(x + Dropout(fn(x))) in post-norm: {_CORRECT}.",
                   "no sublayer connection", connection="none"),
    _layer_mistake(lambda p: "you wrote the residual connection and layer norm yourself; this layer is "
                   f"{'pre-norm (norm_first=True)' if p.tags['norm_first'] else 'post-norm'}, and your order of norm "
                   "and residual is not its own. Call the sublayer connection itself, layer.sublayer[i](x, fn): it "
                   "puts the norm where norm_first says (notebook 06).", "the residual and norm by hand",
                   when=lambda p: not p.tags["dropout"], connection="post by hand"),
    _layer_mistake(_reads_x("the masked self-attention"), "the self-attention reads the outer x", self_qkv="x x x"),
    _layer_mistake(_reads_x("the encoder-decoder attention"), "the cross-attention reads the outer x",
                   cross_qkv="x m m"),
    _layer_mistake("layer.sublayer[1] gets the layer's input x instead of the output of layer.sublayer[0]: each "
                   "sublayer takes the output of the one before.", "a connection fed the layer's input", feed="x"),
    _layer_mistake("you added the residual yourself around layer.sublayer[0]: the sublayer connection already adds x "
                   "(LayerNorm(x + Dropout(fn(x)))); use its output as it is.", "the residual added twice",
                   feed="twice"),
    _layer_mistake("you added the residual yourself after layer.sublayer[2]: the sublayer connection already adds it; "
                   "return its output as it is.", "the residual added after the last", feed="twice last"),
    _layer_mistake(f"in evaluation mode (layer.eval()), on a layer whose sublayer connections have dropout p = "
                   f"{LAYER_DROPOUT}, your function applies dropout in evaluation mode. F.dropout(t, p) drops unless "
                   "given training=False (its default is True); use the connection itself, or its module "
                   "layer.sublayer[i].dropout, which knows the mode.", "dropout in evaluation mode",
                   when=lambda p: p.tags["eval"] and p.tags["dropout"], connection="dropout always"),
    _layer_mistake(lambda p: f"in training mode (layer.train()), on a {'pre' if p.tags['norm_first'] else 'post'}-norm "
                   f"layer whose sublayer connections have dropout p = {LAYER_DROPOUT}, your output is the output "
                   "without dropout: your function ignores the dropout of the sublayer connections (§5.4). Call the "
                   "connections themselves, or apply layer.sublayer[i].dropout to the sublayer's output, and do not "
                   "switch the layer to evaluation mode (layer.eval()) inside the function.", "dropout ignored",
                   when=lambda p: not p.tags["eval"] and p.tags["dropout"], connection="no dropout"),
)


def _layer_hint(passed: list, sizes: dict, message: str) -> str:
    if sizes["batch"] == 1:
        return (f"\nHint: the same function passed with batches of several sentences but not with a batch of one "
                f"({', '.join(f'{k}={v}' for k, v in sizes.items())}): does a .squeeze() drop the batch dimension? "
                "Leave the shapes alone, or squeeze only a dimension you added yourself, .squeeze(dim).")
    return _hard_coded_hint(passed, sizes, message, "Read every size from the inputs, or better, write none: the "
                            "layer's modules know theirs.")


LAYER = Declaration(
    check="check_decoder_layer_forward", function="decoder_layer_forward",
    roles=("layer", "x", "memory", "src_mask", "tgt_mask"), reference=course_layer_forward, probes=_layer_probes,
    returns=Tensor("the layer's output", like=1), mistakes=LAYER_MISTAKES, sizes_fix=_layer_hint,
    passed=("check_decoder_layer_forward passed: {name} equals the course's DecoderLayer and PyTorch's "
            "nn.TransformerDecoderLayer with the same weights, post-norm and pre-norm, with padded source and target, "
            f"for {len(LAYER_SIZES)} sets of sizes (one a single sentence): masked self-attention, then attention over "
            "the memory, then the feed-forward network. With dropout in its connections it drops in training mode and "
            "not in evaluation mode, leaves the layer's mode alone, lets gradients reach x and memory, and keeps "
            "float64."),
)


def check_decoder_layer_forward(decoder_layer_forward: Callable) -> None:
    """Check ``decoder_layer_forward(layer, x, memory, src_mask, tgt_mask)`` against ``DecoderLayer.forward``,
    post-norm and pre-norm, on ``LAYER_SIZES`` with padding in both masks; then with dropout ``LAYER_DROPOUT`` in
    evaluation mode (gradients) and training mode (a second call), and in float64.

    Diagnoses: the layer called whole; self_attn used for both attentions (or src_attn), or the two swapped; the
    self-attention reading the memory, without a mask, with src_mask (masks swapped) or with a mask of its own; the
    cross-attention reading the decoder instead of the memory, with its queries from the memory, with the causal mask,
    without a mask, or a memory changed (as keys or values); a lambda that reads the outer x (wrong in pre-norm only); a
    sublayer never called, the feed-forward called twice; sublayers in the wrong order; no sublayer connection, a
    residual and norm written by hand, the connections' indices mixed up (one for all, or permuted), a module's result
    passed where the connection wants the function; a sublayer fed the layer's input instead of the previous output, the
    residual added twice (around the first or after the last); sizes written into the code, and a batch of one sentence
    squeezed away; the layer's mode changed (layer.eval() left behind); dropout ignored in training mode, or applied in
    evaluation mode; no gradient (torch.no_grad, .detach()); a result kept in a buffer that the next call overwrites;
    float64 turned into float32."""
    with _one_thread():
        check(LAYER, decoder_layer_forward)


# ---------------------------------------------------------------- the tied embeddings

_PIECES = ("src_embed", "tgt_embed", "generator")


def course_tied_embeddings(src_vocab_size: int, tgt_vocab_size: int, d_model: int,
                           share_embeddings: bool) -> tuple[nn.Module, nn.Module, nn.Module]:
    """make_model's embeddings (without their positions) and generator."""
    model = make_model(TransformerConfig(src_vocab_size, tgt_vocab_size, N=1, d_model=d_model, d_ff=2 * d_model,
                                         h=2, share_embeddings=share_embeddings))
    return model.src_embed[0], model.tgt_embed[0], model.generator


def _parts(found: dict) -> tuple[list, list, list]:
    """Each module's matrices and vectors as the kernel described its parameters (``record._tensors``: ``same``, the
    first Parameter object it is, ``memory``, the first storage it begins at), and all of them."""
    tensors = found.get("tensors", [])
    params = [[t for t in tensors if t["item"] == [k]] for k in range(3)]
    return ([[t for t in p if len(t["shape"]) == 2] for p in params],
            [[t for t in p if len(t["shape"]) == 1] for p in params], tensors)


def _computed(item: dict, expected: Callable) -> tuple:
    """A module's output on its probe input (None: it raised, or is no tensor), and ``expected`` of that input."""
    out = item.get("outputs")
    out = out["values"] if out and out["kind"] == "tensor" else None
    try:
        return out, expected(item["inputs"][0]["values"])
    except (RuntimeError, IndexError, TypeError, KeyError):
        return out, None


def _close(got, expected) -> bool:
    return got is not None and expected is not None and _same(got, expected)


def _tie_read(found: dict) -> dict | None:
    """What is compared with the course's modules (each module's matrices, the shapes, the ties, the frozen and the
    distinct parameters, what each computes with its own parameters), or for two calls the Parameters they share.
    None: not three modules."""
    items = found.get("items")
    if found["kind"] != "sequence" or not items:
        return None
    if all(i["kind"] == "sequence" for i in items):  # two calls (the last probe)
        calls = [{t["same"] for t in found.get("tensors", []) if t["item"][0] == c} for c in (0, 1)]
        return {"Parameters shared by the two calls": len(calls[0] & calls[1])}
    if found["length"] != 3 or any(i["kind"] != "module" for i in items):
        return None
    matrices, vectors, tensors = _parts(found)
    E_src, E_tgt, W = (m[0] if len(m) == 1 else None for m in matrices)
    b = vectors[2][0] if vectors[2] else None
    tied = lambda a, c: a is not None and c is not None and a["same"] == c["same"]  # noqa: E731
    outputs = [_computed(items[k], lambda t, E=E: E["values"][t] * math.sqrt(E["shape"][1]))
               for k, E in ((0, E_src), (1, E_tgt))]
    outputs.append(_computed(items[2], lambda x: x @ W["values"].T + b["values"]))
    return {"matrices": [len(m) for m in matrices], "weights": [t and t["shape"] for t in (E_src, E_tgt, W)],
            "biases": [v["shape"] for v in vectors[2]], "one Parameter": [tied(W, E_tgt), tied(E_src, E_tgt)],
            "frozen": [t["name"] for t in tensors if not t["requires_grad"]],
            "distinct": sum(math.prod(t["shape"]) for i, t in enumerate(tensors)
                            if t["same"] == i and t["requires_grad"]),
            "computes": [_close(*o) for o in outputs]}


def _not_three(found: dict, name: str, what: str) -> str:
    """A result that is not three modules (None has the engine's message)."""
    items = found.get("items") or [recorder.describe(v) for v in found.get("value") or ()]
    if found.get("type") in ("tuple", "list") and found["length"] == 3:
        k = next(k for k, i in enumerate(items) if i["kind"] != "module")
        return (f"{name} returned {items[k].get('type', 'Tensor')} as {_PIECES[k]}; return modules (Embeddings, "
                "Embeddings, Generator): a model registers and trains the parameters of the modules it holds only.")
    got = (f"a {found['type']} of {found['length']} items" if found.get("type") in ("tuple", "list")
           else found.get("type", "Tensor"))
    return f"{name} should return three modules (src_embed, tgt_embed, generator), got {got}"


def _not_shared(got: dict, target: dict, what: str, with_what: str,
                fix: str = "generator.proj.weight = tgt_embed.lut.weight") -> tuple[str, str]:
    """Why two matrices that must be one Parameter are not (the mistake's name, its message); ``fix`` ties them."""
    a, b, same_shape = got["values"], target["values"], got["shape"] == target["shape"]
    if same_shape and got["memory"] == target["memory"]:
        return "two Parameters over one memory", (
            f"{what} and {with_what} share their memory but are two Parameter objects (nn.Parameter(...) around the "
            "other's tensor, or .data = ...): count_parameters counts the matrix twice, and each receives its own "
            f"gradient. Assign the Parameter itself, as make_model does: {fix}.")
    if same_shape and a is not None and torch.equal(a, b):
        return "a copy of the table", (f"{what} holds a copy of {with_what}'s values: equal now, they part at the "
                                       f"first update. Tying (§3.4) makes them one tensor: {fix}.")
    if len(got["shape"]) == 2 and got["shape"] == target["shape"][::-1] and a is not None and torch.equal(a, b.T):
        return "a transposed copy", (
            f"{what} is the transpose of {with_what}. No transpose is needed: nn.Linear stores its weight as "
            f"(vocab_size, d_model), the table's own shape, and computes x @ weight.T = x E^T. Assign the table: "
            f"{fix}.")
    return "a matrix of its own", (f"{what} is not tied to {with_what}: it is a matrix of its own. Tying (§3.4) makes "
                                   f"them one Parameter: {fix}.")


def _output(item: dict, out, shape: tuple, label: str) -> str | None:
    """What keeps a module's output from being compared: an exception, another type, another shape."""
    if "outputs_raised" in item:
        return f"{label} raised {item['outputs_raised']['type']}: {item['outputs_raised']['message']}"
    if out is None:
        return f"{label} returned {item['outputs'].get('type', 'a tensor on meta')}, not a tensor"
    if tuple(out.shape) != shape:
        return f"wrong shape for {label}: expected {shape}, got {tuple(out.shape)}."
    return None


def _mismatch(out: torch.Tensor, expected: torch.Tensor, label: str) -> str:
    return f"mismatch in {label}: yours and it differ by up to {float((out - expected).abs().max()):.3g}."


def _tie_diagnosis(found: dict, p: Probe) -> tuple[str, str] | None:
    """The first thing wrong with the learner's modules (the mistake's name, its message); None when nothing is."""
    read = _tie_read(found) or {}
    if p.each:
        shared, (V_src, V_tgt, d, _) = read.get("Parameters shared by the two calls"), p.args[0]
        return ("modules kept between calls", (
            f"two calls of {{name}}({V_src}, {V_tgt}, {d}, False) returned modules that share {shared} Parameter(s): "
            "your function keeps modules or tables between calls (a global, a default argument, a cache), so two "
            "models built with it would share, and train, the same weights. Build new modules on every call.")
                ) if shared else None
    if "matrices" not in read:  # two results of three modules: the engine's words
        return None
    V_src, V_tgt, d, share = p.args
    (matrices, vectors, tensors), items = _parts(found), found["items"]
    for what, m, vocab in zip(_PIECES, matrices, (V_src, V_tgt)):
        if len(m) != 1:
            return "not one table", f"{what} should hold one table of shape ({vocab}, {d}); it holds {len(m)} matrices"
        if tuple(m[0]["shape"]) == (d, vocab):
            return "a table of swapped shape", (
                f"{what}'s table has shape {(d, vocab)}, (d_model, vocab_size): the arguments are swapped; "
                "Embeddings(vocab_size, d_model).")
    (E_src,), (E_tgt,) = matrices[:2]
    if not share and E_src["same"] == E_tgt["same"]:
        return "the source tied without share_embeddings", (
            "with share_embeddings=False the source embedding must keep a table of its own: the two languages have "
            f"two vocabularies (here of sizes {V_src} and {V_tgt}); only share_embeddings=True ties it too.")
    call = f"{{name}}(src_vocab_size={V_src}, tgt_vocab_size={V_tgt}, d_model={d}, share_embeddings={share})"
    for what, E, vocab in (("tgt_embed", E_tgt, V_tgt), ("src_embed", E_src, V_src)):
        if tuple(E["shape"]) != (vocab, d):
            return "a table of another size", (f"wrong shape for the table of {what} in {call} ({what[:3]}_vocab_size, "
                                               f"d_model): expected {(vocab, d)}, got {tuple(E['shape'])}.")
    if len(matrices[2]) != 1:
        return "not one matrix in the generator", f"the generator should hold one matrix; it holds {len(matrices[2])}"
    W, b = matrices[2][0], (vectors[2] or [None])[0]
    if b is None:
        return "no bias", (
            "your generator has no bias. The paper does not mention one; the course's Generator has it (nn.Linear's "
            f"default), and the check counts its {V_tgt} numbers: Generator(d_model, tgt_vocab_size), weight tied.")
    if tuple(b["shape"]) == (d,) and d != V_tgt:
        return "the generator's sizes swapped", (
            f"your generator's bias has d_model = {d} entries, not tgt_vocab_size = {V_tgt}: its arguments are "
            "swapped; it maps d_model to the vocabulary, Generator(d_model, tgt_vocab_size).")
    if W["same"] == E_src["same"] != E_tgt["same"]:
        return "the generator tied to the source", (
            "your generator shares the source embedding's table: it scores target tokens, so it is tied to the target "
            "embedding, generator.proj.weight = tgt_embed.lut.weight.")
    if W["same"] != E_tgt["same"]:
        return _not_shared(W, E_tgt, "the generator's weight", "the target embedding")
    if share and E_src["same"] != E_tgt["same"]:
        return "the source not tied", _not_shared(E_src, E_tgt, "with share_embeddings=True, the source embedding's "
                                                  "table", "the target embedding",
                                                  "src_embed.lut.weight = tgt_embed.lut.weight")[1]
    if tuple(b["shape"]) != (V_tgt,):
        return "a bias of another size", (
            f"wrong shape for the generator's bias in {call}: expected ({V_tgt},), got {tuple(b['shape'])}.")
    frozen = next((t for t in tensors if not t["requires_grad"]), None)
    if frozen:
        return "a frozen parameter", (
            f"{_PIECES[frozen['item'][0]]}.{frozen['name']} does not require a gradient (requires_grad=False): "
            "training would never change it, and count_parameters leaves it out. Leave requires_grad as nn.Embedding "
            "and nn.Linear make it.")
    expected = V_tgt * d + V_tgt + (0 if share else V_src * d)
    if read["distinct"] != expected:
        return "parameters of more", (
            f"the three modules hold {read['distinct']:,} distinct parameters, but the tied pieces have {expected:,} "
            f"(the target table, {V_tgt} x {d}, counted once{'' if share else f', the source table, {V_src} x {d}'}, "
            f"and the generator's bias, {V_tgt}): does a module hold a parameter it should not?")
    for what, item, E in zip(_PIECES, items, (E_src, E_tgt)):  # E[tokens] * sqrt(d_model)
        out, rows = _computed(item, lambda tokens: E["values"][tokens])
        failure = _output(item, out, (2, 5, d), f"{what}(tokens of shape (2, 5))")
        if failure:
            return "other embeddings", failure
        if _close(out, rows * math.sqrt(d)):
            continue
        if _close(out, rows):
            return "no sqrt(d_model)", (
                f"{what} returns the table's rows without the factor sqrt(d_model) = {math.sqrt(d):.4f} (§3.4): use "
                "the course's Embeddings (annotated.positional), not a bare nn.Embedding.")
        if _close(out, rows * math.sqrt(d) + sinusoidal_table(5, d)):
            return "the positional encoding added", (
                f"{what} adds the positional encoding: return the Embeddings alone (make_model puts a "
                "PositionalEncoding after it; this exercise asks for the parts that hold the vocabulary's table).")
        return "other embeddings", _mismatch(out, rows * math.sqrt(d), f"{what}(tokens), compared with "
                                             "table[tokens] * sqrt(d_model)")
    out, logits = _computed(items[2], lambda x: x @ E_tgt["values"].T + b["values"])
    failure = _output(items[2], out, (2, 5, V_tgt), "generator(x of shape (2, 5, d_model))")
    if failure or _close(out, logits):
        return ("other logits", failure) if failure else None
    stops = "the course's Generator stops at the logits, x E^T + b, which the loss and the decoder take as they are"
    scaled = ("scaled by sqrt(d_model)", "your generator multiplies by sqrt(d_model): that factor belongs to the "
              "embedding layers only (§3.4); the pre-softmax linear map is x E^T + b.")
    for wrong, mistake in (
            (logits.log_softmax(-1), ("log-probabilities", f"your generator returns log-probabilities; {stops}.")),
            (logits.softmax(-1), ("probabilities", f"your generator returns probabilities (a softmax); {stops}.")),
            (logits * math.sqrt(d), scaled),
            ((items[2]["inputs"][0]["values"] @ E_tgt["values"].T) * math.sqrt(d) + b["values"], scaled)):
        if _close(out, wrong):
            return mistake
    return "other logits", _mismatch(out, logits, "generator(x), compared with x @ E^T + b")


_TIE_GENERIC = {"a table of another size", "a bias of another size", "parameters of more", "other embeddings",
                "other logits"}  # what a size written into the code may explain too


def _tie_mistake(name: str, example: Callable) -> Mistake:
    def find(found: dict, p: Probe) -> str | None:
        diagnosis = _tie_diagnosis(found, p)
        return diagnosis[1] if diagnosis and diagnosis[0] == name else None
    return Mistake("", name, find=find, example=example, generic=name in _TIE_GENERIC)


class _Scaled(Generator):
    """An example's generator: the logits scaled by sqrt(d_model)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * self.proj.in_features ** 0.5


def _wrong_tie(embed: Callable = Embeddings, src: Callable | None = None, gen: Callable = Generator,
               tie: str = "assign", share: str = "flag", d: int | None = None, frozen: bool = False,
               cache: dict | None = None) -> Callable:
    """A tied_embeddings that makes one mistake (the examples): the modules it builds ((vocab, d_model) -> embedding,
    (d_model, vocab) -> generator), how it ties, when it shares, a d_model written in, a cache of its results."""
    def tied_embeddings(src_vocab_size, tgt_vocab_size, d_model, share_embeddings):
        key = (src_vocab_size, tgt_vocab_size, d_model, share_embeddings)
        if cache is not None and key in cache:
            return cache[key]
        tgt, source = embed(tgt_vocab_size, d or d_model), (src or embed)(src_vocab_size, d or d_model)
        generator = gen(d or d_model, tgt_vocab_size)
        linear = [m for m in generator.modules() if isinstance(m, nn.Linear)][-1]  # the one tied
        table = lambda e: next(p for p in e.parameters() if p.dim() == 2)  # noqa: E731
        E = table(tgt)
        if tie == "copy":
            with torch.no_grad():
                linear.weight.copy_(E)
        elif tie != "none":
            linear.weight = {"assign": E, "source": table(source), "parameter": nn.Parameter(E.data),
                             "transposed": nn.Parameter(E.detach().T.clone())}[tie]
        E.requires_grad_(not frozen)
        made = (tgt if {"flag": share_embeddings, "never": False, "always": True}[share] else source), tgt, generator
        return made if cache is None else cache.setdefault(key, made)
    return tied_embeddings


_TIE_EXAMPLES = (  # each known mistake, and a wrong answer that makes it
    ("not one table", dict(embed=lambda V, d: nn.Sequential(Embeddings(V, d), nn.Linear(d, d)))),
    ("a table of swapped shape", dict(src=lambda V, d: Embeddings(d, V))),
    ("the source tied without share_embeddings", dict(share="always")),
    ("a table of another size", dict(d=6)),
    ("not one matrix in the generator", dict(gen=lambda d, V: nn.Sequential(nn.Linear(d, d), Generator(d, V)))),
    ("no bias", dict(gen=lambda d, V: nn.Linear(d, V, bias=False))),
    ("the generator's sizes swapped", dict(gen=lambda d, V: Generator(V, d))),
    ("the generator tied to the source", dict(tie="source")),
    ("two Parameters over one memory", dict(tie="parameter")),
    ("a copy of the table", dict(tie="copy")),
    ("a transposed copy", dict(tie="transposed")),
    ("a matrix of its own", dict(tie="none")),
    ("the source not tied", dict(share="never")),
    ("a bias of another size", dict(gen=lambda d, V: Generator(d, V + 1))),
    ("a frozen parameter", dict(frozen=True)),
    ("parameters of more", dict(gen=lambda d, V: nn.Sequential(Generator(d, V), nn.PReLU()))),
    ("no sqrt(d_model)", dict(embed=nn.Embedding)),
    ("the positional encoding added", dict(embed=lambda V, d: nn.Sequential(Embeddings(V, d),
                                                                            PositionalEncoding(d, 0.1)))),
    ("other embeddings", dict(embed=lambda V, d: nn.Sequential(Embeddings(V, d), nn.ReLU()))),
    ("log-probabilities", dict(gen=lambda d, V: nn.Sequential(Generator(d, V), nn.LogSoftmax(-1)))),
    ("probabilities", dict(gen=lambda d, V: nn.Sequential(Generator(d, V), nn.Softmax(-1)))),
    ("scaled by sqrt(d_model)", dict(gen=_Scaled)),
    ("other logits", dict(gen=lambda d, V: nn.Sequential(Generator(d, V), nn.ReLU()))),
    ("modules kept between calls", dict(cache={})),
)


def _tie_probes(device: str | None) -> list[Probe]:
    """Each set of sizes with share_embeddings False and True (one vocabulary then), the modules called on tokens
    and x; then two calls with the same arguments."""
    g, probes = torch.Generator().manual_seed(3), []
    for sizes in TIE_SIZES:
        V_src, V_tgt, d = sizes["src_vocab"], sizes["tgt_vocab"], sizes["d_model"]
        for args in ((V_src, V_tgt, d, False), (V_tgt, V_tgt, d, True)):
            tokens = torch.randint(0, min(args[:2]), (2, 5), generator=g)
            label = (f"{{what}} of {{name}}(src_vocab_size={args[0]}, tgt_vocab_size={V_tgt}, d_model={d}, "
                     f"share_embeddings={args[3]})")
            probes.append(Probe(args, label, sizes=sizes, seed=0,
                                on=((tokens,), (tokens,), (torch.randn(2, 5, d, generator=g),))))
    V_src, V_tgt, d = (TIE_SIZES[0][k] for k in ("src_vocab", "tgt_vocab", "d_model"))
    return probes + [Probe(((V_src, V_tgt, d, False),) * 2, f"{{what}} of two calls of {{name}}({V_src}, {V_tgt}, "
                           f"{d}, False)", seed=0, each=True)]


def _tie_passed(name: str) -> str:
    V_tgt, d = TIE_SIZES[0]["tgt_vocab"], TIE_SIZES[0]["d_model"]
    return (f"check_tied_embeddings passed: {name}'s generator and target embedding are one Parameter (the source's "
            "too with share_embeddings=True), the embeddings scale by sqrt(d_model) and the generator returns logits, "
            f"for {len(TIE_SIZES)} sets of sizes; with one vocabulary of {V_tgt} and d_model = {d}, tying all three "
            f"keeps {V_tgt * d + V_tgt:,} parameters instead of {3 * V_tgt * d + V_tgt:,}.")


TIE = Declaration(
    check="check_tied_embeddings", function="tied_embeddings",
    roles=("src_vocab_size", "tgt_vocab_size", "d_model", "share_embeddings"), reference=course_tied_embeddings,
    probes=_tie_probes, passed=_tie_passed, mistakes=tuple(_tie_mistake(n, _wrong_tie(**w)) for n, w in _TIE_EXAMPLES),
    returns=Value("the three modules (src_embed, tgt_embed, generator)", kind="tuple", read=_tie_read,
                  other=_not_three),
    sizes_fix=lambda passed, sizes, message: _hard_coded_hint(passed, sizes, message,
                                                              "Build every module from the sizes you are given."),
)


def check_tied_embeddings(tied_embeddings: Callable) -> None:
    """Check ``tied_embeddings(src_vocab_size, tgt_vocab_size, d_model, share_embeddings) -> (src_embed, tgt_embed,
    generator)``: the target embedding and the generator share one Parameter, the source too with
    ``share_embeddings`` (§3.4), on ``TIE_SIZES``; two calls with the same arguments share no Parameter.

    Diagnoses: not three modules; a table of swapped shape; the source tied although share_embeddings is False, or not
    tied although it is True; the generator tied to the source, holding a copy of the values, a second Parameter over
    the same memory, a transpose, or a matrix of its own; a generator without bias or with its sizes swapped; a
    parameter that does not require a gradient (frozen); extra parameters; embeddings without the sqrt(d_model) factor
    or with the positional encoding added; a generator that returns log-probabilities or probabilities, or scales by
    sqrt(d_model); sizes written into the code; and modules kept between calls (a second call returns the same
    Parameters)."""
    with _one_thread():
        check(TIE, tied_embeddings)


# ---------------------------------------------------------------- the parameter count


def _count(c: TransformerConfig, **wrong) -> int:
    """make_model(c)'s parameters by the formulas of notebook 07, section 7; each keyword makes one usual mistake."""
    w = lambda *keys: any(wrong.get(k) for k in keys)  # noqa: E731
    d, f, N, h = c.d_model, c.d_ff, c.N, c.h
    matrix = d * d + (0 if w("no_attention_bias", "no_bias") else d)  # W^Q, W^K, W^V or W^O, with its bias
    attention = (3 * h + 1) * matrix if w("full_heads_qkv") else (4 * h if w("full_heads") else 4) * matrix
    ff_bias = not w("no_ff_bias", "no_bias")
    ffn = d * f + ff_bias * f if w("one_ff_map") else 2 * d * f + ff_bias * (f + d)
    norm = 0 if w("no_norms") else d if w("gamma_only") else 2 * d
    final = 2 * norm if w("final_norms_always") or (c.norm_first and not w("no_final_norms")) else 0
    cross, cross_norm = not w("no_cross_attention", "no_cross_sublayer"), not w("no_cross_sublayer")
    stacks = (1 if w("one_layer") else N) * ((2 + cross) * attention + 2 * ffn + (4 + cross_norm) * norm)
    share = (c.share_embeddings and not w("share_ignored")) or w("always_shared")
    tables = (0 if share else c.src_vocab_size) + (1 + wrong.get("extra_tables", 0)) * c.tgt_vocab_size
    gen_bias = 0 if w("no_generator_bias", "no_bias") else c.tgt_vocab_size
    return tables * d + stacks + final + gen_bias + wrong.get("positions", 0) * c.max_len * d


_PER_HEAD = ("d_model x d_k each, with d_k = d_model / h, side by side one d_model x d_model matrix (notebook 04); the "
             "count of an attention does not depend on h")
# (keywords of _count, what is wrong): named from the first configuration where the count is wrong, so the
# configurations come in an order where no two mistakes give the same count there (tested).
_COUNT_MISTAKES = [
    (dict(no_bias=True), "every bias is missing (the attention projections', the feed-forward network's and the "
     "generator's): nn.Linear has a bias unless told otherwise, d_out numbers next to its d_in x d_out matrix"),
    (dict(no_attention_bias=True), "the biases of the attention projections are missing, 4 d_model per "
     "MultiHeadAttention. The paper's W^Q, W^K, W^V, W^O are bare matrices, but the course builds them with "
     "nn.Linear, which adds a bias (notebook 04, as nn.MultiheadAttention does)"),
    (dict(no_ff_bias=True), "the feed-forward network's biases are missing: FFN(x) = max(0, x W_1 + b_1) W_2 + b_2 "
     "has b_1 (d_ff numbers) and b_2 (d_model) besides its two matrices (§3.3)"),
    (dict(no_generator_bias=True), "the generator's bias is missing: its matrix is the tied embedding, but its bias, "
     "tgt_vocab_size numbers, is its own (section 4 of notebook 07; the paper does not mention one)"),
    (dict(no_norms=True), "the layer norms are missing: each has a gamma and a beta of d_model numbers, one per "
     "sublayer (2 in an encoder layer, 3 in a decoder layer), plus a final one per stack in pre-norm"),
    (dict(gamma_only=True), "each layer norm counts d_model numbers; it has two vectors of d_model, gamma and beta"),
    (dict(no_final_norms=True), "the final layer norms of the pre-norm stacks are missing: with norm_first=True the "
     "encoder and the decoder each end with one more LayerNorm (2 d_model each); post-norm stacks have none"),
    (dict(final_norms_always=True), "you counted a final layer norm per stack in post-norm too: only pre-norm stacks "
     "(norm_first=True) end with one (the course follows the paper, whose post-norm stack needs none; nn.Transformer "
     "adds one anyway)"),
    (dict(no_cross_attention=True), "the decoder's encoder-decoder attention is missing: a decoder layer holds two "
     "MultiHeadAttention modules (self-attention and attention over the memory), so 2 x 4 (d_model^2 + d_model)"),
    (dict(no_cross_sublayer=True), "you counted a decoder layer as an encoder layer: it has a third sublayer, the "
     "encoder-decoder attention, with its own layer norm"),
    (dict(extra_tables=1), "a vocabulary table is counted once too often: the generator's matrix is the target "
     "embedding's table (always tied in make_model), and with share_embeddings=True the source embedding is that "
     "same table; a tied matrix is one tensor, counted once"),
    (dict(extra_tables=2), "the tied table is counted three times (source, target, generator): with "
     "share_embeddings=True the three are one tensor, counted once"),
    (dict(share_ignored=True), "share_embeddings is ignored: with share_embeddings=True the source and target "
     "embeddings are one table, counted once"),
    (dict(always_shared=True), "you counted one table for both languages whatever share_embeddings says: with "
     "share_embeddings=False the source has its own table, src_vocab_size x d_model"),
    (dict(positions=1), "you counted the positional encoding's table: it is a buffer, computed from the sine formula "
     "and never trained, not a parameter (notebook 05)"),
    (dict(positions=2), "you counted the positional encoding's tables: they are buffers, not parameters (notebook 05)"),
    (dict(full_heads=True), "you gave each head its own d_model x d_model matrices: the h heads' W_i^Q are "
     f"{_PER_HEAD}"),
    (dict(full_heads_qkv=True), "you gave each head its own d_model x d_model matrices W_i^Q, W_i^K, W_i^V: they are "
     f"{_PER_HEAD}"),
    (dict(one_ff_map=True), "the feed-forward network has two linear maps, d_model -> d_ff and d_ff -> d_model "
     "(§3.3); you counted one"),
    (dict(one_layer=True), "you counted one layer per stack: the encoder and the decoder each stack N identical "
     "layers, each with its own parameters (copy.deepcopy)"),
]


def _config(**fields) -> TransformerConfig:
    """A config that a probe sends as data (``record.build``)."""
    return recorder.build("annotated.model.TransformerConfig", **fields)


# The paper's base and big models, with one shared vocabulary of 37000 (Table 3 counts 65M and 213M).
PAPER_MODELS = {"base": (dict(), 65), "big": (dict(d_model=1024, d_ff=4096, h=16), 213)}


def _describe_config(c: TransformerConfig) -> str:
    return (f"N={c.N}, d_model={c.d_model}, d_ff={c.d_ff}, h={c.h}, src_vocab_size={c.src_vocab_size}, "
            f"tgt_vocab_size={c.tgt_vocab_size}, {'shared' if c.share_embeddings else 'separate'} embeddings, "
            f"{'pre-norm' if c.norm_first else 'post-norm'}")


def course_parameter_count(config: TransformerConfig) -> int:
    """count_parameters(make_model(config)) by formula (tests/test_declarations_07_09.py compares it with the model
    built, and the stacks with nn.Transformer's, on every probe)."""
    return _count(config)


def _count_probes(device: str | None) -> list[Probe]:
    """Each set of sizes post-norm and pre-norm, separate and shared (one vocabulary, the target's); the paper's."""
    probes = [Probe((c,), f"{{what}} of {{name}}({_describe_config(c)})", sizes=sizes) for sizes in COUNT_SIZES
              for c in (_config(src_vocab_size=sizes["tgt_vocab" if share else "src_vocab"],
                                tgt_vocab_size=sizes["tgt_vocab"], N=sizes["N"], d_model=sizes["d_model"],
                                d_ff=sizes["d_ff"], h=sizes["h"], share_embeddings=share, norm_first=pre)
                        for pre in (False, True) for share in (False, True))]
    for model, (fields, _) in PAPER_MODELS.items():
        c = _config(src_vocab_size=37000, tgt_vocab_size=37000, share_embeddings=True, **fields)
        probes.append(Probe((c,), f"{{what}} of {{name}}(the paper's {model} model: {_describe_config(c)})",
                            sizes={"models": "the paper's base and big, one vocabulary of 37000"}))
    return probes


def _fits(c: TransformerConfig, got: int, **wrong) -> bool:
    """The learner's count at ``c`` is the formula's with ``wrong``, right at every probe before ``c``'s."""
    configs = [q.args[0] for q in _count_probes(None)]
    earlier = configs[: configs.index(c)] if c in configs else []
    return _count(c, **wrong) == got and all(_count(e, **wrong) == _count(e) for e in earlier)


def _counts(text: Callable, generic: bool = False) -> Callable:
    """A ``find``: ``text`` (the learner's count, the config) says what is wrong -> the message, with the
    configuration and both counts."""
    def find(found: dict, p: Probe) -> str | None:
        c, got = p.args[0], found["value"]
        why = text(got, c)
        return why and (f"parameter_count counts {got:,} parameters for ({_describe_config(c)}); make_model builds "
                        f"{_count(c):,}{'' if generic else '. Your count fits this: '}{why}.")
    return find


def _two_mistakes(got: int, c: TransformerConfig) -> str | None:
    for (m1, t1), (m2, t2) in itertools.combinations(_COUNT_MISTAKES, 2):
        if not set(m1) & set(m2) and _fits(c, got, **m1, **m2):
            return f"two things: {t1}; and {t2}"
    return None


def _one_model(found: dict, p: Probe) -> str | None:
    """The count of another probe's configuration, whatever the config."""
    if found["value"] not in {_count(q.args[0]) for q in _count_probes(None)} - {_count(p.args[0])}:
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
    return lambda config: _count(config, **wrong)


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
    """Check ``parameter_count(config) -> int`` against ``count_parameters(make_model(config))`` on ``COUNT_SIZES``,
    post-norm and pre-norm, with shared and separate embeddings, then on the paper's base and big models (Table 3).

    Diagnoses: a result that is not an int; a model built to count it (its code names a module); any bias forgotten
    (all, the attention's, the feed-forward's, the generator's); layer norms forgotten or counted with gamma only; the
    pre-norm final norms forgotten, or counted in post-norm too; the decoder's cross-attention forgotten (with or
    without its norm); a tied table counted twice or three times, share_embeddings ignored either way; the positional
    tables counted; per-head d_model x d_model matrices; one feed-forward map; one layer per stack; any two of these
    together; the count of another configuration (one model's count written in), and sizes written into the code."""
    check(COUNT, parameter_count)


DECLARATIONS = {d.check: d for d in (LAYER, TIE, COUNT)}
