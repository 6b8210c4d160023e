"""benchmarks/tune_short_run.py: the two rules it states before its runs, on made-up records."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("tune_short_run", ROOT / "benchmarks" / "tune_short_run.py")
tune = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tune)


def runs(table: dict) -> list[dict]:
    """(dropout, seed) -> (last BLEU, averaged BLEU), as the script records them."""
    return [{"dropout": p, "seed": s, "last": {"val_bleu_beam4": last}, "average": {"val_bleu_beam4": avg}}
            for (p, s), (last, avg) in table.items()]


@pytest.mark.parametrize("table, chosen", [
    ({(0.1, 0): (30, 31), (0.0, 0): (34, 35), (0.1, 1): (30, 30), (0.0, 1): (34, 34.5)}, (0.0, True)),
    # 0 is better in one seed only: the paper's 0.1 stays
    ({(0.1, 0): (30, 31), (0.0, 0): (34, 35), (0.1, 1): (30, 30), (0.0, 1): (29, 29.5)}, (0.1, True)),
    # better in both seeds, but by less than the margin in one: 0.1 stays
    ({(0.1, 0): (30, 31), (0.0, 0): (34, 35), (0.1, 1): (30, 30), (0.0, 1): (30, 30.5)}, (0.1, True)),
    # at the chosen dropout the last checkpoint beats the average in one seed: no averaging
    ({(0.1, 0): (30, 31), (0.0, 0): (36, 35), (0.1, 1): (30, 30), (0.0, 1): (34, 34.5)}, (0.0, False)),
])
def test_the_rules(table, chosen):
    assert tune.choose(runs(table), [0.1, 0.0], [0, 1]) == chosen


def test_the_record_holds_what_notebook_11_uses():
    record = json.loads((ROOT / "benchmarks" / "results" / "short_run_choice.json").read_text())
    seeds = sorted({r["seed"] for r in record["runs"]})
    dropouts = sorted({r["dropout"] for r in record["runs"]})
    assert (record["dropout"], record["average"]) == tune.choose(record["runs"], dropouts, seeds) == (0.0, True)
    assert len(seeds) >= 2 and dropouts == [0.0, 0.1] and record["limit"] is None
    assert all(r["updates"] == tune.RECIPE.max_steps for r in record["runs"])


def test_the_paper_value_must_be_among_the_dropouts(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["tune_short_run.py", "--dropouts", "0", "0.2", "--seeds", "0"])
    with pytest.raises(SystemExit):
        tune.main()
    assert "must include the paper's 0.1" in capsys.readouterr().err
