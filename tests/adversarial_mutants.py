"""The adversarial suite's mutation check: 21 deliberate bugs and the tests that kill each.

Each :class:`Mutant` is a text edit of the production code (every ``old`` must occur exactly
once) and the suite tests that must fail once it is applied. Run them all, or some by id::

    python3 tests/adversarial_mutants.py            # every mutant, then the baseline
    python3 tests/adversarial_mutants.py M07 M20    # these

For each mutant the runner applies the edit in the working tree, runs its killing tests
(``pytest -x``), and restores the file whatever happens; a mutant is killed when pytest
reports a failing test (exit 1). It then runs every killing test on the unmutated code,
which must pass. It prints one line per mutant and the score, and writes the figures as JSON
to the path given with ``--json``. ``.notes/adversarial.md`` records the last run.

The mutants are the 21 bugs of the 2026-12-03 reliability trial: the 14 its suite caught and
the 7 it let through (5 caught only by wider tests, 2 by none).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import attrs

REPO = Path(__file__).resolve().parents[1]


@attrs.frozen
class Mutant:
    id: str
    what: str
    files: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]
    """Per file (relative to the repository): its ``(old, new)`` edits."""
    kills: tuple[str, ...]
    """pytest node ids (relative to the repository) that fail under the mutant."""


def _m(id: str, what: str, path: str, edits: list[tuple[str, str]], *kills: str,
       extra: tuple[str, list[tuple[str, str]]] | None = None) -> Mutant:
    files = [(path, tuple(edits))] + ([(extra[0], tuple(extra[1]))] if extra else [])
    return Mutant(id, what, tuple(files), tuple(kills))


R = "tests/test_adversarial_readers.py::"
J = "tests/test_adversarial_jit.py::"
E = "tests/test_adversarial_entries.py::"

MUTANTS = (
    _m("M01", "depth guard removed", "oasr_core/database/codec.py",
       [('    inconclusive, with the strings cut out.\n    """\n',
         '    inconclusive, with the strings cut out.\n    """\n    return\n')],
       R + "test_depth_guard_at_the_limit"),
    _m("M02", "JIT place check removed", "oasr_core/jit/trust.py",
       [("        why = _unsafe(st)\n", "        why = None\n")],
       J + "test_a_place_others_can_write_is_refused"),
    _m("M03", "JIT library hash not compared", "oasr_core/jit/trust.py",
       [("    if actual != expected:\n", "    if False:\n")],
       J + "test_a_swapped_library_is_refused"),
    _m("M04", "a manifest without the hash trusted (first-use trust)",
       "oasr_core/jit/trust.py",
       [('        return f"its manifest records no sha256 for {library.name}"\n',
         "        return None\n")],
       J + "test_a_truncated_library_never_signals_in_a_fresh_process",
       extra=("oasr_core/jit/cache.py",
              [("    if not isinstance(recorded, str) or not trust.SHA256_HEX.fullmatch(recorded):",
                "    if False:")])),
    _m("M05", "every content counts as marked (full check skipped)",
       "oasr_core/database/validated.py",
       [('    """Whether content with ``mark`` was checked in full before."""\n',
         '    """Whether content with ``mark`` was checked in full before."""\n    return True\n')],
       R + "test_a_malformed_entry_skips_the_file_when_first_read"),
    _m("M06", "the file's parameters served instead of the lane's record",
       "oasr_core/selection.py",
       [("            own = lane.config(config.id)\n", "            own = config\n")],
       "tests/test_adversarial_tiers.py::test_selection_serves_the_lanes_record"),
    _m("M07", "writer lock not taken", "oasr_core/database/writer.py",
       [("        with lock.acquire(poll_interval=_LOCK_POLL_S):\n",
         "        with open(os.devnull):\n")],
       "tests/test_database_concurrency.py::test_concurrent_writer_processes_lose_nothing"),
    _m("M08", "tuning files written in place (not atomic)", "oasr_core/files.py",
       [('    try:\n        with os.fdopen(fd, "wb") as handle:\n',
         '    os.close(fd)\n    os.unlink(tmp)\n    tmp = path\n'
         '    try:\n        with open(path, "wb") as handle:\n')],
       "tests/test_database_concurrency.py::test_writers_killed_mid_write_leave_a_valid_file"),
    _m("M09", "environment variables not checked", "oasr_core/variables.py",
       [("        if check is not None:\n            check(name, os.environ[name])\n",
         "        if False:\n            check(name, os.environ[name])\n")],
       "tests/test_adversarial_environment.py::test_a_bad_value_is_exit_2_with_one_line"),
    _m("M10", "--fresh drops the replaced file", "oasr_core/database/writer.py",
       [('    aside = files.keep_aside(path, "replaced")\n', "    aside = None\n")],
       "tests/test_adversarial_writers.py::test_fresh_keeps_the_replaced_file_aside"),
    _m("M11", "a malformed cost model accepted", "oasr_core/runtime.py",
       [("    if payload is None:\n        return None\n    from collections.abc import Mapping\n",
         "    return None\n    from collections.abc import Mapping\n")],
       "tests/test_adversarial_model.py::test_a_malformed_model_is_skipped_with_one_warning"),
    _m("M12", "name ownership by distribution name only", "oasr_core/registry.py",
       [('    order = (provider.distribution or "", provider.plugin)\n',
         '    order = (provider.distribution or "", provider.plugin)\n    return order\n')],
       "tests/test_adversarial_plugins.py::test_gemm_is_served_from_the_shipped_table_despite"
       "_the_impostors",
       "tests/test_adversarial_plugins.py::test_another_familys_lane_cannot_take_a_lane_name"),
    _m("M13", "bad JSON raised as a raw exception", "oasr_core/database/codec.py",
       [("    except json.JSONDecodeError as exc:\n", "    except KeyError as exc:\n"),
        ("    except ValueError as exc:\n        raise DatabaseError(f\"{origin}: not valid JSON",
         "    except LookupError as exc:\n        raise DatabaseError(f\"{origin}: not valid "
         "JSON")],
       "tests/test_adversarial_fuzz.py::test_mutations_crash_no_reader"),
    _m("M14", "size limit ignored", "oasr_core/database/codec.py",
       [("    limit = max_file_bytes() if limit is None else limit\n",
         "    limit = 2**62 if limit is None else limit\n")],
       R + "test_the_size_limit_is_one_line_naming_file_and_limit"),
    _m("M15", "duplicate JSON keys accepted", "oasr_core/database/codec.py",
       [("    out = dict(pairs)\n    if len(out) != len(pairs):\n",
         "    out = dict(pairs)\n    if False:\n")],
       E + "test_a_duplicate_key_makes_the_file_unreadable"),
    _m("M16", "the eager loader skips the family's entry checks",
       "oasr_core/database/loader.py",
       [("    for key, entry in selected:\n        check_entry(family, key, entry, origin=origin)\n",
         "    for key, entry in selected:\n        pass\n")],
       E + "test_an_entry_the_family_cannot_have_fails_eager_and_lazy_alike"),
    _m("M17", "the file's lane not checked", "oasr_core/database/loader.py",
       [("    if lanes is None:\n        return\n", "    if True:\n        return\n")],
       E + "test_a_file_of_a_lane_nobody_registered_is_skipped"),
    _m("M18", "a stamped default ignored", "oasr_core/sentinels.py",
       [('    if not isinstance(stamped, str) or stamped in ("*", lane.default_config):\n',
         "    if True:\n")],
       E + "test_a_stamped_default_serves_the_config_it_was_measured_as"),
    _m("M19", "a corrupt file overwritten, not moved aside", "oasr_core/database/writer.py",
       [("    aside = files.move_aside(path)\n", "    aside = path\n")],
       E + "test_the_writer_moves_a_corrupt_file_aside"),
    _m("M20", "the lazy reader skips the family's entry checks",
       "oasr_core/database/loader.py",
       [("                              check=lambda key, entry: check_entry(",
         "                              check=lambda key, entry: None and check_entry(")],
       E + "test_an_entry_the_family_cannot_have_fails_eager_and_lazy_alike",
       E + "test_a_forged_mark_still_refuses_the_bad_entry_at_lookup"),
    _m("M21", "the fallback's can-the-shape-run guard removed", "oasr_core/selection.py",
       [("    if sel.config is not None and not lane.supports(sel.config, problem):\n",
         "    if sel.config is not None and False:\n")],
       E + "test_the_untuned_fallback_never_serves_a_config_the_shape_cannot_run"),
)


def _pytest(nodes: tuple[str, ...]) -> tuple[int, float, str]:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                           *nodes], cwd=REPO, capture_output=True, text=True)
    tail = (proc.stdout.strip().splitlines() or [""])[-1]
    return proc.returncode, time.monotonic() - started, tail


def run(mutant: Mutant) -> dict:
    """Apply ``mutant``, run its killing tests, restore its files; the outcome."""
    originals = {REPO / name: (REPO / name).read_text() for name, _ in mutant.files}
    mutated = {}
    for name, edits in mutant.files:
        text = originals[REPO / name]
        for old, new in edits:
            if text.count(old) != 1:
                return {"id": mutant.id, "killed": False,
                        "error": f"edit not found exactly once in {name}: {old[:60]!r}"}
            text = text.replace(old, new)
        mutated[REPO / name] = text
    try:
        for path, text in mutated.items():
            path.write_text(text)
        rc, seconds, tail = _pytest(mutant.kills)
    finally:
        for path, text in originals.items():
            path.write_text(text)
    return {"id": mutant.id, "what": mutant.what, "killed": rc == 1, "rc": rc,
            "seconds": round(seconds, 1), "pytest": tail, "kills": list(mutant.kills)}


def main(argv: list[str]) -> int:
    out = None
    if "--json" in argv:
        i = argv.index("--json")
        out, argv = Path(argv[i + 1]), argv[:i] + argv[i + 2:]
    chosen = [m for m in MUTANTS if not argv or m.id in argv]
    results = []
    for mutant in chosen:
        result = run(mutant)
        results.append(result)
        print(f"{result['id']} {'killed' if result['killed'] else 'SURVIVED'} "
              f"({result.get('seconds', '-')} s) {mutant.what}: {result.get('pytest') or result.get('error')}",
              flush=True)
    nodes = tuple(dict.fromkeys(n for m in chosen for n in m.kills))
    rc, seconds, tail = _pytest(nodes)
    print(f"baseline (unmutated, every killing test): {'pass' if rc == 0 else 'FAIL'} "
          f"({seconds:.0f} s) {tail}")
    killed = sum(r["killed"] for r in results)
    print(f"score: {killed}/{len(results)}")
    if out is not None:
        out.write_text(json.dumps({"score": f"{killed}/{len(results)}", "baseline_rc": rc,
                                   "mutants": results}, indent=1) + "\n")
    return 0 if killed == len(results) and rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
