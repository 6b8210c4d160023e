"""The paper's Table 3 (§6.2) at the course's scale: one setting changed at a time against a small base.

    python benchmarks/table3.py --out benchmarks/results/table3.jsonl             # every row, every seed
    python benchmarks/table3.py --out benchmarks/results/table3.jsonl --rows A1 B16 --seeds 0
    python benchmarks/table3.py --list                                            # the rows and their runs

The base is notebook 09's model (N=2, d_model=128, h=4, d_ff=512, P_drop=0.1, label smoothing 0.1,
4,000 byte-pair merges shared by both languages) and its schedule (warm-up 400, factor 0.5, batches of
at most 1,500 padded tokens), trained for a fixed number of updates (``--updates``, 600 by default)
with one CPU thread. Each row changes one thing (``ROWS``): the base runs with three seeds, every other
row with two, so that a difference can be read against the spread between seeds.

Each run appends one JSON line to ``--out``: the row, its changes, the seed, parameters, updates,
minutes, the validation loss as trained (label-smoothed), the validation perplexity per byte-pair
piece (plain cross-entropy, no smoothing), validation BLEU greedy and beam 4 (alpha 0.6), and the
code path (torch, ATen's capability, MKL's setting, threads) with the command. A run whose row, seed
and recipe are already in ``--out`` is skipped, so the table fills over several sittings; two processes
started side by side (one per core) share the runs through a claim file per run beside ``--out``. The test split
is never touched.
"""

import argparse
import dataclasses
import json
import math
import os
import platform
import random
import sys
import time
from pathlib import Path

import torch

from annotated.data import load_pairs
from annotated.evaluation import corpus_bleu, translate
from annotated.model import TransformerConfig, count_parameters
from annotated.support.cli import encode, make_batches
from annotated.support.guarded_training import LabelSmoothingLoss, fit, make_optimizer
from annotated.support.tokenizer import build_vocabs, make_text
from annotated.training import evaluate_loss
from annotated.variations import make_variant
from annotated.vocab import PAD, UNK


@dataclasses.dataclass(frozen=True)
class Recipe:
    """The base row and its training: notebook 09's model and schedule, a fixed number of updates."""

    N: int = 2
    d_model: int = 128
    h: int = 4
    d_k: int | None = None  # None: d_model / h (rows other than B)
    d_ff: int = 512
    dropout: float = 0.1
    label_smoothing: float = 0.1
    positions: str = "sinusoid"  # or "learned" (row E)
    bpe_merges: int = 4000
    max_tokens: int = 1500
    warmup: int = 400
    lr_factor: float = 0.5
    updates: int = 600
    beam_size: int = 4
    length_penalty: float = 0.6
    limit: int | None = None  # the first N pairs of each split only: a quick check of the script


# Table 3's rows at this scale: (row, group, what changes). The paper's base has N=6, d_model=512,
# h=8, d_k=64, d_ff=2048; ours N=2, d_model=128, h=4, d_k=32, d_ff=512, each row moved the same way.
ROWS: list[tuple[str, str, dict]] = [
    ("base", "base", {}),
    *[(f"A{h}", "A", {"h": h}) for h in (1, 2, 8, 16, 128)],  # d_k = d_v = d_model / h, down to 1 column
    ("B16", "B", {"d_k": 16}), ("B8", "B", {"d_k": 8}),  # keys and queries only; d_v stays 32
    ("C-N1", "C", {"N": 1}), ("C-N4", "C", {"N": 4}),
    ("C-d64", "C", {"d_model": 64}), ("C-d256", "C", {"d_model": 256}),  # h stays 4: d_k = d_model / 4
    ("C-ff256", "C", {"d_ff": 256}), ("C-ff1024", "C", {"d_ff": 1024}),
    ("D-drop0", "D", {"dropout": 0.0}), ("D-drop0.2", "D", {"dropout": 0.2}),
    ("D-ls0", "D", {"label_smoothing": 0.0}), ("D-ls0.2", "D", {"label_smoothing": 0.2}),
    ("E", "E", {"positions": "learned"}),
]
BASE_SEEDS, ROW_SEEDS = (0, 1, 2), (0, 1)


def runs(rows: list[str] | None, seeds: list[int] | None) -> list[tuple[str, str, dict, int]]:
    """(row, group, changes, seed) of every run asked for, the base first."""
    chosen = [r for r in ROWS if rows is None or r[0] in rows]
    return [(row, group, changes, seed) for row, group, changes in chosen
            for seed in (BASE_SEEDS if row == "base" else ROW_SEEDS) if seeds is None or seed in seeds]


def code_path() -> dict:
    return {"torch": torch.__version__, "aten_capability": torch.backends.cpu.get_cpu_capability(),
            "mkl": os.environ.get("MKL_ENABLE_INSTRUCTIONS", "default"), "threads": torch.get_num_threads(),
            "machine": platform.processor() or platform.machine(), "python": platform.python_version()}


class Data:
    """The splits, byte-pair pieces and vocabulary, built once per process (the same for every row)."""

    def __init__(self, recipe: Recipe, data_dir: str | None):
        train, self.val = load_pairs("train", data_dir), load_pairs("val", data_dir)
        if recipe.limit:
            train, self.val = train[: recipe.limit], self.val[: recipe.limit]
        self.text = make_text(recipe.bpe_merges, train)
        self.vocab, _ = build_vocabs(2, train, self.text)
        self.vocab.set_default_index(self.vocab[UNK])
        self.train = encode(train, self.text.tokenize_de, self.text.tokenize_en, self.vocab, self.vocab)
        self.val_examples = encode(self.val, self.text.tokenize_de, self.text.tokenize_en, self.vocab, self.vocab)
        words = sum(len(tgt.split()) for _, tgt in self.val)
        pieces = sum(len(tgt) - 1 for _, tgt in self.val_examples)  # the pieces and </s>, each scored once
        self.pieces_per_word = pieces / words


def train_one(data: Data, recipe: Recipe, seed: int) -> dict:
    """Train one row with one seed and measure it on the validation split."""
    random.seed(seed)
    _ = torch.manual_seed(seed)
    v = len(data.vocab)
    config = TransformerConfig(v, v, N=recipe.N, d_model=recipe.d_model, h=recipe.h, d_ff=recipe.d_ff,
                               dropout=recipe.dropout, share_embeddings=True)
    model = make_variant(config, recipe.d_k, recipe.positions == "learned")
    train = make_batches(data.train, recipe.max_tokens, shuffle=True, seed=seed)
    val = make_batches(data.val_examples, recipe.max_tokens, shuffle=False, seed=seed)
    loss_fn = LabelSmoothingLoss(v, data.vocab[PAD], recipe.label_smoothing)
    optimizer, scheduler = make_optimizer(model, recipe.d_model, recipe.warmup, recipe.lr_factor)
    started = time.perf_counter()
    history = fit(model, train, val, loss_fn, optimizer, scheduler, epochs=1000, max_steps=recipe.updates,
                  progress=False, seed=seed)
    trained = time.perf_counter()
    nll = evaluate_loss(model, val, LabelSmoothingLoss(v, data.vocab[PAD], 0.0))  # per piece, no smoothing
    sources, references = [s for s, _ in data.val], [t for _, t in data.val]
    bleu = {}
    for name, beam in (("greedy", None), (f"beam{recipe.beam_size}", recipe.beam_size)):
        hypotheses = translate(model, sources, data.vocab, data.vocab, data.text.tokenize_de, beam_size=beam,
                               length_penalty=recipe.length_penalty, detokenizer=data.text.detokenize)
        bleu[name] = round(corpus_bleu(hypotheses, references).score, 2)
    return {"parameters": count_parameters(model), "updates": scheduler.last_epoch,
            "val_loss": round(history["val_loss"][-1], 4), "val_nll_per_piece": round(nll, 4),
            "val_ppl_per_piece": round(math.exp(nll), 3),
            "val_ppl_per_word": round(math.exp(nll * data.pieces_per_word), 2),
            "pieces_per_word": round(data.pieces_per_word, 4),
            "val_bleu_greedy": bleu["greedy"], "val_bleu_beam": bleu[f"beam{recipe.beam_size}"],
            "train_minutes": round((trained - started) / 60, 2),
            "eval_minutes": round((time.perf_counter() - trained) / 60, 2)}


# Minutes of a row against the base's (measured): the costly rows start first, so that two
# processes end at about the same time.
COST = {"A128": 1.5, "C-N4": 1.8, "C-d256": 1.7, "C-ff1024": 1.2, "A32": 1.2, "A16": 1.1}


def claim_path(out: Path, row: str, seed: int) -> Path:
    return out.with_name(f"{out.name}.{row}.seed{seed}.running")


def claim(out: Path, row: str, seed: int) -> bool:
    """Whether this process may train (row, seed): it creates the claim file, or the file's process is gone.
    Processes started side by side (one per core) thus share the runs without training one twice."""
    path = claim_path(out, row, seed)
    for _ in range(2):
        try:
            with open(path, "x") as file:
                file.write(str(os.getpid()))
            return True
        except FileExistsError:
            try:
                os.kill(int(path.read_text() or 0), 0)
                return False  # alive: its run
            except (ProcessLookupError, ValueError):
                path.unlink(missing_ok=True)  # a claim left by a process that died: take it over
            except PermissionError:
                return False
    return False


def release(out: Path, row: str, seed: int) -> None:
    claim_path(out, row, seed).unlink(missing_ok=True)


def read_records(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="the JSON-lines record (appended to; recorded runs are skipped)")
    parser.add_argument("--rows", nargs="+", choices=[r[0] for r in ROWS], help="only these rows (default: all)")
    parser.add_argument("--seeds", nargs="+", type=int, help="only these seeds (default: 0-2 base, 0-1 others)")
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
    base = dataclasses.replace(Recipe(), updates=args.updates, limit=args.limit)
    done = {(r["row"], r["seed"], json.dumps(r["recipe"], sort_keys=True)) for r in read_records(args.out)} \
        if args.out else set()
    todo = []
    for row, group, changes, seed in runs(args.rows, args.seeds):
        recipe = dataclasses.replace(base, **changes)
        key = (row, seed, json.dumps(dataclasses.asdict(recipe), sort_keys=True))
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
    for row, group, changes, seed, recipe in todo:
        if not claim(args.out, row, seed):
            continue  # another process is training it
        try:
            result = train_one(data, recipe, seed)
        finally:
            release(args.out, row, seed)
        record = {"row": row, "group": group, "changes": changes, "seed": seed, **result,
                  "recipe": dataclasses.asdict(recipe), "code_path": code_path(), "command": command}
        with open(args.out, "a") as out:  # one line per run, written whole once the run is done
            out.write(json.dumps(record) + "\n")
            out.flush()
            os.fsync(out.fileno())
        print(f"{row} seed {seed}: val ppl {result['val_ppl_per_piece']}, BLEU {result['val_bleu_greedy']} greedy, "
              f"{result['val_bleu_beam']} beam, {result['train_minutes'] + result['eval_minutes']:.1f} min", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
