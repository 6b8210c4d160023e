"""The checks of notebook 09's exercises pass on the course's code and name the mistake of
each typical wrong answer: the key/value cache, greedy decoding with it, and one step of beam
search with the length penalty."""

import math

import pytest
import torch
import torch.nn.functional as F

from annotated.beam_search import lp, simple_beam_search
from annotated.decoding import attend, decoder_layer_step, greedy_decode, init_cache
from annotated.support.grading import (
    ExerciseFailed,
    check_beam_step,
    check_cached_greedy_decode,
    check_self_attention_step,
)

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models, a busy machine


def not_done(*args):
    raise NotImplementedError()


# ---------------------------------------------------------------- 9.1 the cache of one attention


def _step(dim=2, store=True, newest_first=False, replace=False, attend_to="cache", swap=False,
          unsplit=False, empty_cache=None):
    """A configurable self_attention_step, to write each wrong answer in one line."""
    def self_attention_step(attn, y, cache):
        k, v = attn.split_heads(attn.W_K(y)), attn.split_heads(attn.W_V(y))  # (batch, h, 1, d_k)
        new_k, new_v = k, v
        if unsplit:  # the cache keeps (batch, t, d_model)
            flat_k, flat_v = attn.W_K(y), attn.W_V(y)
            if "self_k" in cache:
                flat_k = torch.cat([cache["self_k"], flat_k], dim=1)
                flat_v = torch.cat([cache["self_v"], flat_v], dim=1)
            cache["self_k"], cache["self_v"] = flat_k, flat_v
            return attend(attn, y, attn.split_heads(flat_k), attn.split_heads(flat_v), None)
        if empty_cache is not None and "self_k" not in cache:
            cache["self_k"], cache["self_v"] = torch.empty(*empty_cache), torch.empty(*empty_cache)
        if "self_k" in cache and not replace:
            parts = ([k, cache["self_k"]], [v, cache["self_v"]]) if newest_first else \
                ([cache["self_k"], k], [cache["self_v"], v])
            k, v = torch.cat(parts[0], dim=dim), torch.cat(parts[1], dim=dim)
        if store:
            cache["self_k"], cache["self_v"] = (v, k) if swap else (k, v)
        if attend_to == "newest":
            return attend(attn, y, new_k, new_v, None)
        return attend(attn, y, k, v, None)
    return self_attention_step


def step_attending_before_storing_along_the_heads(attn, y, cache):
    k, v = attn.split_heads(attn.W_K(y)), attn.split_heads(attn.W_V(y))
    if "self_k" in cache:
        k, v = torch.cat([cache["self_k"], k], dim=1), torch.cat([cache["self_v"], v], dim=1)
    out = attend(attn, y, k, v, None)  # fails before the cache is stored
    cache["self_k"], cache["self_v"] = k, v
    return out


def step_shifting_y_in_place(attn, y, cache):
    y += 1.0  # changes the caller's tensor
    return _step()(attn, y, cache)


def _attention_by_hand(attn, y, cache, softmax):
    """The cache as the course keeps it, the attention written out with a given softmax."""
    k, v = attn.split_heads(attn.W_K(y)), attn.split_heads(attn.W_V(y))
    if "self_k" in cache:
        k, v = torch.cat([cache["self_k"], k], dim=2), torch.cat([cache["self_v"], v], dim=2)
    cache["self_k"], cache["self_v"] = k, v
    scores = attn.split_heads(attn.W_Q(y)) @ k.transpose(-2, -1) / math.sqrt(attn.d_k)
    return attn.W_O(attn.merge_heads(softmax(scores) @ v))


def step_softmax_without_shift(attn, y, cache):
    return _attention_by_hand(attn, y, cache, lambda s: s.exp() / s.exp().sum(-1, keepdim=True))


def step_shift_only_when_large(attn, y, cache):
    def softmax(s):
        if s.max() > 50:  # "only where exp could overflow"
            s = s - s.amax(-1, keepdim=True)
        return s.exp() / s.exp().sum(-1, keepdim=True)
    return _attention_by_hand(attn, y, cache, softmax)


def step_softmax_in_float32(attn, y, cache):  # dtype kept, precision lost
    return _attention_by_hand(attn, y, cache, lambda s: F.softmax(s.float(), dim=-1).to(s.dtype))


def step_y_as_float(attn, y, cache):  # .float() "for safety": a float64 model fails
    return _step()(attn, y.float(), cache)


def step_squeezing_the_output(attn, y, cache):  # the length-1 axis dropped and restored
    return _step()(attn, y, cache).squeeze().unsqueeze(1)


_SHARED_KEYS = {}


def step_with_one_buffer_for_every_cache(attn, y, cache):
    """Keys and values written into one preallocated buffer, whichever cache is given."""
    batch, t = y.size(0), cache["self_k"].size(2) if "self_k" in cache else 0
    shape = (batch, attn.h, 64, attn.d_k)
    keys, values = _SHARED_KEYS.setdefault((shape, y.dtype), (y.new_zeros(shape), y.new_zeros(shape)))
    keys[:, :, t], values[:, :, t] = attn.split_heads(attn.W_K(y))[:, :, 0], attn.split_heads(attn.W_V(y))[:, :, 0]
    cache["self_k"], cache["self_v"] = keys[:, :, : t + 1], values[:, :, : t + 1]
    return attend(attn, y, cache["self_k"], cache["self_v"], None)


_OUTPUTS = {}


def step_returning_one_buffer(attn, y, cache):
    out = _step()(attn, y, cache)
    return _OUTPUTS.setdefault((out.shape, out.dtype), torch.empty_like(out)).copy_(out)


def step_with_a_buffer_in_each_cache(attn, y, cache):  # right: preallocated, one buffer per cache
    if "buffer_k" not in cache:
        shape = (y.size(0), attn.h, 64, attn.d_k)
        cache["buffer_k"], cache["buffer_v"], cache["t"] = y.new_zeros(shape), y.new_zeros(shape), 0
    t = cache["t"]
    cache["buffer_k"][:, :, t] = attn.split_heads(attn.W_K(y))[:, :, 0]
    cache["buffer_v"][:, :, t] = attn.split_heads(attn.W_V(y))[:, :, 0]
    cache["t"] = t + 1
    cache["self_k"], cache["self_v"] = cache["buffer_k"][:, :, : t + 1], cache["buffer_v"][:, :, : t + 1]
    return attend(attn, y, cache["self_k"], cache["self_v"], None)


def step_with_torch_sdpa(attn, y, cache):  # right: torch's scaled_dot_product_attention, dim=-2
    k, v = attn.split_heads(attn.W_K(y)), attn.split_heads(attn.W_V(y))
    if "self_k" in cache:
        k, v = torch.cat((cache["self_k"], k), dim=-2), torch.cat((cache["self_v"], v), dim=-2)
    cache.update(self_k=k, self_v=v)
    return attn.W_O(attn.merge_heads(F.scaled_dot_product_attention(attn.split_heads(attn.W_Q(y)), k, v)))


def step_with_logsumexp(attn, y, cache):  # right: weights exp(s - logsumexp(s)), by einsum
    return _attention_by_hand(attn, y, cache, lambda s: (s - s.logsumexp(-1, keepdim=True)).exp())


def step_scaled_by_a_float32_tensor(attn, y, cache):  # right: a float32 torch.sqrt(torch.tensor(d_k))
    k, v = attn.split_heads(attn.W_K(y)), attn.split_heads(attn.W_V(y))
    if "self_k" in cache:
        k, v = torch.cat([cache["self_k"], k], dim=2), torch.cat([cache["self_v"], v], dim=2)
    cache["self_k"], cache["self_v"] = k, v
    scores = attn.split_heads(attn.W_Q(y)) @ k.transpose(-2, -1) / torch.sqrt(torch.tensor(attn.d_k))
    return attn.W_O(attn.merge_heads(scores.softmax(-1) @ v))


def step_from_an_empty_float32_cache(attn, y, cache):  # right: torch.cat promotes the empty float32 start
    if "self_k" not in cache:
        empty = torch.zeros(y.size(0), attn.h, 0, attn.d_k)
        cache["self_k"], cache["self_v"] = empty, empty
    return _step()(attn, y, cache)



def step_clamping_the_output(attn, y, cache):  # a mistake without a diagnosis, seen with large values only
    return _step()(attn, y, cache).clamp(-50, 50)



# ---------------------------------------------------------------- 9.2 greedy decoding with the cache


def _greedy(feed="newest", start="t-1", final_norm=True, mask_source=True, pad_after_eos=True, stop="all",
            remember_done=True, keep_bos=True, dtype=torch.long, steps="max_len - 1", batch=None, bos=None):
    """A configurable cached greedy decoding, to write each wrong answer in one line."""
    @torch.no_grad()
    def cached_greedy_decode(model, src, src_mask, max_len, bos_idx, eos_idx, pad_idx):
        memory = model.encode(src, src_mask)
        cache = init_cache(model, memory)
        embed, position = model.tgt_embed
        rows = batch or src.size(0)
        ys = torch.full((rows, 1), bos_idx if bos is None else bos, dtype=torch.long)
        done = torch.zeros(rows, dtype=torch.bool)
        for _ in range(max_len - 1 if steps == "max_len - 1" else max_len):
            t = ys.size(1)
            tokens = ys if feed == "prefix" else ys[:, -1:]
            first = {"t-1": t - tokens.size(1), "0": 0, "t": t}[start]
            x = position(embed(tokens), start=first)
            for layer, layer_cache in zip(model.decoder.layers, cache):
                x = decoder_layer_step(layer, x, src_mask if mask_source else None, layer_cache)
            if final_norm:
                x = model.decoder.norm(x)
            next_token = model.generator(x[:, -1]).argmax(dim=-1)
            if pad_after_eos:
                next_token = next_token.masked_fill(done, pad_idx)
            ys = torch.cat([ys, next_token.unsqueeze(1)], dim=1)
            done = (done | (next_token == eos_idx)) if remember_done else next_token == eos_idx
            if (stop == "all" and done.all()) or (stop == "any" and done.any()):
                break
        ys = ys if keep_bos else ys[:, 1:]
        return ys.to(dtype)
    return cached_greedy_decode


def course_greedy(model, src, src_mask, max_len, bos_idx, eos_idx, pad_idx):
    return greedy_decode(model, src, src_mask, max_len, bos_idx, eos_idx, use_cache=True, pad_idx=pad_idx)


def greedy_without_cache(model, src, src_mask, max_len, bos_idx, eos_idx, pad_idx):
    return greedy_decode(model, src, src_mask, max_len, bos_idx, eos_idx, use_cache=False, pad_idx=pad_idx)


@torch.no_grad()
def greedy_squeezing_the_batch(model, src, src_mask, max_len, bos_idx, eos_idx, pad_idx):
    memory = model.encode(src, src_mask)
    cache = init_cache(model, memory)
    embed, position = model.tgt_embed
    ys = torch.full((src.size(0), 1), bos_idx, dtype=torch.long)
    done = torch.zeros(src.size(0), dtype=torch.bool)
    for _ in range(max_len - 1):
        x = position(embed(ys[:, -1:]), start=ys.size(1) - 1)
        for layer, layer_cache in zip(model.decoder.layers, cache):
            x = decoder_layer_step(layer, x, src_mask, layer_cache)
        next_token = model.generator(model.decoder.norm(x).squeeze()).argmax(-1)  # one sentence: a 0-d id
        ys = torch.cat([ys, next_token.unsqueeze(-1)], dim=1)
        ys[done, -1] = pad_idx
        done = done | (ys[:, -1] == eos_idx)
        if done.all():
            break
    return ys


@torch.no_grad()
def greedy_in_the_dtype_of_src(model, src, src_mask, max_len, bos_idx, eos_idx, pad_idx):
    ys = _greedy()(model, src, src_mask, max_len, bos_idx, eos_idx, pad_idx)
    return ys.to(src.dtype)  # "the same dtype as the input ids"


@torch.no_grad()
def greedy_stepping_once_before_the_loop(model, src, src_mask, max_len, bos_idx, eos_idx, pad_idx):
    return _greedy()(model, src, src_mask, max(max_len, 2), bos_idx, eos_idx, pad_idx)


@torch.no_grad()
def greedy_by_topk(model, src, src_mask, max_len, bos_idx, eos_idx, pad_idx):
    """Right: topk(1) for the argmax (ties would go another way: the check has none), a while loop."""
    memory = model.encode(src, src_mask)
    cache = init_cache(model, memory)
    embed, position = model.tgt_embed
    ys = src.new_full((src.size(0), 1), bos_idx).long()
    done = torch.zeros_like(ys[:, 0], dtype=torch.bool)
    while ys.size(1) < max_len and not done.all():
        x = position(embed(ys[:, -1:]), start=ys.size(1) - 1)
        for layer, layer_cache in zip(model.decoder.layers, cache):
            x = decoder_layer_step(layer, x, src_mask, layer_cache)
        next_token = model.generator(model.decoder.norm(x))[:, -1].topk(1, dim=-1).indices  # (batch, 1)
        next_token = torch.where(done[:, None], pad_idx, next_token)
        ys = torch.cat([ys, next_token], dim=1)
        done |= next_token[:, 0] == eos_idx
    return ys



# ---------------------------------------------------------------- 9.3 one step of beam search


def _beam(**mistake):
    """The check's own step (simple_beam_search's lines) with one mistake, as a learner's function."""
    from annotated.support.grading.decoding import _beam_step

    def beam_step(live, log_probs, k, alpha, eos):
        return _beam_step(live, log_probs, k, alpha, eos, **mistake)
    return beam_step


def beam_step_by_hand(live, log_probs, k, alpha, eos, *, key=lambda c: -c[1], per_hypothesis=None,
                      keep_finished=False, penalty=lambda logp, n, alpha: logp / lp(n, alpha)):
    """A learner's step written out, with a switch or two for the usual slips."""
    candidates = []
    for (tokens, logp), row in zip(live, log_probs.tolist()):
        extensions = list(enumerate(row))
        if per_hypothesis:
            extensions = sorted(extensions, key=lambda item: -item[1])[:per_hypothesis(k)]
        candidates += [(tokens + [t], logp + lt) for t, lt in extensions]
    candidates.sort(key=key)
    finished = [(y, penalty(logp, len(y) - 1, alpha)) for y, logp in candidates[:k] if y[-1] == eos]
    if keep_finished:
        return candidates[:k], finished
    return [(y, logp) for y, logp in candidates if y[-1] != eos][:k], finished


def beam_step_appending_in_place(live, log_probs, k, alpha, eos):
    candidates = []
    for (tokens, logp), row in zip(live, log_probs.tolist()):
        for t, lt in enumerate(row):
            y = tokens
            y.append(t)  # the caller's list, shared by every extension of the hypothesis
            candidates.append((list(y), logp + lt))
            y.pop()
            if t == 3:
                y.append(t)  # ... and one left behind
    candidates.sort(key=lambda c: -c[1])
    return ([c for c in candidates if c[0][-1] != eos][:k],
            [(y, logp / lp(len(y) - 1, alpha)) for y, logp in candidates[:k] if y[-1] == eos])


def beam_step_with_k_written_in(live, log_probs, k, alpha, eos):
    return beam_step_by_hand(live, log_probs, 2, alpha, eos)


def beam_step_with_eos_written_in(live, log_probs, k, alpha, eos):
    return beam_step_by_hand(live, log_probs, k, alpha, 2)


def beam_step_by_topk(live, log_probs, k, alpha, eos):
    """Right: the batched search's way, in float32: one topk of the 2k best over all n * V candidates."""
    n, vocab = log_probs.shape
    scores = torch.tensor([logp for _, logp in live]).unsqueeze(1) + log_probs  # (n, V), float32
    values, flat = scores.view(-1).topk(min(2 * k, n * vocab))
    kept, finished = [], []
    for rank, (value, index) in enumerate(zip(values, flat)):
        tokens = live[index // vocab][0] + [index % vocab]  # ids as 0-d tensors
        if index % vocab == eos:
            if rank < k:
                finished.append((tuple(tokens), value / lp(len(tokens) - 1, alpha)))  # a tuple, a 0-d tensor
        elif len(kept) < k:
            kept.append((tokens, value))
    return kept, finished


def beam_step_with_heapq(live, log_probs, k, alpha, eos):
    """Right: heapq.nlargest over the candidates, lp written out."""
    import heapq

    candidates = heapq.nlargest(2 * k, ((logp + lt, tokens + [t]) for (tokens, logp), row in
                                        zip(live, log_probs.tolist()) for t, lt in enumerate(row)))
    finished = [(y, s / ((5 + len(y) - 1) / 6) ** alpha) for s, y in candidates[:k] if y[-1] == eos]
    return [(y, s) for s, y in candidates if y[-1] != eos][:k], finished



WRONG_ANSWERS = [
    # 9.1
    (check_self_attention_step, not_done, r"raised NotImplementedError: the exercise is not done"),
    (check_self_attention_step, _step(dim=1), r"appended the new position along dim=1, the heads"),
    (check_self_attention_step, _step(dim=0), r"along dim=0, the batch"),
    (check_self_attention_step, _step(dim=-1), r"along dim=3 \(-1\), the width d_k"),
    (check_self_attention_step, step_attending_before_storing_along_the_heads,
     r"at step 2 the attention failed on keys of shape \(2, 6, 1, 5\): you appended the new position along dim=1"),
    (check_self_attention_step, _step(replace=True), r"still holds one position.*replaced it instead of appending"),
    (check_self_attention_step, _step(store=False), r"the cache has no 'self_k' and no 'self_v' \(it is empty\)"),
    (check_self_attention_step, _step(newest_first=True), r"newest first"),
    (check_self_attention_step, _step(attend_to="newest"), r"attending to itself only"),
    (check_self_attention_step, _step(swap=True), r"cache\['self_k'\] holds the values"),
    (check_self_attention_step, _step(unsplit=True), r"\(batch, t, d_model\): keep it split into heads"),
    (check_self_attention_step, _step(empty_cache=(2, 3, 0, 5)),
     r"passed with \(batch=2, h=3, d_k=5, steps=6\) but not with \(batch=3, h=2, d_k=7, steps=4\)"),
    (check_self_attention_step, step_shifting_y_in_place, r"changed its second argument `y` in place"),
    (check_self_attention_step, step_softmax_without_shift,
     r"returned NaN or inf: the scores here are all far below zero .*exp\(\) of each underflows to 0.*Subtract "
     r"each row's largest score before exp\(\), always"),
    (check_self_attention_step, step_shift_only_when_large, r"all far below zero .*not only when a score looks large"),
    (check_self_attention_step, step_softmax_in_float32, r"for float64 inputs, the float64 reference and the output .* differ by up to .*about float32's precision"),
    (check_self_attention_step, step_y_as_float,
     r"(?s)must have the same dtype.*Note: this call's attn and y are torch\.float64: create every tensor"),
    (check_self_attention_step, step_squeezing_the_output,
     r"expected \(1, 1, 64\), got \(64, 1\)\. The batch here is one sentence: a squeeze\(\) dropped"),
    (check_self_attention_step, step_with_one_buffer_for_every_cache,
     r"a second call of step_with_one_buffer_for_every_cache, on other inputs, changed the output, or the keys and "
     r"values in its cache, that the first call had returned"),
    (check_self_attention_step, step_clamping_the_output,
     r"(?s)but not with \(batch=4, h=5, d_k=1, steps=3\).*Note: the scores here are all far below zero"),
    (check_self_attention_step, step_returning_one_buffer,
     r"a second call of step_returning_one_buffer, on other inputs, changed the output, or the keys and values in "
     r"its cache, that the first call had returned"),
    # 9.2
    (check_cached_greedy_decode, not_done, r"raised NotImplementedError: the exercise is not done"),
    (check_cached_greedy_decode, greedy_without_cache, r"the output is right, but without the cache"),
    (check_cached_greedy_decode, _greedy(feed="prefix"), r"fed the whole prefix ys through the cached layers"),
    (check_cached_greedy_decode, _greedy(start="0"), r"every token went in at position 0"),
    (check_cached_greedy_decode, _greedy(start="t"), r"one position too far"),
    (check_cached_greedy_decode, _greedy(final_norm=False), r"the decoder's final norm is missing"),
    (check_cached_greedy_decode, _greedy(mask_source=False), r"looked at the source's padding"),
    (check_cached_greedy_decode, _greedy(pad_after_eos=False), r"went on producing tokens"),
    (check_cached_greedy_decode, _greedy(stop="never"), r"does not stop when every sentence has produced"),
    (check_cached_greedy_decode, _greedy(stop="never", pad_after_eos=False), r"does not stop at </s>"),
    (check_cached_greedy_decode, _greedy(stop="any"), r"stopped as soon as one sentence produced"),
    (check_cached_greedy_decode, _greedy(remember_done=False), r"started again a step later"),
    (check_cached_greedy_decode, _greedy(keep_bos=False), r"lack the <s> they start from"),
    (check_cached_greedy_decode, _greedy(bos=1), r"must be <s>, bos_idx = 3; yours are \[1, 1, 1, 1\]"),
    (check_cached_greedy_decode, _greedy(dtype=torch.float32), r"as torch\.float32; token ids are int64"),
    (check_cached_greedy_decode, _greedy(steps="max_len", stop="never"), r"max_len counts every token"),
    (check_cached_greedy_decode, greedy_squeezing_the_batch,
     r"(?s)Tensors must have same number of dimensions.*This call: .*src of shape \(1, 5\).* a batch of one "
     r"sentence\. .*a squeeze\(\) drops the batch dimension"),
    (check_cached_greedy_decode, greedy_in_the_dtype_of_src,
     r"(?s)returned the ids as torch\.int32; token ids are int64.*int32 source ids\. The output is int64 "
     r"whatever the dtype of src"),
    (check_cached_greedy_decode, greedy_stepping_once_before_the_loop,
     r"(?s)returned 2 columns with max_len = 1.*max_len = 1\. max_len counts <s>"),
    (check_cached_greedy_decode, _greedy(batch=3),
     r"passed with \(batch=3, L_src=5, N=1, h=2, d_k=7, vocab=11, max_len=9\) but not with \(batch=4, "),
    # 9.3
    (check_beam_step, not_done, r"raised NotImplementedError: the exercise is not done"),
    (check_beam_step, _beam(order="worst first"), r"the worst candidates, not the best: you sorted .* ascending"),
    (check_beam_step, lambda live, lp_, k, a, e: beam_step_by_hand(live, lp_, k, a, e, key=lambda c: c[1]),
     r"at step 1 of a search with k=2, .*sorted the candidates in ascending order"),
    (check_beam_step, _beam(cumulative=False), r"ranked the candidates by the new token's log-probability alone"),
    (check_beam_step, _beam(pool="best"), r"extended each live hypothesis by its own best token only"),
    (check_beam_step, lambda live, lp_, k, a, e: beam_step_by_hand(live, lp_, k, a, e, per_hypothesis=lambda k: k),
     r"at step 1 of a search with k=2, .*took each hypothesis's k best tokens \(k = 2\) before ranking"),
    (check_beam_step, _beam(live_from="k best"), r"the place of a finished hypothesis was left empty"),
    (check_beam_step, _beam(finished_from="every candidate"),
     r"set aside every candidate that ends in </s>, even those outside the k best"),
    (check_beam_step, lambda live, lp_, k, a, e: beam_step_by_hand(live, lp_, k, a, e, keep_finished=True),
     r"at step 1 of a search with k=2, alpha=0.6, eos=2, .*your live hypotheses include \[1 2\], which ends in "
     r"</s> \(eos = 2\): a finished hypothesis leaves the beam"),
    (check_beam_step, _beam(penalty="none"), r"scored by log P alone: .*alpha = 0\.6 here"),
    (check_beam_step, _beam(penalty="multiply"), r"you multiplied log P by lp\(\|Y\|\)"),
    (check_beam_step, _beam(penalty="length"), r"you divided log P by the length \|Y\| itself"),
    (check_beam_step, lambda live, lp_, k, a, e: beam_step_by_hand(live, lp_, k, a, e,
                                                                   penalty=lambda s, n, a: s / ((5 + n) / 6 * a)),
     r"as \(\(5 \+ \|Y\|\) / 6\) \* alpha: alpha is an exponent"),
    (check_beam_step, _beam(length="with <s>"), r"the wrong length: you counted <s>, len\(tokens\)"),
    (check_beam_step, lambda live, lp_, k, a, e: beam_step_by_hand(live, lp_, k, a, e,
                                                                   penalty=lambda s, n, a: s / lp(n - 1, a)),
     r"the wrong length: you left out </s>"),
    (check_beam_step, _beam(penalize_live=True), r"your live hypotheses carry log P / lp\(\|Y\|\)"),
    (check_beam_step, beam_step_appending_in_place,
     r"changed its first argument `live` in place \(now \[\(\[1, 3\], 0\.0\)\]\)\. tokens\.append\(t\) changes the "
     r"caller's list"),
    (check_beam_step, lambda live, lp_, k, a, e: [[(s, y) for y, s in h]
                                                  for h in beam_step_by_hand(live, lp_, k, a, e)],
     r"the tokens of each of the live hypotheses .* should be a list of ids, <s> first; got float"),
    (check_beam_step, lambda live, lp_, k, a, e: {"live": beam_step_by_hand(live, lp_, k, a, e)[0]},
     r"should return a pair \(live, finished\), got dict"),
    (check_beam_step, lambda live, lp_, k, a, e: [[(y, float(s)) for y, s in reversed(h)]
                                                  for h in beam_step_by_hand(live, lp_, k, a, e)],
     r"the hypotheses are right but not in order: return each list best first"),
    (check_beam_step, beam_step_with_k_written_in,
     r"at step 1 of a search with k=3, .*the beam holds 2 hypotheses where k = 3: is k written into your code\?"),
    (check_beam_step, beam_step_with_eos_written_in,
     r"at step 1 of a search with k=3, .*does not treat 5 as </s>; .*\(2 would fit\)\. Is the id of </s> "
     r"written into your code"),
    (check_beam_step, lambda live, lp_, k, a, e: beam_step_by_hand(live, lp_, k, 0.6, e),
     r"at step \d of a search with k=3, .*your scores are those of alpha = 0.6, where alpha = 1.0: is alpha written"),
    (check_beam_step, lambda live, lp_, k, a, e: beam_step_by_hand(live, lp_[:, :7], k, a, e),
     r"(?s)passed with \(k=2, vocab=7, max_len=6\) but not with \(k=3, vocab=11, max_len=5\).*Note: here <s> is 0, "
     r"</s> is 5 and alpha is 1\.0"),
]


@pytest.mark.parametrize("check, wrong, message", WRONG_ANSWERS,
                         ids=[f"{c.__name__}-{m[:30]}" for c, _, m in WRONG_ANSWERS])
def test_check_names_the_mistake_of_a_typical_wrong_answer(check, wrong, message):
    with pytest.raises(ExerciseFailed, match=message):
        check(wrong)


RIGHT_ANSWERS = [
    (check_self_attention_step, _step()),  # decoder_layer_step's self-attention, as a function
    (check_cached_greedy_decode, course_greedy),
    (check_beam_step, _beam()),  # simple_beam_search's lines
    # Other right answers, written otherwise.
    (check_self_attention_step, step_with_a_buffer_in_each_cache),
    (check_self_attention_step, step_with_torch_sdpa),
    (check_self_attention_step, step_with_logsumexp),
    (check_self_attention_step, step_from_an_empty_float32_cache),
    (check_self_attention_step, step_scaled_by_a_float32_tensor),
    (check_cached_greedy_decode, greedy_by_topk),
    (check_beam_step, beam_step_by_hand),
    (check_beam_step, beam_step_by_topk),
    (check_beam_step, beam_step_with_heapq),
]


@pytest.mark.parametrize("check, fn", RIGHT_ANSWERS,
                         ids=[f"{c.__name__}-{getattr(f, '__name__', 'lambda')}-{i}" for i, (c, f) in enumerate(RIGHT_ANSWERS)])
def test_check_passes_on_the_course_code_and_other_right_answers(check, fn, capsys):
    check(fn)
    assert f"{check.__name__} passed: " in capsys.readouterr().out


def test_a_check_leaves_the_global_random_state_as_it_was(capsys):
    before = torch.random.get_rng_state()
    for check, fn in RIGHT_ANSWERS[:3]:
        check(fn)
    assert torch.equal(torch.random.get_rng_state(), before)


def test_the_decoding_check_gives_every_mistake_an_output_of_its_own():
    # Each diagnosis is found by comparing with one mistake's output: two mistakes with the
    # same output on a model would get the first one's message.
    from annotated.support.grading.decoding import _DECODE_SETTINGS, DECODE_SIZES, _decode, _decoding_model, _decoding_source
    variants = [dict(start="0"), dict(start="t"), dict(mask_source=False), dict(pad_after_eos=False),
                dict(stop="never"), dict(stop="never", pad_after_eos=False), dict(stop="any"),
                dict(remember_done=False), dict(feed="prefix")]
    for sizes, settings in zip(DECODE_SIZES, _DECODE_SETTINGS):
        model, (src, src_mask) = _decoding_model(sizes, settings), _decoding_source(sizes, seed=sizes["vocab"] + 1)
        bos, pad, max_len = settings["bos"], settings["pad"], sizes["max_len"]
        eos = settings["eos"]
        outputs = [_decode(model, src, src_mask, max_len, bos, eos, pad)]
        outputs += [_decode(model, src, src_mask, max_len, bos, eos, pad, **v) for v in variants]
        if settings["norm_first"]:
            outputs.append(_decode(model, src, src_mask, max_len, bos, eos, pad, final_norm=False))
        keys = [tuple(map(tuple, out.tolist())) for out in outputs]
        assert len(set(keys)) == len(keys), sizes
        assert outputs[0].size(1) < max_len  # every sentence ends before the limit, ...
        ends = [int((row == eos).nonzero()[0]) for row in outputs[0]]
        assert len(set(ends)) >= 3  # ... at different steps



def test_the_beam_check_runs_simple_beam_search_and_every_mistake_shows_in_it():
    # The check's step is simple_beam_search's: run step by step from <s>, it gives the search's trace,
    # on the check's models and on notebook 09's table; each known mistake gives another result at
    # some step of some search, and </s> is among the k best at the first step of the searches with
    # k > 1 (so that a beam short of k there is seen).
    from annotated.support.grading.decoding import (
        _BEAM_SETTINGS, _SWITCHES, BEAM_SIZES, _beam_model, _beam_step,
    )
    shown = set()
    for sizes, settings in zip(BEAM_SIZES, _BEAM_SETTINGS):
        k, bos, eos, alpha = sizes["k"], settings["bos"], settings["eos"], settings["alpha"]
        model = _beam_model(sizes["vocab"], eos, settings["seed"])
        trace = []
        simple_beam_search(lambda p: dict(enumerate(model(p).tolist())), k, sizes["max_len"], alpha, bos, eos, trace)
        live, finished = [([bos], 0.0)], []
        for step, (expected_live, expected_finished) in enumerate(trace, start=1):
            log_probs = torch.stack([model(tokens) for tokens, _ in live])
            new_live, new_finished = _beam_step(live, log_probs, k, alpha, eos)
            assert (new_live, finished + new_finished) == (expected_live, expected_finished)
            best = sorted((logp + lt for (_, logp), row in zip(live, log_probs.tolist()) for lt in row), reverse=True)
            assert all(a - b > 1e-4 for a, b in zip(best[: 2 * k + 1], best[1:])), sizes  # float32 keeps their order
            if step == 1 and k > 1:
                assert new_finished, sizes
            for mistake, _, _ in _SWITCHES:
                if _beam_step(live, log_probs, k, alpha, eos, **mistake) != (new_live, new_finished):
                    shown.add(str(mistake))
            live, finished = new_live, finished + new_finished
        assert len(trace) >= 3, sizes
    assert shown == {str(mistake) for mistake, _, _ in _SWITCHES}
    # Notebook 09's hand trace (its table, k = 2, alpha = 0.6).
    words = ["<pad>", "<s>", "</s>", "a", "the", "dog", "cat", "runs"]
    table = {(1,): {3: 0.5, 4: 0.4, 2: 0.1}, (1, 3): {5: 0.4, 6: 0.3, 2: 0.3}, (1, 4): {5: 0.9, 2: 0.1},
             (1, 3, 5): {2: 0.6, 7: 0.4}, (1, 4, 5): {7: 0.7, 2: 0.3}}

    def row(prefix):
        probs = table.get(tuple(prefix), {2: 1.0})
        return torch.tensor([math.log(probs.get(t, 1e-9)) for t in range(len(words))], dtype=torch.float64)

    trace = []
    simple_beam_search(lambda p: dict(enumerate(row(p).tolist())), 2, 10, 0.6, 1, 2, trace)
    live, finished = [([1], 0.0)], []
    for expected_live, expected_finished in trace:
        new_live, new_finished = _beam_step(live, torch.stack([row(t) for t, _ in live]), 2, 0.6, 2)
        live, finished = new_live, finished + new_finished
        assert (live, finished) == (expected_live, expected_finished)
    assert [" ".join(words[t] for t in y[1:]) for y, _ in finished] == ["a dog </s>", "the dog runs </s>",
                                                                        "a dog runs </s>"]
