"""The paper's Figure 1 (the Transformer's architecture), drawn with matplotlib and labelled
with the names of the course's classes. Notebook 07 shows it before the code.

Each box carries two lines: the paper's name for the block, then the class that implements
it. ``draw_architecture`` returns the figure; ``CLASS_LABELS`` lists the class names drawn.
"""

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch

# Colours in the spirit of the paper's figure: one per kind of block.
COLOURS = {
    "attention": "#fbd9b0",
    "norm": "#f4f1a8",
    "ffn": "#bfe3f3",
    "embedding": "#f7c6c6",
    "linear": "#d9cff0",
    "softmax": "#c9ebc9",
    "layer": "#eeeeee",
}

# The classes the figure names, in the order a reader meets them in notebooks 05-07.
CLASS_LABELS = [
    "Embeddings", "PositionalEncoding", "MultiHeadAttention", "SublayerConnection",
    "PositionwiseFeedForward", "EncoderLayer", "DecoderLayer", "Encoder", "Decoder",
    "Generator", "EncoderDecoder",
]

BOX_WIDTH = 3.6


def _box(ax, x: float, y: float, title: str, name: str, kind: str, height: float = 0.9) -> tuple[float, float]:
    """A rounded box centred at x with its bottom at y; returns (bottom, top)."""
    ax.add_patch(FancyBboxPatch((x - BOX_WIDTH / 2, y), BOX_WIDTH, height, boxstyle="round,pad=0.02,rounding_size=0.15",
                                facecolor=COLOURS[kind], edgecolor="black", linewidth=1.0, zorder=2))
    ax.text(x, y + height * 0.64, title, ha="center", va="center", fontsize=10, zorder=3)
    ax.text(x, y + height * 0.27, name, ha="center", va="center", fontsize=8.5, family="monospace",
            color="#303080", zorder=3)
    return y, y + height


def _arrow(ax, start: tuple[float, float], end: tuple[float, float], **kwargs) -> None:
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=11, linewidth=1.1,
                                 color="black", shrinkA=0, shrinkB=0, zorder=1, **kwargs))


def _residual(ax, x: float, side: float, y_from: float, y_to: float) -> None:
    """The residual path: from the sub-layer's input around it into Add & Norm."""
    x_out = x + side * (BOX_WIDTH / 2 + 0.35)
    ax.plot([x, x_out, x_out], [y_from, y_from, y_to], color="black", linewidth=1.1, zorder=1)
    _arrow(ax, (x_out, y_to), (x + side * BOX_WIDTH / 2, y_to))


def _sublayer(ax, x: float, y: float, side: float, title: str, name: str, kind: str) -> float:
    """A sub-layer box, then Add & Norm, with the residual around both; returns the new top."""
    branch = y - 0.3  # where the residual leaves the stream
    _arrow(ax, (x, branch), (x, y))
    _, top = _box(ax, x, y, title, name, kind)
    norm_bottom, norm_top = _box(ax, x, top + 0.45, "Add & Norm", "SublayerConnection", "norm", height=0.8)
    _arrow(ax, (x, top), (x, norm_bottom))
    _residual(ax, x, side, branch, norm_bottom + 0.4)
    return norm_top


def _embedding_input(ax, x: float, side: float, title: str, words: str) -> float:
    """Tokens -> Embeddings -> + PositionalEncoding; returns the y of the stream above the sum."""
    ax.text(x, 0.15, words, ha="center", va="center", fontsize=10)
    _arrow(ax, (x, 0.4), (x, 0.9))
    _, top = _box(ax, x, 0.9, title, "Embeddings", "embedding")
    circle_y = top + 0.75
    ax.add_patch(Circle((x, circle_y), 0.22, facecolor="white", edgecolor="black", linewidth=1.1, zorder=2))
    ax.text(x, circle_y, "+", ha="center", va="center", fontsize=13, zorder=3)
    _arrow(ax, (x, top), (x, circle_y - 0.22))
    # The positional encoding enters the sum from the outer side, as in the paper's figure.
    label_x = x + side * 2.55
    ax.text(label_x, circle_y + 0.12, "Positional\nEncoding", ha="center", va="center", fontsize=9.5)
    ax.text(label_x, circle_y - 0.55, "PositionalEncoding\n(+ dropout P_drop)", ha="center", va="center",
            fontsize=8, family="monospace", color="#303080")
    _arrow(ax, (x + side * 1.55, circle_y), (x + side * 0.22, circle_y))
    return circle_y + 0.22


def draw_architecture() -> Figure:
    """Figure 1 of the paper: the encoder stack (left), the decoder stack (right), the memory
    passed from one to the other, and the generator on top; every block names its class."""
    fig, ax = plt.subplots(figsize=(11, 12))
    enc_x, dec_x = 3.2, 10.0

    # Encoder: embeddings, then one EncoderLayer (drawn once, repeated N times).
    y = _embedding_input(ax, enc_x, -1, "Input Embedding", "Inputs (source tokens)")
    enc_frame_bottom = y + 0.35
    y = _sublayer(ax, enc_x, y + 0.9, -1, "Multi-Head Attention", "MultiHeadAttention", "attention")
    y = _sublayer(ax, enc_x, y + 0.9, -1, "Feed Forward", "PositionwiseFeedForward", "ffn")
    enc_frame_top = y + 0.3
    ax.add_patch(FancyBboxPatch((enc_x - 2.55, enc_frame_bottom), 5.1, enc_frame_top - enc_frame_bottom,
                                boxstyle="round,pad=0.02,rounding_size=0.3", facecolor=COLOURS["layer"],
                                edgecolor="black", linewidth=1.2, zorder=0))
    ax.text(enc_x - 2.75, (enc_frame_bottom + enc_frame_top) / 2, "N×", ha="right", va="center", fontsize=14)
    ax.text(enc_x - 0.2, enc_frame_top + 0.15, "EncoderLayer\n(N of them: Encoder)", ha="right", va="bottom",
            fontsize=8.5, family="monospace", color="#303080")
    memory_y = enc_frame_top + 0.9

    # Decoder: embeddings of the shifted target, then one DecoderLayer.
    y = _embedding_input(ax, dec_x, +1, "Output Embedding", "Outputs (target, shifted right)")
    dec_frame_bottom = y + 0.35
    y = _sublayer(ax, dec_x, y + 0.9, +1, "Masked Multi-Head Attention", "MultiHeadAttention", "attention")
    cross_y = y + 0.9
    y = _sublayer(ax, dec_x, cross_y, +1, "Multi-Head Attention", "MultiHeadAttention", "attention")
    y = _sublayer(ax, dec_x, y + 0.9, +1, "Feed Forward", "PositionwiseFeedForward", "ffn")
    dec_frame_top = y + 0.3
    ax.add_patch(FancyBboxPatch((dec_x - 2.55, dec_frame_bottom), 5.1, dec_frame_top - dec_frame_bottom,
                                boxstyle="round,pad=0.02,rounding_size=0.3", facecolor=COLOURS["layer"],
                                edgecolor="black", linewidth=1.2, zorder=0))
    ax.text(dec_x + 2.75, (dec_frame_bottom + dec_frame_top) / 2, "N×", ha="left", va="center", fontsize=14)
    ax.text(dec_x - 0.2, dec_frame_top + 0.15, "DecoderLayer\n(N of them: Decoder)", ha="right", va="bottom",
            fontsize=8.5, family="monospace", color="#303080")

    # The memory: the encoder's output becomes the keys and values of every decoder layer's
    # second attention; its queries come from the decoder (the arrow from below).
    between = (enc_x + dec_x) / 2  # the memory runs down the gap between the two stacks
    _arrow(ax, (enc_x, enc_frame_top - 0.3), (enc_x, memory_y))
    ax.plot([enc_x, between, between], [memory_y, memory_y, cross_y + 0.45], color="black", linewidth=1.1, zorder=1)
    _arrow(ax, (between, cross_y + 0.45), (dec_x - BOX_WIDTH / 2, cross_y + 0.45))
    ax.text(between + 0.12, (memory_y + cross_y) / 2 + 0.2, "memory (keys, values)", ha="left", va="center",
            rotation=90, fontsize=9, style="italic")
    ax.text(dec_x + 0.12, cross_y - 0.5, "queries", ha="left", va="center", fontsize=8, style="italic")

    # Generator and softmax on top of the decoder.
    _arrow(ax, (dec_x, dec_frame_top - 0.3), (dec_x, dec_frame_top + 0.9))
    _, top = _box(ax, dec_x, dec_frame_top + 0.9, "Linear", "Generator", "linear", height=0.8)
    _arrow(ax, (dec_x, top), (dec_x, top + 0.4))
    _, top = _box(ax, dec_x, top + 0.4, "Softmax", "in the loss / decoding", "softmax", height=0.8)
    _arrow(ax, (dec_x, top), (dec_x, top + 0.4))
    ax.text(dec_x, top + 0.6, "Output Probabilities", ha="center", va="center", fontsize=10)

    ax.text(enc_x, top + 0.6, "EncoderDecoder\nencode(src) → memory\ndecode(memory, tgt) → Generator",
            ha="center", va="center", fontsize=9, family="monospace", color="#303080",
            bbox=dict(boxstyle="round,pad=0.4", facecolor="white", edgecolor="#303080"))
    ax.set_xlim(-0.6, 13.8)
    ax.set_ylim(-0.3, top + 1.2)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title("The Transformer (paper, Figure 1), labelled with the course's classes", fontsize=12)
    fig.tight_layout()
    return fig
