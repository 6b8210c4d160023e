"""PyTorch's own ``nn.Transformer`` as a reference for ``annotated.model``.

With the same weights the two stacks compute the same function; only the names of the
weights differ. Dropout is where they can differ: ``nn.Transformer`` has one ``dropout`` that
acts at three sites (the attention weights, the feed-forward hidden layer and every sub-layer
output), while ``make_model`` follows the paper (§5.4) and drops out only the sub-layer outputs
unless ``attention_dropout`` and ``ff_dropout`` are set. ``torch_reference`` therefore refuses a
config whose three rates differ. Even with equal rates, two models in training mode draw
different dropout masks, so outputs compare equal only with every rate 0, or in ``eval()`` mode.
These helpers copy ``nn.Transformer``'s weights into the encoder and decoder
stacks of an :class:`~annotated.model.EncoderDecoder`, so that a notebook or a test
can feed both the same embedded inputs and compare outputs and gradients.

Name correspondence (``nn`` on the left, ``annotated`` on the right)::

    self_attn / multihead_attn .in_proj_weight  rows [0:d], [d:2d], [2d:3d] -> W_Q, W_K, W_V
    self_attn / multihead_attn .in_proj_bias    the same chunks            -> W_Q, W_K, W_V bias
    self_attn / multihead_attn .out_proj                                  -> W_O
    linear1, linear2                                                      -> feed_forward.W_1, W_2
    norm1, norm2 (, norm3 in the decoder) .weight / .bias                 -> sublayer[0, 1 (, 2)].norm.gamma / .beta
    encoder.norm, decoder.norm (pre-norm only)                            -> encoder.norm, decoder.norm
"""

import warnings

import torch
import torch.nn as nn

from annotated.feed_forward import PositionwiseFeedForward
from annotated.layer_norm import LayerNorm
from annotated.model import EncoderDecoder, TransformerConfig
from annotated.multi_head import MultiHeadAttention


def torch_reference(config: TransformerConfig) -> nn.Transformer:
    """An ``nn.Transformer`` with the same shape as ``make_model(config)``'s stacks.

    ``batch_first=True`` so tensors are (batch, L, d_model) as in ``annotated``. In the
    post-norm setting ``nn.Transformer`` still ends each stack with a LayerNorm, which the
    paper's stack does not have, so both final norms are removed; in the pre-norm setting
    they are kept, matching ``Encoder(..., final_norm=True)``.

    ``nn.Transformer``'s single ``dropout`` rate applies to the attention weights, the
    feed-forward hidden layer and the sub-layer outputs alike, so it stands for our model only
    when ``config.dropout``, ``config.attention_dropout`` and ``config.ff_dropout`` are equal;
    otherwise a ``ValueError`` says so. (The embedding dropout has no counterpart: ``nn.Transformer``
    has no embeddings.)
    """
    rates = {"dropout": config.dropout, "attention_dropout": config.attention_dropout,
             "ff_dropout": config.ff_dropout}
    if len(set(rates.values())) > 1:
        given = ", ".join(f"{name}={rate}" for name, rate in rates.items())
        raise ValueError(
            f"nn.Transformer has one dropout rate for the attention weights, the feed-forward hidden layer "
            f"and the sub-layer outputs, but the config has {given}; set all three equal (all 0.0 to compare "
            f"outputs in training mode), e.g. dataclasses.replace(config, attention_dropout=config.dropout, "
            f"ff_dropout=config.dropout)"
        )
    with warnings.catch_warnings():
        # With norm_first, nn.TransformerEncoder warns that it cannot use nested tensors,
        # an inference speed-up that plays no part in a comparison.
        warnings.filterwarnings("ignore", message="enable_nested_tensor is True")
        ref = nn.Transformer(
            d_model=config.d_model,
            nhead=config.h,
            num_encoder_layers=config.N,
            num_decoder_layers=config.N,
            dim_feedforward=config.d_ff,
            dropout=config.dropout,
            batch_first=True,
            norm_first=config.norm_first,
        )
    if not config.norm_first:
        ref.encoder.norm = None
        ref.decoder.norm = None
    # In eval mode the encoder would pack padded batches into nested tensors, a prototype
    # inference shortcut that warns on every call; the plain computation is what we compare.
    ref.encoder.use_nested_tensor = False
    return ref


@torch.no_grad()
def copy_mha_from_torch(ours: MultiHeadAttention, theirs: nn.MultiheadAttention) -> None:
    """Copy ``theirs``' packed input projection and output projection into ``ours``."""
    d_model = ours.d_model
    if theirs.embed_dim != d_model or theirs.num_heads != ours.h:
        raise ValueError(
            f"shapes differ: ours has d_model={d_model}, h={ours.h}; theirs has "
            f"embed_dim={theirs.embed_dim}, num_heads={theirs.num_heads}"
        )
    if theirs.in_proj_weight is None:
        raise ValueError(
            "theirs has separate q/k/v projections (kdim or vdim set); only the packed in_proj_weight is supported"
        )
    # nn packs W_Q, W_K, W_V one above the other: in_proj_weight is (3 * d_model, d_model).
    for i, linear in enumerate((ours.W_Q, ours.W_K, ours.W_V)):
        linear.weight.copy_(theirs.in_proj_weight[i * d_model : (i + 1) * d_model])
        linear.bias.copy_(theirs.in_proj_bias[i * d_model : (i + 1) * d_model])
    ours.W_O.weight.copy_(theirs.out_proj.weight)
    ours.W_O.bias.copy_(theirs.out_proj.bias)


@torch.no_grad()
def copy_layer_norm_from_torch(ours: LayerNorm, theirs: nn.LayerNorm) -> None:
    """Copy ``theirs``' weight and bias into ``ours``' gamma and beta."""
    if ours.gamma.shape != theirs.weight.shape:
        raise ValueError(
            f"normalized shapes differ: ours {tuple(ours.gamma.shape)}, theirs {tuple(theirs.weight.shape)}"
        )
    if ours.eps != theirs.eps:
        raise ValueError(f"eps differs: ours {ours.eps}, theirs {theirs.eps}; build them with the same eps")
    ours.gamma.copy_(theirs.weight)
    ours.beta.copy_(theirs.bias)


def load_from_torch_transformer(model_stacks: EncoderDecoder, ref: nn.Transformer) -> None:
    """Copy the encoder and decoder stacks of ``ref`` into ``model_stacks``.

    Embeddings and the generator are left alone: ``nn.Transformer`` has neither. Example::

        config = TransformerConfig(11, 11, N=2, d_model=32, d_ff=64, h=4, dropout=0.0)
        model, ref = make_model(config), torch_reference(config)
        load_from_torch_transformer(model, ref)
        # model.decoder(y, model.encoder(x, src_mask), src_mask, tgt_mask) now equals
        # ref(x, y, src_key_padding_mask=~src_keep, tgt_mask=~causal, ...) for embedded x, y.
    """
    ours_enc, ours_dec = model_stacks.encoder.layers, model_stacks.decoder.layers
    if len(ours_enc) != len(ref.encoder.layers) or len(ours_dec) != len(ref.decoder.layers):
        raise ValueError(
            f"layer counts differ: ours {len(ours_enc)} encoder / {len(ours_dec)} decoder, "
            f"theirs {len(ref.encoder.layers)} / {len(ref.decoder.layers)}"
        )
    stacks = ((model_stacks.encoder, ref.encoder), (model_stacks.decoder, ref.decoder))
    for ours_stack, theirs_stack in stacks:
        has_ours = not isinstance(ours_stack.norm, nn.Identity)
        has_theirs = theirs_stack.norm is not None
        if has_ours != has_theirs:
            raise ValueError(
                f"final norms differ: ours {'has one' if has_ours else 'has none'}, theirs "
                f"{'has one' if has_theirs else 'has none'}; build both with the same norm_first"
            )
    with torch.no_grad():
        for ours, theirs in zip(ours_enc, ref.encoder.layers):
            copy_mha_from_torch(ours.self_attn, theirs.self_attn)
            _copy_feed_forward(ours.feed_forward, theirs)
            for sublayer, norm in zip(ours.sublayer, (theirs.norm1, theirs.norm2)):
                copy_layer_norm_from_torch(sublayer.norm, norm)
        for ours, theirs in zip(ours_dec, ref.decoder.layers):
            copy_mha_from_torch(ours.self_attn, theirs.self_attn)
            copy_mha_from_torch(ours.src_attn, theirs.multihead_attn)
            _copy_feed_forward(ours.feed_forward, theirs)
            for sublayer, norm in zip(ours.sublayer, (theirs.norm1, theirs.norm2, theirs.norm3)):
                copy_layer_norm_from_torch(sublayer.norm, norm)
        for ours_stack, theirs_stack in stacks:
            if theirs_stack.norm is not None:
                copy_layer_norm_from_torch(ours_stack.norm, theirs_stack.norm)


def _copy_feed_forward(
    ours: PositionwiseFeedForward, theirs: nn.TransformerEncoderLayer | nn.TransformerDecoderLayer
) -> None:
    """linear1 -> W_1 and linear2 -> W_2 (called under no_grad)."""
    ours.W_1.weight.copy_(theirs.linear1.weight)
    ours.W_1.bias.copy_(theirs.linear1.bias)
    ours.W_2.weight.copy_(theirs.linear2.weight)
    ours.W_2.bias.copy_(theirs.linear2.bias)
