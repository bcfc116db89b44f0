"""The cost model: rank a lane's configs for a GEMM-shaped problem without measuring them.

The model is generic over tiled kernels: it knows tiles, warps, pipelines, clusters and K
decompositions, never a kernel library's schedule names; a lane describes each config in
those terms (:mod:`.features`).

``T = W·r·(a_c + b_c·k_iters) + R_c + launches·L_graph``, ``T >= bytes / BW`` (the spec's
"The cost model"); :mod:`.structure` derives the terms from an
:class:`~oasr_core.arch.ArchProfile` and a config's features, :mod:`.features` defines what a
lane supplies through ``Lane.cost_features``, :mod:`.calibrate` fits the coefficients on a
measurement log, :mod:`.quality` scores models leave-one-signature-out and builds the payload
``oasr tune build`` stores, :mod:`.tier` is the runtime model tier.

Uses:

- ``oasr tune build`` prunes each point to :func:`prune` (structure and calibrated top-k plus
  the forced arms) and stores :func:`build_model`'s ``to_json()`` as the tuning file's model;
- the runtime registers :class:`ModelTier` to serve aligned shapes no entry covers.

Importing this package imports neither torch nor numpy (calibration imports numpy).
"""

from __future__ import annotations

from oasr_core.cost_model.calibrate import (
    REQUIRED_FIELDS,
    LogRow,
    design,
    fit,
    parse_rows,
    read_log,
)
from oasr_core.cost_model.features import (
    FEATURE_KEYS,
    CostFeatures,
    dtype_class,
    features_of,
)
from oasr_core.cost_model.model import Coeffs, CostModel, config_ranker, prune, rank, top_k
from oasr_core.cost_model.quality import QualityReport, build_model, evaluate_loso, points_of
from oasr_core.cost_model.structure import Geometry, Knobs, TileCost, geometry, tile_cost
from oasr_core.cost_model.tier import ENV, GATE, ModelTier, model_fallback_enabled

__all__ = [
    "ENV", "FEATURE_KEYS", "GATE", "REQUIRED_FIELDS", "Coeffs", "CostFeatures",
    "CostModel", "Geometry", "Knobs", "LogRow", "ModelTier", "QualityReport", "TileCost",
    "build_model", "config_ranker", "design", "dtype_class", "evaluate_loso", "features_of",
    "fit", "geometry", "model_fallback_enabled", "parse_rows", "points_of", "prune", "rank",
    "read_log", "tile_cost", "top_k",
]
