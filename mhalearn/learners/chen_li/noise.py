"""The label noise K*'s agreement test allows for, estimated from the data (never given).

Under Ŵ_Σ an agreement row's label is decoded exactly up to Ŵ_Σ's error and
the label noise, so with noise of standard deviation σ per entry its squared
residual is about σ²·χ²_ν, ν = d − (its distinct tokens − 1) the directions
the decoding cannot fit.  A fixed relative tolerance (``residual_tol``) then
passes no row once σ·√ν is a few per cent of ‖y‖ (σ = 0.1 at d = 12, k = 4:
none of 4·10⁵ rows).  :func:`label_noise` estimates σ from the residuals of
a sample of the stream, and :func:`noise_tolerance` widens the test to the
relative residual below which 95 % of agreement rows at that noise fall.

The estimate.  Rows are ranked by their squared residual divided by the
median of χ²_ν (each row's own ν); if a share π of rows are agreement rows
and they are the best explained, the rank π/2 is the median agreement row,
so its value estimates σ².  π is not known, so two shares are read:

- the share phase 2's first round already assumes (``quantile_for(m)``: 1
  at m = 1, 0.01 otherwise), which places σ̂ within 0.8–1.0× of σ on
  development instances at m = 1, 2 (seeds 20, 21);
- the share of rows the noise-free test passes (relative residual ≤
  ``residual_tol``), when it passes any: at m ≥ 3, where agreement rows
  are 10⁻⁴ of all and the first share's rank falls among rows that do not
  agree, this keeps σ̂ near their level.

The second share is read only where its rows are more than noise explains:
at the first share's σ̂, that share of the rows would pass the noise-free
test by chance in χ²_ν's lower tail (``explained``), and the passes count as
a population of their own only when a Poisson count of that mean reaches
them with probability below :data:`PASSES_ALPHA`.  Then the smaller σ̂ is
kept (each over-estimates σ when its share exceeds the true share of
agreement rows); otherwise the first share's.  While the passes are no more
than noise explains, the estimate reads four times as many sequences, up to
:data:`NOISE_MAX_SAMPLES`.  On development instances 30–32
(runs/noise-body/README.md, "The noise estimate at m = 4"), under a Ŵ_Σ of
error 0.02:

- m = 4, noiseless: 25 000 sequences hold about one agreement row, so the
  noise-free test passed none on two of three instances and σ̂ was read off
  rows that do not agree (0.24–0.25, tolerance 0.19–0.20); the larger
  sample finds 5–8 passes where noise would explain 0.01, and σ̂ is
  0.045–0.056;
- m = 1, σ = 0.1: the noise-free test passes a few agreement rows by chance
  (as many as noise at the first share's σ̂ explains) and their share read
  σ̂ 0.02 on two of three instances; the rule keeps the first share's σ̂
  (0.101 on all three);
- m = 1, σ = 0.01: the passes are what noise explains too, and σ̂ is the
  first share's, 0.017–0.018 (0.013–0.015 from the passes' share);
- m = 2, 3 and noiseless m = 1: the same σ̂ as from the smaller of the two
  (the passes are hundreds of times what noise explains, or none at any size
  under σ = 0.1).

Without noise σ̂ is the size of Ŵ_Σ's error and of the near-agreement rows'
residuals, and the tolerance stays at ``residual_tol`` wherever that is
larger ([decision: noise-tolerance]).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

from .decoder import decoding_residuals

#: Sequences of the stream's head whose rows the noise is estimated from (10⁵ rows at k = 4).
NOISE_SAMPLES = 25_000
#: The share of agreement rows at the estimated noise the widened test passes.
NOISE_LEVEL = 0.95
#: The most sequences the estimate reads while the noise-free test's passes are no more than noise explains
#: (each step reads four times as many): at m = 4 a random layer's agreement rows are ~10⁻⁶–10⁻⁵ a
#: sequence, so NOISE_SAMPLES may hold none; the planted development layer of rng = 41 (m = 4, d = 12) passes
#: the noise-free test on no row of 4·10⁵ sequences under its true W_Σ, and on 2 of 1.6·10⁶.
NOISE_MAX_SAMPLES = 1_600_000
#: The Poisson tail below which the noise-free test's passes are more than noise explains.
PASSES_ALPHA = 1e-3


def distinct_tokens(X: np.ndarray) -> np.ndarray:
    """The number of distinct tokens of each sequence of ``X`` (n, k, d)."""
    same = np.all(X[:, :, None, :] == X[:, None, :, :], axis=-1)  # (n, k, k)
    earlier = np.tril(same, k=-1).any(axis=-1)  # a copy of an earlier token
    return X.shape[1] - earlier.sum(axis=1)


@dataclass
class _NoiseRows:
    """What the estimate keeps of the rows read: per usable row its squared residual over the median of its
    χ²_ν (``scaled``), (residual_tol·‖y‖)² (``within``) and ν (``dof``); the noise-free test's ``passes``;
    every row's ‖y‖ (``label_norms``)."""

    scaled: np.ndarray
    within: np.ndarray
    dof: np.ndarray
    passes: int
    label_norms: np.ndarray

    @classmethod
    def of(cls, X, Y, w_sum, residual_tol: float, simplex_tol: float) -> "_NoiseRows":
        residual, violation = decoding_residuals(X, Y, w_sum)  # (n, k) relative residuals
        label_norm = np.sqrt(np.einsum("nrd,nrd->nr", Y, Y))
        dof = np.broadcast_to((X.shape[2] - distinct_tokens(X) + 1)[:, None], residual.shape)  # one per sequence
        usable = (violation <= simplex_tol) & np.isfinite(residual) & (label_norm > 0)
        # Squared residual per row over the median of its own χ²_ν: σ² at the median agreement row.
        scaled = (residual[usable] * label_norm[usable]) ** 2 / stats.chi2.median(dof[usable])
        return cls(scaled, (residual_tol * label_norm[usable]) ** 2, dof[usable],
                   int(np.count_nonzero(residual[usable] <= residual_tol)), label_norm.ravel())

    @classmethod
    def joined(cls, parts: list["_NoiseRows"]) -> "_NoiseRows":
        return cls(*(np.concatenate([getattr(part, name) for part in parts])
                     for name in ("scaled", "within", "dof")),
                   sum(part.passes for part in parts), np.concatenate([part.label_norms for part in parts]))

    def noise(self, agreement_share: float) -> dict:
        """:func:`label_noise`'s dict from these rows."""
        rows = self.scaled.size
        if rows == 0:
            return {"noise": 0.0, "shares": [None, agreement_share], "estimates": [None, None], "rows": 0,
                    "passes": 0, "explained": 0.0, "separate": False}
        shares = [self.passes / rows if self.passes else None, float(agreement_share)]
        estimates = [None if share is None else float(np.sqrt(np.quantile(self.scaled, min(share, 1.0) / 2)))
                     for share in shares]
        # The passes noise at the assumed share's σ̂ explains: its agreement rows whose χ²_ν tail falls
        # within residual_tol (a relative residual r ≤ tol where σ̂²·χ²_ν ≤ (tol·‖y‖)²).
        assumed = estimates[1]
        within = self.within / assumed ** 2 if assumed > 0 else np.full(rows, np.inf)
        explained = float(agreement_share * np.sum(stats.chi2.cdf(within, self.dof)))
        significance = float(stats.poisson.sf(self.passes - 1, explained)) if self.passes else 1.0
        # The noise-free test's share is read only where its passes are more than that noise explains.
        separate = significance < PASSES_ALPHA
        return {"noise": min(estimates) if separate else assumed, "shares": shares, "estimates": estimates,
                "rows": rows, "passes": self.passes, "explained": explained, "separate": separate}


def label_noise(X: np.ndarray, Y: np.ndarray, w_sum: np.ndarray, *, residual_tol: float, simplex_tol: float,
                agreement_share: float) -> dict:
    """σ̂, the label noise per entry, from the rows of the sequences ``X``, ``Y`` decoded under ``w_sum``.

    Returns ``noise`` (σ̂), ``shares`` (the two shares read: the noise-free
    test's, None when it passes no row, and ``agreement_share``), the σ̂
    each gave (``estimates``), ``rows`` (the rows read), ``passes`` (the
    rows the noise-free test passes), ``explained`` (the passes noise at the
    second σ̂ explains) and ``separate`` (whether the passes are more than
    that: the smaller σ̂ is then kept, else the second).
    """
    return _NoiseRows.of(X, Y, w_sum, residual_tol, simplex_tol).noise(agreement_share)


def noise_tolerance(noise: float, Y: np.ndarray, dim: int, length: int, residual_tol: float) -> float:
    """The relative residual the agreement test allows at label noise ``noise``: the larger of
    ``residual_tol`` and the ``NOISE_LEVEL`` quantile of σ̂·√χ²_ν (ν = d − k + 1) over the median ‖y‖."""
    return _tolerance(noise, float(np.median(np.linalg.norm(Y, axis=-1))), dim, length, residual_tol)


def _tolerance(noise: float, label_norm: float, dim: int, length: int, residual_tol: float) -> float:
    if noise <= 0.0 or label_norm <= 0.0:
        return float(residual_tol)
    spread = noise * np.sqrt(stats.chi2.ppf(NOISE_LEVEL, max(dim - length + 1, 1)))
    return float(max(residual_tol, spread / label_norm))


def estimate_tolerance(source, w_sum: np.ndarray, *, residual_tol: float, simplex_tol: float,
                       agreement_share: float, samples: int = NOISE_SAMPLES,
                       max_samples: int = NOISE_MAX_SAMPLES) -> dict:
    """:func:`label_noise` on the first ``samples`` sequences of ``source`` and the tolerance it gives
    (:func:`noise_tolerance`): the dict of :func:`label_noise` with ``tolerance`` and ``samples`` (the
    sequences read).

    While the noise-free test's passes are no more than noise explains, the next sequences are read
    until there are four times as many, up to ``max_samples``: where agreement rows are rarer than one
    in ``samples`` sequences (m = 4) they would otherwise go unseen, and σ̂ be read at
    ``agreement_share`` off rows that do not agree.  The stream is read block by block and only the rows'
    summaries are kept (32 bytes a row at most, 0.2 GB at 1.6·10⁶ sequences of k = 4).
    """
    parts, read = [], 0
    sequences = _Sequences(iter(source.blocks()))
    while True:
        while read < samples:
            piece = sequences.take(samples - read)
            if piece is None:
                break
            parts.append(_NoiseRows.of(*piece, w_sum, residual_tol, simplex_tol))
            read += len(piece[0])
        rows = _NoiseRows.joined(parts)
        found = rows.noise(agreement_share)
        if found["separate"] or samples >= max_samples or read < samples:
            break
        samples = min(4 * samples, max_samples)
    found["tolerance"] = _tolerance(found["noise"], float(np.median(rows.label_norms)), source.dim,
                                    source.length, residual_tol)
    found["samples"] = read
    return found



class _Sequences:
    """The sequences of a source's blocks in order, handed out in pieces (the rest of a block kept)."""

    def __init__(self, blocks):
        self._blocks, self._X, self._Y = blocks, np.empty((0, 0, 0)), np.empty((0, 0, 0))

    def take(self, count: int) -> tuple[np.ndarray, np.ndarray] | None:
        """The next at most ``count`` sequences ``(X, Y)``, float64; None once every block is read."""
        while not len(self._X):
            block = next(self._blocks, None)
            if block is None:
                return None
            self._X, self._Y = (np.asarray(part, dtype=np.float64) for part in block)
        X, Y = self._X[:count], self._Y[:count]
        self._X, self._Y = self._X[len(X):], self._Y[len(X):]
        return X, Y
