"""The package's rooms and its import rules: data flows one way (CONVENTIONS.md, "The shape of the house").

The rooms follow the pipeline: ``data`` -> ``models`` -> ``extract`` / ``lm`` -> ``metrics`` -> ``stats`` ->
``analysis`` -> ``results`` / ``pages``; ``run`` and ``batch`` orchestrate; at most five loose modules.

- no import cycles, between modules or between rooms;
- ``prh_lib.metrics`` and ``prh_lib.pages.plots`` import nothing else from ``prh_lib``; ``prh_lib.stats`` only
  ``metrics`` and the loose helpers;
- computation never reads presentation or orchestration: nothing in ``analysis``, ``stats`` or ``metrics``
  imports ``pages`` or ``run``;
- analyses reach models only through extraction: nothing in ``prh_lib.analysis`` imports ``prh_lib.models``;
- nothing below the orchestration imports it (``run``, ``batch``), and only ``run`` imports ``pages``.

The graph is read with ``ast`` (``tests/import_graph.py``), late imports inside functions included. Each
rule is also checked against a synthetic graph that breaks it, so the checks can fail.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import import_graph as ig

PACKAGE = Path(__file__).resolve().parent.parent / "prh_lib"

#: The rooms (subpackages) and the loose modules of the package.
ROOMS = {"data", "models", "extract", "lm", "metrics", "stats", "analysis", "results", "pages", "run", "batch"}
LOOSE = {"paths", "validation", "formatting", "parallel", "progress"}
HELPERS = tuple(f"prh_lib.{m}" for m in LOOSE)

KNOWN_CYCLES: list[list[str]] = []

#: Groups below the orchestration: they must not import it.
ORCHESTRATION = ("prh_lib.run", "prh_lib.batch", "prh_lib.__main__")


def _orchestration(m: str) -> bool:
    return any(m == g or m.startswith(g + ".") for g in ORCHESTRATION)


@pytest.fixture(scope="module")
def graph():
    return ig.import_graph(PACKAGE)


def new_cycles(graph) -> list[list[str]]:
    return [c for c in ig.cycles(graph) if c not in KNOWN_CYCLES]


def group_cycles(graph) -> list[list[str]]:
    return ig.cycles(ig.group_graph(graph))


def leaf_violations(graph, leaves=("prh_lib.metrics", "prh_lib.pages.plots")) -> list[tuple[str, str]]:
    """(importer, imported) where a module of a leaf group imports a module of prh_lib outside that group."""
    out = []
    for module, targets in graph.items():
        leaf = next((g for g in leaves if module == g or module.startswith(g + ".")), None)
        if leaf is None:
            continue
        out += [(module, t) for t in sorted(targets) if not (t == leaf or t.startswith(leaf + "."))]
    return out


def forbidden(graph, importers: str, imported: str) -> list[tuple[str, str]]:
    """(importer, imported) where a module under ``importers`` imports a module under ``imported``."""
    def under(m, g):
        return m == g or m.startswith(g + ".")

    return [(m, t) for m, targets in graph.items() if under(m, importers) for t in sorted(targets) if under(t, imported)]


def test_the_graph_is_read(graph):
    # the helper sees the package: a change that broke it would make every rule pass vacuously
    assert "prh_lib.analysis.core" in graph and "prh_lib.extract" in graph["prh_lib.analysis.core"]
    assert "prh_lib.models" in graph["prh_lib.extract"]
    assert ig.edge_count(graph) > 50


def test_the_rooms_and_at_most_five_loose_modules():
    rooms = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    loose = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__", "__main__"}
    assert rooms == ROOMS
    assert loose == LOOSE and len(loose) <= 5


def test_no_import_cycles(graph):
    assert new_cycles(graph) == []


def test_no_cycles_between_groups(graph):
    assert group_cycles(graph) == []


def test_metrics_and_plots_import_nothing_else_from_the_package(graph):
    assert leaf_violations(graph) == []


def test_statistics_read_only_the_metrics_and_the_helpers(graph):
    out = [(m, t) for m, ts in graph.items() if m.startswith("prh_lib.stats") for t in sorted(ts)
           if not (t.startswith("prh_lib.stats") or t.startswith("prh_lib.metrics") or t in HELPERS)]
    assert out == []


def test_computation_never_imports_pages_or_the_runner(graph):
    for room in ("prh_lib.analysis", "prh_lib.stats", "prh_lib.metrics"):
        assert forbidden(graph, room, "prh_lib.pages") == []
        assert forbidden(graph, room, "prh_lib.run") == []


def test_analyses_reach_models_only_through_extraction(graph):
    assert forbidden(graph, "prh_lib.analysis", "prh_lib.models") == []


def test_nothing_imports_the_orchestration_or_the_figures(graph):
    assert [(m, t) for m, ts in graph.items() if not _orchestration(m) for t in ts if _orchestration(t)] == []
    assert [(m, t) for m, ts in graph.items() for t in ts if t == "prh_lib.pages.figures"] == []


# ---------------------------------------------------------------------------------------- the checks can fail


def _write(root: Path, files: dict[str, str]) -> Path:
    pkg = root / "prh_lib"
    for rel, text in files.items():
        path = pkg / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return pkg


def test_checks_catch_synthetic_violations(tmp_path):
    pkg = _write(tmp_path, {
        "__init__.py": "",
        "data.py": "from . import sources\n",
        "sources.py": "def f():\n    from .data import x  # a late import still closes the cycle\n",
        "metrics/__init__.py": "from .knn import mutual_knn\n",
        "metrics/knn.py": "from ..extract import LayerFeatures\n",
        "pages/__init__.py": "",
        "pages/plots.py": "import prh_lib.analysis.core\n",
        "analysis/layerwise.py": "from ..pages import claims\n",
        "extract.py": "from . import models\n",
        "models/__init__.py": "",
        "analysis/__init__.py": "",
        "analysis/core.py": "from ..models.spec import parse_model_name\nfrom .. import extract\n",
    })
    graph = ig.import_graph(pkg)
    assert graph["prh_lib.metrics"] == {"prh_lib.metrics.knn"}
    assert graph["prh_lib.analysis.core"] == {"prh_lib.models", "prh_lib.extract"}
    assert new_cycles(graph) == [["prh_lib.data", "prh_lib.sources"]]
    assert ["prh_lib.data", "prh_lib.sources"] in group_cycles(graph)
    assert leaf_violations(graph) == [("prh_lib.metrics.knn", "prh_lib.extract"), ("prh_lib.pages.plots", "prh_lib.analysis.core")]
    assert forbidden(graph, "prh_lib.analysis", "prh_lib.models") == [("prh_lib.analysis.core", "prh_lib.models")]


def test_cycle_through_three_modules_is_found(tmp_path):
    pkg = _write(tmp_path, {"__init__.py": "", "a.py": "from . import b\n", "b.py": "from .c import x\n",
                            "c.py": "import prh_lib.a\n", "d.py": "from . import a\n"})
    assert ig.cycles(ig.import_graph(pkg)) == [["prh_lib.a", "prh_lib.b", "prh_lib.c"]]
