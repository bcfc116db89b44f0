"""Soft validators: the build environment an entry was measured under, and its staleness.

What this process would stamp (its SKU, nvcc, the family's own stamps) is
:func:`oasr_core.stamps.current_soft_validators`: the database compares stamps and never
asks the toolchain or the GPU itself.

A soft mismatch (kernel implementation hash, SKU, nvcc, CUTLASS stamp) keeps a file in
service and marks the affected entries stale: every config is re-checked against the
compiled set and the feasibility predicates when it is resolved, so a stale entry can only
be slower than a fresh tune, never wrong. A stamped value of None or ``"*"`` is a wildcard;
a current value of None (unknown here, e.g. no GPU or no nvcc) never makes anything stale.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from oasr_core.types import Lane, thaw

from .schema import TuningFile

WILDCARD = "*"
"""A stamped value that matches anything."""

def _wild(value: Any) -> bool:
    return value is None or value == WILDCARD


def _describe(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(thaw(value), sort_keys=True, separators=(",", ":"))


def _describe_sku(value: Any) -> str:
    if isinstance(value, Mapping):
        return f"{value.get('name', '?')} (sms={value.get('sms')}, l2={value.get('l2')})"
    return _describe(value)


def _sku_differs(stamped: Any, current: Any) -> bool:
    if not (isinstance(stamped, Mapping) and isinstance(current, Mapping)):
        return thaw(stamped) != thaw(current)
    for field in ("sms", "l2"):
        s, c = stamped.get(field), current.get(field)
        if not _wild(s) and c is not None and s != c:
            return True
    return False


def stale_reasons(stamped: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """Why ``stamped`` validators are stale against ``current`` ones; empty when fresh.

    Only keys both sides know are compared. The SKU compares (sms, l2), not its name: two
    boards of one chip tune alike. Reasons read ``impl_hash 1234 != 5678`` (stamped first).
    """
    reasons = []
    for key in sorted(set(stamped) & set(current)):
        s, c = stamped[key], current[key]
        if _wild(s) or c is None:
            continue
        if key == "sku":
            if _sku_differs(s, c):
                reasons.append(f"sku {_describe_sku(s)} != {_describe_sku(c)}")
        elif thaw(s) != thaw(c):
            reasons.append(f"{key} {_describe(s)} != {_describe(c)}")
    return reasons


def stale_entries(tuning_file: TuningFile, current: Mapping[str, Any], *,
                  lane: Lane | None = None) -> dict[str, list[str]]:
    """Every stale entry of ``tuning_file`` with its reasons, by signature key (sorted).

    Each entry is judged by the stamp it was measured under (its own ``soft``, else the
    file's), so an entry kept from an older build stays stale after a newer write. With
    ``lane``, an entry naming a config whose parameters in the file differ from the lane's
    own record of that id (:func:`drifted_configs`) is stale too: selection serves the
    lane's record, which is not what was measured.
    """
    drifted = drifted_configs(tuning_file, lane) if lane is not None else {}
    by_stamp: dict[int, tuple[Any, list[str]]] = {}  # most entries share the file's stamp
    out = {}
    for key in sorted(tuning_file.entries):
        soft = tuning_file.entry_soft(key)
        known = by_stamp.get(id(soft))
        if known is None or known[0] is not soft:
            known = by_stamp[id(soft)] = (soft, stale_reasons(soft, current))
        reasons = list(known[1])
        if drifted:
            for cid in sorted(tuning_file.entry_choices(key) & drifted.keys()):
                reasons.append(f"config {cid!r}: {drifted[cid]}")
        if reasons:
            out[key] = reasons
    return out


def drifted_configs(tuning_file: TuningFile, lane: Lane) -> dict[str, str]:
    """Config ids of ``lane`` whose parameters in ``tuning_file`` differ from the lane's own
    record, each with a one-line description; ids the lane lacks are not here (selection
    skips them as unusable)."""
    out = {}
    for cid, config in tuning_file.configs.items():
        own = lane.config(cid) if config.lane == lane.name else None
        if own is not None and thaw(own.params) != thaw(config.params):
            out[cid] = (f"the file's parameters {_short(config.to_json())} differ from lane "
                        f"{lane.name!r}'s record {_short(own.to_json())}")
    return out


def _short(doc: Any) -> str:
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return text if len(text) <= 120 else text[:117] + "..."
