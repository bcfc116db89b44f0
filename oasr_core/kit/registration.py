"""The records a family plugin's registration hooks return, built from its sibling modules.

A family's ``hooks.py`` only imports and returns records (STYLE 10). The behaviour those
records carry lives, by the plugins' layout, in modules of fixed names: the numerics gate in
``numerics``, the soft validators in ``jit``, the recorder patches in ``recorder``, the bench
adapter in ``bench``; a lane's data and predicates in the family's lanes module, its modules
in its :class:`~oasr_core.kit.production.KernelModule`. :func:`family_record` and
:func:`lane_records` read them there, so a family's hooks state only what is its own: names,
dims, sentinels, descriptions. Importing this module imports no torch.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from oasr_core.types import Config, Family, Lane

HALF_DTYPES = {"dtypes": ("fp16", "bf16"), "dtype_classes": {"half": ("fp16", "bf16")}}
"""The dtype fields of an fp16/bf16 family: both dtypes, in one class ``half`` (a tuning entry
keyed ``dt=half`` serves either)."""

FAMILY_BEHAVIOUR = {"numerics_gate": ("numerics", "numerics_gate"),
                    "soft_validators": ("jit", "soft_validators"),
                    "recorder_patches": ("recorder", "recorder_patches"),
                    "make_bench": ("bench", "make_bench")}
"""``Family`` field: (module of the plugin package, attribute) that holds it."""


def family_record(package: str, **fields: Any) -> Family:
    """The :class:`~oasr_core.types.Family` record of the plugin package ``package``
    (``oasr_register_families``): ``fields`` as given, and each field of
    :data:`FAMILY_BEHAVIOUR` that ``fields`` does not name from its module of ``package``."""
    for field, (module, name) in FAMILY_BEHAVIOUR.items():
        if field not in fields:
            fields[field] = getattr(importlib.import_module(f"{package}.{module}"), name)
    return Family(**fields)


def lane_records(family: str, names: Iterable[str], lanes: Any, *, jit_module: type,
                 is_available: Callable[[Config], bool] | None,
                 description: str | Mapping[str, str]) -> list[Lane]:
    """The :class:`~oasr_core.types.Lane` records of ``family``'s lanes ``names``
    (``oasr_register_lanes``).

    ``lanes`` is the family's lanes module: per lane ``ARCHES``, ``DEFAULT_ON`` and
    ``DEFAULTS``, ``space(lane)``, and the predicates ``is_feasible`` and ``supports``;
    ``jit_module`` its :class:`~oasr_core.kit.production.KernelModule` subclass, whose
    ``modules`` give each lane's ``jit_specs`` and ``production``; ``description`` one text,
    or one per lane.
    """
    names, modules = tuple(names), jit_module.modules
    texts = description if isinstance(description, Mapping) else dict.fromkeys(names, description)
    return [Lane(name=lane, family=family, arch_families=lanes.ARCHES[lane],
                 default_on=lanes.DEFAULT_ON[lane], config_space=lanes.space(lane),
                 default_config=lanes.DEFAULTS[lane], is_feasible=lanes.is_feasible,
                 supports=lanes.supports, is_available=is_available, jit_module=jit_module,
                 jit_specs=functools.partial(modules.lane_specs, lane),
                 production=functools.partial(modules.production.configs, lane),
                 description=texts[lane])
            for lane in names]
