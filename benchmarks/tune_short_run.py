"""Dropout and checkpoint averaging for notebook 11's budget, chosen on the validation split with paired seeds.

    python benchmarks/tune_short_run.py --dropouts 0.1 0 --seeds 0 1 --threads 1 \
        --out benchmarks/results/short_run_choice.json

Trains notebook 11's recipe as the notebook does (its data, model, loss, optimizer and schedule; warm-up
and factor from ``sweep_schedule.py``, chosen at the paper's P_drop = 0.1): ``fit`` for 1,000 updates, a
copy of the weights, ``fit`` on for the last 100 in a new batch order, then the average of the two
checkpoints (§6.1 averages the last five). For each dropout and seed it records the validation loss and
the validation BLEU (beam 4, length penalty 0.6, notebook 11's decoder) of the last checkpoint and of the
average. Runs of one seed share the initialization and the batch order, so differences are read seed by
seed. The rules, fixed before the runs: (1) keep the paper's P_drop = 0.1 unless another value gives the
averaged model a higher validation BLEU in every seed by more than MARGIN, the largest difference one
run of this recipe showed between two code paths (benchmarks/RESULTS.md, "Code paths"); (2) at the
chosen dropout, keep the paper's averaging unless the last checkpoint scores higher in some seed. The
test set is not touched. Without --out the record is printed only.
"""

import argparse
import json
import math
import platform
import time
from pathlib import Path

import torch

from annotated.evaluation import corpus_bleu, translate
from annotated.label_smoothing import LabelSmoothingLoss
from annotated.model import TransformerConfig, make_model
from annotated.schedule import make_optimizer
from annotated.support.cli import PRESETS, make_batches
from annotated.support.errors import CourseError
from annotated.support.files import check_output_file, signals_as_interrupt, write_text
from annotated.support.table3 import Data, Recipe
from annotated.training import evaluate_loss, fit
from annotated.vocab import PAD

RECIPE = PRESETS["notebook"]
GAP = 100  # updates between the two checkpoints averaged
BEAM, ALPHA, MAX_LEN, LABEL_SMOOTHING = 4, 0.6, 64, 0.1
MARGIN = 0.6  # BLEU


def val_bleu(model, data: Data) -> float:
    sources, references = zip(*data.val)
    out = translate(model, list(sources), data.vocab, data.vocab, data.text.tokenize_de, beam_size=BEAM, max_len=MAX_LEN,
                    length_penalty=ALPHA, detokenizer=data.text.detokenize)
    return round(corpus_bleu(out, list(references)).score, 2)


def run(data: Data, dropout: float, seed: int) -> dict:
    """One run, as notebook 11 trains: the last checkpoint's and the average's validation loss and BLEU."""
    started = time.process_time()
    train = make_batches(data.train, RECIPE.max_tokens, shuffle=True, seed=seed)
    val = make_batches(data.val_examples, RECIPE.max_tokens, shuffle=False, seed=seed)
    config = TransformerConfig(len(data.vocab), len(data.vocab), N=RECIPE.N, d_model=RECIPE.d_model, d_ff=RECIPE.d_ff,
                               h=RECIPE.h, dropout=dropout, share_embeddings=True)
    torch.manual_seed(seed)
    model = make_model(config)
    loss_fn = LabelSmoothingLoss(len(data.vocab), data.vocab[PAD], smoothing=LABEL_SMOOTHING)
    optimizer, scheduler = make_optimizer(model, RECIPE.d_model, warmup=RECIPE.warmup, factor=RECIPE.lr_factor)
    epochs = math.ceil(RECIPE.max_steps / len(train))
    history = fit(model, train, val, loss_fn, optimizer, scheduler, epochs=epochs, max_steps=RECIPE.max_steps - GAP,
                  progress=False, seed=seed)
    earlier = {name: value.detach().clone() for name, value in model.state_dict().items()}
    fit(model, train, val, loss_fn, optimizer, scheduler, epochs=1, max_steps=RECIPE.max_steps, progress=False,
        seed=seed + len(history["epoch"]))
    record = {"dropout": dropout, "seed": seed, "updates": scheduler.last_epoch,
              "last": {"val_loss": round(evaluate_loss(model, val, loss_fn), 4), "val_bleu_beam4": val_bleu(model, data)}}
    model.load_state_dict({name: (earlier[name] + value) / 2 for name, value in model.state_dict().items()})
    record["average"] = {"val_loss": round(evaluate_loss(model, val, loss_fn), 4), "val_bleu_beam4": val_bleu(model, data)}
    record["cpu_minutes"] = round((time.process_time() - started) / 60, 1)
    return record


def choose(runs: list[dict], dropouts: list[float], seeds: list[int]) -> tuple[float, bool]:
    """The two rules of the docstring: (chosen dropout, whether to average)."""
    bleu = {(r["dropout"], r["seed"], kind): r[kind]["val_bleu_beam4"] for r in runs for kind in ("last", "average")}
    paper = 0.1
    better = [p for p in dropouts if p != paper
              and all(bleu[p, s, "average"] - bleu[paper, s, "average"] > MARGIN for s in seeds)]
    dropout = max(better, key=lambda p: sum(bleu[p, s, "average"] for s in seeds)) if better else paper
    average = not any(bleu[dropout, s, "last"] > bleu[dropout, s, "average"] for s in seeds)
    return dropout, average


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dropouts", type=float, nargs="+", required=True)
    parser.add_argument("--seeds", type=int, nargs="+", required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, help="the JSON file to write")
    parser.add_argument("--limit", type=int, help="the first N pairs of each split only (a quick check of the script)")
    args = parser.parse_args()
    if 0.1 not in args.dropouts:
        parser.error("--dropouts must include the paper's 0.1, the value the rule compares with")
    try:  # before the training: a link, a course file, a folder that cannot be written are refused now
        if args.out:
            check_output_file(args.out, force_option=None)
    except CourseError as error:
        parser.error(str(error))
    torch.set_num_threads(args.threads)
    with signals_as_interrupt():
        data = Data(Recipe(bpe_merges=RECIPE.bpe_merges, limit=args.limit))  # the pieces and one vocabulary
        runs = []
        for seed in args.seeds:
            for dropout in args.dropouts:
                runs.append(run(data, dropout, seed))
                print(json.dumps(runs[-1]), flush=True)
    dropout, average = choose(runs, args.dropouts, args.seeds)
    record = {"preset": "notebook", "gap": GAP, "beam": BEAM, "length_penalty": ALPHA, "margin": MARGIN,
              "limit": args.limit, "threads": args.threads, "torch": torch.__version__,
              "machine": platform.processor() or platform.machine(), "dropout": dropout, "average": average,
              "command": "python benchmarks/tune_short_run.py " + " ".join(
                  ["--dropouts", *(f"{p:g}" for p in args.dropouts), "--seeds", *map(str, args.seeds),
                   f"--threads {args.threads}", *([f"--limit {args.limit}"] if args.limit else []),
                   *([f"--out {args.out}"] if args.out else [])]),
              "runs": runs}
    if args.out:
        write_text(args.out, json.dumps(record, indent=1) + "\n")
    print(f"chosen: P_drop = {dropout:g}, {'the average of the last two checkpoints' if average else 'the last checkpoint'}")


if __name__ == "__main__":
    main()
