"""Calibration of the cost model on a measurement log.

Input: an iterable of plain dict rows (the arm rows of :mod:`oasr_core.measurements`, or any
JSONL with these fields). Fields read, and nothing else:

==============  ========  ===============================================================
field           needed    use
==============  ========  ===============================================================
``config``      yes       config id, or a sentinel arm (``default``, ``torch``, ...)
``op``          yes       part of the signature (op, dtype, N, K)
``dtype``       yes       operand dtype (throughput class, operand bytes)
``M``           yes       the dynamic axis
``N``, ``K``    yes       static dims (or ``dims: {"N": .., "K": ..}``)
``median_ms``   yes       the measured time
``params``      configs   the config's parameters (features when no lane is given); for the
                          ``default`` arm, ``{"config": id}`` names the lane config it ran
``row``         no        rows other than ``arm`` rows (a log's ``run`` rows) are skipped
``status``      no        rows not ``ok`` (rejected, error, unbuilt) are skipped
``lane``        no        rows of another lane are skipped
``arch``        no        rows of another arch family than the profile's are skipped
``impl_hash``   no        with ``impl_hash=`` given, rows of other kernel sources are skipped
``contended``   no        ``true`` rows are skipped (another process shared the GPU)
``sigma_ms``    no        rows noisier than 25 % of their median are skipped
==============  ========  ===============================================================

Fit: per calibration group (the lane's kernel kind x K decomposition) three multipliers of
the structure's ``(a, b, rho)``, then per config ``(a, b, rho)`` shrunk toward the
group-scaled structure. Both are weighted least squares on relative error (rows weighted by
``1/t^2``) with a ridge toward the prior, so a config with few rows stays near the structure.
Rows pinned at the memory floor carry no information about ``a`` or ``b`` and are not fitted.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from oasr_core.arch import ArchProfile
from oasr_core.cost_model.exact import normal_equations, solve
from oasr_core.cost_model.features import CostFeatures, FeatureSource, features_of
from oasr_core.cost_model.model import Coeffs, CostModel
from oasr_core.cost_model.structure import DEFAULT_KNOBS, Knobs, geometry, tile_cost
from oasr_core.database.codec import parse_lines
from oasr_core.errors import PluginError
from oasr_core.types import Config, Sentinel

REQUIRED_FIELDS = ("config", "op", "dtype", "M", "N", "K", "median_ms")
"""Fields every row needs (``N``/``K`` may come in ``dims``); see the module docstring."""
MAX_REL_SIGMA = 0.25


@attrs.frozen
class LogRow:
    """One measured arm at one point (duplicates of a (point, arm) are merged by median)."""

    config: str
    op: str
    dtype: str
    m: int
    n: int
    k: int
    t_us: float
    features: CostFeatures | None
    """None for sentinel arms and configs the lane cannot describe."""
    sentinel: bool = False

    @property
    def signature(self) -> tuple[str, str, int, int]:
        return (self.op, self.dtype, self.n, self.k)


@attrs.frozen
class DesignRow:
    """A fitted row: the measurement and its structure terms."""

    row: LogRow
    x1: float
    x2: float
    x3: float
    offset: float
    """``launches · L_graph`` (us), not fitted."""
    floor: float
    a0: float
    b0: float


def read_log(path: str | Path) -> Iterator[dict[str, Any]]:
    """The rows of a JSONL measurement log (blank and unreadable lines skipped), read with
    the guards of every oasr reader (:func:`oasr_core.database.codec.parse_lines`)."""
    for _, value in parse_lines(path):
        if isinstance(value, dict):
            yield value


def _dims(raw: Mapping[str, Any]) -> tuple[int, int]:
    dims = raw.get("dims") or {}
    return int(raw.get("N", dims.get("N"))), int(raw.get("K", dims.get("K")))


def parse_rows(rows: Iterable[Mapping[str, Any]], *, arch: str | None = None,
               lane: str | None = None, features: FeatureSource | None = None,
               configs: Mapping[str, Config] | None = None, impl_hash: str | None = None
               ) -> tuple[list[LogRow], Counter]:
    """Usable rows and a count of skipped ones by reason (see the module docstring).

    ``features`` is the lane's ``cost_features`` (default: the rows' ``params``); ``configs``
    (the lane's configs by id) resolve the ``default`` arm to the config it ran and supply
    parameters a row lacks.
    """
    skipped: Counter = Counter()
    merged: dict[tuple, list[float]] = defaultdict(list)
    feats: dict[tuple, tuple[CostFeatures | None, bool]] = {}
    for raw in rows:
        if raw.get("row", "arm") != "arm":
            continue
        if raw.get("contended") or raw.get("status", "ok") != "ok" or raw.get("ok") is False:
            skipped["contended or failed"] += 1
            continue
        for field, wanted in (("arch", arch), ("lane", lane), ("impl_hash", impl_hash)):
            if wanted is not None and raw.get(field) not in (None, wanted):
                skipped[f"other {field}"] += 1
                break
        else:
            try:
                cid, op, dtype = str(raw["config"]), str(raw["op"]), str(raw["dtype"])
                m, (n, k), t_ms = int(raw["M"]), _dims(raw), float(raw["median_ms"])
            except (KeyError, TypeError, ValueError, AttributeError, OverflowError):
                skipped["missing fields"] += 1
                continue
            if not all(1 <= v <= 2**31 for v in (m, n, k)) or not math.isfinite(t_ms):
                skipped["missing fields"] += 1
                continue
            sigma = raw.get("sigma_ms")
            if not t_ms > 0 or (isinstance(sigma, (int, float)) and sigma > MAX_REL_SIGMA * t_ms):
                skipped["noisy or non-positive"] += 1
                continue
            params = raw.get("params")
            if cid == "default" and isinstance(params, Mapping) and params.get("config"):
                cid = str(params["config"])
                params = None
            if not isinstance(params, Mapping) and configs is not None and cid in configs:
                params = configs[cid].params
            key = (op, dtype, n, k, m, cid)
            merged[key].append(t_ms * 1e3)
            if key not in feats:
                feats[key] = _row_features(cid, params, raw.get("lane") or lane, features)
    out = [LogRow(config=key[5], op=key[0], dtype=key[1], n=key[2], k=key[3], m=key[4],
                  t_us=statistics.median(ts), features=feats[key][0], sentinel=feats[key][1])
           for key, ts in merged.items()]
    return out, skipped


def _row_features(cid: str, params: Any, lane: str | None, features: FeatureSource | None
                  ) -> tuple[CostFeatures | None, bool]:
    if Sentinel.parse(cid) is not None:
        return None, True
    if not isinstance(params, Mapping):
        return None, False
    lane_name = lane or "log"
    try:
        config = Config(id=cid, lane=lane_name, params=params)
        return features_of(config, features, lane_name), False
    except (ValueError, TypeError, KeyError, PluginError):
        return None, False


def design(rows: Iterable[LogRow], profile: ArchProfile, knobs: Knobs = DEFAULT_KNOBS
           ) -> list[DesignRow]:
    """Structure terms of every describable, feasible config row."""
    out = []
    cache: dict[tuple, Any] = {}
    for row in rows:
        if row.features is None:
            continue
        key = (row.features, row.dtype)
        if key not in cache:
            cache[key] = tile_cost(row.features, profile, row.dtype, knobs)
        tc = cache[key]
        geo = geometry(row.features, tc, row.m, row.n, row.k, profile, row.dtype, knobs) \
            if tc is not None else None
        if geo is None:
            continue
        out.append(DesignRow(row=row, x1=geo.x1, x2=geo.x2, x3=geo.x3,
                             offset=geo.launches * profile.launch_us_graph,
                             floor=geo.floor_us, a0=tc.a, b0=tc.b))
    return out


def _ridge(x: Any, y: Any, w: Any, prior: Sequence[float], strength: float) -> list[float]:
    """Weighted least squares ``sum w (y - x theta)^2`` plus a ridge toward ``prior``.

    The ridge is measured in rows: moving coefficient j by ``d`` costs ``strength`` times what
    ``d`` costs on an average row (``mean(w x_j^2) d^2``), so ``strength=2`` is two rows'
    worth of belief in the prior whatever the coefficient's share of the time. A coefficient
    no row exercises stays at its prior. Kept within a factor of 10 of the prior.

    Summed and solved with :mod:`.exact`, so the coefficients (and every held-out figure
    computed from them) are the same bits whatever BLAS kernel numpy runs.
    """
    columns = [x[:, j] for j in range(x.shape[1])]
    gram, rhs = normal_equations(columns, y, w)
    for j, p in enumerate(prior):
        scale = max(gram[j][j] / len(y), 1e-12 / p**2)
        gram[j][j] += strength * scale
        rhs[j] += strength * scale * p
    theta = solve(gram, rhs) or list(prior)
    return [min(max(t, p / 10.0), p * 10.0) for t, p in zip(theta, prior, strict=True)]


def fit(rows: Sequence[DesignRow], profile: ArchProfile, *, knobs: Knobs = DEFAULT_KNOBS,
        lane: str | None = None, ops: Sequence[str] = (),
        prior_rows: float = 2.0, group_prior: float = 1.0, min_rows: int = 3) -> CostModel:
    """A calibrated :class:`CostModel` (``serve="calibrated"``) fitted on ``rows``.

    ``lane`` and ``ops`` are what the model is stored for (:attr:`CostModel.ops`); the fit
    does not read them.

    ``prior_rows`` is the ridge strength of a config toward its group-scaled structure, in
    rows (see :func:`_ridge`); ``group_prior`` the same for the group multipliers toward 1;
    a config needs ``min_rows`` fitted rows to get its own coefficients.
    """
    import numpy as np

    usable = [r for r in rows if r.floor < 0.98 * r.row.t_us and r.row.t_us > r.offset]
    by_group: dict[str, list[DesignRow]] = defaultdict(list)
    by_config: dict[str, list[DesignRow]] = defaultdict(list)
    for r in usable:
        by_group[r.row.features.group].append(r)
        by_config[r.row.config].append(r)
    groups: dict[str, Coeffs] = {}
    for name, rs in by_group.items():
        x = np.array([[r.x1 * r.a0, r.x2 * r.b0, r.x3] for r in rs])
        y = np.array([r.row.t_us - r.offset for r in rs])
        w = np.array([1.0 / r.row.t_us**2 for r in rs])
        s = _ridge(x, y, w, [1.0, 1.0, 1.0], group_prior)
        groups[name] = Coeffs(a=float(s[0]), b=float(s[1]), rho=float(s[2]), rows=len(rs))
    configs: dict[str, Coeffs] = {}
    for cid, rs in by_config.items():
        if len(rs) < min_rows:
            continue
        g = groups[rs[0].row.features.group]
        a0 = statistics.median(r.a0 for r in rs)
        b0 = statistics.median(r.b0 for r in rs)
        prior = [a0 * g.a, b0 * g.b, g.rho]
        x = np.array([[r.x1, r.x2, r.x3] for r in rs])
        y = np.array([r.row.t_us - r.offset for r in rs])
        w = np.array([1.0 / r.row.t_us**2 for r in rs])
        theta = _ridge(x, y, w, prior, prior_rows)
        configs[cid] = Coeffs(a=float(theta[0]), b=float(theta[1]), rho=float(theta[2]),
                              rows=len(rs))
    evidence = {"rows": len(rows), "fitted_rows": len(usable),
                "signatures": len({r.row.signature for r in rows})}
    return CostModel(profile=profile, knobs=knobs, lane=lane, ops=tuple(ops), serve="calibrated",
                     groups=groups, configs=configs, evidence=evidence)
