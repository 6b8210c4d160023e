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


@pytest.fixture(scope="session")
def tiny_bpe_checkpoint(tmp_path_factory):
    """A byte-pair checkpoint of an untrained model of a few hundred weights, made by hand in a
    fraction of a second: what python -m annotated.train writes, for the commands that read one."""
    from annotated.model import TransformerConfig, make_model
    from annotated.support.checkpoint import save_checkpoint
    from annotated.vocab import build_vocab_from_iterator

    merges = [["e", "i"], ["ei", "n"], ["m", "a"]]
    vocab = build_vocab_from_iterator([["ein", "ma@@", "nn", ".", "z@@", "wei", "a", "man", "two", "dogs"]])
    config = TransformerConfig(len(vocab), len(vocab), N=1, d_model=8, d_ff=16, h=2, share_embeddings=True)
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny") / "tiny.pt"
    save_checkpoint(path, make_model(config), config, vocabs={"src": vocab, "tgt": vocab},
                    extra={"bpe_merges": merges, "preset": "tiny", "seed": 0})
    return path
