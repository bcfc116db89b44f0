"""``oasr_core.autotune()`` for an exact-point family (conv1d's fixed windows): a call with an
exact point is measured at that point, served by it inside the session, and published as an
exact point of the entry, which serves that point and no other shape."""

from __future__ import annotations

import attrs
import pytest
from autotune_kit import ARCH, K, N, ScriptedDevice, install

import oasr_core
from oasr_core import database, runtime
from oasr_core.types import Tier


class ExactDevice(ScriptedDevice):
    """The scripted device of ``fake`` with exact points on."""

    def family(self):
        return attrs.evolve(super().family(), exact_points=True)


@pytest.fixture
def user(tmp_path, monkeypatch):
    root = tmp_path / "user"
    monkeypatch.setenv("OASR_TUNE_USER_DB", str(root))
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", "off")
    yield root
    runtime.install_runtime(None)


def pick(m, point=None):
    return oasr_core.select("fake", "fake", "fp16", (N, K), m, ARCH, point=point)


def test_an_exact_point_is_measured_served_and_published_as_a_point(user):
    device = ExactDevice()
    install(device)
    with oasr_core.autotune(arch=ARCH, timer=device.timer) as session:
        tuned = pick(12000, "8x3000")
        assert tuned.tier is Tier.USER
        assert pick(12000, "8x3000") == tuned
    assert device.benched == [((N, K), 12000)]
    assert [r.point for r in session.results] == ["8x3000"]
    family = runtime.get_runtime().registry.family("fake")
    table = database.read_tuning_file(database.tier_path(user, ARCH, family))
    entry, = table.entries.values()
    assert dict(entry.points) == {"8x3000": tuned.choice_id}
    oasr_core.reload()
    assert pick(12000, "8x3000").tier is Tier.USER
    assert pick(12000, "4x6000").tier is not Tier.USER, "another shape at the same M"
