"""Input checks for attention: wrong shapes fail with a message that says how to fix them.

Broadcasting lets many wrong inputs run silently: a ``(batch, L_k)`` padding mask without
its query axis broadcasts against ``(batch, L_q, L_k)`` scores whenever ``batch == L_q``,
and hides sentence n's padding from query n of *every* sentence. The rule enforced here
leaves no such case: a mask has exactly one dimension per dimension of the scores,
``(..., L_q or 1, L_k)``, each leading size equal to the scores' or 1.

``annotated.attention.scaled_dot_product_attention`` (notebook 02) calls
:func:`check_attention_inputs`; ``annotated.multi_head.MultiHeadAttention`` (notebook 04)
calls :func:`check_mask_shape` on its (batch or 1, L_q or 1, L_k) mask.
"""

import torch

# How the two usual masks are brought to the rank of the scores.
MASK_FIXES = (
    "unsqueeze(1) a (batch, L_k) padding mask into (batch, 1, L_k) (annotated.masks.padding_mask "
    "does it), unsqueeze(0) an (L_q, L_k) look-ahead mask into (1, L_q, L_k), and with a head "
    "axis in the scores add a size-1 axis for it, mask.unsqueeze(-3); MultiHeadAttention takes "
    "(batch or 1, L_q or 1, L_k) and adds the head axis itself"
)


def accepted_mask_shape(scores_shape: torch.Size) -> str:
    """The shapes a mask may have for scores of ``scores_shape``, e.g. '(2 or 1, 5 or 1, 7)'."""
    *leading, L_k = scores_shape
    return "(" + ", ".join([f"{n} or 1" for n in leading] + [str(L_k)]) + ")"


def check_mask_shape(mask: torch.Tensor, scores_shape: torch.Size) -> None:
    """Raise a clear error unless ``mask`` is a bool tensor of shape (..., L_q or 1, L_k)
    with as many dimensions as the scores of shape ``scores_shape`` (..., L_q, L_k)."""
    if mask.dtype != torch.bool:
        raise TypeError(
            f"mask must be a bool tensor (True = may attend), got dtype {mask.dtype}; "
            "build it with annotated.masks or compare with a condition, e.g. tokens != pad_idx"
        )
    scores_shape = torch.Size(scores_shape)
    given, accepted = tuple(mask.shape), accepted_mask_shape(scores_shape)
    if mask.dim() != len(scores_shape):
        raise ValueError(
            f"mask of shape {given} has {mask.dim()} dimensions, the attention scores of shape "
            f"{tuple(scores_shape)} (..., L_q, L_k) have {len(scores_shape)}: a mask needs one "
            f"dimension per score dimension, shape {accepted}. Fix: {MASK_FIXES}"
        )
    fits = all(m in (n, 1) for m, n in zip(mask.shape[:-1], scores_shape[:-1]))
    if not fits or mask.size(-1) != scores_shape[-1]:
        raise ValueError(
            f"mask of shape {given} does not fit the attention scores of shape "
            f"{tuple(scores_shape)} (..., L_q, L_k): accepted {accepted}, each leading size "
            f"equal to the scores' or 1, and one entry per key. Fix: {MASK_FIXES}"
        )


def check_attention_inputs(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None = None
) -> None:
    """Raise a clear error unless query (..., L_q, d_k), key (..., L_k, d_k),
    value (..., L_k, d_v) and mask (..., L_q or 1, L_k) fit together."""
    for name, t in (("query", query), ("key", key), ("value", value)):
        if t.dim() < 2:
            raise ValueError(
                f"{name} of shape {tuple(t.shape)} needs at least two dimensions, "
                f"(..., positions, features); unsqueeze(0) a single vector"
            )
    if key.size(-1) != query.size(-1):
        raise ValueError(f"query and key must share d_k, got {query.size(-1)} and {key.size(-1)}")
    if value.size(-2) != key.size(-2):
        raise ValueError(
            f"key {tuple(key.shape)} and value {tuple(value.shape)} must have the same number "
            f"of positions L_k (dim -2): each key is paired with one value"
        )
    try:
        leading = torch.broadcast_shapes(query.shape[:-2], key.shape[:-2], value.shape[:-2])
    except RuntimeError:
        raise ValueError(
            f"the leading (batch, head) dimensions of query {tuple(query.shape)}, key "
            f"{tuple(key.shape)} and value {tuple(value.shape)} do not broadcast; give them "
            f"equal sizes or 1"
        ) from None
    if mask is not None:
        check_mask_shape(mask, torch.Size([*leading, query.size(-2), key.size(-2)]))
