"""Board diagrams for the lecture decks: what an instructor draws while explaining
scaled dot-product attention (paper §3.2.1), multi-head attention (§3.2.2), the masks of
the encoder and the decoder (§3.1, §3.2.3), and greedy decoding with a key/value cache.

Drawing code only; the course does not teach it. Each diagram is a function of ``step``
(1 to ``steps(name)``) returning a figure of the slide's figure area, 12 x 5.4 inches; step
k + 1 draws everything step k drew and more, so a deck can show the steps one after another
as fragments. The numbers drawn (attention weights, masks) come from the course's own
functions: ``scaled_dot_product_attention`` and ``padding_mask`` / ``target_mask``.

Usage::

    fig = attention_flow(step=steps("attention_flow"))
    fig.savefig("attention.svg")
"""

from collections.abc import Callable

import torch
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PolyCollection
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle
from matplotlib.path import Path
from matplotlib.text import Text
from matplotlib.transforms import Bbox

from annotated.attention import scaled_dot_product_attention
from annotated.masks import padding_mask, target_mask

# The slide's figure area is 1200 x 540 px; at 100 px per inch that is 12 x 5.4 inches.
FIGSIZE = (12.0, 5.4)
# Decks draw figures as SVG, where 1 pt is 1 px before the slide scales up: 16 px at least.
MIN_FONT_PT = 16
TITLE_PT = 20
# Drawing units: 1 unit = 0.1 inch, so the figure is 120 x 54 units and a 16 pt line is about 2.2 units tall.
WIDTH, HEIGHT = 120, 54

# Okabe and Ito's colour-blind-safe palette; Q, K and V keep their colour in every diagram.
COLOURS = {
    "Q": "#56B4E9",       # sky blue
    "K": "#E69F00",       # orange
    "V": "#009E73",       # bluish green
    "score": "#CC79A7",   # reddish purple: scores and weights
    "out": "#D55E00",     # vermillion: what attention returns
    "x": "#BBBBBB",       # grey: the layer's input
    "W": "#F0E442",       # yellow: learned projections
    "allowed": "#0072B2",  # blue: a key the query may attend to
    "masked": "#E8E8E8",  # pale grey: a masked key
    "memory": "#999999",  # grey: the encoder's output
    "box": "#F4F4F4",     # sub-layer boxes
}


# ------------------------------------------------------------------ drawing helpers

def _board() -> tuple[Figure, Axes]:
    """A blank figure of the slide's size whose one axes spans it, in drawing units."""
    fig = Figure(figsize=FIGSIZE, facecolor="white")
    FigureCanvasAgg(fig)  # so that fig.canvas.draw() works without pyplot
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, WIDTH)
    ax.set_ylim(0, HEIGHT)
    ax.set_axis_off()
    return fig, ax


def _text(ax, x: float, y: float, s: str, size: float = MIN_FONT_PT, **kwargs) -> Text:
    kwargs = {"ha": "center", "va": "center", **kwargs}
    return ax.text(x, y, s, fontsize=size, **kwargs)


def _arrow(ax, start: tuple[float, float], end: tuple[float, float], lw: float = 2.0, **kwargs) -> None:
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=22, linewidth=lw,
                                 color="black", shrinkA=0, shrinkB=0, **kwargs))


def _box(ax, x: float, y: float, w: float, h: float, label: str, colour: str = COLOURS["box"],
         size: float = MIN_FONT_PT) -> None:
    """A rounded box with its lower-left corner at (x, y) and ``label``, if any, in its middle."""
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0,rounding_size=0.8",
                                facecolor=colour, edgecolor="black", linewidth=1.5))
    if label:
        _text(ax, x + w / 2, y + h / 2, label, size=size)


def _square(x: float, y: float, w: float, h: float) -> list[tuple[float, float]]:
    return [(x, y), (x + w, y), (x + w, y + h), (x, y + h)]


def _matrix(ax, x: float, y: float, rows: int, cols: int, cell: float, colour: str | list[list[str]],
            alpha: torch.Tensor | None = None, by: str = "row") -> None:
    """A rows x cols block of cells with its lower-left corner at (x, y). Each vector (a row,
    or a column when ``by="col"``) gets a dark outline, so a reader sees vectors, not numbers;
    ``alpha`` (rows, cols) shades cells by value."""
    cells, fills = [], []
    for i in range(rows):
        for j in range(cols):
            cells.append(_square(x + j * cell, y + (rows - 1 - i) * cell, cell, cell))
            fill = colour if isinstance(colour, str) else colour[i][j]
            fills.append(to_rgba(fill, 1.0 if alpha is None else float(alpha[i, j])))
    # One collection per block: hundreds of separate patches would make every figure slow to build.
    ax.add_collection(PolyCollection(cells, facecolors=fills, edgecolors="white", linewidths=1.0), autolim=False)
    if by == "row":
        vectors = [_square(x, y + (rows - 1 - i) * cell, cols * cell, cell) for i in range(rows)]
    else:
        vectors = [_square(x + j * cell, y, cell, rows * cell) for j in range(cols)]
    ax.add_collection(PolyCollection(vectors, facecolors="none", edgecolors="#333333", linewidths=1.2),
                      autolim=False)


def _highlight_row(ax, x: float, y: float, rows: int, cols: int, cell: float, row: int = 0) -> None:
    """A thick outline around one row: the first query, followed through the whole computation."""
    ax.add_patch(Rectangle((x - 0.3, y + (rows - 1 - row) * cell - 0.3), cols * cell + 0.6, cell + 0.6,
                           facecolor="none", edgecolor="black", linewidth=3.0))


def _legend_square(ax, x: float, y: float, colour: str, label: str, linewidth: float = 1.0) -> None:
    ax.add_patch(Rectangle((x, y - 1.1), 2.2, 2.2, facecolor=colour, edgecolor="black", linewidth=linewidth))
    _text(ax, x + 3.0, y, label, ha="left")


# ------------------------------------------------------------------ 1. attention, Q K V as blocks

L_Q, L_K, D_K, D_V = 3, 4, 3, 3
CELL = 3.6
_MID = 29.0  # the blocks' common centre line
_NAME_Y, _SHAPE_Y, _STEP_Y = 39.0, 18.5, 7.0  # block names above, shapes below, step captions
# Left edge of each block of attention_flow, in drawing units, and where the operators sit.
_Q_X, _KT_X, _S_X, _A_X, _V_X, _OUT_X = 3.0, 19.0, 38.6, 71.0, 90.6, 106.6


def _bottom(rows: int) -> float:
    return _MID - rows * CELL / 2


def _attention_numbers() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Scores, weights and mask of a small example, computed by the course's attention: three
    queries, four keys, the last of which is padding."""
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, L_Q, D_K, generator=gen)  # (1, L_q, d_k)
    k = torch.randn(1, L_K, D_K, generator=gen)  # (1, L_k, d_k)
    v = torch.randn(1, L_K, D_V, generator=gen)  # (1, L_k, d_v)
    tokens = torch.tensor([[5, 6, 7, 0]])  # the last key is <pad> (id 0)
    mask = padding_mask(tokens, pad_idx=0)  # (1, 1, L_k)
    _, weights = scaled_dot_product_attention(q, k, v, mask)  # weights (1, L_q, L_k)
    scores = q @ k.transpose(-2, -1)  # (1, L_q, L_k), before scaling: what step 1 draws
    return scores[0], weights[0], mask[0, 0]


def _named_block(ax, x: float, rows: int, cols: int, colour, name: str, shape: str, follow: bool = False,
                 **kwargs) -> None:
    """A block on the centre line with its name above and its shape below; ``follow`` outlines
    its first row, the first query, so a reader can follow it through the computation."""
    _matrix(ax, x, _bottom(rows), rows, cols, CELL, colour, **kwargs)
    if follow:
        _highlight_row(ax, x, _bottom(rows), rows, cols, CELL)
    _text(ax, x + cols * CELL / 2, _NAME_Y, name)
    _text(ax, x + cols * CELL / 2, _SHAPE_Y, shape)


def _attention_step_1(ax) -> None:
    """Every query meets every key: Q K^T gives an L_q x L_k matrix of scores."""
    scores, _, _ = _attention_numbers()
    shade = 0.25 + 0.75 * (scores - scores.min()) / (scores.max() - scores.min())
    # A plain √, not mathtext's \sqrt: its sign needs a STIX font that browsers lack (decks keep text as text).
    _text(ax, WIDTH / 2, 50.5, r"Attention$(Q, K, V)$ = softmax$(QK^\top /$√$d_k)\,V$", size=TITLE_PT)
    _named_block(ax, _Q_X, L_Q, D_K, COLOURS["Q"], r"$Q$", r"$L_q \times d_k$", follow=True)
    _legend_square(ax, _Q_X, 45.0, "white", "query 1, followed", linewidth=3.0)
    _text(ax, (_Q_X + D_K * CELL + _KT_X) / 2, _MID, r"$\times$")
    # K transposed: one column per key vector; the last key is padding.
    _named_block(ax, _KT_X, D_K, L_K, COLOURS["K"], r"$K^\top$", r"$d_k \times L_k$", by="col")
    _text(ax, _KT_X + (L_K - 0.5) * CELL, _NAME_Y, "pad")
    _text(ax, (_KT_X + L_K * CELL + _S_X) / 2, _MID, "=")
    # Scores: query i's row holds its dot product with every key.
    _named_block(ax, _S_X, L_Q, L_K, COLOURS["score"], "scores", r"$L_q \times L_k$", follow=True, alpha=shade)
    _text(ax, (_Q_X + _S_X + L_K * CELL) / 2, _STEP_Y, "1  each query · each key")


def _attention_step_2(ax) -> None:
    """Scale by 1/sqrt(d_k), mask the padding key, softmax each row: weights that sum to 1."""
    _, weights, mask = _attention_numbers()
    colours = [[COLOURS["score"] if mask[j] else COLOURS["masked"] for j in range(L_K)] for _ in range(L_Q)]
    shade = torch.where(mask, 0.15 + 0.85 * weights / weights.max(), torch.ones_like(weights))
    start, end = _S_X + L_K * CELL + 2.0, _A_X - 2.0
    mid = (start + end) / 2
    _arrow(ax, (start, _MID), (end, _MID))
    _text(ax, mid, _MID + 7.5, r"÷ √$d_k$")
    _text(ax, mid, _MID + 3.5, "mask pad")
    _text(ax, mid, _MID - 3.5, "softmax")
    _text(ax, mid, _MID - 7.2, "each row")
    _named_block(ax, _A_X, L_Q, L_K, colours, "weights", r"$L_q \times L_k$", follow=True, alpha=shade)
    _text(ax, _A_X + L_K * CELL / 2, _SHAPE_Y - 3.6, "rows sum to 1")
    _text(ax, (start + _A_X + L_K * CELL) / 2, _STEP_Y, "2  scale, mask, softmax")


def _attention_step_3(ax) -> None:
    """Each query's output is its weighted sum of the value vectors."""
    _text(ax, (_A_X + L_K * CELL + _V_X) / 2, _MID, r"$\times$")
    _named_block(ax, _V_X, L_K, D_V, COLOURS["V"], r"$V$", r"$L_k \times d_v$")
    _text(ax, (_V_X + D_V * CELL + _OUT_X) / 2, _MID, "=")
    _named_block(ax, _OUT_X, L_Q, D_V, COLOURS["out"], "output", r"$L_q \times d_v$", follow=True)
    _text(ax, (_V_X + _OUT_X + D_V * CELL) / 2 - 2.0, _STEP_Y, "3  weighted sum of values")


# ------------------------------------------------------------------ 2. heads and W^O

H, D_MODEL, L_TOK = 4, 8, 3
_PROJ_CELL, _OUT_CELL, _HEAD_CELL = 1.6, 1.4, 1.2
_PROJ_X = 26.0
_PROJ_Y = {"Q": 38.5, "K": 26.0, "V": 13.5}  # bottom of each projected block
_HEAD_Y = [38.0, 29.5, 21.0, 12.5]  # bottom of each head's row
_HEAD_X = 47.5  # left of the first head's Q_i
_CONCAT_X, _WO_X, _MH_OUT_X = 78.0, 93.0, 107.5
_CONCAT_Y = 27.0 - L_TOK * _OUT_CELL / 2


def _heads_step_1(ax) -> None:
    """x is projected three times, by W^Q, W^K and W^V, into Q, K and V of the same size."""
    _text(ax, WIDTH / 2, 51.0,
          r"$\mathrm{MultiHead}(x) = \mathrm{Concat}(\mathrm{head}_1, \ldots, \mathrm{head}_h)\,W^O$",
          size=TITLE_PT)
    x_y = _PROJ_Y["K"]
    width = D_MODEL * _PROJ_CELL
    mid_x = x_y + L_TOK * _PROJ_CELL / 2
    _matrix(ax, 1.5, x_y, L_TOK, D_MODEL, _PROJ_CELL, COLOURS["x"])
    _text(ax, 1.5 + width / 2, x_y + L_TOK * _PROJ_CELL + 2.5, r"$x$")
    _text(ax, 1.5 + width / 2, x_y - 2.8, r"$L \times d_{\mathrm{model}}$")
    for name, y in _PROJ_Y.items():
        mid = y + L_TOK * _PROJ_CELL / 2
        _arrow(ax, (1.5 + width + 0.3, mid_x), (16.5, mid), lw=1.5)
        _box(ax, 16.5, mid - 2.2, 6.5, 4.4, rf"$W^{name}$", COLOURS["W"])
        _arrow(ax, (23.0, mid), (_PROJ_X - 0.3, mid), lw=1.5)
        _matrix(ax, _PROJ_X, y, L_TOK, D_MODEL, _PROJ_CELL, COLOURS[name])
        _text(ax, _PROJ_X + width + 2.2, mid, rf"${name}$")


def _heads_step_2(ax) -> None:
    """Each of Q, K, V is cut into h blocks of d_k = d_model / h columns, one block per head."""
    d_k = D_MODEL // H
    for y in _PROJ_Y.values():
        for head in range(1, H):
            x = _PROJ_X + head * d_k * _PROJ_CELL
            ax.plot([x, x], [y - 0.8, y + L_TOK * _PROJ_CELL + 0.8], color="black", linewidth=3.0)
    for head in range(H):
        _text(ax, _PROJ_X + (head + 0.5) * d_k * _PROJ_CELL, _PROJ_Y["V"] - 2.6, str(head + 1))
    _text(ax, _PROJ_X + D_MODEL * _PROJ_CELL / 2, 6.5, r"$h = 4$ heads of")
    _text(ax, _PROJ_X + D_MODEL * _PROJ_CELL / 2, 2.5, r"$d_k = d_{\mathrm{model}} / h$")


def _heads_step_3(ax) -> None:
    """Each head attends with its own slices: head_i = Attention(Q_i, K_i, V_i), L x d_k."""
    d_k = D_MODEL // H
    width = d_k * _HEAD_CELL
    _text(ax, 61.0, 45.5, r"$\mathrm{head}_i = \mathrm{Attention}(Q_i, K_i, V_i)$")
    for head, y in enumerate(_HEAD_Y):
        mid = y + L_TOK * _HEAD_CELL / 2
        _text(ax, _HEAD_X - 2.0, mid, str(head + 1))
        for k, name in enumerate("QKV"):
            _matrix(ax, _HEAD_X + k * (width + 0.8), y, L_TOK, d_k, _HEAD_CELL, COLOURS[name])
        blocks_end = _HEAD_X + 3 * width + 1.6
        _arrow(ax, (blocks_end + 0.3, mid), (blocks_end + 2.2, mid), lw=1.5)
        _box(ax, blocks_end + 2.2, mid - 2.0, 11.5, 4.0, "attention", COLOURS["box"])
        _arrow(ax, (blocks_end + 13.7, mid), (blocks_end + 15.6, mid), lw=1.5)
        _matrix(ax, blocks_end + 15.6, y, L_TOK, d_k, _HEAD_CELL, COLOURS["out"])
    _text(ax, 61.0, 6.5, r"each $L \times d_k$")


def _heads_step_4(ax) -> None:
    """The h outputs are concatenated back to L x d_model and mixed by W^O."""
    d_k = D_MODEL // H
    width = D_MODEL * _OUT_CELL
    height = L_TOK * _OUT_CELL
    head_out_x = _HEAD_X + 3 * d_k * _HEAD_CELL + 1.6 + 15.6 + d_k * _HEAD_CELL
    for head, y in enumerate(_HEAD_Y):
        start = (head_out_x + 0.3, y + L_TOK * _HEAD_CELL / 2)
        end_y = _CONCAT_Y + height + 0.3 if head < H / 2 else _CONCAT_Y - 0.3
        _arrow(ax, start, (_CONCAT_X + (head + 0.5) * d_k * _OUT_CELL, end_y), lw=1.5)
    _matrix(ax, _CONCAT_X, _CONCAT_Y, L_TOK, D_MODEL, _OUT_CELL, COLOURS["out"])
    for head in range(1, H):
        x = _CONCAT_X + head * d_k * _OUT_CELL
        ax.plot([x, x], [_CONCAT_Y - 0.6, _CONCAT_Y + height + 0.6], color="black", linewidth=3.0)
    # Above the block: the arrows of the lower heads come in from below.
    _text(ax, _CONCAT_X + width / 2 + 2.5, _CONCAT_Y + height + 6.3, "Concat")
    _text(ax, _CONCAT_X + width / 2 + 2.5, _CONCAT_Y + height + 2.8, r"$L \times d_{\mathrm{model}}$")
    _text(ax, (_CONCAT_X + width + _WO_X) / 2, _CONCAT_Y + height / 2, r"$\times$")
    wo_y = _CONCAT_Y + height / 2 - width / 2
    _matrix(ax, _WO_X, wo_y, D_MODEL, D_MODEL, _OUT_CELL, COLOURS["W"])
    _text(ax, _WO_X + width / 2, wo_y + width + 2.5, r"$W^O$")
    _text(ax, _WO_X + width / 2, wo_y - 2.8, r"$d_{\mathrm{model}} \times d_{\mathrm{model}}$")
    _text(ax, (_WO_X + width + _MH_OUT_X) / 2, _CONCAT_Y + height / 2, "=")
    _matrix(ax, _MH_OUT_X, _CONCAT_Y, L_TOK, D_MODEL, _OUT_CELL, COLOURS["out"])
    _text(ax, _MH_OUT_X + width / 2, _CONCAT_Y + height + 2.5, "output")
    _text(ax, _MH_OUT_X + width / 2, _CONCAT_Y - 2.8, r"$L \times d_{\mathrm{model}}$")


# ------------------------------------------------------------------ 3. encoder, decoder and masks

SRC_LEN, TGT_LEN, MASK_CELL = 5, 4, 2.4
_ENC_X, _DEC_X, _STACK_W = 21.0, 58.0, 23.0
_ENC_BOXES = {"self": 17.0, "ffn": 27.0}  # bottom of each box
_DEC_BOXES = {"self": 11.0, "cross": 21.5, "ffn": 32.0}
_BOX_H = 7.0


def _mask_matrices() -> dict[str, torch.Tensor]:
    """The masks of one sentence pair, from the course's mask functions: a source of four
    tokens and a target of three, each padded by one to the batch's longest."""
    src = torch.tensor([[5, 6, 7, 8, 0]])  # (1, SRC_LEN), <pad> = 0
    tgt = torch.tensor([[1, 9, 10, 0]])  # (1, TGT_LEN), starts with <s>
    src_mask = padding_mask(src, pad_idx=0)  # (1, 1, SRC_LEN), broadcast over the queries
    return {"encoder": src_mask[0].expand(SRC_LEN, SRC_LEN),
            "cross": src_mask[0].expand(TGT_LEN, SRC_LEN),
            "decoder": target_mask(tgt, pad_idx=0)[0]}  # (TGT_LEN, TGT_LEN)


def _mask(ax, x: float, y: float, allowed: torch.Tensor) -> None:
    rows, cols = allowed.shape
    colours = [[COLOURS["allowed"] if allowed[i, j] else COLOURS["masked"] for j in range(cols)]
               for i in range(rows)]
    _matrix(ax, x, y, rows, cols, MASK_CELL, colours)


def _masks_step_1(ax) -> None:
    """The encoder stack and the decoder stack, each a layer repeated N times."""
    _text(ax, 2.0, 50.5, "Where each mask applies", size=TITLE_PT, ha="left")
    # Encoder.
    _box(ax, _ENC_X - 1.5, 13.5, _STACK_W + 3.0, 24.0, "", "#FAFAFA")
    _box(ax, _ENC_X, _ENC_BOXES["self"], _STACK_W, _BOX_H, "self-attention", COLOURS["box"])
    _box(ax, _ENC_X, _ENC_BOXES["ffn"], _STACK_W, 6.0, "feed-forward", COLOURS["box"])
    _arrow(ax, (_ENC_X + _STACK_W / 2, _ENC_BOXES["self"] + _BOX_H), (_ENC_X + _STACK_W / 2, _ENC_BOXES["ffn"]))
    _text(ax, _ENC_X + _STACK_W / 2, 3.5, "source")
    _arrow(ax, (_ENC_X + _STACK_W / 2, 5.5), (_ENC_X + _STACK_W / 2, _ENC_BOXES["self"]))
    _text(ax, _ENC_X + _STACK_W / 2 - 1.0, 40.0, r"encoder, $N\times$", ha="right")
    # Decoder.
    _box(ax, _DEC_X - 1.5, 8.0, _STACK_W + 3.0, 32.0, "", "#FAFAFA")
    _box(ax, _DEC_X, _DEC_BOXES["self"], _STACK_W, _BOX_H, "masked\nself-attention", COLOURS["box"])
    _box(ax, _DEC_X, _DEC_BOXES["cross"], _STACK_W, _BOX_H, "encoder-decoder\nattention", COLOURS["box"])
    _box(ax, _DEC_X, _DEC_BOXES["ffn"], _STACK_W, 6.0, "feed-forward", COLOURS["box"])
    mid = _DEC_X + _STACK_W / 2
    _arrow(ax, (mid, _DEC_BOXES["self"] + _BOX_H), (mid, _DEC_BOXES["cross"]))
    _arrow(ax, (mid, _DEC_BOXES["cross"] + _BOX_H), (mid, _DEC_BOXES["ffn"]))
    _text(ax, mid, 3.0, "target so far")
    _arrow(ax, (mid, 5.0), (mid, _DEC_BOXES["self"]))
    _text(ax, mid + 0.3, 42.5, r"decoder, $N\times$")
    # The memory: the encoder's output feeds every decoder layer's second attention.
    enc_top = _ENC_BOXES["ffn"] + 6.0
    ax.plot([_ENC_X + _STACK_W / 2, _ENC_X + _STACK_W / 2, 51.0, 51.0],
            [enc_top, 44.0, 44.0, _DEC_BOXES["cross"] + _BOX_H / 2], color="black", linewidth=2.0)
    _arrow(ax, (51.0, _DEC_BOXES["cross"] + _BOX_H / 2), (_DEC_X, _DEC_BOXES["cross"] + _BOX_H / 2))
    _text(ax, 42.5, 46.5, "memory")


def _masks_step_2(ax) -> None:
    """The encoder's self-attention: no query may attend to a padding key of the source."""
    allowed = _mask_matrices()["encoder"]
    y = _ENC_BOXES["self"] + _BOX_H / 2 - SRC_LEN * MASK_CELL / 2
    _mask(ax, 2.0, y, allowed)
    ax.plot([2.0 + SRC_LEN * MASK_CELL + 0.4, _ENC_X], [_ENC_BOXES["self"] + _BOX_H / 2] * 2, color="black",
            linewidth=1.5, linestyle=(0, (2, 2)))
    _text(ax, 2.0 + SRC_LEN * MASK_CELL / 2, y - 2.5, "source pad")
    _text(ax, 2.0 + SRC_LEN * MASK_CELL / 2, y + SRC_LEN * MASK_CELL + 2.5, "keys →")
    # The legend, once: what a cell means.
    _legend_square(ax, 86.0, 50.5, COLOURS["allowed"], "may attend")
    _legend_square(ax, 86.0, 46.5, COLOURS["masked"], "masked")
    _text(ax, 86.0, 42.5, "rows: queries", ha="left")
    _text(ax, 86.0, 38.5, "columns: keys", ha="left")


def _masks_step_3(ax) -> None:
    """The decoder's cross-attention: its keys are the source again, so the same padding mask."""
    allowed = _mask_matrices()["cross"]
    x = _DEC_X + _STACK_W + 6.0
    y = _DEC_BOXES["cross"] + _BOX_H / 2 - TGT_LEN * MASK_CELL / 2
    _mask(ax, x, y, allowed)
    ax.plot([_DEC_X + _STACK_W + 1.5, x - 0.4], [_DEC_BOXES["cross"] + _BOX_H / 2] * 2, color="black",
            linewidth=1.5, linestyle=(0, (2, 2)))
    _text(ax, x + SRC_LEN * MASK_CELL + 2.0, y + TGT_LEN * MASK_CELL / 2, "source pad", ha="left")


def _masks_step_4(ax) -> None:
    """The decoder's self-attention: no look ahead, and no padding key of the target."""
    allowed = _mask_matrices()["decoder"]
    x = _DEC_X + _STACK_W + 6.0
    y = _DEC_BOXES["self"] + _BOX_H / 2 - TGT_LEN * MASK_CELL / 2 - 1.0
    _mask(ax, x, y, allowed)
    ax.plot([_DEC_X + _STACK_W + 1.5, x - 0.4], [_DEC_BOXES["self"] + _BOX_H / 2] * 2, color="black",
            linewidth=1.5, linestyle=(0, (2, 2)))
    _text(ax, x + TGT_LEN * MASK_CELL + 2.0, y + TGT_LEN * MASK_CELL / 2 + 1.6, "look-ahead", ha="left")
    _text(ax, x + TGT_LEN * MASK_CELL + 2.0, y + TGT_LEN * MASK_CELL / 2 - 1.6, "+ target pad", ha="left")


# ------------------------------------------------------------------ 4. a decoding step and its cache

_READS = ["<s>", "a", "dog", "runs"]
_WRITES = ["a", "dog", "runs", "."]
_ROW_Y = [39.0, 30.0, 21.0, 12.0]  # centre of each decoding step's row
_VEC_W, _VEC_H, _VEC_GAP = 2.6, 4.4, 0.8
_CACHE_K_X, _CACHE_V_X, _MEM_X = 31.0, 49.0, 70.0


def _vector(ax, x: float, y_mid: float, colour: str, new: bool) -> None:
    """One key, value or query vector as an upright box; the one computed this step is outlined."""
    ax.add_patch(Rectangle((x, y_mid - _VEC_H / 2), _VEC_W, _VEC_H, facecolor=colour,
                           edgecolor="black", linewidth=3.0 if new else 1.0))


def _cache_header(ax) -> None:
    _text(ax, 2.0, 50.5, "Greedy decoding with a key/value cache", size=TITLE_PT, ha="left")
    _text(ax, 3.5, 45.5, r"$t$")
    _text(ax, 12.5, 45.5, "reads")
    _text(ax, 23.3, 45.5, r"$q_t$")
    _text(ax, _CACHE_K_X + 6.5, 45.5, r"cached $K$")
    _text(ax, _CACHE_V_X + 6.5, 45.5, r"cached $V$")
    _text(ax, _MEM_X + 2.75, 45.5, "memory")
    _text(ax, 88.0, 45.5, "writes")


def _cache_memory(ax) -> None:
    """The encoder's memory: computed once, before the first step, read by every step."""
    cell = (_ROW_Y[0] - _ROW_Y[-1] + _VEC_H + 2.0) / SRC_LEN
    bottom = _ROW_Y[-1] - _VEC_H / 2 - 1.0
    for i in range(SRC_LEN):  # one row per source token
        ax.add_patch(Rectangle((_MEM_X, bottom + i * cell), 5.5, cell, facecolor=COLOURS["memory"],
                               edgecolor="white", linewidth=1.5))
    ax.add_patch(Rectangle((_MEM_X, bottom), 5.5, SRC_LEN * cell, facecolor="none", edgecolor="#333333",
                           linewidth=1.2))
    _text(ax, _MEM_X + 2.75, bottom - 3.0, "computed once")
    _text(ax, _CACHE_K_X + 15.0, bottom - 3.0, "+1 key, +1 value per step")
    _legend_square(ax, 97.0, 39.0, "white", "new this step", linewidth=3.0)
    _legend_square(ax, 97.0, 34.0, "white", "from the cache")


def _cache_step(ax, t: int) -> None:
    """Decoding step t: the newest token's query attends to the keys and values of tokens 1..t."""
    y = _ROW_Y[t - 1]
    _text(ax, 3.5, y, str(t))
    _text(ax, 12.5, y, _READS[t - 1])
    _arrow(ax, (16.5, y), (21.5, y), lw=1.5)
    _vector(ax, 22.0, y, COLOURS["Q"], new=True)
    _arrow(ax, (25.2, y), (_CACHE_K_X - 0.6, y), lw=1.5)
    for j in range(t):
        _vector(ax, _CACHE_K_X + j * (_VEC_W + _VEC_GAP), y, COLOURS["K"], new=j == t - 1)
        _vector(ax, _CACHE_V_X + j * (_VEC_W + _VEC_GAP), y, COLOURS["V"], new=j == t - 1)
    _arrow(ax, (_CACHE_V_X + 4 * (_VEC_W + _VEC_GAP) + 0.5, y), (_MEM_X - 0.6, y), lw=1.5)
    _arrow(ax, (_MEM_X + 5.6, y), (84.0, y), lw=1.5)
    _text(ax, 88.0, y, _WRITES[t - 1])


def _cache_step_n(t: int) -> Callable:
    def draw(ax) -> None:
        if t == 1:
            _cache_header(ax)
            _cache_memory(ax)
        _cache_step(ax, t)
    draw.__doc__ = _cache_step.__doc__
    return draw


# ------------------------------------------------------------------ the diagrams

STAGES: dict[str, list[Callable]] = {
    "attention_flow": [_attention_step_1, _attention_step_2, _attention_step_3],
    "heads_and_wo": [_heads_step_1, _heads_step_2, _heads_step_3, _heads_step_4],
    "encoder_decoder_masks": [_masks_step_1, _masks_step_2, _masks_step_3, _masks_step_4],
    "decoder_step_cache": [_cache_step_n(t) for t in range(1, 5)],
}


def steps(name: str) -> int:
    """How many steps the diagram ``name`` builds in."""
    if name not in STAGES:
        raise ValueError(f"no board diagram called {name!r}; known: {', '.join(STAGES)}")
    return len(STAGES[name])


def draw(name: str, step: int | None = None) -> Figure:
    """Diagram ``name`` as far as ``step`` (1 to ``steps(name)``; the whole diagram when None)."""
    n = steps(name)
    step = n if step is None else step
    if not isinstance(step, int) or not 1 <= step <= n:
        raise ValueError(f"{name} builds in steps 1 to {n}, got step={step!r}")
    fig, ax = _board()
    for stage in STAGES[name][:step]:
        stage(ax)
    return fig


def attention_flow(step: int = 3) -> Figure:
    """Q (L_q x d_k), K (L_k x d_k) and V (L_k x d_v) through scaled dot-product attention.
    Step 1: Q K^T gives the scores; 2: scale, mask and softmax each row; 3: weights times V."""
    return draw("attention_flow", step)


def heads_and_wo(step: int = 4) -> Figure:
    """Multi-head attention with h = 4. Step 1: x projected by W^Q, W^K, W^V; 2: each split into
    h blocks of d_k = d_model / h columns; 3: attention in every head; 4: concatenation and W^O."""
    return draw("heads_and_wo", step)


def encoder_decoder_masks(step: int = 4) -> Figure:
    """The encoder and decoder stacks and their masks. Step 1: the stacks; 2: the source padding
    mask of the encoder's self-attention; 3: the same mask on the decoder's cross-attention;
    4: the look-ahead and target padding mask of the decoder's self-attention."""
    return draw("encoder_decoder_masks", step)


def decoder_step_cache(step: int = 4) -> Figure:
    """Greedy decoding: at step t the newest token's query attends to the cached keys and values
    of tokens 1..t, and to the encoder's memory, computed once. Steps 1-4: the cache grows."""
    return draw("decoder_step_cache", step)


# ------------------------------------------------------------------ checks the tests share

def drawn_texts(fig: Figure) -> list[Text]:
    """Every visible, non-empty text of the figure."""
    texts = list(fig.texts) + [t for ax in fig.axes for t in ax.texts]
    return [t for t in texts if t.get_visible() and t.get_text().strip()]


def _extents(fig: Figure) -> list[tuple[Text, Bbox]]:
    if fig.stale:  # drawing is the slow part; once is enough until something changes
        fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    return [(t, t.get_window_extent(renderer)) for t in drawn_texts(fig)]


def text_overlaps(fig: Figure) -> list[tuple[str, str]]:
    """Pairs of texts whose drawn extents overlap, after drawing the figure."""
    boxes = _extents(fig)
    return [(a.get_text(), b.get_text()) for i, (a, box_a) in enumerate(boxes) for b, box_b in boxes[i + 1:]
            if box_a.overlaps(box_b)]


def texts_outside(fig: Figure) -> list[str]:
    """Texts that reach past the figure's edges."""
    frame = fig.bbox
    return [t.get_text() for t, e in _extents(fig)
            if not (frame.x0 <= e.x0 and e.x1 <= frame.x1 and frame.y0 <= e.y0 and e.y1 <= frame.y1)]


def _pieces(path: Path, transform) -> list[Path]:
    """A path in display coordinates as plain polylines: an arrow's path ends with a CLOSEPOLY
    whose vertex (0, 0) would otherwise count as a line to the figure's corner."""
    return [Path(points) for points in transform.transform_path(path).to_polygons(closed_only=False)]


def drawing_collisions(fig: Figure) -> list[str]:
    """What a reader would see drawn over a label, one line each: an arrow or a line through it,
    a block of cells under it, a box it spills out of (a text anchored inside a box must fit in
    it) or a box it reaches into from outside."""
    found = []
    texts = _extents(fig)
    for ax in fig.axes:
        shapes = []  # (what, display path, filled)
        for patch in ax.patches:
            if isinstance(patch, FancyArrowPatch):
                shapes += [("an arrow", piece, False) for piece in _pieces(patch.get_path(), patch.get_transform())]
            elif isinstance(patch, Rectangle):
                shapes += [("a square", piece, True) for piece in _pieces(patch.get_path(), patch.get_transform())]
        for line in ax.lines:
            shapes += [("a line", piece, False) for piece in _pieces(line.get_path(), line.get_transform())]
        for collection in ax.collections:
            for path in collection.get_paths():
                shapes += [("a block", piece, True) for piece in _pieces(path, collection.get_transform())]
        for text, extent in texts:
            inner = Bbox.from_extents(
                extent.x0 + 1, extent.y0 + 1, extent.x1 - 1, extent.y1 - 1)  # touching is not crossing
            for what, path, filled in shapes:
                if path.intersects_bbox(inner, filled=filled):
                    found.append(f"{what} runs over {text.get_text()!r}")
            anchor = ax.transData.transform(text.get_position())
            for box in ax.patches:
                if not isinstance(box, FancyBboxPatch):
                    continue
                frame = box.get_window_extent()
                if frame.contains(*anchor):
                    if not (frame.x0 <= extent.x0 and extent.x1 <= frame.x1 and frame.y0 <= extent.y0
                            and extent.y1 <= frame.y1):
                        found.append(f"{text.get_text()!r} spills out of its box")
                elif frame.overlaps(inner):
                    found.append(f"{text.get_text()!r} reaches into a box")
    return list(dict.fromkeys(found))  # a label over a block is one finding, not one per cell
