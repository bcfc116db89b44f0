"""The ``Lane.bench_modules`` protocol of the plugin kit: a build compiles only what it times.

A pruned build knows which configs each signature will time before it measures
(:mod:`oasr_core.build.effort`). A lane whose ``bench_modules`` is set lets it compile just
those, in the background, into one small module per signature
(:mod:`oasr_core.build.compiling`) and measure each signature from its own module. The object
answers three calls:

- ``spec(arch_family, configs, dtypes, groups=None)``: the :class:`oasr_core.jit.JitSpec` of a
  module linking ``configs`` (a family may compile only the ``dtypes`` measured; None: every
  dtype, the production objects). ``groups`` partitions every config the build will time
  (:func:`oasr_core.jit.bundles.plan_groups`; each a :class:`~oasr_core.jit.bundles.Group`
  naming the ops that time any of its configs, the same groups for every op): a family may
  compile a group's build-only units, of those ops, as one bundle, linking the bundles that
  hold ``configs``;
- ``install(arch_family, configs, dtypes, groups=None)``: load that module (built by then: a
  cache hit) and make the family's ``make_bench`` take its arms from it until the next
  ``install``; returns None, or why it could not (its arms are then rejected as not
  compiled, never timed);
- ``reset()``: back to the whole-space module (after the build);
- optionally ``for_op(op)``: the object answering the three calls for a signature of ``op``
  (a family whose ops compile different units, e.g. gemm's fused-residual kernels of
  ``gemm_residual``; without it every op uses the object itself).

:class:`BenchModules` implements it for a family whose ``make_bench`` reads its kernels from a
:class:`~oasr_core.jit.libraries.Libraries` of whole-space modules (both CUTLASS families).
A lane without ``bench_modules`` keeps the old behaviour: the build measures from the whole
space, which it compiles first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from oasr_core import jit
from oasr_core.types import Config


@attrs.frozen(eq=False)
class BenchModules:
    """``Lane.bench_modules`` of a lane whose ``make_bench`` reads ``libraries``.

    ``spec_of(arch, configs, dtypes)`` is the family's subset module spec; ``bind(module,
    configs)`` the kernels of a loaded module, keyed as ``make_bench`` looks them up.
    """

    lane: str
    libraries: Any
    """The family's :class:`~oasr_core.jit.libraries.Libraries` of whole-space modules."""
    spec_of: Callable[..., Any]
    """``spec_of(arch, configs, dtypes, groups)``."""
    bind: Callable[[Any, Sequence[Config]], Mapping[Any, Any]]
    variants: Mapping[str, BenchModules] = attrs.field(factory=dict)
    """Per op: the modules a signature of that op compiles and measures from, when its units
    are not this object's (:meth:`for_op`); other ops use this object."""

    def for_op(self, op: str) -> BenchModules:
        """The modules a signature of ``op`` compiles: its :attr:`variants` entry, else self."""
        return self.variants.get(op, self)

    def spec(self, arch: str, configs: Sequence[Config], dtypes: Sequence[str] | None = None,
             groups: Sequence[Sequence[Config]] | None = None) -> Any:
        """The module linking ``configs`` on ``arch`` (bundled by ``groups``)."""
        return self.spec_of(arch, configs, dtypes, groups)

    def install(self, arch: str, configs: Sequence[Config], dtypes: Sequence[str] | None = None,
                groups: Sequence[Sequence[Config]] | None = None) -> str | None:
        """Measure from the module of ``configs`` from now on (None) or say why not."""
        try:
            module = jit.load(self.spec(arch, configs, dtypes, groups), build_missing=False)
            kernels = self.bind(module, configs)
        except Exception as exc:  # noqa: BLE001 - the signature's arms are rejected instead
            self.libraries.install(self.lane, arch, {})
            return f"{type(exc).__name__}: {' '.join(str(exc).split())}"
        self.libraries.install(self.lane, arch, kernels)
        return None

    def reset(self) -> None:
        """Forget installed modules (the variants' too): the next ``make_bench`` loads the
        whole space again."""
        self.libraries.forget()
        for variant in self.variants.values():
            variant.reset()
