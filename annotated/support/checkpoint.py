"""Checkpoints: weights, config, vocabularies and the training state, in one file.

A checkpoint is a dict of tensors and plain Python values (lists, dicts, numbers, strings),
so it loads with ``torch.load(weights_only=True)``, which refuses to run code from the file.
Vocabularies are stored through their ``state_dict()`` (plain lists), the config through
``dataclasses.asdict``. What is saved is checked by those same rules before anything is
written, so a value that could not be loaded back (a ``Path``, a numpy number) is an error
naming it, not an unreadable file. Writing goes to a temporary file in the same folder, flushed
to disk, which then replaces the old checkpoint in one ``os.replace``: a crash or a full disk in
the middle of a save leaves the previous checkpoint as it was, and the next save to that path
removes the temporary file a killed process left behind. A save can also be told which files it
may replace (``may_replace``): then a checkpoint that appeared meanwhile (another run writing to
the same path) is never replaced, because the finished temporary file is linked onto the path,
which fails if the path exists by then. A symbolic link is never written through. A SHA-256 of
every stored value (tensors included) is saved with them and checked on load: a flipped bit on
a disk or in a copy is an error, not a model with changed weights.

    save_checkpoint("model.pt", model, config, vocabs={"src": de, "tgt": en},
                    optimizer=optimizer, scheduler=scheduler, step=1200, epoch=3)
    checkpoint = load_checkpoint("model.pt")
    model = model_from_checkpoint(checkpoint)          # built from the saved config
    restore(checkpoint, model, optimizer, scheduler)   # resume training where it stopped
"""

import collections
import dataclasses
import hashlib
import os
import pickle
import random
import stat
import struct
from collections.abc import Collection
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from annotated.model import EncoderDecoder, TransformerConfig, make_model
from annotated.support.errors import CourseError
from annotated.support.files import OutputExists, atomic_write, nearest_existing, remove_stale_temp_files

FORMAT_VERSION = 2  # 2: with a checksum
PLAIN_TYPES = (str, int, float, bool, type(None))  # exactly these: a numpy float is a float subclass


class CheckpointError(CourseError, ValueError):
    """A checkpoint that cannot be written or read as asked (damaged, from another run, ...)."""


class CheckpointMismatchError(CheckpointError):
    """The checkpoint's weights do not fit the model they are loaded into."""


class OutputTakenError(CheckpointError):
    """The path of a save holds a file this save may not replace: one that appeared (or changed)
    after the command checked the path, written by another run."""

    def __init__(self, path: Path):
        super().__init__(f"{path} was written by another process after this one checked it, so it is not replaced")
        self.path = path


Identity = tuple[int, int, int, int]  # (device, inode, size, modification time): which file, as it was seen


def file_identity(path: str | Path) -> Identity | None:
    """Which file ``path`` names, as it is now: its device and inode (whatever the path's spelling),
    size and modification time (a file rewritten in place is another); the file at ``path`` itself
    (a symbolic link is not followed), or None when there is none."""
    try:
        info = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns


def kind_of(mode: int) -> str:
    """What a file that is neither a regular file nor a folder is, in words."""
    for test, kind in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return kind
    return "not a regular file"


def unwrap(model: nn.Module) -> nn.Module:
    """The model inside a DistributedDataParallel (or similar) wrapper; the model itself otherwise."""
    return getattr(model, "module", model)


def plain_state(obj: Any) -> Any:
    """A vocabulary or config as plain data: ``state_dict()``, ``dataclasses.asdict`` or a dict copy."""
    if obj is None:
        return None
    if hasattr(obj, "state_dict"):
        return obj.state_dict()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if isinstance(obj, dict):
        return dict(obj)
    raise TypeError(f"cannot store a {type(obj).__name__} in a checkpoint: give a dataclass, a dict, "
                    f"or an object with state_dict()")


def rng_state() -> dict:
    """The random generators' states (torch CPU and CUDA, Python's ``random``): restoring them
    makes the dropout masks and shuffles after a resume the same as in an uninterrupted run."""
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    # The states are CPU byte tensors, whatever map_location moved the checkpoint to.
    torch.set_rng_state(state["torch"].cpu())
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])


def check_storable(value: Any, where: str = "checkpoint") -> None:
    """Raise a CheckpointError naming the first value under ``where`` that
    ``torch.load(weights_only=True)`` would refuse: only tensors, str, int, float, bool, None,
    and lists, tuples and dicts of them can be stored."""
    if isinstance(value, torch.Tensor) or type(value) in PLAIN_TYPES:
        return
    if type(value) in (list, tuple):
        for i, item in enumerate(value):
            check_storable(item, f"{where}[{i}]")
        return
    if type(value) in (dict, collections.OrderedDict):
        for key, item in value.items():
            if type(key) not in PLAIN_TYPES:
                raise CheckpointError(f"{where} has a key {key!r} of type {type(key).__name__}; keys must be "
                                      f"str, int, float, bool or None")
            check_storable(item, f"{where}[{key!r}]")
        return
    raise CheckpointError(
        f"{where} is a {type(value).__module__}.{type(value).__qualname__} ({value!r:.60}), which a checkpoint "
        f"loaded with weights_only=True cannot hold; convert it to plain data first (str(path), float(x), "
        f"vars(namespace), x.tolist())"
    )


def checksum(payload: dict) -> str:
    """SHA-256 over every value of ``payload`` but its "checksum": keys, types, tensor dtypes,
    shapes and bytes, and the text of the plain values, in a fixed order."""
    digest = hashlib.sha256()

    def feed(value: Any) -> None:
        if isinstance(value, torch.Tensor):
            value = value.detach().cpu().contiguous()
            digest.update(f"T{value.dtype}{tuple(value.shape)}".encode())
            digest.update(value.reshape(-1).view(torch.uint8).numpy().tobytes())
        elif isinstance(value, dict):
            digest.update(f"D{len(value)}".encode())
            for key in sorted(value, key=repr):
                digest.update(repr(key).encode())
                feed(value[key])
        elif isinstance(value, (list, tuple)):
            digest.update(f"L{len(value)}".encode())
            for item in value:
                feed(item)
        else:
            digest.update(f"{type(value).__name__}:{value!r};".encode())

    feed({key: value for key, value in payload.items() if key != "checksum"})
    return digest.hexdigest()


def check_output_path(path: str | Path, what: str = "checkpoint") -> Path:
    """``path`` as a Path, once checked to be writable as a file: not a folder, not below a file,
    not a symbolic link (never written through), a pipe or a device, in a folder this user may
    write to. Call it before the work whose result goes there."""
    path = Path(path)
    if path.is_symlink():
        raise CheckpointError(f"{path} is a symbolic link to {os.readlink(path)}, which a {what} is never written "
                              f"through; name the file itself, or another path")
    if path.is_dir():
        raise CheckpointError(f"{path} is a folder; name a file for the {what}, e.g. {path / 'model.pt'}")
    if path.exists() and not path.is_file():
        raise CheckpointError(f"{path} is {kind_of(path.lstat().st_mode)}, not a file a {what} can replace; "
                              f"name a regular file in a folder of yours")
    folder = nearest_existing(path.parent)
    if not folder.is_dir():
        raise CheckpointError(f"cannot write the {what} {path}: {folder} is a file, not a folder; choose "
                              f"another path")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise CheckpointError(f"cannot write the {what} {path}: no permission to write in {folder}; choose "
                              f"a folder of your own")
    return path


def save_checkpoint(path: str | Path, model: nn.Module, config: Any = None, vocabs: dict[str, Any] | None = None,
                    optimizer: torch.optim.Optimizer | None = None,
                    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
                    step: int = 0, epoch: int = 0, extra: dict | None = None,
                    may_replace: Collection[Identity] | None = None) -> Path:
    """Write a checkpoint atomically (temporary file, flushed to disk, then ``os.replace``); returns its path.

    ``vocabs`` maps a name ("src", "tgt") to a vocabulary with ``state_dict()`` or a plain dict;
    ``extra`` holds any further plain values (history, arguments). Everything is checked to be
    loadable (``check_storable``) before the file is touched.

    ``may_replace``: None replaces whatever file is at ``path``. Otherwise the identities
    (:func:`file_identity`) of the files this save may replace, e.g. the one the command checked
    before its work, or the one it wrote last: a file with another identity at ``path``, or one
    that appears there while the checkpoint is written, raises :class:`OutputTakenError` and is
    kept (a new file is linked onto ``path`` with ``os.link``, which fails if the path exists).
    """
    path = check_output_path(path)
    payload = {
        "format_version": FORMAT_VERSION,
        "model": unwrap(model).state_dict(),
        "config": plain_state(config),
        "vocabs": {name: plain_state(vocab) for name, vocab in (vocabs or {}).items()},
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "scheduler": scheduler.state_dict() if scheduler is not None else None,
        "step": int(step),
        "epoch": int(epoch),
        "rng": rng_state(),
        "extra": extra or {},
    }
    check_storable(payload)
    payload["checksum"] = checksum(payload)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temp_files(path.parent, f".{path.name}.", ".tmp")  # left by a save that was killed
    current = file_identity(path)
    replace = may_replace is None or (current is not None and current in may_replace)
    if not replace and current is not None:
        raise OutputTakenError(path)
    try:
        # A temporary file beside it, flushed, then os.replace, or for a new file os.link (exclusive).
        with atomic_write(path, ".tmp", exclusive=not replace) as f:
            torch.save(payload, f)
    except OutputExists:
        raise OutputTakenError(path) from None
    return path


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict:
    """Read a checkpoint with ``weights_only=True`` (tensors and plain data only) and verify its checksum."""
    path = Path(path)
    if path.is_dir():
        inside = sorted(path.glob("*.pt"))[:3]
        hint = f" (it holds {', '.join(p.name for p in inside)})" if inside else ""
        raise CheckpointError(f"{path} is a folder, not a checkpoint{hint}; give the .pt file written by python -m "
                              f"annotated.train")
    if path.exists() and not path.is_file():
        raise CheckpointError(f"{path} is {kind_of(path.stat().st_mode)}, not a checkpoint file (a checkpoint is "
                              f"read twice, checked and then loaded); give the .pt file written by python -m "
                              f"annotated.train")
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}; check the path, or train without --resume "
                                f"to start from scratch")
    check_looks_like_torch_save(path)
    try:
        checkpoint = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError:
        # PyTorch's own message suggests weights_only=False, which would run the file's code: not shown.
        raise CheckpointError(f"{path} holds Python objects other than tensors and plain data, so it is not "
                              f"loaded (that could run code from the file); use a checkpoint written by "
                              f"annotated's save_checkpoint") from None
    except Exception as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise CheckpointError(f"{path} is damaged or not a checkpoint ({type(error).__name__}: {first_line}); "
                              f"use another copy, or train again") from None
    if not isinstance(checkpoint, dict) or checkpoint.get("format_version") != FORMAT_VERSION:
        found = checkpoint.get("format_version") if isinstance(checkpoint, dict) else type(checkpoint).__name__
        raise CheckpointError(f"{path} is not a checkpoint of format version {FORMAT_VERSION} (found {found}); "
                              f"save it again with annotated.support.checkpoint.save_checkpoint")
    if checkpoint.get("checksum") != checksum(checkpoint):
        raise CheckpointError(f"{path} is damaged: its contents no longer match the checksum written with them "
                              f"(a changed byte on the disk or in a copy); use another copy, or train again")
    return checkpoint


def check_looks_like_torch_save(path: Path) -> None:
    """Raise a CheckpointError naming what ``path`` is when its first bytes are not those of a file
    of ``torch.save`` (a zip archive, or a pickle of the old format): an empty file, a text file, a
    safetensors file of an exported model."""
    with path.open("rb") as f:
        head = f.read(64)
    if head.startswith(b"PK\x03\x04") or head[:1] == b"\x80":
        return
    fix = "give a .pt file written by python -m annotated.train"
    if not head:
        raise CheckpointError(f"{path} is empty, not a checkpoint (a save that never finished?); {fix}")
    if len(head) >= 10 and head[8:10] == b'{"' and struct.unpack("<Q", head[:8])[0] < 100_000_000:
        raise CheckpointError(f"{path} is a safetensors file (the weights of a model folder in the shipped "
                              f"format), not a checkpoint; give the folder that holds it, with its config.json, "
                              f"vocab.txt, bpe_codes.txt and SHA256SUMS")
    text = head.decode("utf-8", errors="replace").rstrip("\ufffd")  # a character cut at byte 64 is no proof
    if all(c.isprintable() or c.isspace() for c in text):
        raise CheckpointError(f"{path} is a text file ({text.strip()[:40]!r}...), not a checkpoint; {fix}")
    raise CheckpointError(f"{path} is not a checkpoint: its first bytes are not those of a file written by "
                          f"torch.save; {fix}")


def config_from(saved: Any, where: str) -> TransformerConfig:
    """The ``TransformerConfig`` stored as ``saved`` (a dict of its fields), or a CheckpointError
    that names ``where`` and the field that is unknown, missing or unusable."""
    fields = {f.name: f for f in dataclasses.fields(TransformerConfig)}
    if not isinstance(saved, dict):
        raise CheckpointError(f"{where}: the configuration is a {type(saved).__name__}, not a mapping of "
                              f"TransformerConfig's fields ({', '.join(fields)})")
    unknown = sorted(set(saved) - set(fields))
    if unknown:
        raise CheckpointError(f"{where}: unknown configuration field(s) {', '.join(map(repr, unknown))}; "
                              f"TransformerConfig has {', '.join(fields)}")
    missing = [name for name, f in fields.items() if name not in saved
               and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if missing:
        raise CheckpointError(f"{where}: the configuration lacks {', '.join(missing)}")
    try:
        return TransformerConfig(**saved)
    except (TypeError, ValueError) as error:
        raise CheckpointError(f"{where}: {error}") from None


def check_vocab_sizes(config: TransformerConfig, sizes: dict[str, int], where: str) -> None:
    """The vocabularies have the sizes the configuration (and so the embeddings) was built for:
    ``sizes`` maps "src" and "tgt" to their lengths."""
    for side, size in sizes.items():
        expected = getattr(config, f"{side}_vocab_size")
        if size != expected:
            raise CheckpointError(f"{where}: the {side} vocabulary has {size} entries but the configuration and "
                                  f"the weights are for {expected} ({side}_vocab_size); the vocabulary belongs "
                                  f"to another model, or was cut short: use the files of one export or checkpoint")


def check_finite(weights: dict[str, torch.Tensor], where: str) -> None:
    """Raise a CheckpointError naming the weights that hold NaN or infinity: such a model decodes
    nothing but padding."""
    bad = [name for name, w in weights.items() if w.is_floating_point() and not torch.isfinite(w).all()]
    if bad:
        more = f" (and {len(bad) - 3} more)" if len(bad) > 3 else ""
        raise CheckpointError(f"{where}: the weights {', '.join(bad[:3])}{more} hold NaN or infinite values, "
                              f"so the model can only produce nonsense; training diverged (lower the learning "
                              f"rate, or clip gradients) or the file was damaged: use an earlier checkpoint")


def check_compatible(model: nn.Module, checkpoint: dict) -> None:
    """Raise ``CheckpointMismatchError`` naming every missing, unexpected or reshaped weight."""
    expected, saved = unwrap(model).state_dict(), checkpoint["model"]
    missing = [k for k in expected if k not in saved]
    unexpected = [k for k in saved if k not in expected]
    reshaped = [f"{k}: {tuple(saved[k].shape)} in the checkpoint, {tuple(expected[k].shape)} in the model"
                for k in expected if k in saved and saved[k].shape != expected[k].shape]
    if not (missing or unexpected or reshaped):
        return

    def listing(items: list[str]) -> str:
        return ", ".join(items[:5]) + (f" (and {len(items) - 5} more)" if len(items) > 5 else "")

    problems = [f"{label} {listing(items)}" for label, items in
                [("missing weights:", missing), ("unexpected weights:", unexpected), ("shape mismatches:", reshaped)]
                if items]
    raise CheckpointMismatchError(
        "the checkpoint does not match the model; " + "; ".join(problems) + ". "
        f"It was saved with config {checkpoint.get('config')}: build the model from it with "
        f"model_from_checkpoint(checkpoint) (and the checkpoint's vocabularies), "
        f"or train from scratch without --resume"
    )


def model_from_checkpoint(checkpoint: dict) -> EncoderDecoder:
    """A model built with the checkpoint's ``TransformerConfig``, holding its weights."""
    if not checkpoint.get("config"):
        raise CheckpointError("the checkpoint has no config; build the model yourself and call restore()")
    model = make_model(config_from(checkpoint["config"], "the checkpoint"))
    restore(checkpoint, model, restore_rng=False)
    return model


def restore(checkpoint: dict, model: nn.Module, optimizer: torch.optim.Optimizer | None = None,
            scheduler: torch.optim.lr_scheduler.LRScheduler | None = None, restore_rng: bool = True) -> dict:
    """Load the weights (after ``check_compatible``), and the optimizer, scheduler and random
    states when given, so that training continues exactly where it stopped. Returns the checkpoint."""
    check_compatible(model, checkpoint)
    unwrap(model).load_state_dict(checkpoint["model"])
    for name, part in [("optimizer", optimizer), ("scheduler", scheduler)]:
        if part is None:
            continue
        if checkpoint.get(name) is None:
            raise CheckpointError(f"the checkpoint holds no {name} state; it was saved for inference only, so "
                             f"start a new {name} instead of resuming")
        part.load_state_dict(checkpoint[name])
    if restore_rng:
        set_rng_state(checkpoint["rng"])
    return checkpoint


def average_checkpoints(paths: list[str | Path]) -> dict:
    """The last of ``paths``, with its weights replaced by the mean of all their weights.

    The paper's base models are "a single model obtained by averaging the last 5
    checkpoints, which were written at 10-minute intervals" (§6.1). The checkpoints must hold
    the same weights with the same shapes and configuration, the same vocabularies and the
    same run id (``extra["run_id"]``, written by the command line); integer buffers are taken
    from the last one. Optimizer and scheduler states are dropped: they belong to no average.
    """
    if not paths:
        raise CheckpointError("average_checkpoints needs at least one checkpoint path")
    if len({Path(path).resolve() for path in paths}) < len(paths):
        raise CheckpointError(f"the same checkpoint appears twice in {[str(p) for p in paths]}: each must count once")
    checkpoints = [load_checkpoint(path, map_location="cpu") for path in paths]
    last = checkpoints[-1]
    for path, checkpoint in zip(paths, checkpoints):
        if checkpoint["config"] != last["config"] or checkpoint["model"].keys() != last["model"].keys():
            raise CheckpointMismatchError(
                f"{path} was saved from another model than {paths[-1]} (configs {checkpoint['config']} and "
                f"{last['config']}); average only checkpoints of one training run"
            )
    for path, checkpoint in zip(paths, checkpoints):
        run, last_run = checkpoint["extra"].get("run_id"), last["extra"].get("run_id")
        if run != last_run:
            raise CheckpointError(f"{path} comes from run {run} and {paths[-1]} from run {last_run}: the weights "
                                  f"of two training runs do not average into a model; average checkpoints of one run")
        if checkpoint["vocabs"] != last["vocabs"]:
            raise CheckpointError(f"{path} and {paths[-1]} hold different vocabularies, so the same row of their "
                                  f"embeddings means different words; average checkpoints of one run")
    steps = [checkpoint["step"] for checkpoint in checkpoints]
    if len(set(steps)) < len(steps):
        raise CheckpointError(f"checkpoints {[str(p) for p in paths]} hold steps {steps}: two of them are copies of "
                         f"one state, which would count it twice; average distinct checkpoints (--keep-last)")
    averaged = {}
    for name, weight in last["model"].items():
        if weight.is_floating_point():
            averaged[name] = torch.stack([c["model"][name].float() for c in checkpoints]).mean(0).to(weight.dtype)
        else:
            averaged[name] = weight
    extra = {**last["extra"], "averaged": [str(path) for path in paths]}
    # No "checksum": it belongs to a file, and save_checkpoint writes the average's own.
    kept = {key: value for key, value in last.items() if key != "checksum"}
    return {**kept, "model": averaged, "optimizer": None, "scheduler": None, "extra": extra}


def vocabs_from_checkpoint(checkpoint: dict, vocab_class: type | None = None) -> dict:
    """The saved vocabularies, rebuilt with ``vocab_class.from_state_dict`` (``annotated.vocab.Vocab``
    by default); plain dicts when ``vocab_class`` is ``dict``."""
    if vocab_class is None:
        from annotated.vocab import Vocab as vocab_class
    if vocab_class is dict:
        return dict(checkpoint["vocabs"])
    return {name: vocab_class.from_state_dict(state) for name, state in checkpoint["vocabs"].items()}
