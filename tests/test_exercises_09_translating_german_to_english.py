"""The checks of notebook 09's exercises pass on the course's code and name the mistake of
each typical wrong answer: the key/value cache, greedy decoding with it, one byte-pair merge
and corpus BLEU."""

import math
import re
from collections import Counter

import pytest
import torch
import torch.nn.functional as F
from sacrebleu.metrics import BLEU

from annotated.bpe import merge
from annotated.decoding import attend, decoder_layer_step, greedy_decode, init_cache
from annotated.evaluation import corpus_bleu
from annotated.support.grading import (
    ExerciseFailed,
    check_bleu,
    check_bpe_merge_step,
    check_cached_greedy_decode,
    check_self_attention_step,
)
from annotated.support.grading.translation import _bleu


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


# ---------------------------------------------------------------- 9.3 one byte-pair merge


def _merge_step(count="weighted", tie="larger", merge_word=merge, words=None, counts="kept", only_merged=False,
                in_place=False, joined_pair=False):
    """A configurable bpe_merge_step, to write each wrong answer in one line."""
    def bpe_merge_step(corpus):
        pairs = Counter()
        counted = list(corpus.items())[:words] if words else list(corpus.items())
        if count == "across words":  # every symbol of the corpus in one row, weighted by its word
            row = [(symbol, n) for symbols, n in counted for symbol in symbols]
            for (a, n), (b, _) in zip(row, row[1:]):
                pairs[a, b] += n
        else:
            for symbols, n in counted:
                found = zip(symbols, symbols[1:])
                for pair in (set(found) if count == "once per word" else found):
                    pairs[pair] += 1 if count == "once per word type" else n
        best = {"larger": max(pairs, key=lambda p: (pairs[p], p)), "first": max(pairs, key=pairs.get),
                "smaller": min(pairs, key=lambda p: (-pairs[p], p))}[tie]
        merged = {merge_word(symbols, best): (1 if counts == "ones" else n) for symbols, n in corpus.items()
                  if not only_merged or best in zip(symbols, symbols[1:])}
        if in_place:
            corpus.clear()
            corpus.update(merged)
            merged = corpus
        return ("".join(best) if joined_pair else best), merged
    return bpe_merge_step


def merge_without_skip(symbols, pair):
    out = []
    for i in range(len(symbols)):
        if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == pair:
            out.append(symbols[i] + symbols[i + 1])
        elif not (i > 0 and (symbols[i - 1], symbols[i]) == pair):
            out.append(symbols[i])
    return tuple(out)


def merge_from_the_right(symbols, pair):
    out, i = [], len(symbols) - 1
    while i >= 0:
        if i > 0 and (symbols[i - 1], symbols[i]) == pair:
            out.insert(0, symbols[i - 1] + symbols[i])
            i -= 2
        else:
            out.insert(0, symbols[i])
            i -= 1
    return tuple(out)


def merge_as_text(symbols, pair):
    return tuple(" ".join(symbols).replace(" ".join(pair), "".join(pair)).split(" "))


def merge_first_only(symbols, pair):  # the loop stops at the first match
    for i in range(len(symbols) - 1):
        if (symbols[i], symbols[i + 1]) == pair:
            return symbols[:i] + (symbols[i] + symbols[i + 1],) + symbols[i + 2:]
    return symbols


def merge_replacing_once(symbols, pair):  # str.replace(..., 1), with the symbols' boundaries kept
    text = f" {' '.join(symbols)} "
    return tuple(text.replace(f" {' '.join(pair)} ", f" {''.join(pair)} ", 1).split())


_MERGED = {}


def merge_step_into_one_dict(corpus):  # the same dict returned at every call, emptied and refilled
    best, merged = course_merge_step(corpus)
    _MERGED.clear()
    _MERGED.update(merged)
    return best, _MERGED


def merge_step_by_regex(corpus):  # right: ties by sorting, the merge by a regex on whole symbols
    pairs = Counter()
    for symbols, n in corpus.items():
        for pair in zip(symbols, symbols[1:]):
            pairs[pair] += n
    best = sorted(pairs.items(), key=lambda item: (item[1], item[0]))[-1][0]
    pattern = re.compile(r"(?<!\S)" + re.escape(" ".join(best)) + r"(?!\S)")
    return best, {tuple(pattern.sub("".join(best), " ".join(s)).split(" ")): n for s, n in corpus.items()}


def course_merge_step(corpus):
    """One merge with the course's own pieces: the count of annotated.bpe.learn_bpe, its tie rule, and merge."""
    pairs = Counter()
    for symbols, n in corpus.items():
        for pair in zip(symbols, symbols[1:]):
            pairs[pair] += n
    best = max(pairs, key=lambda pair: (pairs[pair], pair))
    return best, {merge(symbols, best): n for symbols, n in corpus.items()}


# ---------------------------------------------------------------- 9.4 BLEU


def _bleu_answer(sentences=None, **mistake):
    """The check's own BLEU with one mistake, as a learner's function; ``sentences``: only the first few."""
    def bleu(hypotheses, references):
        if sentences:
            hypotheses, references = hypotheses[:sentences], references[:sentences]
        return _bleu(hypotheses, references, **mistake)
    return bleu


def clipped_counts(hypotheses, references, split=str.split):
    """Clipped n-gram matches and totals (n = 1..4) and the two lengths, counted by hand."""
    matches, totals, c, r = [0] * 4, [0] * 4, 0, 0
    for hyp, ref in zip(hypotheses, references):
        hyp, ref = split(hyp), split(ref)
        c, r = c + len(hyp), r + len(ref)
        for n in range(1, 5):
            h = Counter(tuple(hyp[i : i + n]) for i in range(len(hyp) - n + 1))
            g = Counter(tuple(ref[i : i + n]) for i in range(len(ref) - n + 1))
            matches[n - 1] += sum(min(k, g[x]) for x, k in h.items())
            totals[n - 1] += sum(h.values())
    return matches, totals, c, r


def bleu_taking_log_of_zero(hypotheses, references):
    matches, totals, c, r = clipped_counts(hypotheses, references)
    bp = 1.0 if c > r else math.exp(1 - r / c)
    return 100 * bp * math.exp(sum(math.log(m / t) for m, t in zip(matches, totals)) / 4)  # log(0) fails


def course_bleu(hypotheses, references):
    return corpus_bleu(hypotheses, references).score  # sacrebleu, as notebook 09 scores the test set


def sacrebleu_unsmoothed(hypotheses, references):
    return BLEU(tokenize="none", smooth_method="none").corpus_score(hypotheses, [references]).score


def bleu_from_sacrebleu_counts(hypotheses, references):
    # The counts by hand, the formula left to sacrebleu: still not the exercise.
    return BLEU.compute_bleu(*clipped_counts(hypotheses, references), smooth_method="none").score


def _bleu_of_counts(matches, totals, c, r):
    if min(matches) == 0:
        return 0.0
    bp = 1.0 if c > r else math.exp(1 - r / c)
    return 100 * bp * math.exp(sum(math.log(m / t) for m, t in zip(matches, totals)) / 4)


def bleu_split_at_single_spaces(hypotheses, references):
    return _bleu_of_counts(*clipped_counts(hypotheses, references, split=lambda text: text.split(" ")))


def bleu_lowercased(hypotheses, references):  # "to be safe"
    return _bleu_of_counts(*clipped_counts([h.lower() for h in hypotheses], [r.lower() for r in references]))


def bleu_skipping_short_outputs(hypotheses, references):
    kept = [(h, r) for h, r in zip(hypotheses, references) if len(h.split()) >= 4]
    return _bleu_of_counts(*clipped_counts([h for h, _ in kept], [r for _, r in kept]))


def bleu_counting_len_minus_n_plus_1(hypotheses, references):
    matches, _, c, r = clipped_counts(hypotheses, references)
    totals = [sum(len(h.split()) - n + 1 for h in hypotheses) for n in range(1, 5)]
    return _bleu_of_counts(matches, totals, c, r)


def bleu_dividing_before_testing(hypotheses, references):
    matches, totals, c, r = clipped_counts(hypotheses, references)
    precisions = [m / t for m, t in zip(matches, totals)]  # 0 / 0 where no output has n words
    return 0.0 if min(precisions) == 0 else _bleu_of_counts(matches, totals, c, r)


def bleu_of_lowercase_letter_runs(hypotheses, references):  # a mistake without a diagnosis: "A" is dropped
    return _bleu_of_counts(*clipped_counts(hypotheses, references, split=lambda text: re.findall(r"[a-z]+", text)))


def step_clamping_the_output(attn, y, cache):  # a mistake without a diagnosis, seen with large values only
    return _step()(attn, y, cache).clamp(-50, 50)


def bleu_by_regex_words(hypotheses, references):  # right: words as runs of non-spaces
    return _bleu_of_counts(*clipped_counts(hypotheses, references, split=lambda text: re.findall(r"\S+", text)))


class BLEUScoreLike:
    """A result with a .score, as sacrebleu returns, computed without sacrebleu."""

    def __init__(self, score):
        self.score = score


WRONG_ANSWERS = [
    # 9.1
    (check_self_attention_step, not_done, r"raised NotImplementedError: the exercise is not done"),
    (check_self_attention_step, _step(dim=1), r"appended the new position along dim=1, the heads"),
    (check_self_attention_step, _step(dim=0), r"along dim=0, the batch"),
    (check_self_attention_step, _step(dim=-1), r"along dim=3 \(-1\), the width d_k"),
    (check_self_attention_step, step_attending_before_storing_along_the_heads,
     r"(?s)raised ValueError: .* do not broadcast.*\nHint: the cache holds \(batch, h, t, d_k\): append .* "
     r"along dim=2"),
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
    (check_self_attention_step, step_softmax_in_float32, r"right only to float32's precision"),
    (check_self_attention_step, step_y_as_float,
     r"(?s)must have the same dtype.*Note: this call's attn and y are torch\.float64: create every tensor"),
    (check_self_attention_step, step_squeezing_the_output,
     r"expected \(1, 1, 64\), got \(64, 1\)\. The batch here is one sentence: a squeeze\(\) dropped"),
    (check_self_attention_step, step_with_one_buffer_for_every_cache,
     r"cache\['self_k'\] after step 1 changed when step_with_one_buffer_for_every_cache was called again, on "
     r"another cache: .*Each cache must hold tensors of its own"),
    (check_self_attention_step, step_clamping_the_output,
     r"(?s)but not with \(batch=4, h=5, d_k=1, steps=3\).*Note: the scores here are all far below zero"),
    (check_self_attention_step, step_returning_one_buffer,
     r"the output step_returning_one_buffer returned at step 1 changed when .* called again"),
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
    (check_bpe_merge_step, not_done, r"raised NotImplementedError: the exercise is not done"),
    (check_bpe_merge_step, _merge_step(count="once per word type"), r"you counted each word once"),
    (check_bpe_merge_step, _merge_step(tie="first"),
     r"all occur 9 times, and you took \('e', 's'\), the first one counted .*the largest pair"),
    (check_bpe_merge_step, _merge_step(tie="smaller"),
     r"and the smallest as Python compares tuples of strings\. .*the largest pair.*\('s', 't</w>'\)"),
    (check_bpe_merge_step, _merge_step(count="across words"), r"joins the end of one word .* to the start of another"),
    (check_bpe_merge_step, _merge_step(count="once per word"), r"counted a pair once per word"),
    (check_bpe_merge_step, _merge_step(merge_word=merge_without_skip), r"joined overlapping occurrences twice"),
    (check_bpe_merge_step, _merge_step(merge_word=merge_from_the_right), r"merged from the right"),
    (check_bpe_merge_step, _merge_step(merge_word=merge_as_text), r"str\.replace does not see where a symbol ends"),
    (check_bpe_merge_step, _merge_step(in_place=True), r"changed the corpus it was given"),
    (check_bpe_merge_step, _merge_step(only_merged=True), r"words are missing from the merged corpus"),
    (check_bpe_merge_step, _merge_step(counts="ones"), r"has the count 1 instead of"),
    (check_bpe_merge_step, _merge_step(joined_pair=True), r"a tuple of two symbols.*not joined.*'st</w>'"),
    (check_bpe_merge_step, _merge_step(merge_word=merge_first_only),
     r"at merge 3 \(h \+ a\) you joined only the first occurrence of the pair in each word.*Here 'h a h a h</w>' "
     r"became 'ha h a h</w>' instead of 'ha ha h</w>'"),
    (check_bpe_merge_step, _merge_step(merge_word=merge_replacing_once), r"joined only the first occurrence"),
    (check_bpe_merge_step, merge_step_into_one_dict,
     r"the merged corpus merge_step_into_one_dict returned at merge 1 changed when it was called again"),
    (check_bpe_merge_step, _merge_step(words=4),
     r"passed with \(word_types=4, merges=13\) but not with \(word_types=9, merges=15\)"),
    # 9.4
    (check_bleu, not_done, r"raised NotImplementedError: the exercise is not done"),
    (check_bleu, _bleu_answer(percent=False), r"your score is a fraction; BLEU is reported in percent"),
    (check_bleu, _bleu_answer(bp="inverted"), r"brevity penalty is inverted: .*c = 14 .* r = 15"),
    (check_bleu, _bleu_answer(bp="inverted min"), r"brevity penalty is missing, or inverted and capped at 1"),
    (check_bleu, _bleu_answer(bp="no min"), r"rewards long outputs: with c = 26 > r = 22"),
    (check_bleu, _bleu_answer(bp="none"), r"brevity penalty is missing"),
    (check_bleu, _bleu_answer(clip=False), r"matches are not clipped"),
    (check_bleu, _bleu_answer(mean="arithmetic"), r"arithmetic mean of the four precisions"),
    (check_bleu, _bleu_answer(level="sentence"), r"averaged the BLEU of each sentence"),
    (check_bleu, _bleu_answer(level="macro"), r"averaged the precisions of the sentences"),
    (check_bleu, _bleu_answer(max_n=3), r"1- to 3-gram precisions"),
    (check_bleu, _bleu_answer(denominator="reference"), r"divided the matches by the reference's n-grams"),
    (check_bleu, bleu_taking_log_of_zero, r"(?s)math domain error.*\nHint: a precision p_n is 0 here[^\n]*$"),
    (check_bleu, bleu_lowercased, r"you lowercased the sentences: BLEU compares the words as they are written"),
    (check_bleu, bleu_split_at_single_spaces, r"you split at single spaces, str\.split\(' '\)"),
    (check_bleu, bleu_skipping_short_outputs, r"you left out the outputs shorter than 4 words"),
    (check_bleu, bleu_counting_len_minus_n_plus_1, r"you counted len\(words\) - n \+ 1 n-grams"),
    (check_bleu, _bleu_answer(short="truncated"), r"counted an output shorter than n words as one n-gram"),
    (check_bleu, bleu_dividing_before_testing,
     r"(?s)\(\['a dog'\], \['a dog runs'\]\) raised ZeroDivisionError.*\nHint: the outputs here are shorter "
     r"than 4 words.*p_n = 0 / 0[^\n]*$"),
    (check_bleu, bleu_of_lowercase_letter_runs,
     r"(?s)gives .* on 5 sentences where sacrebleu's corpus BLEU is 23\.0314.*Note: these sentences hold capitals"),
    (check_bleu, _bleu_answer(sentences=2),
     r"passed with \(sentences=2, hyp_words=14, ref_words=15\) but not with \(sentences=3, "),
    (check_bleu, lambda h, r: BLEU().corpus_score(h, [r]), r"calls sacrebleu \(corpus_score\).*compute BLEU yourself"),
    (check_bleu, course_bleu, r"calls sacrebleu \(corpus_score\), directly or through the course's corpus_bleu"),
    (check_bleu, sacrebleu_unsmoothed, r"calls sacrebleu \(corpus_score\)"),
    (check_bleu, bleu_from_sacrebleu_counts, r"calls sacrebleu \(compute_bleu\)"),
    (check_bleu, lambda h, r: BLEUScoreLike(_bleu(h, r)), r"returned a BLEUScoreLike; return the score itself"),
    (check_bleu, lambda h, r: f"{_bleu(h, r):.2f}", r"should return BLEU as a number \(a float\), got str"),
]


@pytest.mark.parametrize("check, wrong, message", WRONG_ANSWERS,
                         ids=[f"{c.__name__}-{m[:30]}" for c, _, m in WRONG_ANSWERS])
def test_check_names_the_mistake_of_a_typical_wrong_answer(check, wrong, message):
    with pytest.raises(ExerciseFailed, match=message):
        check(wrong)


RIGHT_ANSWERS = [
    (check_self_attention_step, _step()),  # decoder_layer_step's self-attention, as a function
    (check_cached_greedy_decode, course_greedy),
    (check_bpe_merge_step, course_merge_step),
    (check_bleu, _bleu_answer()),
    # Other right answers, written otherwise.
    (check_self_attention_step, step_with_a_buffer_in_each_cache),
    (check_self_attention_step, step_with_torch_sdpa),
    (check_self_attention_step, step_with_logsumexp),
    (check_self_attention_step, step_from_an_empty_float32_cache),
    (check_self_attention_step, step_scaled_by_a_float32_tensor),
    (check_cached_greedy_decode, greedy_by_topk),
    (check_bpe_merge_step, merge_step_by_regex),
    (check_bleu, bleu_by_regex_words),
    (check_bleu, lambda h, r: _bleu_of_counts(*clipped_counts(h, r))),  # the solution's order: 0 before dividing
]


@pytest.mark.parametrize("check, fn", RIGHT_ANSWERS,
                         ids=[f"{c.__name__}-{getattr(f, '__name__', 'lambda')}-{i}" for i, (c, f) in enumerate(RIGHT_ANSWERS)])
def test_check_passes_on_the_course_code_and_other_right_answers(check, fn, capsys):
    check(fn)
    assert f"{check.__name__} passed: " in capsys.readouterr().out


def test_a_check_leaves_the_global_random_state_as_it_was(capsys):
    before = torch.random.get_rng_state()
    for check, fn in RIGHT_ANSWERS[:4]:
        check(fn)
    assert torch.equal(torch.random.get_rng_state(), before)


def test_the_decoding_check_gives_every_mistake_an_output_of_its_own():
    # Each diagnosis is found by comparing with one mistake's output: two mistakes with the
    # same output on a model would get the first one's message.
    from annotated.support.grading.translation import (
        _DECODE_SETTINGS, DECODE_SIZES, _choose_eos, _decode, _decoding_model, _decoding_source,
    )
    variants = [dict(start="0"), dict(start="t"), dict(mask_source=False), dict(pad_after_eos=False),
                dict(stop="never"), dict(stop="never", pad_after_eos=False), dict(stop="any"),
                dict(remember_done=False), dict(feed="prefix")]
    for sizes, settings in zip(DECODE_SIZES, _DECODE_SETTINGS):
        model, (src, src_mask) = _decoding_model(sizes, settings), _decoding_source(sizes, seed=sizes["vocab"] + 1)
        bos, pad, max_len = settings["bos"], settings["pad"], sizes["max_len"]
        eos = _choose_eos(greedy_decode(model, src, src_mask, max_len, bos, None, pad_idx=pad), bos, pad, sizes["vocab"])
        outputs = [_decode(model, src, src_mask, max_len, bos, eos, pad)]
        outputs += [_decode(model, src, src_mask, max_len, bos, eos, pad, **v) for v in variants]
        if settings["norm_first"]:
            outputs.append(_decode(model, src, src_mask, max_len, bos, eos, pad, final_norm=False))
        keys = [tuple(map(tuple, out.tolist())) for out in outputs]
        assert len(set(keys)) == len(keys), sizes
        assert outputs[0].size(1) < max_len  # every sentence ends before the limit, ...
        ends = [int((row == eos).nonzero()[0]) for row in outputs[0]]
        assert len(set(ends)) >= 3  # ... at different steps


def test_the_toy_corpora_are_what_their_comments_say():
    from annotated.support.grading.translation import BLEU_CORPORA, _bleu_sizes

    sizes = [_bleu_sizes(*corpus) for corpus in BLEU_CORPORA]
    assert sizes[0]["hyp_words"] < sizes[0]["ref_words"] and sizes[1]["hyp_words"] > sizes[1]["ref_words"]
    scores = [BLEU(tokenize="none", smooth_method="none").corpus_score(h, [r]) for h, r in BLEU_CORPORA]
    assert all(min(s.counts) > 0 for s in scores[:2]) and scores[2].counts[3] == 0 and scores[2].score == 0
    assert corpus_bleu(*BLEU_CORPORA[2]).score > 0  # the course's corpus_bleu smooths
    hypotheses, references = BLEU_CORPORA[3]  # capitals, stray spaces, a one-word and an empty output
    assert min(scores[3].counts) > 0 and "" in hypotheses and min(len(h.split()) for h in hypotheses if h) == 1
    assert any("  " in h for h in hypotheses) and any(h != h.strip() for h in hypotheses)
    assert BLEU(tokenize="none", smooth_method="none", lowercase=True).corpus_score(
        hypotheses, [references]).score > scores[3].score  # lowercasing changes it
    assert scores[4].totals[2:] == [0, 0] and scores[4].score == 0  # no 3-gram at all
