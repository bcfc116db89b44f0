"""Shell completion of option values: families, lanes, arch families and workloads.

click calls these while completing (``_OASR_COMPLETE=bash_source oasr`` and friends), so each
builds the plugin manager itself and never lets an error escape: a broken plugin must not
break the user's shell.
"""

from __future__ import annotations

from typing import Any

import click
from click.shell_completion import CompletionItem

from oasr_core.commands.state import CliState


def _registry(ctx: click.Context) -> Any:
    state = ctx.find_object(CliState) or CliState()
    return state.runtime().registry


def _items(names: Any, incomplete: str, helps: dict[str, str] | None = None
           ) -> list[CompletionItem]:
    return [CompletionItem(n, help=(helps or {}).get(n)) for n in sorted(names)
            if n.startswith(incomplete)]


def families(ctx: click.Context, param: click.Parameter, incomplete: str
             ) -> list[CompletionItem]:
    """Installed kernel families."""
    try:
        return _items(_registry(ctx).families, incomplete)
    except Exception:  # noqa: BLE001 - completion never fails the shell
        return []


def lanes(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Installed lanes, with the family and arch families each runs on as help."""
    try:
        reg = _registry(ctx)
        family = ctx.params.get("family")
        found = {n: lane for n, lane in reg.lanes.items()
                 if not family or lane.family == family}
        return _items(found, incomplete, {n: f"{lane.family} on {', '.join(lane.arch_families)}"
                                          for n, lane in found.items()})
    except Exception:  # noqa: BLE001
        return []


def arch_families(ctx: click.Context, param: click.Parameter, incomplete: str
                  ) -> list[CompletionItem]:
    """Arch families some installed lane runs on (``sm80``, ``sm90``)."""
    try:
        reg = _registry(ctx)
        return _items({a for lane in reg.lanes.values() for a in lane.arch_families},
                      incomplete)
    except Exception:  # noqa: BLE001
        return []


def targets(ctx: click.Context, param: click.Parameter, incomplete: str
            ) -> list[CompletionItem]:
    """nvcc targets of the arch families installed lanes run on (``sm90`` -> ``9.0a``)."""
    items = arch_families(ctx, param, "")
    out = []
    for item in items:
        digits = item.value[2:]
        dotted = f"{digits[:-1]}.{digits[-1]}" + ("a" if int(digits) >= 90 else "")
        if dotted.startswith(incomplete):
            out.append(CompletionItem(dotted, help=item.value))
    return out


def workloads(ctx: click.Context, param: click.Parameter, incomplete: str
              ) -> list[CompletionItem]:
    """Registered workloads (the built-in reference models and any plugin's)."""
    try:
        from oasr_core.census.workloads import collect_workloads

        return _items(collect_workloads(_registry(ctx).pm), incomplete)
    except Exception:  # noqa: BLE001
        return []
