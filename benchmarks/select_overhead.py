"""Cost of a memoised oasr_core.select() next to a plain dict lookup, measured in one run.

The runtime path of an op is ``select(family, op, dtype, dims, m)`` on every call; after the
first resolution of a shape in an epoch that must be one dict lookup. This script resolves a
set of shapes once (through a real tuning file in a temporary user tier), then times:

- ``dict``: ``table[(family, op, dtype, dims, m)]`` on a plain dict holding the same answers
  (the key tuple built per call, as a caller would);
- ``select``: ``oasr_core.select(family, op, dtype, dims, m, arch)`` memoised;
- ``first``: a cold resolution (memo cleared before each), for scale.

Target: ``select`` within 3x of ``dict``. Run: ``python benchmarks/select_overhead.py``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import timeit
from pathlib import Path


def _setup(tmp: Path):
    os.environ["OASR_TUNE_USER_DB"] = str(tmp)
    os.environ["OASR_TUNE_SYSTEM_DB"] = str(tmp / "no-system")
    (tmp / "no-system").mkdir()
    from oasr_core import database, runtime
    from oasr_core.plugins import make_plugin_manager
    from oasr_core.testing import FakeFamilyPlugin

    pm = make_plugin_manager(load_entrypoints=False)
    pm.register(FakeFamilyPlugin())
    rt = runtime.Runtime(pm=pm)
    runtime.install_runtime(rt)
    fam = rt.registry.family("fake")
    lane = rt.registry.active_lane("fake", "sm90")
    ids = [c.id for c in lane.config_space][:2]
    entry = database.Entry(regions=((512, ids[0]), (2152, ids[1]), (None, "torch")))
    key = database.signature_key(fam, "fake", "half", (512, 256))
    database.write_entries(database.tier_path(tmp, "sm90", fam), family=fam, arch="sm90",
                           lane=lane.name, entries={key: entry},
                           configs={c: lane.config(c) for c in ids}, soft={})
    return fam


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--number", type=int, default=200_000, help="calls per timing")
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        fam = _setup(Path(d))
        import oasr_core
        from oasr_core import selection

        shapes = [("fake", "fake", "fp16", (512, 256), m, "sm90") for m in (16, 416, 1000, 4096)]
        table = {s[:5]: oasr_core.select(*s) for s in shapes}
        select = oasr_core.select
        f, op, dt, dims, m, arch = shapes[1]
        env = {"select": select, "table": table, "f": f, "op": op, "dt": dt, "dims": dims,
               "m": m, "arch": arch, "clear": selection.clear_memo}
        stmts = {
            "dict": "table[(f, op, dt, dims, m)]",
            "select": "select(f, op, dt, dims, m, arch)",
        }
        res = {}
        for name, stmt in stmts.items():
            runs = timeit.repeat(stmt, globals=env, number=args.number, repeat=args.repeat)
            res[name] = statistics.median(runs) / args.number * 1e9
        cold = timeit.repeat("clear(); select(f, op, dt, dims, m, arch)", globals=env,
                             number=2000, repeat=5)
        res["first"] = statistics.median(cold) / 2000 * 1e9
        print(f"# select overhead ({platform.python_implementation()} "
              f"{platform.python_version()}, {platform.machine()}, family {fam.name})\n")
        print("| path | ns per call | vs dict |")
        print("|---|---|---|")
        for name in ("dict", "select", "first"):
            print(f"| {name} | {res[name]:.1f} | {res[name] / res['dict']:.2f}x |")
        ratio = res["select"] / res["dict"]
        print(f"\nmemoised select is {ratio:.2f}x a plain dict lookup (target: <= 3x): "
              f"{'PASS' if ratio <= 3 else 'FAIL'}")


if __name__ == "__main__":
    main()
