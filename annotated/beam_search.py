"""Beam search with a length penalty (paper §6.1; the penalty from Wu et al., 2016, §7).

Greedy decoding commits to the most likely token at every step, and a token that looks
best now can lead to a worse sentence. Beam search keeps the ``beam_size`` best partial
translations ("hypotheses") instead, extends each by every token, and keeps the best
``beam_size`` of the results. Summed log-probabilities favour short outputs (each token
adds a negative term), so hypotheses are ranked by

    s(Y) = log P(Y | X) / lp(Y),    lp(Y) = ((5 + |Y|) / 6)^alpha

The paper translates with a beam of 4 and alpha = 0.6.

Notebook: ``09_translating_german_to_english.ipynb``.
"""

import torch

from annotated.decoding import init_cache, next_token_logits
from annotated.model import EncoderDecoder


def lp(length: torch.Tensor, alpha: float) -> torch.Tensor:
    """lp(Y) = ((5 + |Y|) / 6)^alpha; 1 for a single token, and alpha = 0 turns it off."""
    return ((5 + length) / 6) ** alpha


def reorder_cache(cache: list[dict[str, torch.Tensor]], rows: torch.Tensor) -> None:
    """Keep the cached self-attention keys and values of the hypotheses in ``rows``, in
    that order. The memory's keys and values are the same for every hypothesis of a
    sentence, and hypotheses never move to another sentence, so they stay as they are."""
    for layer_cache in cache:
        layer_cache["self_k"] = layer_cache["self_k"].index_select(0, rows)  # (batch * k, h, t, d_k)
        layer_cache["self_v"] = layer_cache["self_v"].index_select(0, rows)  # (batch * k, h, t, d_k)


@torch.no_grad()
def beam_search(model: EncoderDecoder, src: torch.Tensor, src_mask: torch.Tensor | None, beam_size: int = 4,
                max_len: int = 100, length_penalty: float = 0.6, bos_idx: int = 1, eos_idx: int = 2,
                pad_idx: int = 0) -> torch.Tensor:
    """The best hypothesis under s(Y) for every sentence of the batch.

    src (batch, L_src), src_mask (batch, 1, L_src). Returns (batch, <= max_len) token ids
    starting with ``bos_idx``, ``pad_idx`` after ``eos_idx``, like ``greedy_decode``; with
    ``beam_size=1`` it is greedy decoding. ``length_penalty`` is alpha (0: rank by log P
    alone). Call ``model.eval()`` first.
    """
    if beam_size < 1:
        raise ValueError(f"beam_size must be at least 1, got {beam_size}; beam_size=1 is greedy decoding")
    batch, k, device = src.size(0), beam_size, src.device
    # Sentence i's k hypotheses are rows i*k .. i*k + k - 1 of every (batch * k, ...) tensor.
    memory = model.encode(src, src_mask).repeat_interleave(k, dim=0)  # (batch * k, L_src, d_model)
    if src_mask is not None:
        src_mask = src_mask.repeat_interleave(k, dim=0)  # (batch * k, 1, L_src)
    cache = init_cache(model, memory)
    ys = torch.full((batch * k, 1), bos_idx, dtype=torch.long, device=device)
    # All k hypotheses start as the same "<s>"; only one is alive, or the first step
    # would pick the same token k times.
    log_prob = torch.full((batch, k), float("-inf"), device=device)
    log_prob[:, 0] = 0.0
    length = torch.zeros(batch, k, device=device)  # |Y|: tokens after <s>, </s> included
    finished = torch.zeros(batch, k, dtype=torch.bool, device=device)
    first_row = torch.arange(batch, device=device).unsqueeze(1) * k  # (batch, 1)
    for _ in range(max_len - 1):
        logits = next_token_logits(model, memory, src_mask, ys, cache)  # (batch * k, vocab)
        vocab = logits.size(-1)
        logp = logits.log_softmax(dim=-1).view(batch, k, vocab)
        # A finished hypothesis has one continuation, pad, that costs nothing and adds no length.
        pad_only = torch.full((vocab,), float("-inf"), device=device)
        pad_only[pad_idx] = 0.0
        logp = torch.where(finished.unsqueeze(-1), pad_only, logp)
        candidates = log_prob.unsqueeze(-1) + logp  # (batch, k, vocab)
        new_length = length + (~finished).float()  # (batch, k)
        score = candidates / lp(new_length, length_penalty).unsqueeze(-1)
        best = score.view(batch, k * vocab).topk(k, dim=-1).indices  # (batch, k)
        beam, token = best // vocab, best % vocab  # which hypothesis each extends, by which token
        log_prob = candidates.view(batch, k * vocab).gather(1, best)
        length = new_length.gather(1, beam)
        finished = finished.gather(1, beam) | (token == eos_idx)
        rows = (first_row + beam).view(-1)  # (batch * k,): the rows the survivors come from
        ys = torch.cat([ys[rows], token.view(-1, 1)], dim=1)  # (batch * k, t + 1)
        reorder_cache(cache, rows)
        if finished.all():
            break
    best_hyp = (log_prob / lp(length, length_penalty)).argmax(dim=-1)  # (batch,)
    out = ys.view(batch, k, -1)[torch.arange(batch, device=device), best_hyp]  # (batch, t)
    # Longer hypotheses that lost may have left columns of padding at the end.
    last = int((out != pad_idx).any(dim=0).nonzero().max())
    return out[:, : last + 1]
