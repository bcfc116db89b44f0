"""Large-but-legal and mutated inputs for the adversarial tests and the fuzz run.

:func:`big_user_tier` writes a user-tier gemm file of ``entries`` signatures built from the
shipped sm90 table's configs (what a long-lived deployment's cache could grow to);
:func:`mutations` yields seeded byte- and structure-level mutations of a JSON document.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "db/sm90/gemm.json"


def big_user_tier(path: Path, entries: int) -> Path:
    """A valid sm90 gemm tuning file of ``entries`` entries at ``path``: each the regions of
    one shipped entry and a short note (~240 bytes an entry, as a long-lived cache grows)."""
    doc = json.loads(SHIPPED.read_text())
    regions = next(iter(doc["entries"].values()))["regions"]
    doc["entries"] = {
        f"gemm|op=gemm|dt=half|N={8 * (1 + i % 997)}|K={8 * (1 + i // 997)}":
            {"regions": regions, "source": "jit", "notes": [f"autotune point {i}"]}
        for i in range(entries)}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, separators=(",", ":")))
    return path


def json_paths(value: Any, prefix: tuple = ()) -> Iterator[tuple]:
    """Every path into ``value`` (keys and indexes), the empty one first."""
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from json_paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from json_paths(v, (*prefix, i))


ODD_VALUES = (None, True, False, 0, -1, 1.5, 2**70, "", "x", "../../../x", "torch",
              "heuristic", [], [[]], {}, {"a": {}}, [None, "x"], 1e308, -0.0)


def mutate_document(doc: Any, rng: random.Random) -> Any:
    """``doc`` with one structural mutation: a value replaced, a key dropped or renamed, a
    container duplicated or nested deeper."""
    doc = copy.deepcopy(doc)
    paths = [p for p in json_paths(doc) if p]
    if not paths:
        return rng.choice(ODD_VALUES)
    path = rng.choice(paths)
    parent = doc
    for step in path[:-1]:
        parent = parent[step]
    last = path[-1]
    action = rng.randrange(5)
    if action == 0:
        parent[last] = copy.deepcopy(rng.choice(ODD_VALUES))
    elif action == 1 and isinstance(parent, dict):
        del parent[last]
    elif action == 2 and isinstance(parent, dict):
        parent[f"{last}_"] = parent.pop(last)
    elif action == 3:
        parent[last] = [parent[last]] if rng.random() < 0.5 else {"x": parent[last]}
    else:
        parent[last] = copy.deepcopy(parent[rng.choice(list(parent.keys()) if isinstance(
            parent, dict) else range(len(parent)))])
    return doc


def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    """``data`` with one byte-level mutation: truncated, a byte flipped, a span repeated or
    deleted, or wrapped in deep nesting."""
    if not data:
        return b"{"
    action = rng.randrange(5)
    i = rng.randrange(len(data))
    if action == 0:
        return data[:i]
    if action == 1:
        return data[:i] + bytes([rng.randrange(256)]) + data[i + 1:]
    if action == 2:
        j = min(len(data), i + rng.randrange(1, 64))
        return data[:j] + data[i:j] * rng.randrange(2, 6) + data[j:]
    if action == 3:
        return data[:i] + data[i + rng.randrange(1, 64):]
    depth = rng.choice((50, 500, 5000, 100000))
    return b"[" * depth + data + b"]" * depth


def mutations(doc: Any, rng: random.Random, count: int) -> Iterator[bytes]:
    """``count`` mutated encodings of ``doc``: structure first, then bytes, sometimes both."""
    base = json.dumps(doc).encode()
    for _ in range(count):
        r = rng.random()
        if r < 0.5:
            yield json.dumps(mutate_document(doc, rng)).encode()
        elif r < 0.8:
            yield mutate_bytes(base, rng)
        else:
            yield mutate_bytes(json.dumps(mutate_document(doc, rng)).encode(), rng)
