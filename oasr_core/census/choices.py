"""What ``oasr tune census --dtype`` and ``--quantization`` accept: what the plugins offer.

The core lists no dtype or scheme of its own. A full-precision census (``--quantization
none``) may deploy any dtype an installed family serves (``Family.dtypes``) that the probe can
build a model in (:data:`~oasr_core.census.probe.DEPLOY_DTYPES`); a quantized one, the
activation dtypes a family lists for its scheme in ``Family.quantizations``. The linear
layers are then served through the ``oasr_linear`` hook
(:func:`~oasr_core.census.workloads.served_linear`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType

from oasr_core.census.probe import DEPLOY_DTYPES
from oasr_core.types import Family

NONE = "none"
"""The full-precision scheme, always offered."""


def offered(families: Iterable[Family]) -> Mapping[str, tuple[str, ...]]:
    """Quantization scheme -> activation dtypes the census accepts with it, ``none`` first,
    in the families' order (a scheme or dtype several families offer appears once)."""
    found: dict[str, dict[str, None]] = {NONE: {}}
    for family in families:
        found[NONE].update(dict.fromkeys(d for d in family.dtypes if d in DEPLOY_DTYPES))
        for scheme, dtypes in family.quantizations.items():
            found.setdefault(scheme, {}).update(
                dict.fromkeys(d for d in dtypes if d in DEPLOY_DTYPES))
    return MappingProxyType({scheme: tuple(dtypes) for scheme, dtypes in found.items()})


def describe(choices: Mapping[str, tuple[str, ...]]) -> str:
    """``none (fp16, bf16), int8_w8a8 (fp16, bf16)``: the offer, for error messages."""
    return ", ".join(f"{scheme} ({', '.join(dtypes) or 'no dtype'})"
                     for scheme, dtypes in choices.items())
