"""App. G: mutual k-NN against k and N (:mod:`.study`), and its image-level intervals (:mod:`.intervals`).
"""
