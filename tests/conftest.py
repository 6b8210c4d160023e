"""Fixtures shared by the unit tests."""

import pytest
import torch


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models run faster on one thread, above all on a busy machine; restored afterwards."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def built_site(tmp_path_factory):
    """The course site with its decks, built once per session (about a minute) into a temporary
    folder, as ``python -m annotated.support.site`` builds it."""
    from annotated.support.site import Site

    out = tmp_path_factory.mktemp("site") / "site"
    site = Site(out)
    site.build()
    return site
