"""The decision rule of a claim: each part a statistic with its interval over images against a threshold.

:class:`Test` is one part, :func:`outcome` reads it three ways ("holds", "inconclusive", "differs"),
symmetrically: the whole interval on the claim's side holds, the whole interval off it differs, anything else
is inconclusive. :func:`combine` reads a claim made of several parts, and :func:`readings` reads it twice: by
the paper's own criterion (the tests not marked ``control``) and with this book's added controls (all tests).
Pages turn the result into a verdict word (:mod:`prh_lib.pages.claims`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from prh_lib.formatting import format_number


@dataclass(frozen=True)
class Test:
    """One part of a claim: a statistic with its 95 % interval over images, against a threshold.

    Attributes
    ----------
    name : str
        What is tested, in words (shown in the verdict's note when it fails or cannot decide).
    estimate, low, high : float
        The statistic and its interval (e.g. a paired bootstrap interval of ``pair − floor``).
    threshold : float
        The value the claim says the statistic exceeds (``side=">"``) or stays below (``side="<"``).
    side : {">", "<"}
    bounds : (float, float) or None
        The range the statistic can take (``(-1, 1)`` for a correlation, ``(-2, 2)`` for a difference of two),
        when it has one: a detectable difference that reaches beyond it is reported as none (:meth:`power`).
    control : bool
        True for a control this book adds to the paper's criterion (a floor: random-init twin, bag of words),
        False for a part of the paper's own test (:func:`readings`).
    """

    name: str
    estimate: float
    low: float
    high: float
    threshold: float = 0.0
    side: str = ">"
    bounds: tuple[float, float] | None = None
    control: bool = False

    def __post_init__(self):
        if self.side not in (">", "<"):
            raise ValueError(f"side must be '>' or '<'; got {self.side!r}")
        if self.bounds is not None and not self.bounds[0] < self.bounds[1]:
            raise ValueError(f"bounds must be (low, high) with low < high; got {self.bounds!r}")

    def detectable(self) -> float:
        """Smallest difference from the threshold this test's interval detects at 80 % power (NaN without a
        finite interval; inf when that difference lies beyond the statistic's ``bounds`` on the claim's side).

        :func:`prh_lib.stats.intervals.detectable_difference` of the interval.
        """
        from prh_lib.stats.intervals import detectable_difference

        d = detectable_difference(self.low, self.high)
        if self.bounds is not None and math.isfinite(d):
            reach = self.bounds[1] - self.threshold if self.side == ">" else self.threshold - self.bounds[0]
            if d > reach:
                return math.inf
        return d

    def power(self) -> str:
        """``"detects a difference from 0 of 0.070 at 80 % power"``, or ``"detects at 80 % power no difference
        from 0 within the range of the statistic [-1, 1]"`` (a half-open range: ``"(0 or more)"``) when
        :meth:`detectable` is beyond its ``bounds``;
        "" without a finite interval."""
        d = self.detectable()
        if math.isinf(d):
            lo, hi = self.bounds
            span = (f"[{lo:g}, {hi:g}]" if math.isfinite(lo) and math.isfinite(hi) else
                    f"({lo:g} or more)" if math.isfinite(lo) else f"({hi:g} or less)")
            return (f"detects at 80 % power no difference from {self.threshold:g} within the range of the "
                    f"statistic {span}")
        return f"detects a difference from {self.threshold:g} of {d:.3f} at 80 % power" if math.isfinite(d) else ""

    @property
    def outcome(self) -> str:
        """``"holds"``, ``"inconclusive"`` or ``"differs"`` (module docstring, Tests)."""
        return outcome(self.estimate, self.low, self.high, self.threshold, side=self.side)

    def describe(self, digits: int = 3) -> str:
        """``"<name>: needs > 0, got 0.041 [0.012, 0.070]"`` (the threshold, then this build's estimate)."""
        def f(v):
            return format_number(v, digits) if math.isfinite(v) else f"{v}"

        while digits < 6 and all(math.isfinite(v) for v in (self.low, self.high)) and any(
                round(v, digits) == round(self.threshold, digits) and v != self.threshold
                for v in (self.estimate, self.low, self.high)):
            digits += 1  # an end that would print as the threshold ("[0.000, ...]" that is not 0): more digits

        need = f"{self.name}: needs {self.side} {self.threshold:g}, got {f(self.estimate)}"
        if not (math.isfinite(self.low) and math.isfinite(self.high)):
            return f"{need} (no interval)"
        return f"{need} [{f(self.low)}, {f(self.high)}]"


def outcome(estimate: float, low: float, high: float, threshold: float = 0.0, *, side: str = ">") -> str:
    """Symmetric three-way reading of a statistic's 95 % interval against a threshold.

    ``side=">"``: "holds" if ``low > threshold``, "differs" if ``high < threshold`` (the interval excludes the
    claim's side), otherwise "inconclusive": an interval that reaches the threshold, no finite interval, or no
    finite estimate. ``side="<"`` mirrors it. The estimate itself never decides.
    """
    if side == "<":
        return outcome(-estimate, -high, -low, -threshold, side=">")
    if estimate is None or not math.isfinite(estimate) or low is None or high is None:
        return "inconclusive"
    if math.isfinite(low) and low > threshold:
        return "holds"
    if math.isfinite(high) and high < threshold:
        return "differs"
    return "inconclusive"


def combine(tests) -> tuple[bool, bool, str]:
    """``(holds, conclusive, note)`` of a claim made of ``tests`` (for :func:`finding`).

    ``holds`` is False when any test differs; ``conclusive`` is False when none differs but some test cannot
    decide; ``note`` says which parts fail, then which cannot decide, with their numbers and, for each undecided
    one, the smallest difference from its threshold this build detects at 80 % power (two-sided 95 %, normal
    approximation from its interval's width: :func:`prh_lib.stats.intervals.detectable_difference`), then how
    many parts hold ("" when all hold).

    Raises
    ------
    ValueError
        If ``tests`` is empty.
    """
    tests = list(tests)
    if not tests:
        raise ValueError("a claim needs at least one test")
    bad = [t for t in tests if t.outcome == "differs"]
    open_ = [t for t in tests if t.outcome == "inconclusive"]
    parts = ["fails: " + "; ".join(t.describe() for t in bad)] if bad else []
    parts += ["cannot decide: " + "; ".join(t.describe() + (f" ({t.power()})" if t.power() else "") for t in open_)
              ] if open_ else []
    if parts:
        parts.append(f"holds: {len(tests) - len(bad) - len(open_)} of {len(tests)} parts")
    return not bad, not open_ or bool(bad), "; ".join(parts)


def readings(tests) -> dict[str, tuple[bool, bool, str]]:
    """The claim read twice (:func:`combine` each): ``"paper"`` on the tests of the paper's own criterion
    (``control=False``), ``"controls"`` on every test, this book's controls included. ``"paper"`` is absent
    when every test is a control.

    Raises
    ------
    ValueError
        If ``tests`` is empty.
    """
    tests = list(tests)
    paper = [t for t in tests if not t.control]
    return {"controls": combine(tests)} | ({"paper": combine(paper)} if paper else {})
