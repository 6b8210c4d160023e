"""``python -m annotated.train``: train a German -> English Transformer on Multi30k, then report BLEU.

    python -m annotated.train --preset notebook                  # notebook 11's run, minutes on a laptop
    python -m annotated.train --preset cpu --keep-last 5         # the shipped model's recipe, over an hour
    python -m annotated.train --preset base --out base.pt        # the paper's base model, a GPU
    torchrun --standalone --nproc_per_node=4 -m annotated.train --preset base   # 4 GPUs
    python -m annotated.train --resume base.pt --epochs 800      # carry on from a checkpoint

It runs the course's pipeline end to end: tokenize (spaCy), build the vocabularies from
the training split, batch by tokens, train with label smoothing, Adam and the warm-up
schedule, save a checkpoint (weights, config, vocabularies, optimizer, schedule, recipe)
every few minutes and at the end, and finally translate the validation split (or, with
``--split test``, test_2016_flickr) and print sacrebleu's BLEU with its signature. Checkpoints,
beam size and length penalty are chosen on the validation split; the test set is scored once
per reported model. A resumed run takes its model, vocabularies and recipe from the
checkpoint: options that would change them (another preset, --max-tokens, --accum-steps,
--warmup, --limit, --seed) are an error naming both values; the budgets (--epochs, --max-steps,
--max-minutes) and the evaluation (--beam-size, --length-penalty, --split) may change.

Nothing is lost: the output path is checked before any work starts (an existing checkpoint is
never replaced without --overwrite; an input, a symbolic link, a course file, a name of another
format, or a file in the shipped model's folder without --force, never), and again at every save:
a checkpoint that another run wrote to the same --out meanwhile is kept, and this run's is saved
beside it. Ctrl-C, SIGTERM (timeout, Slurm, Kubernetes, a cancelled CI job) and SIGHUP finish
the update under way, save the checkpoint, say how to resume and exit with 128 + the signal's
number (130, 143, 129); a second signal quits at once. A checkpoint that could not be written to
--out (a full disk) is saved elsewhere, and the command says where and exits with 1.

    python -m annotated.train --average runs/cpu-step*.pt --split val     # the mean of the kept checkpoints
"""

import argparse
import contextlib
import dataclasses
import errno
import math
import random
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from annotated.batching import Batch
from annotated.data import load_pairs
from annotated.evaluation import corpus_bleu, translate
from annotated.model import TransformerConfig, count_parameters, make_model
from annotated.support.checkpoint import (CheckpointError, Identity, OutputTakenError, average_checkpoints,
                                          check_finite, check_output_path, check_vocab_sizes, config_from,
                                          file_identity, load_checkpoint, model_from_checkpoint, restore,
                                          save_checkpoint, unwrap, vocabs_from_checkpoint)
from annotated.support.course import ROOT
from annotated.support.download import MULTI30K_FILES
from annotated.support.files import Stopped, check_output_file, git_tracks, signals_as_interrupt
from annotated.support.distributed import (DistributedContext, cleanup, fit_distributed, init_distributed, shard,
                                           wrap_model)
from annotated.support.checks import check_beam_arguments, check_probability
from annotated.support.guarded_training import LabelSmoothingLoss, batch_by_tokens, collate, make_optimizer
from annotated.support.errors import DISK_ERRORS, CourseError, UsageError, os_error_message, run_command
from annotated.support.options import (MAX_BEAM, MAX_LENGTH_PENALTY, beam_width_or_greedy, length_penalty,  # noqa: F401
                                       machine_cores, natural_float, natural_int, positive_float, positive_int,
                                       seed_value, thread_count)
from annotated.support.tokenizer import Text, build_vocabs, make_text
from annotated.vocab import BOS, EOS, PAD, UNK, Vocab, build_vocab_from_iterator


@dataclass(frozen=True)
class Preset:
    """A model size and a training recipe."""

    N: int
    d_model: int
    h: int
    d_ff: int
    dropout: float  # P_drop (§5.4): sub-layer outputs and embedding sums
    max_tokens: int  # padded tokens per batch (batch size x longest side), §5.1
    accum_steps: int  # batches per update: tokens per update = max_tokens x accum_steps
    warmup: int  # §5.3
    epochs: int
    max_minutes: float | None = None  # training time budget
    max_steps: int | None = None  # optimizer updates budget, counting those before a resume
    label_smoothing: float = 0.1  # §5.4
    min_freq: int = 2  # rarer words become <unk> (whole words only: every byte-pair piece is kept)
    clip: float | None = None
    beam_size: int = 4  # §6.1: beam 4, length penalty 0.6; 0 decodes greedily
    length_penalty: float = 0.6
    attention_dropout: float = 0.0  # not in the paper (see TransformerConfig)
    ff_dropout: float = 0.0  # not in the paper (see TransformerConfig)
    # Byte-pair merges learned on both languages (§5.1): one shared vocabulary and one embedding
    # matrix for source, target and output (§3.4). 0: whole words, a vocabulary per language.
    bpe_merges: int = 8000
    lr_factor: float = 1.0  # scales the whole schedule of §5.3 (1: the paper's formula as written)


PRESETS: dict[str, Preset] = {
    # Notebook 11's run: 1.5M parameters with 4,000 byte-pair merges, 1,100 updates of at most 1,500
    # padded tokens, 2.3 minutes on a quiet 2-core CPU with two threads (benchmarks/RESULTS.md); warm-up and
    # factor chosen on validation loss by benchmarks/sweep_schedule.py (at the paper's dropout, 0.1), then
    # dropout 0 chosen on validation BLEU with paired seeds by benchmarks/tune_short_run.py (which also
    # chose the notebook's average of its last two checkpoints, a step the command line does not take). A fixed number
    # of updates: every machine trains the same model.
    "notebook": Preset(N=2, d_model=128, h=4, d_ff=512, dropout=0.0, max_tokens=1500, accum_steps=1,
                       warmup=400, lr_factor=0.5, epochs=100, max_steps=1100, bpe_merges=4000),
    # A longer CPU run, the shipped model's recipe: 7.7M parameters with 8,000 byte-pair merges,
    # 166 updates per epoch, 12 epochs (about 75 minutes on a quiet 2-core CPU; benchmarks/RESULTS.md).
    "cpu": Preset(N=3, d_model=256, h=8, d_ff=1024, dropout=0.1, max_tokens=3000, accum_steps=1,
                  warmup=1000, epochs=40, max_steps=1992),
    # The paper's base model (Table 3), about 25,000 tokens per update (4 x 6,250) on a GPU.
    # Multi30k gives 19 such updates per epoch, so the 4,000 warm-up steps take ~210 epochs.
    "base": Preset(N=6, d_model=512, h=8, d_ff=2048, dropout=0.1, max_tokens=6250, accum_steps=4,
                   warmup=4000, epochs=600),
    # A smoke test of the whole pipeline in seconds (with --limit); it learns next to nothing.
    "tiny": Preset(N=1, d_model=32, h=2, d_ff=64, dropout=0.1, max_tokens=400, accum_steps=1,
                   warmup=20, epochs=1, beam_size=2),
}

SAVE_EVERY_MINUTES = 5.0
SPLITS = {"val": "val", "test": "test_2016_flickr"}  # checkpoints also at the end; saving a large model every epoch would be slow


def check_beam_fits(beam: int, vocab_size: int, option: str) -> None:
    """A beam no wider than the target vocabulary (each hypothesis extends by one of its tokens)."""
    if beam > vocab_size:
        raise UsageError(f"{option} {beam} is wider than the model's target vocabulary of {vocab_size} tokens: at "
                         f"most {vocab_size} hypotheses differ; give {option} {min(4, vocab_size)}")


def probability(text: str) -> float:
    """An argparse type for a dropout probability: the model's own rule, ``check_probability``."""
    value = natural_float(text)
    try:
        check_probability("P_drop", value)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{text!r}: {error}") from None
    return value


# The largest --lr-factor: the schedule's peak rate is factor x d_model^-0.5 x warmup^-0.5 (7e-4 for the
# base model at factor 1); a factor far above 1 makes Adam's updates diverge to NaN, and one near 1e308
# overflows Adam's step itself.
MAX_LR_FACTOR = 100.0


def lr_factor(text: str) -> float:
    """An argparse type: a positive factor of the learning-rate schedule, at most MAX_LR_FACTOR."""
    value = positive_float(text)
    if value > MAX_LR_FACTOR:
        raise argparse.ArgumentTypeError(f"{text!r} is more than {MAX_LR_FACTOR:g}: factors far above 1 make training "
                                         f"diverge (the paper's schedule is 1, notebook 11 uses 0.5)")
    return value


def path_text(text: str) -> str:
    """An argparse type for a path: not empty (an empty --out or --resume would silently mean the default)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is an empty path; name a file or folder, or leave the option out")
    return text


def device_name(text: str) -> str:
    """An argparse type: a device torch knows and this machine has."""
    try:
        device = torch.device(text)
    except RuntimeError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a device; use cuda, cuda:1, mps or cpu") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise argparse.ArgumentTypeError(f"{text!r}: no CUDA GPU is visible to PyTorch here; use --device cpu")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise argparse.ArgumentTypeError(f"{text!r}: this machine has {torch.cuda.device_count()} CUDA GPU(s)")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise argparse.ArgumentTypeError(f"{text!r}: MPS (Apple GPU) is not available here; use --device cpu")
    return text


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m annotated.train", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", choices=sorted(PRESETS), help="model size and recipe (default: notebook, or the "
                                                             "checkpoint's with --resume)")
    p.add_argument("--data-dir", type=path_text,
                   help="folder with the Multi30k .gz files (default: $ANNOTATED_DATA_DIR, else a download cache)")
    p.add_argument("--out", type=path_text,
                   help="checkpoint to write (default: the --resume file, else checkpoints/<preset>.pt)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing --out (and the numbered checkpoints --keep-last wrote beside it)")
    p.add_argument("--force", action="store_true",
                   help="allow an --out inside the shipped model's folder (annotated/pretrained/)")
    p.add_argument("--resume", type=path_text,
                   help="checkpoint to continue from (its config and vocabularies are used)")
    p.add_argument("--epochs", type=positive_int, help="total epochs, counting those before --resume")
    p.add_argument("--max-minutes", type=positive_float, help="training time budget for this run")
    p.add_argument("--max-steps", type=positive_int, help="total optimizer updates, counting those before --resume")
    p.add_argument("--device", type=device_name, help="cuda, mps or cpu (default: the fastest available)")
    p.add_argument("--beam-size", type=beam_width_or_greedy,
                   help=f"beam size for the BLEU evaluation, at most {MAX_BEAM}; 0 decodes greedily")
    p.add_argument("--limit", type=positive_int, help="use only the first N pairs of each split (quick checks)")
    p.add_argument("--max-tokens", type=positive_int, help="override the preset's tokens per batch")
    p.add_argument("--accum-steps", type=positive_int, help="override the preset's batches per update")
    p.add_argument("--warmup", type=positive_int, help="override the preset's warm-up steps")
    p.add_argument("--lr-factor", type=lr_factor,
                   help=f"override the preset's factor on the learning-rate schedule (1: the paper's formula; "
                        f"at most {MAX_LR_FACTOR:g})")
    p.add_argument("--dropout", type=probability, metavar="P",
                   help="override the preset's P_drop, on sub-layer outputs and embedding sums (§5.4)")
    p.add_argument("--bpe-merges", type=natural_int, metavar="N",
                   help="override the preset's byte-pair merges, learned on both languages into one shared "
                        "vocabulary and embedding matrix (§5.1, §3.4); 0: whole words, a vocabulary per language")
    p.add_argument("--average", nargs="+", type=path_text, metavar="CHECKPOINT",
                   help="average the weights of these checkpoints of one run (paper §6.1) and only "
                        "evaluate; with --out, also save the averaged checkpoint")
    p.add_argument("--keep-last", type=natural_int, default=0, metavar="N",
                   help="also write a checkpoint <out>-stepNNNNNN.pt every --save-every epochs and keep the "
                        "last N of them, to average with --average (paper §6.1: the last 5)")
    p.add_argument("--save-every", type=positive_int, default=1, metavar="EPOCHS",
                   help="epochs between the checkpoints kept by --keep-last (default 1)")
    p.add_argument("--split", choices=sorted(SPLITS), default="val",
                   help="the split the final BLEU is measured on (default val: choose checkpoints, beam "
                        "size and length penalty there; score test once per reported model)")
    p.add_argument("--length-penalty", type=length_penalty,
                   help=f"alpha of the length penalty for beam search, 0 to {MAX_LENGTH_PENALTY:g}")
    p.add_argument("--threads", type=thread_count, help="torch CPU threads, at most the machine's cores (default: "
                                                        "torch's choice); results are reproducible for a fixed "
                                                        "seed, step count and thread count")
    p.add_argument("--seed", type=seed_value, help="seed of the initialization, dropout and batch order "
                                                   "(default 0, or the checkpoint's with --resume)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    return p


# Options that override a field of the recipe, which a resumed run keeps as it was saved.
RECIPE_OPTIONS = ("max_tokens", "accum_steps", "warmup", "bpe_merges", "lr_factor", "dropout")
TRAINING_ONLY = ("resume", "epochs", "max_minutes", "max_steps", "preset", "keep_last", "seed", *RECIPE_OPTIONS)
# Recipe fields that make the model and its training: a resumed run keeps the saved ones.
FIXED_ON_RESUME = ("N", "d_model", "h", "d_ff", "dropout", "attention_dropout", "ff_dropout", "max_tokens",
                   "accum_steps", "warmup", "label_smoothing", "min_freq", "clip", "bpe_merges",
                   "lr_factor")


def check_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Combinations that make no sense end with argparse's usage error (exit code 2)."""
    if args.average:
        given = [f"--{name.replace('_', '-')}" for name in TRAINING_ONLY if getattr(args, name) not in (None, 0)]
        if given:
            parser.error(f"--average only averages and evaluates; {', '.join(given)} belong(s) to training: "
                         f"run them separately")
    if args.save_every != 1 and not args.keep_last:
        parser.error("--save-every sets how often --keep-last writes its checkpoints: give --keep-last N too")


def check_resume_options(args: argparse.Namespace, extra: dict) -> None:
    """A resumed run trains as it was saved: an option that would change its model, recipe, data or
    batch order is a UsageError naming the option's value and the checkpoint's."""
    saved = extra.get("recipe") or {}
    conflicts = []
    if args.preset is not None:
        if extra.get("preset") not in (None, args.preset):
            conflicts.append(f"--preset {args.preset}, but it was trained with --preset {extra['preset']}")
        else:
            chosen = dataclasses.asdict(PRESETS[args.preset])
            differ = [f"{k}={chosen[k]} vs {saved[k]}" for k in FIXED_ON_RESUME if k in saved and chosen[k] != saved[k]]
            if differ:
                conflicts.append(f"--preset {args.preset} differs from its recipe ({', '.join(differ)})")
    for option in RECIPE_OPTIONS:
        given = getattr(args, option)
        if given is not None and option in saved and given != saved[option]:
            conflicts.append(f"--{option.replace('_', '-')} {given}, but it was trained with {saved[option]}")
    for option, default in (("limit", None), ("seed", 0)):
        given, was = getattr(args, option), extra.get(option, default)
        if given is not None and given != was:
            conflicts.append(f"--{option} {given}, but it was trained with "
                             f"{'no --' + option if was is None else f'--{option} {was}'}")
    if conflicts:
        raise UsageError(f"--resume {args.resume} continues a run as it was saved: " + "; ".join(conflicts) +
                         ". Drop the option(s), or start a new run without --resume")


# Suffixes that say a file holds another format than a PyTorch checkpoint: such an --out is a slip.
OTHER_FORMATS = {
    ".safetensors": "the weights of a model folder, written by python -m annotated.support.pretrained export",
    ".json": "JSON", ".txt": "text", ".md": "Markdown", ".csv": "a table", ".tsv": "a table", ".toml": "TOML",
    ".yaml": "YAML", ".yml": "YAML", ".py": "Python", ".ipynb": "a notebook", ".gz": "gzip, as the data files",
    ".npz": "NumPy", ".npy": "NumPy", ".onnx": "ONNX", ".h5": "HDF5", ".html": "a web page", ".pdf": "PDF",
    ".de": "German text", ".en": "English text",
}


def is_committed(path: Path) -> bool:
    """Whether ``path`` is a file git tracks anywhere in the course's checkout (files.check_output_file
    looks in the course's folders only, and lets --force through), or lies in its .git folder."""
    try:
        relative = path.resolve().relative_to(ROOT.resolve())
    except ValueError:
        return False
    if relative.parts[:1] == (".git",):
        return True
    return path.exists() and bool(git_tracks(ROOT.resolve(), relative))


def check_output_is_no_input(out: Path, args: argparse.Namespace, inputs: list[str] = (),
                             option: str = "--out") -> None:
    """Before any work, a UsageError for an ``out`` the trainer must never write: what
    ``files.check_output_file`` refuses (a symbolic link, never written through; a folder; one of
    ``inputs``; a file in the shipped model's folder without --force), a name whose suffix says
    another format, a data file, or a file git tracks in the course's checkout (even with --force)."""
    check_output_file(out, inputs=inputs, force=args.force, option=option)
    if out.name in MULTI30K_FILES:
        raise UsageError(f"{option} {out} is the name of a Multi30k data file that training reads; name the "
                         f"checkpoint e.g. {option} {out.parent / 'model.pt'}")
    what = OTHER_FORMATS.get(out.suffix.lower())
    if what is not None:
        raise UsageError(f"{option} {out} ends in {out.suffix}, the suffix of another format ({what}), but the "
                         f"trainer writes a PyTorch checkpoint; name it .pt, e.g. {option} "
                         f"{out.with_name(out.stem + '.pt')}")
    if is_committed(out):
        raise UsageError(f"{option} {out} is a file of the course (tracked by git), which a checkpoint must not "
                         f"replace; name a new file, e.g. {option} checkpoints/{out.stem}.pt")


def same_file(a: Path, b: str | Path) -> bool:
    """Whether two paths name one file: the same path once resolved, or the same (device, inode)."""
    if a.resolve() == Path(b).resolve():
        return True
    identity = file_identity(a)
    return identity is not None and identity == file_identity(Path(b).resolve())


class Outputs:
    """The checkpoints a run writes, and the existing files it may replace.

    Checked before any work by :func:`check_new_output`, and again at every save: a save replaces
    only a file this run may replace (the earlier run's with --overwrite, the --resume file it
    continues, a file it wrote itself), and creates any other file exclusively. A file that appeared
    or changed at ``requested`` meanwhile (a second run with the same --out) is kept: this run's
    checkpoints are saved beside it, ``<stem>-<run id><suffix>``, and the run ends with an error
    saying so. A checkpoint that its folder cannot take (a full disk) is written into one of
    :func:`rescue_folders` and the run ends with an error saying where.
    """

    def __init__(self, requested: Path, run_id: str, replaceable: dict[Path, Identity],
                 earlier: "list[tuple[Path, Identity]]"):
        self.requested = requested  # --out
        self.out = requested  # where this run's checkpoints go: beside --out after a clash
        self.run_id = run_id
        self.replaceable = replaceable  # path -> the identity of the file there that may be replaced
        self.earlier = earlier  # --overwrite: the earlier run's numbered checkpoints, removed after our first save
        self.failure: str | None = None  # why the last checkpoint could not be written where it was meant to go

    def numbered(self, step: int) -> Path:
        """The checkpoint ``--keep-last`` writes at ``step``."""
        return self.out.with_name(f"{self.out.stem}-step{step:06d}{self.out.suffix}")

    def write(self, path: Path, write: "Callable[[Path, set], None]", ctx: DistributedContext) -> Path:
        """``write(path, may_replace)``, or, when another process wrote ``path`` since this run checked
        it, the same beside it under a name of this run; returns the path written."""
        for attempt in range(1, 100):
            identity = self.replaceable.get(path)
            try:
                write(path, {identity} if identity is not None else set())
            except OutputTakenError:
                path = self.beside(path, attempt, ctx)
                continue
            self.replaceable[path] = file_identity(path)
            return path
        raise CheckpointError(f"could not find a free name for the checkpoint beside {path}")

    def beside(self, taken: Path, attempt: int, ctx: DistributedContext) -> Path:
        """A name of this run for the checkpoint that could not go to ``taken``."""
        tag = self.run_id if attempt == 1 else f"{self.run_id}-{attempt}"
        family = [self.out, *kept_checkpoints(self.out)]
        if taken not in family:  # a rescued checkpoint
            return taken.with_name(f"{taken.stem}-{tag}{taken.suffix}")
        moved = self.requested.with_name(f"{self.requested.stem}-{tag}{self.requested.suffix}")
        new = moved if taken == self.out else moved.with_name(moved.stem + taken.name[len(self.out.stem):])
        log(ctx, f"warning: {taken} was written by another process after this run began (two runs with the same "
                 f"--out?); it is kept, and this run's checkpoints are saved as {moved} instead")
        self.out = moved
        return new

    def save(self, path: Path, write: "Callable[[Path, set], None]", ctx: DistributedContext, size_mb: float,
             final: bool) -> Path | None:
        """:func:`save_or_rescue` through :meth:`write`; records why a checkpoint is not where it was meant
        to go; removes the earlier run's numbered checkpoints once one of ours is saved."""
        self.failure = None
        written = save_or_rescue(path, lambda target: self.write(target, write, ctx), ctx, size_mb, final, self)
        if written is not None:
            remove_earlier(self.earlier)  # --overwrite: the earlier run's numbered checkpoints, now that ours is saved
        return written

    def rotate(self, keep_last: int) -> None:
        """Remove this run's numbered checkpoints but the newest ``keep_last`` (never another run's)."""
        ours = [path for path in kept_checkpoints(self.out)
                if path in self.replaceable and file_identity(path) == self.replaceable[path]]
        for old in ours[:-keep_last]:
            old.unlink()
            del self.replaceable[old]

    def problem(self, written: Path) -> str | None:
        """Why the final checkpoint ``written`` is not at --out, in one line; None when it is."""
        if written == self.requested:
            return None
        if self.failure is not None:
            return (f"--out {self.requested} was not written ({self.failure}); this run's checkpoint was rescued to "
                    f"{written}: move it back once there is space (mv {written} {self.requested}), or continue "
                    f"from it with --resume {written}")
        return (f"--out {self.requested} was written by another run while this one trained, so it was kept; this "
                f"run's checkpoint is {written}: compare the two (--average FILE --split val evaluates one) and "
                f"rename the one to keep")


def check_new_output(out: Path, args: argparse.Namespace, run_id: str, inputs: list[str] = ()) -> Outputs:
    """Before any work: ``out`` can be written (:func:`check_output_is_no_input`, ``check_output_path``),
    is none of ``inputs``, and replaces no earlier run's checkpoint (``out`` itself or its numbered
    ``--keep-last`` copies) unless --overwrite says so. Continuing a run into its own --resume file
    is not a replacement.

    Returns the run's :class:`Outputs`: what it may replace at save time (the identities of the files
    seen now), and the earlier run's numbered checkpoints that --overwrite will remove once this run
    has saved a checkpoint of its own, so that a run stopped before its first save destroys nothing."""
    check_output_is_no_input(out, args, inputs)
    check_output_path(out)
    earlier = [path for path in [out, *kept_checkpoints(out)] if path.exists()]
    if args.resume and same_file(out, args.resume):  # the run continues into its own file and numbered copies
        return Outputs(out, run_id, {path: file_identity(path) for path in earlier}, [])
    if earlier and not args.overwrite:
        more = f" and {len(earlier) - 1} numbered checkpoint(s) beside it" if len(earlier) > 1 else ""
        raise UsageError(f"{earlier[0]} already exists{more}; choose another --out, continue that run with "
                         f"--resume {out}, or pass --overwrite to replace it")
    # --overwrite: no numbered checkpoint of the earlier run may stay to be averaged with ours, but
    # they go only after this run has saved (out itself is replaced by the save, atomically).
    replaceable = {path: file_identity(path) for path in earlier}
    return Outputs(out, run_id, replaceable, [(path, replaceable[path]) for path in earlier if path != out])


def remove_earlier(earlier: "list[tuple[Path, Identity]]") -> None:
    """Remove the earlier run's checkpoints listed by :func:`check_new_output`, except a file that
    this run has written under the same name meanwhile (another identity); empties the list."""
    for path, identity in earlier:
        if file_identity(path) == identity:
            path.unlink(missing_ok=True)
    earlier.clear()


def rescue_folders(path: Path) -> list[Path]:
    """Where a checkpoint goes when its own folder cannot take it: the temporary folder and the
    home folder, if they are other folders."""
    import tempfile

    folders = []
    for folder in (Path(tempfile.gettempdir()), Path.home()):
        if folder.resolve() != path.parent.resolve() and folder.resolve() not in folders and folder.is_dir():
            folders.append(folder.resolve())
    return folders


def save_or_rescue(path: Path, write: "Callable[[Path], Path]", ctx: DistributedContext, size_mb: float,
                   final: bool, outputs: "Outputs | None" = None) -> Path | None:
    """``write(path)``, which returns the path written; if the system refuses (a full disk, a quota, a
    read-only file system), the checkpoint is written into one of :func:`rescue_folders` instead, the
    log says where and ``outputs.failure`` why. Returns the path written. When nowhere takes it: a
    checkpoint during training is skipped with a warning (returns None: training goes on, and the
    next save tries again); the final one asks, in a terminal, for space to be freed and tries again,
    else ends with an error saying where to free how much."""
    try:
        return write(path)
    except (OSError, CheckpointError) as error:  # CheckpointError: the folder's permission changed meanwhile
        failure = os_error_message(error) if isinstance(error, OSError) else str(error)
    for folder in rescue_folders(path):
        try:
            rescued = write(folder / f"{path.stem}-rescued{path.suffix}")
        except (OSError, CourseError):
            continue
        if outputs is not None:
            outputs.failure = failure
        log(ctx, f"could not write {path} ({failure}); the checkpoint is saved in {rescued} instead: move it "
                 f"back once there is space (mv {rescued} {path}), or continue from it with --resume {rescued}")
        return rescued
    need = f"about {size_mb:.0f} MB" if size_mb >= 1 else "less than 1 MB"
    where = f"{path.parent.resolve()}"
    if not final:
        log(ctx, f"warning: could not write the checkpoint {path} ({failure}), nor in "
                 f"{', '.join(map(str, rescue_folders(path))) or 'another folder'}; training goes on, and the "
                 f"next save tries again: free {need} in {where}")
        return None
    while sys.stdin is not None and sys.stdin.isatty():
        try:
            with stop_at_once():  # a Ctrl-C at the prompt gives up now, not after "this update"
                input(f"could not write the checkpoint {path} ({failure}); free {need} in {where}, then press "
                      f"Enter to try again (Ctrl-C gives up, and the weights of this run are lost) ")
        except EOFError:  # Ctrl-D: gives up too
            break
        try:
            return write(path)
        except OSError as error:
            failure = os_error_message(error)
    raise CourseError(f"could not write the checkpoint {path} ({failure}), nor in "
                      f"{', '.join(map(str, rescue_folders(path))) or 'another folder'}: the weights of this run "
                      f"are lost. Free {need} in {where} (or give --out on another disk) and train again")


def recipe(args: argparse.Namespace, saved: dict | None = None) -> Preset:
    """The preset (or the ``saved`` recipe of a checkpoint) with the command line's overrides applied;
    its beam and length penalty checked now, not after the training they would end."""
    preset = Preset(**saved) if saved and args.preset is None else PRESETS[args.preset or "notebook"]
    overrides = {name: getattr(args, name)
                 for name in ("epochs", "max_minutes", "max_steps", "beam_size", "length_penalty", *RECIPE_OPTIONS)}
    preset = dataclasses.replace(preset, **{k: v for k, v in overrides.items() if v is not None})
    try:
        check_beam_arguments(max(preset.beam_size, 1), preset.length_penalty)
    except ValueError as error:
        raise UsageError(f"{error}; give --beam-size and --length-penalty") from None
    return preset


Examples = list[tuple[list[int], list[int]]]  # (source ids, target ids)


def encode(pairs: list[tuple[str, str]], tokenize_de: Callable[[str], list[str]],
           tokenize_en: Callable[[str], list[str]], de: Vocab, en: Vocab) -> Examples:
    """Sentence pairs -> (source ids, target ids), each wrapped in <s> ... </s>."""
    return [([de[BOS], *de.lookup_indices(tokenize_de(src)), de[EOS]],
             [en[BOS], *en.lookup_indices(tokenize_en(tgt)), en[EOS]]) for src, tgt in pairs]


def make_batches(examples: Examples, max_tokens: int, shuffle: bool, seed: int) -> list[Batch]:
    """Token-budget batches (``batch_by_tokens`` on the longer side of each pair), collated."""
    lengths = [max(len(src), len(tgt)) for src, tgt in examples]
    return [collate([examples[i] for i in indices], pad_idx=0)
            for indices in batch_by_tokens(lengths, max_tokens, shuffle=shuffle, seed=seed)]


LOST_OUTPUT: list[OSError] = []  # a report line stdout could not take on a full disk: said at the end, exit 1


def log(ctx: DistributedContext, *message) -> None:
    if ctx.is_main:
        try:
            print(*message, flush=True)
        except OSError as error:  # the terminal closed (SIGHUP), or the reader of a pipe quit: the run goes on
            if error.errno in DISK_ERRORS or error.errno == errno.EFBIG:  # a log file on a full disk: lost
                LOST_OUTPUT.append(error)


def said_lost_output(status: int, prog: str) -> int:
    """``status``, or 1 when the report on stdout was cut by a full disk (it exited 0 without a word)."""
    if not LOST_OUTPUT:
        return status
    try:
        print(f"{prog}: error: the report on the standard output was cut, the training itself finished "
              f"({os_error_message(LOST_OUTPUT[0])})", file=sys.stderr)
    except OSError:
        pass
    return status or 1


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_options(parser, args)

    def body() -> int:
        try:
            with signals_as_interrupt():  # SIGTERM and SIGHUP stop the command as Ctrl-C does
                if args.threads is not None:
                    torch.set_num_threads(args.threads)
                ctx = init_distributed(args.device)
                try:
                    status = run(args, ctx)
                finally:
                    cleanup(ctx)
                return said_lost_output(status, parser.prog)
        except Stopped as stopped:  # exit 128 + n, as the shell reports a process the signal ended
            print(f"{parser.prog}: stopped by {STOP_SIGNALS.get(stopped.signum, stopped.signum)}", file=sys.stderr)
            return 128 + stopped.signum

    return run_command(body, parser.prog)


# The signals that end a run: Ctrl-C, and those a machine sends. Windows has no SIGHUP.
STOP_SIGNALS = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM",
                **({signal.SIGHUP: "SIGHUP"} if hasattr(signal, "SIGHUP") else {})}
SENDERS = {"SIGTERM": " (sent by timeout, kill, a job scheduler such as Slurm or Kubernetes, or a cancelled CI job)",
           "SIGHUP": " (the terminal closed)"}


def _install(signums, handler) -> dict:
    """``handler`` for each of ``signums`` that is not ignored (a process started in the background
    ignores SIGINT, one under nohup SIGHUP: left so); the previous handlers. Only the main thread may."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {signum: signal.signal(signum, handler) for signum in signums
            if signal.getsignal(signum) is not signal.SIG_IGN}


def stopped_by(signum: int) -> Stopped:
    """The KeyboardInterrupt of files.signals_as_interrupt for ``signum``."""
    stopped = Stopped(f"stopped by {STOP_SIGNALS[signum]}")
    stopped.signum = signum
    return stopped


def _stop_now(signum, frame) -> None:
    raise KeyboardInterrupt if signum == signal.SIGINT else stopped_by(signum)


@contextlib.contextmanager
def stop_at_once():
    """While active, Ctrl-C, SIGTERM and SIGHUP stop the command at once (KeyboardInterrupt, Stopped),
    even inside :class:`StopOnInterrupt`: for a prompt, where nothing is under way."""
    previous = _install(STOP_SIGNALS, _stop_now)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


class StopOnInterrupt:
    """While active, the first Ctrl-C (SIGINT), SIGTERM or SIGHUP only asks training to stop after the
    update under way, so that a consistent checkpoint can be saved; a second one interrupts at once."""

    def __init__(self, ctx: DistributedContext):
        self.ctx, self.signum, self.previous = ctx, None, {}

    @property
    def requested(self) -> bool:
        return self.signum is not None

    @property
    def name(self) -> str:
        return STOP_SIGNALS[self.signum]

    @property
    def exit_code(self) -> int:
        """128 + the signal's number, the shell's code for a process it ended: 130 for Ctrl-C, 143 for SIGTERM."""
        return 128 + self.signum

    def handle(self, signum, frame) -> None:
        if self.requested:
            _stop_now(signum, frame)
        self.signum = signum
        name = STOP_SIGNALS[signum]
        log(self.ctx, f"\n{name}{SENDERS.get(name, '')}: stopping after this update to save the checkpoint "
                      f"({'Ctrl-C' if name == 'Ctrl-C' else 'a second signal'} again quits without saving)")

    def __enter__(self) -> "StopOnInterrupt":
        self.previous = _install(STOP_SIGNALS, self.handle)
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)


def run(args: argparse.Namespace, ctx: DistributedContext) -> int:
    if args.average:
        return evaluate_average(args, ctx)
    checkpoint = load_checkpoint(args.resume) if args.resume else None
    saved = checkpoint["extra"] if checkpoint is not None else {}
    if checkpoint is not None:
        check_resume_options(args, saved)
    preset = recipe(args, saved.get("recipe"))
    seed = args.seed if args.seed is not None else saved.get("seed", 0)
    limit = args.limit if args.limit is not None else saved.get("limit")
    run_id = saved.get("run_id") or uuid.uuid4().hex[:12]  # averaging refuses to mix runs
    out = Path(args.out or args.resume or f"checkpoints/{args.preset or 'notebook'}.pt")
    outputs = check_new_output(out, args, run_id)  # before hours of training are spent on a file that cannot be written
    random.seed(seed)
    _ = torch.manual_seed(seed)
    splits = {split: load_pairs(split, args.data_dir) for split in ("train", "val", SPLITS[args.split])}
    if limit:
        splits = {split: pairs[:limit] for split, pairs in splits.items()}
    text = make_text(preset.bpe_merges, splits["train"], saved.get("bpe_merges"))
    tokenize_de, tokenize_en = text.tokenize_de, text.tokenize_en

    if checkpoint is not None:
        vocabs = vocabs_from_checkpoint(checkpoint)
        de, en = vocabs["src"], vocabs["tgt"]
        model = model_from_checkpoint(checkpoint)
        config = config_from(checkpoint["config"], str(args.resume))
        check_vocab_sizes(config, {"src": len(de), "tgt": len(en)}, str(args.resume))
        log(ctx, f"resuming from {args.resume} at step {checkpoint['step']}, epoch {checkpoint['epoch']}")
    else:
        de, en = build_vocabs(preset.min_freq, splits["train"], text)
        config = TransformerConfig(len(de), len(en), N=preset.N, d_model=preset.d_model, d_ff=preset.d_ff,
                                   h=preset.h, dropout=preset.dropout, attention_dropout=preset.attention_dropout,
                                   ff_dropout=preset.ff_dropout, share_embeddings=text.merges is not None)
        model = make_model(config)
    for vocab in (de, en):
        vocab.set_default_index(vocab[UNK])
    if de[PAD] != 0 or en[PAD] != 0:
        raise CheckpointError(f"{PAD} must have id 0 in both vocabularies (got {de[PAD]} and {en[PAD]})")
    if preset.beam_size:  # before training, not at its end
        check_beam_fits(preset.beam_size, len(en), "--beam-size")

    train = make_batches(encode(splits["train"], tokenize_de, tokenize_en, de, en), preset.max_tokens,
                         shuffle=True, seed=seed)
    val = make_batches(encode(splits["val"], tokenize_de, tokenize_en, de, en), preset.max_tokens,
                       shuffle=False, seed=seed)
    train = shard(train, ctx)  # each process trains on its own share; val is evaluated whole by all
    model = wrap_model(model, ctx)
    optimizer, scheduler = make_optimizer(model, config.d_model, preset.warmup, preset.lr_factor)
    start_epoch = 0
    if checkpoint is not None:
        restore(checkpoint, model, optimizer, scheduler)
        start_epoch = checkpoint["epoch"]
    steps_per_epoch = math.ceil(len(train) / preset.accum_steps)
    vocabularies = (f"{len(de)} byte-pair pieces shared by both languages" if text.merges is not None
                    else f"de {len(de)}, en {len(en)} words")
    log(ctx, f"device {ctx.device} x {ctx.world_size} process(es); vocabularies: {vocabularies}; "
             f"{count_parameters(unwrap(model)):,} parameters; {len(splits['train'])} training pairs in "
             f"{len(train)} batches per process, {steps_per_epoch} updates per epoch")

    before = checkpoint["extra"].get("history", {}) if checkpoint is not None else {}
    progress = {"epochs_done": start_epoch, "epoch_start_step": scheduler.last_epoch, "last_save": time.monotonic()}

    # Weights, Adam's two moments and the rest: what a checkpoint needs on the disk, for the message of a full one.
    size_mb = 3 * sum(p.numel() * p.element_size() for p in model.parameters()) / 1e6

    def save(history: dict, numbered: bool = False, final: bool = False) -> Path | None:
        # Weights that diverged to NaN replace no checkpoint (a resumed run's included): the run ends here.
        check_finite(unwrap(model).state_dict(), f"step {scheduler.last_epoch} of this run (so nothing was saved "
                                                 f"to {outputs.out})")
        # The history of this run follows that of the runs before the resume.
        combined = {k: list(before.get(k, [])) + list(v) for k, v in history.items()}

        def write(target: Path, may_replace: set) -> None:
            save_checkpoint(target, model, config, vocabs={"src": de, "tgt": en}, optimizer=optimizer,
                            scheduler=scheduler, step=scheduler.last_epoch, epoch=progress["epochs_done"],
                            extra={"recipe": dataclasses.asdict(preset), "history": combined, "run_id": run_id,
                                   "preset": args.preset or saved.get("preset", "notebook"), "seed": seed,
                                   "limit": limit, "bpe_merges": text.merges}, may_replace=may_replace)

        path = outputs.numbered(scheduler.last_epoch) if numbered else outputs.out
        written = outputs.save(path, write, ctx, size_mb, final)
        if written is not None:
            progress["last_save"] = time.monotonic()
        return written

    def keep(history: dict) -> None:
        # A numbered copy for averaging; only the newest ``--keep-last`` of this run stay.
        if save(history, numbered=True) is not None:
            outputs.rotate(args.keep_last)

    def on_epoch_end(epoch: int, history: dict) -> None:
        # An epoch cut short by the time or step budget is run again from its start on resume.
        complete = scheduler.last_epoch - progress["epoch_start_step"] == steps_per_epoch
        progress["epochs_done"] = epoch + 1 if complete else epoch
        progress["epoch_start_step"] = scheduler.last_epoch
        if ctx.is_main and time.monotonic() - progress["last_save"] >= 60 * SAVE_EVERY_MINUTES:
            save(history)
        if ctx.is_main and args.keep_last and (epoch + 1) % args.save_every == 0:
            keep(history)

    loss_fn = LabelSmoothingLoss(len(en), en[PAD], preset.label_smoothing)
    with StopOnInterrupt(ctx) as interrupt:
        history = fit_distributed(model, train, val, loss_fn, optimizer, scheduler, ctx, epochs=preset.epochs,
                                  max_steps=preset.max_steps, max_minutes=preset.max_minutes,
                                  accum_steps=preset.accum_steps, clip=preset.clip,
                                  progress=ctx.is_main and not args.no_progress, seed=seed,
                                  start_epoch=start_epoch, on_epoch_end=on_epoch_end,
                                  stop=lambda: interrupt.requested)
        if not ctx.is_main:
            return interrupt.exit_code if interrupt.requested else 0
        written = save(history, final=True)  # a signal now waits for the checkpoint to be written
    log(ctx, f"saved {written} (step {scheduler.last_epoch})")
    problem = outputs.problem(written)
    if interrupt.requested:
        log(ctx, f"interrupted by {interrupt.name}: continue with --resume {written}")
        if problem is not None:
            print(f"python -m annotated.train: error: {problem}", file=sys.stderr)
        return interrupt.exit_code

    report_bleu(unwrap(model), splits[SPLITS[args.split]], de, en, text, preset, ctx, SPLITS[args.split])
    if problem is not None:
        raise CourseError(problem)  # exit code 1: --out does not hold this run's model
    return 0


def kept_checkpoints(out: Path) -> list[Path]:
    """The numbered checkpoints ``--keep-last`` wrote beside ``out``, oldest first."""
    return sorted(out.parent.glob(f"{out.stem}-step[0-9][0-9][0-9][0-9][0-9][0-9]{out.suffix}"))


def evaluate_average(args: argparse.Namespace, ctx: DistributedContext) -> int:
    """``--average``: one model from the mean of several checkpoints' weights, then BLEU."""
    outputs = check_new_output(Path(args.out), args, "", inputs=args.average) if args.out else None
    checkpoint = average_checkpoints(args.average)
    preset = recipe(args, checkpoint["extra"].get("recipe"))
    vocabs = vocabs_from_checkpoint(checkpoint)
    de, en = vocabs["src"], vocabs["tgt"]
    for vocab in (de, en):
        vocab.set_default_index(vocab[UNK])
    if preset.beam_size:
        check_beam_fits(preset.beam_size, len(en), "--beam-size")
    check_vocab_sizes(config_from(checkpoint["config"], str(args.average[-1])), {"src": len(de), "tgt": len(en)},
                      str(args.average[-1]))
    model = model_from_checkpoint(checkpoint).to(ctx.device)
    log(ctx, f"averaged {len(args.average)} checkpoints (steps {checkpoint['step']} and before)"
        if len(args.average) > 1 else f"evaluating {args.average[0]} (step {checkpoint['step']})")
    problem = None
    if outputs is not None and ctx.is_main:
        outputs.run_id = checkpoint["extra"].get("run_id") or "averaged"

        def write(target: Path, may_replace: set) -> None:
            save_checkpoint(target, model, TransformerConfig(**checkpoint["config"]), vocabs=vocabs,
                            step=checkpoint["step"], epoch=checkpoint["epoch"], extra=checkpoint["extra"],
                            may_replace=may_replace)

        written = outputs.save(outputs.out, write, ctx, 0.0, final=True)
        log(ctx, f"saved {written}")
        problem = outputs.problem(written)
    pairs = load_pairs(SPLITS[args.split], args.data_dir)[: args.limit or None]
    text = make_text(preset.bpe_merges, [], checkpoint["extra"].get("bpe_merges"))
    if ctx.is_main:
        report_bleu(model, pairs, de, en, text, preset, ctx, SPLITS[args.split])
    if problem is not None:
        raise CourseError(problem)
    return 0


def report_bleu(model: torch.nn.Module, test: list[tuple[str, str]], de: Vocab, en: Vocab, text: Text,
                preset: Preset, ctx: DistributedContext, split: str = "val") -> None:
    """BLEU on ``split``: the validation split to choose settings, test_2016_flickr to report
    (as the paper reports BLEU on newstest2014, §6.1)."""
    sources = [src for src, _ in test]
    references = [tgt for _, tgt in test]
    started = time.monotonic()
    hypotheses = translate(model, sources, de, en, text.tokenize_de, beam_size=preset.beam_size or None,
                           length_penalty=preset.length_penalty, detokenizer=text.detokenize)
    bleu = corpus_bleu(hypotheses, references)
    decoding = f"beam {preset.beam_size}, alpha {preset.length_penalty}" if preset.beam_size else "greedy"
    ratio = bleu.sys_len / bleu.ref_len if bleu.ref_len else float("nan")
    log(ctx, f"BLEU on {split} ({len(sources)} sentences, {decoding}, "
             f"{time.monotonic() - started:.0f} s): {bleu.score:.2f} (brevity penalty {bleu.bp:.3f}, "
             f"length ratio {ratio:.3f})")
    log(ctx, f"sacrebleu signature: {bleu.signature}")
    for src, hyp, ref in list(zip(sources, hypotheses, references))[:3]:
        log(ctx, f"  de:  {src}\n  out: {hyp}\n  ref: {ref}")


if __name__ == "__main__":
    sys.exit(main())
