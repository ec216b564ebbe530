"""Samples-to-target statistics: bisection on n, bootstrap over seeds, and growth-law fits.

Used by the ``sparse-variables`` experiments ([design: sparse-variables]) to measure how
the number of samples a learner needs grows with the sequence length T.

* :func:`bisect_samples` finds, for one seed, the smallest n at which a
  learner reaches a target accuracy, to a stated resolution, by doubling n
  and then bisecting on log n.
* :func:`bootstrap_median` gives the median over seeds of such thresholds
  with a percentile-bootstrap interval (seeds resampled with replacement).
* :func:`fit_growth_laws` fits the two laws that Edelman et al.'s claim sets
  against each other, n = a + b·ln T and n = c·T^α, by least squares on
  ln n (multiplicative errors, so both laws are judged on the same scale),
  compares them by the Akaike information criterion and by predicting the
  largest T from the others, and bootstraps α and b over seeds.

"Not reached" (no n up to the cap reaches the target) is ``math.inf``
throughout: a median over seeds is then finite only when more than half of
the seeds reach the target.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from ..sample_search import bracket_smallest

#: Growth laws fitted to samples-to-target against T.
LAWS = ("log", "power")


def bisect_samples(evaluate: Callable[[int], float], *, target: float, start: int, max_samples: int,
                   per_octave: int, min_samples: int | None = None) -> tuple[float, list[tuple[int, float]]]:
    """Smallest n with ``evaluate(n) >= target``, to a factor 2^(1/per_octave), by doubling then bisection.

    n = start, 2·start, 4·start, … (the last probe is ``max_samples``) until
    one reaches the target; then the bracket (largest failing n, first
    passing n) is halved on a log scale until its ratio is at most
    2^(1/per_octave) (or the integers run out).  The answer is the passing
    end of the bracket.  It assumes accuracy grows with n, which nested
    training sets (each n's set contains the smaller ones) make close to true.

    With ``min_samples`` below ``start``, a passing ``start`` is halved
    (start/2, start/4, …, not below ``min_samples``) until a probe fails,
    and the bracket is that failing n and the last passing one: starting the
    search near the expected answer saves the probes below it, and the answer
    is the same as from ``min_samples`` whenever accuracy grows with n.

    Parameters
    ----------
    evaluate : callable n -> accuracy
    target : float
    start, max_samples : int
        First probe and cap.
    min_samples : int, optional
        Smallest n probed when ``start`` passes (default ``start``: no probe below it).
    per_octave : int
        Resolution: the bracket is narrowed to a ratio of 2^(1/per_octave).

    Returns
    -------
    samples : float
        The smallest passing n found (``min_samples`` if every probe down to it passes),
        or ``math.inf`` if ``max_samples`` does not pass.
    probes : list of (n, accuracy)
        Every evaluation, in order.
    """
    if not 1 <= start <= max_samples:
        raise ValueError(f"start: expected 1 <= start <= max_samples = {max_samples}, received {start}")
    if per_octave < 1:
        raise ValueError(f"per_octave: expected an integer >= 1, received {per_octave}")
    min_samples = start if min_samples is None else min_samples
    if not 1 <= min_samples <= start:
        raise ValueError(f"min_samples: expected 1 <= min_samples <= start = {start}, received {min_samples}")
    probes: list[tuple[int, float]] = []

    def passes(n: int) -> bool:
        accuracy = float(evaluate(n))
        probes.append((n, accuracy))
        return accuracy >= target

    passing, _ = bracket_smallest(passes, start=start, budget=max_samples, minimum=min_samples,
                                  resolution=2 ** (1 / per_octave) * (1 + 1e-12))
    return (math.inf if passing is None else float(passing)), probes


def median_with_inf(values: Sequence[float]) -> float:
    """Median of ``values`` where ``math.inf`` (not reached) sorts above every number."""
    return float(np.median(np.asarray(values, dtype=float)))


def bootstrap_median(values: Sequence[float], *, level: float = 0.9, resamples: int = 2000,
                     rng=0) -> tuple[float, float, float]:
    """Median of ``values`` over seeds and its percentile-bootstrap interval at ``level``.

    Seeds are resampled with replacement ``resamples`` times; the interval
    is the (1 ± level)/2 quantiles of the resampled medians.  Ends may be
    ``math.inf`` when many seeds did not reach the target.
    """
    values = np.asarray(values, dtype=float)
    generator = np.random.default_rng(rng)
    medians = np.median(values[generator.integers(len(values), size=(resamples, len(values)))], axis=1)
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(medians, [tail, 1.0 - tail], method="inverted_cdf")
    return median_with_inf(values), float(low), float(high)


def bootstrap_median_ratio(high: Sequence[float], low: Sequence[float], *, level: float = 0.9,
                           resamples: int = 2000, rng=0) -> tuple[float, float, float, int]:
    """median(high) / median(low) over seeds and its percentile-bootstrap interval at ``level``.

    The seeds of ``high`` and of ``low`` are resampled apart.  ``math.inf``
    (not reached) sorts above every number: a replicate with an infinite
    numerator is infinite, and one with both medians infinite is left out
    (their count is the fourth value returned).
    """
    high, low = np.asarray(high, dtype=float), np.asarray(low, dtype=float)
    generator = np.random.default_rng(rng)
    tops = np.median(high[generator.integers(len(high), size=(resamples, len(high)))], axis=1)
    bottoms = np.median(low[generator.integers(len(low), size=(resamples, len(low)))], axis=1)
    with np.errstate(invalid="ignore"):
        ratios = tops / bottoms
    ratios = ratios[~np.isnan(ratios)]
    tail = (1.0 - level) / 2.0
    lo, hi = np.quantile(ratios, [tail, 1.0 - tail], method="inverted_cdf")
    return float(np.median(high) / np.median(low)), float(lo), float(hi), resamples - len(ratios)


def _fit_log_laws(lengths: np.ndarray, samples: np.ndarray, iterations: int = 50) -> np.ndarray:
    """(a, b) of n = a + b·ln T minimising Σ (ln n − ln(a + b ln T))², for each row of ``samples``.

    ``samples`` has shape (R, K) (R curves over the K lengths); returns (R, 2).
    Gauss–Newton from the least-squares line on n, vectorised over the R
    curves, with the step halved until a + b·ln T stays positive and the
    residual does not grow.
    """
    logs = np.log(np.asarray(lengths, dtype=float))
    samples = np.atleast_2d(np.asarray(samples, dtype=float))
    targets = np.log(samples)
    design = np.column_stack([np.ones_like(logs), logs])
    params = np.linalg.lstsq(design, samples.T, rcond=None)[0].T  # least squares on n
    bad = np.any(params @ design.T <= 0, axis=1)  # start from the constant law when the line goes negative
    params[bad] = np.column_stack([np.exp(targets[bad].mean(axis=1)), np.zeros(bad.sum())])

    def cost(values):
        model = values @ design.T
        with np.errstate(invalid="ignore", divide="ignore"):
            residual = np.where(model > 0, np.log(np.where(model > 0, model, 1.0)) - targets, np.inf)
        return np.sum(residual ** 2, axis=1), residual, model

    current, residual, model = cost(params)
    for _ in range(iterations):
        jacobian = design[None] / model[:, :, None]  # (R, K, 2): ∂ ln(a + bL)/∂(a, b)
        normal = np.einsum("rki,rkj->rij", jacobian, jacobian)
        normal += 1e-12 * np.trace(normal, axis1=1, axis2=2)[:, None, None] * np.eye(2)
        step = -np.linalg.solve(normal, np.einsum("rki,rk->ri", jacobian, residual)[..., None])[..., 0]
        scale = np.ones(len(params))
        for _ in range(30):
            trial, trial_residual, trial_model = cost(params + scale[:, None] * step)
            worse = ~(trial <= current)
            if not worse.any():
                break
            scale[worse] /= 2.0
        accept = trial <= current
        params[accept] += scale[accept, None] * step[accept]
        current, residual, model = cost(params)
    return params


def _fit_log_law(lengths: np.ndarray, samples: np.ndarray) -> tuple[float, float]:
    a, b = _fit_log_laws(lengths, samples[None])[0]
    return float(a), float(b)


def _fit_power_law(lengths: np.ndarray, samples: np.ndarray) -> tuple[float, float]:
    """(c, α) of n = c·T^α by least squares on ln n = ln c + α ln T."""
    alpha, log_c = np.polyfit(np.log(lengths), np.log(samples), 1)
    return float(math.exp(log_c)), float(alpha)


def law_curve(law: str, params: tuple[float, float], lengths) -> np.ndarray:
    """n(T) of a fitted law: ``("log", (a, b))`` or ``("power", (c, α))``."""
    lengths = np.asarray(lengths, dtype=float)
    if law == "log":
        return params[0] + params[1] * np.log(lengths)
    return params[0] * lengths ** params[1]


def _fit(law: str, lengths: np.ndarray, samples: np.ndarray) -> tuple[float, float]:
    return _fit_log_law(lengths, samples) if law == "log" else _fit_power_law(lengths, samples)


def _log_rss(law: str, params, lengths: np.ndarray, samples: np.ndarray) -> float:
    model = law_curve(law, params, lengths)
    if np.any(model <= 0):
        return math.inf
    return float(np.sum((np.log(model) - np.log(samples)) ** 2))


@dataclass
class GrowthFit:
    """Both laws fitted to one curve of samples-to-target against T.

    Attributes
    ----------
    lengths, medians : the T values with a finite median over seeds, and those medians.
    log_params : (a, b) of n = a + b·ln T.
    power_params : (c, α) of n = c·T^α.
    alpha_interval, b_interval : bootstrap intervals of α and b at ``level``.
    log_rss, power_rss : Σ (ln n − ln n̂)² of each law.
    delta_aic : AIC(log) − AIC(power) = K·ln(RSS_log/RSS_power) for K points
        (both laws have two parameters): negative favours the log law; ``|Δ| > 2``
        is the usual threshold for a clear preference.
    held_out_length : the largest T, left out to test extrapolation.
    held_out_prediction : {law: n̂ at that T from the fit to the other T}.
    held_out_error : {law: ``|ln n̂ − ln n|``} at that T.
    better : "log", "power", or "neither" when the AIC and held-out tests disagree.
    level : level of the intervals; dropped : bootstrap replicates left out
        because a resampled median was not reached.
    """

    lengths: np.ndarray
    medians: np.ndarray
    log_params: tuple[float, float]
    power_params: tuple[float, float]
    alpha_interval: tuple[float, float]
    b_interval: tuple[float, float]
    log_rss: float
    power_rss: float
    delta_aic: float
    held_out_length: float
    held_out_prediction: dict
    held_out_error: dict
    better: str
    level: float
    dropped: int


def fit_growth_laws(thresholds: dict[float, Sequence[float]], *, level: float = 0.9, resamples: int = 1000,
                    rng=0) -> GrowthFit | None:
    """Fit n = a + b·ln T and n = c·T^α to the medians over seeds of per-seed samples-to-target.

    Parameters
    ----------
    thresholds : dict T -> per-seed samples-to-target (``math.inf`` = not reached).
    level : level of the bootstrap intervals of α and b.
    resamples : bootstrap replicates (seeds resampled with replacement within each T).
    rng : seed of the bootstrap.

    Returns
    -------
    GrowthFit, or None when fewer than three T have a finite median.

    Notes
    -----
    Only the T whose median over seeds is finite enter the fits.  A bootstrap
    replicate in which one of them becomes "not reached" is dropped (counted
    in ``dropped``).
    """
    lengths = np.array(sorted(length for length, values in thresholds.items()
                              if math.isfinite(median_with_inf(values))), dtype=float)
    if len(lengths) < 3:
        return None
    seeds = [np.asarray(thresholds[length], dtype=float) for length in lengths]
    medians = np.array([np.median(values) for values in seeds])
    params = {law: _fit(law, lengths, medians) for law in LAWS}
    rss = {law: _log_rss(law, params[law], lengths, medians) for law in LAWS}
    delta_aic = len(lengths) * (math.log(max(rss["log"], 1e-300)) - math.log(max(rss["power"], 1e-300)))
    prediction, error = {}, {}
    for law in LAWS:
        held = _fit(law, lengths[:-1], medians[:-1])
        value = float(law_curve(law, held, lengths[-1:])[0])
        prediction[law] = value
        error[law] = abs(math.log(value) - math.log(medians[-1])) if value > 0 else math.inf
    aic_choice = "log" if delta_aic < 0 else "power"
    held_choice = "log" if error["log"] < error["power"] else "power"
    better = aic_choice if aic_choice == held_choice else "neither"

    generator = np.random.default_rng(rng)
    replicates = np.column_stack([np.median(values[generator.integers(len(values), size=(resamples, len(values)))],
                                            axis=1) for values in seeds])
    kept = np.all(np.isfinite(replicates), axis=1)
    dropped = int((~kept).sum())
    replicates = replicates[kept]
    alphas = list(np.polyfit(np.log(lengths), np.log(replicates.T), 1)[0]) if len(replicates) else []
    bs = list(_fit_log_laws(lengths, replicates)[:, 1]) if len(replicates) else []
    tail = (1.0 - level) / 2.0

    def interval(values):
        return tuple(float(v) for v in np.quantile(values, [tail, 1.0 - tail])) if values else (math.nan, math.nan)

    return GrowthFit(lengths=lengths, medians=medians, log_params=params["log"], power_params=params["power"],
                     alpha_interval=interval(alphas), b_interval=interval(bs), log_rss=rss["log"],
                     power_rss=rss["power"], delta_aic=delta_aic, held_out_length=float(lengths[-1]),
                     held_out_prediction=prediction, held_out_error=error, better=better, level=level,
                     dropped=dropped)


__all__ = ["GrowthFit", "LAWS", "bisect_samples", "bootstrap_median", "bootstrap_median_ratio", "fit_growth_laws",
           "law_curve",
           "median_with_inf"]
