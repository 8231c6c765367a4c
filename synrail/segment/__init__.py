"""Mask extractors behind one interface (base.py): GrabCut (no weights, the default) and SAM
(a user-given checkpoint), chosen by loader.py, with masks cached per image and prompt (cache.py).
"""
