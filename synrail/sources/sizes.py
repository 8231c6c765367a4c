"""Real heights per kind of object, by the category names COCO, Objects365 and LVIS use.

One range per class (``animal: 0.5-1.6 m``) pastes a dog 1.6 m tall and an elephant 0.5 m; a dataset's
own category says which animal or vehicle it is. Heights are the standing silhouette's (head up for
animals, roof for vehicles), in metres. A source's config may override any entry by category name.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType

HeightRange = tuple[float, float]

# normalised category name -> (low, high) in metres
CATEGORY_HEIGHTS_M: Mapping[str, HeightRange] = MappingProxyType({
    # people
    "person": (1.5, 1.95), "pedestrian": (1.5, 1.95), "man": (1.6, 1.95), "woman": (1.5, 1.85),
    "boy": (1.0, 1.7), "girl": (1.0, 1.65), "child": (0.9, 1.5),
    # animals
    "dog": (0.35, 0.85), "cat": (0.2, 0.35), "sheep": (0.7, 1.2), "lamb": (0.5, 0.8), "goat": (0.6, 1.1),
    "cow": (1.2, 1.8), "cattle": (1.2, 1.8), "calf": (0.8, 1.3), "bull": (1.3, 1.9), "yak": (1.3, 2.0),
    "horse": (1.4, 2.2), "pony": (1.0, 1.5), "donkey": (1.0, 1.5), "mule": (1.2, 1.8), "camel": (1.8, 2.3),
    "elephant": (2.2, 3.6), "bear": (0.9, 1.6), "brown bear": (0.9, 1.6), "polar bear": (1.0, 1.6),
    "deer": (1.0, 1.8), "antelope": (0.9, 1.5), "zebra": (1.3, 1.9), "giraffe": (4.0, 5.5), "pig": (0.6, 1.0),
    "fox": (0.35, 0.55), "wolf": (0.65, 0.95), "moose": (1.8, 2.4), "rabbit": (0.2, 0.35),
    # vehicles
    "car": (1.35, 1.8), "suv": (1.6, 2.0), "van": (1.8, 2.6), "minivan": (1.6, 1.9), "pickup truck": (1.7, 2.0),
    "jeep": (1.7, 2.0), "taxi": (1.4, 1.7), "sports car": (1.1, 1.4), "police car": (1.4, 1.9),
    "truck": (2.5, 4.0), "heavy truck": (3.0, 4.0), "fire truck": (2.8, 3.5), "ambulance": (2.4, 2.9),
    "bus": (2.9, 4.4), "school bus": (3.0, 3.3), "minibus": (2.3, 2.8), "tractor": (2.0, 3.0),
    "motorcycle": (1.0, 1.45), "motorbike": (1.0, 1.45), "scooter": (1.0, 1.3), "motor scooter": (1.0, 1.3),
    "bicycle": (0.9, 1.2), "tricycle": (0.9, 1.3), "moped": (1.0, 1.3), "golf cart": (1.7, 1.9),
    "cart": (0.8, 1.3), "wheelchair": (0.9, 1.1), "stroller": (0.9, 1.1), "baby buggy": (0.9, 1.1),
})

# the least mask-box height / width of a kind that must stand to be what its range says
MIN_ASPECT: Mapping[str, float] = MappingProxyType({
    "person": 1.6, "pedestrian": 1.6, "man": 1.6, "woman": 1.6, "boy": 1.6, "girl": 1.6, "child": 1.4,
})

_PARENTHESIS = re.compile(r"_?\(.*?\)")


def normalise_category(name: str) -> str:
    """A category name in the table's spelling: LVIS's ``car_(automobile)`` and Objects365's ``Pickup Truck``
    both become lower-case words (``car``, ``pickup truck``).

    Args:
        name: the dataset's category name.

    Returns:
        The normalised name.
    """
    text = _PARENTHESIS.sub("", name).replace("_", " ").replace("-", " ").lower()
    return re.sub(r"\s+", " ", text).strip()


def override_range(category: str, overrides: Mapping[str, HeightRange] | None) -> HeightRange | None:
    """A configured height range of a category, by the dataset's name or its normalised one; None if unset.

    Args:
        category: the dataset's category name.
        overrides: category name -> (low, high) in metres, from the config.

    Returns:
        (low, high) in metres, or None.

    Raises:
        ValueError: an override that is not 0 < low <= high.
    """
    key = normalise_category(category)
    for name, value in (overrides or {}).items():
        if name == category or normalise_category(name) == key:
            low, high = float(value[0]), float(value[1])
            if not 0 < low <= high:
                raise ValueError(f"height range of category {category!r} must be 0 < low <= high, got {value}")
            return low, high
    return None


def category_height_range(category: str, overrides: Mapping[str, HeightRange] | None = None) -> HeightRange | None:
    """The real height range of a dataset category: a configured override, else the built-in table;
    None when neither knows it.

    Args:
        category: the dataset's category name.
        overrides: category name -> (low, high) in metres, from the config.

    Returns:
        (low, high) in metres, or None.
    """
    return override_range(category, overrides) or CATEGORY_HEIGHTS_M.get(normalise_category(category))


def min_aspect(category: str) -> float | None:
    """The least mask-box height / width an object of this category has standing (a person), or None.

    Args:
        category: the dataset's category name.

    Returns:
        The ratio, or None when the category has no such bound.
    """
    return MIN_ASPECT.get(normalise_category(category))
