"""The memory budget (issue 22, item 7): sizes that cannot fit are refused, naming the argument, before allocating."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import mhalearn
from mhalearn import _memory
from mhalearn._memory import (
    MemoryBudgetError,
    check_memory,
    format_bytes,
    get_memory_budget,
    memory_budget,
    set_memory_budget,
)
from mhalearn.cli import EXIT_BAD_INPUT, main

# One xdist worker runs this module: the oversized calls run once, in a module fixture.
pytestmark = pytest.mark.xdist_group("memory")

GIB = 1 << 30


@pytest.fixture
def budget(monkeypatch):
    """A clean budget state: neither set_memory_budget nor MHALEARN_MEMORY_BUDGET in force, restored after."""
    monkeypatch.delenv(_memory.ENVIRONMENT_VARIABLE, raising=False)
    with memory_budget(None):
        yield monkeypatch


def test_check_memory_names_the_argument_the_size_and_how_to_raise_the_budget(budget):
    set_memory_budget("12GiB")
    check_memory(12 * GIB, "features", "10 random features")  # at the budget: fine
    with pytest.raises(MemoryBudgetError) as raised:
        check_memory(96 * GIB, "features", "1000000000 random features")
    assert str(raised.value) == (
        "features: 1000000000 random features would take 96 GiB, more than the memory budget of 12 GiB "
        "(set by mhalearn.set_memory_budget); lower features, or raise the budget with "
        "mhalearn.set_memory_budget(nbytes) or the environment variable MHALEARN_MEMORY_BUDGET")
    # A MemoryError for those who catch failed allocations, a ValueError for the command line (bad input).
    assert isinstance(raised.value, MemoryError) and isinstance(raised.value, ValueError)


def test_budget_comes_from_the_setter_then_the_environment_then_half_the_memory(budget):
    usable = _memory.usable_memory()
    assert get_memory_budget() == usable // 2
    with pytest.raises(MemoryBudgetError, match=rf"\(half of the {format_bytes(usable)} this process may use\)"):
        check_memory(usable, "samples", "everything")
    budget.setenv(_memory.ENVIRONMENT_VARIABLE, "3 GiB")
    assert get_memory_budget() == 3 * GIB
    with pytest.raises(MemoryBudgetError, match=r"budget of 3 GiB \(set by MHALEARN_MEMORY_BUDGET\)"):
        check_memory(4 * GIB, "samples", "4 GiB of sequences")
    mhalearn.set_memory_budget(512 << 20)
    assert mhalearn.get_memory_budget() == 512 << 20
    mhalearn.set_memory_budget(None)
    assert get_memory_budget() == 3 * GIB


def test_a_budget_for_a_with_block_nests_and_gives_back_the_one_before(budget):
    set_memory_budget("1GiB")
    with mhalearn.memory_budget("2GiB") as chosen:
        assert chosen == (2 * GIB, "set by mhalearn.memory_budget") and get_memory_budget() == 2 * GIB
        with pytest.raises(MemoryBudgetError, match=r"budget of 2 GiB \(set by mhalearn.memory_budget\)"):
            check_memory(3 * GIB, "samples", "3 GiB of sequences")
        with memory_budget(None):  # the environment's, else half the memory
            assert get_memory_budget() == _memory.usable_memory() // 2
        assert get_memory_budget() == 2 * GIB
        set_memory_budget("3GiB")  # inside a block: until the block ends
        assert get_memory_budget() == 3 * GIB
    assert get_memory_budget() == GIB
    with pytest.raises(ZeroDivisionError), memory_budget("4GiB"):
        1 / 0
    assert get_memory_budget() == GIB
    with pytest.raises(ValueError, match=r"^nbytes: expected a number of bytes >= 1"):
        memory_budget("lots")


def test_blocks_left_out_of_order_by_two_threads_end_with_the_budget_before_both(budget):
    import threading

    set_memory_budget("1GiB")
    steps = [threading.Event() for _ in range(3)]
    seen = {}

    def second():  # enters after the main thread's block and leaves after it
        with memory_budget("2GiB"):
            steps[0].set()
            steps[1].wait()
            seen["after the first left"] = get_memory_budget()
        steps[2].set()

    thread = threading.Thread(target=second)
    with memory_budget("3GiB"):
        thread.start()
        steps[0].wait()
        seen["both open"] = get_memory_budget()
    steps[1].set()
    steps[2].wait()
    thread.join()
    assert seen == {"both open": 2 * GIB, "after the first left": 2 * GIB}
    assert get_memory_budget() == GIB


@pytest.mark.parametrize("value, expected", [(1000, 1000), ("1000", 1000), ("2K", 2048), ("1.5 GiB", 3 * GIB // 2),
                                             ("12GB", 12 * GIB), ("4t", 4 << 40)])
def test_budgets_are_bytes_with_binary_units(budget, value, expected):
    set_memory_budget(value)
    assert get_memory_budget() == expected


@pytest.mark.parametrize("value", [0, -5, True, 2.5, "", "lots", "12 GHz", "0.1"])
def test_bad_budgets_are_refused_naming_where_they_came_from(budget, value):
    with pytest.raises(ValueError, match=r"^nbytes: expected a number of bytes >= 1"):
        set_memory_budget(value)
    if isinstance(value, str):
        budget.setenv(_memory.ENVIRONMENT_VARIABLE, value or "x")
        with pytest.raises(ValueError, match=r"^MHALEARN_MEMORY_BUDGET: expected a number of bytes >= 1"):
            get_memory_budget()


def test_command_line_reports_a_size_over_the_budget_as_bad_input(budget, capsys, tmp_path):
    # 100 MiB holds the learner's moment route at d = 12 (73 MiB, checked first) but not the data.
    budget.setenv(_memory.ENVIRONMENT_VARIABLE, "100MiB")
    assert main(["demo", "--quiet", "--samples", "100000", "--out", str(tmp_path)]) == EXIT_BAD_INPUT
    assert capsys.readouterr().err.startswith("mhalearn: error: samples: 100000 labelled sequences of 4 × 12 "
                                              "entries would take 110 MiB, more than the memory budget of 100 MiB")


# Each call asks for a size far beyond the machine (24 GiB).  The child process may
# map 3 GB, so without the budget's check every call fails with NumPy's own
# MemoryError (or would be killed) instead of the message naming the argument.
OVERSIZED_CALLS = {
    "boolean_inputs": ("samples", "mhalearn.boolean_inputs(10**9, 4, 12, rng=0)"),
    "make_dataset": ("samples", "mhalearn.make_dataset(mhalearn.sample_teacher(2, 12, rng=0), 10**8, 4, rng=0)"),
    "RandomFeatureMLP": ("features", "mhalearn.RandomFeatureMLP(features=10**9).fit(np.ones((20, 3, 4)), "
                                     "np.arange(20.0))"),
    "RandomFeatureAttention": ("heads", "mhalearn.RandomFeatureAttention(heads=10**9).fit(np.ones((20, 3, 4)), "
                                        "np.arange(20.0))"),
    "MLPStudent": ("hidden", "mhalearn.MLPStudent(hidden=10**9, steps=1).fit(*bits)"),
    "AttentionStudent": ("hidden", "mhalearn.AttentionStudent(hidden=10**9, steps=1).fit(*bits)"),
}

_CHILD = textwrap.dedent("""
    import json, resource, sys
    resource.setrlimit(resource.RLIMIT_AS, (3 * 10**9, 3 * 10**9))
    import numpy as np
    import mhalearn
    bits = mhalearn.SparseBooleanTask(10, 2, "parity", rng=0).sample(64, rng=1)
    errors = {}
    for name, call in json.loads(sys.argv[1]).items():
        try:
            eval(call)
            errors[name] = None
        except MemoryError as error:
            errors[name] = [type(error).__name__, str(error)]
    print(json.dumps(errors))
""")


@pytest.fixture(scope="module")
def oversized_errors():
    """What each call of OVERSIZED_CALLS raised in a child process limited to 3 GB of address space."""
    calls = {name: call for name, (_, call) in OVERSIZED_CALLS.items()}
    environment = {key: value for key, value in os.environ.items() if key != _memory.ENVIRONMENT_VARIABLE}
    child = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(calls)], capture_output=True, text=True,
                           timeout=300, env=environment)
    assert child.returncode == 0, child.stderr[-2000:]
    return json.loads(child.stdout.splitlines()[-1])


@pytest.mark.parametrize("call", sorted(OVERSIZED_CALLS))
def test_oversized_requests_are_refused_naming_the_argument_under_an_address_space_limit(oversized_errors, call):
    argument = OVERSIZED_CALLS[call][0]
    assert oversized_errors[call] is not None, f"{call} succeeded"
    kind, message = oversized_errors[call]
    assert kind == "MemoryBudgetError", message
    assert message.startswith(f"{argument}: ")
    assert " would take " in message and ", more than the memory budget of " in message
    assert f"lower {argument}, or raise the budget with mhalearn.set_memory_budget" in message


def test_peak_memory_of_a_spawned_process_is_its_own():
    # A worker spawned by a process that once held a large array must not report that peak as its own.
    from mhalearn._memory import peak_memory_mb

    held = np.ones(300 * 2 ** 17)  # 300 MB, touched
    parent = peak_memory_mb()
    child = float(subprocess.run([sys.executable, "-c", "from mhalearn._memory import peak_memory_mb; "
                                  "print(peak_memory_mb())"], capture_output=True, text=True, check=True).stdout)
    assert held[-1] == 1.0 and parent >= 300 and child < parent - 200


@pytest.mark.parametrize("span_route", ["auto", "body", "moment"])
def test_sculpt_learner_refuses_a_moment_route_over_budget_before_any_phase(budget, span_route):
    # Every route may fall back to the moment route, whose Gram matrix grows like d⁶: a fit that could
    # only fail after phases 1–4 must fail before them.
    budget.setenv(_memory.ENVIRONMENT_VARIABLE, "128MiB")
    X = np.ones((50, 4, 16))
    seen = []
    with pytest.raises(MemoryBudgetError, match=r"^X: the moment route at token dimension d = 16"):
        mhalearn.SculptLearner(2, span_route=span_route).fit(X, X, callback=lambda *event: seen.append(event))
    assert seen == []
    mhalearn.SculptLearner(2, span_route=span_route)._check_shape(50, 4, 12)  # 73 MiB at d = 12: within the budget


def test_sculpt_learner_keeps_codes_and_training_rows_only_within_the_budget_and_fits_the_same_bits(budget):
    # The codes spare later passes reading X, the training rows drawing each block's split again; without
    # them (over the budget) every pass codes its blocks and draws their splits anew, and the fit is the
    # same to the bit.
    from mhalearn.data import sources

    teacher = mhalearn.sample_teacher(2, 6, rng=np.random.default_rng(4))
    X = mhalearn.boolean_inputs(20_000, 3, 6, rng=np.random.default_rng(5))  # X and Y over the moment route's 3.4 MiB
    Y = teacher.predict(X)
    kept = []
    original = sources.ArraySource

    def recording(*args, **kwargs):
        source = original(*args, **kwargs)
        kept.append((source._rows is not None, source._codes is not None))
        return source

    budget.setattr(sources, "ArraySource", recording)
    models = []
    # The default budget; one the rows (8 bytes a training sequence) fit in but not the codes; one neither does.
    for limit in (None, X.nbytes + Y.nbytes + 8 * len(X), X.nbytes + Y.nbytes):
        with memory_budget(limit):
            learner = mhalearn.SculptLearner(2, search=mhalearn.SearchSettings(max_candidates=500, refine="none"),
                                             random_state=0).fit(X, Y)
        models.append(learner.model_)
    assert kept == [(True, True), (True, False), (False, False)]
    for model in models[1:]:
        np.testing.assert_array_equal(models[0].thetas, model.thetas)
        np.testing.assert_array_equal(models[0].ws, model.ws)
