"""One error vocabulary for oasr.

Every message names what is wrong and where (plugin, distribution, file, field) and how to fix
it. The CLI maps :class:`OasrError` to exit code 2 and a one-line message.
"""

from __future__ import annotations


class OasrError(Exception):
    """Base of every error oasr raises on purpose."""


class PluginError(OasrError):
    """A plugin broke the contract: bad return type, duplicate name, invalid hook."""


class UnknownFamilyError(PluginError, KeyError):
    """A family (or lane) name no loaded plugin registers."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class PluginLoadError(PluginError):
    """An entry point failed to import or register (raised only in strict mode)."""


class DatabaseError(OasrError):
    """A tuning-database file is malformed, has the wrong schema, or cannot be written."""


class ConfigurationError(OasrError):
    """A bad environment variable or argument."""


class OasrWarning(UserWarning):
    """Something was skipped and the next tier or plugin serves instead (slower, never wrong)."""


class ToolchainError(OasrError):
    """nvcc or the CUTLASS headers are missing or cannot build for the requested arch.

    The message says which tool is missing and how to provide it (``OASR_NVCC``, ``CUDA_HOME``,
    ``pip install nvidia-cutlass==4.2.0.0``); callers fall back to the next tier.
    """


class JitBuildError(OasrError):
    """A JIT module could not be built, found, or loaded (every unit failed, link failed)."""


class UncoveredShapesError(OasrError):
    """Must-tune shapes no user or system tier entry covers (``TuningConfig(strict=True)``).

    ``points`` holds every uncovered point; the message names each one (family, op,
    signature key, dynamic size) and how to cover them.
    """

    def __init__(self, message: str, points: tuple = ()) -> None:
        super().__init__(message)
        self.points = points
