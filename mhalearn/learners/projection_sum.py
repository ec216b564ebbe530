"""Phases 1 and 3 of Chen & Li's learner: estimate and refine W_Σ = Σ_i W_i.

Everything the sculpting phases decode depends on Ŵ_Σ: an agreement row is
recognised by y_ℓ ≈ âᵀ X Ŵ_Σ, so Ŵ_Σ must be accurate to a few per cent
before the body carries the span (docs/design.md §4.1a).

- :func:`crude_projection_sum` (phase 1): every output row regressed on its
  sequence's mean token, exact under uniform attention, 20–50 % off otherwise.
- :func:`certified_projection_sum` (phase 3, the paper's way): rows to which
  the minimum-norm point Θ̄ gives one token j* a clear margin are certified
  by LP against the body (every head in K puts ≥ 1 − η on j*), and Ŵ_Σ is
  refitted by least squares of y_ℓ on x_{j*}.  Biased by the ≤ η weight off
  j*, so it stalls at a few per cent.
- :func:`alternating_projection_sum` (phase 3, *ours*, not in the paper):
  on a true agreement row y_ℓ = (âᵀX)W_Σ is linear in W_Σ, so decoding and
  refitting on the accepted rows alternate until Ŵ_Σ stops moving.

Reference: Chen, S. & Li, Y., *Provably learning a multi-head attention layer*.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .agreement import AgreementRows, find_agreement_rows


def _solve_normal(gram: np.ndarray, moment: np.ndarray) -> np.ndarray | None:
    """Least squares from normal equations (None when the d×d Gram matrix is singular).

    The design matrices here have a few thousand rows and d columns; the d×d
    normal equations cost nothing next to an SVD of the rows, and the
    conditioning check keeps them honest.
    """
    eigenvalues = np.linalg.eigvalsh(gram)
    if eigenvalues[0] <= 1e-10 * max(eigenvalues[-1], 1e-300):
        return None
    return np.linalg.solve(gram, moment)


def least_squares(design: np.ndarray, targets: np.ndarray, minimum_rows: int) -> np.ndarray | None:
    """argmin_W ‖design W − targets‖ (None with fewer than ``minimum_rows`` rows or a singular design)."""
    if len(design) < minimum_rows:
        return None
    return _solve_normal(design.T @ design, design.T @ targets)


def crude_projection_sum(source) -> np.ndarray:
    """Phase 1: Ŵ_Σ by least squares of every output row on its mean token x̄.

    Under uniform attention every row equals x̄ W_Σ; peaked attention biases
    the estimate (expect 20–50 % error), but it needs nothing.  Accumulates
    the normal equations block by block.
    """
    d = source.dim
    gram, moment = np.zeros((d, d)), np.zeros((d, d))
    for X, Y in source.blocks():
        mean = X.mean(axis=1)
        gram += X.shape[1] * mean.T @ mean
        moment += mean.T @ Y.sum(axis=1)
    w_sum = _solve_normal(gram, moment)
    if w_sum is None:
        raise ValueError("X: the mean tokens do not span R^d, so W_Σ cannot be estimated")
    return w_sum


# ------------------------------------------------------------ the paper's refit

@dataclass
class MarginRows:
    """Rows to which an attention matrix gives one token j* a clear margin."""

    tokens: np.ndarray  # (c, k, d)
    query: np.ndarray  # (c,)
    top: np.ndarray  # (c,) the token j*
    label: np.ndarray  # (c, d)
    scanned: int

    def __len__(self) -> int:
        return len(self.query)

    def directions(self) -> tuple[np.ndarray, np.ndarray]:
        """vec(x_ℓ (x_{j*} − x_j)ᵀ) for every token j distinct from x_{j*}, and its row."""
        index = np.arange(len(self))
        queries = self.tokens[index, self.query]
        differences = self.tokens[index, self.top][:, None, :] - self.tokens  # (c, k, d)
        row, token = np.nonzero(np.any(differences != 0, axis=-1))
        d = self.tokens.shape[2]
        return (queries[row][:, :, None] * differences[row, token][:, None, :]).reshape(-1, d * d), row


def margin_rows(source, theta: np.ndarray, eta: float, max_rows: int) -> MarginRows:
    """Rows where softmax(x_ℓᵀ Θ Xᵀ) puts ≥ 1 − η on the copies of one token j*.

    Keeps at most ``max_rows`` (the first found, blocks being i.i.d.).
    """
    d = source.dim
    theta = theta.reshape(d, d)
    kept = {"tokens": [], "query": [], "top": [], "label": []}
    scanned, found = 0, 0
    for X, Y in source.blocks():
        logits = np.einsum("nkd,de,nje->nkj", X, theta, X)
        weights = np.exp(logits - logits.max(axis=-1, keepdims=True))
        weights /= weights.sum(axis=-1, keepdims=True)
        top = weights.argmax(axis=-1)
        equal = np.all(X[:, :, None, :] == X[:, None, :, :], axis=-1)  # token j == token j'
        copies = np.take_along_axis(equal, top[:, :, None], axis=1)  # (n, k, k): x_j == x_{top}
        mass = np.sum(weights * copies, axis=-1)
        samples, rows = np.nonzero(mass >= 1.0 - eta)
        scanned += mass.size
        take = min(len(samples), max_rows - found)
        samples, rows = samples[:take], rows[:take]
        kept["tokens"].append(X[samples])
        kept["query"].append(rows)
        kept["top"].append(top[samples, rows])
        kept["label"].append(Y[samples, rows])
        found += take
        if found >= max_rows:
            break
    arrays = {name: np.concatenate(parts) for name, parts in kept.items()}
    return MarginRows(tokens=arrays["tokens"], query=arrays["query"].astype(np.int64),
                      top=arrays["top"].astype(np.int64), label=arrays["label"], scanned=scanned)


def certification_margin(eta: float, length: int) -> float:
    """γ such that logit gaps ≥ γ to every other token give weight ≥ 1 − η on j*.

    With k − 1 competitors, Σ_j exp(−gap_j) ≤ (k − 1)e^{−γ} ≤ η/(1 − η).
    """
    return math.log((length - 1) * (1.0 - eta) / eta)


def certify_rows(body, candidates: MarginRows, gamma: float) -> np.ndarray:
    """Boolean mask of the candidate rows certified against the body.

    A row is certified when, for every token j distinct from x_{j*}, the
    weak-duality bound on min over Θ ∈ K of ⟨x_ℓ(x_{j*} − x_j)ᵀ, Θ⟩ is ≥ γ.
    """
    directions, row = candidates.directions()
    certified = np.ones(len(candidates), dtype=bool)
    if len(row):
        bounds = body.certify(directions)
        np.logical_and.at(certified, row, bounds >= gamma)
    return certified


def certified_projection_sum(candidates: MarginRows, certified: np.ndarray) -> np.ndarray | None:
    """The paper's refit: least squares y_ℓ ≈ x_{j*} W_Σ on the certified rows (None if too few)."""
    tokens = candidates.tokens[certified, candidates.top[certified]]
    return least_squares(tokens, candidates.label[certified], 2 * tokens.shape[1])


def certification_precision(teacher, candidates: MarginRows, certified: np.ndarray, eta: float) -> float:
    """Share of certified rows on which every teacher head puts ≥ 1 − η on j*'s copies."""
    if not np.any(certified):
        return float("nan")
    tokens = candidates.tokens[certified]
    query, top = candidates.query[certified], candidates.top[certified]
    index = np.arange(len(tokens))
    weights = teacher.attention(tokens)[index, :, query, :]  # (c, m, k)
    copies = np.all(tokens == tokens[index, top][:, None, :], axis=-1)  # (c, k)
    mass = np.sum(weights * copies[:, None, :], axis=-1)
    return float(np.mean(np.all(mass >= 1.0 - eta, axis=1)))


# ------------------------------------------------------------ our alternating refit

def agreement_refit(rows: AgreementRows) -> np.ndarray | None:
    """Least squares y_ℓ ≈ (âᵀX)W_Σ over the agreement rows (None if rank-deficient)."""
    mixed = rows.mixed_tokens()
    return least_squares(mixed, rows.label, 2 * mixed.shape[1])


def draw_pool(source, w_sum: np.ndarray, *, pool_fraction: float, simplex_tol: float, max_pool: int | None,
              rng: np.random.Generator | None = None) -> AgreementRows:
    """Candidate agreement rows: the best ``pool_fraction`` of every block under Ŵ_Σ.

    The simplex test is ten times looser than for acceptance, since the
    patterns of a candidate move as Ŵ_Σ is refined.
    """
    return find_agreement_rows(source, w_sum, quantile=pool_fraction, simplex_tol=10 * simplex_tol,
                               max_rows=max_pool, rng=rng)


def alternating_projection_sum(source, w_sum: np.ndarray, *, quantile: float, iterations: int,
                               pool_fraction: float = 0.1, refresh: float = 0.15, tolerance: float = 1e-3,
                               simplex_tol: float = 0.02, max_pool: int | None = None,
                               pool: AgreementRows | None = None, rng: np.random.Generator | None = None,
                               callback=None):
    """Ours, not Chen & Li: alternate decoding and refitting Ŵ_Σ on the agreement rows.

    A *pool* of candidate rows — the best ``pool_fraction`` of every block by
    relative residual under the current Ŵ_Σ (:func:`draw_pool`; ``pool`` if
    given, drawn under the starting Ŵ_Σ) — is kept; each iteration
    re-decodes it with the current Ŵ_Σ, accepts its best rows (the share
    ``quantile / pool_fraction`` of the pool, i.e. the best ``quantile`` of
    all rows, within ``simplex_tol`` of the simplex) and refits Ŵ_Σ by least
    squares of y_ℓ on âᵀX over them.  The pool is drawn again from the
    source once Ŵ_Σ has moved by more than ``refresh`` (relative) since it
    was drawn.  Stops when Ŵ_Σ moves by less than ``tolerance`` or the pool's
    agreement fit — the median relative residual of the accepted rows, a
    teacher-free gauge of Ŵ_Σ — gets worse.  ``callback(iteration, w_sum,
    accepted)`` sees every iteration.

    Returns the final Ŵ_Σ and one dict per iteration (agreement fit, rows
    accepted, relative change, whether the pool was redrawn).
    """
    share = min(1.0, quantile / pool_fraction)
    history, drawn_at = [], w_sum
    previous_fit = math.inf
    for iteration in range(iterations):
        redraw = pool is None or np.linalg.norm(w_sum - drawn_at) > refresh * np.linalg.norm(drawn_at)
        if redraw:
            pool = draw_pool(source, w_sum, pool_fraction=pool_fraction, simplex_tol=simplex_tol,
                             max_pool=max_pool, rng=rng)
            drawn_at, previous_fit = w_sum, math.inf
        elif iteration > 0:
            pool = pool.redecode(w_sum)
        accepted = pool.accept(quantile=share, simplex_tol=simplex_tol)
        fit = float(np.median(accepted.residual)) if len(accepted) else math.inf
        if callback is not None:
            callback(iteration, w_sum, accepted)
        if fit > previous_fit:
            history.append({"agreement_fit": fit, "rows": len(accepted), "redrawn": redraw, "stopped": "worse"})
            break
        previous_fit = fit
        refit = agreement_refit(accepted)
        if refit is None:
            history.append({"agreement_fit": fit, "rows": len(accepted), "redrawn": redraw,
                            "stopped": "too few rows"})
            break
        change = float(np.linalg.norm(refit - w_sum) / np.linalg.norm(w_sum))
        history.append({"agreement_fit": fit, "rows": len(accepted), "redrawn": redraw, "change": change})
        w_sum = refit
        if change < tolerance:
            break
    return w_sum, history
