"""Rail kernels: the ego track and the camera that sees it.

detect.py       classical ego-track finding on a cab frame
geometry.py     pinhole camera above a ground plane, and the track on it
estimate.py     camera geometry from a detected track; refinement of a coarse track mask
camera.py       a video's lens, gauge, ignore regions, and the frame as the detector sees it
sleepers.py     focal length from the sleeper spacing
sequence.py     one camera solved per shot of a sequence; calibration.py: its robust combination
shots.py        where a video or a folder of frames cuts from one shot to another
"""
