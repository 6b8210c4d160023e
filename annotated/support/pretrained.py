"""The German -> English model that ships with the course: ``annotated.load_pretrained()``.

    from annotated import load_pretrained
    from annotated.translate import translate
    model, tokenizer = load_pretrained()
    translate(["Zwei Hunde spielen im Schnee."], model, tokenizer)   # ['two dogs play in the snow.']

The model lives in ``annotated/pretrained/`` and comes with ``pip install``, in the formats the
field ships models in, none of them pickle:

* ``model.safetensors``: the weights (float16, to keep the package small; they are
  loaded as float32), with the preset, seed and step of its training run in the file's metadata;
* ``config.json``: the ``TransformerConfig``;
* ``bpe_codes.txt``: the byte-pair merges, one ``left right`` pair per line after a
  ``#version: 0.2`` header, the format of ``subword-nmt``, which can apply them too;
* ``vocab.txt``: the shared vocabulary, one piece per line in id order;
* ``SHA256SUMS``: the checksums of the four, checked on every load.

``python -m annotated.support.pretrained export CHECKPOINT`` writes these files from a
checkpoint of ``python -m annotated.train`` (how the shipped model was made:
``benchmarks/RESULTS.md``).
"""

import argparse
import hashlib
import json
from pathlib import Path

import torch

from annotated.model import EncoderDecoder, TransformerConfig, make_model
from annotated.support.checkpoint import CheckpointError, load_checkpoint, model_from_checkpoint, vocabs_from_checkpoint
from annotated.support.errors import run_command
from annotated.support.files import atomic_write
from annotated.support.tokenizer import Tokenizer
from annotated.vocab import Vocab

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
    recorded = dict(reversed(line.split(maxsplit=1)) for line in (folder / "SHA256SUMS").read_text().splitlines())
    for name in FILES:
        if recorded.get(name) != sha256(folder / name):
            raise CheckpointError(f"{folder / name} does not match its checksum in SHA256SUMS: the file is damaged "
                                  f"or was changed; reinstall the package or export the model again")


def read_merges(path: Path) -> list[list[str]]:
    lines = path.read_text(encoding="utf-8").split("\n")
    if not lines or lines[0] != CODES_HEADER:
        raise CheckpointError(f"{path} does not start with {CODES_HEADER!r}: it is not a file of byte-pair codes")
    return [line.split(" ") for line in lines[1:] if line]


def load_folder(folder: Path) -> tuple[EncoderDecoder, Tokenizer]:
    from safetensors.torch import load_file

    check_files(folder)
    config = TransformerConfig(**json.loads((folder / "config.json").read_text(encoding="utf-8")))
    vocab = Vocab([line for line in (folder / "vocab.txt").read_text(encoding="utf-8").split("\n") if line])
    model = make_model(config)
    weights = load_file(folder / "model.safetensors")
    missing, unexpected = model.load_state_dict(weights, strict=False)
    tied = {name for name in missing if tied_to_stored(model, name, weights)}
    if unexpected or set(missing) - tied:
        raise CheckpointError(f"{folder / 'model.safetensors'} does not fit config.json: missing "
                              f"{sorted(set(missing) - tied)[:3]}, unexpected {sorted(unexpected)[:3]}")
    return model.float(), Tokenizer(vocab, vocab, read_merges(folder / "bpe_codes.txt"))


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
        vocabs = vocabs_from_checkpoint(checkpoint)
        model = model_from_checkpoint(checkpoint)
        tokenizer = Tokenizer(vocabs["src"], vocabs["tgt"], checkpoint["extra"].get("bpe_merges"))
    return model.to(device).eval(), tokenizer


def export(checkpoint_path: str | Path, folder: str | Path = PRETRAINED_DIR) -> Path:
    """Write a checkpoint of ``python -m annotated.train`` (byte-pair, shared vocabulary) in the shipped format."""
    from safetensors.torch import save

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
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    extra = checkpoint["extra"]
    metadata = {"step": str(checkpoint["step"]), "preset": str(extra.get("preset")), "seed": str(extra.get("seed")),
                "source": Path(checkpoint_path).name, "dtype": "float16 (stored) -> float32 (loaded)"}
    with atomic_write(folder / "model.safetensors") as f:
        f.write(save(stored, metadata=metadata))
    texts = {"config.json": json.dumps(checkpoint["config"], indent=2) + "\n",
             "bpe_codes.txt": "\n".join([CODES_HEADER, *(" ".join(pair) for pair in merges)]) + "\n",
             "vocab.txt": "\n".join(vocabs["src"].itos) + "\n"}
    for name, content in texts.items():
        with atomic_write(folder / name) as f:
            f.write(content.encode("utf-8"))
    with atomic_write(folder / "SHA256SUMS") as f:
        f.write("".join(f"{sha256(folder / name)}  {name}\n" for name in FILES).encode())
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m annotated.support.pretrained",
                                     description="Write a trained checkpoint in the shipped format.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("export", help="checkpoint -> safetensors weights, config, byte-pair codes, vocabulary")
    p.add_argument("checkpoint")
    p.add_argument("--out", default=str(PRETRAINED_DIR), help=f"folder to write (default {PRETRAINED_DIR})")
    args = parser.parse_args(argv)

    def body() -> int:
        print(f"wrote {export(args.checkpoint, args.out)}")
        return 0

    return run_command(body, parser.prog)


if __name__ == "__main__":
    raise SystemExit(main())
