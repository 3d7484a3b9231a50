"""prh_lib: alignment metrics, feature extraction and analyses for the Platonic Representation Hypothesis.

Data flows one way: ``data`` -> ``models`` -> ``extract`` (``features``) / ``lm`` -> ``metrics`` -> ``analysis``
-> ``plots`` / ``figures``; ``runner``, ``batch`` and ``profiles`` orchestrate. ``paths`` derives every path
and names every cache file. ``tests/test_import_rules.py`` enforces the direction.
Notebooks in ``notebooks/`` hold parameters, calls into this package and prose.
"""

__version__ = "0.1.0"
