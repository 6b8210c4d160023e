"""Checks of notebook 09's exercises: the key/value cache of greedy decoding
(``annotated.decoding``), one merge of byte-pair encoding (``annotated.bpe``, compared with
``subword-nmt``) and corpus BLEU (``annotated.evaluation``, compared with ``sacrebleu``).

The decoding checks build small random models of their own, seeded, never the shipped one;
the byte-pair and BLEU checks run toy corpora small enough to count by hand.
"""

import contextlib
import io
import math
from collections import Counter
from collections.abc import Callable

import torch
import torch.nn as nn
from sacrebleu.metrics import BLEU

from annotated.bpe import END, learn_bpe, merge, spell
from annotated.decoding import decoder_layer_step, greedy_decode, init_cache
from annotated.evaluation import corpus_bleu
from annotated.masks import padding_mask, subsequent_mask
from annotated.model import EncoderDecoder, TransformerConfig, make_model
from annotated.multi_head import MultiHeadAttention
from annotated.support.grading.core import (
    ExerciseFailed, _assert_close, _call, _function, _generic, _hard_coded_hint, _run_on_all_sizes,
    _same, _same64, _shape, _sizes, _tensor,
)

# ---------------------------------------------------------------- the sizes and the toy corpora

STEP_SIZES = [dict(batch=2, h=3, d_k=5, steps=6), dict(batch=3, h=2, d_k=7, steps=4),
              dict(batch=1, h=4, d_k=16, steps=5), dict(batch=4, h=5, d_k=1, steps=3),
              dict(batch=5, h=1, d_k=64, steps=7)]
# Per set: the dtype, and the scores: "normal"; "far below zero", every score below -10^3 (keys
# that are minus the queries, inputs with a large common offset), where exp() of each underflows
# to 0; "very large", every score above +10^3, where exp() overflows. float64 from the third set
# on, compared to float64 precision: a step through float32 shows. Their d_k (16, 1, 64) have a
# square root and its inverse exact in float32, so that a scale computed as a float32 tensor,
# torch.sqrt(torch.tensor(d_k)), stays a right answer (as in notebook 02's check).
_STEP_SETTINGS = [dict(dtype=torch.float32, scores="normal"), dict(dtype=torch.float32, scores="normal"),
                  dict(dtype=torch.float64, scores="normal"), dict(dtype=torch.float64, scores="far below zero"),
                  dict(dtype=torch.float64, scores="very large")]

# Small random models: post-norm with the first set, pre-norm with the second (whose final
# LayerNorm then matters). The special ids change too, so that none can be written in. The
# seeds give models whose sentences all end, at different steps, and on which every mistake
# the check names gives an output of its own.
DECODE_SIZES = [
    dict(batch=3, L_src=5, N=1, h=2, d_k=7, vocab=11, max_len=9),  # d_model = h * d_k is even:
    dict(batch=4, L_src=7, N=2, h=3, d_k=6, vocab=13, max_len=12),  # the sinusoids come in pairs
]
_DECODE_SETTINGS = [dict(norm_first=False, bos=1, pad=0, seed=22),  # eos is chosen per model, below
                    dict(norm_first=True, bos=3, pad=1, seed=6)]

# Word counts: Sennrich et al.'s example of notebook 09 (a tie at the first merge); captions
# with the one-letter word "a" (a pair across two words would win); runs of one letter (a
# pair that overlaps itself, "a a a") and "hahah", which holds the pair ("h", "a") twice apart
# (a merge must join both).
BPE_CORPORA = [
    {"low": 5, "lower": 2, "newest": 6, "widest": 3},
    {"the": 7, "a": 12, "dog": 4, "dogs": 3, "runs": 5, "sand": 2, "on": 6, "and": 3, "sun": 2},
    {"aaah": 3, "baaa": 2, "aha": 4, "ha": 5, "hah": 2, "haa": 1, "hahah": 2},
]
_MERGES = [learn_bpe(words, 10_000) for words in BPE_CORPORA]  # min_frequency=2, as the course

# (hypotheses, references), words without punctuation, so that sacrebleu's 13a tokenizer, the
# course's, splits them where str.split() does (the course's corpus_bleu is called with
# lowercase=False: BLEU itself is case-sensitive, as sacrebleu's default).
BLEU_CORPORA = [
    # Shorter than the references (BP < 1); "the cat the cat" repeats bigrams the reference
    # holds once (clipping).
    (["the cat the cat sat on the mat", "a dog runs on the grass"],
     ["the cat sat on the mat today", "a brown dog runs on the green grass"]),
    # Longer than the references (BP = 1, and exp(1 - r/c) > 1).
    (["two men are playing football in a park today", "a girl in a red dress is dancing",
      "a man is riding a bike down a hill"],
     ["two men play football in a park", "a girl in a red dress dances",
      "a man rides a bike down the hill"]),
    # No 4-gram of the outputs is in the references: BLEU is 0 without smoothing.
    (["a woman walks", "people sit on a bench", "the boy jumps high", "a black dog swims"],
     ["a woman is walking", "people sitting on a bench", "the boy is jumping", "a dog swims in the lake"]),
    # Text as a model writes it: capitals ("A" is not "a": BLEU is case-sensitive), a double space
    # and spaces around a sentence (str.split() drops them, str.split(" ") makes empty words), an
    # output of one word (no 2-, 3- or 4-gram) and an empty one.
    (["A man is sleeping on a bench", "children", " a cat on the mat ", "", "A dog runs on  the beach"],
     ["a man is sleeping on the bench", "Children play outside", "a cat sits on the mat",
      "a woman is reading a book", "A dog runs along the beach"]),
    # One output of two words: the corpus holds no 3-gram and no 4-gram, p_3 = p_4 = 0 / 0, and
    # BLEU is 0 (sacrebleu counts a precision without n-grams as 0).
    (["a dog"], ["a dog runs"]),
]


def _bleu_sizes(hypotheses: list[str], references: list[str]) -> dict:
    return dict(sentences=len(hypotheses), hyp_words=sum(len(h.split()) for h in hypotheses),
                ref_words=sum(len(r.split()) for r in references))


SIZE_SETS = {
    "check_self_attention_step": STEP_SIZES,
    "check_cached_greedy_decode": DECODE_SIZES,
    "check_bpe_merge_step": [dict(word_types=len(w), merges=len(m)) for w, m in zip(BPE_CORPORA, _MERGES)],
    "check_bleu": [_bleu_sizes(*corpus) for corpus in BLEU_CORPORA],
}


@contextlib.contextmanager
def _one_thread():
    """Tiny models run faster on one thread, above all on a busy machine (a decoding step is
    many small products, each paying to start the threads); the count is restored after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


# ---------------------------------------------------------------- 9.1 the cache of one attention
# A message about an exception names the arguments of the call: these say what they are in a
# few words, where a module or a dict of tensors would print whole.


class _Attention(MultiHeadAttention):
    def __repr__(self) -> str:
        return f"attn (MultiHeadAttention, d_model={self.d_model}, h={self.h})"


class _Cache(dict):
    def __repr__(self) -> str:
        return f"cache (a dict holding {sorted(map(str, self))})"


class _Model(EncoderDecoder):
    def __repr__(self) -> str:
        layer = self.decoder.layers[0].self_attn
        return f"model (EncoderDecoder, N={len(self.decoder.layers)}, d_model={layer.d_model}, h={layer.h})"


def _attention_module(d_model: int, h: int, seed: int) -> MultiHeadAttention:
    """A seeded MultiHeadAttention in eval mode; the global random state is left as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return _Attention(d_model, h).eval()


def _cache_shape_mistake(tensor: torch.Tensor, name: str, sizes: dict, held: int,
                         dimensions_only: bool = False) -> str | None:
    """What a cache entry of the wrong shape says about how it was built; ``held`` positions
    are expected in it. None when the shape says nothing known. ``dimensions_only``: name an
    append along a wrong dimension only (after an exception, an entry may just not be stored yet)."""
    batch, h, d_k = sizes["batch"], sizes["h"], sizes["d_k"]
    shape = tuple(tensor.shape)
    expected = (batch, h, held, d_k)
    fix = (f"append the new one along the positions, dim=2: torch.cat([cache[{name!r}], k], dim=2), "
           f"so that after {held} steps it is (batch, h, {held}, d_k) = {expected}.")
    wrong_dims = {
        (batch * held, h, 1, d_k): "dim=0, the batch",
        (batch, h * held, 1, d_k): "dim=1, the heads",
        (batch, h, 1, d_k * held): "dim=3 (-1), the width d_k",
    }
    if held > 1 and shape in wrong_dims:
        return (f"after {held} steps cache[{name!r}] has shape {shape}: you appended the new position "
                f"along {wrong_dims[shape]}, so the positions pile up where they do not belong; {fix}")
    if dimensions_only:
        return None
    if held > 1 and shape == (batch, h, 1, d_k):
        return (f"after {held} steps cache[{name!r}] still holds one position, shape {shape}: each step "
                "replaced it instead of appending, so the new query sees itself only. Keep the earlier "
                f"positions and {fix}")
    if shape == (batch, held, h * d_k):
        return (f"cache[{name!r}] has shape {shape}, (batch, t, d_model): keep it split into heads, "
                f"(batch, h, t, d_k) = {expected}, as init_cache keeps the memory's keys: the course's "
                "decoding and beam search read the number of positions from its dimension 2.")
    return None


def _cache_entries(cache: dict, sizes: dict, held: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cache["self_k"] and cache["self_v"], present and of the shape of ``held`` positions."""
    missing = [key for key in ("self_k", "self_v") if key not in cache]
    if missing:
        found = f" (it holds {sorted(map(str, cache))})" if cache else " (it is empty)"
        raise ExerciseFailed(
            f"after the call the cache has no {' and no '.join(repr(m) for m in missing)}{found}: store "
            "the keys and the values of the positions so far in the dict you are given, "
            "cache['self_k'] = k and cache['self_v'] = v, each (batch, h, t, d_k); the next step "
            "reads them back."
        )
    entries = []
    for key in ("self_k", "self_v"):
        value = cache[key]
        if not torch.is_tensor(value):
            raise ExerciseFailed(f"cache[{key!r}] is {type(value).__name__}, not a tensor: store one "
                                 "(batch, h, t, d_k) tensor of the positions so far, not a list of them.")
        expected = (sizes["batch"], sizes["h"], held, sizes["d_k"])
        if tuple(value.shape) != expected:
            mistake = _cache_shape_mistake(value, key, sizes, held)
            raise ExerciseFailed(mistake) if mistake else _generic(
                f"after {held} steps cache[{key!r}] has shape {tuple(value.shape)}; expected "
                f"(batch, h, t, d_k) = {expected}: one key (value) per position so far, in every head."
            )
        entries.append(value)
    return entries[0], entries[1]


_STEP_HINTS = ((r"must match the size|size mismatch|cannot be multiplied|Expected size|do not broadcast",
                "\nHint: the cache holds (batch, h, t, d_k): append the newest key and value along "
                "dim=2, the positions, torch.cat([cache['self_k'], k], dim=2)."),)


def _step_inputs(sizes: dict, settings: dict) -> tuple[MultiHeadAttention, torch.Tensor, torch.Tensor]:
    """The attention module and two sequences (batch, steps, d_model) of one set of sizes."""
    batch, h, d_k, steps = sizes["batch"], sizes["h"], sizes["d_k"], sizes["steps"]
    d_model = h * d_k
    attn = _attention_module(d_model, h, seed=d_model).to(settings["dtype"])
    g = torch.Generator().manual_seed(steps)
    xs = [torch.randn(batch, steps, d_model, generator=g, dtype=torch.float64) for _ in range(2)]
    if settings["scores"] != "normal":
        with torch.no_grad():  # q . k = +-|W_Q x + b|^2: the same sign for every query and key
            sign = -1.0 if settings["scores"] == "far below zero" else 1.0
            attn.W_K.weight.copy_(sign * attn.W_Q.weight)
            attn.W_K.bias.copy_(sign * attn.W_Q.bias)
        offset = 250.0 * torch.randn(d_model, generator=g, dtype=torch.float64)  # shared by every position
        xs = [x + offset for x in xs]
    return attn, xs[0].to(settings["dtype"]), xs[1].to(settings["dtype"])


def _check_sequence_step(fn: Callable, name: str, sizes: dict, settings: dict, attn, x: torch.Tensor,
                         cache: dict, t: int, which: str) -> torch.Tensor:
    """Step t of one sequence: the call, its output and the cache compared with full attention."""
    batch, h, d_k, steps = sizes["batch"], sizes["h"], sizes["d_k"], sizes["steps"]
    d_model, dtype = h * d_k, settings["dtype"]
    with torch.no_grad():
        # What training computes: every position at once, with the look-ahead mask.
        full = attn(x, x, x, subsequent_mask(steps).unsqueeze(0))  # (batch, steps, d_model)
        keys, values = attn.split_heads(attn.W_K(x)), attn.split_heads(attn.W_V(x))  # (batch, h, steps, d_k)
        alone = attn.W_O(attn.merge_heads(values))  # each position attending to itself only
    y = x[:, t : t + 1].clone()  # (batch, 1, d_model): the newest position
    dtype_text = "" if dtype == torch.float32 else f", {dtype}"
    call = f"{name}(attn, y of shape ({batch}, 1, {d_model}){dtype_text}, cache) at step {t + 1}{which}"
    try:
        with torch.no_grad():
            out = _call(fn, attn, y, cache, hints=_STEP_HINTS, roles=("attn", "y", "cache"))
    except ExerciseFailed as err:
        # A cache appended along the wrong dimension usually breaks the attention that
        # follows: the cache, stored before it, says why.
        for key in ("self_k", "self_v"):
            if torch.is_tensor(cache.get(key)):
                mistake = _cache_shape_mistake(cache[key], key, sizes, t + 1, dimensions_only=True)
                if mistake:
                    raise ExerciseFailed(mistake) from None
        if getattr(err, "generic", False) and dtype != torch.float32:
            raise _generic(f"{err}\nNote: this call's attn and y are {dtype}: create every tensor with "
                           "dtype=y.dtype (not .float() or torch.zeros without dtype=).") from None
        raise
    out = _tensor(out, name, "the output", like=y)
    k, v = _cache_entries(cache, sizes, t + 1)
    hint = ""
    if tuple(out.shape) == (batch, h, 1, d_k):
        hint = " Merge the heads and apply W_O: attn.W_O(attn.merge_heads(...)), or use attend."
    elif batch == 1 and out.dim() < 3:
        hint = " The batch here is one sentence: a squeeze() dropped its dimension; keep (batch, 1, d_model)."
    _shape(out, (batch, 1, d_model), call, hint)
    if not _same(k, keys[:, :, : t + 1]):
        if t > 0 and _same(k, keys[:, :, : t + 1].flip(2)):
            raise ExerciseFailed(
                "cache['self_k'] holds the positions newest first: torch.cat([k, cache['self_k']]) "
                "puts the new key in front. Attention does not care about the order, but position "
                "i of the cache must be position i of the sentence (beam search reorders and "
                "trims the cache by it): torch.cat([cache['self_k'], k], dim=2)."
            )
        if _same(k, values[:, :, : t + 1]):
            raise ExerciseFailed("cache['self_k'] holds the values: keys come from attn.W_K, values "
                                 "from attn.W_V; store each under its own name.")
        if _same(k, attn.split_heads(x[:, : t + 1])):
            raise ExerciseFailed("cache['self_k'] holds the inputs y split into heads, without the "
                                 "projection: the keys are attn.split_heads(attn.W_K(y)).")
        _assert_close(k, keys[:, :, : t + 1], f"cache['self_k'] after step {t + 1}{which}")
    if not _same(v, values[:, :, : t + 1]):
        _assert_close(v, values[:, :, : t + 1], f"cache['self_v'] after step {t + 1}{which}")
    expected = full[:, t : t + 1]
    if not _same(out, expected):
        if t > 0 and _same(out, alone[:, t : t + 1]):
            raise ExerciseFailed(
                f"at step {t + 1} your output is the newest position attending to itself only: the "
                "query must attend over every key and value of the cache, the earlier positions "
                "and the new one (no mask needed: nothing later exists yet)."
            )
        if not out.isfinite().all() and settings["scores"] != "normal":
            with torch.no_grad():
                q = attn.split_heads(attn.W_Q(y))
                scores = q @ keys[:, :, : t + 1].transpose(-2, -1) / math.sqrt(d_k)
            if settings["scores"] == "far below zero":
                where = f"far below zero (the largest is {scores.max().item():.0f})"
                fate = "exp() of each underflows to 0, and 0 / 0 is NaN"
            else:
                where = f"very large (up to {scores.max().item():.0f})"
                fate = "exp() overflows to inf, and inf / inf is NaN"
            raise ExerciseFailed(
                f"{call} returned NaN or inf: the scores here are all {where}: {fate}. Legitimate "
                "scores can be that large either way (a large common offset in the "
                "inputs, large weights). Subtract each row's largest score before exp(), always, not only "
                "when a score looks large (the softmax is unchanged by it), or use torch.softmax or attend, "
                "which do."
            )
        _assert_close(out, expected, f"the output at step {t + 1}{which}, compared with "
                      "MultiHeadAttention over the whole prefix with the look-ahead mask")
    if dtype == torch.float64:
        tight = [(out, expected, "the output"), (k, keys[:, :, : t + 1], "cache['self_k']"),
                 (v, values[:, :, : t + 1], "cache['self_v']")]
        for got, reference, what in tight:
            if not _same64(got, reference):
                raise ExerciseFailed(
                    f"{call}: {what} is right only to float32's precision (it differs from the float64 "
                    f"reference by {(got - reference).abs().max().item():.1e}): a step of your function goes "
                    "through float32, a .float(), a softmax(..., dtype=torch.float32), or a tensor created "
                    "without dtype= (torch.zeros(...)). Keep the dtype of y and attn throughout."
                )
    return out


def _check_step_once(fn: Callable, name: str, sizes: dict, settings: dict) -> None:
    """Two sequences decoded side by side, each with its own cache, a step of one then a step
    of the other (as two sentences, or beam search's hypotheses, keep caches of their own): the
    entries of one cache and every output returned must stay as they were while the function
    works on the other."""
    attn, x_first, x_second = _step_inputs(sizes, settings)
    sentences = [(x_first, _Cache(), "", "the first sentence's cache"),
                 (x_second, _Cache(), " of a second sentence", "the second sentence's cache")]
    kept = []  # (a tensor returned or stored, its copy, what it is, whose cache holds it)
    for t in range(sizes["steps"]):
        for x, cache, which, owner in sentences:
            for got, copy, what, _ in kept:
                if got.shape != copy.shape or not torch.equal(got, copy):
                    raise ExerciseFailed(
                        f"{what} changed when {name} was called again, on another cache: it shares its "
                        "memory with a tensor your function reuses from call to call (a buffer created "
                        "once, outside the function, written in place). Each cache must hold tensors of "
                        "its own (two sentences, or the hypotheses of beam search, keep a cache each), and "
                        "each call must return a new tensor: torch.cat returns one."
                    )
            out = _check_sequence_step(fn, name, sizes, settings, attn, x, cache, t, which)
            step = f"step {t + 1}{which}"
            kept = [item for item in kept if item[3] != owner]  # this cache's older entries may go
            kept += [(out, out.clone(), f"the output {name} returned at {step}", None)]
            kept += [(cache[key], cache[key].clone(), f"cache[{key!r}] after {step}", owner)
                     for key in ("self_k", "self_v")]


def _step_hint(passed: list, sizes: dict, message: str) -> str:
    hint = _hard_coded_hint(passed, sizes, message,
                            "Read every size from the inputs: batch from y, h and d_k from attn.")
    settings = _STEP_SETTINGS[STEP_SIZES.index(sizes)]
    notes = []
    if sizes["batch"] == 1:
        notes.append("the batch here is one sentence: a squeeze() drops its dimension")
    if sizes["h"] == 1 or sizes["d_k"] == 1:
        notes.append("a size here is 1 (one head, or heads of width 1): a squeeze() drops its dimension")
    if settings["dtype"] == torch.float64 and "Note: this call's attn and y are" not in message:
        notes.append("attn and y are float64 here: keep every step in their dtype")
    if settings["scores"] != "normal":
        notes.append(f"the scores here are all {settings['scores']} (beyond 10^3 either way): exp() of them "
                     "underflows or overflows unless each row's largest score is subtracted first")
    return hint + "".join(f"\nNote: {note}." for note in notes)


def check_self_attention_step(self_attention_step: Callable) -> None:
    """Check ``self_attention_step(attn, y, cache)``: one decoding step of masked self-attention
    with a key/value cache, on the sizes of ``STEP_SIZES``.

    Feeds a sequence one position at a time and compares every output with
    ``MultiHeadAttention`` over the whole prefix with the look-ahead mask, and the cache with
    the keys and values of the positions so far, (batch, h, t, d_k).

    Runs two sentences side by side, each with its own cache, and besides the notebook's
    sizes a batch of one, float64 (compared to float64 precision), and scores all far below
    zero or all very large (below -10^3, above +10^3).

    Diagnoses: an input changed in place, a result of another dtype or shape, keys or values
    not stored, appended along the batch, the heads or d_k instead of the positions, replaced
    instead of appended, stored newest first, unsplit or unprojected, keys and values swapped,
    a query that attends to itself only, a batch of one squeezed away, a softmax without its
    shift by the row's largest score (or with it only when a score looks large), a step
    through float32, a cache or an output that the next call overwrites (a buffer shared by
    every call), and sizes written into the code.
    """
    name = _function(self_attention_step, "check_self_attention_step", "self_attention_step")
    settings = dict(zip(map(_sizes, STEP_SIZES), _STEP_SETTINGS))
    with _one_thread():
        _run_on_all_sizes(lambda sizes: _check_step_once(self_attention_step, name, sizes,
                                                         settings[_sizes(sizes)]),
                          STEP_SIZES, _step_hint)
    print(
        f"check_self_attention_step passed: step by step, {name} gives what MultiHeadAttention gives "
        "over the whole prefix with the look-ahead mask, and its cache holds the keys and values of "
        f"the positions so far, (batch, h, t, d_k), for {len(STEP_SIZES)} sets of sizes (a batch of one, "
        "float64, scores far below zero and very large among them), two sentences side by side, each "
        "with its own cache."
    )


# ---------------------------------------------------------------- 9.2 greedy decoding with the cache


def _decoding_model(sizes: dict, settings: dict) -> nn.Module:
    """A small random model in eval mode whose output depends on the source and the step: an
    untrained tied generator predicts nearly the same token everywhere, so it gets weights of
    its own; it never predicts <s> or <pad>."""
    d_model = sizes["h"] * sizes["d_k"]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(settings["seed"])
        config = TransformerConfig(sizes["vocab"], sizes["vocab"], N=sizes["N"], d_model=d_model,
                                   d_ff=2 * d_model, h=sizes["h"], dropout=0.0,
                                   norm_first=settings["norm_first"])
        model = make_model(config)
        model.generator.proj.weight = nn.Parameter(torch.randn(sizes["vocab"], d_model))
        with torch.no_grad():
            model.generator.proj.bias[[settings["bos"], settings["pad"]]] = -1e4
    model.__class__ = _Model  # a short repr, nothing else
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
    """Greedy decoding with the cache, as the exercise asks, or with one mistake switched on:
    ``feed="prefix"`` runs the whole prefix through the cached layers; ``start`` "0" or "t"
    puts the newest token at position 0 or one too far; ``final_norm=False`` skips the
    decoder's final norm; ``mask_source=False`` attends to the source padding; and the
    stopping rule can forget the padding, never stop, stop at the first finished sentence, or
    forget which sentences finished."""
    memory = model.encode(src, src_mask)
    cache = init_cache(model, memory)
    embed, position = model.tgt_embed
    ys = torch.full((src.size(0), 1), bos, dtype=torch.long)
    done = torch.zeros(src.size(0), dtype=torch.bool)
    for _ in range(max_len - 1):
        t = ys.size(1)
        tokens = ys if feed == "prefix" else ys[:, -1:]
        first = {"t-1": t - tokens.size(1), "0": 0, "t": t}[start]
        x = position(embed(tokens), start=first)
        for layer, layer_cache in zip(model.decoder.layers, cache):
            x = decoder_layer_step(layer, x, src_mask if mask_source else None, layer_cache)
        if final_norm:
            x = model.decoder.norm(x)
        next_token = model.generator(x[:, -1]).argmax(dim=-1)  # (batch,)
        if pad_after_eos:
            next_token = next_token.masked_fill(done, pad)
        ys = torch.cat([ys, next_token.unsqueeze(1)], dim=1)
        if eos is not None:
            done = (done | (next_token == eos)) if remember_done else next_token == eos
        if (stop == "all" and done.all()) or (stop == "any" and done.any()):
            break
    return ys


def _choose_eos(unstopped: torch.Tensor, bos: int, pad: int, vocab: int) -> int:
    """An end token that every sentence produces, at different steps, before the length
    limit; among those, the one whose ends are spread most."""
    best, best_spread = None, 0
    for token in range(vocab):
        if token in (bos, pad):
            continue
        ends = []
        for row in unstopped:
            hits = (row[1:-1] == token).nonzero()
            ends.append(int(hits[0]) + 1 if len(hits) else None)
        if None in ends:
            continue
        spread = len(set(ends))
        if spread > best_spread:
            best, best_spread = token, spread
    if best is None or best_spread < 2:
        raise RuntimeError("the check's model never ends its sentences at different steps: pick another seed")
    return best


_DECODE_ROLES = ("model", "src", "src_mask", "max_len", "bos_idx", "eos_idx", "pad_idx")


def _token_ids(result, name: str, batch: int, max_len: int) -> torch.Tensor:
    """The learner's output, checked to be a (batch, <= max_len) int64 tensor on the cpu."""
    if result is None:
        raise ExerciseFailed(f"{name} returned None: did you forget to return ys?")
    if not torch.is_tensor(result):
        raise ExerciseFailed(f"{name} should return the token ids as a tensor, got {type(result).__name__}")
    if result.device != torch.device("cpu"):
        raise ExerciseFailed(f"{name} returned the ids on {result.device}; the inputs are on the cpu: create "
                             "ys where src is (device=src.device), with no .cuda() or .to(...).")
    if result.dtype != torch.long:
        raise ExerciseFailed(
            f"{name} returned the ids as {result.dtype}; token ids are int64 (torch.long), what an "
            "embedding looks up and what argmax gives: create ys with torch.full(..., dtype=torch.long)."
        )
    if result.dim() != 2 or result.size(0) != batch:
        raise _generic(f"{name} returned ids of shape {tuple(result.shape)}; expected (batch, <= max_len) "
                       f"with batch = {batch}: one row per sentence.")
    if result.size(1) > max_len:
        raise ExerciseFailed(
            f"{name} returned {result.size(1)} columns with max_len = {max_len}: max_len counts every "
            "token of the output, <s> included, so decode at most max_len - 1 new tokens."
        )
    return result


def _first_difference(got: torch.Tensor, expected: torch.Tensor) -> str:
    for row, (g, e) in enumerate(zip(got.tolist(), expected.tolist())):
        if g != e:
            return f"sentence {row}: expected {e}, got {g}"
    return f"shapes: expected {tuple(expected.shape)}, got {tuple(got.shape)}"


def _check_decode_once(fn: Callable, name: str, sizes: dict, settings: dict) -> None:
    batch, max_len, vocab = sizes["batch"], sizes["max_len"], sizes["vocab"]
    bos, pad = settings["bos"], settings["pad"]
    model = _decoding_model(sizes, settings)
    src, src_mask = _decoding_source(sizes, seed=vocab + 1)
    unstopped = greedy_decode(model, src, src_mask, max_len, bos, None, pad_idx=pad)  # (batch, max_len)
    eos = _choose_eos(unstopped, bos, pad, vocab)
    expected = greedy_decode(model, src, src_mask, max_len, bos, eos, use_cache=True, pad_idx=pad)
    without_cache = greedy_decode(model, src, src_mask, max_len, bos, eos, use_cache=False, pad_idx=pad)
    mine = _decode(model, src, src_mask, max_len, bos, eos, pad)
    if not (torch.equal(expected, without_cache) and torch.equal(expected, mine)):
        raise RuntimeError("the check's references disagree: greedy_decode with and without the cache")

    # The decoder's self-attention sees how many positions at once: 1 with the cache.
    seen: list[int] = []
    hooks = [layer.self_attn.W_Q.register_forward_pre_hook(lambda _, inputs: seen.append(inputs[0].size(1)))
             for layer in model.decoder.layers]
    try:
        with torch.no_grad():
            result = _call(fn, model, src, src_mask, max_len, bos, eos, pad, roles=_DECODE_ROLES)
    finally:
        for hook in hooks:
            hook.remove()
    got = _token_ids(result, name, batch, max_len)
    call = (f"{name}(model, src of shape ({batch}, {sizes['L_src']}), src_mask, max_len={max_len}, "
            f"bos_idx={bos}, eos_idx={eos}, pad_idx={pad})")
    right = torch.equal(got, expected)
    if max(seen, default=1) > 1:
        prefix = _decode(model, src, src_mask, max_len, bos, eos, pad, feed="prefix")
        if right:
            raise ExerciseFailed(
                f"the output is right, but without the cache: the decoder's self-attention ran on up to "
                f"{max(seen)} positions at once, the whole prefix, as model.decode does. With the cache "
                "every step runs the newest token only, through decoder_layer_step, which appends its "
                "keys and values to the cache; that is the saving the exercise is about."
            )
        if torch.equal(got, prefix):
            raise ExerciseFailed(
                "you fed the whole prefix ys through the cached layers at every step: the cache already "
                "holds the keys and values of the earlier positions, so they enter it again at each "
                "step (and the new queries see each other unmasked). Run the newest token only, "
                "ys[:, -1:], at its position ys.size(1) - 1."
            )
        raise _generic(
            f"the decoder's self-attention ran on up to {max(seen)} positions at once, and the output "
            f"differs from greedy_decode's ({_first_difference(got, expected)}). With the cache each "
            "step runs the newest token only, ys[:, -1:], through decoder_layer_step."
        )
    if right:
        return
    if not (got[:, 0] == bos).all():
        if got.size(1) < expected.size(1) and torch.equal(got, expected[:, 1 : got.size(1) + 1]):
            raise ExerciseFailed(
                f"your outputs lack the <s> they start from: every row of the output begins with "
                f"bos_idx = {bos}, as greedy_decode's and the training targets' do; keep it in ys."
            )
        raise ExerciseFailed(
            f"the first token of every output must be <s>, bos_idx = {bos}; yours are "
            f"{got[:, 0].tolist()}. Start from ys = torch.full((batch, 1), bos_idx, dtype=torch.long)."
        )
    variant = lambda **mistake: _decode(model, src, src_mask, max_len, bos, eos, pad, **mistake)  # noqa: E731
    mistakes = [
        (dict(start="0"), "every token went in at position 0: the positional encoding must say where the "
                          "newest token stands, position(embed(ys[:, -1:]), start=ys.size(1) - 1)."),
        (dict(start="t"), "the newest token went in one position too far: ys holds t tokens, at positions "
                          "0 .. t - 1, so the newest is at start=ys.size(1) - 1, not ys.size(1)."),
        (dict(final_norm=False), "the decoder's final norm is missing: a pre-norm decoder ends with a "
                                 "LayerNorm (model.decoder.norm; nn.Identity in a post-norm one) before "
                                 "the generator."),
        (dict(mask_source=False), "the cross-attention looked at the source's padding: pass src_mask to "
                                  "decoder_layer_step, so that no query attends to a <pad> of the source."),
        (dict(pad_after_eos=False), f"a sentence that has produced </s> went on producing tokens while the "
                                    f"others finished: after its </s> a sentence gets pad_idx = {pad} only "
                                    "(next_token.masked_fill(done, pad_idx))."),
        (dict(stop="never"), "your decoding does not stop when every sentence has produced </s>: it runs "
                             "to max_len. Stop as soon as all are done (if done.all(): break), as the "
                             "course's greedy_decode does, so a batch costs no more steps than it needs."),
        (dict(stop="never", pad_after_eos=False), "your decoding does not stop at </s>: it runs every "
                                                  "sentence to max_len. After its </s> a sentence gets "
                                                  "pad_idx only, and decoding stops when all are done."),
        (dict(stop="any"), "your decoding stopped as soon as one sentence produced </s>: the others are cut "
                           "short. Stop when every sentence is done, done.all(), not done.any()."),
        (dict(remember_done=False), "a sentence that produced </s> started again a step later: `done` must "
                                    "remember every sentence that has finished, done = done | (next_token "
                                    "== eos_idx), not only those that finish at this step."),
    ]
    for mistake, message in mistakes:
        if torch.equal(got, variant(**mistake)):
            raise ExerciseFailed(message)
    raise _generic(f"{call} differs from the course's greedy_decode: {_first_difference(got, expected)}.")


def _check_decode_edges(fn: Callable, name: str, sizes: dict, settings: dict) -> None:
    """The calls the signature allows beyond a batch of sentences, on the model of one set of
    sizes, once every set has passed: one sentence (a squeeze() would drop its batch
    dimension), int32 ids (the output stays int64), and max_len = 1 (<s> alone, no step) and
    2 (one step)."""
    bos, pad, max_len = settings["bos"], settings["pad"], sizes["max_len"]
    model = _decoding_model(sizes, settings)
    src, src_mask = _decoding_source(sizes, seed=sizes["vocab"] + 1)
    eos = _choose_eos(greedy_decode(model, src, src_mask, max_len, bos, None, pad_idx=pad), bos, pad, sizes["vocab"])
    calls = [
        (src[-1:], src_mask[-1:], max_len, "a batch of one sentence",
         " Read the batch size from src, src.size(0); and a squeeze() drops the batch dimension of one "
         "sentence: index instead, x[:, -1] and next_token.unsqueeze(1)."),
        (src.int(), src_mask, max_len, "int32 source ids",
         " The output is int64 whatever the dtype of src: create ys with dtype=torch.long, not src's dtype."),
        (src, src_mask, 1, "max_len = 1",
         " max_len counts <s>: with max_len = 1 the output is <s> alone, (batch, 1), after no step at all."),
        (src, src_mask, 2, "max_len = 2", " max_len = 2 allows exactly one step after <s>."),
    ]
    for source, mask, length, what, hint in calls:
        with torch.no_grad():
            expected = greedy_decode(model, source.long(), mask, length, bos, eos, use_cache=True, pad_idx=pad)
        call = (f"{name}(model, src of shape {tuple(source.shape)} ({source.dtype}), src_mask, max_len={length}, "
                f"bos_idx={bos}, eos_idx={eos}, pad_idx={pad}), {what}")
        try:
            with torch.no_grad():
                result = _call(fn, model, source, mask, length, bos, eos, pad, roles=_DECODE_ROLES)
            got = _token_ids(result, name, source.size(0), length)
        except ExerciseFailed as err:
            raise ExerciseFailed(f"{err}\nThis call: {call}.{hint}") from None
        if not torch.equal(got, expected):
            raise ExerciseFailed(f"{call} differs from the course's greedy_decode: "
                                 f"{_first_difference(got, expected)}.{hint}")


def _decode_hint(passed: list, sizes: dict, message: str) -> str:
    return _hard_coded_hint(passed, sizes, message,
                            "Read the batch size from src (src.size(0)) and use the ids you are given.")


def check_cached_greedy_decode(cached_greedy_decode: Callable) -> None:
    """Check ``cached_greedy_decode(model, src, src_mask, max_len, bos_idx, eos_idx, pad_idx)``
    against the course's ``greedy_decode``, with and without its cache, on two small random
    models (``DECODE_SIZES``: post-norm, then pre-norm) whose sentences end at different steps.

    Then the first model also decodes one sentence alone, int32 source ids, and max_len = 1
    and 2.
    Ties of the argmax are not tried: the course's greedy decoding takes argmax's first index,
    its beam search topk's, and neither is wrong.

    Diagnoses: an input changed in place, ids of another dtype or device, too many columns,
    the decoder run on the whole prefix (right output without the cache, or the prefix fed
    through the cache), <s> missing or not first, the newest token at position 0 or one too
    far, the final norm skipped, the source padding not masked, no padding after </s>, no
    stop at </s>, a stop at the first finished sentence, a `done` that forgets, a batch of
    one sentence squeezed away, ids in the dtype of int32 sources, a step taken with
    max_len = 1, and sizes or special ids written into the code.
    """
    name = _function(cached_greedy_decode, "check_cached_greedy_decode", "cached_greedy_decode")
    settings = dict(zip(map(_sizes, DECODE_SIZES), _DECODE_SETTINGS))
    with _one_thread():
        _run_on_all_sizes(lambda sizes: _check_decode_once(cached_greedy_decode, name, sizes,
                                                           settings[_sizes(sizes)]),
                          DECODE_SIZES, _decode_hint)
        _check_decode_edges(cached_greedy_decode, name, DECODE_SIZES[0], _DECODE_SETTINGS[0])
    print(
        f"check_cached_greedy_decode passed: {name} gives greedy_decode's tokens, with and without its "
        "cache, on a post-norm and a pre-norm random model, running one new position per step, "
        "stopping when every sentence has produced </s> and padding after it; also for one sentence "
        "alone, int32 source ids, and max_len = 1 and 2."
    )


# ---------------------------------------------------------------- 9.3 one byte-pair merge


def _pair_counts(corpus: dict, weighted: bool = True, once_per_word: bool = False) -> Counter:
    """Neighbouring pairs, each word weighted by its count (or counted once); with
    ``once_per_word`` a pair a word holds twice ("a a a h" holds ("a", "a") twice) counts once."""
    pairs = Counter()
    for symbols, n in corpus.items():
        found = list(zip(symbols, symbols[1:]))
        for pair in (dict.fromkeys(found) if once_per_word else found):
            pairs[pair] += n if weighted else 1
    return pairs


def _best(pairs: Counter) -> tuple[str, str]:
    return max(pairs, key=lambda pair: (pairs[pair], pair))  # ties: the larger pair, as subword-nmt


def _merge_without_skip(symbols: tuple, pair: tuple) -> tuple:
    """Every occurrence joined, overlapping ones too ("a a a" -> "aa aa"): the i += 2 forgotten."""
    out = []
    for i, symbol in enumerate(symbols):
        if i + 1 < len(symbols) and (symbol, symbols[i + 1]) == pair:
            out.append(symbol + symbols[i + 1])
        elif not (i > 0 and (symbols[i - 1], symbol) == pair):
            out.append(symbol)
    return tuple(out)


def _merge_from_the_right(symbols: tuple, pair: tuple) -> tuple:
    """The pair joined scanning from the right ("a a a" -> "a aa")."""
    out, i = [], len(symbols) - 1
    while i >= 0:
        if i > 0 and (symbols[i - 1], symbols[i]) == pair:
            out.append(symbols[i - 1] + symbols[i])
            i -= 2
        else:
            out.append(symbols[i])
            i -= 1
    return tuple(reversed(out))


def _merge_first_only(symbols: tuple, pair: tuple) -> tuple:
    """The first occurrence joined, the later ones left ("h a h a h" -> "ha h a h")."""
    for i in range(len(symbols) - 1):
        if (symbols[i], symbols[i + 1]) == pair:
            return symbols[:i] + (symbols[i] + symbols[i + 1],) + symbols[i + 2 :]
    return symbols


def _merge_as_text(symbols: tuple, pair: tuple) -> tuple:
    """str.replace on the symbols joined by spaces: blind to where a symbol begins and ends."""
    return tuple(" ".join(symbols).replace(" ".join(pair), "".join(pair)).split(" "))


def _subword_nmt_merges(word_counts: dict) -> list[tuple[str, str]]:
    from subword_nmt.learn_bpe import learn_bpe as reference_learn_bpe

    codes = io.StringIO()
    lines = io.StringIO("".join(f"{word} {n}\n" for word, n in word_counts.items()))
    with contextlib.redirect_stderr(io.StringIO()):  # its progress bar
        reference_learn_bpe(lines, codes, 10_000, min_frequency=2, is_dict=True)
    return [tuple(line.split(" ")) for line in codes.getvalue().splitlines()[1:]]  # after "#version: 0.2"


def _show(symbols) -> str:
    return " ".join(symbols) if isinstance(symbols, tuple) else repr(symbols)


def _check_pair(pair, corpus: dict, step: int) -> None:
    pairs = _pair_counts(corpus)
    best = _best(pairs)
    if pair == best:
        return
    where = f"at merge {step}"
    if pair[0].endswith(END):
        raise ExerciseFailed(
            f"{where} your pair {pair} joins the end of one word ({pair[0]!r} ends in {END}) to the start of "
            "another: pairs are counted inside each word only, zip(symbols, symbols[1:]) for each word of "
            "the corpus, never across the words. (Merges never cross a word: a piece is part of one word.)"
        )
    if pair not in pairs:
        raise _generic(f"{where} your pair {pair} is not a pair of neighbouring symbols of any word; "
                       f"the most frequent pair is {best}, {pairs[best]} times.")
    if pairs[pair] == pairs[best]:
        tied = [p for p in pairs if pairs[p] == pairs[best]]
        why = []
        if pair == max(pairs, key=pairs.__getitem__):  # max keeps the first of equal counts
            why.append("the first one counted (what max(pairs, key=pairs.get) and Counter.most_common give)")
        if pair == min(tied):
            why.append("the smallest as Python compares tuples of strings")
        raise ExerciseFailed(
            f"{where} {', '.join(map(str, tied))} all occur {pairs[best]} times, and you took {pair}"
            f"{', ' + ' and '.join(why) if why else ''}. The course and subword-nmt break a tie by taking "
            f"the largest pair as Python compares tuples of strings, here {best}: "
            "max(pairs, key=lambda pair: (pairs[pair], pair))."
        )
    if pair == _best(_pair_counts(corpus, weighted=False)):
        raise ExerciseFailed(
            f"{where} you counted each word once: {pair} is in the most words, but {best} occurs "
            f"{pairs[best]} times in the text against {pairs[pair]}. Weight every pair by the count of its "
            "word: pairs[pair] += count."
        )
    if pair == _best(_pair_counts(corpus, once_per_word=True)):
        raise ExerciseFailed(
            f"{where} you counted a pair once per word, however often the word holds it (a set of its "
            "pairs?); 'a a a h' holds ('a', 'a') twice, and the course and subword-nmt count both, "
            f"so {best} occurs {pairs[best]} times and {pair} {pairs[pair]}. Count every item of "
            "zip(symbols, symbols[1:])."
        )
    raise _generic(f"{where} your pair {pair} occurs {pairs[pair]} times, but {best} occurs {pairs[best]} "
                   "times: merge the most frequent pair, each word weighted by its count.")


def _check_corpus(merged, corpus: dict, pair: tuple, step: int) -> None:
    expected = {merge(symbols, pair): n for symbols, n in corpus.items()}
    if not isinstance(merged, dict):
        raise ExerciseFailed(f"the second item your function returns is {type(merged).__name__}; return "
                             "the merged corpus as a dict, symbols (a tuple) -> count, like its input.")
    if merged == expected:
        return
    where = f"at merge {step} ({' + '.join(pair)})"
    bad_keys = [key for key in merged if not isinstance(key, tuple)]
    if bad_keys:
        raise ExerciseFailed(f"{where} the merged corpus has the key {bad_keys[0]!r}; keep each word as a "
                             "tuple of its symbols, ('n', 'e', 'w', 'e', 'st</w>'), as in the input.")
    if len(merged) < len(expected) and all(expected.get(k) == n for k, n in merged.items()):
        left_out = next(_show(k) for k in expected if k not in merged)
        raise ExerciseFailed(f"{where} words are missing from the merged corpus (such as {left_out!r}): "
                             "return every word, merged or unchanged.")
    if set(merged) == set(expected):
        word = next(k for k in expected if merged[k] != expected[k])
        raise ExerciseFailed(f"{where} the word {_show(word)!r} has the count {merged[word]} instead of "
                             f"{expected[word]}: a merge changes how a word is spelled, never how often "
                             "it occurs.")
    mistakes = [
        (_merge_without_skip, "you joined overlapping occurrences twice: in 'a a a' the pair ('a', 'a') "
                              "occurs at positions 0 and 1, but once the first two are joined the second "
                              "a belongs to 'aa'. Scan left to right and skip both symbols of a merged "
                              "pair (i += 2), giving 'aa a'."),
        (_merge_from_the_right, "you merged from the right: 'a a a' must become 'aa a', the leftmost "
                                "occurrence first, as the course's merge and subword-nmt do."),
        (_merge_first_only, "you joined only the first occurrence of the pair in each word (a loop that "
                            "stops at the first match, or str.replace(..., 1)): a merge joins every "
                            "occurrence, scanning the whole word left to right (skipping the two symbols "
                            "of each pair it joins)."),
        (_merge_as_text, "you replaced the pair in the text of the word, with the symbols joined by spaces: "
                         "str.replace does not see where a symbol ends, so the text of the pair also "
                         "matches the start of a longer symbol. Compare whole symbols: (symbols[i], "
                         "symbols[i + 1]) == pair."),
    ]
    for wrong_merge, message in mistakes:
        if merged == {wrong_merge(symbols, pair): n for symbols, n in corpus.items()}:
            word = next(k for k in corpus if wrong_merge(k, pair) != merge(k, pair))
            wrong = _show(wrong_merge(word, pair))
            raise ExerciseFailed(f"{where} {message} Here {_show(word)!r} became {wrong!r} instead of "
                                 f"{_show(merge(word, pair))!r}.")
    word = next((k for k in corpus if merge(k, pair) not in merged), None)
    detail = (f"the word {_show(word)!r} should become {_show(merge(word, pair))!r}" if word is not None
              else "it holds words that the corpus did not")
    raise _generic(f"{where} your merged corpus differs from the course's merge: {detail}.")


def _check_bpe_once(fn: Callable, name: str, word_counts: dict, merges: list) -> None:
    corpus = {spell(word): n for word, n in word_counts.items()}
    returned = None  # the dict returned at the merge before, and a copy of it
    for step, best in enumerate(merges, start=1):
        given = dict(corpus)
        result = _call(fn, given, roles=("corpus",))
        if given != corpus:
            raise ExerciseFailed(f"{name} changed the corpus it was given (at merge {step}): build a new "
                                 "dict and return it; the caller keeps using its own.")
        if returned is not None and returned[0] != returned[1]:
            raise ExerciseFailed(
                f"the merged corpus {name} returned at merge {step - 1} changed when it was called again, "
                f"at merge {step}: your function returns the same dict every time (one created outside it, "
                "emptied and refilled), so each call overwrites the result of the one before; learning "
                "passes that result back in as the next corpus. Build a new dict in every call."
            )
        if not isinstance(result, tuple) or len(result) != 2:
            got = (f"a {type(result).__name__} of {len(result)} items" if isinstance(result, (tuple, list))
                   else type(result).__name__)
            raise ExerciseFailed(f"{name} should return a pair (the merged pair, the merged corpus), "
                                 f"got {got}")
        pair, merged = result
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2 and all(isinstance(s, str) for s in pair)):
            hint = " (the two symbols apart, not joined)" if isinstance(pair, str) else ""
            raise ExerciseFailed(f"the pair {name} returns should be a tuple of two symbols, such as "
                                 f"('s', 't</w>'){hint}; got {pair!r}")
        pair = tuple(pair)
        _check_pair(pair, corpus, step)
        _check_corpus(merged, corpus, pair, step)
        returned, corpus = (merged, dict(merged)), dict(merged)


def _bpe_hint(passed: list, sizes: dict, message: str) -> str:
    return _hard_coded_hint(passed, sizes, message,
                            "Count the pairs of the corpus you are given, all its words.")


def check_bpe_merge_step(bpe_merge_step: Callable) -> None:
    """Check ``bpe_merge_step(corpus) -> (pair, merged corpus)``: learning byte-pair merges
    by calling it until no pair occurs twice, on the toy corpora of ``BPE_CORPORA``, must give
    the merges of ``annotated.bpe.learn_bpe`` and of ``subword-nmt``'s ``learn_bpe``.

    Diagnoses: the corpus changed in place, a result of another kind, a pair across two
    words, word counts ignored, ties broken another way (the first seen, the smaller pair),
    overlapping pairs counted once, words or counts lost in the merged corpus, overlapping
    pairs joined twice, merging from the right, only the first occurrence in a word joined,
    str.replace on the spelled word, the same dict returned (and overwritten) at every call,
    and code that only works on one corpus.
    """
    name = _function(bpe_merge_step, "check_bpe_merge_step", "bpe_merge_step")
    for words, merges in zip(BPE_CORPORA, _MERGES):
        if _subword_nmt_merges(words) != merges:
            raise RuntimeError(f"annotated.bpe.learn_bpe and subword-nmt disagree on {words}")
    sets = SIZE_SETS["check_bpe_merge_step"]
    by_sizes = {_sizes(s): (w, m) for s, w, m in zip(sets, BPE_CORPORA, _MERGES)}
    _run_on_all_sizes(lambda sizes: _check_bpe_once(bpe_merge_step, name, *by_sizes[_sizes(sizes)]),
                      sets, _bpe_hint)
    print(
        f"check_bpe_merge_step passed: step by step, {name} learns the merges of annotated.bpe.learn_bpe "
        f"and of subword-nmt's learn_bpe, {' + '.join(str(len(m)) for m in _MERGES)} merges on "
        f"{len(BPE_CORPORA)} toy corpora (a tie, a one-letter word, runs like 'a a a', a pair twice in "
        "'h a h a h'), with the corpus after each merge."
    )


# ---------------------------------------------------------------- 9.4 BLEU


def _ngrams(words: list[str], n: int) -> Counter:
    return Counter(tuple(words[i : i + n]) for i in range(len(words) - n + 1))


def _bleu(hypotheses: list[str], references: list[str], *, clip: bool = True, max_n: int = 4,
          mean: str = "geometric", bp: str = "paper", percent: bool = True, denominator: str = "output",
          level: str = "corpus", words: str = "split", short: str = "counted") -> float:
    """Corpus BLEU as the paper reports it, or with one mistake switched on: ``words`` "space"
    splits with str.split(" "), "lower" lowercases first; ``short`` "skipped" leaves out the
    outputs shorter than max_n words, "formula" counts len - n + 1 n-grams (below 0 for them)."""
    if level == "sentence":  # the mean of the sentences' own BLEU
        scores = [_bleu([h], [r], clip=clip, max_n=max_n, mean=mean, bp=bp, percent=percent)
                  for h, r in zip(hypotheses, references)]
        return sum(scores) / len(scores)
    split = {"split": str.split, "space": lambda text: text.split(" "),
             "lower": lambda text: text.lower().split()}[words]
    hyps, refs = [split(h) for h in hypotheses], [split(r) for r in references]
    if short == "skipped":
        kept = [(h, r) for h, r in zip(hyps, refs) if len(h) >= max_n]
        hyps, refs = [h for h, _ in kept], [r for _, r in kept]
    matches, totals = [0] * max_n, [0] * max_n
    precisions_per_sentence = [[0.0] * max_n for _ in hyps]
    for s, (hyp, ref) in enumerate(zip(hyps, refs)):
        for n in range(1, max_n + 1):
            h, r = _ngrams(hyp, n), _ngrams(ref, n)
            matched = sum(min(k, r[g]) if clip else (k if g in r else 0) for g, k in h.items())
            total = sum((h if denominator == "output" else r).values())
            if short == "formula":
                total = len(hyp) - n + 1
            elif short == "truncated" and len(hyp) < n:  # the whole output taken as one n-gram
                total, matched = 1, 0
            matches[n - 1] += matched
            totals[n - 1] += total
            precisions_per_sentence[s][n - 1] = matched / total if total else 0.0
    if level == "macro":  # the sentences' precisions averaged, instead of their counts summed
        p = [sum(row[n] for row in precisions_per_sentence) / len(hyps) for n in range(max_n)]
    else:
        p = [m / t if t else 0.0 for m, t in zip(matches, totals)]
    c, r = sum(map(len, hyps)), sum(map(len, refs))
    if c == 0 or r == 0:  # only empty outputs (or references): nothing matches
        return 0.0
    penalty = {"paper": math.exp(1 - r / c) if c < r else 1.0,
               "inverted": math.exp(1 - c / r) if c < r else 1.0,  # above 1 for short outputs
               "inverted min": min(1.0, math.exp(1 - c / r)),  # 1 for short outputs, below 1 for long
               "no min": math.exp(1 - r / c), "none": 1.0}[bp]
    if mean == "arithmetic":
        score = penalty * sum(p) / max_n
    else:
        score = 0.0 if min(p) <= 0 else penalty * math.exp(sum(map(math.log, p)) / max_n)
    return 100 * score if percent else score


def _number(result, name: str) -> float:
    if torch.is_tensor(result) and result.numel() == 1:
        result = result.item()
    if hasattr(result, "score") and not isinstance(result, (int, float)):
        raise ExerciseFailed(f"{name} returned a {type(result).__name__}; return the score itself, a number "
                             "(sacrebleu's result holds it in .score; here, compute it yourself).")
    numeric = isinstance(result, (int, float)) or type(result).__module__ == "numpy"
    if isinstance(result, bool) or not numeric:
        raise ExerciseFailed(f"{name} should return BLEU as a number (a float), got {type(result).__name__}")
    value = float(result)
    if math.isnan(value):
        raise ExerciseFailed(f"{name} returned NaN: is a log taken of 0, or a 0/0 computed? With no match "
                             "of some order, BLEU is 0.")
    return value


@contextlib.contextmanager
def _sacrebleu_switched_off():
    """While the learner's function runs, every way sacrebleu scores (``corpus_score``,
    ``sentence_score``, ``compute_bleu`` from counts, and through them the course's ``corpus_bleu``)
    raises instead: the exercise is to compute BLEU, not to call a library that does. Yields the
    list of the methods that were called."""
    from sacrebleu.metrics.base import Metric
    from sacrebleu.metrics.bleu import BLEU as SacreBLEU

    called = []

    def refuse(method):
        def refused(*args, **kwargs):
            called.append(method)
            raise RuntimeError(f"sacrebleu's {method} is switched off during this check")
        return refused

    saved = [(Metric, "corpus_score"), (SacreBLEU, "sentence_score"), (SacreBLEU, "compute_bleu"),
             (SacreBLEU, "_compute_score_from_stats")]
    originals = [(owner, attr, owner.__dict__[attr]) for owner, attr in saved]
    try:
        for owner, attr, original in originals:
            replacement = refuse(attr)
            setattr(owner, attr, staticmethod(replacement) if isinstance(original, staticmethod) else replacement)
        yield called
    finally:
        for owner, attr, original in originals:
            setattr(owner, attr, original)


def _check_bleu_once(fn: Callable, name: str, hypotheses: list[str], references: list[str]) -> None:
    expected = BLEU(tokenize="none", smooth_method="none").corpus_score(hypotheses, [references]).score
    if not math.isclose(expected, _bleu(hypotheses, references), rel_tol=1e-9, abs_tol=1e-9):
        raise RuntimeError("the check's own BLEU disagrees with sacrebleu's")
    # The course's corpus_bleu: sacrebleu with its 13a tokenizer (the same words here) and its
    # default smoothing, which changes the score only where some p_n is 0; case-sensitive.
    smoothed = corpus_bleu(hypotheses, references, lowercase=False).score
    if expected > 0 and not math.isclose(smoothed, expected, rel_tol=1e-9):
        raise RuntimeError("the course's corpus_bleu disagrees with sacrebleu's unsmoothed BLEU")
    hints = ((r"math domain error", "\nHint: a precision p_n is 0 here, and log(0) is undefined: BLEU "
                                    "is then 0 (no smoothing), return 0.0 before taking the logs."),
             (r"division by zero", "\nHint: the outputs here are shorter than 4 words (or empty), so the "
                                   "corpus holds no n-gram of some order: p_n = 0 / 0. sacrebleu counts such "
                                   "a precision as 0, and BLEU is then 0: test the matches (or the n-gram "
                                   "totals) before you divide, and return 0.0."))
    try:
        with _sacrebleu_switched_off() as called:
            result = _call(fn, list(hypotheses), list(references), hints=hints, roles=("hypotheses", "references"))
        value = _number(result, name)
    except ExerciseFailed as err:
        if called:
            raise ExerciseFailed(
                f"{name} calls sacrebleu ({called[0]}), directly or through the course's corpus_bleu; the "
                "exercise is to compute BLEU yourself: count each output's n-grams (n = 1 to 4), clip each "
                "count by the reference's, sum matches and totals over the corpus, take the geometric mean "
                "of the four precisions and multiply by the brevity penalty. (The check switches sacrebleu "
                "off while your function runs.)") from None
        if expected == 0 and ("math domain error" in str(err) or "division by zero" in str(err)):
            raise ExerciseFailed(str(err)) from None  # named by its hint: not a size written in
        raise
    if math.isclose(value, expected, rel_tol=1e-6, abs_tol=1e-6):
        return
    if expected == 0 and math.isclose(value, smoothed, rel_tol=1e-6):
        return  # sacrebleu's smoothing, as the course's corpus_bleu applies it: accepted too
    c, r = _bleu_sizes(hypotheses, references)["hyp_words"], _bleu_sizes(hypotheses, references)["ref_words"]
    mistakes = [
        (dict(percent=False), "your score is a fraction; BLEU is reported in percent, times 100 (the "
                              "paper's 27.3, not 0.273), as sacrebleu reports it."),
        (dict(bp="inverted"), f"the brevity penalty is inverted: here the outputs have c = {c} words and the "
                              f"references r = {r}, and BP = exp(1 - r/c) = {math.exp(1 - r / c):.3f}, not "
                              f"exp(1 - c/r) = {math.exp(1 - c / r):.3f}; the penalty must shrink the score "
                              "more as the output gets shorter."),
        (dict(bp="no min"), f"the brevity penalty rewards long outputs: with c = {c} > r = {r}, "
                            f"exp(1 - r/c) = {math.exp(1 - r / c):.3f} is above 1. BP = min(1, "
                            "exp(1 - r/c)): a long output is not rewarded, its precisions already suffer."),
        (dict(bp="none"), f"the brevity penalty is missing, or inverted and capped at 1: here c = {c} < r = "
                          f"{r}, so BP = exp(1 - r/c) = {math.exp(1 - r / c):.3f} multiplies the geometric "
                          f"mean (exp(1 - c/r) = {math.exp(1 - c / r):.3f} is above 1, and min(1, ...) "
                          "makes it 1)."),
        (dict(clip=False), "the n-gram matches are not clipped: an n-gram of the output counts at most as "
                           "many times as it occurs in the reference, min(count in output, count in "
                           "reference): against a reference holding 'the cat' once, the output 'the cat the "
                           "cat' matches it once, not twice."),
        (dict(mean="arithmetic"), "you took the arithmetic mean of the four precisions; BLEU takes their "
                                  "geometric mean, exp((log p_1 + log p_2 + log p_3 + log p_4) / 4)."),
        (dict(level="sentence"), "you averaged the BLEU of each sentence; corpus BLEU sums the clipped "
                                 "matches, the output n-grams and the lengths over all sentences first, "
                                 "then computes one score."),
        (dict(level="macro"), "you averaged the precisions of the sentences; corpus BLEU sums the clipped "
                              "matches and the output n-grams over all sentences, then divides once: "
                              "p_n = sum of matches / sum of n-grams."),
        (dict(max_n=3), "your score uses the 1- to 3-gram precisions; BLEU uses n = 1 to 4 "
                        "(range(1, 5))."),
        (dict(denominator="reference"), "you divided the matches by the reference's n-grams: a precision "
                                        "divides by the output's n-grams (how much of the output is "
                                        "right); the brevity penalty, not a recall, covers what is missing."),
        (dict(words="lower"), "you lowercased the sentences: BLEU compares the words as they are written, "
                              "so 'A' does not match 'a' (sacrebleu's default; it lowercases only when asked, "
                              "as the course's corpus_bleu is and as its signature's case:lc records). Split "
                              "the sentences as they are, hypothesis.split()."),
        (dict(words="space"), "you split at single spaces, str.split(' '): a double space, or a space at the "
                              "start or end of a sentence, makes an empty word '' (and an empty output one "
                              "word). str.split() with no argument splits at any run of spaces and drops "
                              "them at the ends."),
        (dict(short="skipped"), "you left out the outputs shorter than 4 words: they still count, their "
                                "words in c and their references in r, their 1-grams (and the n-grams they "
                                "have) in the precisions; an output of one word just has no 2-, 3- or 4-gram."),
        (dict(short="truncated"), "you counted an output shorter than n words as one n-gram of order n "
                                  "(range(max(1, len(words) - n + 1)) takes words[0:n] even when it holds "
                                  "fewer than n words): such an output has no n-gram of that order, and "
                                  "adds nothing to the total; range(len(words) - n + 1) is empty then."),
        (dict(short="formula"), "you counted len(words) - n + 1 n-grams for every output: for an output shorter "
                                "than n words that is below 0 (an empty output has -3 4-grams), and the totals "
                                "shrink. Count the n-grams you extract, max(0, len(words) - n + 1)."),
    ]
    for mistake, message in mistakes:
        if math.isclose(value, _bleu(hypotheses, references, **mistake), rel_tol=1e-6, abs_tol=1e-6):
            raise ExerciseFailed(message)
    zero = ""
    if expected == 0:
        zero = (" No 4-gram of these outputs is in its reference, so p_4 = 0 and BLEU is 0 without "
                f"smoothing (sacrebleu's default smoothing, which the course's corpus_bleu uses, gives "
                f"{smoothed:.4f}; either is accepted).")
    raise _generic(f"{name} gives {value:.4f} on {len(hypotheses)} sentences where sacrebleu's corpus "
                   f"BLEU is {expected:.4f}.{zero}")


_BLEU_NOTES = {  # what a corpus tries that the ones before it do not
    3: "these sentences hold capitals (BLEU is case-sensitive), a double space and spaces around a sentence "
       "(str.split() drops them), an output of one word and an empty one (no n-gram above their length)",
    4: "this corpus is one output of two words: it holds no 3-gram and no 4-gram, so p_3 and p_4 are 0 "
       "(not 0 / 0) and BLEU is 0",
}


def _bleu_hint(passed: list, sizes: dict, message: str) -> str:
    hint = _hard_coded_hint(passed, sizes, message,
                            "Loop over every sentence you are given: zip(hypotheses, references).")
    note = _BLEU_NOTES.get(SIZE_SETS["check_bleu"].index(sizes))
    return hint + (f"\nNote: {note}." if note else "")


def check_bleu(bleu: Callable) -> None:
    """Check ``bleu(hypotheses, references) -> float`` against sacrebleu's corpus BLEU (no
    smoothing, split at whitespace, case-sensitive) and the course's ``corpus_bleu`` (with
    lowercase=False) on the toy corpora of ``BLEU_CORPORA``: outputs shorter than their
    references, longer ones, one with no 4-gram match, text with capitals, a double space,
    spaces around a sentence, a one-word and an empty output, and a corpus with no 3-gram.
    sacrebleu is switched off while ``bleu`` runs, so that calling it does not pass.

    Diagnoses: a call to sacrebleu (or the course's corpus_bleu) instead of the computation, a
    result of another kind or NaN, a fraction instead of percent, the brevity penalty inverted,
    above 1 or missing, counts not clipped, the arithmetic mean, the mean of sentence scores or
    of sentence precisions, three n-gram orders, the reference's n-grams as the denominator,
    lowercased text, str.split(" ") instead of str.split(), outputs shorter than 4 words left
    out, given a negative count of n-grams or counted as one n-gram, log(0), a division by zero where the corpus has
    no n-gram of some order, and code that reads only some of the sentences.
    """
    name = _function(bleu, "check_bleu", "bleu")
    sets = SIZE_SETS["check_bleu"]
    by_sizes = {_sizes(s): corpus for s, corpus in zip(sets, BLEU_CORPORA)}
    _run_on_all_sizes(lambda sizes: _check_bleu_once(bleu, name, *by_sizes[_sizes(sizes)]), sets, _bleu_hint)
    print(
        f"check_bleu passed: {name} gives sacrebleu's corpus BLEU on {len(BLEU_CORPORA)} toy corpora: "
        "outputs shorter than the references (brevity penalty below 1), longer ones (penalty 1), one "
        "without a 4-gram match (BLEU 0), capitals and stray spaces with a one-word and an empty output, "
        "and one without a 3-gram (BLEU 0)."
    )
