"""The passes over a source that find agreement rows: decode every row of every block, keep the best.

:func:`find_agreement_rows` reads every block and keeps a share of each;
:func:`first_agreement_rows` stops at the block that completes the rows it
needs; :func:`draw_pool` is the pool of candidates phases 2 and 3 start from.
Each block is decoded by :func:`_agreement_block`: its residuals first
(:func:`~mhalearn.learners.chen_li.decoder.decoding_residuals`), then the
patterns of the rows it keeps.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from ...data.checkpoint import NoProgress
from ...data.scratch import ScratchArrays
from ...data.sources import kernel_tokens, stream_rows
from ...seeding import draw_seed
from ..report import Notifier, PassPosition, Phase
from .agreement_rows import (
    AgreementRows,
    accepted_entries,
    decoded_rows,
    joined_tokens,
    reachable_sequences,
    residual_reach,
    row_tokens,
    simplex_slack,
)
from .decoder import decoding_residuals


def find_agreement_rows(source, w_sum: np.ndarray, *, quantile: float | None = None,
                        residual_tol: float | None = None, simplex_tol: float,
                        max_rows: int | None = None, rng: np.random.Generator | None = None) -> AgreementRows:
    """Decode every row of ``source`` with Ŵ_Σ and keep the agreement rows.

    A row is accepted when its decoded pattern is within ``simplex_tol`` of
    the simplex and its relative residual is at most the threshold of its
    block: the ``quantile`` of the block's residuals (the best fraction of
    rows, used while Ŵ_Σ is crude, and to gather a pool of candidates),
    capped by ``residual_tol`` when both are given, or ``residual_tol`` alone
    (an absolute tolerance, once Ŵ_Σ is accurate).  Blocks are i.i.d., so a
    per-block quantile stands in for the global one and memory stays
    bounded.  ``max_rows`` caps the rows kept (each block keeps its
    proportional share, at random), so that at m = 1, where every row agrees,
    a million sequences do not give four million slabs.

    One pass of :func:`_agreement_block` over the source's blocks
    (``source.map_blocks``), their rows concatenated in block order.  The
    random share of block b comes from ``default_rng([seed, b])`` with one
    ``seed`` drawn from ``rng`` (when ``max_rows`` is given), so it does
    not depend on where or in which order the blocks run.
    :func:`first_agreement_rows` stops once it has ``max_rows`` rows instead.
    """
    rng = np.random.default_rng(0) if rng is None else rng
    seed = None if max_rows is None else draw_seed(rng)
    share = None if max_rows is None else (max_rows, source.samples)
    rule = BlockRule(w_sum, quantile=quantile, residual_tol=residual_tol, simplex_tol=simplex_tol, share=share,
                     seed=seed)
    parts = source.map_blocks(_agreement_block, rule, ScratchArrays(), None, indexed=True)
    return joined_rows(parts, sum(p.scanned for p in parts), sum(p.found for p in parts))


def first_agreement_rows(source, w_sum: np.ndarray, *, residual_tol: float, simplex_tol: float, max_rows: int,
                         rng: np.random.Generator) -> AgreementRows:
    """Rows within ``residual_tol`` (and ``simplex_tol`` of the simplex), the first ``max_rows`` found.

    Blocks are i.i.d., so the first ``max_rows`` agreement rows are a
    sample of them as good as a share of every block's
    (:func:`find_agreement_rows`), and the pass stops at the block that
    completes them: where agreement rows are plentiful (m ≤ 2) it reads a
    fraction of a long stream, and where they are rare it reads all of it.
    Block b's rows are taken in a random order drawn from
    ``default_rng([seed, b])`` (one ``seed`` from ``rng``), so the last block
    read gives a random subset of its rows, not its first ones.  The blocks
    are mapped in waves of ``source.wave_blocks`` (``source.map_until``),
    each block returning at most the rows still missing when its wave started; ``scanned`` and
    ``found`` count the rows of the blocks up to the one that completed
    them, so the result is the same whatever the wave size.
    """
    rule = BlockRule(w_sum, quantile=None, residual_tol=residual_tol, simplex_tol=simplex_tol, share=None,
                     seed=draw_seed(rng))
    taken = source.map_until(max_rows, _agreement_block, rule, ScratchArrays(), indexed=True)
    return joined_rows([block.subset(np.arange(take)) for block, take in taken],
                   sum(block.scanned for block, _ in taken), sum(block.found for block, _ in taken))


def joined_rows(parts: list, scanned: int, found: int) -> AgreementRows:
    """The blocks' agreement rows in block order, as one AgreementRows with these counts."""
    fields = ("query", "label", "pattern", "spread", "residual", "violation")
    return AgreementRows(joined_tokens([p.tokens for p in parts]),
                         *(np.concatenate([getattr(p, name) for p in parts]) for name in fields), scanned, found)


@dataclass(frozen=True)
class BlockRule:
    """How a pass of :func:`_agreement_block` accepts and keeps a block's rows, the same for every block.

    ``w_sum``: the Ŵ_Σ the rows are decoded with; ``quantile``,
    ``residual_tol``, ``simplex_tol``: the acceptance rule
    (:func:`~mhalearn.learners.chen_li.agreement_rows.accepted_entries`);
    ``share`` = (r, n): keep about r of n rows, each block its share, at
    random (None: keep every accepted row); ``seed``: the pass's seed of
    those random choices (None when there are none).
    """

    w_sum: np.ndarray
    quantile: float | None
    residual_tol: float | None
    simplex_tol: float
    share: tuple[int, int] | None
    seed: int | None


@contextmanager
def _block_residuals(X, Y, w_sum: np.ndarray, sequences: np.ndarray | None, scratch: ScratchArrays | None,
                     squares: bool = False):
    """:func:`~mhalearn.learners.chen_li.decoder.decoding_residuals` of a block's ``sequences`` (and, with
    ``squares``, every row's ‖y‖² after them), in arrays lent by ``scratch`` (None: new ones) for the ``with``
    body: what a block function returns holds no view of them."""
    n = len(X) if sequences is None else len(sequences)
    shapes = ((n, Y.shape[1]),) * (3 if squares else 2)
    with (scratch or ScratchArrays()).lent(*shapes) as out:
        residuals, violations = decoding_residuals(X, Y, w_sum, sequences, out=out[:2],
                                                   squares=out[2] if squares else None)
        yield (residuals, violations, *out[2:])


def _agreement_block(X: np.ndarray, Y: np.ndarray, sequences: np.ndarray | None, rule: BlockRule,
                     scratch: ScratchArrays | None, limit: int | None, index: int) -> AgreementRows:
    """The agreement rows of one block's ``sequences`` (indices into X and Y; None: all of them) under ``rule``
    (:func:`find_agreement_rows`, :func:`first_agreement_rows`).

    With ``rule.share`` = (r, n) the block keeps ⌈r · its sequences / n⌉ of them
    at random, in block order; with ``limit``, the first ``limit`` of them in a
    random order (both random orders from ``default_rng([rule.seed, index])``).
    ``scanned`` and ``found`` count the block's decoded and accepted rows.  ``scratch`` lends the
    residuals' and violations' arrays (None: new ones).
    """
    w_sum, seed = rule.w_sum, rule.seed
    with _block_residuals(X, Y, w_sum, sequences, scratch) as (residuals, violations):
        kept, query = accepted_entries(residuals, violations, rule.quantile, rule.residual_tol,
                                       rule.simplex_tol)  # kept: positions
        found = len(kept)
        if rule.share is not None:
            count = -(-rule.share[0] * residuals.shape[0] // rule.share[1])
            if found > count:
                pick = np.sort(np.random.default_rng([seed, index]).choice(found, count, replace=False))
                kept, query = kept[pick], query[pick]
        if limit is not None:
            # A random order, whatever the limit: a shorter limit keeps a prefix of the same rows.
            pick = np.random.default_rng([seed, index]).permutation(found)[:limit]
            kept, query = kept[pick], query[pick]
        if sequences is not None:
            kept = sequences[kept]
        # Decoding a row alone repeats the pass's arithmetic: the same residual and violation, to the bit.
        return decoded_rows(row_tokens(X, kept), query.astype(np.int64), Y[kept, query], w_sum, residuals.size,
                            found)


def draw_pool(source, w_sum: np.ndarray, *, pool_fraction: float, simplex_tol: float, max_pool: int | None,
              min_share: float = 0.0, rng: np.random.Generator | None = None) -> AgreementRows:
    """Candidate agreement rows: the best rows of every block under Ŵ_Σ, about ``max_pool`` in all.

    Each block keeps its best share min(``pool_fraction``, max(``max_pool`` /
    rows of the source, ``min_share``)) by relative residual.  Down to
    ``min_share`` a longer stream gives a more selective pool rather than a
    random subsample of a loose one: at m = 3 agreement rows are ~10⁻⁴ of all
    rows, and a random cap would throw most of them away.  Below it — the
    pool drawn under the crude Ŵ_Σ, which ranks rows too roughly for a finer
    selection to hold more agreement rows — the best ``min_share`` is kept and
    randomly capped at ``max_pool``, so the pool is distributed as on the
    shortest stream that fills it.  With ``pool_fraction = 1`` (m = 1: every
    row agrees) the pool is a random sample of ``max_pool`` rows, so that it
    is not biased towards the rows the crude Ŵ_Σ happens to fit.  The
    simplex test is ten times looser than for acceptance, since the patterns
    of a candidate move as Ŵ_Σ is refined (phase 3).
    """
    share = pool_fraction
    if pool_fraction < 1.0 and max_pool is not None:
        budget = max_pool / (source.samples * source.length)
        share = min(pool_fraction, max(budget, min_share))
        if share <= budget:
            max_pool = None
    return find_agreement_rows(source, w_sum, quantile=share, simplex_tol=10 * simplex_tol,
                               max_rows=max_pool, rng=rng)


#: Waves of the candidate pass, in ``source.wave_blocks``.
CANDIDATE_WAVE = 8


def reachable_rows(source, w_sum: np.ndarray, *, threshold: float, radius: float, simplex_tol: float,
                   max_rows: int, progress=NoProgress(), number: int = 1,
                   notify=Notifier(None)) -> tuple[AgreementRows, float]:
    """The candidate pass: every row whose relative residual can be ≤ ``threshold`` under some Ŵ'_Σ with
    ‖Ŵ'_Σ − Ŵ_Σ‖₂ ≤ ``radius``, and the radius the rows kept cover.

    A row's residual moves by at most a Lipschitz bound in Ŵ_Σ (the one
    :class:`~mhalearn.learners.chen_li.agreement_rows.AgreementRows`'s
    ``best_under`` uses): with A = 1 + 2k·``simplex_tol``,

        r(Ŵ'_Σ) ≥ r(Ŵ_Σ) − A · max_j ‖x_j‖ / ‖y_ℓ‖ · ‖Ŵ'_Σ − Ŵ_Σ‖₂,

    so the row is needed only from the radius (r(Ŵ_Σ) − ``threshold``) /
    (A · max_j ‖x_j‖ / ‖y_ℓ‖) on (:func:`reachable_block`), and every row
    needed within ``radius`` is kept.  The simplex test is ten times looser
    than for acceptance, as the pools' is, since a pattern moves with Ŵ_Σ.
    One pass over the blocks, in waves of :data:`CANDIDATE_WAVE` × ``source.wave_blocks``; when more
    than ``max_rows`` rows are needed, those needed from the smallest radius
    are kept and the radius covered is the smallest of the rows dropped
    (every row needed below it is kept), so
    memory stays bounded by 1.25 × ``max_rows`` rows and a wave's.  Rows are in
    block order; ``scanned`` counts every row of the stream and ``found``
    the rows needed within ``radius``.

    ``progress`` (:meth:`~mhalearn.data.checkpoint.PhaseCheckpoint.progress`)
    keeps what the pass holds after a wave, as pass ``number`` of its
    phase, when a save is due and at the end; a pass with the same inputs
    resumes after the last wave kept and returns what an uninterrupted
    pass returns, to the bit (what it holds after the wave, cut or not, in
    block order).  ``notify`` is told where the pass stands after every
    wave (``Phase.PASS``, :class:`~mhalearn.learners.report.PassPosition`
    of phase 3, the phase whose refit the pass serves).
    """
    inputs = {"w_sum": w_sum, "threshold": threshold, "radius": radius, "simplex_tol": simplex_tol,
              "max_rows": max_rows, "blocks": source.block_count}
    start, observed = time.perf_counter(), notify.seconds  # the observers' time is not the pass's
    state = progress.load(number, inputs) or {"next_block": 0, "covered": radius, "found": 0,
                                              "parts": [], "needs": [], "seconds": 0.0}
    covered, found, parts, needs = state["covered"], state["found"], state["parts"], state["needs"]
    # Waves longer than a pass that may stop early maps: this one never stops, and each wave costs a
    # scheduler round trip that leaves the workers idle (8 blocks a wave took 1.4× the time of one map on
    # one Dask worker); 64 blocks hold ~50 MB of rows at m = 3.
    wave_blocks = CANDIDATE_WAVE * source.wave_blocks
    scratch = ScratchArrays()  # a block's residuals and violations, in lent arrays rather than fresh pages
    for first in range(state["next_block"], source.block_count, wave_blocks):
        wave = range(first, min(first + wave_blocks, source.block_count))
        for rows, need, needed in source.map_blocks(reachable_block, w_sum, threshold, radius, covered,
                                                     simplex_tol, scratch, blocks=wave):
            keep = need < covered if covered < radius else need <= radius  # the radius may have shrunk
            parts.append(rows.subset(keep))
            needs.append(need[keep])
            found += needed
        last = wave.stop == source.block_count
        # A cut sorts and copies every row held (~1 GB at the default cap, against the half-million
        # sequences a wave decodes), so once the cap is reached it waits for a quarter of the cap to come
        # in; the last cut keeps what cutting every wave would (see _cut).
        if sum(len(need) for need in needs) > max_rows + (0 if last else max_rows // 4):
            part, need, covered = _cut(parts, needs, max_rows)
            parts, needs = [part], [need]
        seconds = state["seconds"] + time.perf_counter() - start - (notify.seconds - observed)
        if last or progress.due():
            progress.save(number, inputs, {"next_block": wave.stop, "covered": covered, "found": found,
                                           "parts": parts, "needs": needs, "seconds": seconds})
        notify(Phase.PASS, PassPosition(Phase.REFINED_SUM, number, wave.stop, source.block_count,
                                        state["next_block"], seconds))
    rows = joined_rows(parts, source.samples * source.length, found)
    return rows, covered


def _cut(parts: list, needs: list, max_rows: int) -> tuple[AgreementRows, np.ndarray, float]:
    """The ``max_rows`` rows needed from the smallest radius, in block order, their needs, and the radius
    covered: the need of the first row dropped.

    Rows are ranked by need, then by their place in the stream (a stable
    sort of rows in block order), so the rows kept are the first
    ``max_rows`` of all the rows ever held in that order, however often
    the pass cut: a row it let in after a cut had a need below the radius
    then covered, and one it kept out had one at or above it, ranked after
    every row then kept.
    """
    joined = np.concatenate(needs)
    order = np.argsort(joined, kind="stable")
    keep = np.zeros(len(joined), dtype=bool)
    keep[order[:max_rows]] = True  # every row needed below the radius covered is among them
    return joined_rows(parts, 0, 0).subset(keep), joined[keep], float(joined[order[max_rows]])


#: Relative slack of :func:`~mhalearn.learners.chen_li.agreement_rows.reachable_sequences`'s test over
#: :func:`reachable_block`'s: far above the rounding of two orders of summing 2d squares.
_REACH_SLACK = 1e-9


def reachable_block(X: np.ndarray, Y: np.ndarray, sequences: np.ndarray | None, w_sum: np.ndarray,
                     threshold: float, radius: float, covered: float, simplex_tol: float,
                     scratch: ScratchArrays | None = None) -> tuple[AgreementRows, np.ndarray, int]:
    """One block's rows needed within ``covered`` (:func:`reachable_rows`), decoded, the radius each is
    needed from, and how many rows are needed within ``radius`` (the pass's ``found``).

    A row's reach (:func:`~mhalearn.learners.chen_li.agreement_rows.residual_reach`) is computed only for
    the sequences a looser test does not rule out
    (:func:`~mhalearn.learners.chen_li.agreement_rows.reachable_sequences`, a few in a hundred at m ≥ 3):
    NumPy's reductions over the block cost half as much as decoding it.  The needs are those of every
    row's reach, to the bit.  ``scratch`` lends the residuals' and violations' arrays (None: new ones).
    """
    with _block_residuals(X, Y, w_sum, sequences, scratch, squares=True) as (residuals, violations, squares):
        slack = simplex_slack(X.shape[1], simplex_tol)
        boolean = getattr(X, "codes", None) is not None  # a CodedTokens block: Boolean tokens, X not read
        maybe = reachable_sequences(residuals, violations, kernel_tokens(X, codes_suffice=boolean), boolean,
                                    squares, stream_rows(sequences, len(X)), threshold,
                                    radius * slack * (1.0 + _REACH_SLACK), 10 * simplex_tol)
        # A row with no finite residual (y = 0) can never be accepted.
        usable = (violations[maybe] <= 10 * simplex_tol) & np.isfinite(residuals[maybe])
        at = maybe if sequences is None else sequences[maybe]
        tokens, labels = row_tokens(X, at), Y[at]
        reach = slack * residual_reach(tokens, labels)
        with np.errstate(divide="ignore", invalid="ignore"):
            need = np.maximum(residuals[maybe] - threshold, 0.0) / reach
        needed = usable & (need <= radius)
        kept, query = np.nonzero(needed & (need <= covered))
        rows = decoded_rows(row_tokens(tokens, kept), query.astype(np.int64), labels[kept, query], w_sum,
                            residuals.size, len(kept))
        return rows, need[kept, query], int(np.count_nonzero(needed))
