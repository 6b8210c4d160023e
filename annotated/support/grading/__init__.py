"""Checks for the exercises in ``exercises/``: each runs a learner's function on small
inputs, compares the result with the course's own code, and names the mistake when there
is one.

    from annotated.support.grading import check_attention
    check_attention(attention)   # prints one line when it passes, raises ExerciseFailed if not

One module per notebook holds the checks of its exercises (``softmax`` for notebook 01,
``attention`` for 02, ... ``decoding`` for 09, ``data`` for 10, ``translation`` for 11, ...
``variations`` for 15, in ``MODULES``); ``core`` holds what they share. The checks of 03 and 04
are declarations (``DECLARATIONS``) that one engine runs (``engine``); the others are code.
Every ``check_...`` function of those modules is importable from here. Each check first
compares with a list of typical mistakes, so a wrong answer gets a diagnosis rather than a
table of numbers, and runs on several sets of sizes (each module's ``SIZE_SETS``), so an
answer with a size written into it fails.
"""

import importlib

from annotated.support.grading.core import ExerciseFailed

# The notebook each module checks: 01 softmax ... 08 training, 09 decoding, 10 data (and byte pairs),
# 11 translation, 12 heads, 13 cost, 14 positions, 15 variations.
MODULES = ("softmax", "attention", "masking", "multi_head", "positional", "sublayers", "model",
           "training", "decoding", "data", "translation", "heads", "cost", "positions", "variations")

CHECKS: dict = {}        # name -> check function, of every module
SIZE_SETS: dict = {}     # check name -> the sets of sizes it runs (a list of dicts)
DECLARATIONS: dict = {}  # check name -> its declaration, for the checks written as data (engine.py)
for _module_name in MODULES:
    _module = importlib.import_module(f"{__name__}.{_module_name}")
    for _name, _value in vars(_module).items():
        if _name.startswith("check_") and callable(_value) and _value.__module__ == _module.__name__:
            CHECKS[_name] = _value
    SIZE_SETS.update(getattr(_module, "SIZE_SETS", {}))
    DECLARATIONS.update(getattr(_module, "DECLARATIONS", {}))
globals().update(CHECKS)

__all__ = ["ExerciseFailed", "CHECKS", "SIZE_SETS", "DECLARATIONS", "MODULES", *CHECKS]
