"""A build from a COCO-format folder with polygons and an RGBA folder: exact masks, provenance in
manifest/gallery.parquet, one object per cutout, dogs pasted at dog heights, the card's height table."""

from pathlib import Path

import cv2
import numpy as np
import pyarrow.parquet as pq
from galleries import coco_dogs

from synrail.config import load_config
from synrail.export.validate import validate_dataset
from synrail.records import GalleryRecord
from synrail.sources.sizes import CATEGORY_HEIGHTS_M
from synrail.stages.export import read_build_records
from synrail.stages.local import build_in_process
from synrail.storage.store import Store

ROOT = Path(__file__).resolve().parents[2]
def two_cars(root: Path) -> Path:
    """One RGBA file holding two cars side by side (and a speck of dust)."""
    root.mkdir(parents=True)
    rgba = np.zeros((90, 260, 4), np.uint8)
    cv2.rectangle(rgba, (10, 20), (110, 70), (30, 60, 160, 255), -1)
    cv2.rectangle(rgba, (140, 25), (250, 75), (160, 60, 30, 255), -1)
    rgba[5:7, 200:202] = 255
    cv2.imwrite(str(root / "two_cars.png"), rgba)
    return root


def test_a_coco_and_rgba_gallery_build_keeps_provenance_one_object_and_real_heights(tmp_path):
    dogs, cars = coco_dogs(tmp_path / "coco"), two_cars(tmp_path / "cars")
    cfg = load_config(ROOT / "configs/tiny.yaml", {"num_images": 8, "segment.min_score": 0.0, "gallery.sources": [
        {"type": "coco", "name": "coco", "annotations": str(dogs / "instances.json"), "images": str(dogs / "images"),
         "class_map": {"dog": "animal"}},
        {"type": "rgba", "root": str(cars), "class_name": "vehicle", "height_m": [1.3, 1.6]},
        {"type": "procedural", "classes": ["person", "rock", "unseen_obstacle"]}],
        "compose.size_jitter": 0.5, "compose.obstacles_per_image": [3, 4]})
    out = tmp_path / "out"
    build_in_process(cfg, str(out))
    assert validate_dataset(out) == []

    # provenance round-trips: every manifest row is the record the build kept
    rows = pq.read_table(out / "manifest/gallery.parquet").to_pylist()
    records = read_build_records(Store(str(out))).gallery
    assert [GalleryRecord.model_validate(row) for row in rows] == records
    by_source = {}
    for r in records:
        by_source.setdefault(r.source.split("/")[0], []).append(r)
    assert {r.mask_source for r in by_source["coco:dog"]} == {"annotation", "grabcut"}
    annotated = next(r for r in by_source["coco:dog"] if r.mask_source == "annotation")
    assert annotated.source_image.endswith("images/1.jpg") and annotated.mask_score == 1.0
    assert annotated.source_box == (60.0, 70.0, 175.0, 150.0)  # polygon vertices are pixel edges
    assert all(r.mask_source == "render" and r.source_image == "" and r.source_box is None
               for r in by_source["procedural"])
    # one object per cutout: the two cars are two cutouts, cut from their own boxes; the speck is gone
    cars_cut = sorted(by_source["rgba"], key=lambda r: r.source_box)
    assert [r.mask_source for r in cars_cut] == ["rgba", "rgba"]
    assert [r.source_box for r in cars_cut] == [(10.0, 20.0, 111.0, 71.0), (140.0, 25.0, 251.0, 76.0)]

    # dogs are pasted at dog heights, whatever the size jitter (0.5 here)
    low, high = CATEGORY_HEIGHTS_M["dog"]
    assert all(low <= r.height_m <= high and r.height_m_range == (low, high) for r in by_source["coco:dog"])
    annotations = pq.read_table(out / "manifest/annotations.parquet").to_pylist()
    dogs_pasted = [a["height_m"] for a in annotations if a["source"] == "coco:dog"]
    assert dogs_pasted and all(low <= h <= high for h in dogs_pasted)
    card = (out / "dataset_card.md").read_text()
    assert "## Pasted heights per source category" in card and "| animal | coco:dog |" in card
    # the card's gallery section and contact sheets: real cutouts only, with mask source and score
    assert "## Gallery cutouts" in card and "| animal | annotation | 1 | 1.00 | 1.00 |" in card
    assert "| vehicle | rgba | 2 |" in card and "| person |" not in card.split("## Gallery cutouts")[1].split("##")[0]
    for class_name in ("animal", "vehicle"):
        assert f"![card/gallery_{class_name}.png](card/gallery_{class_name}.png)" in card
        assert cv2.imread(str(out / f"card/gallery_{class_name}.png")) is not None
    assert not (out / "card/gallery_person.png").exists()  # drawn cutouts have no sheet
