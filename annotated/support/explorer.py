"""Notebook 12's interactive view of the heads, for the static site: the shipped model's
attention on a few dozen test sentences, computed once and viewed in the browser.

The notebook's view (``attention_figures.attention_explorer``) needs a running kernel; a page of
the site has none. So the weights of every layer, head and kind are computed here, stored in
``templates/explorer/attention.js`` (``window.ATTENTION = {...}``, so that the page loads it from
disk with no request to a server) and drawn by ``explorer.js``, a small script with no library:

    python -m annotated.support.explorer --out build/explorer   # the page, then open build/explorer/index.html
    python -m annotated.support.explorer --compute              # the stored weights again, after a new model

Each map is stored as bytes, round(255 x weight), in base64: a weight read back is within
0.5 / 255 of the model's. The decoder is teacher-forced on the model's own greedy translation,
as the notebook's ``sentence_attention`` does, so the maps show what it looked at while writing it.

``WidgetToExplorer`` is for the site's page of notebook 12: it puts a link to the explorer where
the notebook's widget would be (a static page shows nothing there).
"""

import argparse
import base64
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from nbconvert.preprocessors import Preprocessor
from traitlets import Unicode

from annotated.support.course import course_paths
from annotated.support.errors import DataError, run_command
from annotated.support.files import build_folder, check_output_folder, copy_file, signals_as_interrupt, write_text

if TYPE_CHECKING:  # torch only where weights are computed or read: the site's build does not import it
    import torch

EXPLORER = Path(__file__).resolve().parent / "templates" / "explorer"
DATA_FILE = EXPLORER / "attention.js"
PAGE_FILES = ("explorer.js", "explorer.css", "attention.js")  # beside the page, index.html
SPLIT = "test_2016_flickr"
N_SENTENCES = 36
WORDS = (6, 16)  # German words (split at spaces) of a sentence shown: long enough to be interesting, short enough to read
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
DATA_PREFIX = "window.ATTENTION = "
# What labels each map's axes; the keys are annotated.heads.KINDS, the titles those of the notebook's figures.
AXES = {"encoder": {"rows": "source", "cols": "source", "row_title": "query (German)", "col_title": "key (German)"},
        "decoder": {"rows": "read", "cols": "read", "row_title": "reads (English)", "col_title": "key (English, read)"},
        "cross": {"rows": "read", "cols": "source", "row_title": "reads (English)", "col_title": "key (German)"}}


def pick_sentences(pairs: list[tuple[str, str]], n: int = N_SENTENCES, words: tuple[int, int] = WORDS) -> list[int]:
    """The indices of the first ``n`` pairs whose German has ``words[0]`` to ``words[1]`` words: a
    rule, not a choice by hand."""
    return [i for i, (de, _) in enumerate(pairs) if words[0] <= len(de.split()) <= words[1]][:n]


def to_bytes(weights: "torch.Tensor") -> str:
    """Weights in [0, 1] as base64 of round(255 x w), one byte each, in row-major order."""
    import torch

    return base64.b64encode((weights * 255).round().clamp(0, 255).to(torch.uint8).numpy().tobytes()).decode("ascii")


def from_bytes(text: str, shape: tuple[int, ...]) -> "torch.Tensor":
    """The inverse of :func:`to_bytes`, up to its rounding: float weights of ``shape``."""
    import torch

    raw = base64.b64decode(text)
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).float().reshape(shape) / 255


def compute(model, tokenizer, pairs: list[tuple[str, str]], indices: list[int]) -> dict:
    """Every layer, head and kind of attention for ``pairs[i]``, i in ``indices``, teacher-forced
    on the model's greedy translations; what ``attention.js`` holds. One padded batch: padding is
    masked, so each sentence's weights are those ``sentence_attention`` gives it alone."""
    import torch

    from annotated.batching import collate
    from annotated.heads import collect_attention
    from annotated.support.attention_figures import KIND_TITLES
    from annotated.support.reordering import own_translations
    from annotated.vocab import BOS, EOS, PAD

    vocab = tokenizer.tgt_vocab  # one vocabulary of pieces for both languages
    start = collate([(tokenizer.encode(pairs[i][0]), [vocab[BOS], vocab[EOS]]) for i in indices], vocab[PAD])
    with torch.no_grad():
        [batch] = own_translations(model.eval(), tokenizer, [start])  # the same sources, teacher-forced on greedy output
        weights = collect_attention(model, batch)  # kind -> (layers, batch, h, L_q, L_k)
    n_layers, _, h = weights["encoder"].shape[:3]
    sentences = []
    for b, i in enumerate(indices):
        n_src = int(batch.src_mask[b, 0].sum())
        n_tgt = int((batch.tgt_y[b] != vocab[PAD]).sum())  # decoder rows: <s> y_1 ... y_n, each predicts the next
        source = vocab.lookup_tokens(batch.src[b, :n_src].tolist())
        read = vocab.lookup_tokens(batch.tgt_in[b, :n_tgt].tolist())
        produced = vocab.lookup_tokens(batch.tgt_y[b, :n_tgt].tolist())
        sizes = {"encoder": (n_src, n_src), "decoder": (n_tgt, n_tgt), "cross": (n_tgt, n_src)}
        sentences.append({"index": i, "german": pairs[i][0], "reference": pairs[i][1],
                          "translation": tokenizer.detokenize(produced[:-1]),
                          "source": source, "read": read, "produced": produced,
                          "weights": {kind: to_bytes(weights[kind][:, b, :, :q, :k])  # (layers, h, L_q, L_k)
                                      for kind, (q, k) in sizes.items()}})
    kinds = {kind: {"title": KIND_TITLES[kind], **AXES[kind]} for kind in AXES}
    return {"split": SPLIT, "layers": n_layers, "heads": h, "kinds": kinds, "sentences": sentences}


def compute_shipped() -> dict:
    """:func:`compute` for the shipped model on the sentences :func:`pick_sentences` picks."""
    from annotated import load_pretrained
    from annotated.data import load_pairs

    model, tokenizer = load_pretrained()
    pairs = load_pairs(SPLIT)
    return compute(model, tokenizer, pairs, pick_sentences(pairs))


def weights_of(data: dict, sentence: dict, kind: str) -> "torch.Tensor":
    """One sentence's stored weights of one kind, as floats: (layers, h, L_q, L_k)."""
    axes = data["kinds"][kind]
    shape = (data["layers"], data["heads"], len(sentence[axes["rows"]]), len(sentence[axes["cols"]]))
    return from_bytes(sentence["weights"][kind], shape)


def write_data(data: dict, path: Path = DATA_FILE) -> None:
    """``data`` as a script that sets ``window.ATTENTION``; one sentence a line, so a new model's
    weights show in ``git diff`` sentence by sentence."""
    head = json.dumps({key: value for key, value in data.items() if key != "sentences"})
    lines = ",\n".join(json.dumps(s) for s in data["sentences"])
    write_text(path, "// The shipped model's attention on Multi30k test sentences, for the site's attention explorer.\n"
                     "// Written by `python -m annotated.support.explorer --compute`; each map: bytes of\n"
                     "// round(255 x weight), base64, in the order (layers, h, L_q, L_k).\n"
                     f'{DATA_PREFIX}{head[:-1]}, "sentences": [\n{lines}\n]}};\n')


def read_data(path: Path = DATA_FILE) -> dict:
    """What :func:`write_data` wrote."""
    text = path.read_text(encoding="utf-8")
    if DATA_PREFIX not in text:
        raise DataError(f"{path} does not set window.ATTENTION; write it again: python -m annotated.support.explorer --compute")
    return json.loads(text.split(DATA_PREFIX, 1)[1].rstrip().removesuffix(";"))


def build(out: Path, links: dict[str, str] | None = None) -> Path:
    """Write the explorer into the folder ``out`` (``index.html`` and the files it loads, all
    side by side) and return the page. ``links``, text -> URL relative to ``out``, are shown at
    the top of the page (on the site: the course and notebook 12)."""
    import html

    out.mkdir(parents=True, exist_ok=True)
    for name in PAGE_FILES:
        copy_file(EXPLORER / name, out / name)
    nav = " · ".join(f'<a href="{html.escape(url)}">{html.escape(text)}</a>' for text, url in (links or {}).items())
    page = (EXPLORER / "explorer.html").read_text(encoding="utf-8").replace("<!-- links -->", nav)
    write_text(out / "index.html", page)
    return out / "index.html"


class WidgetToExplorer(Preprocessor):
    """Replace each output of a Jupyter widget (``application/vnd.jupyter.widget-view+json``),
    which a static page shows as nothing, by a sentence and a link to the explorer; other outputs
    stay as they are.

        exporter.register_preprocessor(WidgetToExplorer("../explorer/index.html"), enabled=True)
    """

    explorer_url = Unicode("../explorer/index.html", help="the explorer's page, relative to the notebook's page").tag(config=True)

    def __init__(self, explorer_url: str | None = None, **kwargs):
        super().__init__(**kwargs)
        if explorer_url is not None:
            self.explorer_url = explorer_url
        self.enabled = True

    def link_output(self):
        from html import escape

        from nbformat.v4 import new_output

        text = (f"The interactive view needs a running notebook. On this page: the same maps for "
                f"{N_SENTENCES} test sentences, pre-computed")
        return new_output("display_data", data={
            "text/html": f'<p class="explorer-link">{escape(text)}, in the '
                         f'<a href="{escape(self.explorer_url)}">attention explorer</a> (works offline).</p>',
            "text/plain": f"{text}: {self.explorer_url}"})

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code":
            cell.outputs = [self.link_output() if WIDGET_MIME in out.get("data", {}) else out for out in cell.outputs]
        return cell, resources


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m annotated.support.explorer",
                                     description="The attention explorer: the shipped model's attention on test "
                                                 "sentences as a page that opens from disk, offline.")
    parser.add_argument("--out", type=Path, help="write the page into this folder (its index.html)")
    parser.add_argument("--force", action="store_true",
                        help="replace --out even if this command did not make it (everything in it is lost)")
    parser.add_argument("--compute", action="store_true",
                        help=f"compute the stored weights again with the shipped model ({DATA_FILE.name}, in the package)")
    args = parser.parse_args(argv)
    if not (args.out or args.compute):
        parser.error("give --out FOLDER, --compute or both")

    def body() -> int:
        if args.out:
            check_output_folder(args.out, args.force, protected=course_paths())  # before the model runs
        if args.compute:
            data = compute_shipped()
            write_data(data)
            print(f"{len(data['sentences'])} sentences in {DATA_FILE} ({DATA_FILE.stat().st_size / 1e6:.2f} MB)")
        if args.out:
            with build_folder(args.out, parser.prog, force=args.force, protected=course_paths()) as tmp:
                page = args.out / build(tmp).name
            print(f"open {page} in a browser (no network needed)")
        return 0

    with signals_as_interrupt():  # SIGTERM and SIGHUP as Ctrl-C: no temporary folder or file left behind
        return run_command(body, parser.prog)


if __name__ == "__main__":
    sys.exit(main())
