"""Where backgrounds and obstacles come from.

procedural_backgrounds.py, procedural_obstacles.py   rendered scenes and cutouts (no inputs needed)
video.py, video_backgrounds.py, frame_filters.py      cab footage: listing, frame sampling, filters
gallery_sources.py, cutouts.py, diffusion.py          real and generated obstacle photos, cut out
image_safety.py                                       size and header checks before decoding
"""
