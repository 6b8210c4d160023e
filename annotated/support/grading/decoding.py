"""Checks of notebook 09: one self-attention step with its key/value cache (9.1) and greedy decoding with the cache
(9.2, ``annotated.decoding``), on small seeded random models of the check's own; one step of beam search with the
length penalty (9.3), compared step by step with ``annotated.beam_search.simple_beam_search`` on random "models"."""

import functools
import math
from collections.abc import Callable

import torch
import torch.nn as nn

from annotated.beam_search import lp, simple_beam_search
from annotated.decoding import attend, decoder_layer_step, greedy_decode, init_cache
from annotated.masks import padding_mask
from annotated.model import EncoderDecoder, TransformerConfig, make_model
from annotated.multi_head import MultiHeadAttention
from annotated.support import record as recorder
from annotated.support.grading.core import ExerciseFailed, _hard_coded_hint
from annotated.support.grading.engine import Declaration, Items, Mistake, Probe, Tensor, Value, _run_on, check

STEP_SIZES = [dict(batch=2, h=3, d_k=5, steps=6), dict(batch=3, h=2, d_k=7, steps=4),
              dict(batch=1, h=4, d_k=16, steps=5), dict(batch=4, h=5, d_k=1, steps=3),
              dict(batch=5, h=1, d_k=64, steps=7)]
# float64 sets are compared at float64's precision; scores all below -10^3 make exp() underflow, above +10^3
# overflow. d_k of 16, 1 and 64 keep a float32 scale, torch.sqrt(torch.tensor(d_k)), exact (a right answer).
_STEP_SETTINGS = [dict(dtype=torch.float32, scores="normal"), dict(dtype=torch.float32, scores="normal"),
                  dict(dtype=torch.float64, scores="normal"), dict(dtype=torch.float64, scores="far below zero"),
                  dict(dtype=torch.float64, scores="very large")]

# Post-norm, then pre-norm; seeds and ids chosen so that the sentences end at different steps and every mistake
# gives an output of its own (tests/test_exercises_09 says so). d_model = h * d_k is even (sinusoids in pairs).
DECODE_SIZES = [dict(batch=3, L_src=5, N=1, h=2, d_k=7, vocab=11, max_len=9),
                dict(batch=4, L_src=7, N=2, h=3, d_k=6, vocab=13, max_len=12)]
_DECODE_SETTINGS = [dict(norm_first=False, bos=1, pad=0, eos=6, seed=22),
                    dict(norm_first=True, bos=3, pad=1, eos=9, seed=6)]

# Seeds giving searches where </s> is among the k best at the first step and later, and every mistake shows.
BEAM_SIZES = [dict(k=2, vocab=7, max_len=6), dict(k=3, vocab=11, max_len=5),
              dict(k=4, vocab=13, max_len=8), dict(k=1, vocab=9, max_len=4)]
_BEAM_SETTINGS = [dict(bos=1, eos=2, alpha=0.6, seed=3), dict(bos=0, eos=5, alpha=1.0, seed=2),
                  dict(bos=3, eos=0, alpha=0.8, seed=3), dict(bos=2, eos=7, alpha=0.0, seed=2)]

SIZE_SETS = {"check_self_attention_step": STEP_SIZES, "check_cached_greedy_decode": DECODE_SIZES,
             "check_beam_step": BEAM_SIZES}


def _on_one_thread(decl: Declaration, fn: Callable) -> None:
    """Tiny models run faster on one thread (each small product pays to start the threads)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        check(decl, fn)
    finally:
        torch.set_num_threads(threads)


# ---------------------------------------------------------------- 9.1 the cache of one attention


class _Attention(MultiHeadAttention):
    def __repr__(self) -> str:
        return f"attn (MultiHeadAttention, d_model={self.d_model}, h={self.h})"


def _attention_module(d_model: int, h: int, seed: int, dtype: str = "float32", scores: str = "normal"):
    """A seeded MultiHeadAttention in eval mode; W_K is -W_Q or W_Q for scores all "far below zero" or "very large"."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        attn = _Attention(d_model, h).eval().to(getattr(torch, dtype))
    if scores != "normal":
        sign = -1.0 if scores == "far below zero" else 1.0
        with torch.no_grad():
            attn.W_K.weight.copy_(sign * attn.W_Q.weight)
            attn.W_K.bias.copy_(sign * attn.W_Q.bias)
    return attn


def course_self_attention_step(attn, y, cache):
    """The reference: decoder_layer_step's self-attention, as a function."""
    k, v = attn.split_heads(attn.W_K(y)), attn.split_heads(attn.W_V(y))  # (batch, h, 1, d_k)
    if "self_k" in cache:
        k, v = torch.cat([cache["self_k"], k], dim=2), torch.cat([cache["self_v"], v], dim=2)  # (batch, h, t, d_k)
    cache["self_k"], cache["self_v"] = k, v
    return attend(attn, y, k, v, None)


def _step_variant(dim: int = 2, newest_first: bool = False, replace: bool = False, swap: bool = False,
                  keys_of=None, alone: bool = False, flat: bool = False) -> Callable:
    """The reference with one mistake switched on; ``flat`` keeps the cache unsplit, (batch, t, d_model)."""
    def step(attn, y, cache):
        k = keys_of(attn, y) if keys_of else attn.split_heads(attn.W_K(y))
        v = attn.split_heads(attn.W_V(y))
        new_k, new_v = k, v
        if flat:
            k, v = attn.W_K(y), attn.W_V(y)
        if "self_k" in cache and not replace:
            axis = 1 if flat else dim
            k, v = ((torch.cat([k, cache["self_k"]], axis), torch.cat([v, cache["self_v"]], axis)) if newest_first
                    else (torch.cat([cache["self_k"], k], axis), torch.cat([cache["self_v"], v], axis)))
        cache["self_k"], cache["self_v"] = (v, k) if swap else (k, v)
        if flat:
            k, v = attn.split_heads(k), attn.split_heads(v)
        return attend(attn, y, new_k, new_v, None) if alone else attend(attn, y, k, v, None)
    return step


_STEP_HINTS = ((r"must match the size|size mismatch|cannot be multiplied|Expected size|do not broadcast",
                "\nHint: the cache holds (batch, h, t, d_k): append the newest key and value along "
                "dim=2, the positions, torch.cat([cache['self_k'], k], dim=2)."),)
_WRONG_DIMS = {0: "dim=0, the batch", 1: "dim=1, the heads", -1: "dim=3 (-1), the width d_k"}


def _step_probes(device: str | None) -> list[Probe]:
    """Each set's sentence, one probe per step t (t chained calls on one cache, the last judged with what it left in
    the cache); the first probe then decodes a second sentence on a cache of its own (``again``)."""
    probes = []
    for sizes, settings in zip(STEP_SIZES, _STEP_SETTINGS):
        batch, h, d_k, steps = sizes["batch"], sizes["h"], sizes["d_k"], sizes["steps"]
        d_model, dtype = h * d_k, settings["dtype"]
        attn = recorder.build(f"{__name__}._attention_module", d_model=d_model, h=h, seed=d_model,
                              dtype=str(dtype).replace("torch.", ""), scores=settings["scores"])
        g = torch.Generator().manual_seed(steps)
        xs = [torch.randn(batch, steps, d_model, generator=g, dtype=torch.float64) for _ in range(2)]
        if settings["scores"] != "normal":  # a large offset shared by every position
            offset = 250.0 * torch.randn(d_model, generator=g, dtype=torch.float64)
            xs = [x + offset for x in xs]
        x, other = (x.to(dtype) for x in xs)
        dtype_text = "" if dtype == torch.float32 else f", {dtype}"
        hints = _STEP_HINTS + ((("dtype", f"\nNote: this call's attn and y are {dtype}: create every tensor with "
                                 "dtype=y.dtype (not .float() or torch.zeros without dtype=)."),) if dtype_text else ())
        for t in range(steps):
            probe = Probe(tuple((attn, x[:, s : s + 1].clone(), {}) for s in range(t + 1)),
                          f"{{what}} of {{name}}(attn, y of shape ({batch}, 1, {d_model}){dtype_text}, cache) at "
                          f"step {t + 1}", sizes=sizes, each=True, chain=2, fills=(2, ("self_k", "self_v")),
                          hints=hints, tags=dict(settings, step=t + 1))
            if not probes:
                probe.again = ((attn, other[:, :1].clone(), {}),)
            probes.append(probe)
    return probes


def _piled(p: Probe, dim: int | None = None) -> tuple:
    """cache['self_k']'s shape, (batch, h, 1, d_k), with the positions so far piled up along ``dim``."""
    attn, y = p.args[-1][0], p.args[-1][1]
    shape = [y.size(0), attn.h, 1, attn.d_k]
    if dim is not None:
        shape[dim] *= p.tags["step"]
    return tuple(shape)


def _fix(p: Probe) -> str:
    held, right = p.tags["step"], _piled(p, 2)
    return (f"append the new one along the positions, dim=2: torch.cat([cache['self_k'], k], dim=2), so that "
            f"after {held} steps it is (batch, h, {held}, d_k) = {right}.")


def _along(dim: int, failed: bool = False) -> Callable:
    """The message of keys appended along ``dim``, seen in the cache's shape or (``failed``) in an exception."""
    def message(p: Probe) -> str:
        held, shape = p.tags["step"], _piled(p, dim)
        seen = (f"at step {held} the attention failed on keys of shape {shape}" if failed else
                f"after {held} steps cache['self_k'] has shape {shape}")
        return (f"{seen}: you appended the new position along {_WRONG_DIMS[dim]}, so the positions pile up where "
                f"they do not belong; {_fix(p)}")
    return message


def _cache_shape(case: str) -> Callable:
    """A find: what a cache['self_k'] of the wrong shape says about how it was built: appended along another
    dimension ("dims"), replaced ("replaced") or kept unsplit ("unsplit")."""
    def find(found: dict, p: Probe) -> str | None:
        (batch, h, _, d_k), held, shape = _piled(p), p.tags["step"], tuple(found["shape"])
        if case == "dims":
            return next((_along(dim)(p) for dim in _WRONG_DIMS if held > 1 and shape == _piled(p, dim)), None)
        if case == "replaced" and held > 1 and shape == (batch, h, 1, d_k):
            return (f"after {held} steps cache['self_k'] still holds one position, shape {shape}: each step replaced "
                    f"it instead of appending, so the new query sees itself only. Keep the earlier positions and "
                    f"{_fix(p)}")
        if case == "unsplit" and shape == (batch, held, h * d_k):
            return (f"cache['self_k'] has shape {shape}, (batch, t, d_model): keep it split into heads, (batch, h, t, "
                    f"d_k) = {_piled(p, 2)}, as init_cache keeps the memory's keys: the course's decoding and beam "
                    "search read the number of positions from its dimension 2.")
        return None
    return find


def _not_stored(found: dict, name: str, what: str) -> str | None:
    value = found.get("value") if found["kind"] == "value" else None
    if isinstance(value, dict) and "missing" in value:
        holds = value["holds"] or []
        missing = [key for key in ("self_k", "self_v") if key not in holds]
        found_text = f" (it holds {holds})" if holds else " (it is empty)"
        return (f"after the call the cache has no {' and no '.join(repr(m) for m in missing)}{found_text}: store the "
                "keys and the values of the positions so far in the dict you are given, cache['self_k'] = k and "
                "cache['self_v'] = v, each (batch, h, t, d_k); the next step reads them back.")
    return (f"{what} is {found['type'] if 'type' in found else found['kind']}, not a tensor: store one (batch, h, t, "
            "d_k) tensor of the positions so far, not a list of them.")


def _overflowed(found: dict, p: Probe) -> str | None:
    if p.tags["scores"] == "normal" or found["values"] is None or found["values"].isfinite().all():
        return None
    attn = p.args[-1][0]
    x = torch.cat([call[1] for call in p.args], dim=1)  # (batch, t, d_model)
    with torch.no_grad():
        q, keys = attn.split_heads(attn.W_Q(x[:, -1:])), attn.split_heads(attn.W_K(x))
        top = (q @ keys.transpose(-2, -1) / math.sqrt(attn.d_k)).max().item()
    where, fate = ((f"far below zero (the largest is {top:.0f})", "exp() of each underflows to 0, and 0 / 0 is NaN")
                   if p.tags["scores"] == "far below zero" else
                   (f"very large (up to {top:.0f})", "exp() overflows to inf, and inf / inf is NaN"))
    return (f"{p.label.replace('{what} of ', '')} returned NaN or inf: the scores here are all {where}: {fate}. "
            "Legitimate scores can be that large either way (a large common offset in the inputs, large weights). "
            "Subtract each row's largest score before exp(), always, not only when a score looks large (the "
            "softmax is unchanged by it), or use torch.softmax or attend, which do.")


def _no_shift(attn, y, cache):  # the softmax written out without its shift
    course_self_attention_step(attn, y, cache)
    k, v = cache["self_k"], cache["self_v"]
    scores = (attn.split_heads(attn.W_Q(y)) @ k.transpose(-2, -1) / math.sqrt(attn.d_k)).exp()
    return attn.W_O(attn.merge_heads(scores / scores.sum(-1, keepdim=True) @ v))


def _step_hint(passed: list, sizes: dict, message: str) -> str:
    hint = _hard_coded_hint(passed, sizes, message,
                            "Read every size from the inputs: batch from y, h and d_k from attn.")
    settings = _STEP_SETTINGS[STEP_SIZES.index(sizes)]
    notes = ["the batch here is one sentence: a squeeze() drops its dimension"] if sizes["batch"] == 1 else []
    if sizes["h"] == 1 or sizes["d_k"] == 1:
        notes.append("a size here is 1 (one head, or heads of width 1): a squeeze() drops its dimension")
    if settings["dtype"] == torch.float64 and "Note: this call's attn and y are" not in message:
        notes.append("attn and y are float64 here: keep every step in their dtype")
    if settings["scores"] != "normal":
        notes.append(f"the scores here are all {settings['scores']} (beyond 10^3 either way): exp() of them "
                     "underflows or overflows unless each row's largest score is subtracted first")
    return hint + "".join(f"\nNote: {note}." for note in notes)


def _later(p: Probe) -> bool:  # after the first step, where one position in any order, or alone, is right
    return p.tags["step"] > 1


def _entry(key: str) -> Tensor:
    return Tensor(f"cache[{key!r}]", like=1, label=f"cache[{key!r}] after the call", other=_not_stored)


STEP = Declaration(
    check="check_self_attention_step", function="self_attention_step", roles=("attn", "y", "cache"),
    reference=course_self_attention_step, probes=_step_probes, sizes_fix=_step_hint,
    returns=Items((Tensor("the output", like=1), _entry("self_k"), _entry("self_v")), what="the output and the "
                  "cache's entries", again_what="the output, or the keys and values in its cache,"),
    mistakes=(
        *(Mistake(_along(dim, failed=True), f"appended along dim={dim}", stage="error", like=_step_variant(dim=dim))
          for dim in _WRONG_DIMS),
        Mistake(_along(0), "appended along another dimension", stage="shape", item=1, find=_cache_shape("dims"),
                example=_step_variant(dim=0, alone=True)),
        Mistake("", "replaced instead of appended", stage="shape", item=1, find=_cache_shape("replaced"),
                example=_step_variant(replace=True)),
        Mistake("", "kept unsplit", stage="shape", item=1, find=_cache_shape("unsplit"),
                example=_step_variant(flat=True)),
        Mistake("", "the heads not merged", stage="shape",
                find=lambda found, p: "Merge the heads and apply W_O: attn.W_O(attn.merge_heads(...)), or use attend."
                if tuple(found["shape"]) == _piled(p) else None,
                example=lambda attn, y, cache: attn.split_heads(course_self_attention_step(attn, y, cache))),
        Mistake("", "a batch of one squeezed", stage="shape",
                find=lambda found, p: "The batch here is one sentence: a squeeze() dropped its dimension; keep (batch, "
                "1, d_model)." if p.args[-1][1].size(0) == 1 and len(found["shape"]) < 3 else None,
                example=lambda attn, y, cache: course_self_attention_step(attn, y, cache).squeeze().unsqueeze(1)),
        Mistake("cache['self_k'] holds the positions newest first: torch.cat([k, cache['self_k']]) puts the new key "
                "in front. Attention does not care about the order, but position i of the cache must be position i "
                "of the sentence (beam search reorders and trims the cache by it): torch.cat([cache['self_k'], k], "
                "dim=2).", "newest first", like=_step_variant(newest_first=True), items=(1,), when=_later),
        Mistake("cache['self_k'] holds the values: keys come from attn.W_K, values from attn.W_V; store each under its "
                "own name.", "keys and values swapped", like=_step_variant(swap=True), items=(1,)),
        Mistake("cache['self_k'] holds the inputs y split into heads, without the projection: the keys are "
                "attn.split_heads(attn.W_K(y)).", "keys not projected",
                like=_step_variant(keys_of=lambda attn, y: attn.split_heads(y)), items=(1,)),
        Mistake(lambda p: f"at step {p.tags['step']} your output is the newest position attending to itself only: "
                "the query must attend over every key and value of the cache, the earlier positions and the new one "
                "(no mask needed: nothing later exists yet).", "attending to itself only",
                like=_step_variant(alone=True), items=(0,), when=_later),
        Mistake("", "a softmax without its shift", find=_overflowed, example=_no_shift),
    ),
    passed=lambda name: (
        f"check_self_attention_step passed: step by step, {name} gives what MultiHeadAttention gives "
        "over the whole prefix with the look-ahead mask, and its cache holds the keys and values of "
        f"the positions so far, (batch, h, t, d_k), for {len(STEP_SIZES)} sets of sizes (a batch of one, "
        "float64, scores far below zero and very large among them), two sentences side by side, each "
        "with its own cache."),
)


def check_self_attention_step(self_attention_step: Callable) -> None:
    """Check ``self_attention_step(attn, y, cache)``, one decoding step of masked self-attention with a key/value
    cache: fed one position at a time, on ``STEP_SIZES``, against MultiHeadAttention over the whole prefix with the
    look-ahead mask, and its cache against the keys and values so far, (batch, h, t, d_k).

    Diagnoses: an input changed in place, a result of another dtype or shape, keys or values not stored, appended along
    the batch, the heads or d_k instead of the positions, replaced instead of appended, stored newest first, unsplit or
    unprojected, keys and values swapped, a query that attends to itself only, a batch of one squeezed away, a softmax
    without its shift by the row's largest score (or with it only when a score looks large), a step through float32, a
    cache or an output that the next call overwrites (a buffer shared by every call), and sizes written into the code."""
    _on_one_thread(STEP, self_attention_step)


# ---------------------------------------------------------------- 9.2 greedy decoding with the cache


class _Model(EncoderDecoder):
    def __repr__(self) -> str:
        layer = self.decoder.layers[0].self_attn
        return f"model (EncoderDecoder, N={len(self.decoder.layers)}, d_model={layer.d_model}, h={layer.h})"


def _decoding_model(sizes: dict, settings: dict) -> nn.Module:
    """A small random model in eval mode, with a generator of its own (an untrained tied one predicts nearly the same
    token everywhere) that never predicts <s> or <pad>. Its hooks keep in ``calls`` how many positions the decoder's
    self-attention saw at each call (1 with the cache); ``record.build`` keeps that list, and hides it."""
    d_model = sizes["h"] * sizes["d_k"]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(settings["seed"])
        model = make_model(TransformerConfig(sizes["vocab"], sizes["vocab"], N=sizes["N"], d_model=d_model,
                                             d_ff=2 * d_model, h=sizes["h"], dropout=0.0,
                                             norm_first=settings["norm_first"]))
        model.generator.proj.weight = nn.Parameter(torch.randn(sizes["vocab"], d_model))
        with torch.no_grad():
            model.generator.proj.bias[[settings["bos"], settings["pad"]]] = -1e4
    model.__class__ = _Model  # a short repr, nothing else
    calls = model.calls = []
    model.calls_hidden = True
    for layer in model.decoder.layers:
        layer.self_attn.W_Q.register_forward_pre_hook(lambda _, inputs: calls.append(inputs[0].size(1)))
    return model.eval()


def _decoding_source(sizes: dict, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(batch, L_src) source ids, padded with 0 after a length that differs by row, and its mask."""
    batch, length = sizes["batch"], sizes["L_src"]
    src = torch.randint(3, sizes["vocab"], (batch, length), generator=torch.Generator().manual_seed(seed))
    for row in range(1, batch):
        src[row, max(2, length - 2 * row) :] = 0
    return src, padding_mask(src, 0)


@torch.no_grad()
def _decode(model, src, src_mask, max_len: int, bos: int, eos: int | None, pad: int, *, feed: str = "newest",
            start: str = "t-1", final_norm: bool = True, mask_source: bool = True, pad_after_eos: bool = True,
            stop: str = "all", remember_done: bool = True) -> torch.Tensor:
    """Greedy decoding with the cache, as the exercise asks, or with one mistake switched on."""
    memory = model.encode(src, src_mask)
    cache = init_cache(model, memory)
    embed, position = model.tgt_embed
    ys = torch.full((src.size(0), 1), bos, dtype=torch.long)
    done = torch.zeros(src.size(0), dtype=torch.bool)
    for _ in range(max_len - 1):
        t = ys.size(1)
        tokens = ys if feed == "prefix" else ys[:, -1:]
        x = position(embed(tokens), start={"t-1": t - tokens.size(1), "0": 0, "t": t}[start])
        for layer, layer_cache in zip(model.decoder.layers, cache):
            x = decoder_layer_step(layer, x, src_mask if mask_source else None, layer_cache)
        next_token = model.generator((model.decoder.norm(x) if final_norm else x)[:, -1]).argmax(dim=-1)  # (batch,)
        if pad_after_eos:
            next_token = next_token.masked_fill(done, pad)
        ys = torch.cat([ys, next_token.unsqueeze(1)], dim=1)
        if eos is not None:
            done = (done | (next_token == eos)) if remember_done else next_token == eos
        if (stop == "all" and done.all()) or (stop == "any" and done.any()):
            break
    return ys


def course_cached_greedy_decode(model, src, src_mask, max_len, bos_idx, eos_idx, pad_idx):
    """The reference: the course's greedy_decode with its cache."""
    return greedy_decode(model, src, src_mask, max_len, bos_idx, eos_idx, use_cache=True, pad_idx=pad_idx)


def _greedy_without_cache(model, src, src_mask, max_len, bos_idx, eos_idx, pad_idx):
    return greedy_decode(model, src, src_mask, max_len, bos_idx, eos_idx, use_cache=False, pad_idx=pad_idx)


_EDGES = (  # on the first model, once every set has passed: what the signature allows beyond a batch of sentences
    (lambda src, mask: (src[-1:], mask[-1:]), None, "a batch of one sentence",
     " Read the batch size from src, src.size(0); and a squeeze() drops the batch dimension of one sentence: index "
     "instead, x[:, -1] and next_token.unsqueeze(1)."),
    (lambda src, mask: (src.int(), mask), None, "int32 source ids",
     " The output is int64 whatever the dtype of src: create ys with dtype=torch.long, not src's dtype."),
    (lambda src, mask: (src, mask), 1, "max_len = 1",
     " max_len counts <s>: with max_len = 1 the output is <s> alone, (batch, 1), after no step at all."),
    (lambda src, mask: (src, mask), 2, "max_len = 2", " max_len = 2 allows exactly one step after <s>."),
)


def _decode_probes(device: str | None) -> list[Probe]:
    probes, edges = [], []
    for sizes, settings in zip(DECODE_SIZES, _DECODE_SETTINGS):
        bos, pad, eos, max_len = settings["bos"], settings["pad"], settings["eos"], sizes["max_len"]
        model = recorder.build(f"{__name__}._decoding_model", sizes=sizes, settings=settings)
        src, src_mask = _decoding_source(sizes, seed=sizes["vocab"] + 1)
        calls = [(src, src_mask, max_len, sizes, "", "")]
        if not probes:
            calls += [(*of(src, src_mask), length or max_len, None, what, hint) for of, length, what, hint in _EDGES]
        for source, mask, length, of, what, hint in calls:
            dtype = f" ({source.dtype})" if of is None else ""
            call = (f"{{name}}(model, src of shape {tuple(source.shape)}{dtype}, src_mask, max_len={length}, "
                    f"bos_idx={bos}, eos_idx={eos}, pad_idx={pad})" + (f", {what}" if what else ""))
            this = f"\nThis call: {call}.{hint}" if what else ""
            hints = (("", this.replace("{name}", "cached_greedy_decode")),) if what else ()
            (edges if what else probes).append(Probe((model, source, mask, length, bos, eos, pad), call.replace(
                "{name}", "{what} of {name}"), sizes=of, hints=hints, tags=dict(call=call, this=this)))
    return probes + edges


def _first_difference(got: torch.Tensor, expected: torch.Tensor) -> str:
    for row, (g, e) in enumerate(zip(got.tolist(), expected.tolist())):
        if g != e:
            return f"sentence {row}: expected {e}, got {g}"
    return f"shapes: expected {tuple(expected.shape)}, got {tuple(got.shape)}"


def _decoded(case: str) -> Callable:
    """A find: what the learner's ids and the model's calls say: too many columns ("columns"); the self-attention run
    on the whole prefix with a right output ("right"), with the prefix fed through the cache ("prefix"), or otherwise
    ("whole"); <s> left out ("lost") or another first token ("first")."""
    def find(found: dict, p: Probe) -> str | None:
        ids, max_len, bos = found["values"], p.args[3], p.args[4]
        ids = ids if ids is not None and ids.dim() == 2 and ids.size(0) == p.args[1].size(0) else None  # (batch, t)
        if case == "columns":
            return (f"{{name}} returned {ids.size(1)} columns with max_len = {max_len}: max_len counts every token of "
                    f"the output, <s> included, so decode at most max_len - 1 new tokens.{p.tags['this']}"
                    ) if ids is not None and ids.size(1) > max_len else None
        seen, expected = max((found["calls"][0] or {}).get("value") or [1]), _run_on(course_cached_greedy_decode, p)
        if seen > 1:
            if case == "right" and ids is not None and torch.equal(ids, expected):
                return (f"the output is right, but without the cache: the decoder's self-attention ran on up to {seen} "
                        "positions at once, the whole prefix, as model.decode does. With the cache every step runs the "
                        "newest token only, through decoder_layer_step, which appends its keys and values to the "
                        "cache; that is the saving the exercise is about.")
            if case == "prefix" and ids is not None and torch.equal(ids, _run_on(
                    lambda *args: _decode(*args, feed="prefix"), p)):
                return ("you fed the whole prefix ys through the cached layers at every step: the cache already holds "
                        "the keys and values of the earlier positions, so they enter it again at each step (and the "
                        "new queries see each other unmasked). Run the newest token only, ys[:, -1:], at its "
                        "position ys.size(1) - 1.")
            return (f"the decoder's self-attention ran on up to {seen} positions at once, and the output differs from "
                    f"greedy_decode's ({_first_difference(ids, expected) if ids is not None else 'shapes'}). With the "
                    "cache each step runs the newest token only, ys[:, -1:], through decoder_layer_step."
                    ) if case == "whole" else None
        if ids is None or ids.size(1) == 0 or (ids[:, 0] == bos).all():
            return None
        if case == "lost" and ids.size(1) < expected.size(1) and torch.equal(ids, expected[:, 1 : ids.size(1) + 1]):
            return (f"your outputs lack the <s> they start from: every row of the output begins with bos_idx = {bos}, "
                    "as greedy_decode's and the training targets' do; keep it in ys.")
        return (f"the first token of every output must be <s>, bos_idx = {bos}; yours are {ids[:, 0].tolist()}. "
                "Start from ys = torch.full((batch, 1), bos_idx, dtype=torch.long).") if case == "first" else None
    return find


def _decode_like(message: str | Callable, name: str, **switches) -> Mistake:
    return Mistake(message, name, stage="always", like=lambda *args: _decode(*args, **switches))


def _decode_find(name: str, case: str, example: Callable, **more) -> Mistake:
    return Mistake("", name, stage="always", find=_decoded(case), example=example, **more)


DECODE = Declaration(
    check="check_cached_greedy_decode", function="cached_greedy_decode",
    roles=("model", "src", "src_mask", "max_len", "bos_idx", "eos_idx", "pad_idx"),
    reference=course_cached_greedy_decode, probes=_decode_probes, sizes_fix=functools.partial(
        _hard_coded_hint, how="Read the batch size from src (src.size(0)) and use the ids you are given."),
    returns=Tensor("the ids", dtype="ids", like=None, dtypes=("int64",), kind="an int64",
                   dtype_message=lambda found, name, what, args: (
                       f"{name} returned the ids as torch.{found['dtype']}; token ids are int64 (torch.long), what an "
                       "embedding looks up and what argmax gives: create ys with torch.full(..., dtype=torch.long)."
                       + ("\nThis call: int32 source ids. The output is int64 whatever the dtype of src: create ys "
                          "with dtype=torch.long, not src's dtype." if args[1].dtype != torch.long else ""))),
    mistakes=(
        _decode_find("too many columns", "columns",
                     lambda m, s, sm, max_len, *ids: _decode(m, s, sm, max_len + 1, *ids)),
        _decode_find("right without the cache", "right", _greedy_without_cache),
        _decode_find("the prefix fed through the cache", "prefix", lambda *args: _decode(*args, feed="prefix")),
        _decode_find("the whole prefix at every step", "whole", lambda *args: _greedy_without_cache(*args).flip(0),
                     generic=True),
        _decode_find("<s> left out", "lost", lambda *args: _decode(*args)[:, 1:]),
        _decode_find("<s> not first", "first", lambda *args: _decode(*args).index_fill(1, torch.tensor([0]), args[6])),
        _decode_like("every token went in at position 0: the positional encoding must say where the newest token "
                     "stands, position(embed(ys[:, -1:]), start=ys.size(1) - 1).", "every token at position 0",
                     start="0"),
        _decode_like("the newest token went in one position too far: ys holds t tokens, at positions 0 .. t - 1, so "
                     "the newest is at start=ys.size(1) - 1, not ys.size(1).", "one position too far", start="t"),
        _decode_like("the decoder's final norm is missing: a pre-norm decoder ends with a LayerNorm "
                     "(model.decoder.norm; nn.Identity in a post-norm one) before the generator.",
                     "the final norm skipped", final_norm=False),
        _decode_like("the cross-attention looked at the source's padding: pass src_mask to decoder_layer_step, so "
                     "that no query attends to a <pad> of the source.", "the source padding not masked",
                     mask_source=False),
        _decode_like(lambda p: f"a sentence that has produced </s> went on producing tokens while the others "
                     f"finished: after its </s> a sentence gets pad_idx = {p.args[6]} only "
                     "(next_token.masked_fill(done, pad_idx)).", "no padding after </s>", pad_after_eos=False),
        _decode_like("your decoding does not stop when every sentence has produced </s>: it runs to max_len. Stop "
                     "as soon as all are done (if done.all(): break), as the course's greedy_decode does, so a batch "
                     "costs no more steps than it needs.", "no stop", stop="never"),
        _decode_like("your decoding does not stop at </s>: it runs every sentence to max_len. After its </s> a "
                     "sentence gets pad_idx only, and decoding stops when all are done.", "no stop and no padding",
                     stop="never", pad_after_eos=False),
        _decode_like("your decoding stopped as soon as one sentence produced </s>: the others are cut short. Stop "
                     "when every sentence is done, done.all(), not done.any().", "a stop at the first </s>",
                     stop="any"),
        _decode_like("a sentence that produced </s> started again a step later: `done` must remember every sentence "
                     "that has finished, done = done | (next_token == eos_idx), not only those that finish at this "
                     "step.", "a done that forgets", remember_done=False),
        Mistake("", "other tokens", generic=True, example=lambda *args: _decode(*args).flip(0), find=lambda found, p: (
            f"{p.tags['call']} differs from the course's greedy_decode: "
            f"{_first_difference(found['values'], _run_on(course_cached_greedy_decode, p))}.{p.tags['this']}")),
    ),
    passed=lambda name: (
        f"check_cached_greedy_decode passed: {name} gives greedy_decode's tokens, with and without its "
        "cache, on a post-norm and a pre-norm random model, running one new position per step, "
        "stopping when every sentence has produced </s> and padding after it; also for one sentence "
        "alone, int32 source ids, and max_len = 1 and 2."),
)


def check_cached_greedy_decode(cached_greedy_decode: Callable) -> None:
    """Check ``cached_greedy_decode(model, src, src_mask, max_len, bos_idx, eos_idx, pad_idx)`` against the course's
    ``greedy_decode`` on two small random models (``DECODE_SIZES``), then one sentence alone, int32 source ids and
    max_len = 1 and 2. Ties of the argmax are not tried (greedy takes argmax's first index, beam search topk's).

    Diagnoses: an input changed in place, ids of another dtype or device, too many columns, the decoder run on the whole
    prefix (right output without the cache, or the prefix fed through the cache), <s> missing or not first, the newest
    token at position 0 or one too far, the final norm skipped, the source padding not masked, no padding after </s>, no
    stop at </s>, a stop at the first finished sentence, a `done` that forgets, a batch of one sentence squeezed away,
    ids in the dtype of int32 sources, a step taken with max_len = 1, and sizes or special ids written into the code."""
    _on_one_thread(DECODE, cached_greedy_decode)


# ---------------------------------------------------------------- 9.3 one step of beam search


def _beam_model(vocab: int, eos: int, seed: int) -> Callable[[list[int]], torch.Tensor]:
    """A random "model" for one sentence: prefix -> (vocab,) float32 log-probabilities, the same for the same prefix;
    </s> near the top from the first step on, likelier as the prefix grows, so that hypotheses finish at several."""
    def next_log_probs(prefix: list[int]) -> torch.Tensor:
        key = seed
        for token in prefix:  # a seed of the prefix's own: the table's row for that prefix
            key = (key * 1_000_003 + token + 1) % 2**31
        g = torch.Generator().manual_seed(key)
        logits = 2.0 * torch.randn(vocab, generator=g)
        others = torch.cat([logits[:eos], logits[eos + 1 :]])
        logits[eos] = others.max() - 1.5 + 0.35 * len(prefix) + 0.3 * torch.randn(1, generator=g).item()
        return logits.log_softmax(-1)
    return next_log_probs


def _beam_step(live: list, log_probs: torch.Tensor, k: int, alpha: float, eos: int, *, order: str = "best first",
               pool: str = "every token", cumulative: bool = True, live_from: str = "candidates",
               finished_from: str = "k best", length: str = "after <s>", penalty: str = "divide",
               penalize_live: bool = False) -> tuple[list, list]:
    """One step of ``simple_beam_search``, its lines as they are, or with one mistake switched on: (live, finished)."""
    rows = log_probs.tolist()
    if pool == "every token":
        extensions = [list(enumerate(row)) for row in rows]
    else:  # each hypothesis's own k best tokens ("top k"), or its best one ("best")
        extensions = [sorted(enumerate(row), key=lambda item: -item[1])[: k if pool == "top k" else 1] for row in rows]
    candidates = sorted(((tokens + [t], (logp if cumulative else 0.0) + lt)
                         for (tokens, logp), tokens_row in zip(live, extensions) for t, lt in tokens_row),
                        key=lambda c: -c[1] if order == "best first" else c[1])

    def score(y: list[int], logp: float) -> float:
        n = {"after <s>": len(y) - 1, "with <s>": len(y), "without </s>": len(y) - 2}[length]
        if penalty == "factor":  # ((5 + |Y|) / 6) * alpha
            return logp / ((5 + n) / 6 * alpha) if alpha else float("nan")
        if penalty in ("none", "length"):
            return logp / n if penalty == "length" else logp
        return logp * lp(n, alpha) if penalty == "multiply" else logp / lp(n, alpha)

    finished = [(y, score(y, logp)) for y, logp in (candidates[:k] if finished_from == "k best" else candidates)
                if y[-1] == eos]
    live = {"candidates": [(y, logp) for y, logp in candidates if y[-1] != eos][:k],
            "k best": [(y, logp) for y, logp in candidates[:k] if y[-1] != eos],  # finished ones' places left empty
            "with finished": candidates[:k]}[live_from]
    if penalize_live:
        live = [(y, logp / lp(len(y) - 1, alpha)) for y, logp in live]
    return live, finished


def course_beam_step(live: list, log_probs: torch.Tensor, k: int, alpha: float, eos: int) -> tuple[list, list]:
    """The reference: one step of simple_beam_search."""
    return _beam_step(live, log_probs, k, alpha, eos)


def _show_tokens(tokens: list[int]) -> str:
    return "[" + " ".join(map(str, tokens)) + "]"


def _show_hypotheses(hypotheses: list) -> str:
    return ", ".join(f"{_show_tokens(tokens)} {value:.4f}" for tokens, value in hypotheses) or "none"


def _loose(found: dict):
    """A described result as Python objects again: a 0-d tensor as a tensor, a NumPy number as its number, what was
    described by its type only as an object of a class of that name."""
    if found["kind"] == "sequence":
        return (tuple if found["type"] == "tuple" else list)(_loose(item) for item in found["items"])
    if found["kind"] in ("value", "tensor") or found.get("module") == "numpy" and "value" in found:
        return found["values"] if found["kind"] == "tensor" else found["value"]
    return type(found.get("type", found["kind"]), (), {"__repr__": lambda self: f"<{type(self).__name__}>"})()


def _number(value, ids: bool) -> int | float | None:
    """A token id (``ids``) or a score, as the exercise allows them (a 0-d tensor too); None if not one."""
    if torch.is_tensor(value) and value.numel() == 1 and value.is_floating_point() != ids and value.dtype != torch.bool:
        return int(value) if ids else float(value)
    if isinstance(value, int if ids else (int, float)) and not isinstance(value, bool):
        return value if ids else float(value)
    return None


def _hypotheses(items, which: str) -> list[tuple[list[int], float]]:
    """The learner's list of (tokens, number) pairs, as lists of ints and floats."""
    if not isinstance(items, (list, tuple)):
        raise ExerciseFailed(f"{{name}} should return the {which} hypotheses as a list of (tokens, score) "
                             f"pairs, got {type(items).__name__}")
    out = []
    for item in items:
        if not (isinstance(item, (list, tuple)) and len(item) == 2):
            raise ExerciseFailed(f"each of the {which} hypotheses {{name}} returns should be a pair (tokens, score), "
                                 f"such as ([1, 4, 6], -1.23); got {item!r}")
        tokens, value = list(item[0]) if torch.is_tensor(item[0]) and item[0].dim() == 1 else item[0], item[1]
        if not isinstance(tokens, (list, tuple)):
            raise ExerciseFailed(f"the tokens of each of the {which} hypotheses {{name}} returns should be a list "
                                 f"of ids, <s> first; got {type(tokens).__name__} {tokens!r}")
        what, ids, score = f"the {which} hypothesis {list(tokens)!r}", [_number(t, True) for t in tokens], _number(
            value, False)
        if None in ids:
            token = tokens[ids.index(None)]
            raise ExerciseFailed(f"{{name}}: the tokens of {what} should be token ids, ints, but one of them is "
                                 f"{token!r} ({type(token).__name__}). Append the id itself, t or int(t), to a copy "
                                 "of the list: tokens + [t].")
        if score is None:
            raise ExerciseFailed(f"{{name}}: the score of {what} should be a number (a float), got "
                                 f"{type(value).__name__} {value!r}.")
        out.append((ids, score))
    return out


def _beam_result(found: dict) -> tuple[tuple | None, str | None]:
    """The learner's (live, finished) as lists of ([ids], score) pairs, or the message of a result of another kind."""
    result = _loose(found)
    try:
        if not (isinstance(result, (tuple, list)) and len(result) == 2):
            got = f"a {type(result).__name__} of {len(result)} items" if isinstance(result, (tuple, list)) else type(
                result).__name__
            raise ExerciseFailed(f"{{name}} should return a pair (live, finished), got {got}")
        return (_hypotheses(result[0], "live"), _hypotheses(result[1], "finished")), None
    except ExerciseFailed as err:
        return None, str(err)


def _beam_probes(device: str | None) -> list[Probe]:
    """simple_beam_search on each set's random model, with its trace: one probe per step, the live hypotheses of the
    search before it and the model's log-probabilities for them (its steps are _beam_step's: tests say so)."""
    probes = []
    for sizes, settings in zip(BEAM_SIZES, _BEAM_SETTINGS):
        k, vocab, max_len = sizes["k"], sizes["vocab"], sizes["max_len"]
        bos, eos, alpha = settings["bos"], settings["eos"], settings["alpha"]
        model, trace = _beam_model(vocab, eos, settings["seed"]), []
        simple_beam_search(lambda p: dict(enumerate(model(p).tolist())), k, max_len, alpha, bos, eos, trace)
        live = [([bos], 0.0)]
        for step, (expected_live, _) in enumerate(trace, start=1):
            log_probs = torch.stack([model(tokens) for tokens, _ in live])  # (n, vocab)
            where = (f"at step {step} of a search with k={k}, alpha={alpha}, eos={eos}, vocab={vocab} "
                     f"({len(live)} live: {_show_hypotheses(live)})")
            probes.append(Probe(([(list(t), logp) for t, logp in live], log_probs, k, alpha, eos),
                                f"{{what}} of {{name}} {where}", sizes=sizes, tags=dict(where=where)))
            live = [(list(tokens), logp) for tokens, logp in expected_live]
    return probes


def _at(message: str | Callable) -> Callable:
    """A message prefixed with the step it shows at (a callable: of the probe)."""
    return lambda p: f"{p.tags['where']}: {message(p) if callable(message) else message}"


def _beam_like(message: str | Callable, name: str, **change) -> Mistake:
    """A known mistake: ``_beam_step`` with one switch, or with another k, alpha or eos written in."""
    fixed = {key: change.pop(key) for key in ("k", "alpha", "eos") if key in change}

    def wrong(live, log_probs, k, alpha, eos):
        return _beam_step(live, log_probs, **dict(dict(k=k, alpha=alpha, eos=eos), **fixed), **change)
    return Mistake(_at(message), name, like=wrong)


def _beam_found(case: str) -> Callable:
    """A find: a finished hypothesis kept in the beam ("ended"), right lists out of order ("order"), or how the
    learner's hypotheses differ from the search's ("other")."""
    def find(found: dict, p: Probe) -> str | None:
        (live, finished), eos = _beam_result(found)[0] or ([], []), p.args[4]
        ended = [tokens for tokens, _ in live if tokens and tokens[-1] == eos]
        if case == "ended":
            return _at(f"your live hypotheses include {_show_tokens(ended[0])}, which ends in </s> (eos = {eos}): a "
                       "finished hypothesis leaves the beam, set aside with its score s(Y), and its place goes to the "
                       "next best candidate that does not end in </s>. Kept in the beam, it would be extended past "
                       "its end, and take the place of a live one.")(p) if ended else None
        right_live, right_finished = course_beam_step(*p.args)
        same = lambda got, expected: len(got) == len(expected) and all(  # noqa: E731
            g == e and math.isclose(g_value, e_value, rel_tol=1e-5, abs_tol=1e-5)
            for (g, g_value), (e, e_value) in zip(got, expected))
        if case == "order":
            ordered = [sorted(hypotheses, key=lambda h: -h[1]) for hypotheses in (live, finished)]
            return _at("the hypotheses are right but not in order: return each list best first, by decreasing log P "
                       "(and s(Y)), as simple_beam_search keeps them.")(p) if same(ordered[0], right_live) and same(
                ordered[1], right_finished) else None
        if not same(live, right_live):
            return _at(f"your live hypotheses are {_show_hypotheses(live)}, where simple_beam_search keeps "
                       f"{_show_hypotheses(right_live)} (tokens, log P; best first).")(p)
        return _at(f"your finished hypotheses are {_show_hypotheses(finished)}, where simple_beam_search sets aside "
                   f"{_show_hypotheses(right_finished)} (tokens, s(Y)).")(p)
    return find


_SWITCHES = (
    (dict(order="worst first"), "worst first",
     "your hypotheses are the worst candidates, not the best: you sorted the candidates in ascending order of log P, "
     "so the k lowest came first. A log-probability is higher when the hypothesis is more likely: sort by "
     "decreasing log P (sorted(..., key=lambda c: -c[1]), or reverse=True)."),
    (dict(cumulative=False), "ranked by the new token alone",
     "you ranked the candidates by the new token's log-probability alone: a candidate's log P is its hypothesis's "
     "log P plus the token's, log P(y_1 .. y_t) = log P(y_1 .. y_t-1) + log P(y_t | ...), so that the beam compares "
     "whole hypotheses, not their last tokens."),
    (dict(pool="best"), "each hypothesis extended by its best token only",
     "you extended each live hypothesis by its own best token only: that is k greedy searches side by side. Beam "
     "search ranks every extension of every hypothesis together, all n * V candidates, and keeps the k best: two "
     "of them may extend the same hypothesis, and another hypothesis may have none."),
    (dict(pool="top k"), "each hypothesis's k best tokens only",
     lambda p: f"you took each hypothesis's k best tokens (k = {p.args[2]}) before ranking: when </s> is among "
     "them, that hypothesis offers only k - 1 live continuations, and the beam falls short of k live hypotheses (at "
     "the first step there is one hypothesis, <s>). Rank all n * V candidates (or each hypothesis's k + 1 best, as "
     "the batched beam_search takes the 2k best overall), so that k live ones always remain."),
    (dict(live_from="k best"), "a finished hypothesis's place left empty",
     "the place of a finished hypothesis was left empty: you kept the live candidates among the k best only, so "
     "after a </s> the beam holds fewer than k. A finished hypothesis leaves the beam and its place goes to the "
     "next best candidate that does not end in </s>: the k best of all the candidates that do not end in </s>."),
    (dict(finished_from="every candidate"), "every candidate ending in </s> set aside",
     "you set aside every candidate that ends in </s>, even those outside the k best: a hypothesis is finished "
     "only if its </s> makes it one of the k best candidates of the step; the others are pruned, as every "
     "candidate outside the beam is."),
    (dict(penalty="none"), "no length penalty",
     lambda p: "the finished hypotheses are scored by log P alone: set aside, each is scored by s(Y) = log P / "
     f"lp(|Y|), lp(|Y|) = ((5 + |Y|) / 6)^alpha, with alpha = {p.args[3]} here, so that longer outputs are not "
     "beaten just for having more (negative) terms."),
    (dict(penalty="multiply"), "log P multiplied by lp",
     "you multiplied log P by lp(|Y|): s(Y) = log P / lp(|Y|) divides by it. log P is negative and lp >= 1, so "
     "dividing brings a long output's score closer to 0, which is the point of the penalty; multiplying pushes it "
     "further down."),
    (dict(penalty="length"), "log P divided by |Y|",
     lambda p: "you divided log P by the length |Y| itself: the length penalty divides by lp(|Y|) = ((5 + |Y|) / "
     f"6)^alpha (alpha = {p.args[3]} here; Wu et al., 2016), which is 1 for one token and grows more slowly."),
    (dict(penalty="factor"), "alpha as a factor",
     "you computed lp(|Y|) as ((5 + |Y|) / 6) * alpha: alpha is an exponent, lp(|Y|) = ((5 + |Y|) / 6) ** alpha "
     "(lp from annotated.beam_search)."),
    (dict(length="with <s>"), "|Y| counted with <s>",
     "the length penalty used the wrong length: you counted <s>, len(tokens). |Y| counts the tokens after <s>, "
     "</s> included: lp(len(tokens) - 1, alpha), as simple_beam_search does."),
    (dict(length="without </s>"), "|Y| counted without </s>",
     "the length penalty used the wrong length: you left out </s> (or used the length before the step). |Y| "
     "counts the tokens after <s>, </s> included: lp(len(tokens) - 1, alpha), as simple_beam_search does."),
    (dict(penalize_live=True), "live hypotheses scored with the penalty",
     "your live hypotheses carry log P / lp(|Y|): the length penalty scores the finished hypotheses only. A live "
     "hypothesis keeps its log P, which the next step adds to; all live ones have the same length, so lp would not "
     "change their order anyway."),
)


def _beam_hint(passed: list, sizes: dict, message: str) -> str:
    settings = _BEAM_SETTINGS[BEAM_SIZES.index(sizes)]
    hint = _hard_coded_hint(passed, sizes, message,
                            "Read every size from the inputs, and use the k, alpha and eos you are given.")
    return hint + f"\nNote: here <s> is {settings['bos']}, </s> is {settings['eos']} and alpha is {settings['alpha']}."


BEAM = Declaration(
    check="check_beam_step", function="beam_step", roles=("live", "log_probs", "k", "alpha", "eos"),
    reference=course_beam_step, probes=_beam_probes, consistent=True, sizes_fix=_beam_hint,
    returns=Value("the hypotheses (live, finished)", kind="tuple", precision=(1e-5, 1e-5),
                  read=lambda found: _beam_result(found)[0],
                  other=lambda found, name, what: (_beam_result(found)[1] or "").replace("{name}", name) or None),
    in_place=("tokens.append(t) changes the caller's list, which every other extension of the same hypothesis "
              "shares. Build a new list for each candidate, tokens + [t]."),
    mistakes=(
        *(_beam_like(lambda p, k=k: f"the beam holds {k} hypotheses where k = {p.args[2]}: is k written into your "
                     "code? Use the k you are given.", f"k = {k} written in", k=k) for k in range(1, 6)),
        *(_beam_like(lambda p, eos=eos: f"your search does not treat {p.args[4]} as </s>; it keeps and sets aside "
                     f"the hypotheses as if </s> were another id ({eos} would fit). Is the id of </s> written into "
                     "your code? Use the eos you are given: another vocabulary numbers its specials otherwise.",
                     f"eos = {eos} written in", eos=eos) for eos in (2, 3)),  # the course's </s> is 2
        *(_beam_like(lambda p, alpha=alpha: f"your scores are those of alpha = {alpha}, where alpha = {p.args[3]}: "
                     "is alpha written into your code? Use the alpha you are given.", f"alpha = {alpha} written in",
                     alpha=alpha) for alpha in (0.5, 0.6, 0.8, 1.0)),
        Mistake("", "a finished hypothesis kept in the beam", find=_beam_found("ended"),
                example=lambda *args: _beam_step(*args, live_from="with finished")),
        *(_beam_like(message, name, **switch) for switch, name, message in _SWITCHES),
        Mistake("", "lists out of order", find=_beam_found("order"),
                example=lambda *args: tuple(list(reversed(h)) for h in course_beam_step(*args))),
        Mistake("", "other hypotheses", find=_beam_found("other"), generic=True, example=lambda *args: (
            [(tokens, logp - 0.5) for tokens, logp in course_beam_step(*args)[0]], course_beam_step(*args)[1])),
    ),
    passed=lambda name: (
        f"check_beam_step passed: step by step, {name} keeps the live hypotheses and sets aside the finished "
        f"ones, with their s(Y), as simple_beam_search does, on {len(BEAM_SIZES)} random models (k = 1 to 4, "
        "alpha = 0 to 1)."),
)


def check_beam_step(beam_step: Callable) -> None:
    """Check ``beam_step(live, log_probs, k, alpha, eos) -> (live, finished)``, one step of beam search for one
    sentence, against every step of ``simple_beam_search`` run on a random model (a table of next-token
    log-probabilities per prefix) for each set of ``BEAM_SIZES``, with other ids of <s> and </s> and alpha.

    Diagnoses: the live hypotheses changed in place (tokens.append), a result of another kind, a finished hypothesis
    kept in the beam, the candidates sorted worst first, ranked by the new token alone, each hypothesis extended by its
    best token only or ranked among its own k best tokens (a beam short of k after a </s>), the place of a finished
    hypothesis left empty, every candidate ending in </s> set aside, the length penalty missing, multiplied, replaced by
    the length or with alpha as a factor, |Y| counted with <s> or without </s>, live hypotheses scored with the penalty,
    lists out of order, and sizes, k, alpha or ids written into the code."""
    check(BEAM, beam_step)


DECLARATIONS = {"check_self_attention_step": STEP, "check_cached_greedy_decode": DECODE, "check_beam_step": BEAM}
