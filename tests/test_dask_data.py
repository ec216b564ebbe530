"""Examples as Dask arrays: the block passes, the lazy datasets and SculptLearner.fit on them.

The reference for every pass is the same pass run block by block in this
process (TeacherSource / ArraySource on the same blocks): the Dask runs must
give the same bits whatever the scheduler and the number of workers.
"""

import multiprocessing
import threading
import time
import tracemalloc
import warnings
from concurrent.futures import ProcessPoolExecutor

import dask
import dask.array as da
import numpy as np
import pytest
from dask.array.core import PerformanceWarning
from threadpoolctl import threadpool_limits

import mhalearn
from mhalearn._memory import MemoryBudgetError, memory_budget
from mhalearn.attention.data import labelled_block, load_dataset
from mhalearn.attention.teacher_source import TeacherSource
from mhalearn.data.dask_data import DaskSource, dask_statistics, split_blocks
from mhalearn.data.fit_data import check_dask_pair, root_mean_square
from mhalearn.data.sources import BLOCK_SIZE, ArraySource, CodedTokens, held_out_counts
from mhalearn.learners.chen_li import agreement_passes, agreement_rows, decoder, phase1_crude_sum, phase3_refine_sum
from mhalearn.learners.chen_li.fit import sculpt_span
from mhalearn.learners.chen_li.phase6_select import certificate_bounds
from mhalearn.learners.chen_li.settings import BodySettings
from mhalearn.seeding import draw_seed

# One xdist worker runs this module: the process pool and the synchronous reference fit are module fixtures.
pytestmark = pytest.mark.xdist_group("dask_data")

HEADS, DIM, LENGTH, SAMPLES, CHUNK = 2, 7, 3, 3000, 700
TOL = BodySettings.simplex_tol
SCHEDULERS = ("sync", "threads", "processes")


@pytest.fixture(scope="module")
def process_pool():
    """Two worker processes for Dask's "processes" scheduler, started once (a new pool per pass is slow)."""
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        yield pool


def _scheduler(name: str, pool):
    return dask.config.set(scheduler=name, pool=pool) if name == "processes" else dask.config.set(scheduler=name)


@pytest.fixture(scope="module")
def teacher():
    return mhalearn.sample_teacher(HEADS, DIM, rng=11)


def _lazy(teacher, rng=5):
    """The lazy dataset and the seed its blocks are drawn with."""
    X, Y = mhalearn.make_dataset(teacher, SAMPLES, LENGTH, rng=rng, chunks=CHUNK)
    return X, Y, draw_seed(np.random.default_rng(rng))


def _pass_results(source, teacher) -> dict:
    """Every pass of phases 1–3 on ``source``, as named arrays (the random caps and the waves triggered)."""
    w_sum = phase1_crude_sum.crude_projection_sum(source).w_sum
    rows = agreement_passes.find_agreement_rows(source, w_sum, quantile=0.2, max_rows=300,
                                                rng=np.random.default_rng(1), simplex_tol=TOL)
    margin = phase3_refine_sum.margin_rows(source, teacher.thetas[0], 0.2, 1500)
    first = agreement_passes.first_agreement_rows(source, w_sum, residual_tol=0.05, max_rows=500,
                                                  rng=np.random.default_rng(2), simplex_tol=TOL)
    results = {"w_sum": w_sum, "scanned": rows.scanned, "found": rows.found, "margin_scanned": margin.scanned,
               "first_scanned": first.scanned, "first_found": first.found, "first_tokens": first.tokens,
               "first_query": first.query}
    results.update({f"rows_{name}": getattr(rows, name) for name in ("tokens", "query", "label", "pattern",
                                                                     "residual", "spread")})
    results.update({f"margin_{name}": getattr(margin, name) for name in ("tokens", "query", "top", "label")})
    return results


def _assert_same_bits(first: dict, second: dict):
    assert first.keys() == second.keys()
    for name in first:
        np.testing.assert_array_equal(first[name], second[name], err_msg=name)


def test_passes_give_the_same_bits_on_every_scheduler(teacher, process_pool):
    X, Y, seed = _lazy(teacher)
    with threadpool_limits(limits=1, user_api="blas"):
        reference = _pass_results(TeacherSource(teacher, SAMPLES, LENGTH, seed=seed, block_size=CHUNK), teacher)
        for scheduler in SCHEDULERS:
            with _scheduler(scheduler, process_pool):
                _assert_same_bits(_pass_results(DaskSource(X, Y), teacher), reference)
    # The caps and the early stop did their work: fewer rows kept than found, not every block read.
    assert len(reference["rows_query"]) <= 300 + 5 < reference["found"]
    assert len(reference["margin_query"]) == 1500 and reference["margin_scanned"] < SAMPLES * LENGTH
    # The per-block random cap depends on the pass's seed, not on the generator's later draws.
    other = agreement_passes.find_agreement_rows(ArraySource(*DaskSource(X, Y).head(SAMPLES), block_size=CHUNK),
                                                 reference["w_sum"], quantile=0.2, max_rows=300,
                                                 rng=np.random.default_rng(1), simplex_tol=TOL)
    np.testing.assert_array_equal(other.label, reference["rows_label"])


def test_crude_sum_matches_the_normal_equations_of_all_rows(teacher):
    X, Y, _ = _lazy(teacher)
    X, Y = X.compute(), Y.compute()
    mean = np.repeat(X.mean(axis=1), LENGTH, axis=0)
    expected = np.linalg.lstsq(mean, Y.reshape(-1, DIM), rcond=None)[0]
    with dask.config.set(scheduler="threads"):
        w_sum = phase1_crude_sum.crude_projection_sum(DaskSource(*_lazy(teacher)[:2])).w_sum
    np.testing.assert_allclose(w_sum, expected, rtol=1e-9, atol=1e-12)


def test_sculpt_span_same_on_dask_and_teacher_source(teacher):
    X, Y, seed = _lazy(teacher)
    settings = BodySettings(max_rows=400, refit_iterations=5)

    def span_of(source):
        phases = sculpt_span(source, HEADS, settings, np.random.default_rng(3))
        return {"crude": phases.crude_sum.w_sum, "refined": phases.refined_sum.w_sum,
                "rows": phases.sculpt[-1].rows.label, "refused": np.array(str(phases.span.refused)),
                "basis": np.array([]) if phases.span.basis is None else phases.span.basis}

    with threadpool_limits(limits=1, user_api="blas"):
        reference = span_of(TeacherSource(teacher, SAMPLES, LENGTH, seed=seed, block_size=CHUNK))
        with dask.config.set(scheduler="threads"):
            _assert_same_bits(span_of(DaskSource(X, Y)), reference)


def _fit_figures(X, Y) -> dict:
    learner = mhalearn.SculptLearner(1, body=mhalearn.BodySettings(refit_iterations=8),
                                     search=mhalearn.SearchSettings(refine_iter=30, max_candidates=2000),
                                     random_state=0)
    learner.fit(X, Y)
    report = learner.report_
    return {"basis": report.span.basis, "w_sum": report.refined_sum.w_sum, "thetas": learner.model_.thetas,
            "ws": learner.model_.ws, "least_squares": learner.least_squares_model_.ws}


@pytest.fixture(scope="module")
def one_head_data():
    teacher = mhalearn.sample_teacher(1, 6, rng=21)
    X, Y = mhalearn.make_dataset(teacher, 4000, 3, rng=22, chunks=1000)
    return teacher, X, Y


@pytest.fixture(scope="module")
def sync_fit(one_head_data) -> dict:
    """``_fit_figures`` of ``one_head_data`` on Dask's synchronous scheduler: the reference of the scheduler tests."""
    _, X, Y = one_head_data
    with dask.config.set(scheduler="sync"):
        return _fit_figures(X, Y)


def test_fit_gives_the_same_bits_on_every_scheduler(one_head_data, sync_fit, process_pool):
    teacher, X, Y = one_head_data
    reference = sync_fit
    for scheduler in SCHEDULERS[1:]:
        with _scheduler(scheduler, process_pool):
            _assert_same_bits(_fit_figures(X, Y), reference)
    # And it learned: one head is recovered from the body's span.
    X_test = mhalearn.boolean_inputs(500, 3, 6, rng=23)
    learned = mhalearn.MultiHeadAttention(reference["thetas"], reference["ws"])
    assert mhalearn.relative_error(learned, teacher, X_test) < 1e-6


# Slow: its worker processes start slowly.  By default, worker processes are covered by the "processes"
# scheduler of test_fit_gives_the_same_bits_on_every_scheduler, and a distributed cluster by
# test_checkpoint's test_a_sculpt_vs_m_cell_on_a_cluster_spreads_its_passes_and_stores_the_local_row,
# each to the bit.
@pytest.mark.slow
def test_fit_same_bits_on_a_local_cluster(one_head_data, sync_fit):
    distributed = pytest.importorskip("distributed")
    _, X, Y = one_head_data
    reference = sync_fit
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, distributed.Client(cluster):
        _assert_same_bits(_fit_figures(X, Y), reference)


def test_fit_on_dask_streams_the_training_blocks_of_the_split(one_head_data):
    # The learner's phases 1–4 are sculpt_span on the training rows of its per-block split.
    _, X, Y = one_head_data
    learner = mhalearn.SculptLearner(1, body=mhalearn.BodySettings(refit_iterations=8),
                                     search=mhalearn.SearchSettings(refine_iter=30, max_candidates=2000),
                                     random_state=0)
    with dask.config.set(scheduler="threads"):
        learner.fit(X, Y)
    rng = np.random.default_rng(0)
    held_out = held_out_counts(X.chunks[0], learner._validation_size(X.shape[0]))
    assert held_out == [200] * 4
    X_train, Y_train, X_val, _ = split_blocks(X, Y / learner.report_.y_scale, held_out, draw_seed(rng))
    X_train, Y_train = dask.compute(X_train, Y_train, scheduler="sync")
    assert learner.report_.x_scale == 1.0 and len(X_train) == 3200 and X_val.shape[0] == 800
    with threadpool_limits(limits=1, user_api="blas"):
        phases = sculpt_span(ArraySource(X_train, Y_train, block_size=800), 1,
                             learner.body, rng)
    np.testing.assert_array_equal(phases.span.basis, learner.report_.span.basis)
    np.testing.assert_array_equal(phases.refined_sum.w_sum, learner.report_.refined_sum.w_sum)


def test_fit_on_numpy_reads_the_split_in_place(one_head_data):
    # On NumPy arrays the learner splits as on a Dask dataset of blocks of BLOCK_SIZE, and its
    # phases 1–4 read the training rows where they lie: the same bits as on a copy of them.
    _, X, Y = (part.compute() if hasattr(part, "compute") else part for part in one_head_data)
    learner = mhalearn.SculptLearner(1, body=mhalearn.BodySettings(refit_iterations=8),
                                     search=mhalearn.SearchSettings(refine_iter=30, max_candidates=2000),
                                     random_state=0)
    learner.fit(X, Y)
    rng = np.random.default_rng(0)
    held_out = [learner._validation_size(len(X))]
    X_train, Y_train, _, _ = split_blocks(da.from_array(X, chunks=(BLOCK_SIZE, -1, -1)),
                                          da.from_array(Y / learner.report_.y_scale, chunks=(BLOCK_SIZE, -1, -1)),
                                          held_out, draw_seed(rng))
    X_train, Y_train = dask.compute(X_train, Y_train, scheduler="sync")
    with threadpool_limits(limits=1, user_api="blas"):
        phases = sculpt_span(ArraySource(X_train, Y_train), 1, learner.body, rng)
    np.testing.assert_array_equal(phases.span.basis, learner.report_.span.basis)
    np.testing.assert_array_equal(phases.refined_sum.w_sum, learner.report_.refined_sum.w_sum)


def test_split_source_passes_match_passes_over_a_copy(teacher):
    # Every pass over a source split in place (rows read where they lie, labels scaled per block)
    # gives the bits of the same pass over a copy of its training rows, block by block.
    X, Y = mhalearn.make_dataset(teacher, SAMPLES, LENGTH, rng=31)
    split = ArraySource(X, Y, block_size=CHUNK, scales=(1.0, 2.5), held_out=[100] * 4 + [60], seed=3)
    X_train, Y_train = split.head(SAMPLES)
    assert split.samples == len(X_train) == SAMPLES - 460
    held_X, held_Y = split.held_out_head(SAMPLES)
    assert len(held_X) == 460
    # Training and held-out rows partition every block; the labels come scaled.
    rows = {tuple(row) for row in np.concatenate([X_train, held_X]).reshape(SAMPLES, -1)}
    assert rows == {tuple(row) for row in X.reshape(SAMPLES, -1)}
    np.testing.assert_array_equal(np.sort(np.concatenate([Y_train, held_Y]).ravel()), np.sort((Y / 2.5).ravel()))
    copy = ArraySource(X_train, Y_train, block_size=CHUNK - 100)  # the last block: 300 − 60 rows, as split
    # Kept codes of the tokens (boolean=True) change what the kernels read, not a bit of what they give.
    coded = ArraySource(X, Y, block_size=CHUNK, scales=(1.0, 2.5), held_out=[100] * 4 + [60], seed=3, boolean=True)
    w_sum = teacher.projection_sum
    for source in (split, coded):
        for name, one, other in [
            ("crude", phase1_crude_sum.crude_projection_sum(source).w_sum,
             phase1_crude_sum.crude_projection_sum(copy).w_sum),
            *[(f"rows {field}", getattr(first, field), getattr(second, field))
              for first, second in [(agreement_passes.find_agreement_rows(each, w_sum, quantile=0.3, max_rows=200,
                                                                          rng=np.random.default_rng(4), simplex_tol=TOL)
                                     for each in (source, copy))]
              for field in ("tokens", "query", "label", "pattern", "residual")],
            *[(f"margin {field}", getattr(first, field), getattr(second, field))
              for first, second in [(phase3_refine_sum.margin_rows(each, teacher.thetas[0], 0.3, 150)
                                     for each in (source, copy))]
              for field in ("tokens", "query", "top", "label")]]:
            assert len(one) > 0, name
            np.testing.assert_array_equal(one, other, err_msg=name)


def test_coded_blocks_carry_the_codes_of_their_tokens_and_scaled_labels_their_bits(teacher):
    X, Y = mhalearn.make_dataset(teacher, SAMPLES, LENGTH, rng=32)
    source = ArraySource(X, Y, block_size=CHUNK, scales=(1.0, 2.5), boolean=True)
    tokens, labels, _ = source._block(1)
    np.testing.assert_array_equal(np.asarray(tokens), X[CHUNK:2 * CHUNK])
    bits = (X[CHUNK:2 * CHUNK] > 0).astype(int)  # code bit b of group g: entry 6g + b is +1
    for group in range(tokens.codes.shape[2]):
        width = min(6, X.shape[2] - 6 * group)
        expected = sum(bits[..., 6 * group + b] << b for b in range(width))
        np.testing.assert_array_equal(tokens.codes[..., group], expected)
    np.testing.assert_array_equal(np.asarray(labels), Y[CHUNK:2 * CHUNK] / 2.5)
    rows = np.array([3, 17, 40])
    np.testing.assert_array_equal(labels[rows, 1], (Y[CHUNK:2 * CHUNK] / 2.5)[rows, 1])
    X_bad = X.copy()
    X_bad[2 * CHUNK + 5, 1, 2] = 0.5
    with pytest.raises(ValueError, match="X: expected Boolean entries.*block 2"):
        ArraySource(X_bad, Y, block_size=CHUNK, boolean=True)._block(2)


def test_pool_decoded_again_from_its_codes_gives_the_same_rows(teacher):
    X, Y = mhalearn.make_dataset(teacher, SAMPLES, LENGTH, rng=34)
    pool = agreement_passes.find_agreement_rows(ArraySource(X, Y), teacher.projection_sum * 1.05, quantile=0.3,
                                                simplex_tol=TOL)
    w_sum = teacher.projection_sum * 1.01
    plain = agreement_rows.decoded_rows(pool.tokens, pool.query, pool.label, w_sum, pool.scanned)
    best = pool.best_under(w_sum, 50, simplex_tol=TOL)  # from the pool's codes
    assert isinstance(pool.coded_tokens(), CodedTokens)
    expected = plain.best(50, simplex_tol=TOL)
    for field in ("tokens", "query", "residual", "violation", "pattern"):
        np.testing.assert_array_equal(getattr(best, field), getattr(expected, field), err_msg=field)


def test_decoding_and_margins_of_chosen_rows_match_the_gathered_rows(teacher):
    X, Y = mhalearn.make_dataset(teacher, 400, LENGTH, rng=33)
    rows = np.sort(np.random.default_rng(2).choice(400, 150, replace=False))
    w_sum = teacher.projection_sum * 1.02
    theta = teacher.thetas[1]
    for in_place, gathered in [
        (decoder.decoding_residuals(X, Y, w_sum, rows),
         decoder.decoding_residuals(X[rows], Y[rows], w_sum)),
        (phase3_refine_sum.margin_mass(X, theta, rows), phase3_refine_sum.margin_mass(X[rows], theta))]:
        for one, other in zip(in_place, gathered):
            assert one.shape[0] == 150
            np.testing.assert_array_equal(one, other)


def test_split_holds_out_disjoint_rows_of_every_block():
    X = da.from_array(np.arange(40.0).reshape(20, 1, 2) * np.ones((1, 2, 1)), chunks=(6, 2, 2))
    X_train, _, X_val, _ = split_blocks(X, X, [2, 2, 2, 1], seed=9)
    train, val = X_train.compute()[:, 0, 0], X_val.compute()[:, 0, 0]
    assert X_val.chunks[0] == (2, 2, 2, 1) and X_train.chunks[0] == (4, 4, 4, 1)
    np.testing.assert_array_equal(np.sort(np.concatenate([train, val])), np.arange(0.0, 40.0, 2.0))
    for block, start in enumerate(range(0, 20, 6)):  # each block's held-out rows come from that block
        assert np.all((val[2 * block:2 * block + 2] >= 2 * start) & (val[2 * block:2 * block + 2] < 2 * start + 12))


def test_statistics_pass_matches_the_in_memory_figures(teacher):
    X, Y, _ = _lazy(teacher)
    statistics = dask_statistics(X * 3.0, Y, boolean=False)
    X, Y = X.compute() * 3.0, Y.compute()
    assert statistics.x_scale == pytest.approx(root_mean_square(X), rel=1e-13)
    assert statistics.y_scale == pytest.approx(root_mean_square(Y), rel=1e-13)
    bounds = certificate_bounds(X, Y)
    assert statistics.token_norm == pytest.approx(bounds["token_norm"], rel=1e-13)
    assert statistics.label_norm == pytest.approx(bounds["label_bound"], rel=1e-13)


def test_bad_dask_input_is_refused_naming_the_argument(teacher):
    X, Y, _ = _lazy(teacher)
    with pytest.raises(ValueError, match=r"^X: expected Boolean entries.*allow_non_boolean"):
        mhalearn.SculptLearner(HEADS).fit(X * 0.5, Y)
    with pytest.raises(ValueError, match=r"^Y: expected finite values, received 21 non-finite"):
        mhalearn.SculptLearner(HEADS).fit(X, da.where(da.arange(SAMPLES)[:, None, None] == 2000,
                                                      np.nan, Y).rechunk((CHUNK, -1, -1)))
    with pytest.raises(ValueError, match=r"^X: MomentLearner fits NumPy arrays"):
        mhalearn.MomentLearner(HEADS).fit(X, Y)
    with pytest.raises(ValueError, match=r"^Y: expected the same blocks along n as X"):
        DaskSource(X, Y.rechunk((500, -1, -1)))
    with pytest.raises(ValueError, match=r"^Y: expected a Dask array"):
        mhalearn.SculptLearner(HEADS).fit(X, Y.compute())


def test_make_dataset_blocks_are_the_teacher_stream(teacher):
    X, Y = mhalearn.make_dataset(teacher, SAMPLES, LENGTH, rng=5, chunks=CHUNK, noise=0.1)
    assert X.chunks[0] == (700, 700, 700, 700, 200) and Y.chunks == X.chunks
    source = TeacherSource(teacher, SAMPLES, LENGTH, seed=draw_seed(np.random.default_rng(5)), noise=0.1,
                           block_size=CHUNK)
    for (X_block, Y_block), index in zip(source.blocks(), range(5)):
        np.testing.assert_array_equal(X.blocks[index].compute(), X_block)
        np.testing.assert_array_equal(Y.blocks[index].compute(), Y_block)
    # X is uniform Boolean and Y the teacher's outputs plus noise of the stated size, from one draw.
    X, Y = X.compute(), Y.compute()
    assert set(np.unique(X)) == {-1.0, 1.0} and abs(X.mean()) < 0.02
    assert np.std(Y - teacher.predict(X)) == pytest.approx(0.1, rel=0.03)
    gaussian, _ = mhalearn.make_dataset(teacher, 50, LENGTH, rng=5, chunks=20, law="gaussian")
    assert gaussian.compute().std() == pytest.approx(1.0, rel=0.2)


def test_a_billion_sequences_cost_nothing_until_a_block_is_computed(teacher):
    # Memory, not time: the graph of 20 000 blocks is built without one block's data, and a block is computed
    # from its own seed without its predecessors.
    block_bytes = 50_000 * LENGTH * DIM * 8
    tracemalloc.start()
    try:
        X, Y = mhalearn.make_dataset(teacher, 10 ** 9, LENGTH, rng=5, chunks=50_000)
        building = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        block = Y.blocks[12_345].compute()
        computing = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert X.shape == (10 ** 9, LENGTH, DIM) and X.numblocks[0] == 20_000
    # A block costs its X, its Y and the kernel's scratch, a few blocks' worth; not its 12 345 predecessors.
    assert building < block_bytes and computing < 16 * block_bytes, (building, computing, block_bytes)
    expected = labelled_block(teacher, LENGTH, "boolean", 0.0, draw_seed(np.random.default_rng(5)), 12_345, 50_000)
    np.testing.assert_array_equal(block, expected[1])


@pytest.mark.slow
def test_a_billion_sequences_are_described_and_one_block_computed_in_seconds(teacher):
    start = time.perf_counter()
    X, Y = mhalearn.make_dataset(teacher, 10 ** 9, LENGTH, rng=5, chunks=50_000)
    assert time.perf_counter() - start < 2.0 and X.shape == (10 ** 9, LENGTH, DIM)
    start = time.perf_counter()
    Y.blocks[12_345].compute()
    assert time.perf_counter() - start < 5.0


def test_lazy_blocks_are_checked_against_the_memory_budget(teacher):
    with memory_budget("1MiB"), pytest.raises(MemoryBudgetError, match="^chunks: "):
        mhalearn.make_dataset(teacher, 10 ** 9, LENGTH, chunks=100_000)


def test_npy_shards_load_as_one_dask_dataset(teacher, tmp_path):
    X, Y, _ = _lazy(teacher)
    X, Y = X.compute(), Y.compute()
    for name, array in (("X", X), ("Y", Y)):
        for shard, start in enumerate((0, 1000, 2500)):
            np.save(tmp_path / f"{name}_{shard:03d}.npy", array[start:{0: 1000, 1000: 2500, 2500: None}[start]])
    X_disk, Y_disk = load_dataset(tmp_path)
    assert X_disk.chunks[0] == (1000, 1500, 500)
    np.testing.assert_array_equal(X_disk.compute(), X)
    np.testing.assert_array_equal(Y_disk.compute(), Y)
    assert load_dataset(tmp_path, chunks=700)[0].chunks[0] == (700, 700, 700, 700, 200)
    (tmp_path / "Y_002.npy").unlink()
    with pytest.raises(ValueError, match=r"^path: expected one Y_<name>.npy for every X_<name>.npy"):
        load_dataset(tmp_path)


def test_zarr_store_loads_as_the_same_dask_dataset(teacher, tmp_path):
    pytest.importorskip("zarr")
    X, Y, _ = _lazy(teacher)
    store = tmp_path / "examples.zarr"
    for name, array in (("X", X), ("Y", Y)):
        da.to_zarr(array, str(store), component=name)
    X_disk, Y_disk = load_dataset(store)
    assert X_disk.chunks == X.chunks
    np.testing.assert_array_equal(X_disk.compute(), X.compute())
    np.testing.assert_array_equal(Y_disk.compute(), Y.compute())


# ------------------------------------------------------------ block sizes

@pytest.mark.parametrize("sizes", [(1,) * 40, (2,) * 20, (7, 7, 7, 7, 7, 5), (3, 1, 30, 6), (40,)])
def test_the_split_holds_out_the_same_fraction_under_any_chunking(sizes):
    # The learner holds out max(1, round(0.2 n)) = 8 of 40 sequences: each block its share, rounded so
    # that the shares add up (a block of one cannot hold out its only sequence by rounding up).
    counts = held_out_counts(sizes, 8)
    assert sum(counts) == 8
    assert all(0 <= count <= size and abs(count - 8 * size / 40) < 1 for count, size in zip(counts, sizes))


@pytest.mark.slow
def test_a_fit_on_blocks_of_one_sequence_is_the_numpy_fit():
    # Blocks of one sequence once held out every sequence ("the mean tokens do not span R^d").
    one_head_teacher = mhalearn.sample_teacher(1, DIM, rng=11)
    one = mhalearn.SculptLearner(1, random_state=0)
    X, Y = mhalearn.make_dataset(one_head_teacher, 40, LENGTH, rng=3)
    with dask.config.set(scheduler="sync"), pytest.warns(PerformanceWarning, match="40 blocks of 1 sequences"):
        lazy = mhalearn.SculptLearner(1, random_state=0).fit(da.from_array(X, chunks=(1, -1, -1)),
                                                            da.from_array(Y, chunks=(1, -1, -1)))
    one.fit(X, Y)
    assert lazy.report_.crude_sum.sequences == one.report_.crude_sum.sequences == 40 - 8
    X_test, _ = mhalearn.make_dataset(one_head_teacher, 500, LENGTH, rng=4)
    for fitted in (lazy, one):
        assert mhalearn.relative_error(fitted.model_, one_head_teacher, X_test) < 1e-8


def test_small_blocks_warn_and_too_many_blocks_are_refused(teacher):
    with pytest.warns(PerformanceWarning, match=r"^chunks: 300 blocks of 1 sequences .*93 s in blocks of 7.*"
                                                r"chunks >= 100"):
        mhalearn.make_dataset(teacher, 300, LENGTH, chunks=1)
    X = da.zeros((3500, LENGTH, DIM), chunks=(7, -1, -1))
    with pytest.warns(PerformanceWarning, match=r"^X: 500 blocks of 7 sequences.*X.rechunk"):
        check_dask_pair(X, X)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_dask_pair(X.rechunk({0: 500}), X.rechunk({0: 500}))
        mhalearn.make_dataset(teacher, 300, LENGTH, chunks=100)
    start = time.perf_counter()
    with pytest.raises(ValueError, match=r"^chunks: expected at most 100,000 blocks, received chunks=100000, "
                                         r"which makes 10,000,000 blocks.*pass chunks >= 10,000,000$"):
        mhalearn.make_dataset(teacher, 10**12, LENGTH, chunks=10**5)
    assert time.perf_counter() - start < 1.0


def test_a_lazy_dataset_is_built_without_a_task_per_block(teacher):
    # Every layer is a rule for all blocks, not a task per block: building 10⁵ blocks costs what 1 does.
    X, Y = mhalearn.make_dataset(teacher, 10**8, LENGTH, chunks=1000, rng=0)
    assert X.numblocks[0] == 100_000
    for array in (X, Y):
        assert not any(layer.is_materialized() for layer in array.dask.layers.values())
    seed = draw_seed(np.random.default_rng(0))
    np.testing.assert_array_equal(Y.blocks[3].compute(), labelled_block(teacher, LENGTH, "boolean", 0.0, seed, 3,
                                                                        1000)[1])


def test_a_teacher_source_as_dask_maps_the_same_blocks_as_tasks_keyed_by_its_teacher(teacher):
    # The last block is short; every block is a task of the active scheduler, and a cluster must
    # never confuse two teachers' streams of one seed.
    source = TeacherSource(teacher, 2 * CHUNK + 7, LENGTH, seed=4, block_size=CHUNK)
    spread = source.as_dask()
    assert spread.block_count == source.block_count == 3
    ran = []

    def block_of(X, Y, rows, index):
        ran.append(threading.current_thread().name)
        return np.concatenate([np.asarray(X).ravel(), np.asarray(Y).ravel(), [index]])

    expected = source.map_blocks(block_of, indexed=True)
    ran.clear()
    with dask.config.set(scheduler="threads"):
        for got, want in zip(spread.map_blocks(block_of, indexed=True), expected, strict=True):
            np.testing.assert_array_equal(got, want)
    assert len(ran) == 3 and threading.main_thread().name not in ran
    other = mhalearn.sample_teacher(HEADS + 1, DIM, rng=11)
    assert dask.base.tokenize(TeacherSource(other, 2 * CHUNK + 7, LENGTH, seed=4, block_size=CHUNK)) != \
        dask.base.tokenize(source)
    assert dask.base.tokenize(spread) == dask.base.tokenize(source.as_dask())


def test_lazy_datasets_of_two_teachers_and_one_seed_have_keys_of_their_own(teacher):
    other = mhalearn.sample_teacher(HEADS + 1, DIM, rng=11)
    names = [mhalearn.make_dataset(planted, 100, LENGTH, rng=0, chunks=50)[0].name for planted in (teacher, other)]
    assert names[0] != names[1]


def test_a_fit_on_make_dataset_arrays_reads_their_stream_to_the_same_bits(one_head_data):
    # make_dataset's arrays are read as the teacher's stream that drew them (its labels kept over the passes that
    # read the prefix again and the candidate pass); the same values under another name (X * 1.0) are read as Dask
    # arrays.  The fits are the same to the bit, the prefix shorter than the stream so that a candidate pass reads
    # it all.
    _, X, Y = one_head_data

    def fit(X, Y):
        learner = mhalearn.SculptLearner(1, body=BodySettings(refit_iterations=8, prefix_samples=1500),
                                         search=mhalearn.SearchSettings(refine="none", max_candidates=2000),
                                         random_state=0)
        with dask.config.set(scheduler="threads"):
            learner.fit(X, Y)
        return learner

    stream, arrays = fit(X, Y), fit(X * 1.0, Y * 1.0)
    assert "generated stream" in stream.report_.steps[0].read_as and "4 blocks kept" in stream.report_.steps[0].read_as
    assert arrays.report_.steps[0].read_as.startswith("Dask arrays")
    assert stream.report_.refined_sum.prefix_labels is not None and arrays.report_.refined_sum.prefix_labels is None
    passes = [step for step in stream.report_.refined_sum.steps if step.name.startswith("whole-stream")]
    assert passes and passes[0].passes >= 1
    figures = [{"x_scale": np.array(learner.report_.x_scale), "y_scale": np.array(learner.report_.y_scale),
                "basis": learner.report_.span.basis, "w_sum": learner.report_.refined_sum.w_sum,
                "rows": learner.report_.sculpt[-1].rows.label, "thetas": learner.model_.thetas,
                "ws": learner.model_.ws, "least_squares": learner.least_squares_model_.ws}
               for learner in (stream, arrays)]
    _assert_same_bits(*figures)
