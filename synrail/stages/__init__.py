"""The build's stages, one module each, wrapped one to one by ``tasks/build.py``:

splits (who goes where) -> backgrounds (procedural) / videos (cab footage) -> gallery (obstacle
cutouts) -> inputs (the report of what was left out) -> compose (images, labels, chunk tables)
-> export (COCO, manifests, card) -> versions (versioned roots, incremental builds); local runs
them all as one plain loop. Each module declares ``CONFIG_SECTIONS``: the parts of the config its
results depend on, which the task layer turns into the cache key.
"""
