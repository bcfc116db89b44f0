"""The JIT layer: content-keyed nvcc builds of C-ABI kernel libraries, prebuilt or on demand.

A lane describes its kernels as a :class:`JitSpec`: one :class:`TranslationUnit` (one generated
``.cu``) per config, exporting ``extern "C"`` launchers marked :data:`EXPORT_MACRO`. Then:

- :func:`build` compiles each unit into an object cached by a content key (the compiled text,
  flags, included project headers, nvcc's identity, CUTLASS's version stamp; no device), and
  links the module's library. A unit that does not compile fails alone.
- :func:`prebuild` builds many modules concurrently, e.g. on a CPU machine for
  ``OASR_CUDA_ARCH_LIST=9.0a`` (:func:`target_arch`); a GPU machine with the same toolchain and
  a copy of the cache (``OASR_JIT_DIR``) finds the same libraries.
- :func:`load` opens a module's library with ctypes, building it first when it is missing.

Importing this package runs no compiler and imports neither torch nor CUTLASS.

Example::

    from oasr_core import jit

    unit = jit.TranslationUnit(
        name="b128x128x64",
        source=kernel_source,  # defines `OASR_EXPORT int gemm_b128x128x64(...)`
        exports=("gemm_b128x128x64",),
    )
    spec = jit.JitSpec(name="gemm_sm90", arch=jit.target_arch(), units=(unit,))
    module = jit.load(spec)
    launch = module.function("gemm_b128x128x64")
"""

from __future__ import annotations

from oasr_core.jit.builder import (
    BuildStatus,
    ModuleBuild,
    UnitStatus,
    build,
    default_jobs,
    prebuild,
)
from oasr_core.jit.cache import cache_dir
from oasr_core.jit.compiler import (
    CUTLASS_REQUIREMENT,
    Toolchain,
    compile_set,
    cutlass_include_dirs,
    cutlass_version,
    family_target,
    gencode_flag,
    normalize_arch,
    target_arch,
    target_arches,
    toolchain,
)
from oasr_core.jit.loader import LoadedModule, NotPrebuiltWarning, is_prebuilt, load
from oasr_core.jit.spec import (
    COMPILE_FLAGS,
    EXPORT_MACRO,
    LINK_FLAGS,
    PRELUDE,
    JitSpec,
    TranslationUnit,
    plan,
)

__all__ = [
    "BuildStatus", "COMPILE_FLAGS", "CUTLASS_REQUIREMENT", "EXPORT_MACRO", "JitSpec", "LINK_FLAGS",
    "LoadedModule", "ModuleBuild", "NotPrebuiltWarning", "PRELUDE", "Toolchain", "TranslationUnit",
    "UnitStatus", "build", "cache_dir", "compile_set", "cutlass_include_dirs", "cutlass_version",
    "default_jobs", "family_target", "gencode_flag", "is_prebuilt", "load", "normalize_arch",
    "plan", "prebuild", "target_arch", "target_arches", "toolchain",
]
