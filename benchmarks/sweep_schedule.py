"""Warm-up and scale of the learning-rate schedule for notebook 11's budget, chosen on validation loss.

    python benchmarks/sweep_schedule.py --preset notebook --warmups 200 400 800 --factors 0.5 1 \
        --threads 2 --compare-words --out benchmarks/results/schedule_sweep.json

The schedule is the paper's formula (§5.3), scaled by a factor:

    lrate = factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)

Notebook 11 trains for a fixed number of updates, a few minutes on a laptop CPU. With the paper's
4,000 warm-up steps such a run would never leave the warm-up; this sweep trains the notebook's
recipe once per (warm-up, factor) pair, for the preset's number of updates and seed, and records
the validation loss after each epoch and at the end, with greedy BLEU on the validation split.
With --compare-words it also trains the best pair on whole words (--bpe-merges 0): pieces against
words at the same budget, on validation BLEU. The test split is not touched. Notebook 11 plots the
file this writes; it does not re-run the sweep.
"""

import argparse
import contextlib
import dataclasses
import io
import json
import platform
import re
import tempfile
import time
from pathlib import Path

import torch

from annotated.support.checkpoint import load_checkpoint
from annotated.support.errors import CourseError
from annotated.support.files import check_output_file, signals_as_interrupt, write_text
from annotated.support.cli import PRESETS, main as train


def run_one(preset: str, warmup: int, factor: float, threads: int, folder: Path, limit: int | None,
            bpe_merges: int | None = None, dropout: float | None = None) -> dict:
    """Train the preset once with these settings (None: the preset's) and return its record: the validation
    loss (per epoch and at the end), greedy validation BLEU, the minutes."""
    out = folder / f"w{warmup}-f{factor}-m{bpe_merges}.pt"
    started, printed = time.perf_counter(), io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = train(["--preset", preset, "--warmup", str(warmup), "--lr-factor", str(factor), "--threads", str(threads),
                      "--seed", "0", "--beam-size", "0", "--split", "val", "--no-progress", "--out", str(out),
                      *(["--limit", str(limit)] if limit else []),
                      *(["--bpe-merges", str(bpe_merges)] if bpe_merges is not None else []),
                      *(["--dropout", str(dropout)] if dropout is not None else [])])
    if code != 0:
        raise SystemExit(f"training with warm-up {warmup} and factor {factor} failed with exit code {code}")
    extra = load_checkpoint(out)["extra"]
    history = extra["history"]
    bleu = float(re.search(r"BLEU on val \(.*?\): ([0-9.]+)", printed.getvalue()).group(1))
    return {"warmup": warmup, "factor": factor, "bpe_merges": extra["recipe"]["bpe_merges"],
            "val_loss": history["val_loss"][-1], "val_bleu_greedy": bleu, "val_loss_per_epoch": history["val_loss"],
            "steps": history["step"][-1], "minutes": round((time.perf_counter() - started) / 60, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="notebook", choices=sorted(PRESETS))
    parser.add_argument("--warmups", type=int, nargs="+", required=True)
    parser.add_argument("--factors", type=float, nargs="+", required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dropout", type=float, help="P_drop of every run (default: the preset's)")
    parser.add_argument("--out", type=Path, required=True, help="the JSON file to write")
    parser.add_argument("--limit", type=int, help="the first N pairs of each split only (a quick check of the script)")
    parser.add_argument("--compare-words", action="store_true",
                        help="also train the best pair on whole words (--bpe-merges 0), to compare greedy BLEU on val")
    args = parser.parse_args()
    try:  # before the hours of training: a link, a course file, a folder that cannot be written are refused now
        check_output_file(args.out, force_option=None)  # no --force here
    except CourseError as error:
        parser.error(str(error))
    runs = []
    # SIGTERM and SIGHUP stop the sweep as Ctrl-C does, and the runs' temporary folder is removed.
    with signals_as_interrupt(), tempfile.TemporaryDirectory() as folder:
        for warmup in args.warmups:
            for factor in args.factors:
                runs.append(run_one(args.preset, warmup, factor, args.threads, Path(folder), args.limit,
                                    dropout=args.dropout))
                print(runs[-1], flush=True)
        best = min(runs, key=lambda r: r["val_loss"])
        words = None
        if args.compare_words:  # the same schedule, steps and seed on whole words: val BLEU, pieces against words
            words = run_one(args.preset, best["warmup"], best["factor"], args.threads, Path(folder), args.limit, 0,
                            dropout=args.dropout)
            print("whole words:", words, flush=True)
    recipe = {k: v for k, v in dataclasses.asdict(PRESETS[args.preset]).items()
              if k not in ("warmup", "lr_factor")}  # swept: each run records its own
    if args.dropout is not None:
        recipe["dropout"] = args.dropout
    record = {"preset": args.preset, "limit": args.limit, "recipe": recipe, "seed": 0,
              "threads": args.threads, "torch": torch.__version__, "machine": platform.processor() or platform.machine(),
              "command": "python benchmarks/sweep_schedule.py " + " ".join(
                  [f"--preset {args.preset}", "--warmups", *map(str, args.warmups), "--factors",
                   *map(str, args.factors), f"--threads {args.threads}",
                   *([f"--dropout {args.dropout:g}"] if args.dropout is not None else []),
                   *(["--compare-words"] if args.compare_words else []), f"--out {args.out}"]),
              "runs": runs, "words": words}
    write_text(args.out, json.dumps(record, indent=1) + "\n")  # whole, or the earlier record as it was
    print(f"lowest validation loss {best['val_loss']:.3f}: warm-up {best['warmup']}, factor {best['factor']}")


if __name__ == "__main__":
    main()
