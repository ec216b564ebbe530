"""Phase 3 of Chen & Li's learner: refine Ŵ_Σ — the paper's certified refit, then ours.

Phase 2 decodes rows with Ŵ_Σ, so Ŵ_Σ must be accurate to a few per cent
before the body carries the span ([decision: agreement-rows]).  Phase 3 improves
the crude estimate of phase 1:

- the paper's certified refit: rows to which the minimum-norm point Θ̄ of
  the crude body gives one token j* a clear margin are certified by LP
  against the body (every head in K puts ≥ 1 − η on j*:
  :func:`certify_rows`), and Ŵ_Σ is refitted by least squares of y_ℓ on
  x_{j*} (:func:`certified_projection_sum`).  Biased by the ≤ η weight off
  j*, so it stalls at a few per cent;
- *ours*, not in the paper: on a true agreement row y_ℓ = (âᵀX)W_Σ is
  linear in W_Σ, so decoding and refitting on the accepted rows alternate
  until Ŵ_Σ stops moving
  (:func:`~mhalearn.learners.chen_li.alternating_refit.alternating_projection_sum`).

:func:`refine_projection_sum` is the phase; its result says which refit
moved Ŵ_Σ.

Reference: Chen, S. & Li, Y., *Provably learning a multi-head attention layer*.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass

import numpy as np
from numba import njit

from ..._exp import exp_nonpositive
from ..._numba import DISPATCH, chunk_count, new_counter, next_chunk, thread_driver
from ...data.checkpoint import NoProgress
from ...data.phase_files import register_kept
from ...data.sources import kernel_tokens, stream_rows
from ...data.token_codes import code_groups, sequence_codes
from ..least_squares import least_squares
from ..report import Notifier, PhaseResult, data_field, detail_line
from .agreement_passes import reachable_rows
from .agreement_rows import AgreementRows
from .alternating_refit import AlternatingRefit, StreamRefit, alternating_projection_sum
from .body import ConvexBody
from .phase2_sculpt import SculptedBody
from .settings import BodySettings
from .sign_tables import (
    BILINEAR_GROUPS,
    bilinear_form,
    bilinear_tables,
    group_identical_tokens,
    sign_tables,
    token_times,
)

# ------------------------------------------------------------ the paper's refit

@register_kept
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

    def first(self, count: int) -> "MarginRows":
        """The first ``count`` rows; ``scanned`` is kept."""
        return MarginRows(tokens=self.tokens[:count], query=self.query[:count], top=self.top[:count],
                          label=self.label[:count], scanned=self.scanned)

    def directions(self) -> tuple[np.ndarray, np.ndarray]:
        """vec(x_ℓ (x_{j*} − x_j)ᵀ) for every token j distinct from x_{j*}, and its row."""
        index = np.arange(len(self))
        queries = self.tokens[index, self.query]
        differences = self.tokens[index, self.top][:, None, :] - self.tokens  # (c, k, d)
        row, token = np.nonzero(np.any(differences != 0, axis=-1))
        d = self.tokens.shape[2]
        return (queries[row][:, :, None] * differences[row, token][:, None, :]).reshape(-1, d * d), row


#: How much closer than γ a competitor's logit must come before :func:`margin_mass` skips a row: the row's
#: mass is then below the floor by a relative 10⁻⁶·(1 − floor), where rounding moves it by 10⁻¹⁵.
_GAP_SLACK = 1e-6


@njit(cache=True, nogil=True)
def _margin_mass_worker(X, codes, rows, theta, tables, forms, floor_gap, chunks, counter, top, mass):
    # Output i is sequence rows[i] (a block's training rows, read where they lie).  ``forms`` are
    # bilinear_tables(Θ), or empty beyond BILINEAR_GROUPS groups; without them, or for a sequence with
    # a token that is not Boolean, the logits are (x_ℓ Θ) · x_j with x_ℓ Θ from sign_tables(Θ) (``tables``).
    # ``codes``: the codes of X's tokens, all Boolean, from the source (as the decoder's), or None.
    n = rows.shape[0]
    k, d = X.shape[1], X.shape[2]
    group = np.empty(k, dtype=np.int64)
    first = np.empty(k, dtype=np.int64)
    own_codes = np.empty((k, code_groups(d)), dtype=np.int64)
    queries = np.empty((k, d))  # x_ℓ Θ for every row ℓ
    logits = np.empty((k, k))
    weights = np.empty(k)
    chunk = next_chunk(counter)
    while chunk < chunks:
        for out in range(chunk * n // chunks, (chunk + 1) * n // chunks):
            s = rows[out]
            if codes is not None and forms.shape[0] > 0:
                _logits_by_forms(codes[s], forms, group, first, logits)
            elif forms.shape[0] > 0 and sequence_codes(X[s], own_codes):
                _logits_by_forms(own_codes, forms, group, first, logits)
            else:
                _logits_by_products(X[s], own_codes, tables, theta, group, first, queries, logits)
            for row in range(k):
                best = 0  # the first token of the largest logit
                for j in range(1, k):
                    if logits[row, j] > logits[row, best]:
                        best = j
                top[out, row] = best
                peak = logits[row, best]
                # A distinct token within ``floor_gap`` of the peak leaves the copies of j* short of the
                # floor (margin_mass): most rows stop here, before their k exponentials.
                close = 0
                for j in range(k):
                    close += (logits[row, j] > peak - floor_gap) & (group[j] != group[best])
                if close:
                    mass[out, row] = np.nan
                    continue
                total = 0.0
                for j in range(k):
                    weights[j] = exp_nonpositive(logits[row, j] - peak)
                    total += weights[j]
                scale = 1.0 / total  # one division, not k
                on_best = 0.0
                for j in range(k):
                    if group[j] == group[best]:
                        on_best += weights[j] * scale
                mass[out, row] = on_best
        chunk = next_chunk(counter)


@njit(inline="always", cache=True)
def _logits_by_forms(codes, forms, group, first, logits):
    """The classes of identical Boolean tokens given by their ``codes`` (k, groups) and
    logits[ℓ, j] = x_ℓ Θ x_jᵀ from ``forms`` = bilinear_tables(Θ)."""
    k = codes.shape[0]
    group_identical_tokens(codes, group, first)
    for row in range(k):
        for j in range(k):
            logits[row, j] = bilinear_form(forms, codes[row], codes[j])


@njit(cache=True, nogil=True)
def _logits_by_products(x, codes, tables, theta, group, first, queries, logits):
    """The classes of identical tokens of ``x`` (k, d) and logits[ℓ, j] = (x_ℓ Θ) · x_j, with the queries
    x_ℓ Θ from the sign tables of Θ (``tables``) or multiply-adds.

    The margin kernel's path without bilinear tables, or for a sequence with a token that is not
    Boolean; not inlined, so that its code stays out of the loop of the Boolean path.  The k sums of
    a row run four side by side: each is a chain of dependent additions, and side by side they overlap.
    """
    k, d = x.shape
    group_identical_tokens(x, group, first)
    for row in range(k):
        token_times(x[row], codes[row], tables, theta, queries[row])
    for row in range(k):
        for j0 in range(0, k, 4):
            first_sum = second_sum = third_sum = fourth_sum = 0.0
            last = min(j0 + 4, k) - 1
            for e in range(d):
                q = queries[row, e]
                first_sum += q * x[j0, e]
                if last > j0:
                    second_sum += q * x[j0 + 1, e]
                if last > j0 + 1:
                    third_sum += q * x[j0 + 2, e]
                if last > j0 + 2:
                    fourth_sum += q * x[j0 + 3, e]
            logits[row, j0] = first_sum
            if last > j0:
                logits[row, j0 + 1] = second_sum
            if last > j0 + 1:
                logits[row, j0 + 2] = third_sum
            if last > j0 + 2:
                logits[row, j0 + 3] = fourth_sum


_margin_mass_parallel = thread_driver(_margin_mass_worker)


def margin_mass(X: np.ndarray, theta: np.ndarray, rows: np.ndarray | None = None,
                floor: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The top token of every row under Θ and the attention mass on its copies.

    Parameters
    ----------
    X : (n, k, d) sequences.
    theta : (d, d) the attention matrix Θ.
    rows : sorted indices into X, optional
        Only those sequences, read where they lie (outputs indexed by
        position in ``rows``); default every sequence.
    floor : float in (0, 1), optional
        Compute the mass only where it may reach ``floor``.  With c copies
        of x_{j*} and a distinct token j at logit gap g below the peak,
        mass = c / Σ_j e^{−g_j} ≤ k / (k + e^{−g}), so a gap below
        γ = log(floor / ((1 − floor) k)) puts the mass below ``floor``; rows
        with a gap below γ − 10⁻⁶ (a margin far beyond the logits' rounding)
        get NaN, and the others their mass.  The margin pass sets it to
        1 − η: most rows then stop before their k exponentials.

    Returns
    -------
    top : (n, k) int64 — j*, the token of largest logit in x_ℓᵀ Θ Xᵀ, hence of
        largest weight in softmax(x_ℓᵀ Θ Xᵀ) (the first of equal logits).
    mass : (n, k) — the weight of the tokens identical to x_{j*} (NaN where
        it is below ``floor``, when given).
    """
    _, k, d = X.shape
    rows = stream_rows(rows, X.shape[0])
    n = len(rows)
    top = np.empty((n, k), dtype=np.int64)
    mass = np.empty((n, k))
    codes = getattr(X, "codes", None)  # a CodedTokens block (mhalearn.data.sources)
    theta = np.ascontiguousarray(theta, dtype=np.float64)
    floor_gap = -math.inf if floor is None else math.log(floor / ((1.0 - floor) * k)) - _GAP_SLACK
    forms = bilinear_tables(theta) if code_groups(d) <= BILINEAR_GROUPS else np.empty((0, 0, 0, 0))
    # The worker reads X only where it has no codes or no bilinear tables.
    X = kernel_tokens(X, codes_suffice=codes is not None and forms.shape[0] > 0, dtype=np.float64)
    DISPATCH.run("margin_mass", n * k * d * (d + k), _margin_mass_worker, _margin_mass_parallel, X, codes, rows,
                 theta, sign_tables(theta), forms, floor_gap, chunk_count(n), new_counter(), top, mass)
    return top, mass


def margin_rows(source, theta: np.ndarray, eta: float, max_rows: int) -> MarginRows:
    """Rows where softmax(x_ℓᵀ Θ Xᵀ) puts ≥ 1 − η on the copies of one token j*.

    Keeps at most ``max_rows``: the first found in block order (blocks being
    i.i.d.), and ``scanned`` counts the rows of the blocks read up to the
    one that completed them.  The blocks are mapped (:func:`_margin_block`)
    in waves of ``source.wave_blocks`` (``source.map_until``); each block of a
    wave returns at most the rows still missing when the wave started, so no
    more than ``max_rows`` rows per block come back, and the pass stops
    after the wave that completes them.
    """
    theta = theta.reshape(source.dim, source.dim)
    taken = source.map_until(max_rows, _margin_block, theta, eta)
    parts = [block.first(take) for block, take in taken]
    return MarginRows(**{name: np.concatenate([getattr(part, name) for part in parts])
                         for name in ("tokens", "query", "top", "label")},
                      scanned=sum(block.scanned for block, _ in taken))


def _margin_block(X: np.ndarray, Y: np.ndarray, rows: np.ndarray | None, theta: np.ndarray, eta: float,
                  limit: int) -> MarginRows:
    """The first ``limit`` margin rows of one block's ``rows`` (:func:`margin_rows`); ``scanned`` counts all."""
    top, mass = margin_mass(X, theta, rows, floor=1.0 - eta)
    positions, query = np.nonzero(mass >= 1.0 - eta)  # NaN (below the floor) compares False
    positions, query = positions[:limit], query[:limit]
    samples = positions if rows is None else rows[positions]
    return MarginRows(tokens=X[samples], query=query.astype(np.int64), top=top[positions, query].astype(np.int64),
                      label=Y[samples, query], scanned=mass.size)


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


# ------------------------------------------------------------ the phase

@dataclass(frozen=True, kw_only=True)
class CertifiedRefit(PhaseResult):
    """The paper's step: ``candidates`` margin rows of Θ̄, ``certified`` of them by LP, Ŵ_Σ refitted or not.

    Data: the margin rows, the certified mask and η (what an observer needs
    to check the certificates from outside), and the refitted Ŵ_Σ.
    """

    candidates: int
    certified: int
    refitted: bool
    margin: MarginRows = data_field()
    certified_mask: np.ndarray = data_field()
    eta: float = data_field()
    w_sum: np.ndarray | None = data_field()

    name = "certified rows (Chen & Li)"


@dataclass(frozen=True, kw_only=True)
class RefinedSum(PhaseResult):
    """Phase 3's result: Ŵ_Σ after the paper's certified refit and our alternating refit.

    ``solver_status``, ``inconsistent`` (constraints the elastic minimum-norm
    solve had to drop) and ``theta_bar_norm`` describe the crude body's
    minimum-norm point Θ̄; ``failure`` says why there was no certified refit;
    ``moved_by`` which refit the final Ŵ_Σ comes from; ``steps`` the steps
    that ran; ``prefix_labels`` what a generated stream kept of the labels
    of the prefix phases 1–3 read (a generated source's ``keeping_labels``;
    None when the source's labels are read, not computed).  Data: Ŵ_Σ and Θ̄.
    """

    solver_status: str | None
    inconsistent: int | None
    theta_bar_norm: float | None
    failure: str | None
    moved_by: str
    steps: tuple
    prefix_labels: str | None = None
    w_sum: np.ndarray = data_field()
    theta_bar: np.ndarray | None = data_field()

    columns = ("moved_by", "solver_status", "inconsistent", "failure")

    def detail_lines(self) -> list[str]:
        labels = [] if self.prefix_labels is None else [detail_line("prefix labels", self.prefix_labels)]
        return [*labels, *(detail_line(step.name, step.summary()) for step in self.steps)]

    @property
    def candidates(self) -> AgreementRows | None:
        """The candidate pass's rows, where phase 4 reads K* (None: phase 4 reads the stream)."""
        return next((step.rows for step in self.steps if isinstance(step, StreamRefit)), None)


def _certified_refit(source, body: ConvexBody, theta_bar: np.ndarray, settings: BodySettings) -> CertifiedRefit:
    """The paper's refit: margin rows of Θ̄, certified by LP against the body, least squares on x_{j*}."""
    start = time.perf_counter()
    candidates = margin_rows(source, theta_bar, settings.certify_slack, settings.max_rows)
    certified = certify_rows(body, candidates, certification_margin(settings.certify_slack, source.length))
    w_sum = certified_projection_sum(candidates, certified)
    return CertifiedRefit(seconds=time.perf_counter() - start, candidates=len(candidates),
                          certified=int(certified.sum()), refitted=w_sum is not None, margin=candidates,
                          certified_mask=certified, eta=settings.certify_slack, w_sum=w_sum)


def refine_projection_sum(source, heads: int, crude: SculptedBody, w_sum: np.ndarray, settings: BodySettings,
                          rng: np.random.Generator) -> RefinedSum:
    """Phase 3: Θ̄ of the crude body, the paper's certified refit, then our alternating refit.

    Parameters
    ----------
    source : the examples (:mod:`mhalearn.data.sources`).
    heads : m.
    crude : phase 2's result under the crude Ŵ_Σ (its slabs make the crude
        body; its pool starts our refit when the paper's did not refit).
    w_sum : the crude Ŵ_Σ of phase 1.
    settings : phases 1–4's hyper-parameters (``certify_slack``, ``max_rows``,
        ``max_constraints``, ``norm_bound``, ``refit_iterations``, ...).
    rng : random generator (the subsets of constraints and of rows).
    """
    start = time.perf_counter()
    slabs, steps = crude.slabs, []
    theta_bar, failure, solve = None, None, {}
    dim2 = source.dim ** 2
    if slabs.equalities < dim2:
        failure = f"too few equalities for a body ({slabs.equalities} < d² = {dim2}): no certified refit"
    else:
        body = ConvexBody(slabs, settings.norm_bound, max_constraints=settings.max_constraints, rng=rng)
        theta_bar, solve = body.min_norm_point()
        if theta_bar is None:
            failure = f"minimum-norm problem {solve['solver_status']}: no certified refit"
        else:
            steps.append(_certified_refit(source, body, theta_bar, settings))
    certified_sum = steps[0].w_sum if steps else None
    refined = w_sum if certified_sum is None else certified_sum
    if settings.refit_iterations > 0:
        step_start = time.perf_counter()
        refined, history = alternating_projection_sum(
            source, refined, quantile=settings.quantile_for(heads), iterations=settings.refit_iterations,
            refit_rows=settings.refit_rows, rounds=settings.refit_rounds,
            pool_fraction=settings.pool_fraction_for(heads), simplex_tol=settings.simplex_tol,
            max_pool=settings.max_pool_for(heads), pool=None if certified_sum is not None else crude.pool,
            rng=rng)
        steps.append(AlternatingRefit(
            seconds=time.perf_counter() - step_start, start="crude" if certified_sum is None else "certified",
            iterations=len(history), rounds=history[-1]["round"] if history else 0,
            agreement_fit=history[-1]["agreement_fit"] if history else math.nan,
            kept_residual=history[-1]["kept_residual"] if history else math.nan,
            stopped=history[-1]["stopped"] if history else "no iteration",
            w_sum=refined))
    return RefinedSum(seconds=time.perf_counter() - start, solver_status=solve.get("solver_status"),
                      inconsistent=solve.get("inconsistent"),
                      theta_bar_norm=None if theta_bar is None else float(np.linalg.norm(theta_bar)),
                      failure=failure, moved_by=_mover(steps, w_sum, refined), steps=tuple(steps), w_sum=refined,
                      theta_bar=theta_bar)


def refit_on_stream(source, heads: int, refined: RefinedSum, settings: BodySettings,
                    progress=NoProgress(), notify=Notifier(None)) -> RefinedSum:
    """Phase 3 on a stream longer than the prefix it read: our refit goes on over the whole stream.

    The candidate pass
    (:func:`~mhalearn.learners.chen_li.agreement_passes.reachable_rows`) keeps
    every row that a Ŵ_Σ within ``candidate_radius`` of ``refined``'s could
    select — relative residual at most the larger of ``residual_tol`` (phase
    4's rows of K*) and the largest residual of the prefix refit's last kept
    rows (the stream, a superset of the prefix, has its count-th smallest
    residual below that) — and our alternating refit goes on, in memory, on
    those rows, drawing no new pool (they hold every row a pool could).  If
    Ŵ_Σ leaves the radius covered, or a selection's residuals rise above the
    threshold, one more pass reads the stream around the new Ŵ_Σ.  Returns
    ``refined`` with this step added and its Ŵ_Σ.  ``progress`` keeps where
    each pass stands, so that an interrupted one resumes
    (:class:`~mhalearn.data.checkpoint.PassProgress`), and ``notify``
    is told where each pass stands after every wave (``Phase.PASS``).
    """
    start, observed = time.perf_counter(), notify.seconds
    last = next((step for step in reversed(refined.steps) if isinstance(step, AlternatingRefit)), None)
    threshold = settings.residual_tol
    if last is not None and np.isfinite(last.kept_residual):
        threshold = max(threshold, last.kept_residual)
    centre, passes = refined.w_sum, 0
    while True:
        scale = np.linalg.norm(centre, 2)
        rows, covered = reachable_rows(source, centre, threshold=threshold, radius=settings.candidate_radius * scale,
                                       simplex_tol=settings.simplex_tol, max_rows=settings.max_candidate_rows,
                                       progress=progress, number=passes + 1, notify=notify)
        passes += 1
        outside = []

        def watch(iteration, w_sum, kept, centre=centre, covered=covered):
            if np.linalg.norm(w_sum - centre, 2) >= covered or (len(kept) and kept.residual.max() > threshold):
                outside.append(iteration)

        w_sum, history = alternating_projection_sum(
            None, centre, quantile=settings.quantile_for(heads), iterations=settings.refit_iterations,
            refit_rows=settings.refit_rows, rounds=1, pool_fraction=settings.pool_fraction_for(heads),
            simplex_tol=settings.simplex_tol, pool=rows, callback=watch)
        moved = np.linalg.norm(w_sum - centre, 2)
        exact = bool(not outside and moved < covered)
        if exact or passes >= 2:
            break
        centre = w_sum
    # A pass resumed from ``progress`` counts the seconds its kept part took, as a kept phase does.
    step = StreamRefit(seconds=time.perf_counter() - start - (notify.seconds - observed) + progress.loaded_seconds,
                       passes=passes,
                       candidates=len(rows), threshold=threshold, radius=covered / scale, moved=moved / scale,
                       exact=exact,
                       iterations=len(history), agreement_fit=history[-1]["agreement_fit"] if history else math.nan,
                       stopped=history[-1]["stopped"] if history else "no iteration", w_sum=w_sum, rows=rows)
    steps = (*refined.steps, step)
    # "none" only when neither the prefix's refits nor this one moved the crude Ŵ_Σ.
    crude = refined.w_sum if refined.moved_by == "none" else None
    return dataclasses.replace(refined, seconds=refined.seconds + step.seconds, steps=steps, w_sum=w_sum,
                               moved_by=_mover(steps, crude, w_sum))


def _mover(steps, crude: np.ndarray, refined: np.ndarray) -> str:
    """Which refit the final Ŵ_Σ comes from: the paper's certified one, ours, both or neither."""
    if refined is crude:
        return "none"
    certified = any(isinstance(step, CertifiedRefit) and step.refitted for step in steps)
    alternating = any(isinstance(step, (AlternatingRefit, StreamRefit)) for step in steps)
    if certified and alternating:
        return "certified rows (Chen & Li), then alternating refit (ours)"
    return "certified rows (Chen & Li)" if certified else "alternating refit (ours)"
