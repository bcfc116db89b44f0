"""Human-readable differences between two tuning files (``oasr tune diff``).

Promoting a user-tier or CI-built file into the shipped system tier is a reviewed change;
the diff says what a reviewer needs: which signatures appear, disappear or choose
differently, how the config set moves, and then every other field that differs, down to the
cost model's held-out evidence: two files differ byte for byte only where a line here says so.
"""

from __future__ import annotations

import json
from typing import Any

from .schema import Entry, TuningFile

_ABSENT = object()


def describe_choices(entry: Entry) -> str:
    """An entry's choices in one line: ``<=512 A, <=2152 B, else torch; 1x3000 C``."""
    parts = [f"<={r.m_hi} {r.choice}" if r.m_hi is not None else f"else {r.choice}"
             for r in entry.regions]
    text = ", ".join(parts)
    if entry.points:
        points = ", ".join(f"{p} {c}" for p, c in sorted(entry.points.items()))
        text = f"{text}; {points}" if text else points
    return text


def _changed_fields(a: Entry, b: Entry) -> list[str]:
    return [name for name in ("evidence", "source", "notes", "soft")
            if getattr(a, name) != getattr(b, name)]


def _show(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(", ", ": "))


def _small(values: list) -> bool:
    """A short list of scalars (a tile, a measured ``[median, sigma, n]``): shown whole."""
    return len(values) <= 4 and not any(isinstance(v, (dict, list)) for v in values)


def field_changes(path: str, a: Any, b: Any) -> list[str]:
    """One line per differing leaf of two JSON values under ``path``: ``+ path: new``,
    ``- path: old`` or ``~ path: old -> new``. Objects are walked by key, lists of one length
    by index (short lists of scalars whole); anything else that differs is one line."""
    if a is _ABSENT:
        return [f"+ {path}: {_show(b)}"]
    if b is _ABSENT:
        return [f"- {path}: {_show(a)}"]
    if isinstance(a, dict) and isinstance(b, dict):
        return [line for key in sorted(set(a) | set(b))
                for line in field_changes(f"{path}.{key}", a.get(key, _ABSENT),
                                          b.get(key, _ABSENT))]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b) and not _small(a):
        return [line for i, (x, y) in enumerate(zip(a, b, strict=True))
                for line in field_changes(f"{path}[{i}]", x, y)]
    return [] if a == b and type(a) is type(b) else [f"~ {path}: {_show(a)} -> {_show(b)}"]


def diff_files(a: TuningFile, b: TuningFile) -> list[str]:
    """Lines describing how ``b`` differs from ``a``; empty when they are identical.

    First one line per signature key, sorted: ``+ key: choices`` (only in b), ``- key:
    choices`` (only in a), ``~ key: old -> new`` (choices differ) or ``~ key: same choices;
    evidence, notes`` followed by the differing fields of that entry. Then every other
    differing field of the file (family, arch, stamps, provenance, configs, coverage basis,
    the cost model with its evidence) as :func:`field_changes` lines, and last the config
    count and its delta when anything differs.
    """
    from .codec import encode

    ja, jb = encode(a), encode(b)
    lines = []
    for key in sorted(set(a.entries) | set(b.entries)):
        old, new = a.entries.get(key), b.entries.get(key)
        if old is None and new is not None:
            lines.append(f"+ {key}: {describe_choices(new)}")
        elif new is None and old is not None:
            lines.append(f"- {key}: {describe_choices(old)}")
        elif old is not None and new is not None and old != new:
            before, after = describe_choices(old), describe_choices(new)
            if before != after:
                lines.append(f"~ {key}: {before} -> {after}")
            else:
                lines.append(f"~ {key}: same choices; {', '.join(_changed_fields(old, new))}")
                ea, eb = ja["entries"][key], jb["entries"][key]
                lines += ["  " + line for field in sorted(set(ea) | set(eb))
                          if field not in ("regions", "points")
                          for line in field_changes(field, ea.get(field, _ABSENT),
                                                    eb.get(field, _ABSENT))]
    for section in [k for k in ja if k != "entries"] + [k for k in jb if k not in ja]:
        lines += field_changes(section, ja.get(section, _ABSENT), jb.get(section, _ABSENT))
    if lines:
        changed_configs = sorted(cid for cid in set(a.configs) | set(b.configs)
                                 if cid not in a.configs or cid not in b.configs
                                 or a.configs[cid].to_json() != b.configs[cid].to_json())
        delta = len(b.configs) - len(a.configs)
        lines.append(f"configs: {len(a.configs)} -> {len(b.configs)} ({delta:+d}); "
                     f"{len(changed_configs)} added, removed or changed")
    return lines
