"""Tuning-file schema: lookup, signature keys, structure, migrations, hard validators."""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path

import pytest

from oasr_core import database
from oasr_core.database import migrations
from oasr_core.errors import DatabaseError
from oasr_core.types import Config, Sentinel

_spec = importlib.util.spec_from_file_location(
    "oasr_dbkit_schema", Path(__file__).parent / "data" / "db" / "dbkit.py")
kit = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(kit)

A, B, C = kit.GEMM_IDS
KEY = "gemm|op=gemm|dt=half|N=512|K=256"


def _file(entries=None, **overrides) -> database.TuningFile:
    fields = dict(family="gemm", arch=database.ArchStamp("sm90", "sm90_wgmma"),
                  configs=kit.configs(), entries={KEY: kit.example_entry()} if entries is None
                  else entries, validators=database.Validators(soft=kit.IMPL))
    fields.update(overrides)
    return database.TuningFile(**fields)


def _doc() -> dict:
    return _file().to_json()


def _write_doc(tmp_path: Path, doc) -> Path:
    path = tmp_path / "sm90" / "gemm.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


# --- lookup -------------------------------------------------------------------------------

@pytest.mark.parametrize("m, expected", [(1, A), (416, A), (512, A), (513, B), (2152, B),
                                         (2153, "torch"), (10**9, "torch")])
def test_spec_example_regions_round_up(m, expected):
    assert kit.example_entry().lookup(m) == expected


@pytest.mark.parametrize("m, expected", [(416, A), (2152, B), (2153, None)])
def test_without_catch_all_a_larger_size_misses(m, expected):
    entry = kit.example_entry(regions=((512, A), (2152, B)))
    assert entry.lookup(m) == expected
    assert _file({KEY: entry}).lookup(KEY, m) == expected


def test_exact_points_first_then_regions():
    entry = database.Entry(points={"1x3000": "p"}, regions=((8192, "r"),), source="converted")
    assert entry.lookup(6000, "1x3000") == "p"
    assert entry.lookup(6000, "2x3000") == "r"
    assert entry.lookup(6000) == "r"
    assert entry.lookup(9000, "3x3000") is None
    assert database.Entry(points={"1x3000": "p"}).lookup(1, "2x3000") is None


def test_missing_key_is_a_miss():
    assert _file().lookup("gemm|op=gemm|dt=half|N=1|K=1", 4) is None


def test_with_region_and_with_point_keep_order_stamp_and_evidence():
    entry = kit.example_entry(soft={"impl_hash": "old"})
    grown = entry.with_region(1024, C).with_region(512, B)
    assert [tuple(r) for r in grown.regions] == [(512, B), (1024, C), (2152, B),
                                                 (None, "torch")]
    assert grown.soft == entry.soft and grown.evidence == entry.evidence
    assert database.Entry(points={"1x1": "p"}).with_point("2x2", "r").points == {
        "1x1": "p", "2x2": "r"}


# --- signature keys -----------------------------------------------------------------------

def test_keys_spell_family_op_dtype_dims_in_order_and_parse_back():
    fam = kit.gemm_family()
    key = database.signature_key(fam, "gemm", "half", {"K": 256, "N": 512})
    assert key == KEY == database.signature_key(fam, "gemm", "half", (512, 256))
    parsed = database.parse_signature_key(key)
    assert (parsed.family, parsed.op, parsed.dtype, parsed.dims) == (
        "gemm", "gemm", "half", (("N", "512"), ("K", "256")))
    assert str(parsed) == key and parsed.dim("K") == "256"
    assert database.check_key(fam, key) == parsed


def test_keys_without_dtype():
    fam = kit.quant_family()
    key = database.signature_key(fam, "scaled_mm", None, (768, 256))
    assert key == "scaled_mm|op=scaled_mm|N=768|K=256"
    assert database.parse_signature_key(key).dtype is None
    with pytest.raises(ValueError, match="without dtype"):
        database.signature_key(fam, "scaled_mm", "int8", (768, 256))
    with pytest.raises(ValueError, match="keys by dtype"):
        database.signature_key(kit.gemm_family(), "gemm", None, (768, 256))


@pytest.mark.parametrize("op, dt, dims, needle", [
    ("gemm", "ha|lf", (1, 2), "'|'"),
    ("gemm", "ha=lf", (1, 2), "'='"),
    ("gemm", "half", ("1|2", 2), "'|'"),
    ("gemm", "half", ("a=b", 2), "'='"),
    ("gemm", "", (1, 2), "empty"),
    ("bmm", "half", (1, 2), "not an op"),
    ("gemm", "half", (1,), "2 dims"),
    ("gemm", "half", {"N": 1}, "missing"),
    ("gemm", "half", {"N": 1, "K": 2, "B": 3}, "unexpected"),
])
def test_bad_key_parts_are_refused(op, dt, dims, needle):
    with pytest.raises(ValueError, match=needle):
        database.signature_key(kit.gemm_family(), op, dt, dims)


@pytest.mark.parametrize("text", ["", "gemm", "gemm|N=1", "gemm|op=gemm|N", "gemm|op=a=b",
                                  "gemm|op=g|N=1|N=2", "|op=g", "gemm|op=", "gemm||op=g"])
def test_malformed_keys_do_not_parse(text):
    with pytest.raises(ValueError):
        database.parse_signature_key(text)


@pytest.mark.parametrize("key, needle", [
    ("conv1d|op=gemm|dt=half|N=1|K=2", "belongs to family"),
    ("gemm|op=bmm|dt=half|N=1|K=2", "not an op"),
    ("gemm|op=gemm|N=1|K=2", "needs a dt"),
    ("gemm|op=gemm|dt=half|K=2|N=1", "in that order"),
])
def test_check_key_against_the_family(key, needle):
    with pytest.raises(ValueError, match=needle):
        database.check_key(kit.gemm_family(), key)


# --- structure ----------------------------------------------------------------------------

def test_json_round_trip_and_canonical_text(tmp_path):
    tf = _file(model={"gemm": {"a": 1.5}}, coverage_basis=(C,), provenance={"tool": "t"})
    assert database.TuningFile.from_json(tf.to_json()) == tf
    doc = tf.to_json()
    assert doc["schema_version"] == database.SCHEMA_VERSION == 2
    assert doc["configs"][A] == {"lane": "sm90_wgmma", "tile": [32, 64, 64], "stages": 3}
    assert doc["entries"][KEY]["regions"] == [[512, A], [2152, B], [None, "torch"]]
    text = tf.dumps()
    assert json.loads(text) == doc
    assert '\n "arch": {\n  "family": "sm90",\n  "lane": "sm90_wgmma"\n },\n' in text
    assert '\n    [512, "b32x64x64_w16x32x64_s3"],\n' in text
    reordered = _file(configs=dict(reversed(list(kit.configs().items()))), model=tf.model,
                      coverage_basis=(C,), provenance={"tool": "t"})
    assert reordered.dumps() == text and reordered.digest() == tf.digest()


def test_empty_optional_entry_fields_are_omitted():
    doc = _file({KEY: database.Entry(regions=((None, A),), source="jit")}).to_json()
    assert doc["entries"][KEY] == {"regions": [[None, A]], "source": "jit"}
    assert "model" not in doc


@pytest.mark.parametrize("regions, needle", [
    ([[2152, A], [512, B]], "strictly ascending"),
    ([[512, A], [512, B]], "strictly ascending"),
    ([[None, A], [None, B]], "null"),
    ([[None, A], [512, B]], "null"),
    ([[0, A]], "positive"),
    ([[True, A]], "positive"),
    ([[5.5, A]], "positive"),
    ([[512]], "pair"),
    ([[512, A, 1]], "pair"),
    ([[512, "nope"]], "'nope'"),
    ([[512, ""]], "non-empty"),
    ([], "neither regions nor points"),
])
def test_malformed_regions_make_the_file_malformed(tmp_path, regions, needle):
    doc = _doc()
    doc["entries"][KEY]["regions"] = regions
    path = _write_doc(tmp_path, doc)
    with pytest.raises(DatabaseError, match=needle) as err:
        kit.load(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("mutate, needle", [
    (lambda d: d["coverage_basis"].append("ghost"), "coverage_basis names 'ghost'"),
    (lambda d: d["entries"][KEY].update(points={"1x3000": A}), "exact points"),
    (lambda d: d["entries"][KEY].update(regions=[[None, "heuristic"]]), "sentinel 'heuristic'"),
    (lambda d: d["entries"].update({"gemm|op=gemm|N=1|K=1": d["entries"][KEY]}), "dt="),
    (lambda d: d["entries"][KEY].update(source="guess"), "source"),
    (lambda d: d["entries"][KEY].update(notes="one note"), "notes"),
    (lambda d: d["entries"][KEY].update(extra=1), "extra fields found"),
    (lambda d: d["configs"].update(torch={"lane": "sm90_wgmma"}), "sentinel's name"),
    (lambda d: d["configs"][A].pop("lane"), "no 'lane'"),
    (lambda d: d["arch"].update(family="hopper"), "not like 'sm90'"),
    (lambda d: d["validators"].update(soft=[1]), "expected an object"),
    (lambda d: d["entries"][KEY]["evidence"].update(bad=float("nan")), "not valid JSON"),
])
def test_malformed_documents_are_refused_with_the_reason(tmp_path, mutate, needle):
    doc = _doc()
    mutate(doc)
    with pytest.raises(DatabaseError, match=needle):
        kit.load(_write_doc(tmp_path, doc))


def test_duplicate_keys_in_the_json_are_refused(tmp_path):
    path = tmp_path / "gemm.json"
    path.write_text('{"schema_version": 1, "schema_version": 1}')
    with pytest.raises(DatabaseError, match="duplicate key 'schema_version'"):
        kit.load(path)


def test_sentinels_the_family_allows_load(tmp_path):
    doc = _doc()
    doc["entries"][KEY]["regions"] = [[64, "fused"], [128, "default"], [None, "torch"]]
    assert kit.load(_write_doc(tmp_path, doc)).lookup(KEY, 100) == Sentinel.DEFAULT.value


# --- versions and migrations --------------------------------------------------------------

def test_a_newer_schema_is_refused_clearly(tmp_path):
    doc = _doc()
    doc["schema_version"] = database.SCHEMA_VERSION + 1
    with pytest.raises(database.SchemaTooNewError, match="newer oasr.*upgrade"):
        kit.load(_write_doc(tmp_path, doc))


@pytest.mark.parametrize("version, needle", [(0, "not a positive integer"),
                                             ("1", "not a positive integer"),
                                             (None, "not a positive integer")])
def test_a_bad_schema_version_is_refused(tmp_path, version, needle):
    doc = _doc()
    doc["schema_version"] = version
    with pytest.raises(DatabaseError, match=needle):
        kit.load(_write_doc(tmp_path, doc))


def test_no_version_at_all(tmp_path):
    doc = _doc()
    del doc["schema_version"]
    with pytest.raises(DatabaseError, match="no schema_version"):
        kit.load(_write_doc(tmp_path, doc))
    doc["schema"] = 7
    with pytest.raises(DatabaseError, match="legacy schema 7 is not supported"):
        kit.load(_write_doc(tmp_path, doc))


def test_the_migration_chain_runs_each_step_in_order():
    from oasr_core.versions import Step

    steps = []

    def v2_to_v3(raw, origin):
        steps.append((2, origin))
        return {**raw, "notes_v3": True}

    def v3_to_v4(raw, origin):
        steps.append((3, origin))
        return {k: v for k, v in raw.items() if k != "notes_v3"}

    chain = migrations.MIGRATIONS.with_current(4).register(Step(2, 3, v2_to_v3))
    doc = _doc()
    with pytest.raises(DatabaseError, match="schema_version 3 has no migration to 4"):
        migrations.migrate(copy.deepcopy(doc), "f.json", chain)
    chain = chain.register(Step(3, 4, v3_to_v4))
    steps.clear()
    out = migrations.migrate(copy.deepcopy(doc), "f.json", chain)
    assert steps == [(2, "f.json"), (3, "f.json")] and "schema_version" not in out
    doc["schema_version"] = 4
    assert migrations.migrate(doc, "f.json", chain) == out
    doc["schema_version"] = 5
    with pytest.raises(database.SchemaTooNewError, match="reads up to 4"):
        migrations.migrate(doc, "f.json", chain)


def test_a_version_1_file_loads_with_its_sentinels_unstamped(tmp_path):
    doc = _doc()
    doc["schema_version"] = 1
    doc["entries"][KEY]["regions"] = [[128, "default"], [None, "torch"]]
    tf = kit.load(_write_doc(tmp_path, doc))
    assert tf.lookup(KEY, 100) == Sentinel.DEFAULT.value
    assert "default" not in tf.entry_soft(KEY)
    assert tf.to_json()["schema_version"] == database.SCHEMA_VERSION == 2


def test_original_oasr_files_migrate_from_version_0(tmp_path):
    legacy = {
        "schema": 2, "family": "gemm", "arch": {"family": 90, "lane": "sm90_wgmma"},
        "validators": {"hard": {"schema": 2}, "soft": {"impl_hash": "abc", "sku": "*"}},
        "provenance": {"origin": "converted"},
        "configs": {A: {"kind": "cutlass", "lane": "sm90_wgmma", "tile": [32, 64, 64]},
                    "default": {"kind": "default"}, "cublas": {"kind": "torch"}},
        "coverage_basis": [A, "default"],
        "entries": {KEY: {"regions": [[512, A], [1024, "default"], [None, "cublas"]],
                          "valid_m": {A: [1, 512]}, "source": "converted",
                          "notes": ["from literals"]}},
    }
    tf = kit.load(_write_doc(tmp_path, legacy))
    assert tf.arch == database.ArchStamp("sm90", "sm90_wgmma")
    assert set(tf.configs) == {A} and tf.configs[A].params == {"tile": (32, 64, 64)}
    assert [tuple(r) for r in tf.entries[KEY].regions] == [(512, A), (1024, "default"),
                                                           (None, "torch")]
    assert tf.coverage_basis == (A,) and tf.soft == {"impl_hash": "abc", "sku": "*"}
    assert tf.provenance["migrated_from"] == "oasr schema 2"
    assert database.TuningFile.from_json(json.loads(tf.dumps())) == tf


# --- hard validators ----------------------------------------------------------------------

@pytest.mark.parametrize("load_kw, needle", [
    ({"family": kit.conv_family()}, "expected family 'conv1d'"),
    ({"family": kit.gemm_family(schema_version=2)}, "rebuild"),
    ({"arch": "sm100"}, "measured on arch family sm90, this is sm100"),
    ({"lanes": {}}, "is not a registered lane"),
])
def test_hard_validator_mismatches_raise(tmp_path, load_kw, needle):
    path = _write_doc(tmp_path, _doc())
    kw = {"family": kit.gemm_family(), "arch": "sm90", "lanes": kit.lanes(), **load_kw}
    with pytest.raises(DatabaseError, match=needle):
        database.load_tuning_file(path, **kw)


def test_a_newer_family_schema_is_refused(tmp_path):
    doc = _doc()
    doc["family_schema_version"] = 2
    with pytest.raises(database.SchemaTooNewError, match="newer gemm plugin"):
        kit.load(_write_doc(tmp_path, doc))


@pytest.mark.parametrize("lane, needle", [("sm80_only", "does not run on sm90"),
                                          ("conv_lane", "is a lane of family conv1d"),
                                          ("nope", "is not a registered lane")])
def test_the_file_lane_must_be_a_lane_of_the_family_on_the_arch(tmp_path, lane, needle):
    doc = _doc()
    doc["arch"]["lane"] = lane
    with pytest.raises(DatabaseError, match=needle) as err:
        kit.load(_write_doc(tmp_path, doc))
    assert "sm80_mma, sm90_wgmma" in str(err.value)


def test_configs_of_another_lane_are_loaded_not_refused(tmp_path):
    doc = _doc()
    doc["configs"]["m1"] = Config("m1", "sm80_mma", {"tile": [1]}).to_json()
    doc["entries"][KEY]["regions"] = [[64, "m1"], [None, A]]
    tf = kit.load(_write_doc(tmp_path, doc))
    assert tf.lane == "sm90_wgmma" and tf.configs["m1"].lane == "sm80_mma"
    assert tf.lookup(KEY, 10) == "m1"


def test_load_accepts_every_test_family(tmp_path):
    conv = database.TuningFile(
        family="conv1d", arch=database.ArchStamp("sm90", "conv_lane"),
        configs=kit.configs("conv_lane"),
        entries={"conv1d|op=conv1d|dt=fp16|Cin=80|Cout=384|k=3":
                 database.Entry(points={"1x3000": "p"}, regions=((8192, "r"),))})
    path = tmp_path / "conv1d.json"
    path.write_text(conv.dumps())
    got = database.load_tuning_file(path, family=kit.conv_family(), arch="sm90",
                                    lanes=kit.lanes())
    assert got == conv
    quant = database.TuningFile(
        family="scaled_mm", arch=database.ArchStamp("sm90", "quant_lane"),
        configs=kit.configs("quant_lane"),
        entries={"scaled_mm|op=scaled_mm|N=768|K=256":
                 database.Entry(regions=((7136, "heuristic"), (None, "big")))})
    path.write_text(quant.dumps())
    got = database.load_tuning_file(path, family=kit.quant_family(), arch="sm90",
                                    lanes=kit.lanes())
    assert got.lookup("scaled_mm|op=scaled_mm|N=768|K=256", 7137) == "big"
    quant_torch = json.loads(path.read_text())
    quant_torch["entries"]["scaled_mm|op=scaled_mm|N=768|K=256"]["regions"] = [[None, "torch"]]
    path.write_text(json.dumps(quant_torch))
    with pytest.raises(DatabaseError, match="does not allow"):
        database.load_tuning_file(path, family=kit.quant_family(), arch="sm90",
                                  lanes=kit.lanes())


# --- diff ---------------------------------------------------------------------------------

def test_diff_lists_added_removed_and_changed_signatures():
    other = kit.gemm_key(768)
    gone = kit.gemm_key(1024)
    a = _file({KEY: kit.example_entry(), gone: database.Entry(regions=((None, C),))},
              configs=kit.configs())
    b = _file({KEY: kit.example_entry(regions=((640, A), (None, "torch"))),
               other: database.Entry(points={}, regions=((None, A),))},
              configs={A: kit.configs()[A]})
    lines = database.diff_files(a, b)
    removed = [f"- configs.{cid}: " for cid in sorted(set(a.configs) - set(b.configs))]
    assert [line for line in lines if not line.startswith("- configs.")] == [
        f"- {gone}: else {C}",
        f"~ {KEY}: <=512 {A}, <=2152 {B}, else torch -> <=640 {A}, else torch",
        f"+ {other}: else {A}",
        "configs: 3 -> 1 (-2); 2 added, removed or changed",
    ]
    assert [line.partition(": ")[0] + ": " for line in lines
            if line.startswith("- configs.")] == removed
    assert database.diff_files(a, a) == []
    notes_only = _file({KEY: kit.example_entry(notes=("re-measured",))}, configs=a.configs)
    lines = database.diff_files(_file(), notes_only)
    assert lines[0] == f"~ {KEY}: same choices; notes"
    assert lines[1].startswith("  ") and "re-measured" in lines[1], lines


def test_diff_names_every_differing_field_down_to_the_model_evidence():
    """Two files that choose alike but differ in one held-out figure of the cost model (what
    a replay under another BLAS kernel once produced) diff to that figure, not to nothing."""
    model = {"kind": "oasr-cost-model", "evidence": {"held_out": {"group": {
        "regret_geomean": 0.149, "regret_p95": 0.52872}}}}
    changed = copy.deepcopy(model)
    changed["evidence"]["held_out"]["group"]["regret_geomean"] = 0.14626
    a, b = _file(model=model), _file(model=changed)
    assert database.diff_files(a, b) == [
        "~ model.evidence.held_out.group.regret_geomean: 0.149 -> 0.14626",
        "configs: 3 -> 3 (+0); 0 added, removed or changed"]
    stamped = _file(model=model, provenance={"tool": "x", "runs": ["r1", "r2"]})
    assert database.diff_files(a, stamped)[0] == '+ provenance.runs: ["r1", "r2"]'


# --- the shared converter -----------------------------------------------------------------

def test_make_converter_is_strict_and_lets_plugins_register_hooks():
    import types as pytypes

    import attrs
    import cattrs

    from oasr_core.serialization import describe_structure_error, make_converter

    @attrs.frozen
    class Sample:
        n: int
        names: tuple[str, ...] = ()

    calls = []

    class Hooks:
        def oasr_configure_converter(self, converter):
            calls.append(converter)

    converter = make_converter(pytypes.SimpleNamespace(hook=Hooks()))
    assert calls == [converter]
    assert converter.structure({"n": 3, "names": ["a"]}, Sample) == Sample(3, ("a",))
    for raw, needle in [({"n": "3"}, "expected an integer, got the string '3' @ $.n"),
                        ({"n": True}, "expected an integer, got a boolean @ $.n"),
                        ({"n": 1, "names": "ab"}, "expected a list, got the string 'ab'"),
                        ({"n": 1, "extra": 0}, "extra fields found (extra) @ $")]:
        with pytest.raises(cattrs.BaseValidationError) as err:
            converter.structure(raw, Sample)
        assert any(needle in line for line in describe_structure_error(err.value)), needle
    assert make_converter() is not make_converter()
