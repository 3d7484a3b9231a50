"""The concept chapter: ImageNet concepts and prompts (:mod:`.prompts`), measures (:mod:`.study`), HSIC and probes (:mod:`.subspaces`), WordNet hierarchy (:mod:`.hierarchy`), controllability (:mod:`.controllability`).
"""
