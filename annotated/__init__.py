"""annotated: the Transformer of "Attention Is All You Need", built piece by piece.

The taught modules, in the order the notebooks build them:

==================================  ========================================
module                              notebook
==================================  ========================================
``annotated.softmax``               01 Softmax and the 1/sqrt(d_k) scaling
``annotated.attention``             02 Scaled dot-product attention
``annotated.masks``                 03 Masking
``annotated.multi_head``            04 Multi-head attention
``annotated.positional``            05 Positional encoding
``annotated.feed_forward``          06 Feed-forward, residuals and layer norm
``annotated.layer_norm``            06
``annotated.residual``              06
``annotated.model``                 07 The full model
``annotated.batching``              08 Training
``annotated.synthetic``             08
``annotated.label_smoothing``       08
``annotated.schedule``              08
``annotated.training``              08
``annotated.decoding``              09 Decoding (``greedy_decode_simple``: 08)
``annotated.beam_search``           09
``annotated.data``                  10 The data: words, byte-pair pieces and one vocabulary
``annotated.vocab``                 10
``annotated.bpe``                   10
``annotated.evaluation``            11 Translating German to English
``annotated.heads``                 12 What the heads learned
``annotated.alignment``             12
``annotated.local_attention``       13 The cost of attention
``annotated.linformer``             13
``annotated.bigbird``               13
``annotated.learned_positions``     14 Positions beyond the sinusoids
``annotated.relative_positions``    14
``annotated.rotary``                14
``annotated.variations``            15 Model variations: Table 3 after 600 and 6,000 updates
==================================  ========================================

``annotated.support`` holds what the course uses but does not teach line by line.
"""

import sys as _sys

if _sys.argv[:1] == ["-m"]:  # Python's argv[0] while it imports the package of `python -m annotated.<command>`
    from annotated.support.errors import quiet_interrupt_while_starting

    quiet_interrupt_while_starting()  # a Ctrl-C while torch loads: one line, not a traceback


def __getattr__(name):
    # The model, and with it torch, is imported on first use: a command such as
    # `python -m annotated.doctor` then starts, and reports, even when torch is broken.
    if name in ("TransformerConfig", "count_parameters", "make_model"):
        from annotated import model

        return getattr(model, name)
    raise AttributeError(f"module 'annotated' has no attribute {name!r}")


def load_pretrained(path=None, device="cpu"):
    """The German -> English model that ships with the course, and its tokenizer:
    ``model, tokenizer = annotated.load_pretrained()`` (see ``annotated.support.pretrained``)."""
    from annotated.support.pretrained import load_pretrained as load  # spaCy loads only when asked

    return load(path, device)


__all__ = ["TransformerConfig", "count_parameters", "load_pretrained", "make_model"]
__version__ = "0.1.0"
