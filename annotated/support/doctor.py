"""The environment doctor behind ``python -m annotated.doctor``: can this machine run the course?

Each check is one small function returning a :class:`Result` (what was checked, whether it
passed, what was found, and for a failure the command or step that fixes it). The checks:

* Python against the ``requires-python`` of the installed ``annotated`` distribution;
* every dependency the distribution declares (and those of its ``test`` extra): installed,
  new enough, and importable (a package can be installed and still broken, or hidden by a
  file or folder of the same name);
* spaCy's rule-based German and English tokenizers, on a sentence each;
* the Multi30k files, where ``annotated.data`` will look for them: the folder named by
  ``ANNOTATED_DATA_DIR``, else the download cache, else the download address;
* the shipped model in ``annotated/pretrained/`` against its ``SHA256SUMS``;
* a GPU (CUDA or Apple's MPS) if torch sees one: a small matrix product on it;
* the Jupyter kernel the notebooks ask for, and that its Python imports the course;
  and that the ``jupyter`` command on the PATH belongs to this environment;
* write access to the cache folder.

The checks reuse the course's own code where it exists (the checksums and verification of
``annotated.support.download``, ``check_files`` of ``annotated.support.pretrained``, the
tokenizer of ``annotated.data``), so the doctor and the course cannot disagree about what
is right.
"""

import argparse
import importlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import urllib.error
import urllib.request
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TextIO

from annotated.support.course import NOTEBOOKS, ROOT
from annotated.support.download import (BASE_URL, DOWNLOAD_COMMAND, ENV_VAR, MULTI30K_FILES, ChecksumError,
                                        default_cache_dir, verify_file)
from annotated.support.errors import run_command
from annotated.support.files import nearest_existing
from annotated.support.pipes import quiet_on_closed_pipe

PROG = "python -m annotated.doctor"
DISTRIBUTION = "annotated"
DEFAULT_KERNEL = "python3"  # what annotated.support.notebooks writes into every notebook
HEAD_TIMEOUT_S = 5.0
KERNEL_TIMEOUT_S = 120.0  # the kernel's Python imports torch: seconds on a busy laptop

# One sentence per language, and the tokens annotated.data's tokenizer gives: an abbreviation
# kept whole in German, clitics split off in English, as the shipped model's vocabulary expects.
TOKENIZER_SAMPLES: dict[str, tuple[str, list[str]]] = {
    "de": ("Zwei Männer stehen z.B. am Herd, nicht im Café.",
           ["zwei", "männer", "stehen", "z.b.", "am", "herd", ",", "nicht", "im", "café", "."]),
    "en": ("A man's dog doesn't swim, e.g. in the U.S.",
           ["a", "man", "'s", "dog", "does", "n't", "swim", ",", "e.g.", "in", "the", "u.s."]),
}

# Distributions with nothing of their own to import: what to import instead to know they work.
IMPORT_NAMES: dict[str, tuple[str, ...]] = {
    "jupyter": ("jupyterlab", "notebook", "ipykernel"),  # `jupyter lab`, `jupyter notebook`, the kernel
}


@dataclass(frozen=True)
class Result:
    """One line of the report: ``OK   name: detail``, or ``FAIL name: detail`` and the fix."""

    name: str
    ok: bool
    detail: str
    fix: str = ""

    def lines(self) -> list[str]:
        head = f"{'OK' if self.ok else 'FAIL':<4} {self.name}: {self.detail}"
        return [head] if self.ok else [head, f"     fix: {self.fix}"]


def passed(name: str, detail: str) -> Result:
    return Result(name, True, detail)


def failed(name: str, detail: str, fix: str) -> Result:
    return Result(name, False, detail, fix)


# --- versions and requirements ------------------------------------------------------------

@dataclass(frozen=True)
class Needed:
    """A dependency of the course as declared by the distribution: ``tqdm>=4.66``."""

    text: str  # the requirement without its marker, as pip takes it
    name: str
    specifier: str  # ">=4.66", or "" for any version
    for_tests: bool  # from the "test" extra

    @property
    def label(self) -> str:
        """The name of its line in the report."""
        return self.name + (" (for the tests)" if self.for_tests else "")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


@lru_cache(maxsize=None)
def _packaging_error() -> str:
    """Why ``packaging`` cannot be imported ("" when it can). spaCy, matplotlib and ipykernel
    depend on it, so it is there whenever they are; without it versions go uncompared."""
    try:
        for module in ("packaging.requirements", "packaging.specifiers"):
            importlib.import_module(module)
    except ImportError as err:
        return f"{type(err).__name__}: {err}"
    return ""


def satisfies(version: str, specifier: str) -> bool | None:
    """Whether ``version`` meets ``specifier`` (">=3.10"); None when ``packaging`` is missing."""
    if _packaging_error():
        return None
    from packaging.specifiers import SpecifierSet

    # prereleases=True: a nightly torch 2.6.0.dev is newer than 2.4 and should pass.
    return SpecifierSet(specifier).contains(version, prereleases=True)


def parse_requirement(text: str) -> Needed | None:
    """The requirement ``text`` from the distribution's metadata, or None when it does not
    apply here (another extra than "test", or a marker for another platform)."""
    if not _packaging_error():
        from packaging.requirements import Requirement

        req = Requirement(text)
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            for_tests = False
        elif req.marker.evaluate({"extra": "test"}):
            for_tests = True
        else:
            return None
        return Needed(f"{req.name}{req.specifier}", req.name, str(req.specifier), for_tests)
    # Without packaging: the name and specifier by hand, enough to say what is installed.
    bare, _, marker = text.partition(";")
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(.*)", bare)
    if match is None:
        return None
    extra = re.search(r"""extra\s*==\s*["']([^"']*)["']""", marker)
    if extra is not None and extra.group(1) != "test":
        return None
    name, specifier = match.group(1), match.group(2).strip()
    return Needed(f"{name}{specifier}", name, specifier, for_tests=extra is not None)


def course_requirements() -> list[Needed]:
    """The course's dependencies, as the installed ``annotated`` distribution declares them.

    Raises ``importlib.metadata.PackageNotFoundError`` when the course is not installed."""
    texts = importlib.metadata.requires(DISTRIBUTION) or []
    return [needed for needed in map(parse_requirement, texts) if needed is not None]


@lru_cache(maxsize=None)
def _modules_of() -> dict[str, list[str]]:
    """Canonical distribution name -> the top-level modules it installs."""
    modules: dict[str, list[str]] = {}
    for module, dists in importlib.metadata.packages_distributions().items():
        for dist in dists:
            modules.setdefault(_canonical(dist), []).append(module)
    return modules


def import_names(distribution: str) -> tuple[str, ...]:
    """The modules to import to know that ``distribution`` works."""
    key = _canonical(distribution)
    if key in IMPORT_NAMES:
        return IMPORT_NAMES[key]
    modules = sorted(_modules_of().get(key, []))
    own = [m for m in modules if _canonical(m) == key]  # torch also installs functorch and torchgen
    return tuple(own or modules[:1])


def _import_fix(module: str, needed: Needed) -> str:
    """The fix for a module that fails to import: a same-named file or folder that hides the
    installed package, else a fresh install."""
    try:
        spec = importlib.util.find_spec(module)
        installed_in = Path(importlib.metadata.distribution(needed.name).locate_file("")).resolve()
    except (ImportError, ValueError, importlib.metadata.PackageNotFoundError):
        spec = None
    if spec is not None:
        if spec.origin not in (None, "namespace"):
            origin = Path(spec.origin)
            where = origin.parent if origin.name == "__init__.py" else origin  # a package: its folder
        else:
            where = next(iter(spec.submodule_search_locations or []), None)
        if where is not None and not Path(where).resolve().is_relative_to(installed_in):
            return (f"{where} hides the installed {needed.name} (it comes first on sys.path): rename or remove it, "
                    f"or take its folder off PYTHONPATH")
    return f'pip install --force-reinstall "{needed.text}"'


def torch_build() -> str:
    """"CPU build", "CUDA 12.4 build" or "ROCm 6.2 build": which GPUs this torch can use at all."""
    import torch

    if torch.version.cuda:
        return f"CUDA {torch.version.cuda} build"
    if getattr(torch.version, "hip", None):
        return f"ROCm {torch.version.hip} build"
    if sys.platform == "darwin":
        return "CPU and MPS build"
    return "CPU build"


def check_python(version: str | None = None) -> Result:
    """This Python against the course's ``requires-python``."""
    version = version or platform.python_version()
    try:
        required = importlib.metadata.metadata(DISTRIBUTION)["Requires-Python"] or ""
    except importlib.metadata.PackageNotFoundError:
        return failed("Python", f"{version}, but the course is not installed in it ({sys.executable})",
                      'pip install -e ".[test]" in the course\'s folder, with this Python')
    ok = satisfies(version, required)
    if ok is None:
        return passed("Python", f"{version} ({sys.executable}); not compared with {required}: packaging is missing")
    if not ok:
        return failed("Python", f"{version} ({sys.executable}); the course needs {required}",
                      f"install a Python that meets {required} and make the environment with it "
                      f"(e.g. `python3.12 -m venv .venv`), then pip install -e \".[test]\" there")
    return passed("Python", f"{version} ({sys.executable}); the course needs {required}")


def check_packaging() -> Result:
    """``packaging``, which the version checks need (only reported when it is missing)."""
    return failed("packaging", f"cannot be imported ({_packaging_error()}): versions are not compared, and "
                  f"spaCy, matplotlib and ipykernel need it too", 'pip install --force-reinstall "packaging>=22"')


def check_requirement(needed: Needed) -> Result:
    """One dependency: installed, new enough, importable."""
    label = needed.label
    try:
        version = importlib.metadata.version(needed.name)
    except importlib.metadata.PackageNotFoundError:
        what = "the tests need" if needed.for_tests else "the course needs"
        return failed(label, f"not installed; {what} {needed.text}", f'pip install "{needed.text}"')
    ok = satisfies(version, needed.specifier)
    if ok is False:
        return failed(label, f"{version} is installed; the course needs {needed.specifier}",
                      f'pip install --upgrade "{needed.text}"')
    for module in import_names(needed.name):
        try:
            importlib.import_module(module)
        except Exception as err:  # a broken install raises anything: ImportError, OSError for a lost library
            return failed(label, f"{version} is installed but `import {module}` fails: {type(err).__name__}: {err}",
                          _import_fix(module, needed))
    wanted = f"needs {needed.specifier}" if ok else f"not compared with {needed.specifier}: packaging is missing"
    build = f", {torch_build()}" if _canonical(needed.name) == "torch" else ""
    return passed(label, f"{version}{build} ({wanted})" if needed.specifier else f"{version}{build}")


# --- what the notebooks use ---------------------------------------------------------------

def check_tokenizers() -> Result:
    """spaCy's German and English tokenizers split a sentence each as the course expects."""
    name = "spaCy tokenizers"
    try:
        from annotated.data import tokenizer

        got = {lang: tokenizer(lang)(sentence) for lang, (sentence, _) in TOKENIZER_SAMPLES.items()}
    except Exception as err:  # spaCy missing or broken: its package line above says more
        return failed(name, f"spaCy cannot tokenize: {type(err).__name__}: {err}",
                      'fix the spacy line above, or pip install --force-reinstall "spacy>=3.7"')
    for lang, (sentence, expected) in TOKENIZER_SAMPLES.items():
        if got[lang] != expected:
            spacy_version = importlib.metadata.version("spacy")
            return failed(name, f"spaCy {spacy_version} splits {sentence!r} ({lang!r}) into {got[lang]}, "
                          f"expected {expected}",
                          'install a spaCy 3, which the course was made with: pip install "spacy>=3.7,<4"')
    return passed(name, "German and English split as the course expects")


def check_data(data_dir: str | Path | None = None, offline: bool = False, base_url: str = BASE_URL,
               timeout: float = HEAD_TIMEOUT_S) -> Result:
    """The Multi30k files where ``annotated.data`` looks for them: ``data_dir``, else the folder
    named by ``ANNOTATED_DATA_DIR`` (read only, never downloaded into), else the cache, else
    the download address (unless ``offline``)."""
    local = str(data_dir) if data_dir is not None else os.environ.get(ENV_VAR, "").strip()
    if local:
        origin = "--data-dir" if data_dir is not None else ENV_VAR
        return _check_local_data(Path(local).expanduser(), origin)
    cache = default_cache_dir()
    missing, corrupt = _missing_and_corrupt(cache) if cache.is_dir() else (list(MULTI30K_FILES), [])
    if corrupt:
        return _corrupt(cache, "the cache", corrupt)
    if not missing:
        return passed("Multi30k data", f"{cache} (the cache): {len(MULTI30K_FILES)} files, SHA-256 verified")
    have = f"{ENV_VAR} is not set and the cache {cache} lacks {len(missing)} of {len(MULTI30K_FILES)} files"
    fix = (f"where there is network run `{DOWNLOAD_COMMAND} --dest DIR`, copy DIR here and "
           f"`export {ENV_VAR}=DIR`; or run `{DOWNLOAD_COMMAND}` now if this machine has network")
    if offline:
        return failed("Multi30k data", f"{have}; --offline: the download address was not tried", fix)
    url = base_url.rstrip("/") + "/" + missing[0]
    problem = _unreachable(url, timeout)
    if problem:
        return failed("Multi30k data", f"{have}, and {url} cannot be reached ({problem})", fix)
    return passed("Multi30k data", f"{have}; {base_url} answers, notebooks 10 and 11 will download them on first use")


def _missing_and_corrupt(folder: Path) -> tuple[list[str], list[str]]:
    """The Multi30k files absent from ``folder``, and those whose SHA-256 is wrong."""
    missing, corrupt = [], []
    for name, sha in MULTI30K_FILES.items():
        if not (folder / name).is_file():
            missing.append(name)
            continue
        try:
            verify_file(folder / name, sha)
        except ChecksumError:
            corrupt.append(name)
    return missing, corrupt


def _corrupt(folder: Path, where: str, corrupt: list[str]) -> Result:
    names, them = ", ".join(corrupt), "it" if len(corrupt) == 1 else "them"
    return failed("Multi30k data", f"{names} in {folder} ({where}): wrong SHA-256, the copy is corrupt or incomplete",
                  f"fetch {them} again (a file with a wrong SHA-256 is replaced): "
                  f"`{DOWNLOAD_COMMAND} --dest {folder}`")


def _check_local_data(folder: Path, origin: str) -> Result:
    """A folder named by the user: it must hold every file, verified; the course never downloads into it."""
    named = f"{folder} (from {origin})"
    if not folder.exists():
        return failed("Multi30k data", f"{named} does not exist",
                      f"fetch the files into it with `{DOWNLOAD_COMMAND} --dest {folder}`, or name the folder that "
                      f"holds them")
    if not folder.is_dir():
        return failed("Multi30k data", f"{named} is a file, not a folder",
                      f"set {ENV_VAR} to the folder that holds the Multi30k .gz files")
    try:
        missing, corrupt = _missing_and_corrupt(folder)
    except PermissionError as err:
        return failed("Multi30k data", f"{named}: {err.filename} cannot be read ({err.strerror})",
                      f"ask the owner of {folder} to run `chmod -R a+rX {folder}`, or fetch your own copy with "
                      f"`{DOWNLOAD_COMMAND} --dest DIR`")
    if corrupt:
        return _corrupt(folder, f"from {origin}", corrupt)
    if missing:
        return failed("Multi30k data", f"{named} lacks {', '.join(missing)}",
                      f"fetch them with `{DOWNLOAD_COMMAND} --dest {folder}`, or unset {ENV_VAR} to use the "
                      f"download cache")
    return passed("Multi30k data", f"{named}: {len(MULTI30K_FILES)} files, SHA-256 verified")


def _unreachable(url: str, timeout: float) -> str:
    """Why a HEAD request to ``url`` fails within ``timeout`` seconds; "" when it succeeds."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout):
            return ""
    except urllib.error.HTTPError as err:
        return f"HTTP {err.code} {err.reason}"
    except urllib.error.URLError as err:
        return str(err.reason)
    except (OSError, ValueError) as err:  # sockets, TLS, timeouts; a URL without a scheme
        return f"{type(err).__name__}: {err}"


def _course_folder() -> str:
    """The course's folder (holding pyproject.toml) for a fix to name; a placeholder when the
    package was installed from a copy that is gone."""
    return str(ROOT) if (ROOT / "pyproject.toml").is_file() else "COURSE_FOLDER"


def check_model(folder: str | Path | None = None) -> Result:
    """The shipped model's files against ``SHA256SUMS`` and against what its config.json records of
    the others (the shipped folder unless ``folder``). The fix of a damaged file is the one
    ``annotated.support.pretrained`` names: in a git clone, the git commands that write the committed
    bytes again (a plain ``git checkout`` skips a file git converted to CRLF); else reinstalling."""
    name = "shipped model"
    try:
        from annotated.support.checkpoint import CheckpointError
        from annotated.support.pretrained import FILES, PRETRAINED_DIR, check_files, check_ties, restore_advice
    except Exception as err:  # the model code needs torch
        return failed(name, f"cannot be checked: {type(err).__name__}: {err}", "fix the torch line above first")
    folder = Path(folder) if folder is not None else PRETRAINED_DIR
    try:
        check_files(folder)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a folder whose parts cannot be checked is a finding too
            check_ties(folder)
    except (CheckpointError, UserWarning) as err:
        problem = str(err).split("; ")[0]  # the course's messages read "problem; fix"
        return failed(name, problem, restore_advice(folder))
    size = sum((folder / f).stat().st_size for f in FILES) / 1e6
    return passed(name, f"{folder}: {len(FILES)} files ({size:.1f} MB) match SHA256SUMS and config.json")


def check_gpu() -> Result:
    """A small matrix product on the GPU torch sees (CUDA, else MPS), compared with the CPU's."""
    name = "GPU"
    try:
        import torch
    except Exception as err:
        return failed(name, f"cannot be checked: {type(err).__name__}: {err}", "fix the torch line above first")
    mps = getattr(torch.backends, "mps", None)
    if torch.cuda.is_available():
        device, label = "cuda", f"CUDA, {torch.cuda.get_device_name(0)}"
    elif mps is not None and mps.is_available():
        device, label = "mps", "Apple MPS"
    else:
        note = ""
        if torch.version.cuda is None and shutil.which("nvidia-smi"):
            note = (" (this machine has an NVIDIA GPU, but this torch is a CPU build: install a CUDA build "
                    "from https://pytorch.org/get-started/locally/ to use it)")
        return passed(name, f"no GPU: the notebooks run on the CPU{note}")
    a = torch.randn(64, 64, generator=torch.Generator().manual_seed(0))
    try:
        on_gpu = (a.to(device) @ a.to(device)).cpu()
    except Exception as err:  # a driver too old for this torch, a GPU this build has no kernels for
        return failed(name, f"{label}: torch sees it but cannot compute on it: {type(err).__name__}: {err}",
                      "install the torch build that matches this GPU's driver (https://pytorch.org/get-started/"
                      "locally/), or hide the GPU to run on the CPU: `export CUDA_VISIBLE_DEVICES=`")
    # GPUs may multiply in lower precision (TF32): a loose tolerance still catches garbage.
    if not torch.allclose(on_gpu, a @ a, rtol=1e-2, atol=1e-2):
        return failed(name, f"{label}: a 64x64 matrix product differs from the CPU's",
                      "update the GPU driver, or reinstall torch for it (https://pytorch.org/get-started/locally/)")
    return passed(name, f"{label}: a 64x64 matrix product matches the CPU's")


def notebook_kernel() -> str:
    """The kernel the course's notebooks ask for (their ``kernelspec``), "python3" without them."""
    notebooks = sorted(NOTEBOOKS.glob("*.ipynb"))  # none when the course was installed without its folder
    if notebooks:
        try:
            return json.loads(notebooks[0].read_text(encoding="utf-8"))["metadata"]["kernelspec"]["name"]
        except (OSError, ValueError, KeyError, TypeError):
            pass
    return DEFAULT_KERNEL


def kernel_python(argv: list[str]) -> str:
    """The Python a kernel's ``argv`` runs. Jupyter replaces a bare "python", "python3" or
    "python3.X" with the Python Jupyter itself runs in: this one, when Jupyter is this
    environment's (the "Jupyter command" check)."""
    bare = {"python", f"python{sys.version_info[0]}", "python{}.{}".format(*sys.version_info[:2])}
    return sys.executable if argv[0] in bare else argv[0]


def check_kernel(kernel: str | None = None, timeout: float = KERNEL_TIMEOUT_S) -> Result:
    """The notebooks' Jupyter kernel exists and its Python imports the course and torch."""
    whose = "the one the notebooks use" if kernel is None else "given with --kernel"
    kernel = kernel or notebook_kernel()
    name = "Jupyter kernel"
    install = f"{sys.executable} -m ipykernel install --user --name {kernel}"
    try:
        from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
    except Exception as err:
        return failed(name, f"jupyter_client cannot be imported: {type(err).__name__}: {err}",
                      'pip install --force-reinstall "jupyter>=1.0"')
    manager = KernelSpecManager()
    try:
        spec = manager.get_kernel_spec(kernel)
    except NoSuchKernel:
        found = ", ".join(sorted(manager.find_kernel_specs())) or "none"
        return failed(name, f"no kernel named {kernel!r}, {whose} (kernels found: {found})",
                      f"register this environment's Python as that kernel: `{install}`")
    python = kernel_python(spec.argv)
    modules = "annotated, torch" + (", ipykernel" if "ipykernel_launcher" in spec.argv else "")
    other_env = (f"make {kernel!r} this environment's Python: `{install}`; or install the course into "
                 f"that Python: `{python} -m pip install -e \"{_course_folder()}[test]\"`")
    try:
        # sys.prefix first: it tells this environment from another made from the same Python.
        code = f"import sys; print(sys.prefix, flush=True); import {modules}"
        probe = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        return failed(name, f"{kernel!r} runs {python}, which does not exist",
                      f"register the kernel again: `{install}`")
    except subprocess.TimeoutExpired:
        return failed(name, f"{kernel!r} runs {python}, which took over {timeout:.0f} s to import {modules}",
                      "run the doctor again on a quieter machine; if it stays slow, reinstall torch")
    except OSError as err:
        return failed(name, f"{kernel!r} runs {python}, which cannot be started ({err.strerror})",
                      f"register the kernel again: `{install}`")
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or [f"exit code {probe.returncode}"])[-1]
        if probe.stdout.strip() == sys.prefix:  # this environment itself is broken, not the kernel
            return failed(name, f"{kernel!r} runs this Python, {python}, which cannot import {modules} ({last})",
                          "fix the package lines above")
        return failed(name, f"{kernel!r} runs {python}, which cannot import the course ({last}): the notebooks "
                      f"would run in another environment", other_env)
    return passed(name, f"{kernel!r} runs {python}, which imports {modules}")


def _same_folder(a: Path, b: Path) -> bool:
    """Whether two paths name the same folder (through links); False if one is missing."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def check_jupyter_command() -> Result:
    """The ``jupyter`` on the PATH belongs to this Python: the one that starts the notebooks'
    kernel when its argv says just "python"."""
    name = "Jupyter command"
    ours = [Path(sysconfig.get_path("scripts"))]
    if sys.prefix == sys.base_prefix:  # no virtual environment: `pip install --user` puts scripts apart
        ours.append(Path(sysconfig.get_path("scripts", sysconfig.get_preferred_scheme("user"))))
    start = f"{sys.executable} -m jupyter lab notebooks/"
    found = shutil.which("jupyter")
    if found is None:
        return failed(name, "`jupyter` is not on the PATH", f"activate this environment first (its scripts are in "
                      f"{ours[0]}), or start Jupyter through this Python: `{start}`")
    if not any(_same_folder(Path(found).parent, folder) for folder in ours):
        return failed(name, f"`jupyter` on the PATH is {found}, from another environment than this Python's "
                      f"({sys.executable}): it would run the notebooks there",
                      f"activate this environment first, or start Jupyter through this Python: `{start}`")
    return passed(name, f"{found}, this environment's")


def check_cache(folder: str | Path | None = None) -> Result:
    """A file can be created and deleted in the cache folder (created if missing)."""
    origin = " (from XDG_CACHE_HOME)" if folder is None and os.environ.get("XDG_CACHE_HOME") else ""
    folder = Path(folder) if folder is not None else default_cache_dir()
    fix = "export XDG_CACHE_HOME=DIR, a folder you can write to (the course caches under DIR/annotated)"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle, path = tempfile.mkstemp(dir=folder, prefix=".doctor-")
        os.close(handle)
        os.unlink(path)
    except OSError as err:
        blocker = nearest_existing(folder)
        why = (f"{blocker} is a file, not a folder" if not blocker.is_dir()
               else f"{type(err).__name__}: {err.strerror or err}")
        return failed("cache folder", f"cannot write in {folder}{origin}: {why}", fix)
    return passed("cache folder", f"{folder}{origin} is writable")


# --- the table and the command ------------------------------------------------------------

GROUPS = ("python", "packages", "spacy", "data", "model", "gpu", "kernel", "cache")


@dataclass(frozen=True)
class Options:
    """What the command line chooses; the defaults check this environment as the course sees it."""

    offline: bool = False
    data_dir: Path | None = None
    kernel: str | None = None
    only: tuple[str, ...] = GROUPS


def plan(options: Options) -> list[tuple[str, str, Callable[[], Result]]]:
    """The checks to run, in order: (group, name, check)."""
    checks: list[tuple[str, str, Callable[[], Result]]] = [("python", "Python", check_python)]
    if _packaging_error():
        checks.append(("packages", "packaging", check_packaging))
    try:
        needed = course_requirements()
    except importlib.metadata.PackageNotFoundError:
        needed = []
        checks.append(("packages", "dependencies", lambda: failed(
            "dependencies", "unknown: the course is not installed in this Python",
            'pip install -e ".[test]" in the course\'s folder')))
    checks += [("packages", n.label, lambda n=n: check_requirement(n)) for n in needed]
    checks += [
        ("spacy", "spaCy tokenizers", check_tokenizers),
        ("data", "Multi30k data", lambda: check_data(options.data_dir, options.offline)),
        ("model", "shipped model", check_model),
        ("gpu", "GPU", check_gpu),
        ("kernel", "Jupyter command", check_jupyter_command),
        ("kernel", "Jupyter kernel", lambda: check_kernel(options.kernel)),
        ("cache", "cache folder", check_cache),
    ]
    return [check for check in checks if check[0] in options.only]


def run_checks(options: Options, out: TextIO | None = None) -> list[Result]:
    """Run the planned checks, printing each line to ``out`` (stdout) as its check ends (some take seconds)."""
    out = out or sys.stdout  # looked up now, not at import: a test may have replaced it
    results = []
    for _, name, check in plan(options):
        try:
            result = check()
        except Exception as err:  # a check that breaks is a finding too, not a reason to stop
            result = failed(name, f"the check itself failed: {type(err).__name__}: {err}",
                            "fix what the other lines report, then run the doctor again")
        results.append(result)
        print("\n".join(result.lines()), file=out, flush=True)
    return results


def _folder(text: str) -> Path:
    """argparse type: a non-empty path."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path; name the folder that holds the Multi30k .gz files")
    return Path(text)


def _kernel_name(text: str) -> str:
    """argparse type: a kernel name as Jupyter writes them."""
    if not re.fullmatch(r"[A-Za-z0-9._-]+", text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a kernel name (letters, digits, . _ -), e.g. python3")
    return text


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Check that this environment can run the course: Python and every dependency, spaCy's "
                    "tokenizers, the Multi30k data, the shipped model, the GPU if any, the notebooks' Jupyter "
                    "kernel and the cache folder. Prints OK or FAIL per check, with the fix for each FAIL.",
        epilog="Exit code: 0 when every check passes, 1 when one fails, 2 for bad options.",
    )
    p.add_argument("--offline", action="store_true",
                   help="do not try to reach the Multi30k download address (a missing copy is then a FAIL)")
    p.add_argument("--data-dir", type=_folder, metavar="DIR",
                   help=f"check this folder of Multi30k files instead of ${ENV_VAR} or the cache")
    p.add_argument("--kernel", type=_kernel_name, metavar="NAME",
                   help="check this Jupyter kernel instead of the one the notebooks use "
                        f"({notebook_kernel()})")
    p.add_argument("--only", action="append", choices=GROUPS, metavar="CHECK",
                   help=f"run only this check (repeatable): {', '.join(GROUPS)}")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m annotated.doctor [--offline] [--data-dir DIR] [--kernel NAME] [--only CHECK]``:
    0 when every check passes, 1 when one fails, 2 for bad options."""
    args = parser().parse_args(argv)
    options = Options(offline=args.offline, data_dir=args.data_dir, kernel=args.kernel,
                      only=tuple(args.only) if args.only else GROUPS)

    def body() -> int:
        results = run_checks(options)
        bad = sum(not r.ok for r in results)
        print(f"{len(results)} checks, {bad} failed")
        return 1 if bad else 0

    return run_command(quiet_on_closed_pipe(body), PROG)
