"""The smallest n at which a learner meets a target: bracket by halving or doubling, then bisect on log n.

Shared by the ``samples-to-eps`` experiment (:func:`search_samples_needed`,
error ≤ ε, with a budget, a closing probe and resumption from stored probes)
and the ``sparse-variables`` experiments
(:func:`~mhalearn.sparse_variables.growth.bisect_samples`, accuracy ≥ a
target): both call :func:`bracket_smallest`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

#: Resolution of a search: n* and the largest failing n below it are within this factor.
RESOLUTION = 1.25
#: Where one probe took longer than ``coarse_seconds``, the search may stop at this factor.
COARSE_RESOLUTION = 2.0


def bracket_smallest(succeeds: Callable[[int], bool], *, start: int, budget: int, minimum: int,
                     resolution: float, coarse: Callable[[], bool] = lambda: False) -> tuple[int | None, int]:
    """(smallest n found with ``succeeds(n)``, largest failing n below it) — (None, budget) when censored.

    The first probe is ``start`` (clipped to [minimum, budget]).  A success
    halves n (not below ``minimum``) until a probe fails; a failure doubles
    n (the last probe is ``budget``) until one succeeds.  The bracket (largest
    failing n, smallest succeeding n) is then bisected on log n until its
    ratio is at most ``resolution`` (:data:`COARSE_RESOLUTION` once
    ``coarse()`` is true), or the integers between its ends run out.  The
    lower end is 0 when ``minimum`` itself succeeded.  Every failure stays
    below every success of the bracket, so the answer is exact whenever
    success is monotone in n.
    """
    n = min(max(int(start), minimum), budget)
    lower, needed = 0, None
    if succeeds(n):
        needed = n
        while needed > minimum:
            smaller = max(minimum, needed // 2)
            if not succeeds(smaller):
                lower = smaller
                break
            needed = smaller
    else:
        lower = n
        while lower < budget:
            larger = min(budget, 2 * lower)
            if succeeds(larger):
                needed = larger
                break
            lower = larger
    if needed is None:
        return None, budget
    while lower > 0 and needed / lower > (max(resolution, COARSE_RESOLUTION) if coarse() else resolution):
        middle = int(round(math.sqrt(lower * needed)))
        if middle <= lower or middle >= needed:
            break
        if succeeds(middle):
            needed = middle
        else:
            lower = middle
    return needed, lower


@dataclass
class SampleSearch:
    """What :func:`search_samples_needed` found.

    Attributes
    ----------
    samples_needed : int or None
        n*: the smallest n found with error ≤ ε (None when censored).
    samples_lower : int
        The largest n below n* that failed (0 when the smallest n tried
        succeeded; ``budget`` when censored).
    censored : bool
        The error at ``budget`` is above ε: n* > budget.
    non_monotone : bool
        Some n failed above an n that succeeded.
    probes : list of (n, error, seconds)
        Every probe, in the order made (probes given in ``known`` that the
        search used included).
    """

    samples_needed: int | None
    samples_lower: int
    censored: bool
    non_monotone: bool
    probes: list = field(default_factory=list)

    @property
    def ratio(self) -> float:
        """n* / samples_lower: the resolution reached (inf when nothing failed or censored)."""
        if self.samples_needed is None or self.samples_lower <= 0:
            return math.inf
        return self.samples_needed / self.samples_lower


def search_samples_needed(error_at: Callable[[int], tuple[float, float]], epsilon: float, *, start: int,
                          budget: int, minimum: int = 1, resolution: float = RESOLUTION,
                          coarse_seconds: float | None = None, confirm: float = 0.0,
                          known: dict | None = None) -> SampleSearch:
    """The smallest n with ``error_at(n)`` ≤ ε, by :func:`bracket_smallest`, then a closing probe.

    The bracket keeps every failure below every success, so a failure above
    a success (a non-monotone error curve) can only show on a probe outside
    it: with ``confirm`` > 1 the search ends with a probe at ``confirm`` × n*
    (unless one at or above it was made, or it exceeds the budget), and
    ``non_monotone`` is set when any probe failed above one that succeeded.

    Parameters
    ----------
    error_at : callable
        n ↦ (error, seconds).  An error that is NaN or None counts as a
        failure (e.g. a learner that refuses n).
    epsilon : float
        The target error (> 0).
    start : int
        The first n probed (clipped to [minimum, budget]).
    budget : int
        The largest n probed; failing there censors the search.
    minimum : int
        The smallest n probed.
    resolution : float
        Bisect until n* / (largest failing n below it) ≤ ``resolution``.
    coarse_seconds : float, optional
        Once a probe took longer than this, stop at :data:`COARSE_RESOLUTION`.
    confirm : float
        The factor of the closing probe above n* (0: none).
    known : dict, optional
        n ↦ (error, seconds) of probes already made (a resumed search): used
        instead of calling ``error_at``.

    Returns
    -------
    SampleSearch
    """
    if not (budget >= minimum >= 1 and resolution > 1.0 and epsilon > 0.0):
        raise ValueError(f"search: expected budget ≥ minimum ≥ 1, resolution > 1 and ε > 0, received "
                         f"budget = {budget}, minimum = {minimum}, resolution = {resolution}, ε = {epsilon}")
    known = dict(known or {})
    probes = []

    def succeeds(n: int) -> bool:
        if n not in known:
            known[n] = tuple(error_at(n))
        if not any(n == probe[0] for probe in probes):
            probes.append((n, *known[n]))
        return succeeded(known[n][0], epsilon)

    def slow() -> bool:
        return coarse_seconds is not None and max(probe[2] for probe in probes) > coarse_seconds

    needed, lower = bracket_smallest(succeeds, start=start, budget=budget, minimum=minimum,
                                     resolution=resolution, coarse=slow)
    if needed is not None and confirm and not any(probe[0] >= confirm * needed for probe in probes):
        check = int(round(confirm * needed))
        if check <= budget:
            succeeds(check)
    successes = [probe[0] for probe in probes if succeeded(probe[1], epsilon)]
    failures = [probe[0] for probe in probes if not succeeded(probe[1], epsilon)]
    non_monotone = bool(successes and failures and max(failures) > min(successes))
    return SampleSearch(needed, lower, needed is None, non_monotone, probes)


def succeeded(error, epsilon: float) -> bool:
    """An error meets ε (None or NaN — a refused fit — never does)."""
    return error is not None and not math.isnan(error) and error <= epsilon
