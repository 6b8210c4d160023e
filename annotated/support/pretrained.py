"""The German -> English model that ships with the course: ``annotated.load_pretrained()``.

    from annotated import load_pretrained
    model, tokenizer = load_pretrained()
    # then ``translate`` of annotated/translate.py (which imports this module, not the other way):
    # translate(["Zwei Hunde spielen im Schnee."], model, tokenizer)   -> ['two dogs play in the snow.']

The model lives in ``annotated/pretrained/`` and comes with ``pip install``, in the formats the
field ships models in, none of them pickle:

* ``model.safetensors``: the weights (float16, to keep the package small; they are
  loaded as float32), with the preset, seed and step of its training run in the file's metadata;
* ``config.json``: the ``TransformerConfig``, and what ties the other files to it: the SHA-256
  of ``vocab.txt`` and of ``bpe_codes.txt`` (``vocab_sha256``, ``bpe_codes_sha256``) and the
  dtype the weights are stored in (``weights_dtype``);
* ``bpe_codes.txt``: the byte-pair merges, one ``left right`` pair per line after a
  ``#version: 0.2`` header, the format of ``subword-nmt``, which can apply them too;
* ``vocab.txt``: the shared vocabulary, one piece per line in id order;
* ``SHA256SUMS``: the checksums of the four, checked on every load.

``python -m annotated.support.pretrained export CHECKPOINT --out FOLDER`` writes these files from
a checkpoint of ``python -m annotated.train`` (how the shipped model was made:
``benchmarks/RESULTS.md``). The folder is built beside ``FOLDER`` and swapped in whole; a folder
the command did not write is not replaced without ``--force``, and the shipped model only with
``--out annotated/pretrained --force``.

Loading checks the files against ``SHA256SUMS``, and then against each other: a config.json of
known fields that build a valid model, a vocabulary of the size the configuration names, weights
of the shapes that model has and with no NaN, so that a folder assembled from two models (with
checksums computed again) is an error naming the part that disagrees, not a size-mismatch
traceback or translations full of ``<unk>``. A vocabulary or byte-pair codes of another model (even
of the same size, or cut to fewer merges) and weights converted to another dtype (int8) do not match
what config.json records, and are refused with the file they concern. A folder exported before
config.json recorded these (it has none of the three fields) still loads, with a warning that its
parts cannot be checked and the command that records them (export it again); a folder with only some
of them is refused as edited.

A damaged file of the shipped folder is named with the fix that restores it: in a git clone, the
two git commands that write the committed bytes again (``.gitattributes`` keeps git from changing
the line endings of these files, which ``core.autocrlf=true`` does on Windows); else reinstalling.
"""

import argparse
import hashlib
import json
import os
import re
import stat
import struct
import warnings
from pathlib import Path

import torch

from annotated.model import EncoderDecoder, make_model
from annotated.support.checkpoint import (CheckpointError, check_finite, check_vocab_sizes, config_from,
                                          load_checkpoint, model_from_checkpoint, vocabs_from_checkpoint)
from annotated.support.course import course_paths
from annotated.support.errors import UsageError, run_command
from annotated.support.files import build_folder, check_output_folder
from annotated.support.pipes import quiet_on_closed_pipe
from annotated.support.tokenizer import Tokenizer
from annotated.vocab import BOS, EOS, PAD, UNK, Vocab

PRETRAINED_DIR = Path(__file__).resolve().parent.parent / "pretrained"
FILES = ("model.safetensors", "config.json", "bpe_codes.txt", "vocab.txt")
CODES_HEADER = "#version: 0.2"
# config.json's fields besides the TransformerConfig: what ties the folder's files to each other.
HASHED = {"vocab_sha256": ("vocab.txt", "vocabulary"), "bpe_codes_sha256": ("bpe_codes.txt", "byte-pair codes")}
TIES = (*HASHED, "weights_dtype")
STORED_DTYPE = "float16"  # what export writes (loaded as float32)
WEIGHTS_DTYPES = ("float16", "bfloat16", "float32")  # what a weights_dtype may name
# safetensors' names of dtypes (its header) -> torch's
SAFETENSORS_DTYPES = {"F16": "float16", "BF16": "bfloat16", "F32": "float32", "F64": "float64", "I8": "int8",
                      "U8": "uint8", "I16": "int16", "I32": "int32", "I64": "int64", "BOOL": "bool",
                      "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def check_files(folder: Path) -> None:
    """Every file is there and has the checksum recorded in ``SHA256SUMS``."""
    if not folder.is_dir():
        raise CheckpointError(f"{folder} is not a folder of a shipped model; give a folder written by "
                              f"'python -m annotated.support.pretrained export', or a .pt checkpoint")
    missing = [name for name in (*FILES, "SHA256SUMS") if not (folder / name).is_file()]
    if missing:
        raise CheckpointError(f"{folder} lacks {', '.join(missing)}; {restore_advice(folder)}")
    lines = [line.split(maxsplit=1) for line in (folder / "SHA256SUMS").read_bytes().decode("utf-8", "replace")
             .splitlines() if line.strip()]
    if any(len(parts) != 2 for parts in lines):
        raise CheckpointError(f"{folder / 'SHA256SUMS'} is not a list of 'checksum  name' lines; "
                              f"{restore_advice(folder)}")
    recorded = {name.strip(): digest for digest, name in lines}
    for name in FILES:
        data = (folder / name).read_bytes()
        if recorded.get(name) == hashlib.sha256(data).hexdigest():
            continue
        if b"\r\n" in data and recorded.get(name) == hashlib.sha256(data.replace(b"\r\n", b"\n")).hexdigest():
            raise CheckpointError(f"{folder / name} has Windows line endings (CRLF, as git writes text files with "
                                  f"core.autocrlf=true), so it does not match its checksum in SHA256SUMS; "
                                  f"{restore_advice(folder)}")
        raise CheckpointError(f"{folder / name} does not match its checksum in SHA256SUMS: the file is damaged "
                              f"or was changed; {restore_advice(folder)}")


def shell_word(path: Path | str) -> str:
    """``path`` as one word of a command line, in double quotes when it holds a space or a sign a
    shell would read (which Windows' cmd and PowerShell read the same way as bash)."""
    text = str(path)
    return f'"{text}"' if re.search(r"[\s'\"&|;<>()$`^%!*?\[\]{}#~]", text) else text


def course_clone_of(folder: Path) -> Path | None:
    """The git clone of the course whose shipped model ``folder`` is (``<clone>/annotated/pretrained``),
    or None."""
    folder = Path(folder).expanduser().resolve()
    shipped = folder == PRETRAINED_DIR or (folder.name == "pretrained" and folder.parent.name == "annotated"
                                           and (folder.parent / "__init__.py").is_file())
    root = folder.parent.parent
    return root if shipped and (root / ".git").exists() else None


def restore_commands(root: Path) -> list[str]:
    """The git commands that write the shipped model's files of the clone at ``root`` again, byte for
    byte as committed. A plain ``git checkout -- annotated/pretrained`` is not enough: git skips a
    file whose size and time it recorded (one it converted to CRLF on checkout), so the index entries
    are dropped first; ``.gitattributes`` (``-text``) then keeps the bytes from being converted again."""
    where = shell_word(root)
    return [f"git -C {where} rm -r -q -f --cached annotated/pretrained",
            f"git -C {where} checkout HEAD -- annotated/pretrained"]


def restore_advice(folder: Path) -> str:
    """How to get a damaged model folder's files back, as the end of a message: the git commands in a
    clone of the course, else reinstalling (the shipped folder) or exporting again (any other)."""
    folder = Path(folder)
    root = course_clone_of(folder)
    if root is not None:
        first, second = restore_commands(root)
        return f"restore the files as committed: `{first}`, then `{second}`"
    if folder.expanduser().resolve() == PRETRAINED_DIR:
        course = PRETRAINED_DIR.parent.parent
        source = shell_word(course) if (course / "pyproject.toml").is_file() else "COURSE_FOLDER"
        return f"reinstall the course: `pip install --force-reinstall --no-deps {source}`"
    return "export the model again: python -m annotated.support.pretrained export CHECKPOINT --out FOLDER"


def file_kind(path: Path) -> str | None:
    """What ``path`` is when it is neither a regular file nor a folder (a named pipe, a device), in
    words; None for a file, a folder or nothing. Such a path is never opened: reading a named pipe
    waits for a writer, forever."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    for test, kind in ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return kind
    return "not a regular file"


def check_model_path(path: Path) -> None:
    """``path`` names something a model can be loaded from: a folder or a regular file (a checkpoint)."""
    if not path.exists():
        raise CheckpointError(f"no model at {path}; give a .pt checkpoint written by python -m annotated.train, or "
                              f"a folder written by python -m annotated.support.pretrained export")
    kind = file_kind(path)
    if kind:
        raise CheckpointError(f"{path} is {kind}, not a model; give a .pt checkpoint written by python -m "
                              f"annotated.train, or a folder written by python -m annotated.support.pretrained "
                              f"export")


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise CheckpointError(f"{path} is not UTF-8 text (byte {error.start}); export the model again") from None


def read_merges(path: Path) -> list[list[str]]:
    lines = read_text(path).split("\n")
    if not lines or lines[0] != CODES_HEADER:
        raise CheckpointError(f"{path} does not start with {CODES_HEADER!r}: it is not a file of byte-pair codes")
    merges = [line.split(" ") for line in lines[1:] if line]
    bad = next((i for i, pair in enumerate(merges) if len(pair) != 2 or not all(pair)), None)
    if bad is not None:
        raise CheckpointError(f"{path}, merge {bad + 1}: {' '.join(merges[bad])!r} is not two pieces 'left right'")
    return merges


def read_config(path: Path):
    """config.json as a ``TransformerConfig``, or a CheckpointError naming the line or the field."""
    return config_from(read_saved_config(path), str(path))


def read_saved_config(path: Path) -> dict:
    """config.json as saved, without the fields that tie the folder's files together (:data:`TIES`)."""
    saved = read_json(path)
    return {key: value for key, value in saved.items() if key not in TIES} if isinstance(saved, dict) else saved


def read_json(path: Path):
    try:
        return json.loads(read_text(path))
    except json.JSONDecodeError as error:
        raise CheckpointError(f"{path} is not valid JSON (line {error.lineno}, column {error.colno}: {error.msg}); "
                              f"export the model again") from None


def stored_dtypes(path: Path) -> dict[str, str]:
    """Each tensor's dtype in a safetensors file (torch's name: float16, int8), read from its header
    alone, before any weight is loaded."""
    def unreadable(why: str) -> CheckpointError:
        return CheckpointError(f"{path} cannot be read as safetensors ({why}); export the model again")

    with path.open("rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise unreadable("the file is cut before its header")
        size = struct.unpack("<Q", head)[0]
        if size > 100_000_000:
            raise unreadable(f"a header of {size} bytes")
        try:
            header = json.loads(f.read(size))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise unreadable("its header is not JSON") from None
    if not isinstance(header, dict) or not all(isinstance(info, dict) and "dtype" in info
                                               for name, info in header.items() if name != "__metadata__"):
        raise unreadable("its header does not list tensors")
    return {name: SAFETENSORS_DTYPES.get(info["dtype"], str(info["dtype"]))
            for name, info in header.items() if name != "__metadata__"}


def check_ties(folder: Path) -> None:
    """The files of ``folder`` belong together: vocab.txt and bpe_codes.txt have the SHA-256 that
    config.json records, and every weight is stored in its ``weights_dtype``. A folder exported
    before these were recorded (none of the three fields) gets a warning instead, and its weights
    must still be floating point."""
    config_path, weights_path = folder / "config.json", folder / "model.safetensors"
    saved = read_json(config_path)
    ties = {key: saved[key] for key in TIES if key in saved} if isinstance(saved, dict) else {}
    dtypes = stored_dtypes(weights_path)
    if not ties:
        warnings.warn(f"{config_path} records no SHA-256 of vocab.txt and bpe_codes.txt and no weights_dtype "
                      f"(a folder exported before these were recorded), so nothing shows that the folder's "
                      f"files come from one model; export it again from its checkpoint to record them: python -m "
                      f"annotated.support.pretrained export CHECKPOINT --out {folder}", stacklevel=4)
        not_float = {name: d for name, d in dtypes.items() if d not in (*WEIGHTS_DTYPES, "float64")}
        if not_float:
            name, dtype = next(iter(not_float.items()))
            raise CheckpointError(f"{weights_path} stores {len(not_float)} tensor(s) as {dtype} (e.g. {name}), not "
                                  f"as floating-point numbers: the weights were converted (quantized) after export, "
                                  f"and would load as nonsense; use the file export wrote")
        return
    missing = [key for key in TIES if key not in ties]
    if missing:
        raise CheckpointError(f"{config_path} records {', '.join(ties)} but not {', '.join(missing)}: the file was "
                              f"edited; export the model again")
    for key, (name, what) in HASHED.items():
        recorded = ties[key]
        if not isinstance(recorded, str) or not re.fullmatch(r"[0-9a-f]{64}", recorded):
            raise CheckpointError(f"{config_path}: {key} must be the 64 hexadecimal digits of a SHA-256, got "
                                  f"{recorded!r}; export the model again")
        actual = sha256(folder / name)
        if actual != recorded:
            raise CheckpointError(f"{folder / name} is not the {what} this model was trained with: its SHA-256 is "
                                  f"{actual[:12]}..., config.json records {recorded[:12]}... ({key}); the files come "
                                  f"from different models or {name} was edited: use the {name} exported with these "
                                  f"weights, or export the model again")
    dtype = ties["weights_dtype"]
    if dtype not in WEIGHTS_DTYPES:
        raise CheckpointError(f"{config_path}: weights_dtype must be one of {', '.join(WEIGHTS_DTYPES)}, got "
                              f"{dtype!r}; export the model again")
    other = {name: d for name, d in dtypes.items() if d != dtype}
    if other:
        name, found = next(iter(other.items()))
        raise CheckpointError(f"{weights_path} stores {len(other)} tensor(s) as {found} (e.g. {name}), but "
                              f"config.json records weights_dtype {dtype}: the weights were converted after export "
                              f"(quantized?) and would translate nonsense; use the model.safetensors exported with "
                              f"this config.json, or export the model again")


def read_vocab(path: Path) -> Vocab:
    """vocab.txt as a Vocab: one piece per line, no piece twice, the four special tokens present."""
    itos = [line for line in read_text(path).split("\n") if line]
    try:
        vocab = Vocab(itos)
    except ValueError as error:
        raise CheckpointError(f"{path}: {error}") from None
    missing = [token for token in (PAD, UNK, BOS, EOS) if token not in vocab]
    if missing:
        raise CheckpointError(f"{path} lacks the special token(s) {', '.join(missing)}: it is not the vocabulary "
                              f"of a model of this course")
    return vocab


def read_weights(path: Path, model: EncoderDecoder) -> dict[str, torch.Tensor]:
    """The tensors of model.safetensors, once checked to be the weights ``model`` has, with the
    same shapes (a tied matrix is stored once), and finite."""
    from safetensors.torch import load_file

    try:
        weights = load_file(path)
    except Exception as error:  # safetensors' own errors: a damaged header, a cut file
        raise CheckpointError(f"{path} cannot be read as safetensors ({type(error).__name__}: "
                              f"{str(error).splitlines()[0] if str(error) else ''}); export the model again") from None
    expected = model.state_dict(keep_vars=True)
    unexpected = sorted(set(weights) - set(expected))
    missing = sorted(name for name in set(expected) - set(weights) if not tied_to_stored(model, name, weights))
    reshaped = [f"{name} {tuple(w.shape)} (the configuration needs {tuple(expected[name].shape)})"
                for name, w in weights.items() if name in expected and w.shape != expected[name].shape]
    problems = [f"{label} {', '.join(items[:3])}" + (f" and {len(items) - 3} more" if len(items) > 3 else "")
                for label, items in (("shapes that differ:", reshaped), ("missing:", missing),
                                     ("unexpected:", unexpected)) if items]
    if problems:
        raise CheckpointError(f"{path} does not fit config.json; " + "; ".join(problems) +
                              ". The two files come from different models: export the model again")
    check_finite(weights, str(path))
    return weights


def load_folder(folder: Path) -> tuple[EncoderDecoder, Tokenizer]:
    """A model folder in the shipped format, its parts checked against SHA256SUMS and each other."""
    check_files(folder)
    check_ties(folder)
    config = read_config(folder / "config.json")
    vocab = read_vocab(folder / "vocab.txt")
    check_vocab_sizes(config, {"src": len(vocab), "tgt": len(vocab)}, str(folder / "vocab.txt"))
    merges = read_merges(folder / "bpe_codes.txt")
    model = make_model(config)
    model.load_state_dict(read_weights(folder / "model.safetensors", model), strict=False)
    return model.float(), Tokenizer(vocab, vocab, merges)


def tied_to_stored(model: torch.nn.Module, name: str, weights: dict) -> bool:
    """Whether parameter ``name`` is the same tensor as one that was stored (a tied matrix is stored once)."""
    params = model.state_dict(keep_vars=True)
    return any(params[name] is params[other] for other in weights if other in params)


def load_pretrained(path: str | Path | None = None, device: str | torch.device = "cpu"
                    ) -> tuple[EncoderDecoder, Tokenizer]:
    """The shipped model (or the one at ``path``: a folder in the shipped format or a ``.pt``
    checkpoint of ``python -m annotated.train``) in eval mode on ``device``, and its tokenizer."""
    if path is not None and not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a model folder or a .pt checkpoint (a str or Path), got a "
                        f"{type(path).__name__}; leave it out for the shipped model: load_pretrained()")
    device = check_device(device)  # before any work: a one-line error, not a traceback after loading
    path = Path(path) if path is not None else PRETRAINED_DIR
    check_model_path(path)
    if path.is_dir():
        model, tokenizer = load_folder(path)
    else:
        checkpoint = load_checkpoint(path)
        if set(checkpoint.get("vocabs") or {}) != {"src", "tgt"}:
            raise CheckpointError(f"{path} holds no source and target vocabularies: it was not written by "
                                  f"python -m annotated.train, and cannot translate text")
        vocabs = vocabs_from_checkpoint(checkpoint)
        model = model_from_checkpoint(checkpoint)
        check_vocab_sizes(config_from(checkpoint["config"], str(path)),
                          {side: len(vocab) for side, vocab in vocabs.items()}, str(path))
        check_finite(model.state_dict(), str(path))
        tokenizer = Tokenizer(vocabs["src"], vocabs["tgt"], checkpoint["extra"].get("bpe_merges"))
    return model.to(device).eval(), tokenizer


def check_device(device) -> torch.device:
    """``device`` as a torch.device, once checked to be one this PyTorch and this machine can compute
    on; else a UsageError naming it and the fix ('cpu')."""
    if not isinstance(device, (str, torch.device)) or isinstance(device, bool):
        raise TypeError(f"device must be a str such as 'cpu' or 'cuda', or a torch.device, got a "
                        f"{type(device).__name__}: load_pretrained(device='cpu')")
    try:
        found = torch.device(device)
    except (RuntimeError, ValueError):
        raise UsageError(f"device={device!r} is not a device PyTorch knows; use 'cpu', 'cuda' (an NVIDIA GPU) "
                         f"or 'mps' (Apple's GPU)") from None
    if found.type == "cuda":
        if torch.version.cuda is None and getattr(torch.version, "hip", None) is None:
            raise UsageError(f"device={device!r}, but this PyTorch {torch.__version__} is a CPU-only build; use "
                             f"device='cpu', or install a CUDA build of PyTorch (https://pytorch.org/get-started/"
                             f"locally/)")
        if not torch.cuda.is_available():
            raise UsageError(f"device={device!r}, but PyTorch finds no usable NVIDIA GPU (none, or its driver is "
                             f"missing or too old); use device='cpu', or see python -m annotated.doctor --only gpu")
        count = torch.cuda.device_count()
        if found.index is not None and found.index >= count:
            raise UsageError(f"device={device!r}, but this machine has {count} GPU(s): cuda:0 to cuda:{count - 1}; "
                             f"use device='cuda'")
    elif found.type == "mps":
        if not torch.backends.mps.is_available():
            raise UsageError(f"device={device!r} needs Apple's GPU (a Mac with Apple silicon, and a PyTorch built for "
                             f"it), which this machine or PyTorch lacks; use device='cpu'")
    elif found.type == "meta":
        raise UsageError("device='meta' holds no weights, only their shapes, so it cannot translate; use "
                         "device='cpu' or 'cuda'")
    elif found.type != "cpu":
        try:
            torch.zeros(1, device=found)
        except Exception as error:  # xpu, hpu, ...: whatever backend, one line
            raise UsageError(f"device={device!r} cannot be used by this PyTorch ({type(error).__name__}: "
                             f"{str(error).strip().splitlines()[0] if str(error).strip() else ''}); use "
                             f"device='cpu'") from None
    return found


def check_checkpoint_path(checkpoint_path) -> Path:
    """Before any work: export's input is a regular file, not a model folder (one already exported,
    the shipped model's), another folder, a pipe or a device."""
    if not isinstance(checkpoint_path, (str, os.PathLike)):
        raise TypeError(f"checkpoint_path must be the path of a .pt checkpoint (a str or Path), got a "
                        f"{type(checkpoint_path).__name__}")
    path = Path(checkpoint_path)
    fix = "give the .pt checkpoint written by python -m annotated.train"
    if path.is_dir():
        if all((path / name).exists() for name in ("config.json", "model.safetensors")):
            shipped = " (the model shipped with the course)" if path.resolve() == PRETRAINED_DIR else ""
            raise UsageError(f"{checkpoint_path} is a model folder in the shipped format{shipped}, which export "
                             f"writes, not a checkpoint it reads; {fix} (a model folder is copied as it is)")
        raise UsageError(f"{checkpoint_path} is a folder, not a checkpoint; {fix}")
    if not path.exists():
        raise UsageError(f"no checkpoint at {checkpoint_path}; {fix} (its --out)")
    kind = file_kind(path)
    if kind:
        raise UsageError(f"{checkpoint_path} is {kind}, not a checkpoint; {fix}")
    return path


def check_export_folder(checkpoint_path: str | Path, folder: str | Path, force: bool = False) -> Path:
    """Before any work: ``folder`` may receive an export (:func:`annotated.support.files.check_output_folder`),
    and is the shipped model's folder only with ``force``."""
    check_checkpoint_path(checkpoint_path)
    if not isinstance(force, bool):
        raise TypeError(f"force must be True or False, got {force!r}")
    if not isinstance(folder, (str, os.PathLike)):
        raise TypeError(f"folder must be the path of the folder to write (a str or Path), got a "
                        f"{type(folder).__name__}")
    target = Path(folder).expanduser().resolve()
    if target == PRETRAINED_DIR and not force:
        raise UsageError(f"{folder} holds the model shipped with the course, which load_pretrained() and python "
                         f"-m annotated.translate use; replace it only on purpose: --out {folder} --force")
    protected = [p for p in course_paths() if not (force and p.resolve().is_relative_to(PRETRAINED_DIR))]
    return check_output_folder(folder, force, inputs=[checkpoint_path], protected=protected)


def export(checkpoint_path: str | Path, folder: str | Path, force: bool = False) -> Path:
    """Write a checkpoint of ``python -m annotated.train`` (byte-pair, shared vocabulary) in the shipped
    format into ``folder``, built beside it and swapped in whole. A folder that export did not write,
    and the shipped model's (``PRETRAINED_DIR``), are replaced only with ``force``."""
    from safetensors.torch import save

    check_export_folder(checkpoint_path, folder, force)
    checkpoint = load_checkpoint(checkpoint_path)
    merges = checkpoint["extra"].get("bpe_merges")
    vocabs = vocabs_from_checkpoint(checkpoint)
    if merges is None or vocabs["src"].itos != vocabs["tgt"].itos:
        raise CheckpointError(f"{checkpoint_path} is a whole-word model; the shipped format holds a byte-pair "
                              f"model with one shared vocabulary")
    model = model_from_checkpoint(checkpoint)
    stored, seen = {}, set()
    for name, tensor in model.state_dict(keep_vars=True).items():
        if id(tensor) not in seen:  # a tied matrix once
            seen.add(id(tensor))
            stored[name] = tensor.detach().to(getattr(torch, STORED_DTYPE)).contiguous()
    check_finite(stored, f"{checkpoint_path} (in float16)")  # weights beyond float16's range become infinite
    extra = checkpoint["extra"]
    metadata = {"step": str(checkpoint["step"]), "preset": str(extra.get("preset")), "seed": str(extra.get("seed")),
                "source": Path(checkpoint_path).name, "dtype": "float16 (stored) -> float32 (loaded)"}
    texts = {"bpe_codes.txt": "\n".join([CODES_HEADER, *(" ".join(pair) for pair in merges)]) + "\n",
             "vocab.txt": "\n".join(vocabs["src"].itos) + "\n"}
    ties = {key: hashlib.sha256(texts[name].encode("utf-8")).hexdigest() for key, (name, _) in HASHED.items()}
    texts["config.json"] = json.dumps({**checkpoint["config"], **ties, "weights_dtype": STORED_DTYPE}, indent=2) + "\n"
    command = "python -m annotated.support.pretrained export"
    shipped = Path(folder).expanduser().resolve() == PRETRAINED_DIR  # no marker there: it always needs --force
    with build_folder(folder, command, force=force, inputs=[checkpoint_path], marker=not shipped) as tmp:
        (tmp / "model.safetensors").write_bytes(save(stored, metadata=metadata))
        for name, content in texts.items():
            (tmp / name).write_bytes(content.encode("utf-8"))
        (tmp / "SHA256SUMS").write_bytes("".join(f"{sha256(tmp / name)}  {name}\n" for name in FILES).encode())
    return Path(folder)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m annotated.support.pretrained",
                                     description="Write a trained checkpoint in the shipped format.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("export", help="checkpoint -> safetensors weights, config, byte-pair codes, vocabulary")
    p.add_argument("checkpoint")
    p.add_argument("--out", help="folder to write (created, or replaced whole if export wrote it); the shipped "
                                 f"model's, {PRETRAINED_DIR}, only with --force")
    p.add_argument("--force", action="store_true",
                   help="replace --out even if export did not write it, or if it is the shipped model")
    args = parser.parse_args(argv)
    if args.out is None:
        p.error(f"give --out FOLDER for the exported model; to replace the shipped model on purpose: --out "
                f"{PRETRAINED_DIR} --force")

    def body() -> int:
        check_export_folder(args.checkpoint, args.out, args.force)
        print(f"wrote {export(args.checkpoint, args.out, args.force)}")
        return 0

    return run_command(quiet_on_closed_pipe(body), parser.prog)


if __name__ == "__main__":
    raise SystemExit(main())
