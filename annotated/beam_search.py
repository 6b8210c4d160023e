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

Notebook: ``09_translating_german_to_english.ipynb``.
"""

from collections.abc import Callable

import torch

from annotated.decoding import init_cache, next_token_logits
from annotated.model import EncoderDecoder
from annotated.support.checks import check_beam_arguments, check_decoding_inputs


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


@torch.no_grad()
def beam_search(model: EncoderDecoder, src: torch.Tensor, src_mask: torch.Tensor | None, beam_size: int = 4,
                max_len: int = 100, length_penalty: float = 0.6, bos_idx: int = 1, eos_idx: int = 2,
                pad_idx: int = 0) -> torch.Tensor:
    """The best finished hypothesis under s(Y) for every sentence of the batch.

    src (batch, L_src), src_mask (batch, 1, L_src). Returns (batch, <= max_len) token ids
    starting with ``bos_idx``, ``pad_idx`` after ``eos_idx``, like ``greedy_decode``; with
    ``beam_size=1`` and ``length_penalty=0`` it is greedy decoding. ``length_penalty`` is
    alpha (0: rank by log P alone). Call ``model.eval()`` first.
    """
    check_decoding_inputs(model, src, src_mask, max_len, bos_idx, eos_idx, pad_idx)  # or a clear error
    check_beam_arguments(beam_size, length_penalty)
    batch, k, device = src.size(0), beam_size, src.device
    if batch == 0 or max_len == 1:  # nothing to search: the output is <s> alone
        return torch.full((batch, 1), bos_idx, dtype=torch.long, device=device)
    # Sentence i's k live hypotheses are rows i*k .. i*k + k - 1 of every (sentences * k, ...) tensor.
    memory = model.encode(src, src_mask).repeat_interleave(k, dim=0)  # (batch * k, L_src, d_model)
    if src_mask is not None:
        src_mask = src_mask.repeat_interleave(k, dim=0)  # (batch * k, 1, L_src)
    cache = init_cache(model, memory)
    ys = torch.full((batch * k, 1), bos_idx, dtype=torch.long, device=device)
    # All k hypotheses start as the same "<s>"; only one is alive, or the first step
    # would pick the same token k times.
    log_prob = torch.full((batch, k), float("-inf"), device=device)
    log_prob[:, 0] = 0.0
    # The best finished hypothesis of each sentence so far, and its score s(Y).
    best_score = torch.full((batch,), float("-inf"), device=device)
    best = torch.full((batch, max_len), pad_idx, dtype=torch.long, device=device)
    active = torch.arange(batch, device=device)  # the sentences still searching
    ceiling = lp(float(max_len - 1), length_penalty)  # the largest lp(Y) any hypothesis can reach
    for t in range(1, max_len):
        n = active.numel()
        logits = next_token_logits(model, memory, src_mask, ys, cache)  # (n * k, vocab)
        vocab = logits.size(-1)
        candidates = (log_prob.unsqueeze(-1) + logits.log_softmax(dim=-1).view(n, k, vocab)).view(n, k * vocab)
        # 2k candidates always hold k that do not end in </s> (each hypothesis has one </s>).
        cand_logp, cand = candidates.topk(min(2 * k, k * vocab), dim=-1)  # (n, 2k), best first
        beam, token = cand // vocab, cand % vocab
        rows = (torch.arange(n, device=device).unsqueeze(1) * k + beam)  # (n, 2k) rows they extend
        is_eos = token == eos_idx
        # Finished: the candidates among the k best that end in </s>; s(Y) with |Y| = t.
        ends = is_eos & (torch.arange(cand.size(1), device=device) < k) & cand_logp.isfinite()
        score = torch.where(ends, cand_logp / lp(float(t), length_penalty), float("-inf"))
        top_score, top = score.max(dim=-1)  # (n,)
        better = top_score > best_score[active]
        if better.any():
            sentences = active[better]
            new = torch.cat([ys[rows[better, top[better]]],
                             torch.full((int(better.sum()), 1), eos_idx, device=device)], dim=1)
            best[sentences, : t + 1] = new
            best_score[sentences] = top_score[better]
        # The next beam: the k best candidates that do not end in </s>.
        order = torch.where(is_eos, cand.size(1), torch.arange(cand.size(1), device=device)).argsort(dim=-1)[:, :k]
        log_prob = cand_logp.gather(1, order)  # (n, k)
        keep_rows = rows.gather(1, order).view(-1)  # (n * k,)
        ys = torch.cat([ys[keep_rows], token.gather(1, order).view(-1, 1)], dim=1)  # (n * k, t + 1)
        select_rows(cache, keep_rows, ("self_k", "self_v"))
        if t == max_len - 1:  # out of length: the live hypotheses compete as they are
            score = log_prob / lp(float(t), length_penalty)
            top_score, top = score.max(dim=-1)
            better = top_score > best_score[active]
            best[active[better], : t + 1] = ys.view(n, k, -1)[better, top[better]]
            break
        # A sentence is done once none of its live hypotheses can beat its best finished one.
        done = log_prob.max(dim=-1).values / ceiling <= best_score[active]
        if done.all():
            break
        if done.any():  # drop the finished sentences from every per-row tensor
            keep = (~done).nonzero().squeeze(1)
            keep_rows = (keep.unsqueeze(1) * k + torch.arange(k, device=device)).view(-1)
            active, log_prob = active[keep], log_prob[keep]
            ys, memory = ys[keep_rows], memory[keep_rows]
            src_mask = src_mask[keep_rows] if src_mask is not None else None
            select_rows(cache, keep_rows, ("self_k", "self_v", "memory_k", "memory_v"))
    # Trim the columns of padding that no sentence needs.
    last = int((best != pad_idx).any(dim=0).nonzero().max())
    return best[:, : last + 1]
