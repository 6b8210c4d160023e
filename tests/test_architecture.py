import re

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from annotated.support.architecture import CLASS_LABELS, draw_architecture  # noqa: E402


def test_figure_one_names_every_class_of_the_model_as_a_whole_word():
    fig = draw_architecture()
    drawn = "\n".join(text.get_text() for ax in fig.axes for text in ax.texts)
    plt.close(fig)
    expected = {"Embeddings", "PositionalEncoding", "MultiHeadAttention", "SublayerConnection",
                "PositionwiseFeedForward", "EncoderLayer", "DecoderLayer", "Encoder", "Decoder",
                "Generator", "EncoderDecoder"}
    assert set(CLASS_LABELS) == expected
    for name in expected:
        assert re.search(rf"\b{name}\b", drawn), name


def test_figure_one_draws_the_papers_blocks_with_their_counts():
    fig = draw_architecture()
    texts = [text.get_text() for ax in fig.axes for text in ax.texts]
    plt.close(fig)
    # Encoder: attention, FFN; decoder: masked attention, cross-attention, FFN; one Add & Norm per sub-layer.
    assert texts.count("Add & Norm") == 5
    assert texts.count("Multi-Head Attention") == 2 and texts.count("Masked Multi-Head Attention") == 1
    assert texts.count("Feed Forward") == 2 and texts.count("N×") == 2
    assert "Linear" in texts and "Softmax" in texts
