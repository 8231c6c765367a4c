"""Composition kernels: obstacles placed on a background and made to look photographed there.

placement.py         where an obstacle stands on the track and its size in pixels there
composite.py         one composite: placement, occlusion, pasting, labels
harmony_kernels.py   pure colour-matching kernels; harmonizers.py: the backends built from them
shadows.py           contact shadows, and the background's blur, noise and JPEG blocking
weather.py           fog, rain, snow, night and glare (weather_config.py: their settings)
quality.py           a plausibility score per composite, to resample ones that look pasted
"""
