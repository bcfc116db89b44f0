"""The compiler side of the JIT: which nvcc, which CUTLASS headers, which target arch.

Everything here is looked up when first needed, never at import: finding nvcc runs it once per
process (``nvcc --version``, ~20 ms), finding CUTLASS asks the import system where the
``nvidia-cutlass`` wheel is without importing it, and the target arch comes from
``OASR_CUDA_ARCH_LIST`` before torch is consulted. Errors say what is missing and how to fix it,
because a missing toolchain is the commonest reason a kernel tier is unavailable.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path

import attrs

from oasr_core.errors import ConfigurationError, ToolchainError

CUTLASS_REQUIREMENT = "nvidia-cutlass==4.2.0.0"
"""The wheel whose headers the kernels are written against."""

ARCH_RE = re.compile(r"^[0-9]{2,3}[af]?$")
"""Canonical arch spelling: the number nvcc puts after ``sm_``, e.g. ``90a``, ``80``, ``100f``."""

_CC_RE = re.compile(r"^([0-9]{1,2})\.([0-9])([af]?)$")
_PREFIX_RE = re.compile(r"^(?:sm_?|compute_?)", re.IGNORECASE)
FALLBACK_NVCC = Path("/usr/local/cuda/bin/nvcc")
"""Where nvcc is looked for last, when no variable names it and it is not on PATH."""
_NVCC_HINT = "set OASR_NVCC to the nvcc binary, set CUDA_HOME, or put nvcc on PATH"


def normalize_arch(text: str) -> str:
    """The canonical spelling of an arch (``"90a"``), from the forms people write.

    ``"90a"``, ``"sm_90a"``, ``"sm90a"`` and ``"compute_90a"`` name the same target. A compute
    capability (``"9.0"``, ``"8.6"``, torch's ``"8.0+PTX"``) gets the ``a`` suffix from major 9
    on, because the arch-specific instructions CUTLASS's Hopper and Blackwell kernels use (wgmma,
    tcgen05) exist only in the ``a`` targets; ``"9.0a"`` is kept as written. ``ValueError`` for
    anything else.
    """
    raw = text.strip()
    cc = raw.removesuffix("+PTX").removesuffix("+ptx")
    if match := _CC_RE.match(cc):
        major, minor, suffix = int(match[1]), match[2], match[3]
        if not suffix and major >= 9:
            suffix = "a"
        return f"{major}{minor}{suffix}"
    arch = _PREFIX_RE.sub("", raw).lower()
    if not ARCH_RE.match(arch):
        raise ValueError(
            f"{text!r} is not a CUDA arch: write it like '90a', 'sm_80' or a compute "
            "capability like '9.0'"
        )
    return arch


def family_target(arch_family: str) -> str:
    """The nvcc target of an arch family: ``sm90`` -> ``90a``, ``sm80`` -> ``80`` (the
    ``a`` target from major 9 on, as :func:`normalize_arch` gives a compute capability)."""
    number = arch_family.removeprefix("sm")
    if number == arch_family or not number.isdigit() or len(number) < 2:
        raise ValueError(f"{arch_family!r} is not an arch family like 'sm90'")
    return normalize_arch(f"{number[:-1]}.{number[-1]}")


def compile_set(env: str) -> str:
    """What a lane's production module links, from the plugin's variable ``env``
    (``OASR_<FAMILY>_COMPILE_SET``): ``tuned`` (default: the configs the tiers reference, the
    default and the plugin's basis) or ``all`` (the whole space). Anything else is a
    :class:`ConfigurationError` naming the variable."""
    value = os.environ.get(env, "tuned").strip().lower() or "tuned"
    if value not in ("tuned", "all"):
        raise ConfigurationError(f"{env}={value!r}: expected 'tuned' (production set) or 'all'")
    return value


def gencode_flag(arch: str) -> str:
    """The nvcc flag that compiles SASS for ``arch`` (``-gencode=arch=compute_90a,code=sm_90a``)."""
    return f"-gencode=arch=compute_{arch},code=sm_{arch}"


@attrs.frozen
class Toolchain:
    """The nvcc a build uses, and its identity as it enters cache keys."""

    nvcc: Path
    """Absolute path of the nvcc binary (or the wrapper that stands for it)."""
    version: str
    """The identifying lines of ``nvcc --version`` (release and build), e.g. ``Cuda compilation
    tools, release 13.0, V13.0.88; Build cuda_13.0.r13.0/compiler.36424714_0``."""
    release: str
    """The CUDA release, e.g. ``13.0``."""

    @property
    def build_version(self) -> str:
        """The compiler's full version (``13.0.88``, from ``V13.0.88``), else the release.

        This is the ``nvcc`` soft stamp of tuning files, so the stamp names the compiler that
        built the kernels (:func:`toolchain`'s precedence, ``OASR_NVCC`` first).
        """
        match = re.search(r"release\s+[0-9.]+,\s*V([0-9.]+)", self.version)
        return match[1] if match else self.release

    def supported_archs(self) -> tuple[str, ...]:
        """The base archs this nvcc compiles for (``--list-gpu-arch``): ``("75", "80", ...)``."""
        return _list_archs(str(self.nvcc))

    def check_arch(self, arch: str) -> None:
        """Raise :class:`ToolchainError` unless this nvcc can compile SASS for ``arch``.

        nvcc itself decides (a ``--dryrun`` with the arch's ``-gencode``, ~20 ms, cached), so
        suffixed targets such as ``90a``/``100f`` are judged by the compiler, not by a table.
        """
        if not _arch_accepted(str(self.nvcc), arch):
            supported = ", ".join(self.supported_archs()) or "none listed"
            raise ToolchainError(
                f"nvcc {self.release} at {self.nvcc} cannot compile for arch {arch!r} "
                f"(it supports {supported}, with an 'a' suffix from 90 on); pick a supported "
                "arch (OASR_CUDA_ARCH_LIST, e.g. 9.0a for H100/H200) or use a CUDA toolkit "
                "that supports it"
            )


def toolchain() -> Toolchain:
    """The nvcc to build with: ``$OASR_NVCC``, else ``$CUDA_HOME/bin/nvcc``, else PATH.

    ``/usr/local/cuda/bin/nvcc`` is the last resort. The answer is cached per process for the
    current values of those variables. Raises :class:`ToolchainError` naming the variable to fix.
    """
    return _toolchain(
        os.environ.get("OASR_NVCC") or None,
        os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or None,
        os.environ.get("PATH", ""),
    )


def find_nvcc() -> Path:
    """The nvcc :func:`toolchain` would probe, found without running it (``OASR_NVCC``,
    ``CUDA_HOME``, ``PATH``, ``/usr/local/cuda``). Raises :class:`ToolchainError` as
    :func:`toolchain` does when there is none."""
    return _find_nvcc(
        os.environ.get("OASR_NVCC") or None,
        os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or None,
        os.environ.get("PATH", ""),
    )


@functools.lru_cache(maxsize=8)
def _toolchain(override: str | None, cuda_home: str | None, path: str) -> Toolchain:
    nvcc = _find_nvcc(override, cuda_home, path)
    try:
        proc = subprocess.run(
            [str(nvcc), "--version"], capture_output=True, text=True, errors="replace",
            timeout=120, check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolchainError(f"cannot run nvcc at {nvcc} ({exc}); {_NVCC_HINT}") from exc
    lines = [
        line.strip() for line in proc.stdout.splitlines()
        if line.startswith(("Cuda compilation tools", "Build "))
    ]
    release = re.search(r"release ([0-9]+\.[0-9]+)", proc.stdout)
    if proc.returncode != 0 or not lines or release is None:
        raise ToolchainError(
            f"{nvcc} --version did not identify an nvcc (exit {proc.returncode}: "
            f"{(proc.stdout + proc.stderr).strip()[-300:]!r}); {_NVCC_HINT}"
        )
    return Toolchain(nvcc=nvcc, version="; ".join(lines), release=release[1])


def clear_toolchain_cache() -> None:
    """Forget every nvcc found and probed (a new epoch may see a new toolchain)."""
    _toolchain.cache_clear()
    _list_archs.cache_clear()
    _arch_accepted.cache_clear()


def _find_nvcc(override: str | None, cuda_home: str | None, path: str) -> Path:
    if override is not None:
        found = shutil.which(override, path=path)
        if found is None:
            raise ToolchainError(
                f"OASR_NVCC={override} does not exist or is not executable; point OASR_NVCC at "
                "an nvcc binary or unset it"
            )
        return Path(found).absolute()
    looked = []
    if cuda_home is not None:
        candidate = Path(cuda_home) / "bin" / "nvcc"
        looked.append(str(candidate))
        if os.access(candidate, os.X_OK):
            return candidate.absolute()
    found = shutil.which("nvcc", path=path)
    if found is not None:
        return Path(found).absolute()
    looked.append("PATH")
    looked.append(str(FALLBACK_NVCC))
    if os.access(FALLBACK_NVCC, os.X_OK):
        return FALLBACK_NVCC
    raise ToolchainError(
        f"nvcc not found (looked in {', '.join(looked)}); install the CUDA toolkit, then "
        f"{_NVCC_HINT}"
    )


@functools.lru_cache(maxsize=8)
def _list_archs(nvcc: str) -> tuple[str, ...]:
    proc = subprocess.run(
        [nvcc, "--list-gpu-arch"], capture_output=True, text=True, errors="replace",
        timeout=120, check=False,
    )
    archs = re.findall(r"compute_([0-9]+[a-z]?)", proc.stdout)
    return tuple(sorted(set(archs), key=lambda a: (int(re.sub(r"\D", "", a)), a)))


@functools.lru_cache(maxsize=64)
def _arch_accepted(nvcc: str, arch: str) -> bool:
    if not ARCH_RE.match(arch):
        return False
    proc = subprocess.run(
        [nvcc, "--dryrun", "-x", "cu", "-c", os.devnull, "-o", os.devnull, gencode_flag(arch)],
        capture_output=True, text=True, errors="replace", timeout=120, check=False,
    )
    return proc.returncode == 0


def cutlass_include_dirs() -> tuple[str, ...]:
    """The CUTLASS include dirs of the installed ``nvidia-cutlass`` wheel.

    ``<cutlass_library>/source/include`` and ``<cutlass_library>/source/tools/util/include``,
    found with ``importlib.util.find_spec`` so that ``cutlass_library`` (slow to import) is not
    imported. Raises :class:`ToolchainError` saying to install the wheel when it is missing.
    """
    try:
        spec = importlib.util.find_spec("cutlass_library")
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or ()) if spec is not None else []
    if not locations:
        raise ToolchainError(
            "CUTLASS headers not found: the nvidia-cutlass wheel is not installed in this "
            f"Python; install it with `pip install {CUTLASS_REQUIREMENT}`"
        )
    source = Path(locations[0]) / "source"
    dirs = (source / "include", source / "tools" / "util" / "include")
    if not (dirs[0] / "cutlass" / "version.h").is_file() or not dirs[1].is_dir():
        raise ToolchainError(
            f"the nvidia-cutlass wheel at {locations[0]} has no headers under {source}; "
            f"reinstall it with `pip install --force-reinstall {CUTLASS_REQUIREMENT}`"
        )
    return tuple(str(d) for d in dirs)


def cutlass_version() -> str:
    """The CUTLASS version the headers declare (``"4.2.0"``), from ``cutlass/version.h``."""
    return cutlass_stamp()[0]


def cutlass_stamp() -> tuple[str, str]:
    """``(version, sha256 of cutlass/version.h)``: what CUTLASS contributes to a cache key."""
    version_h = Path(cutlass_include_dirs()[0]) / "cutlass" / "version.h"
    stat = version_h.stat()
    return _stamp(version_h, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=8)
def _stamp(version_h: Path, _mtime_ns: int, _size: int) -> tuple[str, str]:
    data = version_h.read_bytes()
    text = data.decode("utf-8", "replace")
    parts = [re.search(rf"#define\s+CUTLASS_{p}\s+([0-9]+)", text) for p in ("MAJOR", "MINOR")]
    patch = re.search(r"#define\s+CUTLASS_PATCH\s+([0-9]+)", text)
    if None in parts:
        raise ToolchainError(
            f"{version_h} does not define CUTLASS_MAJOR/CUTLASS_MINOR; reinstall "
            f"{CUTLASS_REQUIREMENT}"
        )
    version = ".".join(m[1] for m in (*parts, patch) if m is not None)
    return version, hashlib.sha256(data).hexdigest()


def target_arches() -> tuple[str, ...]:
    """The archs ``OASR_CUDA_ARCH_LIST`` names (``"9.0a"``, ``"8.0;9.0"``), canonical; () if unset.

    Entries are separated by ``;``, ``,`` or spaces, as torch's ``TORCH_CUDA_ARCH_LIST`` is.
    Raises :class:`ConfigurationError` naming the variable when an entry is not an arch.
    """
    raw = os.environ.get("OASR_CUDA_ARCH_LIST", "")
    archs: list[str] = []
    for item in filter(None, re.split(r"[;,\s]+", raw)):
        try:
            arch = normalize_arch(item)
        except ValueError as exc:
            raise ConfigurationError(f"OASR_CUDA_ARCH_LIST={raw!r}: {exc}") from None
        if arch not in archs:
            archs.append(arch)
    return tuple(archs)


def target_arch(default: str | None = None) -> str:
    """The one arch to build for: ``OASR_CUDA_ARCH_LIST``, else the current CUDA device, else
    ``default``.

    torch is imported only when the variable is unset. A capability of 9.0 maps to ``90a``
    (see :func:`normalize_arch`). Raises :class:`ConfigurationError` when the variable names
    several archs (use :func:`target_arches`) or when nothing says which arch to use.
    """
    archs = target_arches()
    if len(archs) > 1:
        raise ConfigurationError(
            f"OASR_CUDA_ARCH_LIST={os.environ['OASR_CUDA_ARCH_LIST']!r} names {len(archs)} "
            "archs where one is needed; set it to a single arch such as 9.0a"
        )
    if archs:
        return archs[0]
    device = _device_arch()
    if device is not None:
        return device
    if default is not None:
        return normalize_arch(default)
    raise ConfigurationError(
        "no target arch: OASR_CUDA_ARCH_LIST is unset and no CUDA device is visible; set "
        "OASR_CUDA_ARCH_LIST (e.g. 9.0a for H100/H200, 8.0 for A100)"
    )


def _device_arch() -> str | None:
    try:
        import torch
    except ImportError:
        return None
    try:
        if not torch.cuda.is_available():
            return None
        major, minor = torch.cuda.get_device_capability()
    except (RuntimeError, AssertionError):
        return None
    return normalize_arch(f"{major}.{minor}")
