"""The parts benchmarks find the kernel text they leave out.

``runs/generated-pass/forward_parts.py`` and ``runs/generated-pass/decoder_parts.py`` time a kernel
against copies of it with one step replaced; each step is found by its source
text.  A kernel rewritten without its benchmark stops that benchmark, so
every text must still occur in the kernel's file, once.
"""

import importlib
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "bench")
#: The parts benchmarks are studies of the generated pass's kernels, kept beside their rows.
STUDY = os.path.join(ROOT, "runs", "generated-pass")


@pytest.fixture
def bench_module(monkeypatch):
    monkeypatch.syspath_prepend(BENCH)
    monkeypatch.syspath_prepend(STUDY)

    def load(name):
        sys.modules.pop(name, None)
        return importlib.import_module(name)
    return load


@pytest.mark.parametrize("script, path", [
    ("forward_parts", os.path.join("attention", "forward_kernel.py")),
    ("decoder_parts", os.path.join("learners", "chen_li", "decoder.py")),
])
def test_every_left_out_step_is_in_its_kernel_once(bench_module, script, path):
    module = bench_module(script)
    common = bench_module("_common")
    with open(os.path.join(common.CHECKOUT, "mhalearn", path)) as handle:
        source = handle.read()
    left_out = dict(module.LEFT_OUT)
    if script == "decoder_parts":
        left_out["rows' solves"] = module.row_solves()
    for name, (text, _) in left_out.items():
        assert source.count(text) == 1, (script, name)
