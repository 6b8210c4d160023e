"""Input checks of the attention variants of notebooks 13 and 14: local attention, Linformer, BigBird,
learned, relative and rotary positions.

The taught functions call one of these in a single line, so that the lesson shows the algorithm and a
learner who passes the wrong shape still gets a message that says what to change.
"""

import torch

from annotated.support.checks import check_features, check_sizes


def check_local_attention(query: torch.Tensor, key: torch.Tensor, b: int) -> None:
    """Raise a ValueError unless ``b`` is a positive block size and query and key are one sequence
    (local attention is self-attention: the same n positions on both sides)."""
    check_sizes(b=b)
    if key.shape[-2] != query.shape[-2]:
        raise ValueError(
            f"local attention is self-attention: query has {query.shape[-2]} positions and key "
            f"{key.shape[-2]}; give both the same sequence"
        )


def check_projections(key: torch.Tensor, E: torch.Tensor, F: torch.Tensor) -> None:
    """Raise a ValueError unless Linformer's E and F are (k, n) matrices for the n positions of ``key``."""
    n = key.size(-2)
    for name, P in (("E", E), ("F", F)):
        if P.dim() != 2 or P.size(1) != n:
            raise ValueError(
                f"{name} of shape {tuple(P.shape)} must be (k, n) = (k, {n}): it mixes the n "
                f"positions of the keys and values into k rows; build it for this length n"
            )


def check_energy(energy: float) -> None:
    """Raise a ValueError unless ``energy`` is a share of the spectrum, in (0, 1]."""
    if not 0 < energy <= 1:
        raise ValueError(f"energy={energy} is a share of the spectrum: give a number in (0, 1], e.g. 0.9")


def check_bigbird_arguments(n: int, window: int, n_random: int, n_global: int) -> None:
    """Raise a ValueError unless BigBird's mask can be drawn: n and an odd window positive, as many random
    and global keys as the n positions hold at most."""
    check_sizes(allow_zero=True, n_random=n_random, n_global=n_global)
    check_sizes(n=n, window=window)
    if window % 2 == 0:
        raise ValueError(f"window={window} must be odd: the query in the middle, window // 2 keys each side")
    if n_random > n or n_global > n:
        raise ValueError(f"n_random={n_random} and n_global={n_global} cannot exceed the n={n} positions")


def check_square_mask(mask: torch.Tensor) -> None:
    """Raise a ValueError unless ``mask`` is (n, n): one self-attention mask."""
    if mask.dim() != 2 or mask.size(0) != mask.size(1):
        raise ValueError(f"mask of shape {tuple(mask.shape)} must be (n, n): one self-attention mask")


def check_learned_positions_input(x: torch.Tensor, start: int, table: torch.nn.Embedding) -> None:
    """Raise a ValueError unless ``x`` is (batch, L, d_model) for the table's d_model, ``start`` >= 0, and
    positions start .. start + L - 1 all have a row in the table."""
    check_features(x, table.embedding_dim, "LearnedPositionalEncoding")
    check_sizes(allow_zero=True, start=start)
    if start + x.size(1) > table.num_embeddings:
        raise ValueError(
            f"sequence of length {start + x.size(1)} is longer than the learned table "
            f"(max_len={table.num_embeddings}): a learned table has no vector for later positions; "
            f"build it with a larger max_len or truncate the input"
        )


def check_relative_vectors(query: torch.Tensor, key: torch.Tensor, a_k: torch.Tensor, a_v: torch.Tensor) -> None:
    """Raise a ValueError unless Shaw et al.'s a_k and a_v are both (L_q, L_k, d_k): one vector per pair."""
    if a_k.shape != (query.size(-2), key.size(-2), query.size(-1)) or a_v.shape != a_k.shape:
        raise ValueError(f"a_k {tuple(a_k.shape)} and a_v {tuple(a_v.shape)} must both be (L_q, L_k, d_k) = "
                         f"{(query.size(-2), key.size(-2), query.size(-1))}: one vector per (query, key) pair")


def check_offset_table(q: torch.Tensor, E: torch.Tensor) -> None:
    """Raise a ValueError unless Music Transformer's E is (L, D) for q (..., L, D): one row per offset
    -(L-1) .. 0."""
    if E.shape != (q.size(-2), q.size(-1)):
        raise ValueError(f"E {tuple(E.shape)} must be (L, D) = {(q.size(-2), q.size(-1))}: one row per offset "
                         f"-(L-1) .. 0")


def check_rotary_sizes(length: int, d: int, start: int) -> None:
    """Raise a ValueError unless length and start are >= 0 and d is a positive even number of features."""
    check_sizes(allow_zero=True, length=length, start=start)
    check_sizes(d=d)
    if d % 2 != 0:
        raise ValueError(f"d={d} must be even: rotary embeddings turn the features in pairs; use an even d_k")
