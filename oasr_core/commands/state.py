"""What every ``oasr`` command shares (:class:`CliState`), below the CLI and its commands."""

from __future__ import annotations

from typing import Any

import attrs

from oasr_core import runtime as rt_mod
from oasr_core.plugins import make_plugin_manager


@attrs.define
class CliState:
    """What every command shares: the plugin manager (built lazily) and verbosity."""

    plugin_manager: Any = None
    verbose: bool = False
    blocked: tuple[str, ...] = ()

    def runtime(self):
        """The process runtime, built on this state's plugin manager."""
        if self.plugin_manager is None:
            self.plugin_manager = make_plugin_manager(block=self.blocked)
        current = rt_mod._RUNTIME
        if current is None or current.pm is not self.plugin_manager:
            rt_mod.install_runtime(rt_mod.Runtime(pm=self.plugin_manager))
        return rt_mod.get_runtime()
