"""The encoder-decoder Transformer (paper §3.1, §3.4) and ``make_model`` (Table 3).

Dropout follows §5.4 by default: the paper specifies it for the translation models in two places
only, each sub-layer's output (before the residual sum and the norm) and the sums of embeddings and
positional encodings. ``attention_dropout`` (on the attention weights) and ``ff_dropout`` (on the
feed-forward hidden layer) are options, 0.0 by default. The paper mentions attention dropout once,
in §6.3 on parsing ("the dropout, both attention and residual"), without saying where or how much;
tensor2tensor, the authors' code base, applies its ``attention_dropout`` to the attention weights,
and its later settings add ``relu_dropout`` in the feed-forward network, which the paper never
mentions.

Notebook: ``07_the_full_model.ipynb``.
"""

import copy
from dataclasses import dataclass

import torch
import torch.nn as nn

from annotated.feed_forward import PositionwiseFeedForward
from annotated.layer_norm import LayerNorm
from annotated.multi_head import MultiHeadAttention
from annotated.positional import Embeddings, PositionalEncoding
from annotated.residual import SublayerConnection
from annotated.support.checks import check_config, check_make_model_arguments
from annotated.support.class_guards import check_instance, checked


class EncoderLayer(nn.Module):
    """Self-attention, then the feed-forward network, each wrapped in a residual."""

    def __init__(self, d_model: int, self_attn: MultiHeadAttention, feed_forward: PositionwiseFeedForward,
                 dropout: float = 0.1, norm_first: bool = False):
        super().__init__()
        self.self_attn = self_attn
        self.feed_forward = feed_forward
        self.sublayer = nn.ModuleList(SublayerConnection(d_model, dropout, norm_first) for _ in range(2))

    def forward(self, x: torch.Tensor, src_mask: torch.Tensor | None) -> torch.Tensor:
        x = self.sublayer[0](x, lambda y: self.self_attn(y, y, y, src_mask))
        return self.sublayer[1](x, self.feed_forward)


class DecoderLayer(nn.Module):
    """Masked self-attention, attention over the encoder's output, then feed-forward."""

    def __init__(self, d_model: int, self_attn: MultiHeadAttention, src_attn: MultiHeadAttention,
                 feed_forward: PositionwiseFeedForward, dropout: float = 0.1, norm_first: bool = False):
        super().__init__()
        self.self_attn = self_attn
        self.src_attn = src_attn
        self.feed_forward = feed_forward
        self.sublayer = nn.ModuleList(SublayerConnection(d_model, dropout, norm_first) for _ in range(3))

    def forward(self, x: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor | None,
                tgt_mask: torch.Tensor | None) -> torch.Tensor:
        x = self.sublayer[0](x, lambda y: self.self_attn(y, y, y, tgt_mask))
        # Queries from the decoder, keys and values from the encoder ("memory").
        x = self.sublayer[1](x, lambda y: self.src_attn(y, memory, memory, src_mask))
        return self.sublayer[2](x, self.feed_forward)


class Encoder(nn.Module):
    """N identical layers. Pre-norm stacks end with one more LayerNorm, since their
    residual stream is never normalized otherwise; post-norm stacks need none."""

    def __init__(self, layer: EncoderLayer, N: int, final_norm: bool = False):
        super().__init__()
        self.layers = nn.ModuleList(copy.deepcopy(layer) for _ in range(N))
        d_model = layer.self_attn.d_model
        self.norm = LayerNorm(d_model) if final_norm else nn.Identity()

    def forward(self, x: torch.Tensor, src_mask: torch.Tensor | None) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, src_mask)
        return self.norm(x)


class Decoder(nn.Module):
    """N identical decoder layers, with the same optional final LayerNorm."""

    def __init__(self, layer: DecoderLayer, N: int, final_norm: bool = False):
        super().__init__()
        self.layers = nn.ModuleList(copy.deepcopy(layer) for _ in range(N))
        d_model = layer.self_attn.d_model
        self.norm = LayerNorm(d_model) if final_norm else nn.Identity()

    def forward(self, x: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor | None,
                tgt_mask: torch.Tensor | None) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, memory, src_mask, tgt_mask)
        return self.norm(x)


class Generator(nn.Module):
    """The final linear map from d_model to vocabulary logits (softmax is left to the
    loss or the decoder, which take ``log_softmax`` in a numerically stable way)."""

    def __init__(self, d_model: int, vocab_size: int):
        super().__init__()
        self.proj = nn.Linear(d_model, vocab_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)  # (batch, L, vocab_size)


class EncoderDecoder(nn.Module):
    """Encoder, decoder, their embeddings and the generator; ``forward`` returns logits."""

    def __init__(self, encoder: Encoder, decoder: Decoder, src_embed: nn.Module, tgt_embed: nn.Module,
                 generator: Generator):
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder
        self.src_embed = src_embed
        self.tgt_embed = tgt_embed
        self.generator = generator

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor | None) -> torch.Tensor:
        """src (batch, L_src) token ids -> memory (batch, L_src, d_model)."""
        return self.encoder(self.src_embed(src), src_mask)

    def decode(self, memory: torch.Tensor, src_mask: torch.Tensor | None, tgt: torch.Tensor,
               tgt_mask: torch.Tensor | None) -> torch.Tensor:
        """tgt (batch, L_tgt) token ids -> decoder states (batch, L_tgt, d_model)."""
        return self.decoder(self.tgt_embed(tgt), memory, src_mask, tgt_mask)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor, src_mask: torch.Tensor | None,
                tgt_mask: torch.Tensor | None) -> torch.Tensor:
        memory = self.encode(src, src_mask)
        return self.generator(self.decode(memory, src_mask, tgt, tgt_mask))  # (batch, L_tgt, vocab)


@dataclass
class TransformerConfig:
    """Hyperparameters; the defaults are the paper's base model (Table 3), with dropout
    only where §5.4 puts it. Attention and feed-forward dropout are options, off by default."""

    src_vocab_size: int
    tgt_vocab_size: int
    N: int = 6
    d_model: int = 512
    d_ff: int = 2048
    h: int = 8
    dropout: float = 0.1  # P_drop (§5.4): sub-layer outputs, and embeddings + positions
    attention_dropout: float = 0.0  # on the attention weights: not in §5.4 (§6.3 mentions it; tensor2tensor)
    ff_dropout: float = 0.0  # on the feed-forward hidden layer: not in the paper (tensor2tensor v2, Harvard)
    max_len: int = 5000  # rows of the positional table, not a paper setting
    norm_first: bool = False  # False: post-norm, as in the paper
    share_embeddings: bool = False  # one table for source, target and generator (§3.4)
    fast_attention: bool = True  # F.scaled_dot_product_attention when weights are not kept


def make_model(config: TransformerConfig) -> EncoderDecoder:
    """Build the encoder-decoder from ``config``: the target embedding and the generator
    always share one weight matrix, and with ``share_embeddings`` the source embedding
    shares it too (the paper's setup for a joint vocabulary, §3.4)."""
    c = config
    attn = MultiHeadAttention(c.d_model, c.h, c.attention_dropout, fast=c.fast_attention)
    ff = PositionwiseFeedForward(c.d_model, c.d_ff, c.ff_dropout)
    model = EncoderDecoder(
        Encoder(EncoderLayer(c.d_model, copy.deepcopy(attn), copy.deepcopy(ff), c.dropout, c.norm_first),
                c.N, final_norm=c.norm_first),
        Decoder(DecoderLayer(c.d_model, copy.deepcopy(attn), copy.deepcopy(attn), copy.deepcopy(ff),
                             c.dropout, c.norm_first), c.N, final_norm=c.norm_first),
        nn.Sequential(Embeddings(c.src_vocab_size, c.d_model), PositionalEncoding(c.d_model, c.dropout, c.max_len)),
        nn.Sequential(Embeddings(c.tgt_vocab_size, c.d_model), PositionalEncoding(c.d_model, c.dropout, c.max_len)),
        Generator(c.d_model, c.tgt_vocab_size),
    )
    # Glorot (Xavier) uniform initialization for every matrix. The paper states none; this is the
    # choice of the Harvard Annotated Transformer and of PyTorch's nn.Transformer (tensor2tensor,
    # the paper's own code base, uses uniform unit scaling).
    for p in model.parameters():
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)
    model.generator.proj.weight = model.tgt_embed[0].lut.weight
    if c.share_embeddings:
        model.src_embed[0].lut.weight = model.tgt_embed[0].lut.weight
    return model


def count_parameters(model: nn.Module) -> int:
    """Number of distinct trainable parameters (a tied matrix counts once)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


# The input guards, kept out of the code above: a config field that is not usable, or tied tables
# for two vocabularies, get a ValueError naming them before anything is built.
check_instance(TransformerConfig, check_config)  # every field usable
make_model = checked(make_model, check_make_model_arguments)  # share_embeddings needs one vocabulary
