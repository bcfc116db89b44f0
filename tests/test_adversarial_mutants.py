"""The mutation table stays runnable: every mutant's edit matches the code exactly once and
names killing tests that exist (``tests/adversarial_mutants.py`` runs them)."""

from __future__ import annotations

import re

import pytest
from adversarial_mutants import MUTANTS, REPO


def test_there_are_the_trials_21_mutants():
    assert [m.id for m in MUTANTS] == [f"M{i:02d}" for i in range(1, 22)]


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.id)
def test_each_mutant_applies_and_names_existing_tests(mutant):
    for name, edits in mutant.files:
        text = (REPO / name).read_text()
        for old, _ in edits:
            assert text.count(old) == 1, (mutant.id, name, old)
    for node in mutant.kills:
        path, _, test = node.partition("::")
        assert re.search(rf"^def {re.escape(test)}\(", (REPO / path).read_text(), re.M), node
