"""Engine keys: the offline batching replay, fixed windows, streaming widths, manifests."""

from __future__ import annotations

import json
import wave

import pytest

from oasr_core.census.engine import (
    EngineConfig,
    Ladder,
    ManifestError,
    ServiceMode,
    Traffic,
    default_durations,
    engine_keys,
    offline_keys,
    parse_concurrency,
    read_manifest,
    streaming_keys,
)
from oasr_core.census.workloads import builtin_workloads
from oasr_core.errors import ConfigurationError

WORKLOADS = {w.name: w for w in builtin_workloads()}
CONFORMER, WHISPER = WORKLOADS["conformer"], WORKLOADS["whisper_encoder"]


def _keys(keys):
    return sorted((k.batch, k.frames, k.captured, k.weight) for k in keys)


def test_frames_follow_the_feature_window_and_hop():
    assert CONFORMER.frames(1.0) == 1 + (16000 - 400) // 160 == 98
    assert CONFORMER.frames(0.001) == 1


def test_offline_replay_sorts_by_length_cuts_batches_and_rounds_to_granularity(tmp_path):
    """Ten utterances, batches of four: the four shortest share a key, the two longest are a
    partial batch padded to bucket 2; frames round up to a multiple of 64."""
    durations = [9.0, 1.0, 3.0, 2.0, 10.0, 4.0, 7.0, 5.0, 6.0, 8.0]
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps({"duration": d}) + "\n" for d in durations))
    config = EngineConfig(service_mode="offline", max_batch_size=4, batch_buckets=(1, 2, 4),
                          frame_granularity=64)
    keys = offline_keys(config, CONFORMER, read_manifest(manifest))
    frames = sorted(CONFORMER.frames(d) for d in durations)
    assert frames[3] == 398 and frames[7] == 798 and frames[9] == 998
    assert _keys(keys) == [(2, 1024, True, 1.0), (4, 448, True, 1.0), (4, 832, True, 1.0)]
    assert {k.label for k in keys} == {"offline:B4xT448", "offline:B4xT832", "offline:B2xT1024"}


def test_partial_batches_pad_to_the_next_bucket_and_equal_keys_add_weight():
    config = EngineConfig(service_mode="offline", max_batch_size=8, batch_buckets=(4, 8),
                          frame_granularity=64)
    keys = offline_keys(config, CONFORMER, [1.0] * 19)
    assert _keys(keys) == [(4, 128, True, 1.0), (8, 128, True, 2.0)]


def test_a_key_longer_than_the_graph_maximum_runs_eagerly_at_its_real_batch():
    config = EngineConfig(service_mode="offline", max_batch_size=4, max_graph_frames=512)
    keys = offline_keys(config, CONFORMER, [2.0] * 4 + [30.0] * 3)
    assert _keys(keys) == [(3, 3008, False, 1.0), (4, 256, True, 1.0)]
    eager = next(k for k in keys if not k.captured)
    assert eager.label == "offline:B3xT3008:eager", "not padded to a bucket: no graph runs it"


def test_without_graphs_every_offline_key_is_eager():
    config = EngineConfig(service_mode="offline", max_batch_size=4, use_graphs=False)
    assert all(not k.captured for k in offline_keys(config, CONFORMER, [1.0] * 5))


@pytest.mark.parametrize("durations, keys", [
    ([5.0, 29.99, 45.0], [(4, 3000, True, 1.0)]),
    ([0.5] * 7, [(4, 3000, True, 2.0)]),
    ([61.0], [(4, 3000, True, 1.0)]),
    ([10.0] * 9, [(1, 3000, True, 1.0), (4, 3000, True, 2.0)]),
])
def test_a_fixed_window_is_keyed_at_exactly_its_window(durations, keys):
    """Whisper's window stays 3000 frames, never rounded to the granularity (3008); an
    utterance longer than the window takes as many windows as it spans (45 s: two)."""
    config = EngineConfig(service_mode="offline", max_batch_size=4, frame_granularity=64)
    assert _keys(offline_keys(config, WHISPER, durations)) == keys


def test_the_default_offline_profile_is_declared_and_used_without_a_manifest():
    config = EngineConfig(service_mode="offline", max_batch_size=8)
    durations = default_durations(config)
    assert len(durations) == 128 and min(durations) == 1.0 and max(durations) == 30.0
    keys = engine_keys(config, CONFORMER, Traffic())
    assert len(keys) == 16 and all(k.batch == 8 for k in keys)


@pytest.mark.parametrize("ladder, graphs, widths", [
    (Ladder.PADDED, True, (1, 2, 4, 8, 12)),
    (Ladder.EXACT, True, tuple(range(1, 13))),
    ((3, 6), True, (3, 6, 12)),
    (Ladder.PADDED, False, tuple(range(1, 13))),
])
def test_streaming_widths(ladder, graphs, widths):
    config = EngineConfig(service_mode="streaming", max_batch_size=12, width_ladder=ladder,
                          use_graphs=graphs)
    assert config.widths() == widths


def test_streaming_keys_weight_cohort_widths_by_the_concurrency_histogram():
    config = EngineConfig(service_mode="streaming", max_batch_size=16, chunk_size=16)
    keys = streaming_keys(config, CONFORMER, {1: 10.0, 3: 2.0, 4: 1.0, 5: 1.0, 16: 0.5})
    assert [(k.batch, k.weight) for k in keys] == [(1, 10.0), (4, 3.0), (8, 1.0), (16, 0.5)]
    assert {k.frames for k in keys} == {4 * 16 + 3}, "a chunk of 16 encoder frames"
    assert all(k.captured for k in keys)
    assert keys[1].label == "streaming:W4xC16"
    exact = EngineConfig(service_mode="streaming", max_batch_size=16, width_ladder=Ladder.EXACT)
    assert [k.batch for k in streaming_keys(exact, CONFORMER, {3: 1.0, 5: 1.0})] == [3, 5]


def test_streaming_rejects_a_fixed_window_and_an_oversized_histogram():
    config = EngineConfig(service_mode="streaming", max_batch_size=4)
    with pytest.raises(ConfigurationError, match="fixed 3000-frame window"):
        streaming_keys(config, WHISPER, {1: 1.0})
    with pytest.raises(ConfigurationError, match="5 active streams exceed"):
        streaming_keys(config, CONFORMER, {5: 1.0})


def test_engine_config_validates_ladders_and_buckets():
    with pytest.raises(ValueError, match="width_ladder"):
        EngineConfig(service_mode="streaming", max_batch_size=4, width_ladder=(2, 8))
    with pytest.raises(ValueError, match="not a valid ServiceMode"):
        EngineConfig(service_mode="batch", max_batch_size=4)
    assert EngineConfig(service_mode=ServiceMode.OFFLINE, max_batch_size=6).buckets() == \
        (1, 2, 4, 6)


def test_concurrency_histograms_parse_from_text_and_files(tmp_path):
    assert parse_concurrency("1:10, 4:5,4:1") == {1: 10.0, 4: 6.0}
    path = tmp_path / "hist.json"
    path.write_text(json.dumps({"2": 3, "8": 1.5}))
    assert parse_concurrency(str(path)) == {2: 3.0, 8: 1.5}
    for bad in ("1:x", "0:1", "3", "1:0"):
        with pytest.raises(ConfigurationError, match="--concurrency"):
            parse_concurrency(bad)


def _wav(path, seconds, rate=16000):
    with wave.open(str(path), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(rate)
        f.writeframes(b"\0\0" * int(seconds * rate))


def test_manifest_durations_come_from_audio_headers(tmp_path):
    audio = tmp_path / "audio"
    audio.mkdir()
    _wav(audio / "a.wav", 1.5)
    _wav(audio / "b.wav", 0.25, rate=8000)
    manifest = tmp_path / "m.jsonl"
    manifest.write_text('{"audio_filepath": "a.wav"}\n\n{"path": "b.wav", "text": "x"}\n'
                        '{"duration": 2}\n')
    assert read_manifest(manifest, audio_root=audio) == (1.5, 0.25, 2.0)


@pytest.mark.parametrize("line, needle", [
    ("not json", "m.jsonl:2: not a JSON object"),
    ('{"duration": -1}', "m.jsonl:2: duration -1"),
    ('{"text": "hello"}', "m.jsonl:2: no 'duration' and no audio path"),
    ('{"audio": "missing.wav"}', "m.jsonl:2: audio file"),
    ("[1, 2]", "m.jsonl:2: not a JSON object"),
])
def test_a_bad_manifest_line_is_named(tmp_path, line, needle):
    manifest = tmp_path / "m.jsonl"
    manifest.write_text('{"duration": 1.0}\n' + line + "\n")
    with pytest.raises(ManifestError) as info:
        read_manifest(manifest)
    assert needle in str(info.value)
    assert "\n" not in str(info.value)


def test_an_empty_manifest_is_an_error(tmp_path):
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("\n")
    with pytest.raises(ManifestError, match="no utterances"):
        read_manifest(manifest)
