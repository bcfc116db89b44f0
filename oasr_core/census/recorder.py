"""The census shape recorder: every call a family's patches describe, counted while code runs.

A family tells the census how to see its calls with :class:`RecorderPatch` records, returned
by ``Family.recorder_patches()``. A patch names a *target* (``"torch.nn.functional:linear"``,
``"oasr_gemm.ops:gemm"``) and a *record* function taking the target's own arguments and
returning the :class:`Call` (or calls) it stands for, or None when the call is not the family's
(a ``torch.matmul`` on a 4-D operand). A patch only observes: the recorder, never the plugin,
wraps the target, and the original always runs.

How the recorder reaches a target decides whether a call is missed. The original patched one
module attribute, so a layer that had done ``from oasr import gemm`` before patching was
invisible (digest 6.2 item 12). Here:

* a torch function (anything ``torch.overrides`` can override: ``F.linear``, ``torch.matmul``,
  ``Tensor.matmul``, ``F.conv1d``) is seen through a ``TorchFunctionMode``, at dispatch, so the
  name it was imported under does not matter (the mode is per thread: the recording thread);
* any other callable (a plugin's op) is wrapped, and *every* module global bound to the
  original object, in every imported module, is rebound to the wrapper until the recorder
  stops; a module imported later sees the wrapper through the patched attribute.

A recorded call inside another recorded call (the torch path of ``oasr_gemm.gemm`` calling
``F.linear``) is not counted twice: only the outermost is.

An *epilogue* patch (``RecorderPatch(consumes=True)``) sees a call that consumes a recorded
call's output: its record function takes the :class:`Call` counted for the call that produced
its first argument (None when no recorded call did) before the target's arguments, and
answers the call the two stand for together, which replaces the producer's count (a linear
whose output goes straight into a log-softmax is the family's fused op). The recorder keeps,
for that, the counted call of each live output tensor (weakly; only while some patch
consumes).

Every call a patch sees becomes a counted :class:`Call` or a counted skip, never an error that
loses the census: a record function answers :class:`Skip` (with its reason) for a call of its
kind that its family cannot key (string padding with no integer equivalent), a call that is
not a valid point of its family (:func:`check_call`: an op, dims or size the family does not
have) is skipped with the reason, and so is every call of a record function that raises
(warned about once; ``strict`` raises instead). :attr:`ShapeRecorder.skipped` counts the
calls per reason, and keeps a few examples of each, for the census summary.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import re
import sys
import threading
import types
import warnings
import weakref
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs

from oasr_core.errors import OasrWarning, PluginError
from oasr_core.types import NAME_RE

_VALUE_RE = re.compile(r"=('[^']*'|\S+)")
"""A ``=value`` in a reason: dropped, so that a reason names the problem, not the value."""
_TARGET_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
_DTYPE_NAMES = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "float64": "fp64"}
ITEMSIZE: Mapping[str, int] = types.MappingProxyType(
    {"fp16": 2, "bf16": 2, "fp32": 4, "fp64": 8, "int8": 1, "float8_e4m3fn": 1,
     "float8_e5m2": 1})
"""Bytes per element of the dtype names :func:`dtype_name` produces."""


def dtype_name(dtype: Any) -> str:
    """The census spelling of a torch dtype: ``fp16``, ``bf16``, ``fp32``; others keep
    torch's name (``int8``, ``float8_e4m3fn``)."""
    text = str(dtype).removeprefix("torch.")
    return _DTYPE_NAMES.get(text, text)


def _dims(value: Mapping[str, int] | Iterable[tuple[str, int]]) -> tuple[tuple[str, int], ...]:
    items = value.items() if isinstance(value, Mapping) else value
    return tuple((str(k), int(v)) for k, v in items)


@attrs.frozen
class Call:
    """One call shape, as a family's record function describes it.

    Calls with equal fields are counted together. ``elements``, ``flops`` and
    ``weight_elements`` feed the census's traffic estimate and working set; a family that
    leaves them 0 gets a launch-cost-only estimate.
    """

    family: str
    """The family that tunes this call (must be the patch's family)."""
    op: str
    """The op it is keyed under (``gemm``, ``gemm_activation``)."""
    dtype: str
    """Operand dtype as :func:`dtype_name` spells it; ``fp32`` is recorded as the deployment
    dtype when the recorder has one (a CPU probe standing in for an fp16 engine)."""
    dims: tuple[tuple[str, int], ...] = attrs.field(converter=_dims)
    """Static signature dims in the family's key order (a mapping is accepted)."""
    m: int
    """The dynamic axis value (rows for a GEMM, ``B * T_out`` for conv1d)."""
    batch: int = 1
    """Independent problems per call (batched GEMMs); 1 otherwise."""
    point: str | None = None
    """Exact dynamic point for exact-point families (conv1d's ``"BxT"``), else None."""
    elements: int = 0
    """Elements read and written by one call (operands and result)."""
    flops: int = 0
    """Floating-point operations of one call."""
    weight_elements: int = 0
    """Elements of the call's weight operand (the model's working set)."""

    @property
    def label(self) -> str:
        """``family|op=..|dt=..|N=..|K=..``: the signature, with the operand dtype."""
        dims = "".join(f"|{k}={v}" for k, v in self.dims)
        return f"{self.family}|op={self.op}|dt={self.dtype}{dims}"


@attrs.frozen
class Skip:
    """A record function's answer for a call of its family's kind that the census cannot key
    as a point (its family serves it from torch): counted under ``reason`` in the summary."""

    reason: str
    """Why, in a few words (one summary line per distinct reason)."""
    example: str = ""
    """The call, for the summary (``Cin=768 k=128 padding='same'``)."""


def check_call(call: Call, family: Any = None) -> str | None:
    """Why ``call`` is not a valid census point, or None when it is: a positive ``m`` and
    ``batch``, dims that are integers >= 0, and, given its :class:`~oasr_core.types.Family`,
    one of its ops and its dims in key order (0 only for ``Family.zero_dims``)."""
    if type(call.m) is not int or call.m < 1:
        return f"M={call.m!r} is not a positive integer"
    if type(call.batch) is not int or call.batch < 1:
        return f"batch={call.batch!r} is not a positive integer"
    if not isinstance(call.dtype, str) or not call.dtype or "|" in call.dtype:
        return f"dtype {call.dtype!r} is not a dtype name"
    if family is None:
        bad = next(((k, v) for k, v in call.dims if type(v) is not int or v < 0), None)
        return None if bad is None else f"dim {bad[0]}={bad[1]!r} is not an integer >= 0"
    if call.op not in family.ops:
        return f"op {call.op!r} is not an op of {family.name}"
    return family.dims_problem(call.dims)


def _check_target(_inst: object, _attribute: attrs.Attribute, value: str) -> None:
    if not isinstance(value, str) or not _TARGET_RE.match(value):
        raise ValueError(f"recorder target {value!r} is not 'package.module:attribute'")


def _check_family(_inst: object, _attribute: attrs.Attribute, value: str) -> None:
    if not isinstance(value, str) or not NAME_RE.match(value):
        raise ValueError(f"recorder patch family {value!r} is not a valid family name")


def _check_record(_inst: object, _attribute: attrs.Attribute, value: Any) -> None:
    if not callable(value):
        raise TypeError(f"recorder patch record must be callable, got {type(value).__name__}")


@attrs.frozen
class RecorderPatch:
    """How the census sees one callable's calls; returned by ``Family.recorder_patches()``.

    ``target`` is ``"module:qualname"`` (``"torch:matmul"``, ``"torch.Tensor:matmul"``,
    ``"oasr_gemm.ops:gemm"``). ``record`` takes exactly the target's arguments and returns a
    :class:`Call`, an iterable of them, or None (not this family's call). It must not mutate
    its arguments or run the computation. Several patches may share a target.
    """

    family: str = attrs.field(validator=_check_family)
    """The family the recorded calls belong to."""
    target: str = attrs.field(validator=_check_target)
    """``module:qualname`` of the callable to observe."""
    record: Callable[..., Call | Iterable[Call] | None] = attrs.field(validator=_check_record)
    """``record(*args, **kwargs)`` with the target's arguments (``record(producer, *args,
    **kwargs)`` for a :attr:`consumes` patch)."""
    description: str = ""
    consumes: bool = False
    """An epilogue patch: ``record(producer, *args, **kwargs)`` gets the :class:`Call` counted
    for the call that produced the target's first argument (None: none did) and returns the
    :class:`Call` replacing that count, or None (the call stays uncounted and the producer
    keeps its count)."""

    def resolve(self) -> tuple[Any, str, Any]:
        """``(owner, attribute, original)``: imports the module and walks the qualname."""
        module_name, _, qualname = self.target.partition(":")
        owner: Any = importlib.import_module(module_name)
        *path, attr = qualname.split(".")
        for part in path:
            owner = getattr(owner, part)
        return owner, attr, getattr(owner, attr)


def patches_of(registry: Any) -> list[RecorderPatch]:
    """Every installed family's recorder patches, checked (a bad one is reported and skipped)."""
    out: list[RecorderPatch] = []
    for name, family in registry.families.items():
        if family.recorder_patches is None:
            continue
        provider = registry.provider("family", name)
        try:
            patches = list(family.recorder_patches())
        except Exception as exc:
            _bad(registry, f"{provider}: family {name!r} recorder_patches() raised "
                 f"{type(exc).__name__}: {exc}; its calls are not recorded", exc)
            continue
        for i, patch in enumerate(patches):
            if isinstance(patch, type) and issubclass(patch, RecorderPatch):
                why = "the class RecorderPatch; it must return instances. Forgotten the `()`?"
            elif not isinstance(patch, RecorderPatch):
                why = f"a {type(patch).__name__}, not an oasr_core.census.RecorderPatch"
            elif patch.family != name:
                why = f"a patch for family {patch.family!r}"
            else:
                out.append(patch)
                continue
            _bad(registry, f"{provider}: family {name!r} recorder_patches() item {i} is {why}; "
                 "it is skipped")
    return out


def _bad(registry: Any, message: str, exc: BaseException | None = None) -> None:
    if getattr(registry, "strict", False):
        raise PluginError(message) from exc
    registry.pm.report(message, exc=exc)


@functools.cache
def _overridable() -> frozenset[Any]:
    import torch.overrides

    funcs = torch.overrides.get_overridable_functions()
    return frozenset(f for group in funcs.values() for f in group)


def _is_torch_function(obj: Any) -> bool:
    try:
        return obj in _overridable()
    except TypeError:
        return False


_LOCAL = threading.local()


def _depth() -> int:
    return getattr(_LOCAL, "depth", 0)


class ShapeRecorder:
    """Counts the :class:`Call` s of ``patches`` between :meth:`start` and :meth:`stop`.

    Use as a context manager around a workload, then read :attr:`counts` (or :meth:`take` it
    between probes). ``deploy_dtype`` (``fp16``/``bf16``) is recorded for ``fp32`` calls, so a
    CPU probe in fp32 reports the dtype the deployment runs. ``strict`` raises on a broken
    record function instead of warning once and ignoring it.
    """

    def __init__(self, patches: Sequence[RecorderPatch], *, deploy_dtype: str | None = None,
                 strict: bool = False, families: Mapping[str, Any] | None = None) -> None:
        self.patches = tuple(patches)
        self.deploy_dtype = deploy_dtype
        self.strict = strict
        self.families = dict(families or {})
        self.counts: Counter[Call] = Counter()
        self.skipped: Counter[str] = Counter()
        """Calls seen but not counted, per reason (``family: reason``); never reset."""
        self.examples: dict[str, list[str]] = {}
        """Up to three distinct examples per reason of :attr:`skipped`."""
        self.unresolved: list[str] = []
        self._lock = threading.Lock()
        self._mode: Any = None
        self._rebound: list[tuple[Any, str, Any, Any]] = []
        self._warned: set[str] = set()
        self._active = False
        self._consumed = any(p.consumes for p in self.patches)
        self._produced: dict[int, tuple[Any, Call]] = {}
        """``id(output) -> (weak reference, Call)`` of live outputs of counted calls (only
        when some patch :attr:`~RecorderPatch.consumes`)."""

    def __enter__(self) -> ShapeRecorder:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def take(self) -> Counter[Call]:
        """The counts so far; the recorder starts again from zero."""
        with self._lock:
            counts, self.counts = self.counts, Counter()
        return counts

    def start(self) -> None:
        """Resolve every target and begin observing (not reentrant)."""
        if self._active:
            raise RuntimeError("this ShapeRecorder is already recording")
        by_func: dict[Any, list[RecorderPatch]] = {}
        by_callable: dict[int, tuple[Any, list[RecorderPatch]]] = {}
        for patch in self.patches:
            try:
                _owner, _attr, original = patch.resolve()
            except (ImportError, AttributeError) as exc:
                self.unresolved.append(patch.target)
                self._warn(patch, f"target cannot be resolved ({type(exc).__name__}: {exc}); "
                           "its calls are not recorded")
                continue
            if _is_torch_function(original):
                by_func.setdefault(original, []).append(patch)
            else:
                by_callable.setdefault(id(original), (original, []))[1].append(patch)
        self._active = True
        if by_func:
            self._mode = _make_mode(self, by_func)
            self._mode.__enter__()
        for original, patches in by_callable.values():
            self._rebind(original, self._wrapper(original, patches))

    def stop(self) -> None:
        """Stop observing and restore every rebound name."""
        if not self._active:
            return
        if self._mode is not None:
            self._mode.__exit__(None, None, None)
            self._mode = None
        for namespace, name, original, wrapper in reversed(self._rebound):
            if namespace.get(name) is wrapper:
                namespace[name] = original
        self._rebound.clear()
        self._produced.clear()
        self._active = False

    def produced(self, output: Any, counted: list[Call]) -> None:
        """Remember that ``output`` is the result of the one call in ``counted`` (for an
        epilogue patch; nothing when no patch consumes, or the call counted other than one)."""
        if not self._consumed or len(counted) != 1:
            return
        key = id(output)
        try:
            ref = weakref.ref(output, lambda _r, k=key, d=self._produced: d.pop(k, None))
        except TypeError:  # not a tensor (a tuple of outputs): nothing consumes it as one
            return
        with self._lock:
            self._produced[key] = (ref, counted[0])

    def _producer(self, args: tuple, kwargs: Mapping) -> Call | None:
        """The counted call whose output is this call's first argument, if it is still live."""
        first = args[0] if args else kwargs.get("input")
        entry = self._produced.get(id(first)) if first is not None else None
        if entry is None or entry[0]() is not first:
            return None
        return entry[1]

    def observe(self, patches: Sequence[RecorderPatch], args: tuple, kwargs: Mapping
                ) -> list[Call]:
        """Run ``patches``' record functions on one call's arguments and count the result;
        the calls counted."""
        counted: list[Call] = []
        for patch in patches:
            producer = None
            try:
                if patch.consumes:
                    producer = self._producer(args, kwargs)
                    result = patch.record(producer, *args, **kwargs)
                else:
                    result = patch.record(*args, **kwargs)
                items = [] if result is None else [result] if isinstance(result, (Call, Skip)) \
                    else list(result)
                for item in items:
                    if not isinstance(item, (Call, Skip)):
                        raise TypeError(f"record returned a {type(item).__name__}, not a Call")
                    if isinstance(item, Call) and item.family != patch.family:
                        raise ValueError(f"record returned a call of family {item.family!r}")
            except Exception as exc:
                if self.strict:
                    raise
                self._warn(patch, f"record failed ({type(exc).__name__}: {exc}); the call is "
                           "not counted")
                self.skip(patch.family, f"its recorder of {patch.target} failed "
                          f"({type(exc).__name__}); see the warning",
                          " ".join(str(exc).split())[:120])
                continue
            for item in items:
                if isinstance(item, Skip):
                    self.skip(patch.family, item.reason, item.example)
                    continue
                call = item
                if self.deploy_dtype is not None and call.dtype == "fp32":
                    call = attrs.evolve(call, dtype=self.deploy_dtype)
                why = check_call(call, self.families.get(call.family))
                if why is not None:
                    self.skip(call.family, f"not a valid point ({_VALUE_RE.sub('', why)})",
                              call.label + f"|M={call.m}")
                    continue
                with self._lock:
                    if patch.consumes:
                        if producer is None or not self.counts.get(producer):
                            continue  # nothing to fuse with (already taken): not counted
                        self.counts[producer] -= 1
                        if not self.counts[producer]:
                            del self.counts[producer]
                    self.counts[call] += 1
                counted.append(call)
        return counted

    def skipped_json(self) -> list[dict[str, Any]]:
        """:attr:`skipped` as JSON records (reason, calls, examples), most calls first: the
        ShapeSet provenance's ``skipped``."""
        with self._lock:
            items = sorted(self.skipped.items(), key=lambda kv: (-kv[1], kv[0]))
            return [{"reason": reason, "calls": n, "examples": list(self.examples.get(reason, ()))}
                    for reason, n in items]

    def skip(self, family: str, reason: str, example: str = "", count: int = 1) -> None:
        """Count ``count`` calls of ``family`` that are not points, under ``reason``."""
        key = f"{family}: {reason}"
        with self._lock:
            self.skipped[key] += count
            seen = self.examples.setdefault(key, [])
            if example and example not in seen and len(seen) < 3:
                seen.append(example)

    def _wrapper(self, original: Callable, patches: list[RecorderPatch]) -> Callable:
        recorder = self

        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            depth = _depth()
            counted = recorder.observe(patches, args, kwargs) if depth == 0 else []
            _LOCAL.depth = depth + 1
            try:
                result = original(*args, **kwargs)
            finally:
                _LOCAL.depth = depth
            if counted:
                recorder.produced(result, counted)
            return result

        return wrapper

    def _rebind(self, original: Any, wrapper: Callable) -> None:
        """Point every module global (and the targets' class attributes) at ``wrapper``."""
        for module in list(sys.modules.values()):
            namespace = getattr(module, "__dict__", None)
            if not isinstance(namespace, dict):
                continue
            for name, value in list(namespace.items()):
                if value is original:
                    namespace[name] = wrapper
                    self._rebound.append((namespace, name, original, wrapper))
        for patch in self.patches:
            try:
                owner, attr, value = patch.resolve()
            except (ImportError, AttributeError):
                continue
            if value is original and not isinstance(owner, types.ModuleType):
                namespace = _ClassNamespace(owner, attr)
                namespace[attr] = wrapper
                self._rebound.append((namespace, attr, namespace.raw, namespace.installed))

    def _warn(self, patch: RecorderPatch, what: str) -> None:
        key = f"{patch.family}:{patch.target}:{what}"
        if key in self._warned:
            return
        self._warned.add(key)
        warnings.warn(f"census recorder: family {patch.family!r} patch {patch.target}: {what}",
                      OasrWarning, stacklevel=3)


class _ClassNamespace:
    """A class attribute seen as the mapping :meth:`ShapeRecorder.stop` restores.

    The raw attribute (a ``staticmethod`` or ``classmethod`` descriptor, a function) is
    what is restored; a wrapper of a static or class method is installed as a staticmethod
    (it calls the bound original), and an attribute the class only inherited is deleted
    again rather than set on it.
    """

    def __init__(self, owner: Any, attr: str) -> None:
        self.owner = owner
        self.inherited = attr not in vars(owner)
        self.raw = inspect.getattr_static(owner, attr)
        self.installed: Any = None

    def get(self, name: str) -> Any:
        return vars(self.owner).get(name)

    def __setitem__(self, name: str, value: Any) -> None:
        if value is self.raw:
            if self.inherited:
                delattr(self.owner, name)
            else:
                setattr(self.owner, name, value)
            return
        if isinstance(self.raw, (staticmethod, classmethod)):
            value = staticmethod(value)
        self.installed = value
        setattr(self.owner, name, value)


def _make_mode(recorder: ShapeRecorder, table: dict[Any, list[RecorderPatch]]) -> Any:
    from torch.overrides import TorchFunctionMode

    class _RecorderMode(TorchFunctionMode):
        def __torch_function__(self, func, types_, args=(), kwargs=None):
            kwargs = kwargs or {}
            patches = table.get(func)
            counted = []
            if patches is not None and _depth() == 0:
                counted = recorder.observe(patches, args, kwargs)
            result = func(*args, **kwargs)
            if counted:
                recorder.produced(result, counted)
            return result

    return _RecorderMode()
