"""The machinery of ``benchmarks/table3.py`` (Table 3 at the course's scale), which notebook 15 reads:
the base recipe, the rows, one run's training and measurement, and the record of runs.

The taught parts (the row-B attention, the row-E positions, the parameter count, the reading of a
row against the seeds' spread) are ``annotated.variations``; this module only wires them to the
data and to notebook 08's training and notebook 11's evaluation.
"""

import dataclasses
import json
import math
import os
import platform
import random
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
from annotated.variations import make_variant, unstable_runs
from annotated.vocab import PAD, UNK


@dataclasses.dataclass(frozen=True)
class Recipe:
    """The base row and its training: notebook 11's model and schedule, a fixed number of updates."""

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
# Every row runs the base's seeds (paired design): seed s fixes the initialization and the batch order of
# both runs. Seeds 0-1 of every row and 2 of the base were recorded first; 2-3 of every row complete the pairs.
BASE_SEEDS = ROW_SEEDS = (0, 1, 2, 3)


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

    def __init__(self, recipe: Recipe, data_dir: str | None = None):
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
    started, started_cpu = time.perf_counter(), time.process_time()
    history = fit(model, train, val, loss_fn, optimizer, scheduler, epochs=1000, max_steps=recipe.updates,
                  progress=False, seed=seed)
    trained, trained_cpu = time.perf_counter(), time.process_time()
    nll = evaluate_loss(model, val, LabelSmoothingLoss(v, data.vocab[PAD], 0.0))  # per piece, no smoothing
    sources, references = [s for s, _ in data.val], [t for _, t in data.val]
    bleu = {}
    for name, beam in (("greedy", None), (f"beam{recipe.beam_size}", recipe.beam_size)):
        hypotheses = translate(model, sources, data.vocab, data.vocab, data.text.tokenize_de, beam_size=beam,
                               length_penalty=recipe.length_penalty, detokenizer=data.text.detokenize)
        bleu[name] = round(corpus_bleu(hypotheses, references).score, 2)
    return {"parameters": count_parameters(model), "updates": scheduler.last_epoch,
            "val_loss": round(history["val_loss"][-1], 4), "val_nll_per_piece": round(nll, 4),
            "val_loss_curve": {"step": history["step"], "val_loss": [round(x, 4) for x in history["val_loss"]]},
            "val_ppl_per_piece": round(math.exp(nll), 3),
            "val_ppl_per_word": round(math.exp(nll * data.pieces_per_word), 2),
            "pieces_per_word": round(data.pieces_per_word, 4),
            "val_bleu_greedy": bleu["greedy"], "val_bleu_beam": bleu[f"beam{recipe.beam_size}"],
            "train_minutes": round((trained - started) / 60, 2),  # the wall clock: pauses and contention count
            "train_cpu_minutes": round((trained_cpu - started_cpu) / 60, 2),  # this process's CPU time only
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
                pid = int(path.read_text() or 0)
                os.kill(pid, 0)
                if not _is_table3(pid):
                    raise SystemExit(f"{path}: claimed by process {pid}, which is alive but not a table3.py run "
                                     "(a claim left by a run that died, its number since reused?): delete the file "
                                     "if no table3.py process is training this run, then start again")
                return False  # alive: its run
            except (ProcessLookupError, ValueError):
                path.unlink(missing_ok=True)  # a claim left by a process that died: take it over
            except PermissionError:
                return False
    return False


def _is_table3(pid: int) -> bool:
    """Whether process ``pid`` runs this script (its command line names table3); True where that cannot be read."""
    try:
        return b"table3" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True


def release(out: Path, row: str, seed: int) -> None:
    claim_path(out, row, seed).unlink(missing_ok=True)


def read_records(path: Path, warn=print) -> list[dict]:
    """The runs recorded in ``path``, one JSON object per line. A line that does not parse (the last one of a
    run killed while appending) is named through ``warn`` and skipped, so that the table still resumes."""
    if not path.exists():
        return []
    records = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            warn(f"{path}, line {number}: not a whole record (a run cut off while it was written?); skipped")
    return records


# The long budget's rule, fixed before the first long run (notebook 15, section 7): the first multiple of
# LEVEL_STEP updates at which the base's validation loss has moved by less than LEVEL_TOLERANCE over the
# last LEVEL_STEP updates, read from the curve of one base run (seed 0) of LEVEL_RUN updates.
LEVEL_STEP, LEVEL_TOLERANCE, LEVEL_RUN = 1000, 0.02, 8000


def loss_at(curve: dict, step: float) -> float:
    """The validation loss of ``curve`` ({"step": [...], "val_loss": [...]}, one point per pass over the
    training pairs) at ``step``, read on the straight line between the two passes around it."""
    steps, losses = curve["step"], curve["val_loss"]
    if not steps or len(steps) != len(losses) or list(steps) != sorted(steps):
        raise ValueError("curve: needs matching, increasing 'step' and 'val_loss' lists")
    if not steps[0] <= step <= steps[-1]:
        raise ValueError(f"step {step}: outside the curve's {steps[0]}-{steps[-1]} updates")
    for (s0, l0), (s1, l1) in zip(zip(steps, losses), zip(steps[1:], losses[1:])):
        if s0 <= step <= s1:
            return l0 if s1 == s0 else l0 + (l1 - l0) * (step - s0) / (s1 - s0)
    return losses[-1]


def levelled_budget(curve: dict, step: int = LEVEL_STEP, tolerance: float = LEVEL_TOLERANCE) -> int | None:
    """The first multiple of ``step`` (from 2 x ``step``, the first with a whole window after the first
    pass) at which the loss moved by less than ``tolerance`` over the last ``step`` updates; None when the
    curve never levels so."""
    first = max(2 * step, step * math.ceil(curve["step"][0] / step) + step)
    for n in range(first, int(curve["step"][-1]) + 1, step):
        if abs(loss_at(curve, n - step) - loss_at(curve, n)) < tolerance:
            return n
    return None


def flags_on_normal_noise(rows: int, seeds: int, trials: int = 4000, seed: int = 0) -> float:
    """The mean number of runs ``unstable_runs`` sets apart in a table of ``rows`` rows of ``seeds`` paired
    differences drawn from one normal distribution (no run unstable): the rule's false flags per score, over
    ``trials`` simulated tables (Python's own generator, so the same number on every machine)."""
    generator = random.Random(seed)
    flagged = 0
    for _ in range(trials):
        table = {f"row {r}": {s: generator.gauss(0.0, 1.0) for s in range(seeds)} for r in range(rows)}
        flagged += len(unstable_runs(table))
    return flagged / trials
