"""Beam search with a length penalty (paper §6.1; the penalty from Wu et al., 2016, §7).

Greedy decoding commits to the most likely token at every step, and a token that looks
best now can lead to a worse sentence. Beam search keeps the ``beam_size`` (k) best partial
translations ("hypotheses") instead, extends each by every token, and keeps the k best of
the results. A hypothesis that ends with ``</s>`` is *finished*: it is set aside, and its
slot goes to the next best live continuation, so k hypotheses keep growing. Summed
log-probabilities favour short outputs (each token adds a negative term), so finished
hypotheses are compared by

    s(Y) = log P(Y | X) / lp(Y),    lp(Y) = ((5 + |Y|) / 6)^alpha

The paper translates with a beam of 4 and alpha = 0.6.

A sentence's search ends when no live hypothesis can still beat its best finished one:
log P only falls as a hypothesis grows, and lp(Y) is largest at the longest length
allowed, so log P / lp(max_len - 1) bounds every score a live hypothesis can still reach.
With alpha = 0 that bound is log P itself, and ``beam_size=1`` is exactly greedy decoding;
with alpha > 0 a single beam may go on past greedy's ``</s>`` when a longer output could
still score higher.

Notebook: ``09_decoding.ipynb`` (``lp`` and ``simple_beam_search`` are shown there; the batched
``beam_search`` is described in its prose and checked against ``simple_beam_search``).
"""

from collections.abc import Callable

import torch

from annotated.decoding import init_cache, next_token_logits
from annotated.model import EncoderDecoder
from annotated.support import translation_guards as guards
from annotated.support.beams import drop_done
from annotated.support.translation_guards import guarded


def lp(length: torch.Tensor | float, alpha: float) -> torch.Tensor | float:
    """lp(Y) = ((5 + |Y|) / 6)^alpha; 1 for a single token, and alpha = 0 turns it off."""
    return ((5 + length) / 6) ** alpha


def simple_beam_search(next_log_probs: Callable[[list[int]], dict[int, float]], k: int, max_len: int,
                       alpha: float, bos: int, eos: int, trace: list | None = None) -> list[int]:
    """Beam search for one sentence, in plain Python: short enough to follow by hand.

    ``next_log_probs(prefix)`` gives {token: log P(token | prefix)}; returns the best
    finished hypothesis (``bos`` first), or the best live one if none finished in time.
    ``trace``, if given, receives (live, finished) after every step.
    """
    live = [([bos], 0.0)]  # (tokens, log P)
    finished = []  # (tokens, s(Y))
    while live:
        candidates = sorted(((tokens + [t], logp + lt) for tokens, logp in live
                             for t, lt in next_log_probs(tokens).items()), key=lambda c: -c[1])[: 2 * k]
        # Hypotheses ending in </s> among the k best are finished and leave the beam.
        finished += [(y, logp / lp(len(y) - 1, alpha)) for y, logp in candidates[:k] if y[-1] == eos]
        live = [(y, logp) for y, logp in candidates if y[-1] != eos][:k]
        if trace is not None:
            trace.append((list(live), list(finished)))
        best_finished = max((s for _, s in finished), default=float("-inf"))
        if all(logp / lp(max_len - 1, alpha) <= best_finished for _, logp in live):
            break  # no live hypothesis can catch up with the best finished one
        if len(live[0][0]) == max_len:
            finished += [(y, logp / lp(len(y) - 1, alpha)) for y, logp in live]
            break
    return max(finished, key=lambda f: f[1])[0]


def select_rows(cache: list[dict[str, torch.Tensor]], rows: torch.Tensor, names: tuple[str, ...]) -> None:
    """Keep rows ``rows`` (in that order) of the cached tensors called ``names``, in every layer."""
    for layer_cache in cache:
        for name in names:
            layer_cache[name] = layer_cache[name].index_select(0, rows)  # (len(rows), h, t, d_k)


def set_aside_finished(ys: torch.Tensor, rows: torch.Tensor, token: torch.Tensor, cand_logp: torch.Tensor,
                       t: int, k: int, alpha: float, eos_idx: int, best: torch.Tensor, best_score: torch.Tensor,
                       active: torch.Tensor) -> None:
    """Among each sentence's k best candidates (n, 2k), the best one that ends in </s> replaces
    the sentence's best finished hypothesis (``best``, ``best_score``) if its s(Y) is higher."""
    ends = (token == eos_idx) & (torch.arange(token.size(1), device=token.device) < k) & cand_logp.isfinite()
    score = torch.where(ends, cand_logp / lp(float(t), alpha), float("-inf"))  # s(Y), |Y| = t
    top_score, top = score.max(dim=-1)  # (n,)
    better = top_score > best_score[active]
    if better.any():
        sentences, eos = active[better], torch.full((int(better.sum()), 1), eos_idx, device=ys.device)
        best[sentences, : t + 1] = torch.cat([ys[rows[better, top[better]]], eos], dim=1)
        best_score[sentences] = top_score[better]


def compete_live(ys: torch.Tensor, log_prob: torch.Tensor, t: int, alpha: float, best: torch.Tensor,
                 best_score: torch.Tensor, active: torch.Tensor) -> None:
    """Out of length: each sentence's best live hypothesis, scored as it is (|Y| = t), replaces its
    best finished one if its s(Y) is higher."""
    n, k = log_prob.shape
    top_score, top = (log_prob / lp(float(t), alpha)).max(dim=-1)  # (n,)
    better = top_score > best_score[active]
    best[active[better], : t + 1] = ys.view(n, k, -1)[better, top[better]]


@torch.no_grad()
def beam_search(model: EncoderDecoder, src: torch.Tensor, src_mask: torch.Tensor | None, beam_size: int = 4,
                max_len: int = 100, length_penalty: float = 0.6, bos_idx: int = 1, eos_idx: int = 2,
                pad_idx: int = 0) -> torch.Tensor:
    """``simple_beam_search`` for all sentences of src (batch, L_src) at once; (batch, <= max_len) ids like greedy's."""
    batch, k, device = src.size(0), beam_size, src.device
    if batch == 0 or max_len == 1:  # nothing to search: the output is <s> alone
        return torch.full((batch, 1), bos_idx, dtype=torch.long, device=device)
    # Sentence i's k live hypotheses are rows i*k .. i*k + k - 1 of every (sentences * k, ...) tensor.
    memory = model.encode(src, src_mask).repeat_interleave(k, dim=0)  # (batch * k, L_src, d_model)
    src_mask = src_mask.repeat_interleave(k, dim=0) if src_mask is not None else None  # (batch * k, 1, L_src)
    cache, ys = init_cache(model, memory), torch.full((batch * k, 1), bos_idx, dtype=torch.long, device=device)
    # One live "<s>" per sentence (log P 0), not k: else the first step would pick one token k times.
    log_prob = torch.tensor([0.0] + [float("-inf")] * (k - 1), device=device).repeat(batch, 1)  # (batch, k)
    best_score = torch.full((batch,), float("-inf"), device=device)  # each sentence's best finished s(Y)
    best = torch.full((batch, max_len), pad_idx, dtype=torch.long, device=device)  # ... and its tokens
    active, ceiling = torch.arange(batch, device=device), lp(float(max_len - 1), length_penalty)
    for t in range(1, max_len):
        n, logits = active.numel(), next_token_logits(model, memory, src_mask, ys, cache)  # (n * k, V)
        vocab = logits.size(-1)
        candidates = (log_prob.unsqueeze(-1) + logits.log_softmax(dim=-1).view(n, k, vocab)).view(n, k * vocab)
        cand_logp, cand = candidates.topk(min(2 * k, k * vocab), dim=-1)  # (n, 2k): k of them do not end in </s>
        rows, token = torch.arange(n, device=device).unsqueeze(1) * k + cand // vocab, cand % vocab
        set_aside_finished(ys, rows, token, cand_logp, t, k, length_penalty, eos_idx, best, best_score, active)
        position = torch.arange(cand.size(1), device=device)  # the next beam: the k best not ending in </s>
        order = torch.where(token == eos_idx, cand.size(1), position).argsort(dim=-1)[:, :k]
        log_prob, keep_rows = cand_logp.gather(1, order), rows.gather(1, order).view(-1)  # (n, k), (n * k,)
        ys = torch.cat([ys[keep_rows], token.gather(1, order).view(-1, 1)], dim=1)  # (n * k, t + 1)
        select_rows(cache, keep_rows, ("self_k", "self_v"))
        if t == max_len - 1:  # out of length: the live hypotheses compete as they are
            compete_live(ys, log_prob, t, length_penalty, best, best_score, active)
            break
        # A sentence is done once none of its live hypotheses can beat its best finished one.
        done = log_prob.max(dim=-1).values / ceiling <= best_score[active]
        if done.all():
            break
        if done.any():  # drop the finished sentences from every per-row tensor (bookkeeping, for speed)
            active, log_prob, ys, memory, src_mask = drop_done(done, k, active, log_prob, ys, memory, src_mask, cache)
    last = int((best != pad_idx).any(dim=0).nonzero().max())  # trim the padding that no sentence needs
    return best[:, : last + 1]


# The input guards (annotated/support/translation_guards.py), which the notebook's cells leave out:
# the model, tensors and ids of greedy decoding, a positive integer beam and a finite alpha >= 0.
beam_search = guarded(beam_search, guards.beam_search_inputs)
