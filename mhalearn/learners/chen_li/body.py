"""The convex body of Chen & Li's learner, used by phases 3 and 4: its minimum-norm
point and LP certification against it.

The body is

    K = {Θ : ⟨C_r, Θ⟩ − b_r ∈ [−t_r, t_r] (slabs),  ⟨H_s, Θ⟩ ≤ g_s (half-spaces),  ‖Θ‖_F ≤ ρ}

built from agreement rows (phase 2, :mod:`~mhalearn.learners.chen_li.slabs`).  Every Θ_i,
and every affine combination of them, lies in it, so K is long along
aff{Θ_i} (dimension m − 1) and thin across it.  What the phases take from it:

- its minimum-norm point Θ̄ (a QP in cvxpy), which stands in for the heads'
  average attention matrix and lies close to span{Θ_i};
- LP certificates: min over Θ ∈ K of ⟨x_ℓ(x_{j*} − x_j)ᵀ, Θ⟩ ≥ γ for every
  token j means every head in K puts ≥ 1 − η on token j* of row ℓ
  (:func:`certify_margin`, a weak-duality bound on that LP that certifies
  many rows with one factorisation; :meth:`ConvexBody.support` solves the
  LP itself);
- its long directions and centre, which together span {Θ_i} (phase 4,
  :mod:`~mhalearn.learners.chen_li.phase4_span`).

Reference: Chen, S. & Li, Y., *Provably learning a multi-head attention layer*.
"""

from __future__ import annotations

import cvxpy as cp
import numpy as np

from .slabs import SlabSystem

# Constraints whose slack exceeds this (in units of the slab's half-width
# scale) are counted as inconsistent with the rest.
_SLACK_TOLERANCE = 1e-6


class ConvexBody:
    """K = slabs ∩ half-spaces ∩ {‖Θ‖_F ≤ ρ}, as cvxpy problems compiled once.

    At most ``max_constraints`` slabs and half-spaces are passed to the
    solver (a random subset in proportion: K with fewer constraints is a
    superset, so certificates against it stay valid).  The minimum-norm
    problem is *elastic*: each constraint may be violated at a cost
    ``penalty`` per unit (an exact penalty: when K is non-empty the solution
    is K's minimum-norm point), so a few inconsistent constraints — from a
    row wrongly accepted — are reported and dropped instead of making K
    empty.  The maximiser of a linear functional over K (the support
    function) is one parameterised problem re-solved per direction.
    """

    # The phases pass max_constraints; the default, the setting's, serves callers outside the learner.
    def __init__(self, slabs: SlabSystem, radius: float, *, max_constraints: int,
                 penalty: float = 100.0, solver: str = "CLARABEL",
                 rng: np.random.Generator | None = None):
        rng = np.random.default_rng(0) if rng is None else rng
        total = slabs.equalities + len(slabs.g)
        keep_slabs, keep_half = np.arange(slabs.equalities), np.arange(len(slabs.g))
        if total > max_constraints:
            slab_share = int(round(max_constraints * slabs.equalities / total))
            keep_slabs = np.sort(rng.choice(slabs.equalities, slab_share, replace=False))
            keep_half = np.sort(rng.choice(len(slabs.g), max_constraints - slab_share, replace=False))
        self.E, self.b, self.t = slabs.E[keep_slabs], slabs.b[keep_slabs], slabs.t[keep_slabs]
        self.H, self.g = slabs.H[keep_half], slabs.g[keep_half]
        self.radius = float(radius)
        self.solver = solver
        dim2 = slabs.E.shape[1] if slabs.E.size else slabs.H.shape[1]
        self.theta = cp.Variable(dim2)
        slab_slack = cp.Variable(len(self.b), nonneg=True)
        half_slack = cp.Variable(len(self.g), nonneg=True)
        self._slacks = (slab_slack, half_slack)
        constraints = []
        if len(self.b):
            constraints += [cp.abs(self.E @ self.theta - self.b) <= self.t + slab_slack]
        if len(self.g):
            constraints += [self.H @ self.theta <= self.g + half_slack]
        self.min_norm_problem = cp.Problem(
            cp.Minimize(cp.sum_squares(self.theta) + penalty * (cp.sum(slab_slack) + cp.sum(half_slack))),
            constraints)
        self.direction = cp.Parameter(dim2)
        self.support_problem = self._support_problem()

    @property
    def constraints(self) -> int:
        return len(self.b) + len(self.g)

    def _solve(self, problem) -> tuple[np.ndarray | None, str]:
        try:
            problem.solve(solver=self.solver)
        except cp.error.SolverError as error:
            return None, f"solver_error: {error}"
        if problem.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE) or self.theta.value is None:
            return None, str(problem.status)
        return np.array(self.theta.value), str(problem.status)

    def min_norm_point(self) -> tuple[np.ndarray | None, dict]:
        """Θ̄ = argmin ‖Θ‖_F over K (elastic), and what the solve found.

        The info dict holds the solver status and ``inconsistent``, the
        number of constraints the point violates (0 when K is non-empty).
        """
        point, status = self._solve(self.min_norm_problem)
        info = {"solver_status": status, "constraints": self.constraints}
        if point is None:
            return None, info
        slab_slack, half_slack = (np.zeros(0) if s.value is None else np.asarray(s.value) for s in self._slacks)
        info["inconsistent"] = int(np.sum(slab_slack > _SLACK_TOLERANCE) + np.sum(half_slack > _SLACK_TOLERANCE))
        if info["inconsistent"]:
            self._drop_violated(slab_slack > _SLACK_TOLERANCE, half_slack > _SLACK_TOLERANCE)
        return point, info

    def _drop_violated(self, slab_violated: np.ndarray, half_violated: np.ndarray) -> None:
        """Remove the constraints the elastic solve had to violate, so K is non-empty."""
        self.E, self.b, self.t = self.E[~slab_violated], self.b[~slab_violated], self.t[~slab_violated]
        self.H, self.g = self.H[~half_violated], self.g[~half_violated]
        self.support_problem = self._support_problem()

    def _support_problem(self) -> cp.Problem:
        """min ⟨direction, Θ⟩ over K's current constraints, the direction a parameter."""
        hard = [cp.norm(self.theta, 2) <= self.radius]
        if len(self.b):
            hard += [cp.abs(self.E @ self.theta - self.b) <= self.t]
        if len(self.g):
            hard += [self.H @ self.theta <= self.g]
        return cp.Problem(cp.Minimize(self.direction @ self.theta), hard)

    def certify(self, directions: np.ndarray) -> np.ndarray:
        """Weak-duality lower bounds on min over K of ⟨c, Θ⟩ (see :func:`certify_margin`)."""
        return certify_margin(self.E, self.b, self.t, directions, self.radius)

    def support(self, direction: np.ndarray) -> tuple[float | None, str]:
        """min over Θ ∈ K of ⟨direction, Θ⟩ (the exact LP/SOCP; None when it fails)."""
        self.direction.value = np.asarray(direction, dtype=np.float64)
        point, status = self._solve(self.support_problem)
        return (None if point is None else float(self.direction.value @ point)), status


def certify_margin(E: np.ndarray, b: np.ndarray, t: np.ndarray, directions: np.ndarray, radius: float, *,
                   ridges=(1e-3, 1e-2, 1e-1), block: int = 1024) -> np.ndarray:
    """Lower bounds on min over Θ ∈ K of ⟨c, Θ⟩ for many directions c at once.

    Weak duality: for any multipliers u on the slabs ``|EΘ − b| ≤ t``, writing
    c = Eᵀu + r,

        ⟨c, Θ⟩ = uᵀEΘ + ⟨r, Θ⟩ ≥ uᵀb − Σ_r abs(u_r) t_r − ρ‖r‖      for every Θ ∈ K,

    because ‖Θ‖ ≤ ρ on K.  The multipliers are the weighted ridge solutions
    u = T⁻²E(EᵀT⁻²E + μI)⁻¹c for a few ridges μ (relative to the largest
    eigenvalue), all from one eigendecomposition; the best bound per
    direction is returned.  A bound ≥ γ certifies the row without a solver
    call, and never falsely: the bound is never above the LP's value
    (half-spaces are left out, which can only lower it).

    Parameters
    ----------
    E, b, t : the slabs of K.
    directions : (N, d²) the vectors c.
    radius : ρ, the radius of K's norm ball.
    """
    scaled_E, scaled_b = E / t[:, None], b / t
    eigenvalues, eigenvectors = np.linalg.eigh(scaled_E.T @ scaled_E)
    largest = max(float(eigenvalues[-1]), 1e-300)
    best = np.full(len(directions), -np.inf)
    for start in range(0, len(directions), block):
        rotated = directions[start:start + block] @ eigenvectors
        for ridge in ridges:
            shrunk = rotated / (eigenvalues + ridge * largest)  # (M + μI)⁻¹c in the eigenbasis
            scaled_u = scaled_E @ (shrunk @ eigenvectors.T).T  # T⁻¹E z; u = T⁻¹ · this
            value = scaled_b @ scaled_u - np.abs(scaled_u).sum(axis=0)  # uᵀb − |u|ᵀt
            remainder = ridge * largest * np.linalg.norm(shrunk, axis=1)  # ‖r‖ = μ‖z‖
            chunk = slice(start, start + block)
            best[chunk] = np.maximum(best[chunk], value - radius * remainder)
    return best
