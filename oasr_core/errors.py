"""One error vocabulary for oasr (STYLE 18).

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
