"""What a build is made from, checked before composing: backgrounds per split, cutouts per class,
and the report of every input that was left out and why."""

from __future__ import annotations

from collections.abc import Sequence

from synrail.config import BuildConfig
from synrail.records import BackgroundRecord, GalleryRecord, GallerySourceResult, InputReport, VideoBackgrounds


class InputError(ValueError):
    """The inputs cannot make this dataset (a split without backgrounds, a class without cutouts)."""


def input_report(videos: Sequence[VideoBackgrounds], sources: Sequence[GallerySourceResult]) -> InputReport:
    """Everything the video and gallery stages left out, gathered into one report."""
    return InputReport(
        videos=[v.video for v in videos],
        quarantine=[v.quarantine for v in videos if v.quarantine is not None],
        unused_frames=[f for v in videos for f in v.unused],
        skipped_obstacles=[s for r in sources for s in r.skipped],
        notes=sorted({note for v in videos for note in v.notes}),
        cameras=[v.camera for v in videos if v.camera is not None])


def check_inputs(cfg: BuildConfig, backgrounds: Sequence[BackgroundRecord], gallery: Sequence[GalleryRecord],
                 report: InputReport) -> None:
    """Check that every split in use has a background and every class a cutout.

    Raises:
        InputError: naming what is missing and how many inputs were left out.
    """
    for split, share in cfg.splits.fractions().items():
        if share > 0 and not any(b.split == split for b in backgrounds):
            raise InputError(f"no usable background for split {split!r} ({len(backgrounds)} in all; "
                             f"{len(report.quarantine)} videos quarantined, {len(report.unused_frames)} frames "
                             "unused): add videos or loosen backgrounds.video.sampling.filters")
    missing = [c for c in cfg.classes if not any(g.class_name == c for g in gallery)]
    if missing:
        raise InputError(f"no cutout for class(es) {missing}: add a gallery source for them or drop them from "
                         f"classes ({len(report.skipped_obstacles)} candidates were skipped)")
