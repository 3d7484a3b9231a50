"""Section 3.2: alignment against language-model capability (:mod:`.study`), image-level intervals (:mod:`.intervals`).
"""
