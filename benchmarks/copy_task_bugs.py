"""Notebook 08's table of bugs (§10) for several model seeds: does its grouping hold?

    python benchmarks/copy_task_bugs.py --seeds 0 1 2
    MKL_ENABLE_INSTRUCTIONS=SSE4_2 ATEN_CPU_CAPABILITY=default python benchmarks/copy_task_bugs.py --seeds 0 1 2

Runs the notebook's own code (its code cells up to the one defining ``train_with_bug``, executed
in order), then trains the copy model once per bug and seed and prints the exact match and the
final training loss. The notebook asserts, for seed 0, that three bugs are caught (exact match
under 10%) and the other three run like the correct model (50% or more); this shows the margin
of those thresholds on other seeds. Environment variables choose another processor's math code
path (see ``benchmarks/code_paths.py``). About 10 s per run on a quiet 2-core machine.
"""

import argparse
import contextlib
import io
import os
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # the notebook's figures are drawn and dropped

from annotated.support.notebooks import code_cells  # noqa: E402

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "08_training.ipynb"


def notebook_namespace() -> dict:
    """The notebook's state after the cell that defines ``train_with_bug``."""
    namespace: dict = {}
    os.chdir(NOTEBOOK.parent)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        for source in code_cells(NOTEBOOK):  # what the cells print is the notebook's, not this report's
            exec(compile(source, str(NOTEBOOK), "exec"), namespace)
            if "def train_with_bug" in source:
                return namespace
    raise SystemExit(f"{NOTEBOOK.name} no longer defines train_with_bug: update this script")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    args = parser.parse_args(argv)
    path = {k: os.environ[k] for k in ("MKL_ENABLE_INSTRUCTIONS", "ATEN_CPU_CAPABILITY") if k in os.environ}
    print(f"code path: {path or 'the machine default'}", flush=True)
    ns = notebook_namespace()
    print(f"{'bug':<40}" + "".join(f"{'seed ' + str(s):>16}" for s in args.seeds), flush=True)
    start = time.perf_counter()
    for name, bug in ns["BUGS"].items():
        cells = []
        for seed in args.seeds:
            exact, loss = ns["train_with_bug"](bug, seed)
            cells.append(f"{exact:6.1%} ({loss:.3f})")
        print(f"{name:<40}" + "".join(f"{c:>16}" for c in cells), flush=True)
    print(f"exact match (final training loss); {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
