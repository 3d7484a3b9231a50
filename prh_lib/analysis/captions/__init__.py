"""Section 3.2 / App. F: caption detail (:mod:`.study`), image-level intervals (:mod:`.intervals`).
"""
