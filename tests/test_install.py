"""The two install routes, pip (pyproject.toml) and conda (environment.yml), agree; the suite runs on every core."""

import functools
import importlib.util
import os
import re
import subprocess
import sys
import types

import pytest

from annotated.support.course import ROOT


try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")


def pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def environment_pip_requirements() -> list[str]:
    """The entries under `- pip:` in environment.yml (a flat list; no YAML library needed)."""
    lines = (ROOT / "environment.yml").read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "- pip:")
    entries = []
    for line in lines[start + 1:]:
        match = re.match(r"^\s{4,}-\s+(.+?)\s*$", line)
        if not match:
            break
        entries.append(match.group(1))
    return entries


def test_environment_yml_installs_exactly_the_pyproject_dependencies_and_the_package():
    project = pyproject()["project"]
    wanted = sorted(project["dependencies"] + project["optional-dependencies"]["test"])
    entries = environment_pip_requirements()
    assert "-e ." in entries, "environment.yml must install the package itself with `-e .`"
    assert sorted(e for e in entries if e != "-e .") == wanted, (
        "environment.yml and pyproject.toml list different requirements; make them the same"
    )


def test_environment_yml_python_matches_requires_python():
    requires = pyproject()["project"]["requires-python"]
    text = (ROOT / "environment.yml").read_text(encoding="utf-8")
    assert f"python{requires}" in text.replace(" ", ""), f"environment.yml should pin python{requires}"


def test_torchtext_is_not_a_dependency():
    project = pyproject()["project"]
    everything = project["dependencies"] + sum(project["optional-dependencies"].values(), [])
    assert not any(r.lower().startswith("torchtext") for r in everything)


@functools.cache
def root_conftest():
    """The checkout's conftest.py, which sets the workers' share of the cores (loaded by path: the
    name ``conftest`` is also tests/conftest.py)."""
    spec = importlib.util.spec_from_file_location("root_conftest", ROOT / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_suite_runs_on_every_core_with_a_notebook_whole_on_one_worker():
    options = pyproject()["tool"]["pytest"]["ini_options"]
    addopts = options["addopts"].split()
    assert addopts[:5] == ["-n", "auto", "--maxprocesses", "4", "--dist"] and addopts[5] == "loadscope", addopts
    assert options["testpaths"][0] == "notebooks", "the longest runs (the notebooks) start first"


@pytest.mark.skipif("PYTEST_XDIST_WORKER_COUNT" not in os.environ, reason="runs under pytest-xdist (pytest -n)")
def test_each_worker_and_the_kernels_it_starts_get_their_share_of_the_cores():
    import torch

    share = max(1, root_conftest().CORES // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    expected = int(os.environ.get("OMP_NUM_THREADS", share))  # a count the user set is kept
    assert torch.get_num_threads() == expected, ("this worker's torch does not use its share of the cores "
                                                 "(conftest.py sets it before torch is imported)")
    child = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
                           capture_output=True, text=True, check=True)
    assert int(child.stdout) == expected


def test_a_notebook_named_alone_gets_one_worker_and_every_core():
    def workers(*args):
        return root_conftest().pytest_xdist_auto_num_workers(types.SimpleNamespace(args=[str(ROOT / a) for a in args]))

    assert workers("notebooks/08_training.ipynb") == 1
    assert workers("notebooks/08_training.ipynb::Cell 3", "notebooks/08_training.ipynb") == 1
    assert workers("notebooks/08_training.ipynb", "tests/test_install.py") == min(2, root_conftest().CORES)
    assert workers("notebooks") is None and workers() is None  # folders, or none named: one worker per core
