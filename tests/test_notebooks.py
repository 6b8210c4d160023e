"""The course's rules for notebooks: executed in order, and the package is their code."""

import importlib
import inspect
import json
from pathlib import Path

import pytest

from annotated.support.course import NOTEBOOKS, ROOT, TAUGHT_MODULES
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
    objects = list(public_objects(module_name))
    assert objects, f"{module_name} defines no public function or class"
    for name, obj in objects:
        source = inspect.getsource(obj).rstrip("\n")
        assert any(source in cell for cell in cells), (
            f"{module_name}.{name} differs from its definition in {notebook.name} (or is missing "
            f"there): copy the package's code into the notebook cell, or the cell's into the package"
        )


def test_every_taught_module_is_mapped_to_a_notebook():
    package = ROOT / "annotated"
    modules = {f"annotated.{p.stem}" for p in package.glob("*.py") if p.stem != "__init__"}
    command_lines = {"annotated.doctor", "annotated.train", "annotated.translate"}
    unmapped = modules - set(TAUGHT_MODULES) - command_lines
    assert not unmapped, f"modules with no notebook in annotated.support.course.TAUGHT_MODULES: {sorted(unmapped)}"
