"""The displacement-geometry chapter (arXiv 2609.24209): views and measures (:mod:`.study`), the study over draws (:mod:`.draws`), held-out best pairs (:mod:`.heldout`), the reference procedure (:mod:`.reference`, :mod:`.procedures`) and consensus subspaces (:mod:`.consensus`).
"""
