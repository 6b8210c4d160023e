"""The paper's Table 3 (§6.2) at the course's scale: one setting changed at a time against a small base.

    python benchmarks/table3.py --out benchmarks/results/table3.jsonl             # every row, every seed
    python benchmarks/table3.py --out benchmarks/results/table3.jsonl --rows A1 B16 --seeds 0
    python benchmarks/table3.py --list                                            # the rows and their runs

The base is notebook 11's model (N=2, d_model=128, h=4, d_ff=512, P_drop=0.1, label smoothing 0.1,
4,000 byte-pair merges shared by both languages) and its schedule (warm-up 400, factor 0.5, batches of
at most 1,500 padded tokens), trained for a fixed number of updates (``--updates``, 600 by default)
with one CPU thread. Each row changes one thing (``ROWS``), and every row runs the base's seeds (0-3): a
seed fixes the initialization and the batch order, so each row is read through its differences from the
base seed by seed (``annotated.variations``). ``--updates`` sets the budget: the record keeps each budget's
runs apart (the recipe holds it), so a longer budget can be added to the same file:

    python benchmarks/table3.py --out benchmarks/results/table3.jsonl --updates 6000 --rows base A1 A16 B16 C-N4 D-drop0 --seeds 0 1 2

Each run appends one JSON line to ``--out``: the row, its changes, the seed, parameters, updates,
minutes (the training's wall clock, which counts pauses and other work on the machine, and its CPU
time), the validation loss as trained (label-smoothed) and its curve (after each pass over the
training pairs), the validation perplexity per byte-pair piece (plain cross-entropy, no smoothing),
validation BLEU greedy and beam 4 (alpha 0.6), and the code path (torch, ATen's capability, MKL's
setting, threads) with the command. A run whose row, seed and recipe are already in ``--out`` is
skipped, so the table fills over several sittings; two processes started side by side (one per core)
share the runs through a claim file per run beside ``--out``. Ctrl-C, SIGTERM and SIGHUP stop it
alike: the run in progress is dropped and its claim released, the recorded runs are kept, and the
same command resumes after them. The test split is never touched.
"""

import argparse
import dataclasses
import json
import os
import signal
import sys
from pathlib import Path

import torch

from annotated.support.files import signals_as_interrupt
from annotated.support.table3 import (BASE_SEEDS, COST, ROWS, Data, Recipe, claim, code_path, read_records, release, runs,
                                      train_one)


def run_key(row: str, seed: int, recipe: dict) -> tuple:
    """What makes a run the same run: its row, its seed and its whole recipe."""
    return row, seed, json.dumps(recipe, sort_keys=True)


def recorded(out: Path, warn=print) -> set[tuple]:
    """The keys of the runs ``out`` holds."""
    return {run_key(r["row"], r["seed"], r["recipe"]) for r in read_records(out, warn)}


def train_and_record(out: Path, data, command: str, row: str, group: str, changes: dict, seed: int, recipe) -> None:
    """Train one run unless another process has recorded or claimed it, then append its line to ``out``."""
    if run_key(row, seed, dataclasses.asdict(recipe)) in recorded(out, warn=lambda _: None):
        return  # another process has recorded it meanwhile (a cut line was named at the start)
    if not claim(out, row, seed):
        return  # another process is training it
    try:
        result = train_one(data, recipe, seed)
    finally:
        release(out, row, seed)
    record = {"row": row, "group": group, "changes": changes, "seed": seed, **result,
              "recipe": dataclasses.asdict(recipe), "code_path": code_path(), "command": command}
    with open(out, "a") as file:  # one line per run, written whole once the run is done
        file.write(json.dumps(record) + "\n")
        file.flush()
        os.fsync(file.fileno())
    print(f"{row} seed {seed}: val ppl {result['val_ppl_per_piece']}, BLEU {result['val_bleu_greedy']} greedy, "
          f"{result['val_bleu_beam']} beam, {result['train_minutes'] + result['eval_minutes']:.1f} min", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="the JSON-lines record (appended to; recorded runs are skipped)")
    parser.add_argument("--rows", nargs="+", choices=[r[0] for r in ROWS], help="only these rows (default: all)")
    parser.add_argument("--seeds", nargs="+", type=int, help="only these seeds (default: 0-3, every row)")
    parser.add_argument("--updates", type=int, default=Recipe.updates, help="optimizer updates per run")
    parser.add_argument("--limit", type=int, help="the first N pairs of each split only (a quick check)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads per process (default 1)")
    parser.add_argument("--data-dir", help="the Multi30k files (default: $ANNOTATED_DATA_DIR, else a download cache)")
    parser.add_argument("--list", action="store_true", help="print the runs and whether each is recorded, then exit")
    args = parser.parse_args(argv)
    if args.updates < 1:
        parser.error(f"--updates {args.updates}: at least one update")
    if args.out is None and not args.list:
        parser.error("--out is required to train")
    if args.out is not None and not args.out.parent.is_dir():
        parser.error(f"--out {args.out}: the folder {args.out.parent} does not exist")
    if args.out is not None and args.out.exists() and not args.out.is_file():
        parser.error(f"--out {args.out}: a folder, not a record file (name a .jsonl file)")
    if args.threads < 1:
        parser.error(f"--threads {args.threads}: at least one thread")
    unknown = sorted(set(args.seeds or ()) - set(BASE_SEEDS))
    if unknown:
        parser.error(f"--seeds {' '.join(map(str, unknown))}: no row runs that seed (the seeds are "
                     f"{', '.join(map(str, BASE_SEEDS))})")
    base = dataclasses.replace(Recipe(), updates=args.updates, limit=args.limit)
    done = recorded(args.out) if args.out else set()
    todo = []
    for row, group, changes, seed in runs(args.rows, args.seeds):
        recipe = dataclasses.replace(base, **changes)
        key = run_key(row, seed, dataclasses.asdict(recipe))
        if args.list:
            print(f"{row:10} seed {seed}: {'recorded' if key in done else 'to run'}")
        elif key not in done:
            todo.append((row, group, changes, seed, recipe))
    if args.list:
        return 0
    todo.sort(key=lambda run: (run[3], -COST.get(run[0], 1)))  # seed 0 of every row first, costly rows early
    print(f"{len(todo)} run(s) to do", flush=True)
    if not todo:
        return 0
    torch.set_num_threads(args.threads)
    data = Data(base, args.data_dir)
    command = "python benchmarks/table3.py " + " ".join(sys.argv[1:] if argv is None else argv)
    try:
        with signals_as_interrupt():  # SIGTERM and SIGHUP stop it as Ctrl-C does: the claim is released
            for run in todo:
                train_and_record(args.out, data, command, *run)
    except KeyboardInterrupt as stopped:
        signum = getattr(stopped, "signum", signal.SIGINT)
        print(f"table3.py: stopped by {signal.Signals(signum).name}; the runs recorded so far are kept, and the "
              "same command resumes after them", file=sys.stderr)
        return 128 + signum
    return 0


if __name__ == "__main__":
    sys.exit(main())
