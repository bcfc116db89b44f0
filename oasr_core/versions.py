"""Versioned documents: one migration mechanism for every file format oasr reads.

A document kind (a tuning file, an autotune cache, a ShapeSet ...) declares a
:class:`Migrations`: the version it writes and a registry of :class:`Step`\\ s, each rewriting
the raw mapping of one version into a later one (``source -> target``; a step may skip
versions when an intermediate one cannot hold what the old one records). :meth:`Migrations.migrate`
runs the chain on the parsed JSON before it is structured, so the structuring code only ever
sees the current version. A document newer than the code is refused with the kind's
"too new" error, which writers honour by leaving the file alone; a version no step leaves
is refused with the kind's error, naming the file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

Document = dict[str, Any]
StepFunction = Callable[[Document, str], Document]
"""``step(raw, origin) -> raw``: the document of the step's source version rewritten into its
target version (``origin`` names the file for error messages)."""


@attrs.frozen
class Step:
    """One migration: documents of version ``source`` become documents of ``target``."""

    source: int
    target: int
    run: StepFunction

    def __attrs_post_init__(self) -> None:
        if not (type(self.source) is int and type(self.target) is int
                and 0 <= self.source < self.target):
            raise ValueError(f"a migration step must go from a version to a later one, got "
                             f"{self.source!r} -> {self.target!r}")


def _by_source(steps: Iterable[Step]) -> Mapping[int, Step]:
    out: dict[int, Step] = {}
    for step in steps:
        if step.source in out:
            raise ValueError(f"two migration steps leave version {step.source}")
        out[step.source] = step
    return out


@attrs.frozen
class Migrations:
    """The version history of one document kind.

    ``kind`` names it in messages ("tuning file"); ``current`` is the version written;
    ``error`` is raised for a document no step can bring up to date, ``too_new`` for one
    written by a newer oasr (both take one message argument); ``hint`` ends the too-new
    message (what the user should do).
    """

    kind: str
    current: int
    steps: Mapping[int, Step] = attrs.field(converter=_by_source)
    error: type[Exception] = ValueError
    too_new: type[Exception] = ValueError
    hint: str = "upgrade oasr"

    def register(self, step: Step) -> Migrations:
        """These migrations with ``step`` added (a version's step replaced)."""
        return attrs.evolve(self, steps={**self.steps, step.source: step}.values())

    def with_current(self, current: int) -> Migrations:
        """These migrations writing ``current`` (tests of chains that do not exist yet)."""
        return attrs.evolve(self, current=current, steps=self.steps.values())

    def check(self, version: int, origin: str) -> None:
        """Raise ``too_new`` when ``version`` is newer than :attr:`current`."""
        if version > self.current:
            raise self.too_new(
                f"{origin}: {self.kind} schema_version {version} was written by a newer oasr "
                f"(this one reads up to {self.current}); {self.hint}")

    def migrate(self, raw: Document, version: int, origin: str) -> Document:
        """``raw`` (a document of ``version``) rewritten to :attr:`current`, without its
        ``schema_version`` key; ``raw`` itself is not modified."""
        self.check(version, origin)
        doc = dict(raw)
        while version < self.current:
            step = self.steps.get(version)
            if step is None:
                raise self.error(f"{origin}: {self.kind} schema_version {version} has no "
                                 f"migration to {version + 1}; rebuild the file")
            doc = dict(step.run(doc, origin))
            version = step.target
        if version != self.current:
            raise self.error(f"{origin}: {self.kind} migrations end at schema_version "
                             f"{version}, not {self.current}")
        doc.pop("schema_version", None)
        return doc
