"""The JavaScript the slide decks and the course site need, served from the build folder so
that both work with the network off: reveal.js (the slides) and MathJax 3 (the equations,
drawn as SVG, so no font files are fetched either).

Neither is on PyPI. Their release tarballs come from the npm registry once, are checked
against the SHA-256 below, and are kept in the cache (``~/.cache/annotated/``, or under
``$XDG_CACHE_HOME``). Without network, copy the two tarballs into a folder and give it with
``ANNOTATED_WEB_ASSETS=DIR`` (``npm pack reveal.js@5.2.1 mathjax@3.2.2`` makes them, as does
any machine that has built the decks once: they are in its cache).

``python -m annotated.support.web_assets`` fetches both into the cache ahead of time (the
README's install step). Nothing is loaded from a CDN at presentation time: :func:`install` unpacks what the pages use
into ``<build>/assets/``, and the pages refer to it by relative paths.
"""

import argparse
import os
import sys
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from annotated.support.download import ChecksumError, DownloadError, default_cache_dir, fetch, sha256_file
from annotated.support.errors import CourseError, run_command
from annotated.support.files import build_folder, signals_as_interrupt

ENV_VAR = "ANNOTATED_WEB_ASSETS"


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    sha256: str  # of the registry's tarball (which also matches the SHA-512 the registry publishes)
    parts: tuple[str, ...]  # what the pages use, relative to the tarball's package/ folder

    @property
    def tarball(self) -> str:
        return f"{self.name}-{self.version}.tgz"

    @property
    def url(self) -> str:
        return f"https://registry.npmjs.org/{self.name}/-/{self.tarball}"


REVEAL = Package("reveal.js", "5.2.1", "359b575dd51bbda32f89b2fd4c7dc46ad7389a805572158916c29252f7a27333",
                 ("dist/reveal.js", "dist/reveal.css", "dist/reset.css", "dist/theme/", "plugin/notes/", "LICENSE"))
MATHJAX = Package("mathjax", "3.2.2", "1b9c0a1c44df864e915690558e72adb9cc5203360daefd385084ced3b6c64c09",
                  ("es5/tex-svg-full.js", "LICENSE"))
PACKAGES = (REVEAL, MATHJAX)


class AssetError(CourseError, RuntimeError):
    """An asset of the decks or the site is missing or damaged; the message says how to get it."""


def cache_dir() -> Path:
    """The course's cache, ``$XDG_CACHE_HOME/annotated`` (by default ``~/.cache/annotated``), where
    the Multi30k download goes too."""
    return default_cache_dir().parent


def tarball(package: Package, timeout: float = 60.0) -> Path:
    """``package``'s tarball: from ``$ANNOTATED_WEB_ASSETS`` if set, else the cached download
    (fetched now if missing). Either way its SHA-256 is checked."""
    local = os.environ.get(ENV_VAR)
    if local:
        path = Path(local) / package.tarball
        if not path.is_file():
            raise AssetError(f"{ENV_VAR}={local} has no {package.tarball}: put it there "
                             f"(`npm pack {package.name}@{package.version}` makes it), or unset {ENV_VAR} to download")
        _verify(path, package)
        return path
    path = cache_dir() / package.tarball
    if path.is_file():
        _verify(path, package)
        return path
    try:
        return fetch(package.url, path, package.sha256, timeout=timeout)
    except (DownloadError, ChecksumError) as err:
        raise AssetError(f"could not get {package.name} {package.version} for the decks and the site ({err}). "
                         f"Without network, copy {package.tarball} from a machine that has it (in its {cache_dir()}, "
                         f"or from `npm pack {package.name}@{package.version}`) into a folder and set "
                         f"{ENV_VAR} to that folder") from err


def _verify(path: Path, package: Package) -> None:
    actual = sha256_file(path)
    if actual != package.sha256:
        raise AssetError(f"{path} is not {package.name} {package.version}: its SHA-256 is {actual}, expected "
                         f"{package.sha256}; delete it and build again (or put the right tarball there)")


def install(dest: Path) -> Path:
    """Unpack what the pages use of every package into ``dest/<name>/`` and return ``dest``.
    Packages already unpacked there are kept. A package is unpacked into a temporary folder beside
    its own and swapped in once complete (:func:`annotated.support.files.build_folder`): a full disk
    or a Ctrl-C midway leaves no half package that a later build would take for a whole one. A
    symbolic link in its place is removed, never unpacked into."""
    dest.mkdir(parents=True, exist_ok=True)
    for package in PACKAGES:
        folder = dest / package.name
        if not folder.is_symlink() and (folder / package.parts[0]).is_file():
            continue
        if folder.is_symlink():
            folder.unlink()
        path = tarball(package)
        with tarfile.open(path) as tar, build_folder(folder, "annotated.support.web_assets", force=True,
                                                     marker=False) as tmp:
            members = [m for m in tar.getmembers()
                       if any(m.name.removeprefix("package/").startswith(p) for p in package.parts)]
            for member in members:
                member.name = member.name.removeprefix("package/")
            tar.extractall(tmp, members=members, filter="data")
    return dest


# MathJax 3 typesets $...$ and $$...$$ as Jupyter does (MathJax.startup.promise resolves when
# every equation on the page is drawn; the browser test waits on it).
MATHJAX_HTML = """<script>
window.MathJax = {
    tex: {inlineMath: [["$", "$"], ["\\\\(", "\\\\)"]], displayMath: [["$$", "$$"], ["\\\\[", "\\\\]"]],
          processEscapes: true, processEnvironments: true, tags: "ams"},
    svg: {fontCache: "global"},
    options: {enableMenu: false}
};
</script>
<script src="%s/mathjax/es5/tex-svg-full.js"></script>"""


def mathjax_html(assets: str) -> str:
    """The script tags that load MathJax from ``assets`` (a relative URL), configured."""
    return MATHJAX_HTML % assets


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m annotated.support.web_assets",
        description="Fetch reveal.js and MathJax into the cache once (checked by SHA-256), so that the decks "
                    "and the site build without network afterwards.")
    parser.parse_args(argv)

    def body() -> int:
        for package in PACKAGES:
            print(f"{package.name} {package.version}: {tarball(package)}")
        return 0

    with signals_as_interrupt():  # SIGTERM and SIGHUP as Ctrl-C: a download's temporary file is removed
        return run_command(body, parser.prog)


if __name__ == "__main__":
    sys.exit(main())
