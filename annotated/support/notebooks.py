"""Execute notebooks top to bottom in a fresh kernel and read their code cells.

    python -m annotated.support.notebooks notebooks/02_scaled_dot_product_attention.ipynb

runs each notebook given in a new kernel, in the notebook's own folder, and saves it with
its outputs, which is the state ``pytest --nbval`` compares against.
"""

import argparse
import re
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from annotated.support.errors import DISK_ERRORS, FILE_ERRORS, CourseError, os_error_message
from annotated.support.files import check_output_file, refuse_link, signals_as_interrupt, write_notebook
from annotated.support.options import positive_int

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


def apply_settings(nb: nbformat.NotebookNode, settings: dict[str, str]) -> None:
    """Replace, for each ``name: value``, the first line ``name = ...`` of a code cell by
    ``name = value`` (another seed, say); a name no cell assigns is a ValueError."""
    for name, value in settings.items():
        line = re.compile(rf"^{re.escape(name)} = .*$", re.MULTILINE)
        cell = next((c for c in nb.cells if c.cell_type == "code" and line.search(c.source)), None)
        if cell is None:
            raise ValueError(f"no code cell has a line '{name} = ...' to set")
        cell.source = line.sub(lambda _: f"{name} = {value}", cell.source, count=1)


def execute(path: str | Path, timeout: int = 600, out: str | Path | None = None,
            allow_errors: bool = False, settings: dict[str, str] | None = None) -> float:
    """Run a notebook in a fresh ``python3`` kernel, save it in place (or as ``out``); return
    seconds taken. With ``allow_errors`` every cell runs and a failed one keeps its error as
    its output, instead of stopping the run; ``settings`` change assignments first
    (``apply_settings``)."""
    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    apply_settings(nb, settings or {})
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    # Cells that show an error on purpose carry nbval's marker comment; let them raise
    # here too, through nbclient's tag, which is removed again so nbval sees one marker.
    expected_errors = [c for c in nb.cells if c.cell_type == "code" and RAISES in c.source]
    for cell in expected_errors:
        cell.metadata.setdefault("tags", []).append(NBCLIENT_RAISES_TAG)
    start = time.perf_counter()
    NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=allow_errors,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    seconds = time.perf_counter() - start
    for cell in expected_errors:
        cell.metadata["tags"] = [t for t in cell.metadata["tags"] if t != NBCLIENT_RAISES_TAG]
        if not cell.metadata["tags"]:
            del cell.metadata["tags"]
    collapse_streams(nb)
    write_notebook(nb, out or path, option="--out-dir" if out else "notebook")  # whole, or the file as it was
    return seconds


def notebook_path(text: str) -> Path:
    """An argparse type: an existing ``.ipynb`` file."""
    path = Path(text)
    if path.suffix != ".ipynb" or not path.is_file():
        raise argparse.ArgumentTypeError(f"{text} is not a notebook file (an existing .ipynb)")
    return path


def setting(text: str) -> tuple[str, str]:
    """An argparse type: ``NAME=VALUE`` with NAME a Python name."""
    name, sep, value = text.partition("=")
    if not sep or not name.isidentifier() or not value:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=VALUE (for example SEED=1)")
    return name, value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m annotated.support.notebooks",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=notebook_path)
    parser.add_argument("--out-dir", type=Path,
                        help="save the executed notebooks here, each under its own name, leaving the originals alone")
    parser.add_argument("--timeout", type=positive_int, default=600,  # -5 meant no limit at all
                        help="seconds one cell may take (default 600)")
    parser.add_argument("--allow-errors", action="store_true",
                        help="run every cell even after one fails, keeping its error (only with --out-dir)")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", type=setting,
                        help="run with the line 'NAME = ...' replaced by 'NAME = VALUE' (only with --out-dir)")
    args = parser.parse_args(argv)
    if args.out_dir is not None:
        if args.out_dir.exists() and not args.out_dir.is_dir():
            parser.error(f"--out-dir {args.out_dir} is a file, not a folder")
    elif args.allow_errors or args.set:
        parser.error("--allow-errors and --set need --out-dir: the notebook saved in place must be the one committed, "
                     "run as it is")
    # Every output checked before the first notebook runs: --out-dir never replaces an original (one of the
    # notebooks given, or a committed notebook of the course), and never writes through a link.
    outs: dict[Path, Path] = {}
    for path in args.notebooks:
        out = args.out_dir / path.name if args.out_dir is not None else None
        try:
            if out is None:
                refuse_link(path, "notebook")
            else:
                check_output_file(out, inputs=args.notebooks, option="the executed copy", force_option=None)
        except CourseError as error:
            if out is None:
                parser.error(str(error))
            parser.error(f"--out-dir {args.out_dir}: {error}; --out-dir keeps the originals, so name another "
                         f"folder (or leave --out-dir out to run {path} in place, as committed)")
        if out is not None and out in outs:
            parser.error(f"{outs[out]} and {path} would both be saved as {out}; run them with different --out-dir")
        outs[out or path] = path
    if args.out_dir is not None:
        args.out_dir.mkdir(parents=True, exist_ok=True)
    with signals_as_interrupt():  # SIGTERM and SIGHUP stop the run as Ctrl-C does; nothing half written
        for path in args.notebooks:
            try:
                seconds = execute(path, args.timeout, args.out_dir / path.name if args.out_dir else None,
                                  args.allow_errors, dict(args.set))
            except ValueError as error:
                parser.error(f"{path}: {error}")
            except CellExecutionError as error:
                # The notebook on disk is left as it was; nbclient's message ends with the cell's error.
                last = str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
                print(f"{path}: a cell failed, the notebook was not saved: {last}", file=sys.stderr)
                return 1
            except KeyboardInterrupt:
                print(f"{parser.prog}: interrupted; {path} was not saved", file=sys.stderr)
                return 130
            except OSError as error:
                if not isinstance(error, FILE_ERRORS) and error.errno not in DISK_ERRORS:
                    raise
                print(f"{parser.prog}: error: {os_error_message(error)}; {path} was not saved", file=sys.stderr)
                return 1
            print(f"{path}: {seconds:.1f} s")
    return 0



if __name__ == "__main__":
    sys.exit(main())
