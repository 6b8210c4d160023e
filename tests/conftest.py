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
