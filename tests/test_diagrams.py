"""The lecture decks' board diagrams: each draws at every step, at the slide's size, with text
large enough for the back of a hall, nothing drawn over a label, and each step a build on
the one before."""

import io
import re
from collections import Counter

import matplotlib
import pytest
import torch
from matplotlib.collections import Collection
from matplotlib.colors import to_rgba
from matplotlib.lines import Line2D
from matplotlib.patches import FancyArrowPatch, Patch, Rectangle
from matplotlib.text import Text

from annotated.support import diagrams
from annotated.support.diagrams import (COLOURS, MIN_FONT_PT, STAGES, drawing_collisions, drawn_texts, steps,
                                        text_overlaps, texts_outside)

NAMES = list(STAGES)
# Okabe and Ito's palette, safe for every common colour-vision deficiency.
OKABE_ITO = {"#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7", "#000000"}


@pytest.fixture(scope="module")
def figures():
    """Every step of every diagram, drawn once for the whole module: {(name, step): figure}."""
    return {(name, step): getattr(diagrams, name)(step=step) for name in NAMES for step in range(1, steps(name) + 1)}


@pytest.fixture(scope="module")
def finished(figures):
    """The last step of each diagram: it holds every label of the earlier steps, in the same places."""
    return {name: figures[name, steps(name)] for name in NAMES}


def _signature(artist) -> tuple:
    """What an artist looks like where it is drawn, comparable between two figures of one size."""
    if isinstance(artist, Text):
        return ("text", artist.get_text(), *(round(v, 2) for v in artist.get_position()), artist.get_fontsize())
    if isinstance(artist, Line2D):
        return ("line", tuple(artist.get_xydata().round(2).ravel()))
    if isinstance(artist, Collection):
        extents = tuple(tuple(p.get_extents(artist.get_transform()).bounds) for p in artist.get_paths())
        return ("cells", tuple(tuple(round(v, 1) for v in e) for e in extents),
                tuple(artist.get_facecolor().round(3).ravel()))
    assert isinstance(artist, Patch), type(artist)
    if isinstance(artist, FancyArrowPatch):  # its path is only final once drawn: compare its ends
        return ("arrow", tuple(round(v, 2) for end in artist._posA_posB for v in end))
    return (type(artist).__name__, tuple(round(v, 1) for v in artist.get_extents().bounds),
            tuple(round(v, 3) for v in artist.get_facecolor()))


def _drawn(fig) -> Counter:
    ax, = fig.axes
    return Counter(_signature(a) for a in [*ax.texts, *ax.lines, *ax.patches, *ax.collections])


def _cell_colours(fig) -> list[tuple]:
    """The fill of every cell of every block, and of every single box."""
    ax, = fig.axes
    colours = [tuple(c) for col in ax.collections for c in col.get_facecolor()]
    return colours + [tuple(p.get_facecolor()) for p in ax.patches if isinstance(p, Rectangle)]


def test_every_diagram_draws_every_step_of_its_build(figures):
    assert {name: steps(name) for name in NAMES} == {"attention_flow": 3, "heads_and_wo": 4,
                                                     "encoder_decoder_masks": 4, "decoder_step_cache": 4}
    for (name, step), fig in figures.items():
        assert drawn_texts(fig), f"{name} step {step} draws no label"


def test_each_figure_is_the_slides_figure_area_of_1200_by_540_px(figures):
    for key, fig in figures.items():
        assert tuple(fig.get_size_inches()) == pytest.approx((12.0, 5.4)), key
        assert tuple(fig.get_size_inches() * 100) == pytest.approx((1200, 540)), key


def test_every_text_is_at_least_the_minimum_size_for_a_hall(figures):
    assert MIN_FONT_PT >= 16
    for key, fig in figures.items():
        small = [(t.get_text(), t.get_fontsize()) for t in drawn_texts(fig) if t.get_fontsize() < MIN_FONT_PT]
        assert not small, f"{key}: texts below {MIN_FONT_PT} pt: {small}"


def test_no_two_texts_overlap(finished):
    for name, fig in finished.items():
        assert not text_overlaps(fig), f"{name}: overlapping labels {text_overlaps(fig)}"


def test_no_arrow_line_or_block_runs_over_a_label_and_every_label_fits_its_box(finished):
    for name, fig in finished.items():
        assert not drawing_collisions(fig), f"{name}: {drawing_collisions(fig)}"


def test_no_text_reaches_past_the_edges_of_the_figure(finished):
    for name, fig in finished.items():
        assert not texts_outside(fig), f"{name}: {texts_outside(fig)}"


def test_the_checks_catch_labels_squeezed_together(monkeypatch):
    # Rows of the decoding diagram 1.5 units apart: their step numbers and tokens collide.
    monkeypatch.setattr(diagrams, "_ROW_Y", [39.0, 37.5, 36.0, 34.5])
    assert ("1", "2") in text_overlaps(diagrams.decoder_step_cache(step=4))


def test_the_checks_catch_a_box_shrunk_below_its_label(monkeypatch):
    monkeypatch.setattr(diagrams, "_STACK_W", 12.0)
    found = drawing_collisions(diagrams.encoder_decoder_masks(step=1))
    assert "'encoder-decoder\\nattention' spills out of its box" in found, found


def test_each_step_adds_to_the_one_before_and_removes_nothing(figures):
    for name in NAMES:
        for step in range(1, steps(name)):
            before, after = _drawn(figures[name, step]), _drawn(figures[name, step + 1])
            gone = before - after
            assert not gone, f"{name}: step {step + 1} removes or moves {list(gone)[:3]}"
            assert sum(after.values()) > sum(before.values()), f"{name}: step {step + 1} adds nothing"


def test_steps_rejects_an_unknown_name_in_one_line_naming_the_known_ones():
    with pytest.raises(ValueError) as error:
        steps("attention_flows")
    message = str(error.value)
    assert "\n" not in message and "'attention_flows'" in message
    assert all(name in message for name in NAMES)


def test_a_step_out_of_range_is_refused_with_the_range():
    with pytest.raises(ValueError, match=r"heads_and_wo builds in steps 1 to 4, got step=5"):
        diagrams.heads_and_wo(step=5)
    with pytest.raises(ValueError, match="steps 1 to 3, got step=0"):
        diagrams.attention_flow(step=0)


def test_labels_use_the_papers_names(finished):
    def text(name):
        return "\n".join(t.get_text() for t in drawn_texts(finished[name]))

    for name in ["softmax$(QK^\\top /$√$d_k)", "÷ √$d_k$", r"L_q \times d_k", r"L_k \times d_v", r"K^\top"]:
        assert name in text("attention_flow"), name
    heads = text("heads_and_wo")
    for name in ["W^Q", "W^K", "W^V", "W^O", r"d_{\mathrm{model}}", "d_k = d_{\\mathrm{model}} / h", "$h = 4$",
                 r"\mathrm{head}_i", r"d_{\mathrm{model}} \times d_{\mathrm{model}}"]:
        assert name in heads, name
    assert r"N\times" in text("encoder_decoder_masks") and "look-ahead" in text("encoder_decoder_masks")
    assert "$q_t$" in text("decoder_step_cache") and "cached $K$" in text("decoder_step_cache")


def test_colours_are_colour_blind_safe_and_q_k_v_keep_theirs_in_every_diagram(finished):
    for name, colour in COLOURS.items():
        r, g, b, _ = to_rgba(colour)
        assert colour.upper() in OKABE_ITO or (r == g == b), f"{name} {colour} is neither Okabe-Ito nor grey"
    for name in ["attention_flow", "heads_and_wo", "decoder_step_cache"]:
        drawn = set(_cell_colours(finished[name]))
        for vector in "QKV":
            assert to_rgba(COLOURS[vector]) in drawn, f"{name} draws no {vector} in {COLOURS[vector]}"


def test_the_masks_drawn_are_the_course_masks():
    masks = diagrams._mask_matrices()
    assert masks["encoder"].shape == (5, 5) and masks["cross"].shape == (4, 5)
    assert not masks["encoder"][:, -1].any() and not masks["cross"][:, -1].any(), "the source's pad key is masked"
    assert masks["decoder"].int().tolist() == [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 0]]
    fig = diagrams.encoder_decoder_masks(step=4)
    allowed = sum(colour == to_rgba(COLOURS["allowed"]) for colour in _cell_colours(fig))
    assert allowed == sum(int(m.sum()) for m in masks.values()) + 1  # + the legend's square


def test_the_attention_weights_drawn_give_the_pad_key_nothing_and_each_row_sums_to_one():
    _, weights, mask = diagrams._attention_numbers()
    assert mask.tolist() == [True, True, True, False]
    assert torch.all(weights[:, -1] == 0)
    assert torch.allclose(weights.sum(-1), torch.ones(3))


def test_the_cache_grows_by_one_key_and_one_value_per_step(figures):
    for step in range(1, 5):
        colours = Counter(_cell_colours(figures["decoder_step_cache", step]))
        assert colours[to_rgba(COLOURS["K"])] == colours[to_rgba(COLOURS["V"])] == step * (step + 1) // 2
        assert colours[to_rgba(COLOURS["Q"])] == step  # one new query per step


def test_as_svg_with_text_kept_as_text_every_glyph_is_in_the_one_font_a_deck_ships(finished):
    # mathtext's \sqrt and big operators come from STIX fonts that a browser does not have.
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        for name, fig in finished.items():
            svg = io.StringIO()
            fig.savefig(svg, format="svg")
            fonts = set(re.findall(r"font-family: '?([^;'\"]+)", svg.getvalue()))
            assert fonts == {"DejaVu Sans"}, f"{name} uses {fonts}"
