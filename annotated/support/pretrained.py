"""The German -> English model that ships with the course: ``annotated.load_pretrained()``.

    from annotated import load_pretrained
    model, tokenizer = load_pretrained()
    # then ``translate`` of annotated/translate.py (which imports this module, not the other way):
    # translate(["Zwei Hunde spielen im Schnee."], model, tokenizer)   -> ['two dogs play in the snow.']

The model lives in ``annotated/pretrained/`` and comes with ``pip install``, in the formats the
field ships models in, none of them pickle:

* ``model.safetensors``: the weights (float16, to keep the package small; they are
  loaded as float32), with the preset, seed and step of its training run in the file's metadata;
* ``config.json``: the ``TransformerConfig``;
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
traceback or translations full of ``<unk>``.
"""

import argparse
import hashlib
import json
from pathlib import Path

import torch

from annotated.model import EncoderDecoder, make_model
from annotated.support.checkpoint import (CheckpointError, check_finite, check_vocab_sizes, config_from,
                                          load_checkpoint, model_from_checkpoint, vocabs_from_checkpoint)
from annotated.support.course import course_paths
from annotated.support.errors import UsageError, run_command
from annotated.support.files import build_folder, check_output_folder
from annotated.support.tokenizer import Tokenizer
from annotated.vocab import BOS, EOS, PAD, UNK, Vocab

PRETRAINED_DIR = Path(__file__).resolve().parent.parent / "pretrained"
FILES = ("model.safetensors", "config.json", "bpe_codes.txt", "vocab.txt")
CODES_HEADER = "#version: 0.2"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def check_files(folder: Path) -> None:
    """Every file is there and has the checksum recorded in ``SHA256SUMS``."""
    if not folder.is_dir():
        raise CheckpointError(f"{folder} is not a folder of a shipped model; give a folder written by "
                              f"'python -m annotated.support.pretrained export', or a .pt checkpoint")
    missing = [name for name in (*FILES, "SHA256SUMS") if not (folder / name).is_file()]
    if missing:
        raise CheckpointError(f"{folder} lacks {', '.join(missing)}; reinstall the package "
                              f"(pip install -e .) or export the model again")
    lines = [line.split(maxsplit=1) for line in (folder / "SHA256SUMS").read_bytes().decode("utf-8", "replace")
             .splitlines() if line.strip()]
    if any(len(parts) != 2 for parts in lines):
        raise CheckpointError(f"{folder / 'SHA256SUMS'} is not a list of 'checksum  name' lines; reinstall the "
                              f"package or export the model again")
    recorded = {name.strip(): digest for digest, name in lines}
    for name in FILES:
        if recorded.get(name) != sha256(folder / name):
            raise CheckpointError(f"{folder / name} does not match its checksum in SHA256SUMS: the file is damaged "
                                  f"or was changed; reinstall the package or export the model again")


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
    try:
        saved = json.loads(read_text(path))
    except json.JSONDecodeError as error:
        raise CheckpointError(f"{path} is not valid JSON (line {error.lineno}, column {error.colno}: {error.msg}); "
                              f"export the model again") from None
    return config_from(saved, str(path))


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
    path = Path(path) if path is not None else PRETRAINED_DIR
    if not path.exists():
        raise CheckpointError(f"no model at {path}; give a .pt checkpoint written by python -m annotated.train, or "
                              f"a folder written by python -m annotated.support.pretrained export")
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


def check_export_folder(checkpoint_path: str | Path, folder: str | Path, force: bool = False) -> Path:
    """Before any work: ``folder`` may receive an export (:func:`annotated.support.files.check_output_folder`),
    and is the shipped model's folder only with ``force``."""
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
            stored[name] = tensor.detach().to(torch.float16).contiguous()
    check_finite(stored, f"{checkpoint_path} (in float16)")  # weights beyond float16's range become infinite
    extra = checkpoint["extra"]
    metadata = {"step": str(checkpoint["step"]), "preset": str(extra.get("preset")), "seed": str(extra.get("seed")),
                "source": Path(checkpoint_path).name, "dtype": "float16 (stored) -> float32 (loaded)"}
    texts = {"config.json": json.dumps(checkpoint["config"], indent=2) + "\n",
             "bpe_codes.txt": "\n".join([CODES_HEADER, *(" ".join(pair) for pair in merges)]) + "\n",
             "vocab.txt": "\n".join(vocabs["src"].itos) + "\n"}
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

    return run_command(body, parser.prog)


if __name__ == "__main__":
    raise SystemExit(main())
