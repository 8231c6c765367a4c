"""Each stage declares the config sections it reads (``CONFIG_SECTIONS``), and its cache key holds
only those. A change outside the declaration must give identical records and the same key (a cache
hit); a change inside must give another key (a miss). If a stage reads a section it does not
declare, the first half fails: a build would otherwise silently reuse stale results."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from media import cab_frames, write_video

from synrail.config import BuildConfig, load_config, set_dotted
from synrail.sources.video import list_videos
from synrail.stages import backgrounds, compose, export, gallery, videos
from synrail.storage.store import Store
from tasks.build import STAGE_SECTIONS, StagePolicy

ROOT = Path(__file__).resolve().parents[3]

# One change per config section, each of which changes some stage's output.
SECTION_CHANGES: dict[str, dict[str, Any]] = {
    "name": {"name": "another-name"},
    "seed": {"seed": 5},
    "num_images": {"num_images": 6},
    "classes": {"classes": ["rock", "person", "unseen_obstacle"]},
    "image": {"image.width": 288},
    "splits": {"splits.train": 0.6, "splits.val": 0.2, "splits.test": 0.2},
    "backgrounds": {"backgrounds.max_offset_m": 0.3},
    "gallery": {"gallery.render_height_px": 96},
    "segment": {"segment.min_score": 0.77},
    "compose": {"compose.distance_m": [10, 40]},
    "weather": {"weather.mix": {"none": 0.5, "rain": 0.5}},
    "quality": {"quality": {"threshold": 0.9, "max_resamples": 1}},
    "ingest": {"ingest.images_per_video": 7},
    "inputs": {"inputs.max_image_pixels": 50_000_000},
    "sequences": {"sequences.clips": 2},
}


def base_config(**extra: Any) -> BuildConfig:
    return load_config(ROOT / "configs" / "tiny.yaml", {"num_images": 4, "backgrounds.count": 3,
                                                       "gallery.per_class": 1, **extra})


def changed(cfg: BuildConfig, section: str) -> BuildConfig:
    data = cfg.content_dict()
    for key, value in SECTION_CHANGES[section].items():
        set_dotted(data, key, value)
    return BuildConfig.model_validate(data)


def key(stage: str, cfg: BuildConfig) -> str:
    return StagePolicy(stage=stage).compute_key(None, {"cfg": cfg}, {})


def test_every_config_section_has_a_change_and_every_stage_a_declaration():
    assert set(SECTION_CHANGES) == set(BuildConfig.model_fields) - {"execution"}
    for stage, sections in STAGE_SECTIONS.items():
        assert sections is None or set(sections) <= set(SECTION_CHANGES), stage


@pytest.mark.parametrize("stage", sorted(STAGE_SECTIONS))
def test_a_change_inside_the_declaration_misses_the_cache(stage):
    cfg = base_config()
    declared = STAGE_SECTIONS[stage] or tuple(SECTION_CHANGES)
    for section in declared:
        assert key(stage, changed(cfg, section)) != key(stage, cfg), section


def outside(stage: str) -> list[str]:
    return [s for s in SECTION_CHANGES if s not in (STAGE_SECTIONS[stage] or SECTION_CHANGES)]


def assert_outside_changes_are_invisible(stage: str, run: Any, cfg: BuildConfig) -> None:
    reference = run(cfg)
    for section in outside(stage):
        other = changed(cfg, section)
        assert key(stage, other) == key(stage, cfg), section
        assert run(other) == reference, f"stage {stage!r} reads {section!r} but does not declare it"


def test_background_stage_reads_only_what_it_declares(tmp_path):
    cache = Store(str(tmp_path / "cache"))
    assert_outside_changes_are_invisible(
        "background", lambda cfg: [backgrounds.prepare_background(cfg, i, cache) for i in range(3)], base_config())


def test_procedural_gallery_stage_reads_only_what_it_declares(tmp_path):
    cache = Store(str(tmp_path / "cache"))
    assert_outside_changes_are_invisible(
        "obstacles", lambda cfg: gallery.prepare_gallery_class(cfg, "rock", cache), base_config())


def test_video_stage_reads_only_what_it_declares(tmp_path):
    folder = tmp_path / "videos"
    folder.mkdir()
    write_video(folder / "line.avi", cab_frames(3, 3))
    (video,) = list_videos(str(folder))
    cache = Store(str(tmp_path / "cache"))
    cfg = base_config(**{"backgrounds.source": "video", "backgrounds.video.url": str(folder)})
    assert_outside_changes_are_invisible(
        "video", lambda cfg: videos.prepare_video_backgrounds(cfg, video, "train", cache), cfg)


def test_compose_stage_reads_only_what_it_declares(tmp_path):
    cfg = base_config()
    cache = Store(str(tmp_path / "cache"))
    backgrounds_ = [backgrounds.prepare_background(cfg, i, cache) for i in range(3)]
    gallery_ = gallery.prepare_gallery(cfg, cache)
    runs = iter(range(1000))

    def run(cfg: BuildConfig) -> Any:
        out = Store(str(tmp_path / f"out{next(runs)}"))
        return compose.compose_chunk(cfg, 0, 4, backgrounds_, gallery_, cache, out)
    assert_outside_changes_are_invisible("compose", run, cfg)


def test_export_declares_the_whole_config():
    # the card prints the whole configuration, so no section may be left out of its key
    assert export.CONFIG_SECTIONS is None


def test_real_clips_stage_reads_only_what_it_declares(tmp_path):
    from media import approach_frames, write_mp4

    from synrail.stages import real_clips

    folder = tmp_path / "videos"
    folder.mkdir()
    frames, _ = approach_frames(2, 6, 50.0, 10.0)
    write_mp4(folder / "run.mp4", frames, 10.0)
    (tmp_path / "meta.csv").write_text("video,speed_kmh\nrun.mp4,50\n")
    cfg = base_config(**{"backgrounds.source": "video", "backgrounds.video": {
        "url": str(folder), "hfov_deg": 60, "sampling": {"stride": 1, "sidecar": str(tmp_path / "meta.csv")}},
        "image.width": 640, "image.height": 360, "sequences.clips": 1, "sequences.frames_per_clip": 4,
        "sequences.first_distance_m": [12, 20]})
    cache = Store(str(tmp_path / "cache"))
    gallery_ = gallery.prepare_gallery(cfg, cache)
    (video,) = list_videos(str(folder))
    runs = iter(range(1000))

    def run(cfg: BuildConfig) -> Any:
        out = Store(str(tmp_path / f"out{next(runs)}"))
        return real_clips.compose_video_clips(cfg, video, 0, [(0, "train")], gallery_, cache, out)
    assert run(cfg).clips
    assert_outside_changes_are_invisible("real-clips", run, cfg)
