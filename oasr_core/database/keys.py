"""Signature keys: the static half of a tuning entry's address.

A key spells one operation's static signature, ``gemm|op=gemm|dt=half|N=512|K=256``: the
family, the op, the key dtype when the family keys by dtype (``Family.key_dtype``), then the
family's static dims in ``Family.dims`` order. ``|`` and ``=`` separate fields, so no value
may contain them. The dynamic axis (M) is not part of the key; regions index it.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence

import attrs

from oasr_core.types import Family

_RESERVED = ("|", "=")


@attrs.frozen
class SignatureKey:
    """A parsed signature key; ``str(key)`` spells it back exactly."""

    family: str
    """Family name (the key's first field)."""
    op: str
    """The op, e.g. ``gemm_activation``."""
    dtype: str | None
    """The ``dt=`` value (``half``, ``fp16``), or None for families keyed without dtype."""
    dims: tuple[tuple[str, str], ...] = attrs.field(converter=tuple)
    """Static dims as (name, value text) pairs, in key order."""

    def __str__(self) -> str:
        parts = [self.family, f"op={self.op}"]
        if self.dtype is not None:
            parts.append(f"dt={self.dtype}")
        parts.extend(f"{name}={value}" for name, value in self.dims)
        return "|".join(parts)

    def dim(self, name: str) -> str:
        """The text of static dim ``name`` (``KeyError`` when absent)."""
        for k, v in self.dims:
            if k == name:
                return v
        raise KeyError(name)


def _check_value(what: str, value: str) -> str:
    if not value:
        raise ValueError(f"signature key: {what} is empty")
    for ch in _RESERVED:
        if ch in value:
            raise ValueError(f"signature key: {what}={value!r} contains the reserved {ch!r}")
    return value


def signature_key(family: Family, op: str, dtype: str | None,
                  dims: Mapping[str, object] | Sequence[object]) -> str:
    """The key of ``op`` on ``family`` at static ``dims``.

    ``dims`` is a mapping by dim name or a sequence in ``family.dims`` order. ``dtype`` is the
    key dtype (an operand dtype or a class like ``half``) and must be None exactly when the
    family keys without dtype. Raises ``ValueError`` on a bad op, a missing/extra dim, or a
    value holding ``|`` or ``=``.
    """
    if op not in family.ops:
        raise ValueError(f"signature key: {op!r} is not an op of family {family.name} "
                         f"(ops: {', '.join(family.ops)})")
    if family.key_dtype and dtype is None:
        raise ValueError(f"signature key: family {family.name} keys by dtype; dtype is None")
    if not family.key_dtype and dtype is not None:
        raise ValueError(f"signature key: family {family.name} keys without dtype; "
                         f"got dtype={dtype!r}")
    if isinstance(dims, Mapping):
        extra = sorted(set(map(str, dims)) - set(family.dims))
        missing = [d for d in family.dims if d not in dims]
        if extra or missing:
            raise ValueError(f"signature key: family {family.name} dims are "
                             f"{', '.join(family.dims)}; missing {missing}, unexpected {extra}")
        values = [dims[d] for d in family.dims]
    else:
        values = list(dims)
        if len(values) != len(family.dims):
            raise ValueError(f"signature key: family {family.name} has {len(family.dims)} dims "
                             f"({', '.join(family.dims)}), got {len(values)} values")
    key = SignatureKey(
        family=family.name,
        op=_check_value("op", op),
        dtype=None if dtype is None else _check_value("dt", str(dtype)),
        dims=tuple((name, _check_value(name, str(v))) for name, v in zip(family.dims, values,
                                                                   strict=True)),
    )
    return str(key)


def parse_signature_key(key: str) -> SignatureKey:
    """Parse a key back into its fields; raises ``ValueError`` when it is not well formed.

    The values come back as text: ``parse_signature_key(k)`` spells ``k`` again exactly.
    """
    if not isinstance(key, str) or not key:
        raise ValueError(f"signature key {key!r} is empty or not a string")
    family, *fields = key.split("|")
    pairs: list[tuple[str, str]] = []
    for field in fields:
        name, sep, value = field.partition("=")
        if not sep or not name or not value or "=" in value:
            raise ValueError(f"signature key {key!r}: field {field!r} is not name=value")
        pairs.append((name, value))
    if not family or "=" in family:
        raise ValueError(f"signature key {key!r} does not start with a family name")
    if not pairs or pairs[0][0] != "op":
        raise ValueError(f"signature key {key!r}: the field after the family must be op=...")
    dtype = None
    rest = pairs[1:]
    if rest and rest[0][0] == "dt":
        dtype, rest = rest[0][1], rest[1:]
    names = [name for name, _ in rest]
    if len(set(names)) != len(names) or "op" in names or "dt" in names:
        raise ValueError(f"signature key {key!r} repeats a field")
    return SignatureKey(family=family, op=pairs[0][1], dtype=dtype, dims=tuple(rest))


def check_key(family: Family, key: str) -> SignatureKey:
    """Parse ``key`` and check it is one ``family`` can produce; ``ValueError`` otherwise."""
    return _check_key(family.name, family.ops, family.dims, family.key_dtype, key)


@functools.lru_cache(maxsize=1 << 16)
def _check_key(name: str, ops: tuple[str, ...], dims: tuple[str, ...], key_dtype: bool,
               key: str) -> SignatureKey:
    parsed = parse_signature_key(key)
    if parsed.family != name:
        raise ValueError(f"signature key {key!r} belongs to family {parsed.family!r}, "
                         f"not {name!r}")
    if parsed.op not in ops:
        raise ValueError(f"signature key {key!r}: {parsed.op!r} is not an op of family "
                         f"{name} (ops: {', '.join(ops)})")
    if key_dtype != (parsed.dtype is not None):
        need = "needs a dt= field" if key_dtype else "must not have a dt= field"
        raise ValueError(f"signature key {key!r}: family {name} {need}")
    if tuple(dim for dim, _ in parsed.dims) != dims:
        raise ValueError(f"signature key {key!r}: dims must be {', '.join(dims)} "
                         "in that order")
    return parsed
