"""The card's contact sheets of the real gallery: cutouts as a user inspects them, with mask source and score."""

import cv2
import numpy as np
import pytest

from synrail.export.card import (
    SHEET_CAPTION_PX,
    SHEET_COLUMNS,
    SHEET_GAP_PX,
    SHEET_TILE_PX,
    dataset_card,
    gallery_contact_sheets,
    gallery_section,
    sheet_cutouts,
)
from synrail.records import GalleryRecord


def _record(k: int, class_name: str, score: float, mask_source: str = "grabcut") -> GalleryRecord:
    return GalleryRecord(cutout_id=f"{class_name}-{k:03d}", class_name=class_name, source="coco:dog",
                         path=f"gallery/{class_name}/{k}.png", sha256="0" * 64, height_m=0.6, width_px=40,
                         height_px=30, mask_px=900, mask_score=score, source_image="/data/1.jpg",
                         source_box=(0.0, 0.0, 40.0, 30.0), mask_source=mask_source)


def _png(colour: tuple[int, int, int]) -> bytes:
    rgba = np.zeros((30, 40, 4), np.uint8)
    cv2.circle(rgba, (20, 15), 12, (*colour, 255), -1)
    return cv2.imencode(".png", rgba)[1].tobytes()


def test_sheet_cutouts_spread_over_scores_lowest_and_highest_included():
    records = [_record(k, "animal", score=k / 100) for k in range(100)]
    shown = sheet_cutouts(records, count=5)
    assert [r.mask_score for r in shown] == [0.0, 0.25, 0.5, 0.74, 0.99]  # the worst kept one is shown too
    assert sheet_cutouts(records[:3], count=5) == records[:3]


def test_contact_sheets_per_class_of_real_cutouts_only():
    gallery = [*(_record(k, "animal", 0.4 + k / 20) for k in range(8)), _record(20, "vehicle", 1.0, "rgba"),
               _record(30, "person", 1.0, "render")]
    files = {r.path: _png((40 + 20 * k, 90, 160)) for k, r in enumerate(gallery)}
    sheets = gallery_contact_sheets(gallery, files.__getitem__, ["person", "animal", "vehicle"])
    assert list(sheets) == ["card/gallery_animal.png", "card/gallery_vehicle.png"]  # drawn persons: none
    animal = cv2.imdecode(np.frombuffer(sheets["card/gallery_animal.png"], np.uint8), cv2.IMREAD_COLOR)
    tile_h, tile_w = SHEET_TILE_PX + SHEET_CAPTION_PX + SHEET_GAP_PX, SHEET_TILE_PX + SHEET_GAP_PX
    assert animal.shape == (2 * tile_h, SHEET_COLUMNS * tile_w, 3)  # 8 cutouts: two rows of six
    # the first tile shows the lowest-scoring cutout: its colour is in the middle of the tile
    assert tuple(animal[SHEET_TILE_PX // 2, SHEET_TILE_PX // 2]) == pytest.approx((40, 90, 160), abs=2)
    assert (animal[SHEET_TILE_PX:tile_h, :SHEET_TILE_PX] < 128).any()  # a caption is written under it
    assert (animal[:SHEET_TILE_PX, SHEET_TILE_PX:tile_w] == 255).all()  # white between tiles
    vehicle = cv2.imdecode(np.frombuffer(sheets["card/gallery_vehicle.png"], np.uint8), cv2.IMREAD_COLOR)
    assert vehicle.shape == (tile_h, tile_w, 3)

    section = gallery_section(gallery, list(sheets))
    assert "| animal | grabcut | 8 | 0.40 | 0.60 |" in section and "| vehicle | rgba | 1 | 1.00 | 1.00 |" in section
    assert "person" not in section
    assert "![card/gallery_animal.png](card/gallery_animal.png)" in section
    assert gallery_section([_record(1, "person", 1.0, "render")], []) is None


def test_unreadable_cutout_names_its_path():
    with pytest.raises(ValueError, match="gallery/animal/1.png"):
        gallery_contact_sheets([_record(1, "animal", 0.9)], lambda path: b"not a png", ["animal"])


def test_card_without_real_cutouts_has_no_gallery_section():
    config = {"name": "t", "seed": 0, "image": {"width": 64, "height": 48}, "backgrounds": {"source": "procedural"},
              "gallery": {"sources": [{"type": "procedural"}]}}
    card = dataset_card(config, [], [], [], ["person"], ["train"], None, [_record(1, "person", 1.0, "render")])
    assert "## Gallery cutouts" not in card
