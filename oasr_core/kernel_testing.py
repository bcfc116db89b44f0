"""What a family plugin's kernel tests share, beside the test kit (:mod:`oasr_core.testing`).

A family's compile tests build a few configs' units with the core JIT on a machine without a
GPU (:func:`compiled_module`: a fresh JIT directory; :func:`smoke_module`: the suite's
background prebuild, :mod:`oasr_core.smoke_builds`) and check that the library exports each
config's launcher and workspace query and nothing else (:func:`assert_exports_only_launchers`);
each gives a test module its ``built`` fixture and that test. Its GPU tests are marked and
skipped without a device (:func:`gpu_marks`) and run every config of a lane that fits the
device's arch (:func:`device_config_ids`, :func:`device_arch`).

Importing this module imports neither torch nor a plugin; the functions import torch when
called.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import pytest

from oasr_core.testing import exported_symbols
from oasr_core.types import Config


def device_arch() -> str | None:
    """The arch family of the current CUDA device (``sm90``); None without one."""
    import torch

    if not torch.cuda.is_available():
        return None
    major, minor = torch.cuda.get_device_capability()
    return f"sm{major}{minor}"


def gpu_marks() -> list[Any]:
    """A GPU test module's ``pytestmark``: marked ``gpu``, skipped without a CUDA device."""
    import torch

    return [pytest.mark.gpu,
            pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def device_config_ids(production: Any, lane: str) -> list[str]:
    """The ids of ``lane``'s configs that run on the current device's arch (``production``:
    the family's :class:`~oasr_core.kit.ProductionSet`); none without a device, so a GPU
    test's parameters collect on any machine."""
    arch = device_arch()
    return [] if arch is None else [c.id for c in production.lane_configs(lane, arch)]


def subset_selection(subset: Mapping[str, Sequence[str]],
                     lane_configs: Callable[[str, str], Iterable[Any]], env: str,
                     keep: Callable[[Any], bool] = lambda config: True) -> dict[str, list[str]]:
    """A GPU test's configs per lane on the current device: ``subset``'s ids of each lane
    (``lane_configs(lane, arch)`` those that run on the arch, ``keep`` those the op under
    test takes); the environment variable ``env`` names other ids (a comma list) or ``all``
    (every such config of each lane). Empty without a device, so the tests' parameters
    collect on any machine; a lane with no config on the arch is left out."""
    import os

    arch = device_arch()
    if arch is None:
        return {}
    wanted = os.environ.get(env, "")
    out = {}
    for lane, ids in subset.items():
        fitting = [c.id for c in lane_configs(lane, arch) if keep(c)]
        if not fitting:
            continue
        if wanted == "all":
            out[lane] = fitting
            continue
        chosen = [i.strip() for i in wanted.split(",") if i.strip()] or list(ids)
        out[lane] = [i for i in chosen if i in fitting]
    return out


def assert_exports_only_launchers(spec: Any, report: Any) -> None:
    """``report``, the build of ``spec``, succeeded and its library exports exactly what the
    spec's units declare (each config's launcher and workspace query), nothing else."""
    from oasr_core.jit import BuildStatus

    assert report.status is BuildStatus.BUILT, (report.error, dict(report.failed))
    expected = {name for unit in spec.units for name in unit.exports}
    got = exported_symbols(report.path)
    assert got == expected, f"{report.path} exports {sorted(got)}, not {sorted(expected)}"


def compiled_module(modules: Any, lane: str, ids: Sequence[str], *, name: str,
                    arch: str = "sm90", dtypes: Sequence[str] = ("fp16",)
                    ) -> tuple[Callable[..., Any], Callable[..., None]]:
    """``built, test_the_units_export_only_their_launchers = compiled_module(...)`` in a
    family's compile test module: ``built``, a module-scoped fixture, gives ``(configs, spec,
    report)`` of the configs ``ids`` of ``lane`` linked in one module ``name`` for ``arch``
    (``modules``: the family's :class:`~oasr_core.kit.production.LaneModules`), built into a
    fresh JIT directory (:func:`oasr_core.testing.prebuilt_module`); the test checks the build
    and its exports (:func:`assert_exports_only_launchers`)."""
    from oasr_core.testing import prebuilt_module

    @pytest.fixture(scope="module")
    def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list[Config], Any, Any]]:
        by_id = {c.id: c for c in modules.production.space(lane)}
        configs = [by_id[cid] for cid in ids]
        for spec, report in prebuilt_module(tmp_path_factory, lambda: modules.module_spec(
                lane, arch, configs, name=name, dtypes=dtypes)):
            yield configs, spec, report

    def test_the_units_export_only_their_launchers(built: tuple[list[Config], Any, Any]) -> None:
        _configs, spec, report = built
        assert_exports_only_launchers(spec, report)

    return built, test_the_units_export_only_their_launchers


def smoke_module() -> tuple[Callable[..., Any], Callable[..., None]]:
    """``built, test_the_units_export_only_their_launchers = smoke_module()`` in a test module
    whose ``SMOKE_UNITS()`` names specs for the suite's background prebuild (the test
    kit's :mod:`oasr_core.smoke_builds`): ``built``, a module-scoped fixture, gives ``[(spec,
    report)]`` of those specs, their cache being the process's ``OASR_JIT_DIR`` until it ends;
    the test checks each build and its exports (:func:`assert_exports_only_launchers`)."""

    @pytest.fixture(scope="module")
    def built(request: pytest.FixtureRequest, smoke_builds: Any) -> Iterator[list[Any]]:
        mp = pytest.MonkeyPatch()
        mp.setenv("OASR_JIT_DIR", str(smoke_builds.jit_dir))
        try:
            reports = smoke_builds.wait()
            yield [(spec, reports[spec.name]) for spec in request.module.SMOKE_UNITS()]
        finally:
            mp.undo()

    def test_the_units_export_only_their_launchers(built: list[Any]) -> None:
        for spec, report in built:
            assert_exports_only_launchers(spec, report)

    return built, test_the_units_export_only_their_launchers
