"""Execute notebooks top to bottom in a fresh kernel and read their code cells.

    python -m annotated.support.notebooks notebooks/02_scaled_dot_product_attention.ipynb

runs each notebook given in a new kernel, in the notebook's own folder, and saves it with
its outputs, which is the state ``pytest --nbval`` compares against.
"""

import argparse
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

RAISES = "# NBVAL_RAISES_EXCEPTION"
NBCLIENT_RAISES_TAG = "raises-exception"


def code_cells(path: str | Path) -> list[str]:
    """The source of every code cell of a notebook, in order."""
    nb = nbformat.read(path, as_version=4)
    return [cell.source for cell in nb.cells if cell.cell_type == "code"]


def collapse_streams(nb: nbformat.NotebookNode) -> None:
    """Merge each cell's consecutive stdout/stderr outputs and keep only the final state
    of every carriage-return-redrawn line (a progress bar), as nbval does before comparing."""
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        merged = []
        for out in cell.outputs:
            if out.output_type == "stream" and merged and merged[-1].output_type == "stream" \
                    and merged[-1].name == out.name:
                merged[-1].text += out.text
            else:
                merged.append(out)
        for out in merged:
            if out.output_type == "stream":
                out.text = "\n".join(line.rsplit("\r", 1)[-1] for line in out.text.split("\n"))
        cell.outputs = merged


def execute(path: str | Path, timeout: int = 600) -> float:
    """Run a notebook in a fresh ``python3`` kernel, save it in place; return seconds taken."""
    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    # Cells that show an error on purpose carry nbval's marker comment; let them raise
    # here too, through nbclient's tag, which is removed again so nbval sees one marker.
    expected_errors = [c for c in nb.cells if c.cell_type == "code" and RAISES in c.source]
    for cell in expected_errors:
        cell.metadata.setdefault("tags", []).append(NBCLIENT_RAISES_TAG)
    start = time.perf_counter()
    NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    seconds = time.perf_counter() - start
    for cell in expected_errors:
        cell.metadata["tags"] = [t for t in cell.metadata["tags"] if t != NBCLIENT_RAISES_TAG]
        if not cell.metadata["tags"]:
            del cell.metadata["tags"]
    collapse_streams(nb)
    nbformat.write(nb, path)
    return seconds


def notebook_path(text: str) -> Path:
    """An argparse type: an existing ``.ipynb`` file."""
    path = Path(text)
    if path.suffix != ".ipynb" or not path.is_file():
        raise argparse.ArgumentTypeError(f"{text} is not a notebook file (an existing .ipynb)")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m annotated.support.notebooks",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=notebook_path)
    args = parser.parse_args(argv)
    for path in args.notebooks:
        try:
            seconds = execute(path)
        except CellExecutionError as error:
            # The notebook on disk is left as it was; nbclient's message ends with the cell's error.
            last = str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
            print(f"{path}: a cell failed, the notebook was not saved: {last}", file=sys.stderr)
            return 1
        print(f"{path}: {seconds:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
