"""Fuzzing tuning files: whatever the bytes, loading raises DatabaseError or loads cleanly.

A loaded result must also survive a round trip (dump, reload, equal), and a writer facing
any such file must leave a loadable file behind.
"""

from __future__ import annotations

import importlib.util
import json
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oasr_core import database
from oasr_core.errors import DatabaseError

_spec = importlib.util.spec_from_file_location(
    "oasr_dbkit_fuzz", Path(__file__).parent / "data" / "db" / "dbkit.py")
kit = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(kit)

FUZZ = settings(max_examples=150, deadline=None, database=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture])

BASE = database.TuningFile(
    family="gemm", arch=database.ArchStamp("sm90", "sm90_wgmma"), configs=kit.configs(),
    coverage_basis=(kit.C,), model={"gemm": {"a_c": [0.5, 1.25]}, "arch": {"sms": 132}},
    provenance={"tool": "fuzz", "census": ["offline.json"]},
    validators=database.Validators(soft={"impl_hash": "1234", "sku": {"sms": 132}}),
    entries={kit.gemm_key(512): kit.example_entry(soft={"impl_hash": "0000"}),
             kit.gemm_key(768, op="gemm_activation", dt="bf16"):
                 database.Entry(regions=((64, "fused"), (None, kit.C)), source="jit")},
).to_json()
BASE_BYTES = database.canonical_json(BASE).encode()

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=5),
    max_leaves=25)


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, (*prefix, i))


PATHS = [p for p in _paths(BASE) if p]


def _replaced(doc, path, value):
    doc = json.loads(json.dumps(doc))
    target = doc
    for part in path[:-1]:
        target = target[part]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return doc


_DELETE = object()


@pytest.fixture
def target(tmp_path) -> Path:
    path = tmp_path / "sm90" / "gemm.json"
    path.parent.mkdir(parents=True)
    return path


def _outcome(path: Path, data: bytes):
    """Load ``data`` from ``path``: the TuningFile, or the DatabaseError raised."""
    path.write_bytes(data)
    try:
        loaded = kit.load(path)
    except DatabaseError as exc:
        message = str(exc)
        assert message.startswith(str(path)) and "\n" not in message
        return exc
    assert database.TuningFile.from_json(json.loads(loaded.dumps())) == loaded
    return loaded


def test_the_base_document_is_valid(target):
    assert isinstance(_outcome(target, BASE_BYTES), database.TuningFile)


@FUZZ
@given(flips=st.lists(st.tuples(st.integers(0, len(BASE_BYTES) - 1), st.integers(0, 255)),
                      min_size=1, max_size=6))
def test_byte_flips(target, flips):
    data = bytearray(BASE_BYTES)
    for index, byte in flips:
        data[index] = byte
    _outcome(target, bytes(data))


@FUZZ
@given(length=st.integers(0, len(BASE_BYTES) - 2))
def test_truncations(target, length):
    assert isinstance(_outcome(target, BASE_BYTES[:length]), DatabaseError)


@FUZZ
@given(data=st.binary(max_size=400))
def test_binary_garbage(target, data):
    assert isinstance(_outcome(target, data), DatabaseError)


@FUZZ
@given(doc=JSON)
def test_random_json_documents(target, doc):
    assert isinstance(_outcome(target, json.dumps(doc).encode()), DatabaseError)


@FUZZ
@given(path=st.sampled_from(PATHS), value=JSON | st.just(_DELETE))
def test_a_field_replaced_by_random_json_or_deleted(target, path, value):
    _outcome(target, json.dumps(_replaced(BASE, path, value)).encode())


@FUZZ
@given(version=st.one_of(st.integers(), st.floats(allow_nan=False), st.text(max_size=4),
                         st.none(), st.booleans()).filter(lambda v: v != 1))
def test_wrong_schema_versions(target, version):
    result = _outcome(target, json.dumps({**BASE, "schema_version": version}).encode())
    assert isinstance(result, DatabaseError)
    if type(version) is int and version > 1:
        assert isinstance(result, database.SchemaTooNewError)


DEGENERATE = {"empty": b"", "blank": b"   \n", "null": b"null", "object": b"{}", "list": b"[]",
              "string": b'"gemm"', "zero": b"0", "bom": b"\xef\xbb\xbf{}",
              "deep": b"[" * 100_000, "nan": b'{"a": NaN}',
              "huge": b'{"schema_version": 1e400}', "nul": b"\x00" * 64}


@pytest.mark.parametrize("data", DEGENERATE.values(), ids=DEGENERATE.keys())
def test_degenerate_files(target, data):
    assert isinstance(_outcome(target, data), DatabaseError)


@settings(FUZZ, max_examples=40)
@given(flips=st.lists(st.tuples(st.integers(0, len(BASE_BYTES) - 1), st.integers(0, 255)),
                      min_size=1, max_size=4),
       length=st.integers(1, len(BASE_BYTES)))
def test_a_writer_always_leaves_a_loadable_file(target, flips, length):
    data = bytearray(BASE_BYTES)
    for index, byte in flips:
        data[index] = byte
    target.write_bytes(bytes(data[:length]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", database.TuningDatabaseWarning)
        try:
            kit.write(target, {kit.gemm_key(4096): kit.example_entry()})
        except database.SchemaTooNewError:
            return
    assert kit.gemm_key(4096) in kit.load(target).entries
    for leftover in target.parent.glob("gemm.json.corrupt-*"):
        leftover.unlink()
