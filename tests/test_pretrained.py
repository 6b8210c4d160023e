"""The model that ships with the package: its files, its size, and the BLEU the README states."""

import json
import re

import pytest

from annotated import load_pretrained
from annotated.data import load_pairs
from annotated.evaluation import corpus_bleu
from annotated.support.course import ROOT
from annotated.support.pretrained import FILES, PRETRAINED_DIR
from annotated.translate import translate
from tests.test_data import needs_real_data

MAX_BYTES = 16_000_000  # what the package may carry for the model, all files together
STATED = re.compile(r"test BLEU of the shipped model: \*\*([0-9.]+)\*\*")


def stated_bleu(path) -> float:
    found = STATED.findall(path.read_text(encoding="utf-8"))
    assert len(found) == 1, f"{path.name} should state the shipped model's test BLEU once, as 'test BLEU of the " \
                            f"shipped model: **NN.NN**'"
    return float(found[0])


@pytest.fixture(scope="module")
def shipped():
    """The shipped model and its tokenizer, loaded once for the tests below."""
    return load_pretrained()


def test_the_shipped_files_are_all_there_and_small_enough_for_the_package():
    sizes = {name: (PRETRAINED_DIR / name).stat().st_size for name in (*FILES, "SHA256SUMS")}
    assert sum(sizes.values()) <= MAX_BYTES, sizes


def test_the_shipped_model_is_a_byte_pair_model_with_three_way_tying(shipped):
    model, tokenizer = shipped
    config = json.loads((PRETRAINED_DIR / "config.json").read_text())
    assert config["share_embeddings"] and tokenizer.shared
    assert model.src_embed[0].lut.weight is model.tgt_embed[0].lut.weight is model.generator.proj.weight
    assert tokenizer.src_vocab is tokenizer.tgt_vocab and len(tokenizer.src_vocab) == config["src_vocab_size"]
    assert len(tokenizer.merges) == 8000


def test_the_readme_and_the_results_state_the_same_bleu():
    assert stated_bleu(ROOT / "README.md") == stated_bleu(ROOT / "benchmarks" / "RESULTS.md") >= 38.0


@needs_real_data
def test_the_shipped_model_translates_the_test_set_at_the_stated_bleu_with_no_unk(shipped):
    model, tokenizer = shipped
    pairs = load_pairs("test_2016_flickr")
    translations = translate([de for de, _ in pairs], model, tokenizer, beam=4, alpha=0.6)
    assert not [t for t in translations if "<unk>" in t]
    bleu = corpus_bleu(translations, [en for _, en in pairs])
    assert bleu.signature == "nrefs:1|case:lc|eff:no|tok:13a|smooth:exp|version:2.6.0"
    assert abs(bleu.score - stated_bleu(ROOT / "README.md")) <= 0.3, bleu.score


def test_the_readmes_examples_are_what_the_shipped_model_writes(shipped):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    examples = {"Zwei Hunde spielen im Schnee.": "two dogs play in the snow.",
                "Ein Mann fährt Fahrrad.": "a man rides a bicycle.",
                "The cat is on the mat.": "a crowd of people at a meeting."}
    for german, english in examples.items():
        assert german in readme and english in readme, (german, english)
    model, tokenizer = shipped
    assert translate(list(examples), model, tokenizer) == list(examples.values())
