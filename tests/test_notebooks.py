"""The course's rules for notebooks: executed in order, and the package is their code."""

import importlib
import inspect
import json
from pathlib import Path

import nbformat
import pytest

from annotated.support.course import NOTEBOOKS, ROOT, SHOWN_IN_PROSE, TAUGHT_EARLIER, TAUGHT_MODULES
from annotated.support.notebooks import code_cells

EXECUTED_FOLDERS = ["notebooks", "solutions"]


def executed_notebooks():
    for folder in EXECUTED_FOLDERS:
        yield from sorted((ROOT / folder).glob("*.ipynb"))


def public_objects(module_name: str):
    """Functions and classes defined (not imported) in the module, not starting with _."""
    module = importlib.import_module(module_name)
    for name, obj in vars(module).items():
        obj = inspect.unwrap(obj)  # see through functools.lru_cache and other wrappers
        if name.startswith("_") or not (inspect.isfunction(obj) or inspect.isclass(obj)):
            continue
        if obj.__module__ == module_name:
            yield name, obj


@pytest.mark.parametrize("path", list(executed_notebooks()), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_code_cell_was_executed_in_order(path):
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    counts = [c.get("execution_count") for c in cells if c["cell_type"] == "code" and "".join(c["source"]).strip()]
    assert counts, f"{path.name} has no code cells"
    assert counts == list(range(1, len(counts) + 1)), (
        f"{path.name}: execution counts {counts} are not 1..{len(counts)}; re-run it top to bottom "
        f"with `python -m annotated.support.notebooks {path.relative_to(ROOT)}`"
    )


@pytest.mark.parametrize("module_name", sorted(TAUGHT_MODULES))
def test_every_public_object_appears_verbatim_in_its_notebook(module_name):
    notebook = NOTEBOOKS / TAUGHT_MODULES[module_name]
    assert notebook.exists(), f"{module_name} is taught in {notebook.name}, which does not exist"
    cells = code_cells(notebook)
    earlier_notebook, earlier_names = TAUGHT_EARLIER.get(module_name, (None, frozenset()))
    earlier_cells = code_cells(NOTEBOOKS / earlier_notebook) if earlier_notebook else []
    in_prose = SHOWN_IN_PROSE.get(module_name, frozenset())
    objects = list(public_objects(module_name))
    assert objects, f"{module_name} defines no public function or class"
    names = {name for name, _ in objects}
    assert earlier_names <= names and in_prose <= names, f"{module_name}: a listed name it does not define"
    for name, obj in objects:
        if name in in_prose:
            continue
        where = earlier_cells if name in earlier_names else cells
        shown = earlier_notebook if name in earlier_names else notebook.name
        source = inspect.getsource(obj).rstrip("\n")
        assert any(source in cell for cell in where), (
            f"{module_name}.{name} differs from its definition in {shown} (or is missing "
            f"there): copy the package's code into the notebook cell, or the cell's into the package"
        )
    assert names - in_prose - earlier_names, f"{module_name}: its notebook shows none of its code"


def test_every_taught_module_is_mapped_to_a_notebook():
    package = ROOT / "annotated"
    modules = {f"annotated.{p.stem}" for p in package.glob("*.py") if p.stem != "__init__"}
    command_lines = {"annotated.doctor", "annotated.train", "annotated.translate"}
    unmapped = modules - set(TAUGHT_MODULES) - command_lines
    assert not unmapped, f"modules with no notebook in annotated.support.course.TAUGHT_MODULES: {sorted(unmapped)}"


def _notebook(tmp_path: Path, *sources: str) -> Path:
    """A small notebook of code cells, saved in tmp_path."""
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    path = tmp_path / "small.ipynb"
    nbformat.write(nb, path)
    return path


def test_a_setting_replaces_the_first_assignment_of_its_name_only():
    import nbformat

    from annotated.support.notebooks import apply_settings

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("SEED = 0"),
                                         nbformat.v4.new_code_cell("x = 1\nSEED = 0  # the run's seed\ny = SEED\nSEED = 2"),
                                         nbformat.v4.new_code_cell("SEED = 5")])
    apply_settings(nb, {"SEED": "1"})
    assert [c.source for c in nb.cells] == ["SEED = 0", "x = 1\nSEED = 1\ny = SEED\nSEED = 2", "SEED = 5"]
    with pytest.raises(ValueError, match="no code cell has a line 'RATE = ...'"):
        apply_settings(nb, {"RATE": "2"})


def test_executing_with_a_setting_writes_a_copy_and_leaves_the_notebook_alone(tmp_path):
    import nbformat

    from annotated.support.notebooks import main

    path = _notebook(tmp_path, "SEED = 0\nprint(SEED * 10)", "assert SEED == 0, 'seed changed'", "print('after')")
    before = path.read_bytes()
    assert main(["--out-dir", str(tmp_path / "out"), "--allow-errors", "--set", "SEED=3", str(path)]) == 0
    assert path.read_bytes() == before
    cells = nbformat.read(tmp_path / "out" / "small.ipynb", as_version=4).cells
    assert cells[0].outputs[0].text == "30\n"
    assert cells[1].outputs[0].output_type == "error" and cells[1].outputs[0].evalue == "seed changed"
    assert cells[2].outputs[0].text == "after\n"  # run on after the failed cell


@pytest.mark.parametrize("args, message", [
    (["--set", "SEED=1"], "need --out-dir"),
    (["--allow-errors"], "need --out-dir"),
    (["--set", "SEED", "--out-dir", "OUT"], "'SEED' is not NAME=VALUE"),
    (["--set", "NOPE=1", "--out-dir", "OUT"], "no code cell has a line 'NOPE = ...'"),
])
def test_settings_and_errors_allowed_only_in_a_copy(tmp_path, capsys, args, message):
    from annotated.support.notebooks import main

    path = _notebook(tmp_path, "SEED = 0")
    args = [str(tmp_path / "out") if a == "OUT" else a for a in args]
    with pytest.raises(SystemExit) as exit_:
        main([*args, str(path)])
    assert exit_.value.code == 2 and message in capsys.readouterr().err


# One sitting (README, "Notebook workflow for contributors"): at most 80 cells, 4,000 words of prose and 700
# lines of code, no code cell over 40 lines, so that a student reads a notebook in one session.
MAX_CELLS, MAX_WORDS, MAX_CODE_LINES = 80, 4_000, 700
MAX_CELL_LINES = 40  # a taught cell is as short as its idea


def sitting_size(path: Path) -> tuple[int, int, list[int]]:
    """Cells, words of markdown prose, and the lines of each code cell (blank lines count: they are read)."""
    nb = nbformat.read(path, as_version=4)
    words = sum(len(cell.source.split()) for cell in nb.cells if cell.cell_type == "markdown")
    lines = [len(cell.source.splitlines()) if cell.cell_type == "code" else 0 for cell in nb.cells]
    return len(nb.cells), words, lines


@pytest.mark.parametrize("path", sorted(NOTEBOOKS.glob("*.ipynb")), ids=lambda p: p.name)
def test_every_notebook_is_one_sitting_long(path):
    cells, words, lines = sitting_size(path)
    assert cells <= MAX_CELLS, f"{path.name}: {cells} cells, more than {MAX_CELLS}"
    assert words <= MAX_WORDS, f"{path.name}: {words} words of prose, more than {MAX_WORDS}"
    assert sum(lines) <= MAX_CODE_LINES, f"{path.name}: {sum(lines)} lines of code, more than {MAX_CODE_LINES}"
    long = [(i, n) for i, n in enumerate(lines) if n > MAX_CELL_LINES]
    assert not long, f"{path.name}: code cells (index, lines) over {MAX_CELL_LINES} lines: {long}"
