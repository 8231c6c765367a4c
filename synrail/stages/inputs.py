"""What a build is made from, checked before composing: backgrounds per split, cutouts per class,
and the report of every input that was left out and why."""

from __future__ import annotations

from collections.abc import Sequence

from synrail.config import BuildConfig
from synrail.errors import InputError
from synrail.records import (
    BackgroundRecord,
    GalleryRecord,
    GallerySourceResult,
    InputReport,
    QuarantineRecord,
    VideoBackgrounds,
)
from synrail.sources.gallery_sources import unsafe_textures

__all__ = ["InputError", "InputReport", "check_inputs", "input_report"]


def texture_quarantine(cfg: BuildConfig) -> list[QuarantineRecord]:
    """The DTD texture files (``gallery.dtd_root``) that cannot be decoded safely, from their headers;
    the texture loader passes over them. Empty without DTD or when random textures are off."""
    if not cfg.gallery.dtd_root or not cfg.gallery.random_texture or "unseen_obstacle" not in cfg.classes:
        return []
    skipped = unsafe_textures(cfg.gallery.dtd_root, cfg.inputs.max_image_pixels)
    return [QuarantineRecord(url=s.url, reason=s.reason) for s in skipped if s.url is not None]


def input_report(videos: Sequence[VideoBackgrounds], sources: Sequence[GallerySourceResult],
                 textures: Sequence[QuarantineRecord] = ()) -> InputReport:
    """Everything left out, and why: quarantined files (videos, images, masks, ``textures``), unused
    frames, skipped obstacle candidates.

    Args:
        videos: what the video stage made of each video or image sequence.
        sources: what the gallery stage made of each real gallery source.
        textures: the DTD textures that cannot be decoded safely.

    Returns:
        The build's input report, with the cameras solved for the videos.
    """
    return InputReport(
        videos=[v.video for v in videos],
        quarantine=[*(v.quarantine for v in videos if v.quarantine is not None),
                    *(q for r in sources for q in r.quarantine), *textures],
        unused_frames=[f for v in videos for f in v.unused],
        skipped_obstacles=[s for r in sources for s in r.skipped],
        notes=sorted({note for v in videos for note in v.notes}),
        cameras=[v.camera for v in videos if v.camera is not None])


def _empty_split_advice(cfg: BuildConfig, split: str, backgrounds: Sequence[BackgroundRecord]) -> str:
    """What to do about a split footage left empty: without any usable frame, more footage or looser
    filters; with usable frames in other splits, the frames were too few for time blocks."""
    source = cfg.backgrounds.source
    if backgrounds and source in ("video", "frames"):
        sequences = "videos" if source == "video" else "frame sequences"
        return (f"with fewer {sequences} than splits in use each is cut into time blocks (train, val, test), "
                f"and its {len(backgrounds)} usable frames left {split!r} none: add footage, or set "
                f"splits.{split} to 0")
    return f"add footage or loosen backgrounds.{source}.sampling.filters"


def check_inputs(cfg: BuildConfig, backgrounds: Sequence[BackgroundRecord], gallery: Sequence[GalleryRecord],
                 report: InputReport) -> None:
    """Check that every split in use has a background and every class a cutout.

    Args:
        cfg: the build config (``splits``, ``classes``).
        backgrounds: every background record of the build.
        gallery: every cutout record of the build.
        report: what was left out, quoted in the error.

    Raises:
        InputError: naming what is missing and how many inputs were left out.
    """
    for split, share in cfg.splits.fractions().items():
        if share > 0 and not any(b.split == split for b in backgrounds):
            raise InputError(f"no usable background for split {split!r} ({len(backgrounds)} in all; "
                             f"{len(report.quarantine)} files quarantined, {len(report.unused_frames)} frames "
                             f"unused): {_empty_split_advice(cfg, split, backgrounds)}")
    missing = [c for c in cfg.classes if not any(g.class_name == c for g in gallery)]
    if missing:
        raise InputError(f"no cutout for class(es) {missing}: add a gallery source for them or drop them from "
                         f"classes ({len(report.skipped_obstacles)} candidates were skipped)")
