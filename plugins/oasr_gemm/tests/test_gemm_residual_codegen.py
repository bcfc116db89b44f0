"""The fused-residual units of op ``gemm_residual`` (no compiler runs here): their text, and
the existing units' text, unchanged (the implementation hash keeps the shipped tables'
name)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from oasr_gemm import codegen
from oasr_gemm import config_space as cs

REPO_DB = Path(__file__).parents[3] / "db"

UNCHANGED = {
    (cs.LANE_SM80, "b64x64x64_w32x32x64_s3"): "ea4690534e0b072e",
    (cs.LANE_SM90, "ws_64x128x64_c1x1_s4"): "31eb633952c30224",
    (cs.LANE_SM90, "sk_128x64x64_c1x1"): "610646b2046e4603",
    (cs.LANE_SM90, "co_128x144x64_c1x1_swap"): "ec303f7f682073ed",
    (cs.LANE_SM90, "pp_128x128x64_c1x1_e64x64"): "672e138e4e7bdb17",
}
"""sha256 (16 hex) of ``unit_source`` of a few configs, taken before the residual units existed."""
DIGEST_BEFORE = "b866ca7dcb65e1a0"
"""``impl_digest`` of the family before the residual units (equivalent_impls.json)."""


def _sm90(cid):
    return cs.config(cs.LANE_SM90, cid)


def test_residual_unit_names_its_kernel_symbol_and_operands():
    c = _sm90("ws_64x32x64_c1x1")
    src = codegen.residual_unit_source(c)
    assert '#include "oasr_gemm/sm90_residual.cuh"' in src and "sm90.cuh\"" not in src
    assert ("oasr_gemm::sm90::Residual<cutlass::half_t, 64, 32, 64, 1, 1, 0, "
            "cutlass::gemm::KernelTmaWarpSpecialized, cutlass::epilogue::TmaWarpSpecialized, "
            "void, false>") in src
    assert "oasr_gemm::sm90::Residual<cutlass::bfloat16_t, 64, 32, 64" in src
    assert codegen.residual_symbol(c) == "oasr_gemm_sm90_ws_64x32x64_c1x1_res"
    assert codegen.residual_unit(c) == "ws_64x32x64_c1x1_res"
    assert (f"OASR_EXPORT int32_t {codegen.residual_symbol(c)}(const oasr_kit::CallArgs* c, "
            "const void* a, const void* w, const void* bias, const void* residual, void* d, "
            "float alpha, void* stream)") in src
    assert f"OASR_EXPORT int64_t {codegen.residual_workspace_symbol(c)}(" in src
    assert "K0::run(a, w, bias, residual, d, alpha, c->m, c->n, c->k, c->split," in src
    assert "c->semaphore_bytes, c->flags, static_cast<cudaStream_t>(stream))" in src


@pytest.mark.parametrize(("cid", "needle"), [
    ("co_128x144x64_c1x1_swap", "TmaWarpSpecializedCooperative, void, true>"),
    ("pp_128x128x64_c1x1_e64x64", "cutlass::epilogue::TmaWarpSpecialized, void, false, 64, 64>"),
    ("sk_128x64x64_c1x1", "cutlass::gemm::StreamKScheduler, false>"),
])
def test_residual_kernel_takes_the_configs_template_arguments(cid, needle):
    c = _sm90(cid)
    src = codegen.residual_unit_source(c, ("fp16",))
    assert needle in src and needle in codegen.unit_source(c)
    assert "bfloat16" not in src
    pair = codegen.sm90_kernel_type(c, "fp16")
    assert codegen.residual_kernel_type(c, "fp16") == pair.replace("::Kernel<", "::Residual<")


def test_stream_k_residual_unit_is_built_and_launched_without_grid_dependency_control():
    src = codegen.residual_unit_source(_sm90("sk_128x64x64_c1x1"))
    assert src.index("#undef CUTLASS_ENABLE_GDC_FOR_SM90") < src.index("#include")
    assert "c->semaphore_bytes, 0, static_cast<cudaStream_t>(stream))" in src


def test_the_2x_lane_has_no_residual_unit():
    c = cs.config(cs.LANE_SM80, cs.SM80_DEFAULT)
    assert not codegen.has_residual(c)
    with pytest.raises(ValueError, match="no fused-residual kernel"):
        codegen.residual_unit_source(c)
    with pytest.raises(ValueError, match="subset"):
        codegen.residual_unit_source(_sm90(cs.SM90_DEFAULT), ("fp32",))


@pytest.mark.parametrize(("lane", "cid"), sorted(UNCHANGED))
def test_existing_units_keep_their_text(lane, cid):
    text = codegen.unit_source(cs.config(lane, cid))
    assert hashlib.sha256(text.encode()).hexdigest()[:16] == UNCHANGED[(lane, cid)]


def test_the_implementation_keeps_the_shipped_tables_name():
    """Without the residual units and their header the digest is the one recorded before
    them, and the new digest is recorded as the same implementation, so the shipped table
    (measured under it) is current."""
    assert codegen.impl_digest(residual=False, bmm=False, group=False) == DIGEST_BEFORE
    table = json.loads(codegen.EQUIVALENTS.read_text())
    assert table[codegen.impl_digest()]["same_as"] == table[DIGEST_BEFORE]["same_as"]
    shipped = json.loads((REPO_DB / "sm90" / "gemm.json").read_text())
    assert codegen.impl_hash() == shipped["validators"]["soft"]["impl_hash"]
