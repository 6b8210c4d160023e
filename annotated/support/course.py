"""Which notebook teaches which module: the map that the verbatim test checks; and which files are
the course's own (what the site may publish, what no build may replace)."""

import functools
import subprocess
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"

# module of ``annotated`` -> the notebook whose code cells define it, verbatim.
TAUGHT_MODULES: dict[str, str] = {
    "annotated.softmax": "01_softmax_and_scaling.ipynb",
    "annotated.attention": "02_scaled_dot_product_attention.ipynb",
    "annotated.masks": "03_masking.ipynb",
    "annotated.multi_head": "04_multi_head_attention.ipynb",
    "annotated.positional": "05_positional_encoding.ipynb",
    "annotated.feed_forward": "06_feed_forward_residual_layer_norm.ipynb",
    "annotated.layer_norm": "06_feed_forward_residual_layer_norm.ipynb",
    "annotated.residual": "06_feed_forward_residual_layer_norm.ipynb",
    "annotated.model": "07_the_full_model.ipynb",
    "annotated.batching": "08_training.ipynb",
    "annotated.synthetic": "08_training.ipynb",
    "annotated.label_smoothing": "08_training.ipynb",
    "annotated.schedule": "08_training.ipynb",
    "annotated.training": "08_training.ipynb",
    "annotated.decoding": "09_decoding.ipynb",
    "annotated.beam_search": "09_decoding.ipynb",
    "annotated.data": "10_data_and_byte_pairs.ipynb",
    "annotated.bpe": "10_data_and_byte_pairs.ipynb",
    "annotated.vocab": "10_data_and_byte_pairs.ipynb",
    "annotated.evaluation": "11_translating_german_to_english.ipynb",
    "annotated.heads": "12_what_the_heads_learned.ipynb",
    "annotated.alignment": "12_what_the_heads_learned.ipynb",
    "annotated.local_attention": "13_the_cost_of_attention.ipynb",
    "annotated.linformer": "13_the_cost_of_attention.ipynb",
    "annotated.bigbird": "13_the_cost_of_attention.ipynb",
    "annotated.learned_positions": "14_positions.ipynb",
    "annotated.relative_positions": "14_positions.ipynb",
    "annotated.rotary": "14_positions.ipynb",
    "annotated.variations": "15_model_variations.ipynb",
}

# Public objects of a taught module whose code an earlier notebook shows: module -> (notebook, names).
# ``greedy_decode_simple`` is notebook 08's way of reading the copy task's answers, before 09 builds the cache.
TAUGHT_EARLIER: dict[str, tuple[str, frozenset[str]]] = {
    "annotated.decoding": ("08_training.ipynb", frozenset({"greedy_decode_simple"})),
}

# Public objects of a taught module that its notebook describes in prose and imports instead of showing:
# machinery whose idea a shorter function of the same notebook teaches. module -> (names, the notebook's stand-in).
SHOWN_IN_PROSE: dict[str, frozenset[str]] = {
    # The batched beam search: 40 lines of index arithmetic; notebook 09 teaches ``simple_beam_search``, traces
    # it by hand, and checks the batched version against it token for token.
    "annotated.beam_search": frozenset({"beam_search", "select_rows", "set_aside_finished", "compete_live"}),
}


HIDDEN_OR_BUILT = {"build", "dist", "__pycache__", "node_modules"}  # without git: never the course's files


@functools.lru_cache(maxsize=4)
def _git_files(root: Path) -> frozenset[str] | None:
    """The files of the repository at ``root`` that git tracks or would track (untracked but not
    ignored), as paths from the top; None when ``root`` is no git checkout or git is missing."""
    if not (root / ".git").exists():
        return None
    try:
        listed = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others",
                                 "--exclude-standard"], capture_output=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return frozenset(name for name in listed.decode("utf-8", "replace").split("\0") if name)


def is_course_file(repo_path: PurePosixPath, root: Path = ROOT) -> bool:
    """Whether a file of the repository (a path from its top) is one of the course's own files:
    one git tracks or would track; without git, one with no hidden part in its path (``.git/``,
    ``.env``) outside ``build/`` and the caches."""
    known = _git_files(root)
    if known is not None:
        return repo_path.as_posix() in known
    return not any(part.startswith(".") or part in HIDDEN_OR_BUILT or part.endswith(".egg-info")
                   for part in repo_path.parts)


def course_paths(root: Path = ROOT) -> list[Path]:
    """The course's files and its git folder: what a build's output folder must never hold,
    since replacing the folder would delete them."""
    known = _git_files(root)
    if known is None:
        return [entry for entry in root.iterdir() if entry.name not in HIDDEN_OR_BUILT]
    return [root / ".git", *(root / name for name in sorted(known))]
