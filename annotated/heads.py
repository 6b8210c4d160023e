"""What the attention heads learned: their weights, measured and switched off.

A trained model has three kinds of attention, each with N layers of h heads:
encoder self-attention (German x German), decoder masked self-attention (English x
English) and encoder-decoder attention (English queries x German keys). This module reads
their weights on a teacher-forced batch, turns byte-pair pieces back into words, computes
the numbers the literature uses to describe a head (Clark et al., 2019, "What Does BERT
Look At?"; Voita et al., 2019, "Analyzing Multi-Head Self-Attention"; Vig and Belinkov, 2019,
"Analyzing the Structure of Attention in a Transformer Language Model"), and switches heads
off to see which ones matter (Michel et al., 2019, "Are Sixteen Heads Really Better than
One?").

Notebook: ``12_what_the_heads_learned.ipynb``.
"""

from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from annotated.batching import Batch, collate
from annotated.decoding import greedy_decode
from annotated.bpe import JOIN
from annotated.model import EncoderDecoder
from annotated.multi_head import MultiHeadAttention
from annotated.support import translation_guards as guards
from annotated.support.checks import check_head, check_pieces
from annotated.support.translation_guards import guarded
from annotated.support.tokenizer import Tokenizer
from annotated.vocab import BOS, EOS, PAD

KINDS = ("encoder", "decoder", "cross")  # self-attention of each stack, and encoder-decoder attention


def attention_modules(model: EncoderDecoder) -> dict[str, list[MultiHeadAttention]]:
    """The model's attention blocks by kind, one per layer."""
    return {"encoder": [layer.self_attn for layer in model.encoder.layers],
            "decoder": [layer.self_attn for layer in model.decoder.layers],
            "cross": [layer.src_attn for layer in model.decoder.layers]}


@torch.no_grad()
def collect_attention(model: EncoderDecoder, batch: Batch) -> dict[str, torch.Tensor]:
    """Run the model on a teacher-forced batch and return every head's weights by kind:
    (layers, batch, h, L_q, L_k). Encoder: queries and keys are source positions; decoder:
    target input positions (<s> y_1 ...); cross: target input positions x source positions."""
    blocks = attention_modules(model)
    for attn in (a for layer_list in blocks.values() for a in layer_list):
        attn.keep_attention = True
    try:
        model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
        return {kind: torch.stack([attn.attention for attn in layer_list]) for kind, layer_list in blocks.items()}
    finally:
        for attn in (a for layer_list in blocks.values() for a in layer_list):
            attn.keep_attention, attn.attention = False, None


def teacher_forced_batches(tokenizer: Tokenizer, pairs: list[tuple[str, str]], batch_size: int = 100) -> list[Batch]:
    """(German, English) sentence pairs as batches for teacher forcing, sorted by length so that
    little is padding; the order of the pairs is not kept."""
    examples = sorted((tokenizer.encode_pair(de, en) for de, en in pairs), key=lambda ex: (len(ex[1]), len(ex[0])))
    pad = tokenizer.src_vocab[PAD]
    return [collate(examples[i : i + batch_size], pad) for i in range(0, len(examples), batch_size)]


@dataclass
class SentenceAttention:
    """One sentence pair's attention, every layer and head, with the tokens on each axis.

    Decoder row i *reads* ``read[i]`` (``<s>`` first) and is trained to *produce*
    ``produced[i]``, the next token (``</s>`` last): both label the decoder's rows."""

    source: list[str]  # the encoder's input: <s>, German pieces, </s>
    read: list[str]  # the decoder's input: <s>, English pieces
    produced: list[str]  # what each decoder position predicts: English pieces, </s>
    weights: dict[str, torch.Tensor]  # kind -> (layers, h, L_q, L_k)

    def labels(self, kind: str) -> tuple[list[str], list[str]]:
        """The (query, key) tokens of one kind: rows are queries, columns keys."""
        return {"encoder": (self.source, self.source), "decoder": (self.read, self.read),
                "cross": (self.read, self.source)}[kind]


def until_eos(ids: list[int], eos: int) -> list[int]:
    """A decoded row up to and with its first ``eos`` (padding after it dropped); one is added if
    the row never ended."""
    return ids[: ids.index(eos) + 1] if eos in ids else [*ids, eos]


def sentence_attention(model: EncoderDecoder, tokenizer: Tokenizer, german: str,
                       english: str | None = None) -> SentenceAttention:
    """Every head's weights on one German sentence, teacher-forced on ``english``'s pieces, or,
    without it, on the model's own greedy translation (what it attended to while writing it)."""
    vocab_src, vocab_tgt = tokenizer.src_vocab, tokenizer.tgt_vocab
    if english is None:
        src = tokenizer.encode(german)
        out = greedy_decode(model.eval(), torch.tensor([src]), None, 2 * len(src) + 10, vocab_tgt[BOS],
                            vocab_tgt[EOS], pad_idx=vocab_tgt[PAD])[0].tolist()
        tgt = until_eos(out, vocab_tgt[EOS])
    else:
        src, tgt = tokenizer.encode_pair(german, english)
    weights = collect_attention(model.eval(), collate([(src, tgt)], vocab_src[PAD]))
    tokens = vocab_tgt.lookup_tokens(tgt)
    return SentenceAttention(vocab_src.lookup_tokens(src), tokens[:-1], tokens[1:],
                             {kind: w[:, 0] for kind, w in weights.items()})


def word_ids(pieces: list[str]) -> list[int]:
    """The word each byte-pair piece belongs to: a piece ending in ``@@`` is continued by the next."""
    ids, word = [], 0
    for i, piece in enumerate(pieces):
        if i > 0 and not pieces[i - 1].endswith(JOIN):
            word += 1
        ids.append(word)
    return ids


def words_of(pieces: list[str]) -> list[str]:
    """The words that the pieces spell, without the ``@@`` marks: ["feuer@@", "wehr", "@@."] -> ["feuerwehr", "."]."""
    words = [""] * (word_ids(pieces)[-1] + 1) if pieces else []
    for piece, w in zip(pieces, word_ids(pieces)):
        words[w] += piece.removeprefix(JOIN).removesuffix(JOIN)
    return words


def to_words(weights: torch.Tensor, query_pieces: list[str], key_pieces: list[str]) -> torch.Tensor:
    """Piece-level attention (..., L_q, L_k) -> word-level (..., W_q, W_k), the convention of
    Clark et al. (2019): attention *to* a word is the sum over its pieces, attention *from* a
    word the mean over its pieces. Rows still sum to 1."""
    check_pieces(weights, query_pieces, key_pieces)  # shapes that fit, or a clear error
    to_word = torch.nn.functional.one_hot(torch.tensor(word_ids(key_pieces))).to(weights.dtype)  # (L_k, W_k)
    from_word = torch.nn.functional.one_hot(torch.tensor(word_ids(query_pieces))).to(weights.dtype).T  # (W_q, L_q)
    from_word = from_word / from_word.sum(dim=1, keepdim=True)  # mean over each word's pieces
    return from_word @ weights @ to_word


def head_statistics(weights: torch.Tensor, mask: torch.Tensor, query_valid: torch.Tensor,
                    key_is: dict[str, torch.Tensor], max_offset: int = 10) -> dict[str, torch.Tensor]:
    """Sums, over the valid query rows of one block's weights (batch, h, L_q, L_k), of what
    describes a head; divide by ``"rows"`` for means. ``mask`` (batch, L_q or 1, L_k) is the
    block's attention mask, ``query_valid`` (batch, L_q) is False at rows that do not count, and
    ``key_is[name]`` (batch, L_k) marks keys of one sort (``</s>``, punctuation): their share too.

    * ``entropy`` of each row, in nats; ``uniform``: log n over its n unmasked keys, the most it can be.
    * ``confidence``: the row's largest weight on a key other than ``</s>`` (``key_is["</s>"]``),
      as Voita et al. (2019) define it; ``max weight``: the largest weight on any key.
    * ``distance``: sum_j p_j |i - j|, Vig and Belinkov's (2019) attention distance.
    * ``previous``, ``self``, ``next``: the weight on keys i - 1, i and i + 1.
    * ``offset`` (h, 2 max_offset + 1): how often the row's largest weight sits at j - i = d,
      d = -max_offset ... max_offset; a head almost always at one offset is positional.
    """
    batch, h, L_q, L_k = weights.shape
    rows = query_valid[:, None, :].expand(batch, h, L_q)  # (batch, h, L_q)
    eos = key_is.get("</s>", torch.zeros(batch, L_k, dtype=torch.bool))[:, None, None, :]  # (batch, 1, 1, L_k)
    i = torch.arange(L_q)[:, None]
    j = torch.arange(L_k)[None, :]
    per_row = {
        "rows": torch.ones(batch, h, L_q),
        "entropy": -(weights * weights.clamp_min(1e-12).log()).sum(-1),
        "uniform": mask.sum(-1).float().log().expand(batch, L_q)[:, None].expand(batch, h, L_q),
        "confidence": weights.masked_fill(eos, 0.0).amax(-1),
        "max weight": weights.amax(-1),
        "distance": (weights * (i - j).abs()).sum(-1),
        "previous": (weights * (j == i - 1)).sum(-1),
        "self": (weights * (j == i)).sum(-1),
        "next": (weights * (j == i + 1)).sum(-1),
    }
    for name, is_key in key_is.items():
        per_row[name] = (weights * is_key[:, None, None, :]).sum(-1)
    sums = {name: (values * rows).sum(dim=(0, 2)) for name, values in per_row.items()}  # each (h,)
    offset = weights.argmax(-1) - torch.arange(L_q)  # (batch, h, L_q): j - i of the largest weight
    sums["offset"] = torch.stack([((offset == d) & rows).sum(dim=(0, 2))
                                  for d in range(-max_offset, max_offset + 1)], dim=1).float()
    return sums


def attention_statistics(model: EncoderDecoder, batches: Iterable[Batch],
                         key_is: dict[str, Callable[[torch.Tensor], torch.Tensor]], pad_idx: int = 0,
                         max_offset: int = 10, decoder_row_0: bool = False) -> dict[str, dict[str, torch.Tensor]]:
    """``head_statistics`` of every block over teacher-forced batches, as means over query rows:
    kind -> name -> (layers, h), and ``offset`` (layers, h, 2 max_offset + 1), the share of rows
    whose largest weight sits at each offset. ``key_is[name](ids)`` marks keys among token ids.
    The decoder's row 0 counts only with ``decoder_row_0``: it can see nothing but ``<s>``."""
    totals = {}
    for batch in batches:
        weights = collect_attention(model, batch)
        src_valid = batch.src_mask[:, 0]  # (batch, L_src): False at padding
        # A decoder row counts if it predicts a real token: in a padded sentence, the row that
        # reads </s> predicts padding, and no loss is taken there.
        tgt_valid = batch.tgt_y != pad_idx  # (batch, L_tgt)
        # Decoder self-attention's row 0 has one key, <s> (causal mask): weight 1 on <s>, on itself
        # and at offset 0 whatever the head learned. Cross-attention's row 0 chooses freely.
        dec_valid = tgt_valid & ((torch.arange(tgt_valid.size(1)) > 0) | decoder_row_0)
        sides = {"encoder": (batch.src_mask, src_valid, batch.src),  # mask, valid queries, key ids
                 "decoder": (batch.tgt_mask, dec_valid, batch.tgt_in),
                 "cross": (batch.src_mask, tgt_valid, batch.src)}
        for kind, (mask, query_valid, key_ids) in sides.items():
            marks = {name: is_key(key_ids) for name, is_key in key_is.items()}
            sums = [head_statistics(w, mask, query_valid, marks, max_offset) for w in weights[kind]]
            old = totals.get(kind, [{name: 0 for name in sums[0]}] * len(sums))
            totals[kind] = [{name: a[name] + b[name] for name in b} for a, b in zip(old, sums)]
    means = {}
    for kind, layers in totals.items():
        stacked = {name: torch.stack([sums[name] for sums in layers]) for name in layers[0]}  # (layers, h, ...)
        rows = stacked.pop("rows")
        means[kind] = {name: v / (rows[..., None] if v.dim() == 3 else rows) for name, v in stacked.items()}
    return means


@contextmanager
def heads_masked(model: EncoderDecoder, heads: Iterable[tuple[str, int, int]]) -> Iterator[None]:
    """Inside the ``with`` block, the output of each head ``(kind, layer, head)`` is zeroed before
    W^O: the model computes as if that head were not there (Michel et al., 2019)."""
    blocks = attention_modules(model)
    by_block = defaultdict(list)
    for kind, layer, head in heads:
        check_head(blocks, kind, layer, head)  # an existing head, or a ValueError naming the choices
        by_block[kind, layer].append(head)
    hooks = []
    for (kind, layer), dropped in by_block.items():
        attn = blocks[kind][layer]
        keep = torch.ones(attn.h, attn.d_k)
        keep[dropped] = 0.0  # merge_heads puts head k in columns k * d_k ... (k + 1) * d_k - 1
        keep = keep.flatten().to(attn.W_O.weight.device)
        hooks.append(attn.W_O.register_forward_pre_hook(lambda module, args, keep=keep: (args[0] * keep,)))
    try:
        yield
    finally:
        for hook in hooks:
            hook.remove()


# The input guards (annotated/support/translation_guards.py), which the notebook's cells leave out: the
# checks translate() makes (a model and its own tokenizer; a sentence with a letter, not too long).
sentence_attention = guarded(sentence_attention, guards.sentence_attention_inputs)
# The pairs and batch size of teacher forcing, and a kind of attention that the maps have.
teacher_forced_batches = guarded(teacher_forced_batches, guards.teacher_forced_batches_inputs)
SentenceAttention.labels = guarded(SentenceAttention.labels, guards.labels_inputs)
