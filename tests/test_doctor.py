"""annotated.doctor: a healthy environment passes every check; each kind of breakage the tests
make (a package hidden or too old, a corrupt data file, an unwritable cache, a missing or
foreign Jupyter kernel, a changed model file) is one FAIL line with its fix and exit code 1.

The command runs in a subprocess where the environment matters (PYTHONPATH, PATH,
XDG_CACHE_HOME, JUPYTER_PATH); the checks that need no fresh interpreter are called directly.
Nothing here touches the network: --offline, or a loopback address.
"""

import http.server
import importlib.metadata
import json
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import threading
from pathlib import Path

import pytest

import annotated.support.doctor as doctor
from annotated.support.course import ROOT
from annotated.support.download import DOWNLOAD_COMMAND, ENV_VAR, MULTI30K_FILES
from annotated.support.pretrained import PRETRAINED_DIR

REAL_DATA = os.environ.get(ENV_VAR)
needs_real_data = pytest.mark.skipif(
    not REAL_DATA, reason=f"{ENV_VAR} is unset; point it at the Multi30k .gz files (../shared/data/multi30k)")


def run_doctor(*args: str, env: dict[str, str] | None = None, pythonpath: Path | None = None,
               timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -m annotated.doctor ARGS`` in a fresh interpreter with this environment's
    scripts first on PATH (as when it is activated), plus ``env``."""
    full = dict(os.environ)
    full["PATH"] = os.pathsep.join([sysconfig.get_path("scripts"), full.get("PATH", "")])
    if pythonpath is not None:
        full["PYTHONPATH"] = os.pathsep.join(filter(None, [str(pythonpath), full.get("PYTHONPATH")]))
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "annotated.doctor", *args], cwd=ROOT, env=full,
                          capture_output=True, text=True, timeout=timeout)


def report(proc: subprocess.CompletedProcess) -> dict[str, tuple[str, str]]:
    """Check name -> (status, rest of the line and its fix line), from the doctor's output."""
    lines = proc.stdout.splitlines()
    found: dict[str, tuple[str, str]] = {}
    for i, line in enumerate(lines):
        status, _, rest = line.partition(" ")
        if status in ("OK", "FAIL"):
            name, _, detail = rest.strip().partition(": ")
            fix = lines[i + 1] if status == "FAIL" and i + 1 < len(lines) else ""
            assert name not in found, f"{name!r} reported twice:\n{proc.stdout}"
            found[name] = (status, detail + "\n" + fix)
    return found


def copy_of_data(folder: Path) -> Path:
    folder.mkdir()
    for name in MULTI30K_FILES:
        shutil.copyfile(Path(REAL_DATA) / name, folder / name)
    return folder


# --- the whole command --------------------------------------------------------------------

@needs_real_data
def test_a_healthy_environment_passes_every_check_once_and_exits_0(tmp_path):
    data = copy_of_data(tmp_path / "data")
    proc = run_doctor("--offline", "--data-dir", str(data), env={"XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = report(proc)
    needed = [doctor.parse_requirement(r) for r in importlib.metadata.requires("annotated")]
    labels = {n.label for n in needed if n is not None}
    assert {"pytest (for the tests)", "torch"} <= labels
    expected = {"Python", "spaCy tokenizers", "Multi30k data", "shipped model", "GPU", "Jupyter command",
                "Jupyter kernel", "cache folder"} | labels
    assert set(found) == expected, proc.stdout
    assert all(status == "OK" for status, _ in found.values()), proc.stdout
    assert "build" in found["torch"][1], "torch's line says its build (CPU, CUDA or ROCm)"
    assert str(data) in found["Multi30k data"][1]
    assert proc.stdout.splitlines()[-1] == f"{len(expected)} checks, 0 failed"


@pytest.fixture(scope="module")
def broken_packages(tmp_path_factory):
    """One run of the package checks with three packages broken on PYTHONPATH: tqdm hidden by a
    folder that fails to import, safetensors seen at an old version, spaCy that fails to import."""
    fake = tmp_path_factory.mktemp("fake_site")
    for module in ("tqdm", "spacy"):
        (fake / module).mkdir()
        (fake / module / "__init__.py").write_text(f"raise ImportError('{module} is broken on purpose')\n")
    info = fake / "safetensors-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: safetensors\nVersion: 0.1.0\n")
    return fake, run_doctor("--only", "packages", "--only", "spacy", pythonpath=fake)


def test_a_package_that_fails_to_import_is_a_fail_naming_the_folder_that_hides_it(broken_packages):
    fake, proc = broken_packages
    status, text = report(proc)["tqdm"]
    assert status == "FAIL", proc.stdout
    assert "import tqdm` fails" in text and "broken on purpose" in text
    assert f"fix: {fake / 'tqdm'} hides the installed tqdm" in text
    assert proc.returncode == 1


def test_a_package_older_than_the_course_needs_is_a_fail_with_the_upgrade_command(broken_packages):
    _, proc = broken_packages
    status, text = report(proc)["safetensors"]
    assert status == "FAIL", proc.stdout
    assert "0.1.0 is installed; the course needs >=0.4" in text
    assert 'fix: pip install --upgrade "safetensors>=0.4"' in text


def test_a_broken_spacy_fails_the_tokenizer_check_too_and_the_rest_still_runs(broken_packages):
    _, proc = broken_packages
    found = report(proc)
    assert found["spacy"][0] == "FAIL" and found["spaCy tokenizers"][0] == "FAIL", proc.stdout
    assert "spaCy cannot tokenize" in found["spaCy tokenizers"][1]
    assert found["numpy"][0] == found["subword-nmt (for the tests)"][0] == "OK"
    assert "Traceback" not in proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1] == f"{len(found)} checks, 4 failed"  # tqdm, safetensors, spacy twice


def test_a_torch_that_fails_to_import_is_a_fail_line_not_a_traceback(tmp_path):
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("raise ImportError('torch is broken on purpose')\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    if subprocess.run([sys.executable, "-c", "import annotated"], env=env, capture_output=True).returncode:
        pytest.skip("annotated/__init__.py imports torch at once, so no command of the package starts without it")
    proc = run_doctor("--only", "packages", "--only", "model", "--only", "gpu", pythonpath=tmp_path)
    found = report(proc)
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert found["torch"][0] == found["shipped model"][0] == found["GPU"][0] == "FAIL"
    assert "fix the torch line above first" in found["GPU"][1]


@needs_real_data
def test_a_corrupt_data_file_is_a_fail_naming_it_and_the_download_command(tmp_path):
    data = copy_of_data(tmp_path / "data")
    damaged = data / "val.en.gz"
    damaged.write_bytes(damaged.read_bytes()[:-1] + b"!")
    proc = run_doctor("--only", "data", "--data-dir", str(data))
    status, text = report(proc)["Multi30k data"]
    assert status == "FAIL" and proc.returncode == 1, proc.stdout
    assert "val.en.gz" in text and "val.de.gz" not in text and "wrong SHA-256" in text
    assert f"`{DOWNLOAD_COMMAND} --dest {data}`" in text


def test_a_cache_folder_that_cannot_be_created_is_a_fail_with_the_xdg_fix(tmp_path):
    not_a_folder = tmp_path / "cache"
    not_a_folder.write_text("a file where the cache folder should be\n")
    proc = run_doctor("--only", "cache", env={"XDG_CACHE_HOME": str(not_a_folder)})
    status, text = report(proc)["cache folder"]
    assert status == "FAIL" and proc.returncode == 1, proc.stdout
    assert f"{not_a_folder} is a file, not a folder" in text and "(from XDG_CACHE_HOME)" in text
    assert "fix: export XDG_CACHE_HOME=" in text


def test_a_cache_folder_that_refuses_a_file_is_a_fail_and_a_writable_one_is_left_empty(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    assert doctor.check_cache(cache).ok and list(cache.iterdir()) == []

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(cache))

    monkeypatch.setattr(doctor.tempfile, "mkstemp", refuse)
    result = doctor.check_cache(cache)
    assert not result.ok and f"cannot write in {cache}" in result.detail and "Permission denied" in result.detail


def test_a_missing_kernel_is_a_fail_with_the_ipykernel_command():
    proc = run_doctor("--only", "kernel", "--kernel", "no-such-kernel")
    status, text = report(proc)["Jupyter kernel"]
    assert status == "FAIL" and proc.returncode == 1, proc.stdout
    assert "no kernel named 'no-such-kernel', given with --kernel" in text
    assert f"{sys.executable} -m ipykernel install --user --name no-such-kernel" in text


def test_a_kernel_whose_python_cannot_import_the_course_is_a_fail(tmp_path):
    # A Python without this environment's packages: -S skips site-packages, where torch lives.
    other_python = tmp_path / "other-python"
    other_python.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    other_python.chmod(0o755)
    kernel = tmp_path / "jupyter" / "kernels" / "elsewhere"
    kernel.mkdir(parents=True)
    (kernel / "kernel.json").write_text(json.dumps({
        "argv": [str(other_python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Another environment", "language": "python"}))
    proc = run_doctor("--only", "kernel", "--kernel", "elsewhere", env={"JUPYTER_PATH": str(tmp_path / "jupyter")})
    status, text = report(proc)["Jupyter kernel"]
    assert status == "FAIL" and proc.returncode == 1, proc.stdout
    assert f"runs {other_python}, which cannot import the course" in text and "ModuleNotFoundError" in text
    assert "ipykernel install --user --name elsewhere" in text and "-m pip install -e" in text
    assert report(proc)["Jupyter command"][0] == "OK"


def test_a_kernel_of_this_environment_that_cannot_start_points_to_the_package_lines(tmp_path):
    (tmp_path / "ipykernel").mkdir()
    (tmp_path / "ipykernel" / "__init__.py").write_text("raise ImportError('ipykernel is broken on purpose')\n")
    proc = run_doctor("--only", "kernel", pythonpath=tmp_path)
    status, text = report(proc)["Jupyter kernel"]
    assert status == "FAIL" and proc.returncode == 1, proc.stdout
    assert "runs this Python" in text and "ipykernel is broken on purpose" in text
    assert "fix: fix the package lines above" in text


@pytest.mark.parametrize("args, message", [
    (["--no-such-option"], "unrecognized arguments"),
    (["--only", "everything"], "invalid choice"),
    (["--data-dir", " "], "an empty path"),
    (["--kernel", "two words"], "is not a kernel name"),
    (["--kernel"], "expected one argument"),
])
def test_bad_arguments_exit_2_with_a_message(args, message, capsys):
    with pytest.raises(SystemExit) as stop:
        doctor.main(args)
    assert stop.value.code == 2
    assert message in capsys.readouterr().err


def test_bad_arguments_exit_2_from_the_command_line_too():
    proc = run_doctor("--only", "everything")
    assert proc.returncode == 2 and "invalid choice: 'everything'" in proc.stderr
    assert proc.stdout == ""


def test_help_says_what_each_option_does(capsys):
    with pytest.raises(SystemExit) as stop:
        doctor.main(["--help"])
    assert stop.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for option in ("--offline", "--data-dir DIR", "--kernel NAME", "--only CHECK"):
        assert option in text
    assert "0 when every check passes, 1 when one fails, 2 for bad options" in text


# --- single checks, in this process --------------------------------------------------------

def test_a_python_older_than_requires_python_fails_and_a_newer_passes():
    old = doctor.check_python("3.9.18")
    assert not old.ok and "the course needs >=3.11" in old.detail and "venv" in old.fix
    assert doctor.check_python("3.13.1").ok


def test_the_test_extra_is_told_apart_and_other_extras_and_platforms_are_left_out():
    assert doctor.parse_requirement('pytest>=8; extra == "test"') == doctor.Needed("pytest>=8", "pytest", ">=8", True)
    assert doctor.parse_requirement("torch>=2.4") == doctor.Needed("torch>=2.4", "torch", ">=2.4", False)
    assert doctor.parse_requirement('sphinx>=7; extra == "docs"') is None
    assert doctor.parse_requirement('pywin32; sys_platform == "no-such-platform"') is None


def test_without_packaging_requirements_are_still_read_and_checked_for_presence(monkeypatch):
    monkeypatch.setattr(doctor, "_packaging_error", lambda: "ModuleNotFoundError: No module named 'packaging'")
    needed = doctor.parse_requirement('subword-nmt>=0.3.8; extra == "test"')
    assert needed == doctor.Needed("subword-nmt>=0.3.8", "subword-nmt", ">=0.3.8", True)
    assert doctor.parse_requirement('sphinx>=7; extra == "docs"') is None
    result = doctor.check_requirement(needed)
    assert result.ok and "not compared with >=0.3.8: packaging is missing" in result.detail
    assert not doctor.check_requirement(doctor.Needed("no-such-dist>=1", "no-such-dist", ">=1", False)).ok
    names = [name for _, name, _ in doctor.plan(doctor.Options(only=("python", "packages")))]
    assert names[:2] == ["Python", "packaging"]


def test_an_uninstalled_dependency_fails_with_the_pip_command():
    result = doctor.check_requirement(doctor.Needed("no-such-dist>=1", "no-such-dist", ">=1", True))
    assert not result.ok and result.name == "no-such-dist (for the tests)"
    assert "not installed; the tests need no-such-dist>=1" in result.detail
    assert result.fix == 'pip install "no-such-dist>=1"'


def test_a_tokenizer_that_splits_differently_is_a_fail_showing_both(monkeypatch):
    sentence, tokens = doctor.TOKENIZER_SAMPLES["en"]
    monkeypatch.setitem(doctor.TOKENIZER_SAMPLES, "en", (sentence, [*tokens[:2], "'S", *tokens[3:]]))
    result = doctor.check_tokenizers()
    assert not result.ok and "('en') into" in result.detail and "\"'S\"" in result.detail
    monkeypatch.undo()
    assert doctor.check_tokenizers().ok


def test_without_local_data_offline_is_a_fail_that_names_the_variable(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    result = doctor.check_data(offline=True)
    assert not result.ok and "--offline" in result.detail
    assert f"export {ENV_VAR}=DIR" in result.fix and DOWNLOAD_COMMAND in result.fix


@pytest.fixture
def head_server():
    """A loopback server answering HEAD with 200: the download address, reachable."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self):
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def test_without_local_data_the_download_address_decides(tmp_path, monkeypatch, head_server):
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    reachable = doctor.check_data(base_url=head_server)
    assert reachable.ok and "will download them on first use" in reachable.detail
    with socket.socket() as sock:  # a port where nothing listens: refused at once, as offline
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}/"
    unreachable = doctor.check_data(base_url=closed, timeout=2)
    assert not unreachable.ok and "cannot be reached" in unreachable.detail and "refused" in unreachable.detail


def test_a_local_folder_missing_a_file_is_a_fail_and_never_falls_back_to_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    result = doctor.check_data()
    assert not result.ok and f"(from {ENV_VAR}) lacks train.de.gz" in result.detail
    gone = doctor.check_data(tmp_path / "nowhere")
    assert not gone.ok and "(from --data-dir) does not exist" in gone.detail


def test_a_changed_model_file_is_a_fail_naming_it(tmp_path):
    copy = tmp_path / "pretrained"
    shutil.copytree(PRETRAINED_DIR, copy)
    assert doctor.check_model(copy).ok
    vocab = copy / "vocab.txt"
    vocab.write_text(vocab.read_text(encoding="utf-8").replace("\n", "\n\n", 1), encoding="utf-8")
    changed = doctor.check_model(copy)
    assert not changed.ok and f"{vocab} does not match its checksum" in changed.detail and changed.fix
    (copy / "config.json").unlink()
    missing = doctor.check_model(copy)
    assert not missing.ok and "lacks config.json" in missing.detail


def test_a_model_file_of_another_model_is_a_fail_even_with_checksums_computed_again(tmp_path):
    from annotated.support.pretrained import FILES, sha256

    copy = tmp_path / "pretrained"
    shutil.copytree(PRETRAINED_DIR, copy)
    lines = (copy / "vocab.txt").read_text(encoding="utf-8").splitlines()
    lines[-1], lines[-2] = lines[-2], lines[-1]  # the same size and pieces, two ids that mean other words
    (copy / "vocab.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (copy / "SHA256SUMS").write_text("".join(f"{sha256(copy / name)}  {name}\n" for name in FILES))
    result = doctor.check_model(copy)
    assert not result.ok and f"{copy / 'vocab.txt'} is not the vocabulary this model was trained with" in result.detail
    assert result.fix.startswith("export the model again")


def test_the_commands_exit_quietly_when_their_output_pipe_closes(tmp_path, tiny_bpe_checkpoint):
    """`python -m annotated.doctor | head -1`: a closed pipe is no traceback, and the status is the
    one a shell reports for a program that SIGPIPE ended (141), as for other Unix tools."""
    commands = [[sys.executable, "-m", "annotated.doctor", "--only", "python"],
                [sys.executable, "-m", "annotated.support.pretrained", "export", str(tiny_bpe_checkpoint), "--out",
                 str(tmp_path / "exported")]]
    for command in commands:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   cwd=ROOT)
        process.stdout.close()  # the reader is gone before the first line is written
        err = process.stderr.read().decode()
        assert process.wait(timeout=300) == 141 and err == "", (command, err)
    assert (tmp_path / "exported" / "SHA256SUMS").is_file()  # export's work was done before its last line


def test_without_a_gpu_the_line_passes_and_says_the_cpu_is_used():
    import torch

    if torch.cuda.is_available() or torch.backends.mps.is_available():
        pytest.skip("this machine has a GPU: the healthy run checks it")
    result = doctor.check_gpu()
    assert result.ok and result.detail.startswith("no GPU: the notebooks run on the CPU")


def test_a_gpu_that_torch_sees_but_cannot_use_is_a_fail(monkeypatch):
    import torch

    def unusable(self, *args, **kwargs):
        raise RuntimeError("CUDA error: no kernel image is available for execution on the device")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=0: "Test GPU")
    monkeypatch.setattr(torch.Tensor, "to", unusable)
    result = doctor.check_gpu()
    assert not result.ok and "CUDA, Test GPU: torch sees it but cannot compute on it" in result.detail
    assert "CUDA_VISIBLE_DEVICES" in result.fix


def test_a_jupyter_command_from_another_environment_is_a_fail(tmp_path, monkeypatch):
    (tmp_path / "jupyter").write_text("#!/bin/sh\n")
    (tmp_path / "jupyter").chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    result = doctor.check_jupyter_command()
    assert not result.ok and f"{tmp_path / 'jupyter'}, from another environment" in result.detail
    assert f"{sys.executable} -m jupyter lab" in result.fix
    monkeypatch.setenv("PATH", sysconfig.get_path("scripts"))
    assert doctor.check_jupyter_command().ok


def test_a_bare_python_in_a_kernel_means_the_python_jupyter_runs_in():
    assert doctor.kernel_python(["python", "-m", "ipykernel_launcher"]) == sys.executable
    assert doctor.kernel_python(["/opt/other/bin/python", "-m", "ipykernel_launcher"]) == "/opt/other/bin/python"


def test_the_kernel_is_the_one_the_notebooks_name():
    first = sorted((ROOT / "notebooks").glob("*.ipynb"))[0]
    assert doctor.notebook_kernel() == json.loads(first.read_text(encoding="utf-8"))["metadata"]["kernelspec"]["name"]


def test_a_check_that_breaks_is_reported_as_a_fail_and_the_others_still_run(monkeypatch, capsys):
    def broken():
        raise RuntimeError("a bug in the check")

    monkeypatch.setattr(doctor, "check_cache", broken)
    assert doctor.main(["--only", "cache", "--only", "python"]) == 1
    out = capsys.readouterr().out
    assert "FAIL cache folder: the check itself failed: RuntimeError: a bug in the check" in out
    assert out.startswith("OK   Python:") and out.splitlines()[-1] == "2 checks, 1 failed"
