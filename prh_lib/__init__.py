"""prh_lib: alignment metrics, feature extraction and analyses for the Platonic Representation Hypothesis.

Data flows one way: ``data`` -> ``models``/``zoo`` -> ``extract`` -> ``metrics`` -> ``analysis`` -> ``plots``.
Notebooks in ``notebooks/`` hold parameters, calls into this package and prose.
"""

__version__ = "0.1.0"
