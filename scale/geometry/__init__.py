"""Orbit geometry and probes: what the head does to augmentation orbits (E4, E6) and to linear readouts.

    measure   E4's orbit geometry of z versus h with its controls, and the end-of-run measurement
    orbits    E6's augmentation orbits (rotation, hue, saturation, blur), generated in batches
    probes    linear probes on frozen features, one protocol per question
    verdict   compressor / expander / inconclusive, with its interval
"""
