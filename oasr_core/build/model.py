"""The cost model inside a build: what prunes the candidates, and the payload the file carries.

A lane that describes its configs (``Lane.cost_features``) is modelled; one that does not is
measured exhaustively and its file carries no model.

- **Pruning.** The prior is the calibrated model an earlier build shipped: the payload of
  the file being rebuilt, else of the system tier's file, placed on this device's profile.
  With one, each point measures the union of the structure's and the calibration's top-k
  plus the forced arms (:func:`rankers`). With none, the uncalibrated structure alone would
  drop the best config too often (recall@16 was 63% on the H200 log), so every config is
  measured and the bench protocol's successive halving does the cutting.
- **Payload.** After measurement the model is refitted on every row of the run's lane in
  the measurement log (:func:`fit_payload`), on the profile the run header records, so a
  replay of the log (``--from-log``) writes the same payload byte for byte.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from oasr_core import database
from oasr_core.arch import ArchProfile
from oasr_core.cost_model import CostModel, build_model, config_ranker
from oasr_core.errors import ConfigurationError
from oasr_core.types import Family, Lane

from .sources import Ranker


def modelled(lane: Lane) -> bool:
    """Whether the lane's configs can be modelled (it supplies ``cost_features``)."""
    return lane.cost_features is not None


def build_profile(arch: str) -> ArchProfile | None:
    """This device's profile (measured, or the user tier's cache of it); the synthetic
    profile of ``arch`` when no device can be measured (a scripted build); None when there
    is neither."""
    try:
        return ArchProfile.measure()
    except (ConfigurationError, RuntimeError, AssertionError):
        pass
    try:
        return ArchProfile.synthetic(arch)
    except ConfigurationError:
        return None


def prior_model(lane: Lane, profile: ArchProfile, files: Sequence[Path]) -> Any:
    """The calibrated model of the first file in ``files`` that ships one for ``lane`` (on
    ``profile``), or None."""
    for path in dict.fromkeys(files):
        if not path.exists():
            continue
        try:
            table = database.read_tuning_file(path)
        except Exception:  # an unreadable file has no prior to offer; the build reports it
            continue
        payload = table.model
        if table.lane != lane.name or not isinstance(payload, Mapping):
            continue
        try:
            model = CostModel.from_json(payload)
        except ConfigurationError:
            continue
        if model.lane in (None, lane.name) and model.calibrated:
            return model.on(model.profile.with_live(profile)
                            if model.profile.arch == profile.arch else profile)
    return None


def rankers(model: Any, lane: Lane) -> tuple[Ranker, ...]:
    """The structure's and (when calibrated) the calibration's rankings of ``model``."""
    modes = ("structure", "calibrated") if model.calibrated else ("structure",)
    return tuple(config_ranker(model.using(mode), lane=lane) for mode in modes)


def profile_of(headers: Iterable[Mapping[str, Any]]) -> ArchProfile | None:
    """The profile recorded by the last run header that has one (None: none does)."""
    found = None
    for header in headers:
        raw = header.get("profile")
        if isinstance(raw, Mapping):
            try:
                found = ArchProfile.from_json(raw)
            except ConfigurationError:
                continue
    return found


def fit_payload(arm_rows: Iterable[Mapping[str, Any]], profile: ArchProfile | None,
                family: Family, lane: Lane | None, impl_hash: Any = None
                ) -> dict[str, Any] | None:
    """The model payload fitted on ``arm_rows`` of ``lane`` (and of ``impl_hash`` when
    given: rows of other kernel code describe other kernels), or None when the lane is not
    modelled, there is no profile or no usable row."""
    if lane is None or not modelled(lane) or profile is None:
        return None
    rows = [r for r in arm_rows if r.get("lane") == lane.name
            and (impl_hash is None or r.get("impl_hash") in (None, impl_hash))]
    if not rows:
        return None
    ops = tuple(op for op in family.ops if any(r.get("op") == op for r in rows))
    try:
        model = build_model(rows, profile, lane=lane.name, ops=ops or family.ops,
                            features=lane.cost_features)
    except ConfigurationError:
        return None
    if not model.configs and not model.groups:
        return None
    payload = model.to_json()
    # What `oasr tune evaluate` needs to never score the model on a log it was fitted on.
    payload["calibrated_on"] = {"runs": sorted({str(r.get("run")) for r in rows})}
    return payload
