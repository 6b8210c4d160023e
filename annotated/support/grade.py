"""Grade exercise notebooks with the course's own checks: one verdict per exercise.

    python -m annotated.support.grade exercises/                       # every notebook of a folder
    python -m annotated.support.grade submissions/                     # and of its subfolders, one per student
    python -m annotated.support.grade submissions/ana/04_multi_head_attention.ipynb --full
    python -m annotated.support.grade submissions/ --csv grades.csv --json grades.json
    python -m annotated.support.grade submissions/ --csv long.csv --long --feedback diagnosis
    python -m annotated.support.grade submissions/ --timeout 30 --notebook-timeout 300 --memory 4

The grader knows every exercise of every exercise notebook from the package
(``annotated.support.catalogue``): the function each one defines and the check that
grades it. A submission is recognised by its name (``04_multi_head_attention.ipynb``, or any
name that starts with ``04_``) or else by its ``## Exercise 4.N`` headings. Every submission is
read and hashed before the first kernel starts and graded from those bytes (a notebook that
changes another's file changes nothing of its grade). Each is written into a temporary folder of
its own and run there in a fresh kernel, in bubblewrap's sandbox where it is installed
(``annotated.support.sandbox``: its own copy writable, the package read-only, no solutions/, no
other submission, no network, a private /tmp, limits on CPU time and memory; without it the
report's first line says so), top to bottom, to define the student's functions; its own check cells are not run (a cell that starts with a ``check_...(``
call, or that nbgrader marks as a test). Then the grader runs the course's check of each
exercise itself, on the function the notebook defined. What the notebook's check cells say, or
whether they are there at all, does not count; a missing or altered check cell, a
``check_...`` name the notebook defines itself, and a module of ``annotated`` the notebook names
that the exercise as handed out does not (the course's own code, or the grader's recorder: what
no sandbox stops a kernel from using), are noted beside the exercise.

Where the verdict is computed. Every check is a declaration
(``annotated.support.grading.DECLARATIONS``, run by ``annotated.support.grading.engine``), judged
in the grader's own process: the grader builds the probe inputs and sends them to the kernel as
data inside its cell; the kernel only calls the function on them (``annotated.support.record``,
set up by the grader's first cell before any of the notebook's, with torch's functions, the
builtins and the output stream as they were then, under a name drawn at random) and sends what
it returned back as data on its own output stream (tensors read back with ``weights_only``), and the grader
compares it with the reference and the known mistakes. Nothing the notebook redefines (torch,
the checks, the catalogue, the recorder) changes such a verdict. The exercises, by notebook:

    01_softmax_and_scaling     1.1 stable_softmax, 1.2 softmax_with_temperature, 1.3 score_variances
    02_scaled_dot_product_attention
                               2.1 attention, 2.2 attention_loops, 2.3 hard_lookup
    03_masking                 3.1 padding_mask, 3.2 subsequent_mask, 3.3 target_mask,
                               3.4 decoder_input_and_labels
    04_multi_head_attention    4.1 split_heads, 4.2 merge_heads, 4.3 multi_head_attention,
                               4.4 head_contributions
    05_positional_encoding     5.1 sinusoidal_table, 5.2 shift_matrix, 5.3 embed_with_positions
    06_feed_forward_residual_layer_norm
                               6.1 feed_forward, 6.2 layer_norm, 6.3 sublayer_connection
    07_the_full_model          7.1 decoder_layer_forward, 7.2 tied_embeddings, 7.3 parameter_count
    08_training                8.1 smoothed_targets, 8.2 label_smoothing_loss, 8.3 rate,
                               8.4 teacher_forcing_loss
    09_decoding                9.1 self_attention_step, 9.2 cached_greedy_decode, 9.3 beam_step
    10_data_and_byte_pairs     10.1 bpe_merge_step, 10.2 build_vocab, 10.3 segment
    11_translating_german_to_english
                               11.1 bleu, 11.2 ids_to_tokens, 11.3 sequence_scores
    12_what_the_heads_learned  12.1 to_words, 12.2 normalized_entropy, 12.3 previous_token_share,
                               12.4 em_step
    13_the_cost_of_attention   13.1 block_band_mask, 13.2 linformer_attention, 13.3 rank_for_energy
    14_positions               14.1 relative_positions, 14.2 skew, 14.3 rotate
    15_model_variations        15.1 row_parameters, 15.2 paired_test, 15.3 holm

Every exercise of the catalogue is declared (``tests/test_grade.py`` holds it so); a new one is a
declaration (``masking.py`` and ``multi_head.py`` are the pattern; ``tests/test_declarations.py``
then tests every known mistake against it).

Each exercise gets one verdict: ``passed``; ``failed`` (with the check's diagnosis; the first
line of it, or all of it with ``--full``); ``not attempted`` (the function still raises the
``NotImplementedError`` of the blank handed out); ``error`` (the function is not defined, or
its cell raised); ``timed out`` (the check, or a cell of the notebook, ran past its limit: the
kernel is interrupted and grading goes on with the next one); ``defined outside`` (the function's
code is in none of the notebook's cells: imported from ``annotated``, from ``solutions/`` or from
another file, or made by ``exec``; the kernel records where it was defined, its module, file and
source, and the grader looks for that source in the snapshot's cells; or, while it runs, it
calls the course's own answer or a copy of it, runs a ``__code__`` that is not its source's,
starts a process or thread, or turns off the grader's profile function); ``held for review``
(it passed, but the notebook reaches into the kernel's machinery: its cell hooks
(``get_ipython``), frames, code objects and closures, ``sys.modules``, the recorder; what can
rewrite the grader's own cells in the kernel, so no point is given until a reader has looked).
A cell that ends its kernel is left out, as one past its limit, and a fresh kernel goes on.
Time limits: ``--timeout``
seconds per cell and per check (default 60), ``--notebook-timeout`` seconds for a whole
notebook (default 600); the report prints both.

After the table, with several submissions, comes a summary per exercise for the class: how
many passed, and the three most common diagnoses (what to teach again). ``--csv PATH`` writes
the gradebook a learning management system imports (``-`` for the standard output): one row per
student (the first folder under the folder given; a notebook given by itself is a row of its
own, by its name), a column of points per exercise graded (1 passed, 0 not, empty for a chapter
the student handed in nothing of), ``points``, ``max_points``, ``notes`` and ``sandbox``.
``--csv PATH --long`` writes one row per student, notebook and exercise instead, with the
columns ``student, notebook, exercise, check, verdict, diagnosis, notes, seconds, sandbox``.
``--json PATH`` holds both (``results``, ``gradebook``), the class summary, the limits, the
sandbox, and the SHA-256 of every submission graded. ``--feedback`` says what they (and the
table) tell of each exercise: ``full`` (the default) the whole diagnosis, ``diagnosis`` the
mistake named without the corrected code, ``verdict`` the verdict alone. Two notebooks of the
same chapter in one student's folder (a ``-Copy1``): the one named as handed out is graded, the
other left out and reported. Gradebooks are written whole or not at all (a temporary file moved
into place); a gradebook path that is a notebook (``grade --csv a/01.ipynb b/01.ipynb`` gives
``--csv`` the first notebook) or that two options share is refused before anything runs. A
notebook is never changed on disk. Several notebooks run side
by side, each in its own kernel (``--jobs``, by default as many as the machine has cores, at
most 4); the table keeps the order of the paths.

What the sandbox and the temporary folder protect, and what they do not: README, "Exercises".

Exit code: 0 when every exercise passed, 1 otherwise, 2 for a usage error (a path that is not a
notebook or a folder of notebooks, a limit out of range, a gradebook that cannot be written or
would replace a notebook or another gradebook).
"""

import argparse
import ast
import base64
import csv
import functools
import hashlib
import io
import json
import os
import re
import secrets
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import nbformat

from annotated.support.errors import UsageError, run_command
from annotated.support.files import Stopped, atomic_write, check_output_file, signals_as_interrupt
from annotated.support.catalogue import BY_CHAPTER, BY_NUMBER, NOTEBOOKS, Exercise
from annotated.support.course import ROOT
from annotated.support.options import MAX_SECONDS, machine_cores
from annotated.support import sandbox

CELL_SECONDS, NOTEBOOK_SECONDS = 60, 600
VERDICTS = ("passed", "failed", "not attempted", "error", "timed out", "defined outside", "held for review")
EXERCISE_HEADING = re.compile(r"^##\s+Exercise\s+(\d+\.\d+)\b")
CHECK_CALL = re.compile(r"^\s*(check_\w+)\s*\(")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
SOLUTIONS = ROOT / "solutions"  # never shown to a sandboxed kernel
_PARSING = threading.Lock()
# Building the probes and judging a record draw from torch's global generator (a reference's dropout seeded with
# fork_rng and manual_seed): one thread at a time, or two notebooks graded side by side (--jobs) draw each other's
# numbers and a right answer fails.
_JUDGING = threading.Lock()
COLUMNS = ("student", "notebook", "exercise", "check", "verdict", "diagnosis", "notes", "seconds")


@dataclass
class Result:
    """The verdict on one exercise of one submitted notebook."""

    student: str
    notebook: str    # as the table names it: ana/04_multi_head_attention.ipynb
    exercise: str    # Exercise 4.1: `split_heads`
    check: str
    verdict: str     # one of VERDICTS
    diagnosis: str = ""
    notes: str = ""  # what the notebook did to its check cells
    seconds: float = 0.0
    mistake: str = ""  # the mistake in a few words, without the fix (--feedback diagnosis)

    @property
    def passed(self) -> bool:
        return self.verdict == "passed"


@dataclass
class Limits:
    cell: int = CELL_SECONDS
    notebook: int = NOTEBOOK_SECONDS
    memory: int = 0  # bytes a kernel may hold in the sandbox (RLIMIT_DATA); 0: memory_default()

    def __str__(self) -> str:
        return f"time limits: {self.cell} s per cell and per check, {self.notebook} s per notebook"

    @property
    def cpu(self) -> int:
        """CPU seconds a kernel may use in the sandbox: the notebook's limit on every core, a
        stop for what the clock's limits miss (a process the kernel starts, say)."""
        return self.notebook * machine_cores() + 60


def memory_default(jobs: int) -> int:
    """Bytes of memory a kernel may hold by default: the machine's memory shared by the kernels
    that run at once, between 2 and 8 GiB."""
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        total = 8 * 2**30
    return int(min(8 * 2**30, max(2 * 2**30, total / max(1, jobs))))


@dataclass(frozen=True)
class Submission:
    """A submitted notebook as the grader read it, once, before any kernel started: it is graded
    from these bytes, whatever happens to the file afterwards."""

    path: Path
    name: str      # as the table names it: ana/04_multi_head_attention.ipynb
    student: str
    data: bytes
    sha256: str


def snapshot(found: list[tuple[Path, str, str]]) -> list[Submission]:
    """Read and hash every submission (path, name, student) before the first kernel starts."""
    taken = []
    for path, name, student in found:
        data = path.read_bytes()
        taken.append(Submission(path, name, student, data, hashlib.sha256(data).hexdigest()))
    return taken


@dataclass(frozen=True)
class Isolation:
    """Where each kernel runs: in bubblewrap (``bwrap``, the path) or, without it, as the user;
    ``hidden``: the paths a sandbox must not show (the inputs, solutions/, the gradebooks)."""

    bwrap: str | None = None
    hidden: tuple[Path, ...] = ()


# ------------------------------------------------------------------------------ finding notebooks


def notebooks_in(path: Path) -> list[tuple[Path, str, str]]:
    """The notebooks that ``path`` names, each with the name the table shows and the student:
    itself; or those of the folder and its subfolders (``ana/04_....ipynb``, student ``ana``), in
    path order. Hidden files and folders (Jupyter's ``.ipynb_checkpoints``) are skipped."""
    if path.is_dir():
        found = sorted(p for p in path.rglob("*.ipynb")
                       if not any(part.startswith(".") for part in p.relative_to(path).parts))
        if not found:
            raise UsageError(f"{path} holds no .ipynb notebook; give a folder of exercise notebooks or one notebook")
        named = [(p, p.relative_to(path).as_posix()) for p in found]
        return [(p, name, name.split("/")[0] if "/" in name else "") for p, name in named]
    if not path.exists():
        raise UsageError(f"no such file or folder: {path}")
    if path.suffix != ".ipynb":
        raise UsageError(f"{path} is not a notebook (.ipynb); give a notebook or a folder of them")
    return [(path, path.name, "")]


def which_notebook(path: Path, nb) -> str | None:
    """The exercise notebook a submission is: by its file name (as handed out, or starting with its
    chapter's number: ``04_...``), else by its ``## Exercise N.M`` headings; None if neither."""
    stem = path.stem
    if stem in NOTEBOOKS:
        return stem
    chapter = re.match(r"(\d\d)_", stem)
    if chapter and chapter.group(1) in BY_CHAPTER:
        return BY_CHAPTER[chapter.group(1)]
    chapters = Counter()
    for cell in nb.cells:
        heading = EXERCISE_HEADING.match(cell.source.strip()) if cell.cell_type == "markdown" else None
        if heading and heading.group(1) in BY_NUMBER:
            chapters[heading.group(1).split(".")[0].zfill(2)] += 1
    return BY_CHAPTER[chapters.most_common(1)[0][0]] if chapters else None


# ------------------------------------------------------------------------------ reading the notebook


def is_check_cell(cell) -> bool:
    """A check cell: it starts with a ``check_...(`` call, or nbgrader marks it as a test. The
    grader never runs these (the course's checks run instead)."""
    nbgrader = cell.get("metadata", {}).get("nbgrader", {})
    return bool(CHECK_CALL.match(cell.source)) or bool(nbgrader.get("grade") and not nbgrader.get("solution"))


def defined_check_names(source: str) -> set[str]:
    """The ``check_...`` names a cell binds itself (def, class, assignment, an import from
    elsewhere than the course's grading package), read from its syntax without running it."""
    lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
    try:
        with _PARSING:  # CPython 3.11's parser is not safe in threads (gh-106905: "AST constructor recursion depth")
            tree = ast.parse("\n".join(lines))
    except SyntaxError:
        return set()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("annotated.support.grading"):
                names.update(a.asname for a in node.names if a.asname and a.asname != a.name)
                continue
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return {n for n in names if n.startswith("check_")}


_MENTION = re.compile(r"\bannotated(?:\.\w+)+")
EXERCISES = ROOT / "exercises"


def mentions(source: str) -> set[str]:
    """The modules of ``annotated`` a cell names (``annotated.masks``), and the names it imports
    from them (``annotated.support.grading.DECLARATIONS``: the grading package is named by every
    exercise, for its checks, but not its references)."""
    found = set(_MENTION.findall(source))
    lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
    try:
        with _PARSING:
            tree = ast.parse("\n".join(lines))
    except SyntaxError:
        return found
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "annotated":
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return found


@functools.cache
def handed_out_mentions(notebook: str) -> frozenset[str] | None:
    """The modules of ``annotated`` the exercise notebook names as handed out, and the names it
    imports from them (None without it)."""
    path = EXERCISES / f"{notebook}.ipynb"
    if not path.is_file():
        return None
    nb = nbformat.read(path, as_version=4)
    return frozenset(m for c in nb.cells if c.cell_type == "code" for m in mentions(c.source))


# What reaches into the kernel's own machinery (its cells as they run, the frames of the grader's code,
# code objects, the builtins, the loaded modules): what no sandbox stops, and no exercise needs.
MACHINERY = re.compile(r"\b(get_ipython|input_transformers\w*|_getframe|f_globals|f_locals|f_back|get_objects|"
                       r"get_referrers|settrace|setprofile|__code__|__globals__|__closure__|cell_contents|"
                       r"__builtins__|builtins|ctypes|"
                       r"currentframe|_forward_hooks|_forward_pre_hooks|register_forward_hook|register_forward_pre_hook|"
                       r"_annotated_\w*)\b|\b(sys\.modules|inspect\.stack)\b|annotated-record|"
                       r"\btorch(\.\w+)+(?=\s*=[^=])")  # torch.save = ..., torch.Tensor.__eq__ = ...


def held_for_review(sources: list[str]) -> str:
    """The names of the kernel's machinery the notebook's code reaches into that can rewrite or
    forge what the grader's own cells report (its cell hooks, frames, code objects, the loaded
    modules, the recorder): a pass in such a notebook is held for a reader. Replacing functions of
    ``torch`` or the builtins is only noted: the recorder keeps its own copies of both."""
    found = {m.group(0) for s in sources for m in MACHINERY.finditer(s)}
    found = {n for n in found if n not in ("builtins", "__builtins__") and not n.startswith("torch")}
    return ", ".join(sorted(found | {m for s in sources for m in mentions(s) if m.startswith(GRADER_PARTS)}))


# What of the grader a notebook can use to rebuild the probes and store the answers before the call
GRADER_PARTS = ("annotated.support.grading.engine", "annotated.support.grading.DECLARATIONS",
                "annotated.support.grading.CHECKS", "annotated.support.record")


def notes_for(nb, exercises: tuple[Exercise, ...], handed_out: frozenset[str] | None = None) -> dict[str, str]:
    """Per exercise number: what the notebook did to the exercise's check (its check cell missing
    or altered, its check's name defined by the notebook), and the modules of ``annotated`` it
    names that the exercise as handed out (``handed_out``) does not: the course's code of a graded
    function, or the grader's recorder, used in the kernel (what a sandbox cannot stop, flagged
    for a reader). None of it changes the verdict."""
    sources = [cell.source.strip() for cell in nb.cells if cell.cell_type == "code"]
    defined = set().union(*(defined_check_names(s) for s in sources)) if sources else set()
    extra = sorted(set().union(*map(mentions, sources)) - (handed_out or set())) if handed_out is not None else []
    machinery = ", ".join(sorted({m.group(0) for s in sources for m in MACHINERY.finditer(s)}))
    notes = {}
    for exercise in exercises:
        found = []
        if exercise.check_cell not in sources:
            found.append(f"its check cell `{exercise.check_cell}` is missing or altered")
        if exercise.check in defined:
            found.append(f"the notebook defines its own `{exercise.check}`")
        text = "; ".join(found) + " (the course's check graded it)" if found else ""
        if machinery:
            text = "; ".join(filter(None, [text, f"the notebook reaches into the kernel's machinery ({machinery}), "
                                                 "where it can change what the grader's own cells do: read it"]))
        if extra:
            used = ", ".join(extra)
            text = "; ".join(filter(None, [text, f"the notebook uses {used}, which the exercise as handed out "
                                                 "does not (the course's own code, or the grader's: read it)"]))
        if text:
            notes[exercise.number] = text
    return notes


def error_text(cell) -> str | None:
    """The error a cell raised when it ran (name and message, without colour codes), or None."""
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            message = ANSI.sub("", output.get("evalue", "")).strip()
            return f"{output.get('ename', 'Error')}: {message}" if message else output.get("ename", "Error")
    return None


MAX_RECORD_BYTES = 2**30  # a kernel's record of a declared check larger than this is not read


def declarations() -> dict:
    """The declared checks (``annotated.support.grading.engine``), by name: those the grader
    judges in its own process."""
    from annotated.support.grading import DECLARATIONS

    return DECLARATIONS


@functools.cache
def _recorder_source() -> str:
    from annotated.support import record

    return Path(record.__file__).read_text(encoding="utf-8")


# Run in a submission's kernel by the grader's first cell, before any cell of the notebook: the
# recorder (annotated.support.record, from its source) in a namespace of its own, with the
# builtins, torch's functions, the output stream, hashlib and json as they are before the
# notebook runs, so that a notebook that later replaces torch.save, compile, sys.stdout or the
# recorder's module changes nothing of what the grader's cells do. Each record is serialized in
# memory and its bytes (and their SHA-256) go back on that stream: a thread of the notebook that
# rewrites the file changes nothing either. While the function runs, a profile function notes
# the code objects of the package that run (the course's own answer called) and the function's
# own code (a __code__ swapped in). What a kernel does can always be forged by code that reaches
# into the grader's own objects; this stops every way short of that.
_KERNEL_SETUP = """
import _posixsubprocess, _thread, base64, builtins, functools, hashlib, io, json, os, re, sys, threading, types
import torch


def fingerprint(code):
    \"\"\"A code object's names, variables and constants (its docstring among them), not its
    bytecode (a .pyc written by another build of the same Python may differ there), file or line:
    equal for the same source compiled anywhere.\"\"\"
    consts = tuple(c.co_name if isinstance(c, types.CodeType) else repr(c) for c in code.co_consts)
    text = repr((code.co_name, code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars, consts,
                 code.co_argcount, code.co_kwonlyargcount))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def start(recorder_source, user, token, package, max_inline):
    frozen = types.ModuleType("torch")
    frozen.__dict__.update(torch.__dict__)  # torch.save, torch.load, ... as they are now
    real_save, written = torch.save, []

    def save(obj, f, *args, **kwargs):  # the recorder's torch.save: the bytes kept, then written
        buffer = io.BytesIO()
        real_save(obj, buffer, *args, **kwargs)
        written.append(buffer.getvalue())
        f.write(written[-1])

    frozen.save = save
    real_import = builtins.__import__

    def own_import(name, globals=None, locals=None, fromlist=(), level=0):
        return frozen if name == "torch" and level == 0 else real_import(name, globals, locals, fromlist, level)

    own = dict(vars(builtins))
    own["__import__"] = own_import
    namespace = {"__name__": "_annotated_record_", "__file__": "<annotated-record>", "__builtins__": own}
    exec(compile(recorder_source, "<annotated-record>", "exec"), namespace)
    try:
        kernel = sys.modules["IPython"].get_ipython().kernel
    except Exception:  # noqa: BLE001 - not an ipykernel
        kernel = None
    record_file, stream, sha256, b64, dumps = namespace["record_file"], sys.stdout, hashlib.sha256, \\
        base64.b64encode, json.dumps
    setprofile, getprofile, thread_profile, partial = sys.setprofile, sys.getprofile, threading.setprofile, \\
        functools.partial

    def unwrapped(fn):
        for _ in range(20):
            if isinstance(fn, partial):
                fn = fn.func
            elif getattr(fn, "__wrapped__", None) is not None:
                fn = fn.__wrapped__
            else:
                break
        return fn

    # What starts another process or thread, which the profile function does not follow.
    spawners = {id(f): f"{f.__module__}.{f.__name__}" for f in (
        getattr(os, name, None) for name in ("fork", "forkpty", "system", "posix_spawn", "posix_spawnp", "execv",
                                             "execve", "spawnv", "spawnve")) if f is not None}
    spawners |= {id(f): f"{f.__module__}.{f.__name__}" for f in (_posixsubprocess.fork_exec, _thread.start_new_thread)}
    # The code seen: the package's, and any other but the interpreter's libraries and the notebook's cells.
    libraries = tuple({p.rstrip(os.sep) + os.sep for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)})
    cell = re.compile(r"(^<ipython-input-\\d+-[0-9a-f]+>$)|([/\\\\]ipykernel_\\d+[/\\\\]\\d+\\.py$)")

    def seen(file):
        return file.startswith(package) or not (file.startswith(libraries) or file == "<annotated-record>"
                                                or cell.search(file))

    def record(function, plan, out):
        fn, ran, state = user.get(function), {}, {"off": False, "spawned": None}
        namespace = user
        if callable(fn):
            def profile(frame, event, arg):
                if event == "call":
                    ran[id(frame.f_code)] = frame.f_code
                elif event == "c_call" and id(arg) in spawners:
                    state["spawned"] = spawners[id(arg)]

            def traced(*args, **kwargs):
                setprofile(profile)
                thread_profile(profile)
                try:
                    return fn(*args, **kwargs)
                finally:
                    state["off"] |= getprofile() is not profile
                    setprofile(None)
                    thread_profile(None)

            functools.update_wrapper(traced, fn)
            namespace = {function: traced}
        written.clear()
        if isinstance(plan, bytes):  # the probes sent in the cell itself: no file a thread can change
            plan = io.BytesIO(base64.b64decode(plan))
        try:
            record_file(namespace, function, plan, out)
        except Exception:  # the file written and moved: a thread of the notebook may have removed it
            if not written:
                raise
        data = written[-1] if written else b""
        own_code = getattr(unwrapped(fn), "__code__", None)
        report = {"sha256": sha256(data).hexdigest(), "size": len(data),
                  "data": b64(data).decode() if len(data) <= max_inline else None,
                  # (a closure's code is not its source compiled alone: its free variables would be globals)
                  "code": fingerprint(own_code) if isinstance(own_code, types.CodeType) and not own_code.co_freevars
                  else None,
                  "package": sorted({(c.co_filename, c.co_name, fingerprint(c)) for c in ran.values()
                                     if seen(c.co_filename)}),
                  "tracing_off": state["off"], "spawned": state["spawned"]}
        try:  # the stream's request is the cell's, even where the notebook replaced sys.stdout
            stream.set_parent(kernel.get_parent("shell"))
        except Exception:  # noqa: BLE001 - another kernel than ipykernel
            pass
        stream.write(token + dumps(report) + "\\n")
        stream.flush()

    return record
"""
MAX_INLINE_BYTES = 16 * 2**20  # a record up to this size comes back on the kernel's output stream


def _fingerprint(code) -> str:
    """The same fingerprint as the kernel's (``_KERNEL_SETUP``)."""
    namespace: dict = {}
    exec(compile(_KERNEL_SETUP.split("def start(")[0], "<annotated-record>", "exec"), namespace)
    return namespace["fingerprint"](code)


def _setup_cell(name: str, token: str) -> nbformat.NotebookNode:
    """The grader's first cell in every kernel, before any of the notebook's: binds ``name`` to
    the function that records a declared check (``_KERNEL_SETUP``)."""
    package = str(sandbox.PACKAGE) + os.sep
    return nbformat.v4.new_code_cell(
        f"_annotated_setup_ = {{'__name__': '_annotated_setup_', '__file__': '<annotated-record>'}}\n"
        f"exec(compile({_KERNEL_SETUP!r}, '<annotated-record>', 'exec'), _annotated_setup_)\n"
        f"globals()[{name!r}] = _annotated_setup_['start']({_recorder_source()!r}, globals(), {token!r}, "
        f"{package!r}, {MAX_INLINE_BYTES})\n"
        "del _annotated_setup_"
    )


def _record_cell(exercise: Exercise, plan: Path | bytes, out: Path, name: str) -> nbformat.NotebookNode:
    """The grader's cell for a declared check: the kernel only calls the function on the probes
    (``plan``: a file, or its bytes, base64, up to ``MAX_INLINE_BYTES``) and describes what
    happened, as data (to ``out``, and its bytes on the output stream). It names nothing but
    ``name``, the recorder the first cell set up (``_setup_cell``): a notebook that shadowed
    compile or exec, or replaced ``annotated.support.record``, changes nothing of it."""
    plan = plan if isinstance(plan, bytes) else str(plan)
    return nbformat.v4.new_code_cell(f"{name}({exercise.function!r}, {plan!r}, {str(out)!r})")


def _lines(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip().splitlines())


def defined_outside(function: str, origin: dict | None, sources: list[str]) -> str | None:
    """Why the graded function is not the notebook's own, or None: its code is not a cell of the
    kernel (imported from ``annotated``, from ``solutions/`` or from another file, or made by
    ``exec``), or its source is in none of the notebook's cells. ``origin``: what the kernel
    recorded of it (``annotated.support.record.origin``)."""
    if not isinstance(origin, dict):
        return None
    source = origin.get("source")
    if origin.get("cell") and (not isinstance(source, str) or _lines(source) in _lines("\n".join(sources))):
        return None
    where = f"{origin.get('module') or '?'}.{origin.get('qualname') or '?'}"
    if origin.get("file"):
        where += f", from {origin['file']}"
    why = ("its code is not in the notebook's cells" if origin.get("cell") else f"it is {where}")
    return (f"`{function}` is not defined in the notebook: {why}. A graded function must be written in "
            "its exercise's cell: one imported or copied in gets no pass")


def _report_of(cell, token: str) -> dict | None:
    """The recorder's report in the output of its cell (``_KERNEL_SETUP``): the last line that
    carries the token, wherever it starts (the function may have printed without a newline)."""
    text = "".join(o.get("text", "") for o in cell.get("outputs", [])
                   if o.get("output_type") == "stream" and o.get("name") == "stdout")
    at = text.rfind(token)
    if at < 0:
        return None
    try:
        report = json.loads(text[at + len(token):].split("\n", 1)[0])
    except ValueError:
        return None
    return report if isinstance(report, dict) else None


def _record_bytes(out: Path, report: dict | None) -> bytes | dict | None:
    """The bytes of the record the recorder wrote: those its report carries, or else the file,
    which must hash as the report says (a notebook's thread may have rewritten it). A dict: the
    verdict when there is no record to trust; None: the kernel wrote none."""
    no_record = {"verdict": "error", "mistake": "no record"}
    if report is None:
        if not out.is_file():
            return None
        return no_record | {"diagnosis": "the recorder's report did not come back with its record (the notebook "
                                         "took over the kernel's output?)"}
    if report.get("data") is not None:
        data = base64.b64decode(report["data"])
    else:
        size = out.stat().st_size if out.is_file() else 0
        if size > MAX_RECORD_BYTES:
            return no_record | {"diagnosis": f"the kernel's record of the calls is {size / 2**20:.0f} MB, more than "
                                             f"the {MAX_RECORD_BYTES / 2**20:.0f} MB the grader reads"}
        data = out.read_bytes() if out.is_file() else b""
    if hashlib.sha256(data).hexdigest() != report.get("sha256"):
        return no_record | {"diagnosis": "the record of the calls was changed after the recorder wrote it (by the "
                                         "notebook's own code)"}
    return data


def judge(decl, probes: list, record: dict):
    """``engine.judge_record``, one thread at a time (``_JUDGING``)."""
    from annotated.support.grading import engine

    with _JUDGING:
        return engine.judge_record(decl, probes, record)


def _judged(decl, probes: list, out: Path, report: dict | None = None) -> dict | None:
    """The verdict on the record a kernel wrote (``_record_bytes``), judged in this process (None
    when the kernel wrote none). It is read as data only (``weights_only``): tensors, numbers,
    strings; nothing of it runs."""
    import torch

    data = _record_bytes(out, report)
    if data is None or isinstance(data, dict):
        return data
    try:
        record = torch.load(io.BytesIO(data), weights_only=True)
        found = judge(decl, probes, record)
    except Exception as err:  # noqa: BLE001 - a record a notebook wrote itself, or cut short
        return {"verdict": "error", "diagnosis": f"the kernel's record of the calls cannot be read ({type(err).__name__}: "
                f"{err})", "mistake": "no record"}
    return {"verdict": found.verdict, "diagnosis": found.diagnosis, "mistake": found.mistake,
            "origin": record.get("origin")}


def _unwrapped(fn):
    for _ in range(20):
        if isinstance(fn, functools.partial):
            fn = fn.func
        elif getattr(fn, "__wrapped__", None) is not None:
            fn = fn.__wrapped__
        else:
            break
    return fn


# What a declaration's reference hands its work to: the course's answer under another name.
DELEGATES = {"cached_greedy_decode": "greedy_decode", "beam_step": "_beam_step", "tied_embeddings": "make_model"}


def course_fingerprints(exercise: Exercise, decl) -> set[str]:
    """The fingerprints of the course's own answers to ``exercise``: its declaration's reference
    and every function of the package of the exercise's name (or of the name its reference hands
    the work to, ``DELEGATES``)."""
    names = [exercise.function] + ([DELEGATES[exercise.function]] if exercise.function in DELEGATES else [])
    targets = [decl.reference] + [getattr(module, n, None) for name, module in list(sys.modules.items())
                                  if name == "annotated" or name.startswith("annotated.") for n in names]
    codes = [getattr(_unwrapped(t), "__code__", None) for t in targets if t is not None]
    return {_fingerprint(code) for code in codes if code is not None}


def _compiled(source: str, name: str) -> list[str]:
    """The fingerprints of the functions called ``name`` that ``source`` defines (none if it does not compile)."""
    import textwrap
    import types

    try:
        with _PARSING:
            top = compile(textwrap.dedent(source), "<source>", "exec")
    except (SyntaxError, ValueError):
        return []
    found, todo = [], [top]
    while todo:
        code = todo.pop()
        found += [_fingerprint(code)] if code.co_name == name else []
        todo += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    return found


def runs_other_code(function: str, exercise: Exercise, decl, origin: dict | None, report: dict | None) -> str | None:
    """Why the graded function's answer is not the notebook's own code, from what the kernel saw
    while it ran (``_KERNEL_SETUP``), or None: it called the course's own answer (the package's),
    its code is not the code of its source (a ``__code__`` swapped in), or it turned off the
    grader's view of what ran."""
    if not report:
        return None
    tail = ". A graded function must compute its answer with the notebook's own code: it gets no pass"
    if report.get("tracing_off"):
        return (f"`{function}` turned off the grader's view of the code it runs (sys.setprofile), so its answer "
                f"cannot be told from the course's own{tail}")
    if report.get("spawned"):
        return (f"`{function}` started another process or thread ({report['spawned']}) while it ran, whose code the "
                f"grader cannot see: its answer cannot be told from the course's own{tail}")
    course = course_fingerprints(exercise, decl)
    for file, name, mark in report.get("package") or []:
        if mark in course:
            inside = os.path.isabs(file) and file.startswith(str(sandbox.PACKAGE) + os.sep)
            where = os.path.relpath(file, sandbox.PACKAGE.parent) if inside else file
            what = "the course's own answer" if inside else "a copy of the course's own answer"
            return f"`{function}` calls {what}, `{name}` of {where}{tail}"
    source = (origin or {}).get("source")
    qualname = str((origin or {}).get("qualname") or "")
    if report.get("code") and isinstance(source, str) and origin.get("cell"):
        marks = _compiled(source, qualname.rsplit(".", 1)[-1])
        if marks and report["code"] not in marks:
            return (f"`{function}` runs other code than its source in the notebook (its __code__ was replaced)"
                    + (" by the course's own answer" if report["code"] in course else "") + tail)
    return None


# ------------------------------------------------------------------------------ grading one notebook


def _row(student, name, exercise, verdict, diagnosis="", notes=None, seconds=0.0, mistake="") -> Result:
    return Result(student, name, exercise.heading, exercise.check, verdict, diagnosis,
                  (notes or {}).get(exercise.number, ""), round(seconds, 1), mistake)


def _whole(student: str, name: str, verdict: str, diagnosis: str) -> list[Result]:
    return [Result(student, name, "(the notebook)", "", verdict, diagnosis)]


def grade_submission(submission: Submission, limits: Limits | None = None,
                     isolation: Isolation | None = None) -> list[Result]:
    """Grade one submission from its snapshot, on a copy in a temporary folder of its own (in the
    sandbox when ``isolation`` names bubblewrap): one Result per exercise."""
    limits = limits or Limits()
    isolation = isolation or Isolation()
    name, student = submission.name, submission.student
    try:
        nb = nbformat.reads(submission.data.decode("utf-8"), as_version=4)
    except Exception as err:  # not UTF-8, not JSON, not a notebook
        return _whole(student, name, "error", f"cannot read the notebook: {err}")
    notebook = which_notebook(submission.path, nb)
    if notebook is None:
        return _whole(student, name, "error",
                      "not an exercise notebook of the course: keep the name it was handed out with "
                      "(e.g. 04_multi_head_attention.ipynb) or its '## Exercise N.M' headings")
    exercises = NOTEBOOKS[notebook]
    notes = notes_for(nb, exercises, handed_out_mentions(notebook))
    with tempfile.TemporaryDirectory(prefix="annotated-grade-") as folder:
        LIVE_FOLDERS.add(folder)
        try:
            copy = Path(folder) / f"{notebook}.ipynb"
            copy.write_bytes(submission.data)  # the snapshot, not the file as it is now
            return _run(copy, nb, exercises, notes, limits, name, student, isolation)
        finally:
            LIVE_FOLDERS.discard(folder)


# The temporary folders of the notebooks being graded (a copy of each submission, the kernel's sockets):
# removed by the main thread when SIGTERM or SIGHUP stops the grader while the threads still run them.
LIVE_FOLDERS: set[str] = set()


def _plan(nb, exercises: tuple[Exercise, ...]) -> list[tuple[str, object]]:
    """The order of the run: the student's code cells (not the check cells), each with the exercise
    whose heading it is under, and each exercise's check right after the last cell under its heading,
    so that a later cell that never ends cannot cost it; checks whose heading is gone come last."""
    known = {e.number: e for e in exercises}
    plan, section, checked = [], None, set()

    def close(number):
        if number in known and number not in checked:
            plan.append(("check", known[number]))
            checked.add(number)

    for cell in nb.cells:
        if cell.cell_type == "markdown":
            heading = EXERCISE_HEADING.match(cell.source.strip())
            if heading:
                close(section)
                section = heading.group(1)
        elif cell.cell_type == "code" and not is_check_cell(cell):
            plan.append(("cell", (cell.source, section)))
    for number in [section, *known]:
        close(number)
    return plan


RESTARTS = 2  # fresh kernels after a kernel that ignores the interrupt of a time limit


def _kernel(copy: Path, limits: Limits, isolation: Isolation, runtime: Path) -> dict:
    """The keyword arguments of NotebookClient that start a kernel for ``copy``: in bubblewrap,
    over Unix sockets in ``runtime``, when ``isolation`` names it; else the usual kernel."""
    if not isolation.bwrap:
        return {"kernel_name": "python3"}
    prefix = sandbox.command(isolation.bwrap, copy.parent, runtime, isolation.hidden, limits.cpu,
                             limits.memory or memory_default(1))
    return {"km": sandbox.kernel_manager(prefix, runtime)}


def _run(copy: Path, nb, exercises, notes, limits: Limits, name: str, student: str,
         isolation: Isolation) -> list[Result]:
    from nbclient import NotebookClient
    from nbclient.exceptions import DeadKernelError

    import torch

    from annotated.support.grading import engine

    plan = _plan(nb, exercises)
    sources = [cell.source for cell in nb.cells if cell.cell_type == "code"]
    held = held_for_review(sources)
    token = f"@@annotated-grade-{secrets.token_hex(16)}@@"
    recorder = f"_annotated_{secrets.token_hex(8)}_"  # the name the setup cell binds the recorder to
    declared = {e.check: declarations()[e.check] for e in exercises if e.check in declarations()}
    with _JUDGING:
        plans = {check: engine.plan(decl) for check, decl in declared.items()}  # built here, sent as data
    deadline = time.monotonic() + limits.notebook
    results: dict[str, Result] = {}
    cell_problem = {}   # exercise number -> the first error or time-out of one of its cells
    ran = []            # the cells that ran within their limit: replayed on a fresh kernel
    position, restarts, stopped = 0, 0, ""

    def row(exercise, verdict, diagnosis="", seconds=0.0, mistake=""):
        results[exercise.number] = _row(student, name, exercise, verdict, diagnosis, notes, seconds, mistake)

    while position < len(plan) and not stopped:
        run = nbformat.v4.new_notebook(metadata=nb.get("metadata", {}))
        # The kernel's sockets: a short path of their own (a Unix socket's path has at most 107 bytes).
        runtime = Path(tempfile.mkdtemp(prefix="annotated-kernel-", dir="/tmp" if os.path.isdir("/tmp") else None))
        LIVE_FOLDERS.add(str(runtime))
        client = NotebookClient(run, timeout=limits.cell, allow_errors=True, interrupt_on_timeout=True,
                                error_on_timeout={"ename": "TimeoutError", "evalue": "time limit", "traceback": []},
                                resources={"metadata": {"path": str(copy.parent)}},
                                **_kernel(copy, limits, isolation, runtime))

        def execute(source: str, limit: float | None = None):
            """Run one cell within its limit: (the cell, timed out, seconds)."""
            cell = nbformat.v4.new_code_cell(source)
            run.cells.append(cell)
            client.timeout = max(1, int(min(limit or limits.cell, deadline - time.monotonic())))
            start = time.monotonic()
            client.execute_cell(cell, len(run.cells) - 1)
            seconds = time.monotonic() - start
            return cell, seconds >= client.timeout, seconds

        def responsive() -> bool:
            """After a time-out: the interrupted kernel answers again (not stuck in code that ignores it)."""
            return not execute("pass", 10)[1]

        wedged, current = False, None
        try:
            with client.setup_kernel():
                execute(_setup_cell(recorder, token).source)  # before any of the notebook's code
                for source in ran:  # after a fresh start: the state the notebook had built
                    execute(source)
                while position < len(plan) and not wedged:
                    kind, item = plan[position]
                    if time.monotonic() >= deadline:
                        stopped = f"the notebook's time limit ({limits.notebook} s) ran out"
                        break
                    position += 1
                    current = (kind, item)
                    if kind == "cell":
                        source, number = item
                        cell, late, _ = execute(source)
                        if late:
                            cell_problem.setdefault(number, f"a cell of it timed out after {client.timeout} s")
                            wedged = not responsive()
                            continue
                        ran.append(source)
                        if error_text(cell):
                            cell_problem.setdefault(number, f"its cell raised {error_text(cell)}")
                        continue
                    exercise = item
                    decl = declared.get(exercise.check)
                    if decl is None:  # never in the course (tests/test_grade.py): no verdict is computed in a kernel
                        row(exercise, "error", f"the grader has no declaration of `{exercise.check}`")
                        continue
                    # the kernel records the calls; this process judges them
                    probes, sent = plans[exercise.check]
                    sent_to, out = (copy.parent / f".annotated-{part}-{secrets.token_hex(8)}.pt"
                                    for part in ("probes", "record"))
                    buffer = io.BytesIO()
                    torch.save(sent, buffer)
                    if buffer.tell() <= MAX_INLINE_BYTES:  # sent in the cell: no file for a thread to change
                        sent_to = base64.b64encode(buffer.getvalue())
                    else:
                        sent_to.write_bytes(buffer.getvalue())
                    cell, late, seconds = execute(_record_cell(exercise, sent_to, out, recorder).source)
                    if late:
                        row(exercise, "timed out",
                            f"the check ran past its limit of {client.timeout} s (an endless loop?)", seconds)
                        wedged = not responsive()
                        continue
                    report = _report_of(cell, token)
                    found = _judged(decl, probes, out, report) or {
                        "verdict": "error", "diagnosis": "the check gave no record: " + (
                            error_text(cell) or "the grader's cell wrote nothing")}
                    if isinstance(sent_to, Path):
                        sent_to.unlink(missing_ok=True)
                    out.unlink(missing_ok=True)
                    if found["verdict"] == "not attempted":
                        found["diagnosis"] = "the function still raises the NotImplementedError of the blank"
                    outside = defined_outside(exercise.function, found.get("origin"), sources)
                    if not outside and found["verdict"] != "error":
                        outside = runs_other_code(exercise.function, exercise, decl, found.get("origin"), report)
                    if outside:
                        found = {"verdict": "defined outside", "diagnosis": outside, "mistake": "defined outside"}
                    elif found["verdict"] == "passed" and held:
                        found = {"verdict": "held for review", "mistake": "held for review", "diagnosis": (
                            "its answer passed, but the notebook reaches into the kernel's machinery (named in the "
                            "note), where it can change what the grader's cells report: read it, grade it by hand")}
                    diagnosis = found["diagnosis"]
                    if found["verdict"] == "error" and exercise.number in cell_problem:
                        diagnosis += f": {cell_problem[exercise.number]}"
                    elif found["verdict"] == "error" and diagnosis.endswith("is not defined"):
                        diagnosis += ": run its cell, and keep the name of the exercise's `def` line"
                    row(exercise, found["verdict"], diagnosis, seconds, found.get("mistake", ""))
        except DeadKernelError:
            died = "ended the kernel (out of memory or CPU time, or the notebook ended it)"
            if current is None:  # the setup or a cell that had run before: nothing to leave out
                stopped = "the kernel died (out of memory or CPU time, or the notebook ended it)"
            elif current[0] == "cell":  # left out, as a cell past its limit: a fresh kernel goes on
                cell_problem.setdefault(current[1][1], f"a cell of it {died}")
                wedged = True
            else:
                if current[1].number not in results:
                    row(current[1], "error", f"its check {died}")
                wedged = True
        finally:
            shutil.rmtree(runtime, ignore_errors=True)
            LIVE_FOLDERS.discard(str(runtime))
        if wedged:
            restarts += 1
            if restarts > RESTARTS:
                stopped = f"the kernel did not stop after a time limit, or died, {restarts} times"
    for exercise in exercises:
        late = cell_problem.get(exercise.number, "")
        if exercise.number in results and ("timed out" in late or "ended the kernel" in late):
            done = results[exercise.number]  # a passing answer too: the cell was left out
            done.notes = "; ".join(filter(None, [done.notes, late.replace("a cell of it", "a cell under its heading")
                                                 + " and was left out"]))
        if exercise.number not in results:
            verdict = "timed out" if "time limit" in stopped else "error"
            row(exercise, verdict, f"not graded: {stopped or 'the notebook stopped'}")
    return [results[e.number] for e in exercises]


# ------------------------------------------------------------------------------ reports


def _first_line(text: str) -> str:
    return text.split("\n", 1)[0]


def table(results: list[Result], full: bool = False, limits: Limits | None = None) -> str:
    """The results as a plain-text table, one line per exercise (and the whole diagnosis with ``full``)."""
    rows = [("notebook", "exercise", "check", "result", "diagnosis")]
    for r in results:
        diagnosis = r.diagnosis if full else _first_line(r.diagnosis)
        if r.notes:
            diagnosis = f"{diagnosis} [note: {r.notes}]" if diagnosis else f"[note: {r.notes}]"
        rows.append((r.notebook, r.exercise, r.check, r.verdict if r.passed else r.verdict.upper(), diagnosis))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row[:4], widths)) + "  " + row[4] for row in rows]
    passed = sum(r.passed for r in results)
    notebooks = list(dict.fromkeys(r.notebook for r in results))
    totals = []
    if len(notebooks) > 1:  # a folder of submissions: each notebook's count, then the whole
        width = max(map(len, notebooks))
        totals = [f"{n.ljust(width)}  {sum(r.passed for r in results if r.notebook == n)} of "
                  f"{sum(r.notebook == n for r in results)} passed" for n in notebooks] + [""]
    footer = [f"{passed} of {len(results)} exercises passed"] + ([str(limits)] if limits else [])
    return "\n".join([*(line.rstrip() for line in lines), "", *totals, *footer])


def _kind(diagnosis: str) -> str:
    """A diagnosis without its numbers, so that the same mistake on other sizes counts once."""
    return re.sub(r"\d+(\.\d+)?(e-?\d+)?", "#", _first_line(diagnosis))


def summary(results: list[Result]) -> list[dict]:
    """Per exercise, over the class: how many passed, each verdict's count, the three most common
    diagnoses of those that did not pass (each with how many students it was)."""
    out = []
    for key in dict.fromkeys((r.exercise, r.check) for r in results if r.check):
        rows = [r for r in results if (r.exercise, r.check) == key]
        kinds = Counter(_kind(r.diagnosis) for r in rows if not r.passed and r.diagnosis)
        example = {}
        for r in rows:
            example.setdefault(_kind(r.diagnosis), _first_line(r.diagnosis))
        out.append({"exercise": key[0], "check": key[1], "submissions": len(rows),
                    "verdicts": {v: n for v in VERDICTS if (n := sum(r.verdict == v for r in rows))},
                    "common_diagnoses": [{"diagnosis": example[k], "count": n} for k, n in kinds.most_common(3)]})
    return out


def summary_text(results: list[Result]) -> str:
    lines = ["Per exercise, over the class (what to teach again):"]
    for item in summary(results):
        verdicts = ", ".join(f"{n} {v}" for v, n in item["verdicts"].items())
        lines.append(f"  {item['exercise']}: {verdicts} (of {item['submissions']})")
        lines += [f"      {d['count']} x {d['diagnosis']}" for d in item["common_diagnoses"]]
    return "\n".join(lines)


FEEDBACK = ("verdict", "diagnosis", "full")


def _mistake_of(result: Result) -> str:
    """A failed exercise's mistake in a few words, without the fix: the declared check's name for
    it, else the first clause of the diagnosis (the checks still written as code start their
    message with what is wrong, then say how to fix it)."""
    if result.mistake:
        return result.mistake
    return re.split(r": |\. |\n", _first_line(result.diagnosis), maxsplit=1)[0].strip()


def with_feedback(results: list[Result], level: str) -> list[Result]:
    """The results as a student may see them: ``full``, every diagnosis whole; ``diagnosis``, a
    failed exercise's mistake named without the corrected code (the other verdicts' reasons, the
    grader's own, kept); ``verdict``, the verdicts alone."""
    if level == "full":
        return results
    shown = []
    for r in results:
        diagnosis = "" if level == "verdict" else _mistake_of(r) if r.verdict == "failed" else r.diagnosis
        shown.append(Result(**{**asdict(r), "diagnosis": diagnosis}))
    return shown


def _write(path: str, text: str) -> None:
    """Write a gradebook whole or not at all (a full disk leaves the earlier one as it was)."""
    if path == "-":
        sys.stdout.write(text)
    else:
        with atomic_write(path, mode="w") as out:
            out.write(text)


def _sandbox_word(wrap: sandbox.Bubblewrap | None) -> str:
    return "bubblewrap" if wrap is not None and wrap.present else "none"


def write_long_csv(results: list[Result], path: str, wrap: sandbox.Bubblewrap | None = None) -> None:
    """The long form: one row per student, notebook and exercise (``--csv PATH --long``)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=(*COLUMNS, "sandbox"), lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    for r in results:
        writer.writerow(asdict(r) | {"sandbox": _sandbox_word(wrap)})
    _write(path, buffer.getvalue())


_BY_CHECK = {e.check: e for exercises in NOTEBOOKS.values() for e in exercises}


def _column(check: str) -> str:
    exercise = _BY_CHECK[check]
    return f"{exercise.number} {exercise.function}"


def gradebook_rows(results: list[Result], left_out: dict | None = None) -> tuple[list[str], list[dict]]:
    """One row per student (a notebook given alone is its own row, by its name), a column of
    points per exercise graded (1 passed, 0 not; empty where the student handed in no notebook of
    that chapter), the total, the most and notes (a second notebook of a chapter left out, a
    notebook that could not be graded)."""
    checks = [e.check for exercises in NOTEBOOKS.values() for e in exercises
              if any(r.check == e.check for r in results)]
    columns = [_column(c) for c in checks]
    rows: dict[str, dict] = {}
    for r in results:
        key = r.student or r.notebook
        row = rows.setdefault(key, {"student": key, "notes": []})
        if r.check:
            row[_column(r.check)] = int(r.passed)
        else:
            row["notes"].append(f"{r.notebook}: {r.verdict}, {_first_line(r.diagnosis)}")
    for key, names in (left_out or {}).items():
        rows.setdefault(key, {"student": key, "notes": []})["notes"].append(
            "left out (another notebook of the same chapter was graded): " + ", ".join(names))
    for row in rows.values():
        row["points"] = sum(row.get(c, 0) for c in columns)
        row["max_points"] = len(columns)
        row["notes"] = "; ".join(row["notes"])
    return ["student", *columns, "points", "max_points", "notes"], list(rows.values())


def write_csv(results: list[Result], path: str, wrap: sandbox.Bubblewrap | None = None,
              left_out: dict | None = None) -> None:
    """The gradebook a learning management system imports (``--csv PATH``): one row per student,
    one column of points per exercise, the total; the sandbox in a last column."""
    columns, rows = gradebook_rows(results, left_out)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=(*columns, "sandbox"), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow(row | {"sandbox": _sandbox_word(wrap)})
    _write(path, buffer.getvalue())


def write_json(results: list[Result], path: str, limits: Limits, wrap: sandbox.Bubblewrap | None = None,
               submissions: list[Submission] = (), left_out: dict | None = None) -> None:
    columns, rows = gradebook_rows(results, left_out)
    document = {"sandbox": _sandbox_word(wrap) if wrap is None or wrap.present else f"none: {wrap.why_not}",
                "limits": {"cell_seconds": limits.cell, "notebook_seconds": limits.notebook},
                "submissions": [{"student": s.student, "notebook": s.name, "sha256": s.sha256} for s in submissions],
                "left_out": left_out or {},
                "results": [asdict(r) for r in results], "gradebook": rows, "summary": summary(results)}
    _write(path, json.dumps(document, indent=1, ensure_ascii=False) + "\n")


def _writable(path: str | None, option: str) -> None:
    """A gradebook path must be writable before any notebook runs (a one-line error, not an hour lost)."""
    if path in (None, "-"):
        return
    parent = Path(path).resolve().parent
    if not parent.is_dir():
        raise UsageError(f"{option} {path}: the folder {parent} does not exist")
    if Path(path).is_dir():
        raise UsageError(f"{option} {path} is a folder; give a file name")
    if not os.access(parent, os.W_OK):
        raise UsageError(f"{option} {path}: the folder {parent} is not writable")


def check_outputs(outputs: dict[str, str | None], inputs: list[str], found: list[Path]) -> None:
    """Refuse, before any work, a gradebook that would replace a submission or another
    gradebook: an output path that is an input (or a notebook: ``--csv a/01.ipynb b/01.ipynb``
    takes the first notebook as the gradebook), or the same path for two outputs."""
    taken: dict[Path, str] = {}
    notebooks = {p.resolve() for p in found} | {Path(p).resolve() for p in inputs}
    for option, path in outputs.items():
        if path in (None, "-"):
            continue
        resolved = Path(path).resolve()
        if resolved in notebooks or resolved.suffix == ".ipynb":
            raise UsageError(f"{option} {path} is a notebook: the gradebook would replace it. Give the "
                             f"gradebook's own file name right after {option} (did {option} take the first "
                             "notebook as its value?)")
        if resolved in taken:
            raise UsageError(f"{taken[resolved]} and {option} name the same file, {path}: one would replace "
                             "the other; give each its own")
        taken[resolved] = option
        _writable(path, option)
        # a link, a committed file of the course (README.md), the shipped model: refused now, not after grading
        check_output_file(path, option=option, force_option=None)


def one_per_chapter(submissions: list[Submission]) -> tuple[list[Submission], dict[str, list[str]]]:
    """A student's folder with two notebooks of the same chapter (a ``-Copy1`` beside the one
    handed in): the one with the name as handed out is graded (else the first by name), the
    others left out and reported, per student. Notebooks given alone are each graded."""
    kept, left_out, seen = [], {}, {}
    chapters = {}
    for sub in submissions:
        chapter = None
        if sub.student:
            try:
                chapter = which_notebook(sub.path, nbformat.reads(sub.data.decode("utf-8"), as_version=4))
            except Exception:  # noqa: BLE001 - not a notebook: graded, to say so
                chapter = None
        chapters[id(sub)] = chapter
        if chapter is None:
            continue
        seen.setdefault((sub.student, chapter), []).append(sub)
    chosen = {}
    for key, subs in seen.items():
        exact = [s for s in subs if s.path.stem == key[1]]
        chosen[key] = (exact or subs)[0]
        for other in subs:
            if other is not chosen[key]:
                left_out.setdefault(key[0], []).append(other.name)
    for sub in submissions:
        key = (sub.student, chapters[id(sub)])
        if chapters[id(sub)] is None or chosen[key] is sub:
            kept.append(sub)
    return kept, left_out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m annotated.support.grade",
                                     description="Grade exercise notebooks with the course's checks: one verdict "
                                                 "per exercise.")
    parser.add_argument("paths", nargs="+", help="exercise notebooks, or folders of them (a subfolder per student)")
    parser.add_argument("--timeout", type=int, default=CELL_SECONDS,
                        help=f"seconds a cell, or a check, may run (default {CELL_SECONDS})")
    parser.add_argument("--notebook-timeout", type=int, default=NOTEBOOK_SECONDS,
                        help=f"seconds a whole notebook may run, its checks included (default {NOTEBOOK_SECONDS})")
    parser.add_argument("--full", action="store_true", help="print each diagnosis whole, not its first line")
    parser.add_argument("--csv", metavar="PATH",
                        help="write the gradebook as CSV, one row per student, a column of points per exercise "
                             "(- for the standard output)")
    parser.add_argument("--long", action="store_true",
                        help="with --csv: one row per student, notebook and exercise, with verdicts and diagnoses")
    parser.add_argument("--json", metavar="PATH", help="write the results, the gradebook and the class summary as "
                                                       "JSON (- too)")
    parser.add_argument("--feedback", choices=FEEDBACK, default="full",
                        help="what the report and the gradebooks say of each exercise: the verdict alone, the "
                             "mistake named without the corrected code (diagnosis), or the whole diagnosis (full, "
                             "the default)")
    parser.add_argument("--jobs", type=int, default=min(4, os.cpu_count() or 1),
                        help="notebooks run at once, each in its own kernel (default: the cores, at most 4)")
    parser.add_argument("--memory", type=float, metavar="GB",
                        help="GB of memory a kernel may hold in the sandbox (default: the machine's memory shared "
                             "by the --jobs kernels, between 2 and 8)")
    args = parser.parse_args(argv)
    for option, value in (("--timeout", args.timeout), ("--notebook-timeout", args.notebook_timeout)):
        if not 1 <= value <= MAX_SECONDS:
            parser.error(f"{option} must be a positive number of seconds, at most {MAX_SECONDS:g} (a day: longer "
                         f"ones overflow the kernel's timers), got {value}")
    most_jobs = max(4, machine_cores())  # each job is a kernel of its own, a process with its memory
    if not 1 <= args.jobs <= most_jobs:
        parser.error(f"--jobs must be a positive number of notebooks, at most {most_jobs} (this machine's CPU cores, "
                     f"or 4: each job is a kernel of its own, more only wait on each other), got {args.jobs}")
    if args.csv == "-" and args.json == "-":
        parser.error("--csv - and --json - would both write to the standard output: give one of them a file")
    if args.memory is not None and not 0.5 <= args.memory <= 1024:
        parser.error(f"--memory must be a number of GB between 0.5 and 1024, got {args.memory:g}")
    memory = int(args.memory * 2**30) if args.memory else memory_default(args.jobs)
    limits = Limits(args.timeout, args.notebook_timeout, memory)

    if args.long and not args.csv:
        parser.error("--long is the form of the --csv gradebook: give --csv PATH too")

    def body() -> int:
        found = [nb for p in args.paths for nb in notebooks_in(Path(p))]
        check_outputs({"--csv": args.csv, "--json": args.json}, args.paths, [path for path, _, _ in found])
        # Every file read and hashed before the first kernel starts; one notebook per chapter and student.
        submissions, left_out = one_per_chapter(snapshot(found))
        wrap = sandbox.bubblewrap()
        hidden = (*(Path(p) for p in args.paths), SOLUTIONS,
                  *(Path(p) for p in (args.csv, args.json) if p not in (None, "-")))
        isolation = Isolation(wrap.path, tuple(hidden))
        line = wrap.describe()
        if wrap.present:
            line += f"; each kernel may hold {limits.memory / 2**30:.1f} GB and use {limits.cpu} s of CPU time"

        def run(submission: Submission) -> list[Result]:
            print(f"grading {submission.path} ...", file=sys.stderr, flush=True)
            return grade_submission(submission, limits, isolation)

        # Each notebook runs in a kernel of its own (a separate process): threads only wait on them.
        pool = ThreadPoolExecutor(max_workers=min(args.jobs, len(submissions)))
        try:
            results = [r for done in pool.map(run, submissions) for r in done]
        finally:  # not a with block: on SIGTERM it would wait for every running notebook to end
            pool.shutdown(wait=False, cancel_futures=True)
        to_stdout = "-" in (args.csv, args.json)
        shown = with_feedback(results, args.feedback)
        report = line + "\n\n"
        if left_out:
            report += "\n".join(f"{student}: left out {', '.join(names)} (another notebook of the same chapter "
                                 "is graded)" for student, names in left_out.items()) + "\n\n"
        report += table(shown, args.full, limits)
        if len({(r.student, r.notebook) for r in results}) > 1 and any(r.check for r in results):
            report += "\n\n" + summary_text(shown)
        print(report, file=sys.stderr if to_stdout else sys.stdout)
        if args.csv:
            if args.long:
                write_long_csv(shown, args.csv, wrap)
            else:
                write_csv(shown, args.csv, wrap, left_out)
        if args.json:
            write_json(shown, args.json, limits, wrap, submissions, left_out)
        return 0 if all(r.passed for r in results) else 1

    def stoppable() -> int:
        try:
            with signals_as_interrupt():  # SIGTERM and SIGHUP (a cancelled job, a closed terminal) as Ctrl-C
                return body()
        except Stopped as stopped:
            for folder in list(LIVE_FOLDERS):  # the copies of the submissions in /tmp
                shutil.rmtree(folder, ignore_errors=True)
            print(f"{parser.prog}: {stopped}", file=sys.stderr, flush=True)
            sys.stdout.flush()
            # The threads would run their notebooks to the end; the kernels end with the grader (bwrap
            # --die-with-parent) as they did when the signal ended it.
            os._exit(128 + stopped.signum)

    return run_command(stoppable, parser.prog)


if __name__ == "__main__":
    raise SystemExit(main())
