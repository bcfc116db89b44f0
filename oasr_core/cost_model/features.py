"""The feature contract between a lane and the cost model (``Lane.cost_features``).

A lane describes each config to the model through ``Lane.cost_features(config) -> Mapping``
(or returns ``None`` for a config the model cannot describe; such configs are never ranked
and the build always measures them). The mapping uses these keys, JSON types only:

``tile`` (required)
    ``[tile_m, tile_n, tile_k]``: the CTA's output tile (rows of A, columns of W) and the K
    depth of one main-loop iteration, in elements.
``kind`` (default ``"tiled"``)
    The lane's name for the kernel's structure (lower case, digits and ``_``). The model
    never interprets it: configs of one kind and one K decomposition share a calibration
    group (:attr:`CostFeatures.group`), so a lane gives one kind per kernel structure it
    builds (the gemm lanes use their schedule names).
``stages`` (default ``0``)
    Main-loop pipeline depth; ``0`` means "as many as fit": the model then takes the CTA to
    fill the SM's shared memory, whatever ``smem`` says.
``warps`` (default ``4``)
    Warps per CTA, producers included; derived from a ``warp`` tile when absent.
``warp`` (optional)
    ``[warp_m, warp_n, warp_k]``, the tile of one accumulating warp; only used to derive
    ``warps``.
``producer_warps`` (default ``0``)
    Warps that only load operands (a warp-specialized kernel's producer warpgroup: 4); the
    others hold the accumulators, which sets their registers.
``persistent`` (default ``false``)
    One CTA per SM loops over output tiles (a tile scheduler); otherwise one CTA per tile,
    as many resident per SM as resources allow.
``tiles_in_flight`` (default ``1``)
    Output tiles a persistent CTA works on at once; with ``2`` its consumer groups alternate
    tiles, so one tile's epilogue hides under the other's main loop.
``sync_mma`` (default ``false``)
    The main loop issues the arch's synchronous warp-level MMA (``mma.sync``) rather than its
    fastest tensor instruction; it reaches only part of the measured rate on archs that
    have a faster one (:data:`~oasr_core.cost_model.structure.SYNC_MMA_EFFICIENCY`).
``epilogue_smem`` (default ``false``)
    The epilogue stages its output through shared memory, reserving
    ``Knobs.epilogue_smem`` beside the main loop's stages when ``smem`` is not given.
``fp32_partials`` (default ``false``)
    Split-K and Stream-K fix-ups exchange fp32 partial tiles (otherwise output-dtype ones).
``cluster`` (default ``[1, 1]``)
    Thread-block cluster ``[cluster_m, cluster_n]``; operands are multicast across it.
``split_k`` (default ``1``)
    Slices of K; serial (in-kernel fix-up) unless ``parallel_split_k``.
``parallel_split_k`` (default ``false``)
    fp32 partials to a workspace plus a reduction kernel.
``stream_k`` (default ``false``)
    Stream-K decomposition (the heuristic hybrid of data-parallel waves and Stream-K units).
``swap_ab`` (default ``false``)
    The kernel computes ``D^T``: ``tile_m`` runs along N and ``tile_n`` along M.
``smem`` (optional)
    Shared memory per CTA in bytes (lanes know their epilogue); estimated when absent.
``regs_per_thread`` (optional)
    Registers per thread; estimated from the accumulator tile when absent.
``launches`` (optional)
    Kernel nodes per call (a memset or a reduction kernel counts); derived when absent.

Unknown keys are ignored, so a lane may pass its ``params`` straight through when they use
these names. A malformed value is a contract violation (:class:`~oasr_core.errors.PluginError`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

from oasr_core.errors import PluginError
from oasr_core.types import NAME_RE

FEATURE_KEYS = ("tile", "kind", "stages", "warps", "warp", "producer_warps", "persistent",
                "tiles_in_flight", "sync_mma", "epilogue_smem", "fp32_partials", "cluster",
                "split_k", "parallel_split_k", "stream_k", "swap_ab", "smem", "regs_per_thread",
                "launches")
"""Every key of the contract (see the module docstring)."""

_DTYPE_CLASS = {
    "fp16": "half", "bf16": "half", "half": "half", "float16": "half", "bfloat16": "half",
    "int8": "int8", "fp8": "fp8", "e4m3": "fp8", "fp8_e4m3": "fp8", "float8_e4m3fn": "fp8",
    "e5m2": "fp8", "fp8_e5m2": "fp8",
}
_IN_BYTES = {"half": 2, "int8": 1, "fp8": 1}


def dtype_class(dtype: str) -> str:
    """The tensor-throughput class of an operand dtype (``fp16`` -> ``half``); unknown
    dtypes count as ``half``."""
    return _DTYPE_CLASS.get(dtype, "half")


def operand_bytes(dtype: str) -> int:
    """Bytes per operand element of ``dtype``."""
    return _IN_BYTES[dtype_class(dtype)]


OUT_BYTES = 2
"""Bytes per output element: every modelled op writes fp16/bf16 (int8 and fp8 lanes apply
their scales in the epilogue)."""


def _int(raw: Mapping[str, Any], key: str, default: int | None, low: int = 0) -> int | None:
    value = raw.get(key, default)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ValueError(f"{key}={value!r} must be an integer >= {low}")
    return value


def _pair(raw: Mapping[str, Any], key: str, size: int, default: tuple[int, ...] | None
          ) -> tuple[int, ...] | None:
    value = raw.get(key, default)
    if value is None:
        return None
    value = tuple(value) if isinstance(value, (list, tuple)) else value
    if (not isinstance(value, tuple) or len(value) != size
            or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)):
        raise ValueError(f"{key}={value!r} must be {size} positive integers")
    return value


def _bool(raw: Mapping[str, Any], key: str) -> bool:
    value = raw.get(key, False)
    if not isinstance(value, bool):
        raise ValueError(f"{key}={value!r} must be true or false")
    return value


@attrs.frozen
class CostFeatures:
    """One config as the model sees it (built by :meth:`from_mapping`)."""

    tile_m: int
    tile_n: int
    tile_k: int
    kind: str = "tiled"
    stages: int = 0
    warps: int = 4
    producer_warps: int = 0
    persistent: bool = False
    tiles_in_flight: int = 1
    sync_mma: bool = False
    epilogue_smem: bool = False
    fp32_partials: bool = False
    cluster_m: int = 1
    cluster_n: int = 1
    split_k: int = 1
    parallel_split_k: bool = False
    stream_k: bool = False
    swap_ab: bool = False
    smem: int | None = None
    regs_per_thread: int | None = None
    launches: int | None = None

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any]) -> CostFeatures:
        """Validate a lane's mapping (``ValueError`` naming the key when malformed)."""
        if not isinstance(raw, Mapping):
            raise ValueError(f"cost features must be a mapping, got {type(raw).__name__}")
        if "tile" not in raw:
            raise ValueError("cost features need 'tile': [tile_m, tile_n, tile_k]")
        tm, tn, tk = _pair(raw, "tile", 3, None)
        kind = raw.get("kind", "tiled")
        if not isinstance(kind, str) or not NAME_RE.match(kind):
            raise ValueError(f"kind={kind!r} must be lower case, digits and '_'")
        warps = _int(raw, "warps", None, 1)
        warp = _pair(raw, "warp", 3, None)
        if warps is None and warp is not None:
            warps = max(1, (tm // warp[0]) * (tn // warp[1]) * max(1, tk // warp[2]))
        warps = 4 if warps is None else warps
        producers = _int(raw, "producer_warps", 0)
        if producers >= warps:
            raise ValueError(f"producer_warps={producers} leaves none of the {warps} warps "
                             "to accumulate")
        cm, cn = _pair(raw, "cluster", 2, (1, 1))
        return cls(
            tile_m=tm, tile_n=tn, tile_k=tk, kind=kind, stages=_int(raw, "stages", 0),
            warps=warps, producer_warps=producers, persistent=_bool(raw, "persistent"),
            tiles_in_flight=_int(raw, "tiles_in_flight", 1, 1), sync_mma=_bool(raw, "sync_mma"),
            epilogue_smem=_bool(raw, "epilogue_smem"),
            fp32_partials=_bool(raw, "fp32_partials"), cluster_m=cm, cluster_n=cn,
            split_k=_int(raw, "split_k", 1, 1),
            parallel_split_k=_bool(raw, "parallel_split_k"), stream_k=_bool(raw, "stream_k"),
            swap_ab=_bool(raw, "swap_ab"), smem=_int(raw, "smem", None, 1),
            regs_per_thread=_int(raw, "regs_per_thread", None, 1),
            launches=_int(raw, "launches", None, 1))

    @property
    def group(self) -> str:
        """The calibration group: configs that share a kind and a K decomposition."""
        decomposition = "sk" if self.stream_k else "pk" if self.parallel_split_k else \
            "splitk" if self.split_k > 1 else "dp"
        return f"{self.kind}_{decomposition}"

    @property
    def threads(self) -> int:
        """Threads per CTA."""
        return 32 * self.warps

    @property
    def accumulating_threads(self) -> int:
        """Threads holding the accumulator tile (all but the producer warps)."""
        return 32 * (self.warps - self.producer_warps)


FeatureSource = Callable[[Any], "Mapping[str, Any] | None"]


def features_of(config: Any, source: FeatureSource | None = None,
                lane_name: str | None = None) -> CostFeatures | None:
    """The :class:`CostFeatures` of ``config``, or None when the lane cannot describe it.

    ``source`` is the lane's ``cost_features``; without one the config's ``params`` are read
    as features (for logs and lanes whose parameters use the contract's names). A malformed mapping
    raises :class:`PluginError` naming the lane and the config.
    """
    raw = source(config) if source is not None else getattr(config, "params", config)
    if raw is None or (source is None and "tile" not in raw):
        return None
    try:
        return CostFeatures.from_mapping(raw)
    except ValueError as exc:
        lane = lane_name or getattr(config, "lane", "?")
        raise PluginError(
            f"lane {lane!r}: cost_features({getattr(config, 'id', config)!r}) is malformed: "
            f"{exc}; report this to the lane's plugin author") from exc
