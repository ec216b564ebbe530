import itertools
import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import numba
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mhalearn import _exp, _numba
from mhalearn.attention import kernels, reference
from mhalearn.learners.chen_li.decoder import decode_patterns
from mhalearn.learners.chen_li.phase5_net import score_candidates
from mhalearn.random_features.kernels import attention_random_features


def _problem(rng, n=7, k=5, d=4, m=3, scale=1.0):
    X = rng.choice([-1.0, 1.0], size=(n, k, d))
    thetas = scale * rng.standard_normal((m, d, d)) / d
    ws = rng.standard_normal((m, d, d)) / np.sqrt(d)
    return X, thetas, ws


def test_forward_matches_reference(rng):
    X, thetas, ws = _problem(rng)
    np.testing.assert_allclose(kernels.forward(X, thetas, ws), reference.forward(X, thetas, ws),
                               rtol=0, atol=1e-10)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 6), k=st.integers(1, 6), d=st.integers(1, 5), m=st.integers(1, 4),
       seed=st.integers(0, 2**32 - 1))
def test_forward_attention_features_any_shape(n, k, d, m, seed):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, k, d))
    thetas = rng.standard_normal((m, d, d))
    ws = rng.standard_normal((m, d, d))
    out, weights = kernels.forward(X, thetas, ws, return_attention=True)
    np.testing.assert_allclose(out, reference.forward(X, thetas, ws), atol=1e-10)
    np.testing.assert_allclose(weights, reference.attention(X, thetas), atol=1e-12)
    np.testing.assert_allclose(weights.sum(axis=-1), 1.0, atol=1e-12)
    features = kernels.head_features(X, thetas)
    np.testing.assert_allclose(features, reference.head_features(X, thetas), atol=1e-10)
    np.testing.assert_allclose(np.einsum("nmkd,mde->nke", features, ws), out, atol=1e-10)


def test_loss_and_grad_matches_reference(rng):
    X, thetas, ws = _problem(rng, n=11)
    Y = rng.standard_normal(X.shape)
    loss, dth, dw = kernels.loss_and_grad(X, Y, thetas, ws)
    ref_loss, ref_dth, ref_dw = reference.loss_and_grad(X, Y, thetas, ws)
    assert loss == pytest.approx(ref_loss, rel=1e-12)
    np.testing.assert_allclose(dth, ref_dth, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(dw, ref_dw, rtol=1e-9, atol=1e-12)


def test_gradient_matches_central_differences(rng):
    X, thetas, ws = _problem(rng, n=9, k=6, d=4, m=2, scale=3.0)
    Y = rng.standard_normal(X.shape)
    _, dth, dw = kernels.loss_and_grad(X, Y, thetas, ws)
    step = 1e-6
    for params, grad, which in ((thetas, dth, 0), (ws, dw, 1)):
        numeric = np.empty_like(params)
        for index in np.ndindex(params.shape):
            plus, minus = params.copy(), params.copy()
            plus[index] += step
            minus[index] -= step
            args_plus = (plus, ws) if which == 0 else (thetas, plus)
            args_minus = (minus, ws) if which == 0 else (thetas, minus)
            numeric[index] = (kernels.loss_and_grad(X, Y, *args_plus)[0]
                              - kernels.loss_and_grad(X, Y, *args_minus)[0]) / (2 * step)
        relative = np.linalg.norm(grad - numeric) / np.linalg.norm(numeric)
        assert relative < 1e-5, (which, relative)


def test_extreme_logits_stay_finite(rng):
    X, thetas, ws = _problem(rng, n=5, k=6, d=4, m=2)
    thetas *= 3000.0 / np.linalg.norm(thetas.reshape(2, -1), axis=1)[:, None, None]
    out = kernels.forward(X, thetas, ws)
    assert np.all(np.isfinite(out))
    # Hard attention: each row is the projected token of the argmax logit.
    logits = np.einsum("nkd,mde,nle->nmkl", X, thetas, X)
    loss, dth, dw = kernels.loss_and_grad(X, np.zeros_like(X), thetas, ws)
    assert np.isfinite(loss) and np.all(np.isfinite(dth)) and np.all(np.isfinite(dw))
    weights = kernels.attention(X, thetas)
    top = logits.max(axis=-1, keepdims=True)
    # Weight only on near-maximal logits, and the same as the stable reference.
    assert np.all(weights[logits < top - 50.0] < 1e-20)
    np.testing.assert_allclose(weights, reference.attention(X, thetas), atol=1e-12)


@pytest.mark.parametrize("shape", [(40, 5, 3, 2), (33, 16, 16, 4), (17, 7, 9, 3)])
def test_parallel_path_matches_reference_and_serial_path(rng, shape):
    """The threaded path (small batches normally run serially) gives the same bits."""
    n, k, d, m = shape
    X = rng.standard_normal((n, k, d))
    Y = rng.standard_normal((n, k, d))
    thetas = rng.standard_normal((m, d, d)) / d
    ws = rng.standard_normal((m, d, d)) / np.sqrt(d)
    with _numba.dispatch_mode("serial"):
        serial = (kernels.forward(X, thetas, ws, return_attention=True), kernels.attention(X, thetas),
                  kernels.head_features(X, thetas), kernels.loss_and_grad(X, Y, thetas, ws))
    with _numba.dispatch_mode("parallel"):
        (out, weights), attention, features, (loss, dth, dw) = (
            kernels.forward(X, thetas, ws, return_attention=True), kernels.attention(X, thetas),
            kernels.head_features(X, thetas), kernels.loss_and_grad(X, Y, thetas, ws))
    np.testing.assert_allclose(out, reference.forward(X, thetas, ws), rtol=0, atol=1e-10)
    np.testing.assert_allclose(weights, reference.attention(X, thetas), rtol=0, atol=1e-12)
    np.testing.assert_array_equal(attention, weights)
    np.testing.assert_allclose(features, reference.head_features(X, thetas), rtol=0, atol=1e-10)
    ref_loss, ref_dth, ref_dw = reference.loss_and_grad(X, Y, thetas, ws)
    assert loss == pytest.approx(ref_loss, rel=1e-12)
    np.testing.assert_allclose(dth, ref_dth, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(dw, ref_dw, rtol=1e-9, atol=1e-12)
    # Same chunks in the same order whichever path ran them: bitwise identical.
    np.testing.assert_array_equal(serial[0][0], out)
    np.testing.assert_array_equal(serial[1], attention)
    np.testing.assert_array_equal(serial[2], features)
    assert serial[3][0] == loss
    np.testing.assert_array_equal(serial[3][1], dth)
    np.testing.assert_array_equal(serial[3][2], dw)


def _decode_patterns_call(rng):
    X = rng.choice([-1.0, 1.0], size=(45, 4, 7))
    w_sum = rng.standard_normal((7, 7))
    Y = X @ w_sum + 0.01 * rng.standard_normal((45, 4, 7))
    return lambda: decode_patterns(X, Y, w_sum)


def _score_candidates_call(rng):
    features = rng.standard_normal((60, 5, 3))  # 5 net points, features of 60 rows × d = 3
    gram = np.einsum("rpa,rqb->paqb", features, features)
    cross = np.einsum("rpa,re->pae", features, rng.standard_normal((60, 3)))
    candidates = np.array(list(itertools.combinations(range(5), 2)))
    return lambda: score_candidates(gram, cross, candidates)


def _random_features_call(rng):
    X = rng.standard_normal((37, 6, 4))
    query_keys = rng.standard_normal((9, 4, 4))
    return lambda: attention_random_features(X, query_keys)


@pytest.mark.parametrize("make_call", [_decode_patterns_call, _score_candidates_call, _random_features_call],
                         ids=["decode_patterns", "score_candidates", "attention_random_features"])
def test_other_parallel_kernels_give_the_same_bits_on_both_paths(rng, make_call):
    """Every parallel kernel goes through the one dispatcher: the pool and the calling thread agree bitwise."""
    call = make_call(rng)
    with _numba.dispatch_mode("serial"):
        serial = call()
    with _numba.dispatch_mode("parallel"):
        parallel = call()
    for first, again in zip(serial if isinstance(serial, tuple) else (serial,),
                            parallel if isinstance(parallel, tuple) else (parallel,)):
        assert np.isfinite(first).any()
        np.testing.assert_array_equal(first, again)


# Runs every kernel of the attention layer, the random-feature attention and the
# sparse-variables bit attention on the calling thread, then on the pool, in a fresh
# process (so that nothing compiled by other tests hides what the pool compiles), and
# prints, per Numba function of those modules, its signatures after each phase.
_COMPILED_SIGNATURES = textwrap.dedent("""
    import json
    import numpy as np
    from numba.core.registry import CPUDispatcher
    from mhalearn import _numba
    from mhalearn.attention import kernels
    from mhalearn.random_features import kernels as random_feature_kernels
    from mhalearn.sparse_variables import kernels as bit_kernels

    rng = np.random.default_rng(0)
    X, Y = rng.standard_normal((40, 5, 3)), rng.standard_normal((40, 5, 3))
    thetas, ws = rng.standard_normal((2, 3, 3)), rng.standard_normal((2, 3, 3))
    bits = rng.choice([-1.0, 1.0], size=(40, 9))
    query, positions, bit_embeddings = rng.standard_normal(4), rng.standard_normal((9, 4)), rng.standard_normal((9, 4))

    def run_every_kernel():
        kernels.forward(X, thetas, ws, return_attention=True)
        kernels.attention(X, thetas)
        kernels.head_features(X, thetas)
        kernels.loss_and_grad(X, Y, thetas, ws)
        random_feature_kernels.attention_random_features(X, thetas)
        _, weights = bit_kernels.bit_attention_forward(bits, query, positions, bit_embeddings)
        bit_kernels.bit_attention_backward(bits, weights, query, positions, bit_embeddings,
                                           rng.standard_normal((40, 4)))

    def signatures():
        return {f"{module.__name__}.{name}": sorted(str(sig) for sig in function.signatures)
                for module in (_numba, kernels, random_feature_kernels, bit_kernels)
                for name, function in vars(module).items() if isinstance(function, CPUDispatcher)}

    phases = {}
    for mode in ("serial", "parallel"):
        with _numba.dispatch_mode(mode):
            run_every_kernel()
        phases[mode] = signatures()
    print(json.dumps(phases))
""")


def _compiled_signatures(**environment) -> tuple[dict, dict]:
    """The signatures of every Numba function after the calling-thread phase and after the pool phase."""
    child = subprocess.run([sys.executable, "-c", _COMPILED_SIGNATURES], capture_output=True, text=True,
                           timeout=900, env={**os.environ, **environment})
    assert child.returncode == 0, child.stderr[-3000:]
    phases = json.loads(child.stdout.splitlines()[-1])
    return phases["serial"], phases["parallel"]


def _added_by_the_pool(serial: dict, parallel: dict) -> dict:
    return {name: signatures for name, signatures in parallel.items() if signatures != serial[name]}


def test_the_pool_runs_the_compiled_worker_and_compiles_nothing_more():
    # Compile time is most of a first run (`mhalearn demo` after an install): running
    # a kernel on the pool must not compile (or load) a second variant of it.
    added = _added_by_the_pool(*_compiled_signatures())
    assert not added, f"the pool compiled functions the calling thread did not need: {added}"


@pytest.mark.slow
def test_from_a_cold_cache_each_function_compiles_for_one_signature(tmp_path):
    # A function called with constant and variable offsets is compiled once, not
    # once per literal pattern (which a cache that is already warm would hide).
    serial, parallel = _compiled_signatures(NUMBA_CACHE_DIR=str(tmp_path))
    several = {name: signatures for name, signatures in parallel.items() if len(signatures) > 1}
    assert not several, f"compiled for several signatures: {several}"
    assert not _added_by_the_pool(serial, parallel)


def test_thread_driver_needs_a_worker_that_releases_the_gil():
    holds_the_gil = _numba.njit(cache=False)(lambda counter: None)
    with pytest.raises(ValueError, match=r"^worker: expected a Numba function compiled with nogil=True"):
        _numba.thread_driver(holds_the_gil)


def test_worker_threads_are_new_in_a_forked_child_and_report_a_helpers_error(monkeypatch):
    threads = _numba.WorkerThreads()
    first = threads._helpers()
    assert threads._helpers() is first
    monkeypatch.setattr(_numba.os, "getpid", lambda: -1)  # as in a child forked after the threads started
    assert threads._helpers() is not first
    calls = []

    def fails_on_a_helper(*args):
        calls.append(threading.current_thread() is threading.main_thread())
        if not calls[-1]:
            raise RuntimeError("helper failed")

    with pytest.raises(RuntimeError, match="helper failed"):
        threads.run(fails_on_a_helper, 3, ())
    assert sorted(calls) == [False, False, True]


def test_dispatch_mode_and_kernel_threads_hold_for_a_with_block_only():
    assert _numba.DISPATCH.mode is None
    threads = numba.get_num_threads()
    with _numba.dispatch_mode("serial"):
        assert _numba.DISPATCH.mode == "serial"
        with _numba.dispatch_mode("parallel"), _numba.kernel_threads(1):
            assert _numba.DISPATCH.mode == "parallel" and numba.get_num_threads() == 1
        assert _numba.DISPATCH.mode == "serial" and numba.get_num_threads() == threads
    assert _numba.DISPATCH.mode is None
    with pytest.raises(ValueError, match=r"^mode: expected one of \('serial', 'parallel'\) or None, received 'fast'"):
        _numba.dispatch_mode("fast")
    for bad in (0, numba.config.NUMBA_NUM_THREADS + 1, 1.0, True):
        with pytest.raises(ValueError, match=r"^threads: expected an integer from 1 to NUMBA_NUM_THREADS"):
            with _numba.kernel_threads(bad):
                pass
    assert numba.get_num_threads() == threads


def test_dispatcher_avoids_a_slow_thread_pool_and_retries_it(monkeypatch):
    clock = [0.0]
    fake_time = type("Clock", (), {"perf_counter": staticmethod(lambda: clock[0])})
    monkeypatch.setattr(_numba, "time", fake_time)
    monkeypatch.setattr(_numba.numba, "get_num_threads", lambda: 2)
    dispatcher = _numba.Dispatcher()
    ran = []

    def path(name, seconds):
        def run(*threads):
            ran.append(name)
            clock[0] += seconds
        return run

    work = int(0.004 / dispatcher.default_rate)  # ≈ 4 ms of work on one thread
    serial, slow_pool = path("serial", 0.004), path("parallel", 0.03)
    fast_pool = path("parallel", 0.002)
    for _ in range(6):
        dispatcher.run("kernel", work, serial, slow_pool)
    # Tried the pool once (optimistic start), found it slower, stayed serial.
    assert ran == ["parallel"] + ["serial"] * 5
    clock[0] += dispatcher.retry_seconds
    for _ in range(6):
        dispatcher.run("kernel", work, serial, fast_pool)
    # The retry finds a fast pool, which is used from then on.
    assert ran[6:] == ["parallel"] * 6
    ran.clear()
    dispatcher.run("kernel", 10, serial, fast_pool)  # tiny batch: never worth the pool
    assert ran == ["serial"]
    # A first call that compiles does not inflate the rate without bound.
    with dispatcher.forced("serial"):
        dispatcher.run("new kernel", work, path("serial", 5.0), fast_pool)
    assert dispatcher.rates["new kernel"] <= 4 * dispatcher.default_rate


def test_exp_nonpositive_is_accurate():
    x = np.concatenate([-np.linspace(0.0, 720.0, 200_001), -np.logspace(-300, 2, 1000), [-0.0]])
    values = np.empty_like(x)
    _exp_loop(x, values)
    expected = np.exp(x)
    normal = expected > 1e-307
    assert np.all(np.abs(values[normal] - expected[normal]) <= 4.5e-16 * expected[normal])
    assert np.all(values[x < _exp.EXP_FLOOR] == 0.0)
    assert np.all(values[~normal] <= 1e-307)


@_numba.njit(fastmath=_numba.FASTMATH)
def _exp_loop(x, out):
    for i in range(x.size):
        out[i] = _exp.exp_nonpositive(x[i])


@pytest.fixture(scope="module")
def pass_kernel_calls():
    """A call of each kernel a pass's block function runs outside a thread driver, on inputs that take it
    tens of milliseconds; made once for the module."""
    from mhalearn.data.token_codes import block_codes, code_groups
    from mhalearn.learners.chen_li.agreement_rows import _entries_within
    from mhalearn.learners.chen_li.phase1_crude_sum import token_sums

    rng = np.random.default_rng(0)
    X = rng.choice([-1.0, 1.0], size=(200_000, 4, 12))
    codes = np.empty((len(X), 4, code_groups(12)), dtype=np.uint8)
    flat = rng.random(4_000_000)
    return {"token_sums": lambda: token_sums(X, X, np.arange(len(X))),
            "block_codes": lambda: block_codes(X, codes),
            "_entries_within": lambda: _entries_within(flat, flat, 0.5, 0.5)}


@pytest.mark.parametrize("name", ["token_sums", "block_codes", "_entries_within"])
def test_a_pass_kernel_releases_the_gil_while_it_runs(pass_kernel_calls, name):
    # On Dask's threads a kernel that holds the GIL stops the other block tasks' Python.  Call it on a thread
    # while this one keeps taking the GIL, and add up the stretches (over 1 ms) in which this thread did not
    # run: holding the GIL, the kernel leaves it out for nearly all of the calls (it gets the GIL only
    # between them); releasing it, only the OS's other work does (a third of the time with three busy
    # threads on two cores).
    call = pass_kernel_calls[name]
    call()  # compiled before the clock starts
    previous = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)

    def calls():
        for _ in range(10):
            call()

    try:
        worker = threading.Thread(target=calls)
        left_out, start = 0.0, time.perf_counter()
        last = start
        worker.start()
        while worker.is_alive():
            now = time.perf_counter()
            if now - last > 0.001:
                left_out += now - last
            last = now
        worker.join()
        share = left_out / (time.perf_counter() - start)
    finally:
        sys.setswitchinterval(previous)
    assert share < 0.8, f"{name} held the GIL: this thread did not run for {share:.0%} of its calls"
