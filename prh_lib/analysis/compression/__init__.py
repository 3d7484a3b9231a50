"""Section 3.1 / App. C: PCA compression of layer pairs (:mod:`.study`; the PCA itself in :mod:`.pca`).
"""
