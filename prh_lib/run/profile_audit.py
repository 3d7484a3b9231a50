"""The paper profile against the paper: what Herbst et al. did, what ``--params paper`` does, and why they differ.

Every row is computed from :data:`prh_lib.run.profiles.PROFILES` ``["paper"]``, :mod:`prh_lib.data.paper` and the committed
capability table, against the paper's protocol as stated in its Section 2, Section 3 and appendices (quoted in
:data:`PAPER`). The front page shows the table (:func:`audit_markdown`), so a change to the profile that departs
from the paper shows up there, and ``tests/test_profile_audit.py`` pins the rows that must agree.

References
----------
Herbst, Roschmann, Bouniot, Akata, arXiv 2611.12869, Sections 2-3, Appendices D-E.
"""

from __future__ import annotations

import pandas as pd

from prh_lib.data import benchmarks

#: The paper's protocol, setting by setting (arXiv 2611.12869)
PAPER = {
    "vision models": "DINOv2 ViT-L, DINOv3 ViT-L, MAE ViT-L (Sec. 2)",
    "language models": "21 generative LMs (BLOOMZ, LLaMA, Llama 3, Mistral, Qwen, Gemma, DeepSeek distills) "
                       "+ Qwen3-Embedding-8B and NV-Embed-v2 (Sec. 2)",
    "aligned VLMs": "CLIP ViT-L/14, SigLIP 2 So400M, Qwen3-VL-Embedding-8B, joint-space projection (Sec. 3.3)",
    "same-modality pairs": "DINOv2 × DINOv3; NV-Embed-v2 × Qwen3-Embedding-8B (Sec. 3.3)",
    "datasets": "WIT (Huh et al.'s 1,024), CC3M with DreamLIP captions, COCO, DOCCI (Sec. 2)",
    "N, k": "N = 1024 pairs, k = 10 (Sec. 2)",
    "draws": "5 independent samples of 1,024 (WIT: one); Figure 5 and Table 1: 3 (Sec. 3.2, 3.3)",
    "pooling": "CLS token for vision, mean over tokens for language, L2-normalised (Sec. 2)",
    "layers": "every layer pair (heatmaps, Fig. 1); the maximum over layer pairs elsewhere",
    "capability": "lm-eval harness: MMLU 5-shot, ARC-Challenge 4-shot, GSM8K 5-shot exact match (Sec. 3.2)",
    "random init": "randomly initialised twins of the unimodal models (Sec. 3.3)",
}


def _short(ids):
    return ", ".join(i.split("/")[-1] for i in ids)


def audit_rows() -> list[dict]:
    """One row per setting: ``setting``, ``paper``, ``profile``, ``agrees`` (bool) and ``difference`` (why)."""
    from prh_lib.run.profiles import get_profile

    p = get_profile("paper")
    rows = []

    def add(setting, profile, agrees, why=""):
        rows.append({"setting": setting, "paper": PAPER[setting], "profile": profile, "agrees": bool(agrees),
                     "difference": "—" if agrees else why})

    add("vision models", _short(p["vision_models"]), len(p["vision_models"]) == 3)
    n_gen, n_emb = len(p["language_models"]), len(p["embedding_models"])
    add("language models", f"{n_gen} generative + {n_emb} embedding ({_short(p['embedding_models'])})",
        n_gen == 21 and n_emb == 2)
    aligned = list(p.get("aligned_models", []))
    add("aligned VLMs", _short(aligned), len(aligned) == 3,
        "Qwen3-VL-Embedding-8B is a registered model (prh_lib.data.paper, prh_lib.models.vlm) but not in the profile's "
        "aligned_models: the regimes page loads CLIP and SigLIP towers only, so 3.3/qwen3-vl stays untested")
    same = [tuple(x) for x in p["same_modality_pairs"]]
    want = {("facebook/dinov2-large", "facebook/dinov3-vitl16-pretrain-lvd1689m"),
            ("nvidia/NV-Embed-v2", "Qwen/Qwen3-Embedding-8B")}
    add("same-modality pairs", "; ".join(" × ".join(_short([a, b]).split(", ")) for a, b in same), set(same) == want)
    names = [d["name"] for d in p["datasets"]]
    add("datasets", ", ".join(names), len(names) == 4)
    ns = sorted({d["n_pairs"] for d in p["datasets"]})
    add("N, k", f"N = {', '.join(map(str, ns))}, k = {p['k']}", ns == [1024] and p["k"] == 10)
    reps = {d["name"]: d["repetitions"] for d in p["datasets"]}
    add("draws", ", ".join(f"{n} {r}" for n, r in reps.items()) + " (every chapter)", False,
        "Figure 5 and Table 1 use 3 draws in the paper; the profile gives every chapter 5 (a narrower spread, "
        "not a different estimate)")
    add("pooling", "CLS token (vision), mean over tokens (language), L2-normalised (prh_lib.models.hf)", True)
    add("layers", "every layer pair scored; maxima over layer pairs (prh_lib.analysis)", True)
    gen = list(p["language_models"])
    sub = benchmarks.load_capability_table().reindex(gen)
    have = {b: int(sub[b].notna().sum()) for b in benchmarks.BENCHMARKS if b in sub}
    shots = sorted({int(s) for s in sub.get("arc_shots", pd.Series(dtype=float)).dropna()})
    text = (f"published values: MMLU {have.get('mmlu_5shot', 0)}/{len(gen)}, ARC {have.get('arc_challenge', 0)}"
            f"/{len(gen)} (at {', '.join(map(str, shots)) or '?'} shots), GSM8K {have.get('gsm8k_5shot', 0)}/"
            f"{len(gen)}")
    complete = all(v == len(gen) for v in have.values()) and shots == [4]
    add("capability", text, complete,
        "the committed table holds published scores only (missing values stay missing, ARC mixes 0 and 25 "
        "shots); on the paper path the lm-eval commands in prh_lib/data/benchmarks.py must fill and replace "
        "them at the paper's shots before Section 3.2's correlations compare")
    add("random init", f"seeds {p['random_init_seeds']} of each unimodal pair's models", bool(p["random_init_seeds"]))
    return rows


def audit_markdown() -> str:
    """The audit as a Markdown table for the front page (``|`` escaped)."""
    def cell(s):
        return str(s).replace("|", "\\|").replace("\n", " ")

    rows = audit_rows()
    n_diff = sum(not r["agrees"] for r in rows)
    lines = [f"{len(rows) - n_diff} of {len(rows)} settings agree with the paper; {n_diff} differ (why, in the "
             "last column).", "", "| setting | paper | `--params paper` | difference and why |",
             "| --- | --- | --- | --- |"]
    lines += [f"| {cell(r['setting'])} | {cell(r['paper'])} | {cell(r['profile'])} | {cell(r['difference'])} |"
              for r in rows]
    return "\n".join(lines) + "\n"
