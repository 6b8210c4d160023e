"""benchmarks/code_paths.py: which cells' outputs differ between math code paths."""

import importlib.util
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("code_paths", ROOT / "benchmarks" / "code_paths.py")
code_paths = importlib.util.module_from_spec(spec)
spec.loader.exec_module(code_paths)


def _executed(path: Path, outputs: list[list]) -> Path:
    cells = []
    for source, outs in outputs:
        cell = nbformat.v4.new_code_cell(source)
        cell.outputs = outs
        cells.append(cell)
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nbformat.v4.new_notebook(cells=cells), path)
    return path


def _stream(text: str):
    return nbformat.v4.new_output("stream", name="stdout", text=text)


def _error(name: str, value: str):
    return nbformat.v4.new_output("error", ename=name, evalue=value, traceback=[])


def test_only_compared_cells_that_differ_or_fail_count(tmp_path, capsys):
    stored = _executed(tmp_path / "notebooks" / "n.ipynb", [
        ("print(gap)", [_stream("difference 0.0e+00\n")]),
        ("# NBVAL_IGNORE_OUTPUT\nprint(bleu)", [_stream("BLEU 31.57\n")]),
        ("print('same')", [_stream("same\n")]),
        ("# NBVAL_RAISES_EXCEPTION\nf()", [_error("ValueError", "bad")]),
        ("assert x", [_stream("")]),
        ("print(rate)", [_stream("12.5it/s\n")]),
    ])
    _executed(tmp_path / "out" / "sse4_2" / "notebooks" / "n.ipynb", [
        ("print(gap)", [_stream("difference 2.4e-07\n")]),
        ("# NBVAL_IGNORE_OUTPUT\nprint(bleu)", [_stream("BLEU 31.20\n")]),
        ("print('same')", [_stream("same\n")]),
        ("# NBVAL_RAISES_EXCEPTION\nf()", [_error("ValueError", "bad")]),
        ("assert x", [_error("AssertionError", "")]),
        ("print(rate)", [_stream("99.1it/s\n")]),  # sanitized as nbval does
    ])
    failures = code_paths.report(["stored", "sse4_2"], [stored], tmp_path / "out", [])
    shown = capsys.readouterr().out
    assert failures == 2  # the noise in cell 0 and the failed assertion in cell 4
    assert "cell 0 (compared)" in shown and "+difference 2.4e-07" in shown
    assert "cell 1 (ignored)" in shown and "+BLEU 31.20" in shown
    assert "cell 4 (compared): error on sse4_2" in shown
    assert "cell 2" not in shown and "cell 3" not in shown and "cell 5" not in shown
