"""Suite-wide test configuration: every cache a run writes under pytest's temporary directory.

oasr's tier locks and JIT cache defaults, torch's and Triton's compile caches go under
pytest's temporary directory (``_session_caches``): a run leaves nothing in ``~/.cache`` or
``/tmp``. The background nvcc compiles of the default suite (``smoke_builds``) come with the
oasr test kit's pytest plugin (:mod:`oasr_core.smoke_builds`), so each family's suite has
them when run alone too.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session", autouse=True)
def _session_caches(tmp_path_factory: pytest.TempPathFactory):
    """The user cache (``XDG_CACHE_HOME``: oasr's system-tier locks, default user tier and JIT
    cache) and torch's and Triton's compile caches, under pytest's temporary directory for
    the whole run. Tests that need their own point these variables elsewhere."""
    base = tmp_path_factory.mktemp("caches")
    mp = pytest.MonkeyPatch()
    mp.setenv("XDG_CACHE_HOME", str(base / "xdg"))
    mp.setenv("TORCHINDUCTOR_CACHE_DIR", str(base / "torchinductor"))
    mp.setenv("TRITON_CACHE_DIR", str(base / "triton"))
    yield base
    mp.undo()
