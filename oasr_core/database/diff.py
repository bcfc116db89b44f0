"""Human-readable differences between two tuning files (``oasr tune diff``).

Promoting a user-tier or CI-built file into the shipped system tier is a reviewed change;
the diff says what a reviewer needs: which signatures appear, disappear or choose
differently, and how the config set moves.
"""

from __future__ import annotations

from .schema import Entry, TuningFile


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


def diff_files(a: TuningFile, b: TuningFile) -> list[str]:
    """Lines describing how ``b`` differs from ``a``; empty when they are identical.

    Header lines note a different family, arch, lane or stamp. Then one line per signature
    key, sorted: ``+ key: choices`` (only in b), ``- key: choices`` (only in a),
    ``~ key: old -> new`` (choices differ) or ``~ key: same choices; evidence, notes``.
    The last line gives the config count and its delta when anything differs.
    """
    lines = []
    if a.family != b.family:
        lines.append(f"~ family: {a.family} -> {b.family}")
    if a.arch != b.arch:
        lines.append(f"~ arch: {a.arch.family}/{a.arch.lane} -> {b.arch.family}/{b.arch.lane}")
    if a.soft != b.soft:
        changed = sorted(k for k in set(a.soft) | set(b.soft) if a.soft.get(k) != b.soft.get(k))
        lines.append(f"~ validators: {', '.join(changed)}")
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
    changed_configs = sorted(cid for cid in set(a.configs) | set(b.configs)
                             if cid not in a.configs or cid not in b.configs
                             or a.configs[cid].to_json() != b.configs[cid].to_json())
    if lines or changed_configs or a.coverage_basis != b.coverage_basis or a.model != b.model:
        delta = len(b.configs) - len(a.configs)
        lines.append(f"configs: {len(a.configs)} -> {len(b.configs)} ({delta:+d}); "
                     f"{len(changed_configs)} added, removed or changed")
    return lines
