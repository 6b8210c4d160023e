"""The command line's presets against the notebook they stand for: ``--preset notebook`` is notebook 11's run,
and ``--preset base`` the paper's base model (Table 3, §5.3, §5.4, §6.1)."""

import nbformat

from annotated.model import TransformerConfig
from annotated.support.cli import PRESETS
from annotated.support.course import NOTEBOOKS

NOTEBOOK = NOTEBOOKS / "11_translating_german_to_english.ipynb"


def notebook_settings() -> dict:
    """The names notebook 11's settings cell assigns (the cell that sets ``MAX_STEPS``), run on their own."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "code" and "\nMAX_STEPS = " in "\n" + c.source)
    settings: dict = {}
    exec(cell.source, settings)  # plain assignments of numbers
    return settings


def test_the_notebook_preset_is_notebook_11s_run():
    s, ours = notebook_settings(), PRESETS["notebook"]
    assert (ours.N, ours.d_model, ours.h, ours.d_ff, ours.dropout, ours.min_freq) == (
        s["N"], s["d_model"], s["h"], s["d_ff"], s["dropout"], s["MIN_FREQ"])
    assert (ours.max_tokens, ours.warmup, ours.label_smoothing) == (s["MAX_TOKENS"], s["WARMUP"], s["LABEL_SMOOTHING"])
    assert (ours.max_steps, ours.beam_size, ours.length_penalty) == (s["MAX_STEPS"], s["BEAM_SIZE"], s["LENGTH_PENALTY"])
    assert (ours.bpe_merges, ours.lr_factor) == (s["BPE_MERGES"], s["FACTOR"])
    defaults = TransformerConfig(10, 10)  # the notebook's model leaves both extra dropout sites at their default
    assert (ours.attention_dropout, ours.ff_dropout) == (defaults.attention_dropout, defaults.ff_dropout) == (0.0, 0.0)


def test_the_base_preset_is_the_papers_base_model():
    base = PRESETS["base"]
    assert (base.N, base.d_model, base.h, base.d_ff, base.dropout, base.warmup) == (6, 512, 8, 2048, 0.1, 4000)
    assert (base.beam_size, base.length_penalty, base.label_smoothing) == (4, 0.6, 0.1)
    assert base.max_tokens * base.accum_steps >= 25_000  # about 25,000 target tokens per update (§5.1)
    assert PRESETS["cpu"].bpe_merges == base.bpe_merges == 8_000
