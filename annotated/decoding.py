"""Greedy decoding, one token at a time, with a key/value cache (paper §3.2.3, §6.1).

At inference the decoder is auto-regressive: it reads the tokens it has produced so
far and predicts the next one. Rerunning the decoder over the whole prefix at every
step repeats work, because a position's keys and values never change once computed
(the look-ahead mask stops it from seeing later positions). The cache keeps, for each
decoder layer, the self-attention keys and values of the positions decoded so far,
and the encoder memory's keys and values for cross-attention, computed once. Each
step then runs the decoder on the newest position only, with exactly the same result.

Notebook: ``09_decoding.ipynb``. ``greedy_decode_simple``, the loop without a cache, is shown earlier, in
notebook 08. With its arguments checked first: ``annotated.support.guarded_training``.
"""

import torch
import torch.nn as nn

from annotated.attention import scaled_dot_product_attention
from annotated.masks import subsequent_mask
from annotated.model import DecoderLayer, EncoderDecoder
from annotated.multi_head import MultiHeadAttention
from annotated.support.translation_guards import cache_in_step, greedy_decode_inputs, guarded
from annotated.synthetic import BOS_IDX


@torch.no_grad()
def greedy_decode_simple(model: nn.Module, src: torch.Tensor, src_mask: torch.Tensor, max_len: int) -> torch.Tensor:
    memory = model.encode(src, src_mask)  # (batch, L_src, d_model), once
    ys = torch.full((src.size(0), 1), BOS_IDX)  # (batch, 1): every output starts with <s>
    for _ in range(max_len - 1):
        tgt_mask = subsequent_mask(ys.size(1)).unsqueeze(0)  # (1, t, t)
        states = model.decode(memory, src_mask, ys, tgt_mask)  # (batch, t, d_model): all t positions, again
        next_token = model.generator(states[:, -1]).argmax(dim=-1)  # (batch,): only the last one is used
        ys = torch.cat([ys, next_token.unsqueeze(1)], dim=1)  # (batch, t + 1)
    return ys


def init_cache(model: EncoderDecoder, memory: torch.Tensor) -> list[dict[str, torch.Tensor]]:
    """One dict per decoder layer, holding the memory's cross-attention keys and values
    ("memory_k", "memory_v"); decoding adds the self-attention ones ("self_k", "self_v")."""
    cache = []
    for layer in model.decoder.layers:
        attn = layer.src_attn
        cache.append({
            "memory_k": attn.split_heads(attn.W_K(memory)),  # (batch, h, L_src, d_k)
            "memory_v": attn.split_heads(attn.W_V(memory)),  # (batch, h, L_src, d_k)
        })
    return cache


def attend(attn: MultiHeadAttention, y: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
           mask: torch.Tensor | None) -> torch.Tensor:
    """Multi-head attention of the queries ``y`` (batch, 1, d_model) over keys and values
    already split into heads, (batch, h, L_k, d_k); ``mask`` (batch, 1, L_k) or None."""
    q = attn.split_heads(attn.W_Q(y))  # (batch, h, 1, d_k)
    if mask is not None:
        mask = mask.unsqueeze(1)  # the same mask for every head: (batch, 1, 1, L_k)
    x, _ = scaled_dot_product_attention(q, k, v, mask, attn.dropout)
    return attn.W_O(attn.merge_heads(x))  # (batch, 1, d_model)


def decoder_layer_step(layer: DecoderLayer, x: torch.Tensor, src_mask: torch.Tensor | None,
                       cache: dict[str, torch.Tensor]) -> torch.Tensor:
    """Run ``layer`` on the newest position x (batch, 1, d_model), appending its
    self-attention keys and values to ``cache``. Same sublayers as ``DecoderLayer.forward``,
    so post-norm and pre-norm layers both work."""

    def self_attention(y: torch.Tensor) -> torch.Tensor:
        sa = layer.self_attn
        k = sa.split_heads(sa.W_K(y))  # (batch, h, 1, d_k)
        v = sa.split_heads(sa.W_V(y))  # (batch, h, 1, d_k)
        if "self_k" in cache:
            k = torch.cat([cache["self_k"], k], dim=2)  # (batch, h, t, d_k)
            v = torch.cat([cache["self_v"], v], dim=2)  # (batch, h, t, d_k)
        cache["self_k"], cache["self_v"] = k, v
        # The newest position may see every earlier one, so no look-ahead mask is needed.
        return attend(sa, y, k, v, None)

    def src_attention(y: torch.Tensor) -> torch.Tensor:
        return attend(layer.src_attn, y, cache["memory_k"], cache["memory_v"], src_mask)

    x = layer.sublayer[0](x, self_attention)
    x = layer.sublayer[1](x, src_attention)
    return layer.sublayer[2](x, layer.feed_forward)


def next_token_logits(model: EncoderDecoder, memory: torch.Tensor, src_mask: torch.Tensor | None,
                      ys: torch.Tensor, cache: list[dict[str, torch.Tensor]] | None = None) -> torch.Tensor:
    """Logits (batch, vocab) for the token that follows ``ys`` (batch, t).

    Without a cache the decoder reruns over all t positions. With one, it runs on the
    newest token only: ``cache`` must hold the first t - 1 positions (it gains the t-th).
    """
    if cache is None:
        tgt_mask = subsequent_mask(ys.size(1), ys.device).unsqueeze(0)  # (1, t, t)
        return model.generator(model.decode(memory, src_mask, ys, tgt_mask)[:, -1])
    embed, position = model.tgt_embed  # Embeddings, PositionalEncoding
    x = position(embed(ys[:, -1:]), start=ys.size(1) - 1)  # (batch, 1, d_model)
    for layer, layer_cache in zip(model.decoder.layers, cache):
        x = decoder_layer_step(layer, x, src_mask, layer_cache)
    return model.generator(model.decoder.norm(x)[:, -1])  # (batch, vocab)


@torch.no_grad()
def greedy_decode(model: EncoderDecoder, src: torch.Tensor, src_mask: torch.Tensor | None, max_len: int,
                  bos_idx: int = 1, eos_idx: int | None = 2, use_cache: bool = True, pad_idx: int = 0) -> torch.Tensor:
    """Pick the most likely next token until every sentence has produced ``eos_idx``.

    src (batch, L_src), src_mask (batch, 1, L_src). Returns (batch, <= max_len) token ids
    starting with ``bos_idx``; after a sentence's ``eos_idx`` come ``pad_idx`` tokens
    (``eos_idx=None``: no sentence ends, every output runs to ``max_len``).
    Call ``model.eval()`` first: dropout would make every run different.
    """
    memory = model.encode(src, src_mask)  # (batch, L_src, d_model)
    ys = torch.full((src.size(0), 1), bos_idx, dtype=torch.long, device=src.device)
    done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
    cache = init_cache(model, memory) if use_cache else None
    for _ in range(max_len - 1):
        next_token = next_token_logits(model, memory, src_mask, ys, cache).argmax(dim=-1)  # (batch,)
        next_token = next_token.masked_fill(done, pad_idx)  # finished sentences only pad
        ys = torch.cat([ys, next_token.unsqueeze(1)], dim=1)  # (batch, t + 1)
        if eos_idx is not None:
            done |= next_token == eos_idx
        if done.all():
            break
    return ys


# The cache's length checked against the tokens before each step (annotated/support/translation_guards.py),
# which the notebook's cell leaves out: a cache out of step with ys is a ValueError saying how to call it.
next_token_logits = guarded(next_token_logits, cache_in_step, by_name=False)
# The source and max_len of both greedy decoders: max_len below 1 returned <s> alone, silently.
greedy_decode_simple = guarded(greedy_decode_simple, greedy_decode_inputs)
greedy_decode = guarded(greedy_decode, greedy_decode_inputs)
