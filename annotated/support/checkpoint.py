"""Checkpoints: weights, config, vocabularies and the training state, in one file.

A checkpoint is a dict of tensors and plain Python values (lists, dicts, numbers, strings),
so it loads with ``torch.load(weights_only=True)``, which refuses to run code from the file.
Vocabularies are stored through their ``state_dict()`` (plain lists), the config through
``dataclasses.asdict``. Writing goes to a temporary file in the same folder, which then
replaces the old checkpoint in one ``os.replace``: a crash or a full disk in the middle of a
save leaves the previous checkpoint as it was.

    save_checkpoint("model.pt", model, config, vocabs={"src": de, "tgt": en},
                    optimizer=optimizer, scheduler=scheduler, step=1200, epoch=3)
    checkpoint = load_checkpoint("model.pt")
    model = model_from_checkpoint(checkpoint)          # built from the saved config
    restore(checkpoint, model, optimizer, scheduler)   # resume training where it stopped
"""

import dataclasses
import os
import random
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from annotated.model import EncoderDecoder, TransformerConfig, make_model

FORMAT_VERSION = 1


class CheckpointMismatchError(ValueError):
    """The checkpoint's weights do not fit the model they are loaded into."""


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
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(path: str | Path, model: nn.Module, config: Any = None, vocabs: dict[str, Any] | None = None,
                    optimizer: torch.optim.Optimizer | None = None,
                    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
                    step: int = 0, epoch: int = 0, extra: dict | None = None) -> Path:
    """Write a checkpoint atomically (temporary file + ``os.replace``); returns its path.

    ``vocabs`` maps a name ("src", "tgt") to a vocabulary with ``state_dict()`` or a plain dict;
    ``extra`` holds any further plain values (history, arguments).
    """
    path = Path(path)
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
    path.parent.mkdir(parents=True, exist_ok=True)
    # Same folder as the target, so os.replace is a rename within one file system (atomic).
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            torch.save(payload, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict:
    """Read a checkpoint with ``weights_only=True`` (tensors and plain data only)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}; check the path, or train without --resume "
                                f"to start from scratch")
    try:
        checkpoint = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as error:
        raise ValueError(f"could not read the checkpoint {path} ({type(error).__name__}: {error}); it is "
                         f"damaged or not written by annotated.support.checkpoint.save_checkpoint") from error
    if not isinstance(checkpoint, dict) or checkpoint.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"{path} is not a checkpoint of format version {FORMAT_VERSION}; save it again "
                         f"with annotated.support.checkpoint.save_checkpoint")
    return checkpoint


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
        raise ValueError("the checkpoint has no config; build the model yourself and call restore()")
    model = make_model(TransformerConfig(**checkpoint["config"]))
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
            raise ValueError(f"the checkpoint holds no {name} state; it was saved for inference only, so "
                             f"start a new {name} instead of resuming")
        part.load_state_dict(checkpoint[name])
    if restore_rng:
        set_rng_state(checkpoint["rng"])
    return checkpoint


def average_checkpoints(paths: list[str | Path]) -> dict:
    """The last of ``paths``, with its weights replaced by the mean of all their weights.

    The paper's base models are "a single model obtained by averaging the last 5
    checkpoints, which were written at 10-minute intervals" (§6.1). The checkpoints must hold
    the same weights with the same shapes and configuration; integer buffers are taken from
    the last one. Optimizer and scheduler states are dropped: they belong to no average.
    """
    if not paths:
        raise ValueError("average_checkpoints needs at least one checkpoint path")
    if len({Path(path).resolve() for path in paths}) < len(paths):
        raise ValueError(f"the same checkpoint appears twice in {[str(p) for p in paths]}: each must count once")
    checkpoints = [load_checkpoint(path, map_location="cpu") for path in paths]
    last = checkpoints[-1]
    for path, checkpoint in zip(paths, checkpoints):
        if checkpoint["config"] != last["config"] or checkpoint["model"].keys() != last["model"].keys():
            raise CheckpointMismatchError(
                f"{path} was saved from another model than {paths[-1]} (configs {checkpoint['config']} and "
                f"{last['config']}); average only checkpoints of one training run"
            )
    steps = [checkpoint["step"] for checkpoint in checkpoints]
    if len(set(steps)) < len(steps):
        raise ValueError(f"checkpoints {[str(p) for p in paths]} hold steps {steps}: two of them are copies of "
                         f"one state, which would count it twice; average distinct checkpoints (--keep-last)")
    averaged = {}
    for name, weight in last["model"].items():
        if weight.is_floating_point():
            averaged[name] = torch.stack([c["model"][name].float() for c in checkpoints]).mean(0).to(weight.dtype)
        else:
            averaged[name] = weight
    extra = {**last["extra"], "averaged": [str(path) for path in paths]}
    return {**last, "model": averaged, "optimizer": None, "scheduler": None, "extra": extra}


def vocabs_from_checkpoint(checkpoint: dict, vocab_class: type | None = None) -> dict:
    """The saved vocabularies, rebuilt with ``vocab_class.from_state_dict`` (``annotated.vocab.Vocab``
    by default); plain dicts when ``vocab_class`` is ``dict``."""
    if vocab_class is None:
        from annotated.vocab import Vocab as vocab_class
    if vocab_class is dict:
        return dict(checkpoint["vocabs"])
    return {name: vocab_class.from_state_dict(state) for name, state in checkpoint["vocabs"].items()}
