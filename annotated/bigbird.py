"""BigBird's sparse attention as one mask (Zaheer et al., 2020, "Big Bird: Transformers for
Longer Sequences", §2).

Each query attends to three kinds of keys:

- a **window**: the w positions around it (its neighbours, as in restricted attention);
- **random** keys: r positions drawn for each query;
- **global** tokens: g positions that attend to everything and that everything attends to.

A query that is not global sees at most w + r + g keys, a constant, so the layer costs
O(n · (w + r + g) · d). The paper views the mask as a graph, an edge from each query to the keys it
may attend to, and argues from graph theory: random graphs have short paths between any two
nodes, and global tokens make every path at most 2 long. ``graph_diameter`` measures it.
The paper's "ITC" variant makes existing tokens global, as here; its "ETC" variant adds extra ones.

The mask follows the course's convention, True = may attend, so it drops into the course's
``MultiHeadAttention`` and encoder as it is (combined with a padding mask by ``&``).

Notebook: ``13_the_cost_of_attention.ipynb``.
"""

import torch

from annotated.support.variant_checks import check_bigbird_arguments, check_square_mask


def bigbird_mask(n: int, window: int = 3, n_random: int = 2, n_global: int = 1,
                 generator: torch.Generator | None = None) -> torch.Tensor:
    """(n, n) bool mask, True where query i may attend to key j.

    window: keys i - window // 2 .. i + window // 2 (odd, >= 1); n_random: keys drawn per query,
    without replacement, among the n positions; n_global: the first positions, which attend to and
    are attended by every position.
    """
    check_bigbird_arguments(n, window, n_random, n_global)  # sizes that fit, an odd window, or a clear error
    position = torch.arange(n)
    mask = (position.unsqueeze(1) - position.unsqueeze(0)).abs() <= window // 2  # the band
    # n_random keys per query: the first n_random of a random permutation of each row.
    order = torch.rand(n, n, generator=generator).argsort(dim=-1)  # (n, n)
    mask[position.unsqueeze(1), order[:, :n_random]] = True
    mask[:n_global, :] = True  # global tokens see everything
    mask[:, :n_global] = True  # and everything sees them
    return mask


def keys_per_query(mask: torch.Tensor) -> torch.Tensor:
    """How many keys each query may attend to: (..., L_q) from a mask (..., L_q, L_k)."""
    return mask.sum(-1)


def graph_diameter(mask: torch.Tensor) -> int:
    """The longest shortest path, in layers, between any two positions of an (n, n) mask.

    Position j reaches position i in one layer when query i may attend to key j; in t layers
    when a chain of t such steps connects them. Raises ValueError if some pair never connects.
    """
    check_square_mask(mask)  # (n, n), or a ValueError
    n = mask.size(0)
    # A sparse step: a few keys per query make each layer cost O(n · keys) per source.
    step = (mask | torch.eye(n, dtype=torch.bool)).float().to_sparse()  # a position keeps what it had
    reached = torch.eye(n)  # reached[i, j] > 0: j's input has reached i's output
    for layers in range(1, n + 1):
        reached = (torch.sparse.mm(step, reached) > 0).float()
        if bool((reached > 0).all()):
            return layers
    raise ValueError("the mask's graph is not connected: some position never reaches another; "
                     "add a window, global tokens or random keys")
