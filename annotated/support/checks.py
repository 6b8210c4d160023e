"""Input checks for attention: wrong shapes fail with a message that says how to fix them.

Broadcasting lets many wrong inputs run silently: a ``(batch, L_k)`` padding mask without
its query axis broadcasts against ``(batch, L_q, L_k)`` scores whenever ``batch == L_q``,
and hides sentence n's padding from query n of *every* sentence. The rule enforced here
leaves no such case: a mask has exactly one dimension per dimension of the scores,
``(..., L_q or 1, L_k)``, each leading size equal to the scores' or 1.

``annotated.attention.scaled_dot_product_attention`` (notebook 02) calls
:func:`check_attention_inputs`; ``annotated.multi_head.MultiHeadAttention`` (notebook 04)
calls :func:`check_mask_shape` on its (batch or 1, L_q or 1, L_k) mask.
:func:`check_multi_head_inputs` (a missing batch axis) and :func:`check_pieces` (weights and
byte-pair pieces that do not fit) are written for ``MultiHeadAttention.forward`` and
``annotated.heads.to_words``, whose notebooks do not call them yet.
"""

import math
import warnings

import torch

from annotated.support.options import MAX_LENGTH_PENALTY

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


# ---------------------------------------------------------------------------------------------
# Configuration, decoding arguments and list-like inputs: checked where they enter, so that a
# wrong value fails at once with its name, instead of building an empty model or decoding nonsense.


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_config(config) -> None:
    """Raise a ValueError naming the field unless every field of a ``TransformerConfig`` is usable.

    Sizes are positive integers, ``d_model`` is even (sine/cosine pairs, §3.5) and divisible by
    ``h`` (§3.2.2), every dropout probability lies in [0, 1) (1 would zero every activation), and
    the switches are booleans.
    """
    check_sizes(**{f"TransformerConfig.{name}": getattr(config, name)
                   for name in ("src_vocab_size", "tgt_vocab_size", "N", "d_model", "d_ff", "h", "max_len")})
    if config.d_model % 2:
        raise ValueError(f"TransformerConfig.d_model={config.d_model} must be even: the positional encoding "
                         f"pairs a sine and a cosine per frequency (§3.5)")
    if config.d_model % config.h:
        raise ValueError(f"TransformerConfig: d_model={config.d_model} is not divisible by h={config.h}: each "
                         f"head needs d_k = d_model / h columns; pick h among the divisors of d_model")
    for name in ("dropout", "attention_dropout", "ff_dropout"):
        check_probability(f"TransformerConfig.{name}", getattr(config, name))
    for name in ("norm_first", "share_embeddings", "fast_attention"):
        if not isinstance(getattr(config, name), bool):
            raise ValueError(f"TransformerConfig.{name} must be True or False, got {getattr(config, name)!r}")


def check_not_text(value, name: str, expected: str = "a list of sentences") -> None:
    """Raise a TypeError when a single string (or bytes) is given where a list of them is expected:
    Python would iterate over its characters and return one result per character."""
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{name} must be {expected}, got a single string {value[:40]!r}: wrap it in a "
                        f"list, [{value[:20]!r}]")


def check_decoding_inputs(model, src: torch.Tensor, src_mask: torch.Tensor | None, max_len: int,
                          bos_idx: int, eos_idx: int | None, pad_idx: int, endless: bool = False) -> None:
    """Raise a clear error unless the arguments of greedy decoding or beam search make sense;
    warn when the model is in training mode (dropout makes every decoding different).
    ``endless``: ``eos_idx=None`` is allowed (decode to ``max_len``)."""
    if not isinstance(src, torch.Tensor) or src.dim() != 2 or src.dtype != torch.long:
        shape = tuple(src.shape) if isinstance(src, torch.Tensor) else type(src).__name__
        raise ValueError(f"src must be a (batch, L_src) tensor of token ids (int64), got {shape}; "
                         f"a single sentence needs unsqueeze(0)")
    if src_mask is not None:
        check_mask_shape(src_mask, torch.Size([src.size(0), 1, src.size(1)]))
    if not _is_int(max_len) or max_len < 1:
        raise ValueError(f"max_len must be a positive integer (the output length, <s> included), got {max_len!r}")
    vocab = model.generator.proj.out_features
    if eos_idx is None and not endless:
        raise ValueError("eos_idx=None (never stop) is for greedy_decode; beam search needs the id of </s>")
    for name, index in (("bos_idx", bos_idx), ("eos_idx", eos_idx), ("pad_idx", pad_idx)):
        if index is None and name == "eos_idx":
            continue
        if not _is_int(index) or not 0 <= index < vocab:
            token = {"bos_idx": "<s>", "eos_idx": "</s>", "pad_idx": "<pad>"}[name]
            raise ValueError(f"{name}={index!r} is not a token id of the target vocabulary (0..{vocab - 1}); "
                             f"pass the vocabulary's own, e.g. {name}=tgt_vocab[{token!r}]")
    if len({bos_idx, eos_idx, pad_idx} - {None}) < 3 - (eos_idx is None):
        raise ValueError(f"bos_idx={bos_idx}, eos_idx={eos_idx} and pad_idx={pad_idx} must be three different ids")
    check_finite_weights(model)
    dtype = model.generator.proj.weight.dtype
    if not endless and torch.promote_types(dtype, torch.float32) != torch.float32:
        raise ValueError(f"the model's weights are {dtype}; beam search keeps its scores in float32, which cannot "
                         f"hold {dtype} log-probabilities: call model.float() first (or decode greedily)")
    if model.training:
        warnings.warn("decoding a model in training mode: dropout makes every run different; call model.eval() "
                      "first", stacklevel=4)


def check_beam_arguments(beam_size: int, length_penalty: float) -> None:
    """Raise a ValueError unless ``beam_size`` is a positive integer and ``length_penalty`` (alpha)
    a number in [0, MAX_LENGTH_PENALTY] (a NaN alpha would make every comparison of scores false,
    a huge one overflows lp(Y))."""
    if not _is_int(beam_size) or beam_size < 1:
        raise ValueError(f"beam_size must be a positive integer, got {beam_size!r}; beam_size=1 is greedy decoding")
    if isinstance(length_penalty, bool) or not isinstance(length_penalty, (int, float)) \
            or not math.isfinite(length_penalty) or length_penalty < 0:
        raise ValueError(f"length_penalty (alpha) must be a finite number >= 0, got {length_penalty!r}; "
                         f"0 turns it off, the paper uses 0.6")
    if length_penalty > MAX_LENGTH_PENALTY:
        raise ValueError(f"length_penalty (alpha) must be at most {MAX_LENGTH_PENALTY:g}, got {length_penalty!r}: "
                         f"((5 + |Y|) / 6)^alpha overflows for long outputs; the paper uses 0.6, and values "
                         f"between 0 and 1 are the usual range")


def check_finite_weights(model) -> None:
    """Raise a ValueError naming the first weights of ``model`` that hold NaN or infinity: such a
    model's logits are NaN, and decoding returns <s> and padding as if nothing were wrong."""
    named = [(name, w) for name, w in model.named_parameters() if w.is_floating_point()]
    finite = torch.stack([torch.isfinite(w).all() for _, w in named]).tolist() if named else []  # one sync on a GPU
    bad = [name for (name, _), ok in zip(named, finite) if not ok]
    if bad:
        more = f" (and {len(bad) - 3} more)" if len(bad) > 3 else ""
        raise ValueError(f"the model's weights {', '.join(bad[:3])}{more} hold NaN or infinite values, so every "
                         f"output would be nonsense; training diverged (lower the learning rate, clip gradients) "
                         f"or the weights were damaged: load an earlier checkpoint")


def check_tokens(tokens):
    """``tokens`` itself, once checked to be a list of tokens and not one string (whose
    characters would be counted as tokens)."""
    check_not_text(tokens, "each item of the iterator", "a list of tokens (one tokenized sentence)")
    return tokens


# ---------------------------------------------------------------------------------------------
# Sizes, probabilities and budgets of the building blocks: a zero, negative or fractional size
# would build an empty layer or fail deep inside PyTorch; a probability of 1 drops everything.


def check_sizes(allow_zero: bool = False, **sizes) -> None:
    """Raise a ValueError naming the first of ``sizes`` that is not a positive integer (or, with
    ``allow_zero``, a non-negative one)."""
    for name, value in sizes.items():
        if not _is_int(value) or value < (0 if allow_zero else 1):
            kind = "an integer >= 0" if allow_zero else "a positive integer"
            raise ValueError(f"{name} must be {kind}, got {value!r}")


def check_probability(name: str, value: float) -> None:
    """Raise a ValueError unless ``value`` is a probability in [0, 1) (1 would drop every value)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise ValueError(f"{name} must be a probability in [0, 1), got {value!r}")


def check_positive(name: str, value: float) -> None:
    """Raise a ValueError unless ``value`` is a finite number > 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")


# Modules whose input is a batch of sequences, (batch, L, d_model): given (L, d_model), they would add
# the positions of d_model rows, not L (or fail with a size mismatch).
SEQUENCE_INPUTS = {"PositionalEncoding", "LearnedPositionalEncoding"}


def check_features(x: torch.Tensor, d_model: int, where: str) -> None:
    """Raise a ValueError unless the last dimension of ``x`` is ``d_model`` (and, for the modules of
    ``SEQUENCE_INPUTS``, ``x`` is (batch, L, d_model))."""
    if x.dim() == 0 or x.size(-1) != d_model:
        raise ValueError(f"{where} was built for d_model={d_model} features, got an input of shape "
                         f"{tuple(x.shape)}; its last dimension must be {d_model}")
    if where in SEQUENCE_INPUTS and x.dim() != 3:
        raise ValueError(f"{where} takes a batch of sequences, (batch, L, d_model={d_model}), got an input of shape "
                         f"{tuple(x.shape)}; one sentence needs unsqueeze(0): its token ids (1, L), its "
                         f"embeddings (1, L, {d_model})")


def check_sinusoidal_table_arguments(max_len: int, d_model: int) -> None:
    """Raise a ValueError unless ``sinusoidal_table(max_len, d_model)`` can be built: max_len >= 0,
    and d_model a positive even integer (the dimensions come in sine/cosine pairs, §3.5)."""
    check_sizes(allow_zero=True, max_len=max_len)
    check_sizes(d_model=d_model)
    if d_model % 2 != 0:
        raise ValueError(f"d_model={d_model} must be even: dimensions come in sin/cos pairs")


def check_positional_call(module, x: torch.Tensor, start: int = 0) -> None:
    """Raise a ValueError unless a PositionalEncoding call fits its table: x (batch, L, d_model) of
    the table's width, start >= 0, and positions start .. start + L - 1 inside its max_len rows."""
    check_features(x, module.pe.size(1), "PositionalEncoding")
    check_sizes(allow_zero=True, start=start)
    if start + x.size(1) > module.max_len:
        raise ValueError(
            f"sequence of length {start + x.size(1)} is longer than the positional table "
            f"(max_len={module.max_len}); build the model with a larger max_len or "
            f"truncate the input"
        )


def check_embeddings_call(module, tokens: torch.Tensor) -> None:
    """Raise a ValueError naming the token ids outside the vocabulary of an ``Embeddings`` module
    (often: text encoded with another vocabulary than the model's)."""
    vocab = module.lut.num_embeddings
    if tokens.numel() and (tokens.min() < 0 or tokens.max() >= vocab):
        bad = tokens[(tokens < 0) | (tokens >= vocab)].unique()[:5].tolist()
        raise ValueError(
            f"token ids {bad} are outside the vocabulary of size {vocab} (valid ids: "
            f"0..{vocab - 1}); encode text with the same vocabulary the model was built with"
        )


def check_feed_forward_arguments(d_model: int, d_ff: int, dropout: float = 0.0) -> None:
    """Raise a ValueError unless PositionwiseFeedForward(d_model, d_ff, dropout) can be built:
    positive integer sizes and a dropout probability."""
    check_sizes(d_model=d_model, d_ff=d_ff)
    check_probability("dropout", dropout)


def check_layer_norm_arguments(d_model: int, eps: float = 1e-5, fast: bool = True) -> None:
    """Raise a ValueError unless LayerNorm(d_model, eps) can be built: a positive integer width and
    eps > 0 (eps = 0 divides by zero on a constant input)."""
    check_sizes(d_model=d_model)
    check_positive("eps", eps)


def check_layer_norm_call(module, x: torch.Tensor) -> None:
    """Raise a ValueError unless the last dimension of ``x`` is the layer norm's width."""
    check_features(x, module.gamma.numel(), "LayerNorm")


def check_make_model_arguments(config) -> None:
    """Raise a ValueError unless ``make_model(config)`` can tie its tables: ``share_embeddings``
    needs one vocabulary for source and target (§3.4)."""
    if config.share_embeddings and config.src_vocab_size != config.tgt_vocab_size:
        raise ValueError(
            f"share_embeddings needs one vocabulary, got src_vocab_size={config.src_vocab_size} and "
            f"tgt_vocab_size={config.tgt_vocab_size}; build a joint vocabulary or set share_embeddings=False"
        )


def check_multi_head_inputs(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, d_model: int) -> None:
    """Raise a ValueError unless query (batch, L_q, d_model), key and value (batch, L_k, d_model) fit
    multi-head attention: three dimensions each, the width d_model, one batch, one value per key."""
    for name, t in (("query", query), ("key", key), ("value", value)):
        if t.dim() != 3 or t.size(-1) != d_model:
            fix = f"; one sequence needs unsqueeze(0), (1, L, {d_model})" if t.dim() == 2 else ""
            raise ValueError(f"{name} of shape {tuple(t.shape)} is not (batch, L, d_model={d_model}){fix}")
    if not query.size(0) == key.size(0) == value.size(0) or key.size(1) != value.size(1):
        raise ValueError(f"query {tuple(query.shape)}, key {tuple(key.shape)} and value {tuple(value.shape)} must "
                         f"share the batch size, and key and value the length L_k (one value per key)")


def check_multi_head_arguments(d_model: int, h: int, dropout: float = 0.0, fast: bool = True) -> None:
    """Raise a ValueError unless MultiHeadAttention(d_model, h, dropout) can be built: positive
    sizes, a dropout probability, and h dividing d_model (each head gets d_k = d_model / h columns)."""
    check_sizes(d_model=d_model, h=h)
    check_probability("dropout", dropout)
    if d_model % h != 0:
        raise ValueError(
            f"d_model={d_model} is not divisible by h={h}: each head needs "
            f"d_k = d_model / h columns; pick h among the divisors of d_model "
            f"(e.g. h=8 for d_model=512)"
        )


def check_multi_head_call(module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                          mask: torch.Tensor | None = None) -> None:
    """Raise a ValueError unless a MultiHeadAttention call fits the module: query, key and value
    (batch, L, d_model) of its width, and a mask (batch or 1, L_q or 1, L_k), if any."""
    if query.size(-1) != module.d_model or key.size(-1) != module.d_model:
        raise ValueError(
            f"expected inputs of width d_model={module.d_model}, got query {tuple(query.shape)} "
            f"and key {tuple(key.shape)}"
        )
    check_multi_head_inputs(query, key, value, module.d_model)  # (batch, L, d_model) each, or a clear error
    if mask is not None:
        check_mask_shape(mask, torch.Size([query.size(0), query.size(1), key.size(1)]))


def check_pieces(weights: torch.Tensor, query_pieces: list[str], key_pieces: list[str]) -> None:
    """Raise an error unless ``weights`` (..., L_q, L_k) has one row per query piece and one column
    per key piece, both lists of strings, non-empty."""
    for name, pieces in (("query_pieces", query_pieces), ("key_pieces", key_pieces)):
        check_not_text(pieces, name, "a list of byte-pair pieces")
        if len(pieces) == 0:
            raise ValueError(f"{name} is empty: give the pieces of a sentence, one per row or column of the weights")
        if not all(isinstance(p, str) for p in pieces):
            raise TypeError(f"{name} must hold strings (byte-pair pieces such as 'feuer@@'), got "
                            f"{type(next(p for p in pieces if not isinstance(p, str))).__name__}")
    if weights.dim() < 2 or tuple(weights.shape[-2:]) != (len(query_pieces), len(key_pieces)):
        raise ValueError(f"weights of shape {tuple(weights.shape)} do not fit {len(query_pieces)} query pieces and "
                         f"{len(key_pieces)} key pieces: the last two dimensions must be ({len(query_pieces)}, "
                         f"{len(key_pieces)}); cut the padding off the weights first")


def check_label_smoothing(vocab_size: int, pad_idx: int, smoothing: float) -> None:
    """A usable label-smoothing setup: at least 3 tokens (the padding, the true one and one to
    share the smoothing mass with), a padding id in the vocabulary, 0 <= smoothing < 1."""
    check_sizes(vocab_size=vocab_size)
    if vocab_size < 3:
        raise ValueError(f"vocab_size={vocab_size}: label smoothing needs at least 3 tokens (padding, the "
                         f"true token and one other to receive the smoothing mass)")
    if not _is_int(pad_idx) or not 0 <= pad_idx < vocab_size:
        raise ValueError(f"pad_idx={pad_idx!r} is not a token id of a vocabulary of {vocab_size} (0..{vocab_size - 1})")
    check_probability("smoothing", smoothing)


def check_targets(logits: torch.Tensor, target: torch.Tensor) -> None:
    """Raise a ValueError unless ``target`` holds one id in 0..vocab-1 per row of ``logits`` (..., vocab)."""
    if tuple(target.shape) != tuple(logits.shape[:-1]):
        raise ValueError(f"target of shape {tuple(target.shape)} does not fit logits of shape {tuple(logits.shape)}: "
                         f"one target id per position, shape {tuple(logits.shape[:-1])}")
    if target.numel() and (target.min() < 0 or target.max() >= logits.size(-1)):
        bad = target[(target < 0) | (target >= logits.size(-1))].unique()[:5].tolist()
        raise ValueError(f"target ids {bad} are outside the vocabulary of {logits.size(-1)} (0..{logits.size(-1) - 1})")


def check_lengths(lengths) -> None:
    """Raise an error unless ``lengths`` is a list of non-negative integers."""
    check_not_text(lengths, "lengths", "a list of sequence lengths")
    for i, n in enumerate(lengths):
        if not _is_int(n) or n < 0:
            raise ValueError(f"lengths[{i}] = {n!r}: every length must be an integer >= 0")


def check_budget(epochs: int, max_steps: int | None, max_minutes: float | None, accum_steps: int) -> None:
    """A training budget that allows at least one update: epochs and accum_steps >= 1, max_steps
    None or >= 1, max_minutes None or > 0."""
    check_sizes(epochs=epochs, accum_steps=accum_steps)
    if max_steps is not None:
        check_sizes(max_steps=max_steps)
    if max_minutes is not None:
        check_positive("max_minutes", max_minutes)


def check_head(blocks: dict, kind: str, layer: int, head: int) -> None:
    """``(kind, layer, head)`` names a head of the model whose attention blocks are ``blocks``
    (``annotated.heads.attention_modules``); counting starts at 0."""
    if kind not in blocks:
        raise ValueError(f"unknown kind of attention {kind!r}; choose one of {tuple(blocks)}")
    layers = len(blocks[kind])
    if not (_is_int(layer) and 0 <= layer < layers):
        raise ValueError(f"layer {layer!r} does not exist: the model's {kind} attention has layers 0..{layers - 1}")
    h = blocks[kind][layer].h
    if not (_is_int(head) and 0 <= head < h):
        raise ValueError(f"head {head!r} does not exist: each {kind} block has heads 0..{h - 1}")


def check_word_pairs(pairs) -> None:
    """Sentence pairs for a word aligner: a non-empty list of (German words, English words), each a list."""
    if isinstance(pairs, (str, bytes)) or not hasattr(pairs, "__len__") or len(pairs) == 0:
        raise ValueError("give at least one (German words, English words) pair, e.g. "
                         "[(['zwei', 'hunde'], ['two', 'dogs'])]")
    for i, pair in enumerate(pairs):
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2
                and all(isinstance(side, list) and all(isinstance(w, str) for w in side) for side in pair)):
            raise ValueError(f"pair {i} is {str(pair)[:60]!r}: each pair must be (list of German words, "
                             f"list of English words); split sentences into words first")
    if not any(english for _, english in pairs):
        raise ValueError(f"none of the {len(pairs)} pair(s) has an English word, so there is nothing to align: "
                         f"give pairs of non-empty sentences, e.g. [(['zwei', 'hunde'], ['two', 'dogs'])]")
