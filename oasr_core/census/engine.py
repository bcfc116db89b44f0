"""Engine configuration and traffic: which graph keys a deployment runs, and how often.

An engine bounds most of its shape space before a request arrives. Offline, it batches
utterances and runs the encoder at a (batch bucket, frame bucket) key; streaming, it steps a
cohort of active streams by one chunk at a padded width. :func:`engine_keys` enumerates those
:class:`EngineKey` s from an :class:`EngineConfig` and weights them by :class:`Traffic`:

* **offline**: a length-sorted batching replay over a sample of utterance durations (a
  manifest, or the declared default profile). Frames are rounded up to the frame granularity;
  a fixed-window front end is keyed at exactly its window (each utterance taking as many
  windows as it spans), never rounded. A key is captured (a CUDA graph) when graphs are on,
  its batch fits a bucket and its frames fit the graph maximum; otherwise it runs eagerly at
  its real batch.
* **streaming**: a concurrency histogram (active streams: weight) maps each count onto the
  first cohort width at or above it (a padded ladder, exact widths or an explicit ladder),
  times the chunk size.
"""

from __future__ import annotations

import enum
import math
import wave
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from oasr_core.census.workloads import Workload
from oasr_core.database.codec import parse_text, read_document
from oasr_core.errors import ConfigurationError, DatabaseError

DEFAULT_UTTERANCES_PER_SLOT = 16
"""Default offline profile: this many utterances per batch slot, durations flat in 1..30 s."""
_AUDIO_FIELDS = ("audio_filepath", "audio", "path")


class ManifestError(ConfigurationError):
    """A manifest line without a usable duration, or an unreadable audio file."""


class ServiceMode(enum.Enum):
    """How the engine serves: whole utterances in batches, or streams chunk by chunk."""

    OFFLINE = "offline"
    STREAMING = "streaming"


class Ladder(enum.Enum):
    """Streaming cohort widths: powers of two (padded) or every width (exact)."""

    PADDED = "padded"
    EXACT = "exact"


def _positive(_inst: object, attribute: attrs.Attribute, value: int | None) -> None:
    if value is not None and (type(value) is not int or value < 1):
        raise ValueError(f"{attribute.name}={value!r} must be a positive integer")


def _ints(value: Any) -> Any:
    return tuple(sorted(set(value))) if isinstance(value, (list, tuple, set)) else value


@attrs.frozen
class EngineConfig:
    """The engine settings that decide its graph keys."""

    service_mode: ServiceMode = attrs.field(converter=ServiceMode)
    max_batch_size: int = attrs.field(validator=_positive)
    """Largest offline batch; largest streaming cohort."""
    preferred_batch_size: int | None = attrs.field(default=None, validator=_positive)
    """Offline micro-batch width the batcher cuts (default: ``max_batch_size``)."""
    batch_buckets: tuple[int, ...] | None = attrs.field(default=None, converter=_ints)
    """Captured offline batch widths (default: powers of two below the maximum, and it)."""
    frame_granularity: int = attrs.field(default=64, validator=_positive)
    """Offline frame counts round up to a multiple of this (a fixed window never does)."""
    max_graph_frames: int = attrs.field(default=4096, validator=_positive)
    """Longest offline key captured in a graph; longer batches run eagerly."""
    use_graphs: bool = True
    """Whether the engine captures CUDA graphs at all (False: every call is eager)."""
    chunk_size: int = attrs.field(default=16, validator=_positive)
    """Streaming chunk, in encoder output frames."""
    width_ladder: Ladder | tuple[int, ...] = attrs.field(default=Ladder.PADDED, converter=_ints)
    """Streaming cohort widths: a :class:`Ladder` or explicit widths (the maximum is added)."""

    def __attrs_post_init__(self) -> None:
        for name in ("batch_buckets", "width_ladder"):
            value = getattr(self, name)
            if isinstance(value, tuple) and (not value or any(
                    type(v) is not int or not 1 <= v <= self.max_batch_size for v in value)):
                raise ValueError(f"{name} {list(value)} must be integers in 1.."
                                 f"{self.max_batch_size} (the maximum batch size)")

    def buckets(self) -> tuple[int, ...]:
        """Captured offline batch widths, ascending."""
        if self.batch_buckets is not None:
            return tuple(sorted({*self.batch_buckets, self.max_batch_size}))
        return _powers_below(self.max_batch_size)

    def widths(self) -> tuple[int, ...]:
        """Streaming cohort widths, ascending (exact when graphs are off: nothing pads)."""
        cap = self.max_batch_size
        if isinstance(self.width_ladder, tuple):
            return tuple(sorted({*self.width_ladder, cap}))
        if self.width_ladder is Ladder.EXACT or not self.use_graphs:
            return tuple(range(1, cap + 1))
        return _powers_below(cap)


def _powers_below(cap: int) -> tuple[int, ...]:
    return (*(1 << i for i in range(cap.bit_length()) if 1 << i < cap), cap)


@attrs.frozen
class EngineKey:
    """One graph key: ``batch`` utterances (or streams) of ``frames`` input frames."""

    mode: ServiceMode
    batch: int
    frames: int
    captured: bool
    weight: float
    """Traffic weight: micro-batches (offline) or histogram weight (streaming)."""
    chunk: int | None = None

    @property
    def label(self) -> str:
        """``offline:B32xT448``, ``streaming:W8xC16``; ``:eager`` when not captured."""
        if self.mode is ServiceMode.STREAMING:
            text = f"streaming:W{self.batch}xC{self.chunk}"
        else:
            text = f"offline:B{self.batch}xT{self.frames}"
        return text if self.captured else text + ":eager"


@attrs.frozen
class Traffic:
    """What the deployment serves: utterance durations and/or a concurrency histogram."""

    durations_s: tuple[float, ...] = attrs.field(default=(), converter=tuple)
    concurrency: Mapping[int, float] = attrs.field(factory=dict)
    source: str = "default"
    """``default``, or where the data came from (``manifest:PATH``)."""


def default_durations(config: EngineConfig) -> tuple[float, ...]:
    """The declared default offline profile: durations evenly spread over 1..30 s."""
    n = DEFAULT_UTTERANCES_PER_SLOT * config.max_batch_size
    return tuple(1.0 + 29.0 * i / (n - 1) for i in range(n)) if n > 1 else (15.0,)


def default_concurrency(config: EngineConfig) -> dict[int, float]:
    """The declared default streaming profile: every cohort size 1..max equally often."""
    return {n: 1.0 for n in range(1, config.max_batch_size + 1)}


def offline_keys(config: EngineConfig, workload: Workload,
                 durations: Sequence[float]) -> list[EngineKey]:
    """Keys of a length-sorted batching replay over ``durations`` (seconds)."""
    if workload.fixed_frames is not None:
        window = workload.fixed_frames
        frames = [window] * sum(math.ceil(workload.frames(d) / window) for d in durations)
    else:
        frames = sorted(workload.frames(d) for d in durations)
    if not frames:
        raise ConfigurationError("offline census: the traffic sample has no utterances")
    width = config.preferred_batch_size or config.max_batch_size
    buckets = config.buckets()
    weights: dict[tuple[int, int, bool], float] = {}
    for start in range(0, len(frames), width):
        chunk = frames[start:start + width]
        b = len(chunk)
        if workload.fixed_frames is not None:
            t = workload.fixed_frames
        else:
            g = config.frame_granularity
            t = -(-chunk[-1] // g) * g
        bucket = next((x for x in buckets if x >= b), None)
        captured = config.use_graphs and bucket is not None and t <= config.max_graph_frames
        key = (bucket if captured else b, t, captured)
        weights[key] = weights.get(key, 0.0) + 1.0
    return [EngineKey(ServiceMode.OFFLINE, b, t, c, w) for (b, t, c), w in weights.items()]


def streaming_keys(config: EngineConfig, workload: Workload,
                   concurrency: Mapping[int, float]) -> list[EngineKey]:
    """Cohort-width keys for ``concurrency`` (active streams: weight) at the chunk size."""
    if not workload.streaming:
        raise ConfigurationError(
            f"workload {workload.name!r} has a fixed {workload.fixed_frames}-frame window and "
            "no streaming mode; census it with --service-mode offline")
    widths = config.widths()
    frames = workload.chunk_input_frames(config.chunk_size)
    weights: dict[int, float] = {}
    for active, weight in concurrency.items():
        if active > config.max_batch_size:
            raise ConfigurationError(f"concurrency histogram: {active} active streams exceed "
                                     f"--max-batch-size {config.max_batch_size}")
        width = next(w for w in widths if w >= active)
        weights[width] = weights.get(width, 0.0) + weight
    return [EngineKey(ServiceMode.STREAMING, w, frames, config.use_graphs, weight,
                      chunk=config.chunk_size) for w, weight in sorted(weights.items())]


def engine_keys(config: EngineConfig, workload: Workload, traffic: Traffic) -> list[EngineKey]:
    """Every key the deployment runs with its traffic weight (default profile when empty)."""
    if config.service_mode is ServiceMode.OFFLINE:
        return offline_keys(config, workload, traffic.durations_s or default_durations(config))
    return streaming_keys(config, workload, traffic.concurrency or default_concurrency(config))


def parse_concurrency(text: str) -> dict[int, float]:
    """``"1:10,4:5,16:1"`` or a JSON file ``{"1": 10, ...}``: active streams -> weight."""
    path = Path(text)
    where = f"--concurrency {text!r}"
    if path.is_file():
        try:
            raw = read_document(path, error=ConfigurationError)
        except ConfigurationError as exc:
            raise ConfigurationError(f"{where}: cannot read ({exc})") from None
        if not isinstance(raw, dict):
            raise ConfigurationError(f"{where}: expected a JSON object of streams -> weight")
        pairs = [(str(k), v) for k, v in raw.items()]
    else:
        pairs = [tuple(item.split(":", 1)) if ":" in item else (item, "")
                 for item in text.split(",") if item.strip()]
    out: dict[int, float] = {}
    for key, value in pairs:
        try:
            active, weight = int(key), float(value)
        except (TypeError, ValueError):
            raise ConfigurationError(f"{where}: {key}:{value} is not STREAMS:WEIGHT") from None
        if active < 1 or not math.isfinite(weight) or weight < 0:
            raise ConfigurationError(f"{where}: {key}:{value} needs streams >= 1, weight >= 0")
        out[active] = out.get(active, 0.0) + weight
    if not out or not sum(out.values()) > 0:
        raise ConfigurationError(f"{where}: the histogram is empty")
    return out


def read_manifest(path: Path, *, audio_root: Path | None = None) -> tuple[float, ...]:
    """Durations (s) of a JSONL manifest: each line's ``duration``, else its audio header.

    The audio path is the first of ``audio_filepath``, ``audio``, ``path``, relative to
    ``audio_root`` (default: the manifest's folder). WAV headers are read with the standard
    library, other formats with ``soundfile`` when installed. Any bad line is a
    :class:`ManifestError` naming ``file:line``.
    """
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ManifestError(f"manifest {path}: cannot read ({exc})") from None
    root = Path(audio_root) if audio_root is not None else Path(path).parent
    durations = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            item = parse_text(line.encode("utf-8", "surrogatepass"), origin=where)
        except DatabaseError as exc:
            raise ManifestError(f"{where}: not a JSON object "
                                f"({str(exc).removeprefix(where + ': ')})") from None
        if not isinstance(item, dict):
            raise ManifestError(f"{where}: not a JSON object")
        durations.append(_duration(item, root, where))
    if not durations:
        raise ManifestError(f"manifest {path} has no utterances")
    return tuple(durations)


def _duration(item: Mapping[str, Any], root: Path, where: str) -> float:
    if "duration" in item:
        value = item["duration"]
        if type(value) not in (int, float) or not math.isfinite(value) or value <= 0:
            raise ManifestError(f"{where}: duration {value!r} is not a positive number")
        return float(value)
    field = next((f for f in _AUDIO_FIELDS if isinstance(item.get(f), str)), None)
    if field is None:
        raise ManifestError(f"{where}: no 'duration' and no audio path "
                            f"({', '.join(_AUDIO_FIELDS)})")
    audio = root / item[field]
    return audio_duration(audio, where)


def audio_duration(audio: Path, where: str = "") -> float:
    """Seconds of audio in ``audio`` from its header (WAV natively, others via soundfile)."""
    prefix = f"{where}: " if where else ""
    try:
        with wave.open(str(audio), "rb") as f:
            return f.getnframes() / f.getframerate()
    except FileNotFoundError:
        raise ManifestError(f"{prefix}audio file {audio} does not exist") from None
    except (wave.Error, EOFError, OSError):
        pass
    try:
        import soundfile
    except ImportError:
        raise ManifestError(f"{prefix}{audio} is not a WAV file; give its 'duration' or "
                            "install soundfile to read its header") from None
    try:
        return float(soundfile.info(str(audio)).duration)
    except Exception as exc:
        raise ManifestError(f"{prefix}cannot read the header of {audio} ({exc})") from None
