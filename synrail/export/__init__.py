"""Dataset formats only (they import no stage): COCO documents and RLE masks (coco.py), YOLO labels
(yolo.py), the dataset card and its figures (card.py, plots.py), and the contract check (validate.py).
"""
