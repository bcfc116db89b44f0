"""The plugin kit's C++ side: the call record's ctypes mirror against the header, the flag and
status values against the header, the include dir on every module's path, and a generated
unit's text."""

from __future__ import annotations

import ctypes
import json
import re

from oasr_core import jit
from oasr_core.jit import kit
from oasr_core.types import Config

HEADER = (kit.INCLUDE_DIR / "oasr_kit" / "launcher.cuh").read_text()


def _struct_fields(name: str) -> list[str]:
    body = re.search(r"struct " + name + r" \{(.*?)\};", HEADER, re.S).group(1)
    fields = []
    for decl in re.findall(r"^\s*[\w:* ]+?\s+([\w, ]+);", body, re.M):
        fields += [f.strip() for f in decl.split(",")]
    return fields


def test_call_record_mirrors_the_header_field_by_field():
    assert [name for name, _ in kit.CallArgs._fields_] == _struct_fields("CallArgs")
    offsets = {name: getattr(kit.CallArgs, name).offset for name, _ in kit.CallArgs._fields_}
    assert offsets == {"m": 0, "n": 8, "k": 16, "dtype": 24, "act": 28, "split": 32,
                       "flags": 36, "workspace": 40, "workspace_bytes": 48, "semaphores": 56,
                       "semaphore_bytes": 64}
    assert ctypes.sizeof(kit.CallArgs) == 72


def test_flags_and_status_codes_match_the_header():
    flags = dict(re.findall(r"(kFlag\w+) = (\d+)", HEADER))
    assert flags == {"kFlagPdl": str(kit.FLAG_PDL), "kFlagFamily": str(kit.FLAG_FAMILY)}
    codes = {int(v) for v in re.findall(r"^\s*k(?:Ok|Err\w+) = (\d+),", HEADER, re.M)}
    assert codes == set(kit.STATUS)


def test_every_module_includes_the_kit_dir(tmp_path):
    unit = jit.TranslationUnit(name="u", source='#include "oasr_kit/launcher.cuh"\n',
                               exports=())
    own = tmp_path / "inc"
    own.mkdir()
    plan = jit.plan(jit.JitSpec(name="kit_probe", arch="90a", units=(unit,),
                                include_dirs=(str(own),)))
    assert plan.include_dirs[:2] == (str(own.resolve()), str(kit.INCLUDE_DIR))
    other = jit.plan(jit.JitSpec(name="kit_probe", arch="90a", units=(
        jit.TranslationUnit(name="u", source="// no kit\n", exports=()),),
        include_dirs=(str(own),)))
    assert plan.units[0].key != other.units[0].key


def test_generated_unit_dispatches_on_the_dtype_code():
    text = kit.c_abi_unit(
        title="fam lane unit x", generator="fam.codegen", header="fam/lane.cuh",
        kernels={0: "fam::Kernel<half>", 1: "fam::Kernel<bf16>"}, symbol="fam_x",
        operands="const void* a, void* d", run="run(a, d, *c)",
        workspace_params="int64_t m, int32_t dtype", workspace_switch="dtype",
        workspace="workspace(m)")
    assert '#include "fam/lane.cuh"' in text
    assert "using K0 = fam::Kernel<half>;" in text and "using K1 = fam::Kernel<bf16>;" in text
    assert ("OASR_EXPORT int32_t fam_x(const oasr_kit::CallArgs* c, const void* a, void* d, "
            "void* stream)") in text
    assert "case 1: return K1::run(a, d, *c);" in text
    assert "default: return oasr_kit::kErrDtype;" in text
    assert "OASR_EXPORT int64_t fam_x_workspace(int64_t m, int32_t dtype)" in text
    assert "case 0: return K0::workspace(m);" in text


def test_canonical_impl_hash_maps_only_recorded_digests(tmp_path):
    import pytest

    from oasr_core.errors import PluginError

    table = tmp_path / "equivalent_impls.json"
    assert kit.canonical_impl_hash("aaaa", table) == "aaaa"  # no file: nothing mapped
    table.write_text('{"aaaa": {"same_as": "bbbb", "checked": "device_code_diff"}}')
    assert kit.canonical_impl_hash("aaaa", table) == "bbbb"
    assert kit.canonical_impl_hash("cccc", table) == "cccc"
    table.write_text('{"aaaa": {"checked": "no target"}}')
    with pytest.raises(PluginError, match="equivalent_impls.json: malformed"):
        kit.canonical_impl_hash("aaaa", table)
    table.write_text("[1, 2")
    with pytest.raises(PluginError, match="malformed"):
        kit.canonical_impl_hash("zzzz", table)


def test_conv_bodies_undefine_every_macro_they_read_and_stay_out_of_headers():
    """The ``oasr_kit/conv`` bodies are included inside a family's namespace: no include guard
    (each is included once per unit), no ``#include`` of their own (it would land inside the
    namespace), and every ``OASR_CONV_*`` macro a body reads is ``#undef``'d at its end, so
    one body's parameters never leak into the next. They are not in :func:`kit.headers`, so
    only the families that include them hash them."""
    bodies = sorted(kit.CONV_DIR.glob("*.cuh"))
    assert {b.name for b in bodies} >= {"codes.cuh", "activation.cuh", "dense.cuh",
                                        "call_key.cuh", "sm80.cuh"}
    assert not set(bodies) & set(kit.headers())
    for body in bodies:
        code = "\n".join(line for line in body.read_text().splitlines()
                         if not line.lstrip().startswith("//"))
        assert "#pragma once" not in code and "#include" not in code, body.name
        read = set(re.findall(r"\b(OASR_CONV_\w+)", code))
        undefined = set(re.findall(r"^#undef (OASR_CONV_\w+)$", code, re.M))
        assert read == undefined, body.name


def test_impl_inputs_name_flags_units_and_headers_in_order(tmp_path):
    (tmp_path / "fam").mkdir()
    header = tmp_path / "fam" / "a.cuh"
    header.write_bytes(b"// a")
    items = kit.impl_inputs(flags=("-O3", "-g"), units=[("l1", "c1", "text 1"),
                                                          ("l2", "c2", "text 2")],
                            headers=[header], root=tmp_path)
    assert items == (("flags", b"-O3 -g"), ("unit:l1:c1", b"text 1"), ("unit:l2:c2", b"text 2"),
                     ("header:fam/a.cuh", b"// a"))


def test_config_unit_exports_the_launcher_and_its_workspace_query():
    config = Config(id="c", lane="l", params={"unit": "u7"})
    (unit,) = kit.config_unit(config, "// source", "oasr_fam_u7")
    assert (unit.name, unit.source, unit.exports) == ("u7", "// source",
                                                      ("oasr_fam_u7", "oasr_fam_u7_workspace"))


def test_impl_hash_covers_inputs_and_headers_and_names_recorded_equivalents(tmp_path):
    (tmp_path / "fam").mkdir()
    (tmp_path / "fam" / "a.cuh").write_bytes(b"// a")
    inputs = (("flags", b"-O3"), ("unit:l:c", b"text"))
    first = kit.impl_hash(inputs, [tmp_path / "fam"])
    assert len(first) == 16 and first == kit.impl_hash(inputs, [tmp_path / "fam"])
    assert kit.impl_hash(inputs[:1], [tmp_path / "fam"]) != first
    (tmp_path / "fam" / "a.cuh").write_bytes(b"// b")
    changed = kit.impl_hash(inputs, [tmp_path / "fam"])
    assert changed != first
    table = tmp_path / "equivalent_impls.json"
    table.write_text(json.dumps({changed: {"same_as": first, "checked": "same cubins"}}))
    assert kit.impl_hash(inputs, [tmp_path / "fam"], table) == first
