"""scale: the paper's experiments at scale (PyTorch; CUDA when present, CPU otherwise).

``scale`` imports ``mini`` (the head grammar, the objectives' definitions, the array-API
measurements) and never the other way round.
"""
