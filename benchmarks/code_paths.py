"""Which outputs of the notebooks depend on the processor's math code path, and by how much.

    python benchmarks/code_paths.py notebooks/08_training.ipynb notebooks/14_positions.ipynb \
        [--paths stored sse4_2 avx2] [--out runs/code_paths]

PyTorch's CPU build picks MKL's, oneDNN's and its own (ATen) kernels by processor, and each
adds floating-point numbers in another order. Two environment variables choose another
processor's path on this one: ``MKL_ENABLE_INSTRUCTIONS`` caps MKL's instruction set and
``ATEN_CPU_CAPABILITY`` ATen's. Each notebook is executed once per path, in a fresh kernel
started with that path's variables (every cell runs, even after a failure), and saved under
``--out/<path>/<folder>/`` ("stored" is the committed notebook itself, the outputs nbval
compares against); then every code cell's output is compared across the paths as
``pytest --nbval`` compares it (streams merged, the sanitize file's rules applied). The
report lists each cell whose output differs: ``compared`` (nbval checks it: a failure on a
student's processor) or ``ignored`` (``# NBVAL_IGNORE_OUTPUT``: the figures of a training
run, to be read against the assertions that follow). It exits 1 when a compared cell differs
or a cell fails on some path. The figures in ``benchmarks/RESULTS.md`` ("Code paths") come
from this report.
"""

import argparse
import difflib
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
PATHS = {  # name -> the environment that selects it; "stored" is the committed notebook, not run again
    "stored": None,
    "default": {},
    "sse4_2": {"MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "ATEN_CPU_CAPABILITY": "default"},
    "avx2": {"MKL_ENABLE_INSTRUCTIONS": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"},
}
IGNORE, RAISES = "NBVAL_IGNORE_OUTPUT", "NBVAL_RAISES_EXCEPTION"
MAX_LINES = 12  # of one cell's differences per path


def positive_int(text: str) -> int:
    """--timeout: seconds, at least 1 (a negative one was passed on to every cell)."""
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return int(text)


def sanitizers(path: Path = ROOT / ".nbval-sanitize.cfg") -> list[tuple[re.Pattern, str]]:
    """The (regex, replacement) pairs of nbval's sanitize file."""
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    regexes = [line[len("regex:"):].strip() for line in lines if line.startswith("regex:")]
    replaces = [line[len("replace:"):].strip() for line in lines if line.startswith("replace:")]
    return [(re.compile(r), s) for r, s in zip(regexes, replaces, strict=True)]


def cell_texts(path: Path, rules: list[tuple[re.Pattern, str]]) -> list[tuple[int, bool, str, bool]]:
    """(cell index, ignored by nbval, output as nbval compares it, failed) for every code cell;
    a cell fails when it raises and is not marked to raise."""
    nb = nbformat.read(path, as_version=4)
    found = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        streams, rest = {"stdout": "", "stderr": ""}, []
        for out in cell.outputs:
            if out.output_type == "stream":
                streams[out.name] += out.text
            elif out.output_type == "error":
                rest.append(f"{out.ename}: {out.evalue}")
            else:
                rest += [out.data[k] for k in ("text/plain", "text/html", "text/latex") if k in out.get("data", {})]
        text = "\n".join([v for v in streams.values() if v] + rest)
        text = "\n".join(line.rsplit("\r", 1)[-1] for line in text.split("\n"))
        for regex, replacement in rules:
            text = regex.sub(replacement, text)
        failed = any(out.output_type == "error" for out in cell.outputs) and RAISES not in cell.source
        found.append((index, IGNORE in cell.source, text, failed))
    return found


def executed(name: str, nb: Path, out: Path, settings: list[str]) -> Path:
    """Where path ``name``'s copy of ``nb`` is: the notebook itself for "stored"."""
    return nb if PATHS[name] is None else out / ",".join([name, *settings]) / nb.parent.name / nb.name


def run_path(name: str, notebooks: list[Path], out: Path, timeout: int, settings: list[str]) -> None:
    """Execute ``notebooks`` under path ``name`` with ``settings`` (NAME=VALUE), saving them below ``out``."""
    if PATHS[name] is None:
        return
    env = {**os.environ, **PATHS[name]}
    for nb in notebooks:
        folder = executed(name, nb, out, settings).parent
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "annotated.support.notebooks", "--allow-errors", "--timeout",
                        str(timeout), "--out-dir", str(folder), *(f"--set={s}" for s in settings), str(nb)],
                       env=env, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        print(f"{name:>8}: {nb.parent.name}/{nb.name} in {time.perf_counter() - start:.0f} s", flush=True)


def report(paths: list[str], notebooks: list[Path], out: Path, settings: list[str]) -> int:
    """Print every cell whose output differs between paths; the number of compared cells that do."""
    rules, failures = sanitizers(), 0
    for nb in notebooks:
        runs = {name: cell_texts(executed(name, nb, out, settings), rules) for name in paths}
        first = paths[0]
        for position, (index, ignored, text, _) in enumerate(runs[first]):
            others = {name: runs[name][position][2] for name in paths[1:]}
            errors = [name for name in paths if runs[name][position][3]]
            if all(t == text for t in others.values()) and not errors:
                continue
            kind = "ignored" if ignored else "compared"
            failures += kind == "compared" or bool(errors)
            print(f"\n{nb.parent.name}/{nb.name} cell {index} ({kind}){': error on ' + ', '.join(errors) if errors else ''}")
            for name, other in others.items():
                lines = [line for line in difflib.unified_diff(text.splitlines(), other.splitlines(), lineterm="", n=0)
                         if not line.startswith(("---", "+++", "@@"))]
                for line in lines[:MAX_LINES]:
                    print(f"    {name}: {line}")
                if len(lines) > MAX_LINES:
                    print(f"    {name}: ... {len(lines) - MAX_LINES} more lines differ")
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--paths", nargs="+", choices=sorted(PATHS), default=list(PATHS),
                        help="code paths to compare, the first the reference (default: stored default sse4_2 avx2)")
    parser.add_argument("--out", type=Path, default=Path("runs/code_paths"), help="where the executed copies go")
    parser.add_argument("--timeout", type=positive_int, default=1800, help="seconds one cell may take")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="run with the line 'NAME = ...' replaced, e.g. SEED=1 (not with the stored path)")
    parser.add_argument("--report-only", action="store_true", help="compare copies already executed under --out")
    args = parser.parse_args(argv)
    notebooks = [p.resolve() for p in args.notebooks]
    for p in notebooks:
        if p.suffix != ".ipynb" or not p.is_file():
            parser.error(f"{p} is not a notebook file (an existing .ipynb)")
    if len(args.paths) < 2:
        parser.error("give at least two --paths to compare")
    if args.set and "stored" in args.paths:
        parser.error("--set changes the notebook: compare it across executed paths, not with the stored outputs")
    if args.out.exists() and not args.out.is_dir():
        parser.error(f"--out {args.out} is a file; name a folder for the executed copies, e.g. --out runs/code_paths")
    if args.report_only:  # the copies compared must be there (was a FileNotFoundError traceback)
        missing = [copy for nb in notebooks for name in args.paths
                   if not (copy := executed(name, nb, args.out.resolve(), args.set)).is_file()]
        if missing:
            parser.error(f"--report-only compares copies executed earlier, and {missing[0]} is not there; "
                         f"run once without --report-only (same --out, --paths and --set)")
    if not args.report_only:
        for name in args.paths:
            run_path(name, notebooks, args.out.resolve(), args.timeout, args.set)
    failures = report(args.paths, notebooks, args.out.resolve(), args.set)
    print(f"\n{failures} compared cell(s) differ or fail on some path" if failures else
          "\nevery compared cell has the same output on every path")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
