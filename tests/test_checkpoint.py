"""Phase checkpoints (mhalearn.data.checkpoint).

An interrupted fit resumes and computes what an uninterrupted one does.

The reference is the same fit run without a checkpoint: a resumed fit must
give its parameters to the bit, and a checkpoint must never be reused for
other data or other body settings.
"""

import shutil
from pathlib import Path

import numpy as np
import pytest

import mhalearn
from mhalearn.data.checkpoint import checkpoint_key
from mhalearn.data.dask_data import DaskSource
from mhalearn.data.phase_files import read_kept
from mhalearn.data.sources import ArraySource
from mhalearn.learners.chen_li.settings import BodySettings

# One xdist worker runs this module: the reference fits and the kept checkpoint are module fixtures.
pytestmark = pytest.mark.xdist_group("checkpoint")

HEADS, DIM, LENGTH, SAMPLES = 2, 8, 3, 12_000
# Small budgets keep each fit to a second or two; the phases and the route logic are the ones of the defaults.
SMALL = dict(body=BodySettings(refit_iterations=10, compare_routes_above=0.0),
             search=mhalearn.SearchSettings(max_candidates=3000, refine_iter=50), random_state=3)


class StopAfter:
    """A callback that interrupts the fit once ``phase`` has ended (as Ctrl-C would)."""

    def __init__(self, phase):
        self.phase = phase

    def __call__(self, phase, result):
        if phase == self.phase:
            raise KeyboardInterrupt


@pytest.fixture(scope="module")
def data():
    teacher = mhalearn.sample_teacher(HEADS, DIM, rng=4)
    return mhalearn.make_dataset(teacher, SAMPLES, LENGTH, rng=5)


@pytest.fixture(scope="module")
def uninterrupted(data):
    """The fit without a checkpoint, with BLAS on two threads (the thread-count test fits on one)."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=2, user_api="blas"):
        return mhalearn.SculptLearner(HEADS, **SMALL).fit(*data)


@pytest.fixture(scope="module")
def kept_once(data, tmp_path_factory):
    """A directory holding every phase of one checkpointed fit of ``data`` with ``SMALL``, fitted once."""
    directory = tmp_path_factory.mktemp("kept")
    mhalearn.SculptLearner(HEADS, checkpoint=directory, **SMALL).fit(*data)
    return directory


@pytest.fixture
def kept(kept_once, tmp_path):
    """A copy of ``kept_once`` for one test to resume from, damage or add to (as a fit of its own would leave)."""
    return Path(shutil.copytree(kept_once, tmp_path / "kept"))


def _same_fit(fitted, reference):
    np.testing.assert_array_equal(fitted.model_.thetas, reference.model_.thetas)
    np.testing.assert_array_equal(fitted.model_.ws, reference.model_.ws)
    assert fitted.report_.route == reference.report_.route
    assert fitted.report_.route_reason == reference.report_.route_reason


@pytest.mark.parametrize("stop", ["crude_sum", "refined_sum", "span", "moment"])
def test_interrupted_fit_resumes_to_the_same_bits(data, uninterrupted, tmp_path, stop):
    with pytest.raises(KeyboardInterrupt):
        mhalearn.SculptLearner(HEADS, checkpoint=tmp_path, **SMALL).fit(*data, callback=StopAfter(stop))
    resumed = mhalearn.SculptLearner(HEADS, checkpoint=tmp_path, **SMALL).fit(*data)
    order = ["1_crude_sum", "2_sculpt", "3_refined_sum", "4_sculpt", "4_span", "moment"]
    saved = {"crude_sum": 1, "refined_sum": 3, "span": 5, "moment": 6}[stop]
    assert resumed.report_.resumed == tuple(order[:saved])
    _same_fit(resumed, uninterrupted)
    # A third fit finds every phase kept and still computes the same.
    again = mhalearn.SculptLearner(HEADS, checkpoint=tmp_path, **SMALL).fit(*data)
    assert again.report_.resumed == tuple(order)
    _same_fit(again, uninterrupted)


def test_other_data_or_body_settings_do_not_reuse_a_checkpoint(data, kept):
    X, Y = data
    flipped = X.copy()
    flipped[0, 0, 0] *= -1
    assert mhalearn.SculptLearner(HEADS, checkpoint=kept, **SMALL).fit(flipped, Y).report_.resumed == ()
    assert mhalearn.SculptLearner(HEADS, checkpoint=kept, **{**SMALL, "body": SMALL["body"].replace(max_rows=5000)}
                                  ).fit(X, Y).report_.resumed == ()
    assert mhalearn.SculptLearner(HEADS, checkpoint=kept, **{**SMALL, "random_state": 4}
                                  ).fit(X, Y).report_.resumed == ()


def test_other_net_settings_reuse_phases_1_to_4(data, kept):
    settings = {**SMALL, "search": SMALL["search"].replace(max_candidates=1000)}
    resumed = mhalearn.SculptLearner(HEADS, checkpoint=kept, **settings).fit(*data)
    assert "4_span" in resumed.report_.resumed
    _same_fit(resumed, mhalearn.SculptLearner(HEADS, **settings).fit(*data))


def test_dask_data_are_named_by_their_values(tmp_path):
    teacher = mhalearn.sample_teacher(HEADS, DIM, rng=4)
    first = DaskSource(*mhalearn.make_dataset(teacher, 3000, LENGTH, rng=5, chunks=700))
    same = DaskSource(*mhalearn.make_dataset(teacher, 3000, LENGTH, rng=5, chunks=700))
    other = DaskSource(*mhalearn.make_dataset(teacher, 3000, LENGTH, rng=6, chunks=700))
    rng = np.random.default_rng(0)
    keys = [checkpoint_key(source, HEADS, BodySettings(), rng) for source in (first, same, other)]
    assert keys[0] == keys[1] != keys[2]
    X, Y = first.head(3000)
    assert ArraySource(X, Y).fingerprint() != ArraySource(X, -Y).fingerprint()


def test_a_checkpoint_path_that_is_a_file_is_refused_before_any_work(data, tmp_path):
    path = tmp_path / "file"
    path.write_text("")
    seen = []
    with pytest.raises(ValueError, match="checkpoint: expected a directory"):
        mhalearn.SculptLearner(HEADS, checkpoint=path, **SMALL).fit(*data, callback=lambda *a: seen.append(a))
    assert seen == []
    with pytest.raises(ValueError, match="checkpoint: expected None or a path"):
        mhalearn.SculptLearner(HEADS, checkpoint=3, **SMALL).fit(*data)


# ---------------------------------------------------------------- sweeps

CELL = {"heads": 2, "dim": 8, "length": 3, "samples": 8000, "seed": 1}
# Figures a rerun measures afresh (times, the process's memory); every other figure must be the same.
TIMED = {"body_seconds", "kept_seconds", "net_seconds", "peak_memory_mb", "phase_seconds"}


def test_an_interrupted_sculpt_vs_m_cell_resumes_to_the_same_row(tmp_path, monkeypatch):
    from mhalearn.experiments import sculpt_vs_m
    from mhalearn.learners.chen_li import fit

    reference = sculpt_vs_m.run_sculpt_vs_m_cell(dict(CELL))
    read_span = fit.read_span

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(fit, "read_span", interrupted)
    with pytest.raises(KeyboardInterrupt):
        sculpt_vs_m.run_sculpt_vs_m_cell(dict(CELL), checkpoint_dir=tmp_path)
    monkeypatch.setattr(fit, "read_span", read_span)
    [kept] = list(tmp_path.iterdir())
    files = sorted(kept.iterdir())
    assert [path.name for path in files] == ["1_crude_sum.npz", "2_sculpt.npz", "3_refined_sum.npz",
                                             "4_sculpt.npz"]
    stored = [read_kept(path) for path in files]
    rerun = []

    def recorded(*args):
        rerun.append(read_span(*args))
        return rerun[-1]

    monkeypatch.setattr(fit, "read_span", recorded)
    resumed = sculpt_vs_m.run_sculpt_vs_m_cell(dict(CELL), checkpoint_dir=tmp_path)
    assert {key: value for key, value in resumed.items() if key not in TIMED | {"resumed"}} == \
        {key: value for key, value in reference.items() if key not in TIMED | {"resumed"}}
    assert (reference["resumed"], reference["kept_seconds"]) == ("", 0.0)
    assert resumed["resumed"] == "1_crude_sum, 2_sculpt, 3_refined_sum, 4_sculpt"
    # The whole body's time: the kept phases' own, as computed and stored, and the phase rerun.
    assert resumed["kept_seconds"] == pytest.approx(sum(kept["seconds"] for kept in stored), rel=1e-12)
    crude, first, refined, final = (kept["result"] for kept in stored)
    assert resumed["body_seconds"] == pytest.approx(
        crude.seconds + first.seconds + final.seconds + refined.seconds + rerun[0].seconds, rel=1e-12)


@pytest.mark.parametrize("backend", ["local", "dask"])
def test_a_sweep_removes_a_stored_cells_checkpoint(tmp_path, backend):
    from contextlib import nullcontext

    import distributed

    from mhalearn.experiments.runner import run_sweep

    grid = tmp_path / "grid.toml"
    grid.write_text("[full]\nheads = 1\ndim = 8\nlength = 3\nsamples = 2000\nseed = 0\n")
    cluster = nullcontext() if backend == "local" else distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, protocol="tcp://", host="127.0.0.1",
        dashboard_address=None)
    with cluster:
        where = {"workers": 1} if backend == "local" else {"backend": "dask", "scheduler": cluster.scheduler_address}
        summary = run_sweep("sculpt-vs-m", tmp_path / "rows.db", grid=grid, progress=False,
                            checkpoints=tmp_path / "kept", **where)
    assert (summary.computed, summary.failed) == (1, 0)
    assert (tmp_path / "kept").is_dir() and list((tmp_path / "kept").iterdir()) == []


def test_a_sweep_keeps_a_stored_cells_checkpoint_when_asked_and_it_gives_the_cells_phases(tmp_path):
    # The kept checkpoint holds every phase of the cell: a fit resumed from it computes none of them.
    from mhalearn.experiments.runner import run_sweep

    grid = tmp_path / "grid.toml"
    grid.write_text("[full]\nheads = 1\ndim = 8\nlength = 3\nsamples = 2000\nseed = 0\n")
    with pytest.raises(ValueError, match="keep_checkpoints: there are no checkpoints to keep"):
        run_sweep("sculpt-vs-m", tmp_path / "rows.db", grid=grid, progress=False, workers=1,
                  keep_checkpoints=True)
    summary = run_sweep("sculpt-vs-m", tmp_path / "rows.db", grid=grid, progress=False, workers=1,
                        checkpoints=tmp_path / "kept", keep_checkpoints=True)
    assert (summary.computed, summary.failed) == (1, 0)
    [cell] = list((tmp_path / "kept").iterdir())
    [row] = _stored_rows(tmp_path / "rows.db")
    again = run_sweep("sculpt-vs-m", tmp_path / "again.db", grid=grid, progress=False, workers=1,
                      checkpoints=tmp_path / "kept")
    assert (again.computed, again.failed) == (1, 0)
    [resumed] = _stored_rows(tmp_path / "again.db")
    assert resumed["resumed"] == "1_crude_sum, 2_sculpt, 3_refined_sum, 4_sculpt, 4_span"
    assert resumed["span_distance"] == row["span_distance"]
    assert not cell.exists()  # the second sweep did not ask to keep it


def test_a_sculpt_vs_m_cell_on_a_cluster_spreads_its_passes_and_stores_the_local_row(tmp_path):
    # Three blocks of 2¹⁶ sequences: a cell run as a task of a cluster of two single-threaded
    # workers reads them as tasks of that cluster, on both workers, and stores the row a local
    # worker stores (the passes reduce in block order), saying it ran on 2 workers.
    import distributed

    from mhalearn.experiments.runner import run_sweep

    grid = tmp_path / "grid.toml"
    grid.write_text("[full]\nheads = 2\ndim = 8\nlength = 3\nsamples = 140000\nseed = 1\n")
    run_sweep("sculpt-vs-m", tmp_path / "local.db", grid=grid, progress=False, workers=1)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, protocol="tcp://",
                                  host="127.0.0.1", dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        with distributed.get_task_stream(client) as tasks:
            summary = run_sweep("sculpt-vs-m", tmp_path / "dask.db", grid=grid, progress=False, backend="dask",
                                scheduler=cluster.scheduler_address)
        # A block's task: one that draws and reads it, or one that also labels it to be kept (phase 1's).
        blocks = [task for task in tasks.data
                  if str(task["key"]).startswith(("_draw_and_run_block", "_label_to_keep_and_run"))]
    assert (summary.computed, summary.failed) == (1, 0)
    assert len({task["worker"] for task in blocks}) == 2
    [local], [spread] = (_stored_rows(tmp_path / name) for name in ("local.db", "dask.db"))
    assert (local["workers"], spread["workers"]) == (1, 2)
    assert local["span_distance"] < 0.1
    assert {key: value for key, value in spread.items() if key not in TIMED | {"workers"}} == \
        {key: value for key, value in local.items() if key not in TIMED | {"workers"}}


def _stored_rows(path) -> list[dict]:
    from mhalearn.experiments.store import ResultStore

    with ResultStore(path) as store:
        return store.rows("sculpt-vs-m")


def test_a_sweep_whose_cells_keep_no_checkpoints_refuses_them_before_any_work(tmp_path):
    from mhalearn.experiments.runner import run_sweep

    with pytest.raises(ValueError, match="checkpoints: experiment 'error-vs-samples' keeps no checkpoints"):
        run_sweep("error-vs-samples", tmp_path / "rows.db", quick=True, progress=False,
                  checkpoints=tmp_path / "kept")
    assert not (tmp_path / "rows.db").exists()


def test_span_route_names_the_checkpoint(data, kept):
    # The moment route runs after phases 1–4 with span_route="auto" and first with "moment": the
    # generator it draws from differs, so a moment route kept by one must not serve the other.
    moment_only = mhalearn.SculptLearner(HEADS, checkpoint=kept, span_route="moment", **SMALL).fit(*data)
    assert moment_only.report_.resumed == ()
    _same_fit(moment_only, mhalearn.SculptLearner(HEADS, span_route="moment", **SMALL).fit(*data))


def test_a_fit_computes_the_same_bits_whatever_the_blas_thread_count(data, uninterrupted):
    # A resumed fit is compared with one run earlier in the process, or in another process, where
    # BLAS may have had another thread count (a sweep's worker limits it process-wide): a fit whose
    # bits depended on it would not resume to the uninterrupted fit's bits on every machine.
    # The fit on two threads is ``uninterrupted``'s.
    from threadpoolctl import threadpool_limits

    from mhalearn.data.fit_data import root_mean_square

    X, Y = data
    scales = []
    for threads in (1, 2):
        with threadpool_limits(limits=threads, user_api="blas"):
            scales.append(root_mean_square(Y))
    with threadpool_limits(limits=1, user_api="blas"):
        one_thread = mhalearn.SculptLearner(HEADS, **SMALL).fit(X, Y)
    assert scales[0] == scales[1]
    np.testing.assert_array_equal(one_thread.model_.thetas, uninterrupted.model_.thetas)
    np.testing.assert_array_equal(one_thread.model_.ws, uninterrupted.model_.ws)


def test_a_damaged_phase_file_is_computed_again(data, uninterrupted, kept):
    from mhalearn.data.checkpoint import CheckpointWarning

    [phases] = list(kept.iterdir())
    (phases / "3_refined_sum.npz").write_bytes(b"not a phase file")
    with pytest.warns(CheckpointWarning, match="3_refined_sum.npz could not be read"):
        resumed = mhalearn.SculptLearner(HEADS, checkpoint=kept, **SMALL).fit(*data)
    assert resumed.report_.resumed == ("1_crude_sum", "2_sculpt", "4_sculpt", "4_span", "moment")
    _same_fit(resumed, uninterrupted)


def test_a_phase_that_cannot_be_saved_leaves_the_fit_whole(data, uninterrupted, tmp_path, monkeypatch):
    from mhalearn.data import checkpoint
    from mhalearn.data.checkpoint import CheckpointWarning

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoint, "write_kept", disk_full)
    with pytest.warns(CheckpointWarning, match="No space left on device"):
        fitted = mhalearn.SculptLearner(HEADS, checkpoint=tmp_path, **SMALL).fit(*data)
    _same_fit(fitted, uninterrupted)
    assert [path.name for path in tmp_path.rglob("*") if path.is_file()] == []


# ---------------------------------------------------------------- the kept phases' data

def test_a_directory_copied_from_another_fits_data_is_computed_again(data, uninterrupted, tmp_path):
    from mhalearn.data.checkpoint import CheckpointWarning

    other = mhalearn.make_dataset(mhalearn.sample_teacher(HEADS, DIM, rng=6), SAMPLES, LENGTH, rng=7)
    mhalearn.SculptLearner(HEADS, checkpoint=tmp_path / "other", **SMALL).fit(*other)
    [copied] = list((tmp_path / "other").iterdir())
    with pytest.raises(KeyboardInterrupt):  # makes this fit's key directory
        mhalearn.SculptLearner(HEADS, checkpoint=tmp_path / "mine", **SMALL).fit(*data, callback=StopAfter("crude_sum"))
    [mine] = list((tmp_path / "mine").iterdir())
    shutil.rmtree(mine)
    shutil.copytree(copied, mine)
    with pytest.warns(CheckpointWarning,
                      match="1_crude_sum.npz was computed on other data than this fit's "
                            ".the same shape, other examples"):
        resumed = mhalearn.SculptLearner(HEADS, checkpoint=tmp_path / "mine", **SMALL).fit(*data)
    assert resumed.report_.resumed == ()
    _same_fit(resumed, uninterrupted)
    # The directory now holds this data's phases.
    assert mhalearn.SculptLearner(HEADS, checkpoint=tmp_path / "mine", **SMALL).fit(*data).report_.resumed != ()


def test_dask_arrays_named_alike_that_hold_other_values_are_not_resumed(tmp_path):
    # Phases 1–4 on a Dask stream, as a fit on more sequences than its in-memory sample runs them.
    import dask.array as da

    from mhalearn.data.checkpoint import open_checkpoint
    from mhalearn.learners.chen_li.fit import sculpt_span

    X, Y = mhalearn.make_dataset(mhalearn.sample_teacher(HEADS, DIM, rng=4), 3000, LENGTH, rng=5)
    flipped = X.copy()
    flipped[2000:2100] *= -1  # in block 2 of 5: neither the first, the middle nor the last

    def stream(X):
        return DaskSource(da.from_array(X, chunks=(700, -1, -1), name="examples-x"),
                          da.from_array(Y, chunks=(700, -1, -1), name="examples-y"))

    def body(source, checkpoint_dir):
        rng, settings = np.random.default_rng(3), BodySettings(refit_iterations=10)
        checkpoint = open_checkpoint(checkpoint_dir, source, HEADS, settings, rng)
        return sculpt_span(source, HEADS, settings, rng, checkpoint=checkpoint), checkpoint

    body(stream(X), tmp_path)
    assert checkpoint_key(stream(X), HEADS, BodySettings(), np.random.default_rng(0)) != \
        checkpoint_key(stream(flipped), HEADS, BodySettings(), np.random.default_rng(0))
    phases, checkpoint = body(stream(flipped), tmp_path)
    assert checkpoint.resumed == []
    reference, _ = body(stream(flipped), None)
    np.testing.assert_array_equal(phases.span.basis, reference.span.basis)
    np.testing.assert_array_equal(phases.refined_sum.w_sum, reference.refined_sum.w_sum)


def test_rows_known_by_their_tokens_codes_are_kept_as_codes_and_read_back_to_the_same_tokens(tmp_path):
    from mhalearn.data.phase_files import BadPhaseFile, write_kept
    from mhalearn.data.sources import CodedTokens
    from mhalearn.data.token_codes import block_codes
    from mhalearn.learners.chen_li.agreement_rows import AgreementRows

    rng = np.random.default_rng(0)
    signs = rng.choice([-1.0, 1.0], size=(5, 4, 13))
    codes = np.empty((5, 4, 3), dtype=np.uint8)
    assert block_codes(signs, codes)
    rows = AgreementRows(CodedTokens(None, codes, 13), np.arange(5) % 4, rng.normal(size=(5, 13)),
                         rng.random((5, 4)), rng.random((5, 4)), rng.random(5), rng.random(5), 20)
    path = tmp_path / "rows.npz"
    with open(path, "wb") as handle:
        write_kept(handle, {"rows": rows})
    with np.load(path) as members:  # the codes are kept, not 8 bytes an entry of decoded signs
        assert not any(members[name].dtype == np.float64 and members[name].shape == signs.shape for name in members)
    read = read_kept(path)["rows"]
    assert isinstance(read.tokens, CodedTokens) and read.tokens.tokens is None
    np.testing.assert_array_equal(read.tokens.codes, codes)
    np.testing.assert_array_equal(np.asarray(read.tokens), signs)
    np.testing.assert_array_equal(read.label, rows.label)
    # Codes that cannot be those of tokens of d entries are a bad file, not tokens of another shape.
    with open(path, "wb") as handle:
        write_kept(handle, {"rows": AgreementRows(CodedTokens(None, codes, 19), *list(vars(rows).values())[1:8])})
    with pytest.raises(BadPhaseFile, match="not the codes of tokens of 19 entries"):
        read_kept(path)



def test_phase_files_keep_and_rebuild_registered_classes_only(tmp_path, monkeypatch):
    # A phase file names its classes; reading rebuilds only those registered (register_kept), imports nothing.
    import dataclasses

    from mhalearn.data import phase_files
    from mhalearn.learners.chen_li.phase1_crude_sum import CrudeSum

    @dataclasses.dataclass
    class Unregistered:
        value: float

    with pytest.raises(TypeError, match=r"\['rows'\]\[0\]: a .*Unregistered cannot be kept .* not registered"):
        phase_files.write_kept(tmp_path / "no.npz", {"rows": [Unregistered(1.0)]})
    assert phase_files.KEPT_CLASSES["mhalearn.learners.chen_li.phase1_crude_sum:CrudeSum"] is CrudeSum  # a PhaseResult
    registered = phase_files.register_kept(dataclasses.make_dataclass("Kept", [("value", float)]))
    path = tmp_path / "kept.npz"
    with open(path, "wb") as handle:
        phase_files.write_kept(handle, {"kept": registered(2.5)})
    assert read_kept(path)["kept"] == registered(2.5)
    monkeypatch.delitem(phase_files.KEPT_CLASSES, phase_files._class_name(registered))
    with pytest.raises(phase_files.BadPhaseFile, match=r"the class '.*Kept' is not a dataclass that phase files keep"):
        read_kept(path)


class StopInsidePass:
    """A callback that interrupts the fit inside phase 3's candidate pass, once it has read ``blocks`` blocks."""

    def __init__(self, blocks):
        self.blocks = blocks

    def __call__(self, phase, result):
        if phase == "pass" and result.blocks_done >= self.blocks:
            raise KeyboardInterrupt


def test_a_fit_interrupted_inside_a_pass_resumes_there_to_the_same_bits(tmp_path, monkeypatch):
    # Twelve blocks, phases 1-3 on the first three: the candidate pass reads all twelve in waves of eight
    # (one block a wave's share), saving where it stands after each wave (PROGRESS_SECONDS = 0).  Interrupted
    # after the first wave, the fit resumes from its progress file and gives the uninterrupted fit's bits.
    import dask.array as da

    from mhalearn.data import checkpoint, dask_data

    monkeypatch.setattr(checkpoint, "PROGRESS_SECONDS", 0.0)
    monkeypatch.setattr(dask_data.DaskSource, "wave_blocks", 1)
    X, Y = mhalearn.make_dataset(mhalearn.sample_teacher(HEADS, DIM, rng=4), SAMPLES, LENGTH, rng=5)

    def lazy():
        return da.from_array(X, chunks=(1000, -1, -1)), da.from_array(Y, chunks=(1000, -1, -1))

    settings = {**SMALL, "body": SMALL["body"].replace(prefix_samples=3000), "span_route": "body"}
    whole = mhalearn.SculptLearner(HEADS, **settings).fit(*lazy())
    assert whole.report_.refined_sum.steps[-1].name == "whole-stream refit (ours)"  # the pass ran
    with pytest.raises(KeyboardInterrupt):
        mhalearn.SculptLearner(HEADS, checkpoint=tmp_path, **settings).fit(*lazy(), callback=StopInsidePass(8))
    [key] = list(tmp_path.iterdir())
    assert sorted(path.name for path in key.iterdir()) == [
        "1_crude_sum.npz", "2_sculpt.npz", "3_refined_sum.npz", "3_stream_refit.pass1.progress.npz"]
    resumed = mhalearn.SculptLearner(HEADS, checkpoint=tmp_path, **settings).fit(*lazy())
    assert resumed.report_.resumed == ("1_crude_sum", "2_sculpt", "3_refined_sum",
                                       "3_stream_refit pass 1 from block 8")
    _same_fit(resumed, whole)
    assert "3_stream_refit.pass1.progress.npz" not in [path.name for path in key.iterdir()]  # the phase is kept
