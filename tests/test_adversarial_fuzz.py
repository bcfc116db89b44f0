"""The standing fuzz check: seeded mutations of a tier file, a census, a measurement log and
an autotune cache through every reader (``tune select``, ``tune status [--census]``,
``tune diff``, ``tune build --census/--from-log``, ``tune evaluate``, the writer and the
Python API): zero tracebacks, zero multi-line errors, zero served configs a lane rejects,
zero hangs. Tier files of all four families (gemm, int8, fp8, conv1d with its exact
points) are read as the system tier and as the user tier, unmarked and then marked as a
writer marks them (the lazy path), and a file the first read accepted answers the same on
every read.

The CI run tries a fixed, small set of mutations. The long run is opt-in::

    FUZZ_SECONDS=180 nice -n 10 python3 -m pytest -q tests/test_adversarial_fuzz.py -k long -s

It prints its figures as JSON (``.notes/adversarial.md`` records them) and fails on any
crash, keeping each crashing input under the test's temporary directory.
"""

from __future__ import annotations

import json
import os

import pytest
from adversarial_fuzz import READERS, classify, fuzz

CI_ROUNDS = 3


@pytest.fixture
def isolated(monkeypatch, tmp_path):
    monkeypatch.setenv("OASR_TUNE_USER_DB", "off")
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", str(tmp_path))  # each reader points it anew
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path


def test_the_seeds_pass_every_reader(isolated):
    from adversarial_fuzz import seed_documents

    seeds = seed_documents(isolated)
    for reader in READERS:
        doc, raw = seeds[reader.kind]
        case = isolated / f"seed-{READERS.index(reader)}"
        case.mkdir()
        path = case / ("input.jsonl" if reader.kind == "log" else "input.json")
        path.write_bytes(raw if raw is not None else json.dumps(doc).encode())
        outcome, detail = classify(lambda r=reader, p=path, c=case: r.run(p, c))
        expected = {"refused"} if reader.name == "tune build --census" else {"ok"}
        assert outcome in expected, (reader.name, detail)


def test_mutations_crash_no_reader(isolated):
    figures = fuzz(isolated, seed=20261201, per_reader=CI_ROUNDS)
    assert figures["crashes"] == [], json.dumps(figures["crashes"], indent=1)
    assert figures["hangs"] == 0, figures
    assert figures["files_tried"] == CI_ROUNDS * len(READERS)


@pytest.mark.skipif(not os.environ.get("FUZZ_SECONDS"), reason="opt-in: set FUZZ_SECONDS")
def test_long_fuzz_run(isolated):
    figures = fuzz(isolated, seed=int(os.environ.get("FUZZ_SEED", "1")),
                   budget_s=float(os.environ["FUZZ_SECONDS"]))
    print(json.dumps(figures, indent=1))
    assert figures["crashes"] == [] and figures["hangs"] == 0
