"""Full-width vectors on AVX-512 (mhalearn/_vector_width.py): applied before Numba compiles, never over a
user's setting, and the same bits as LLVM's default width."""

import os
import subprocess
import sys

import pytest

from mhalearn._vector_width import FULL_WIDTH, full_width_features

HOST_HAS_AVX512 = full_width_features() is not None


def _run(script: str, **environment) -> str:
    env = {key: value for key, value in os.environ.items() if not key.startswith("NUMBA_CPU_")}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                            env={**env, **environment})
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


CODEGEN_FEATURES = ("from numba.core.registry import cpu_target\n"
                    "print(cpu_target.target_context.codegen()._tm_features.split(',')[-1])\n")


def test_the_kernels_compile_at_full_width_where_the_core_has_avx512():
    last = _run("import mhalearn.attention.kernels\n" + CODEGEN_FEATURES)
    assert (last == FULL_WIDTH) == HOST_HAS_AVX512


def test_a_users_numba_cpu_features_is_left_alone():
    import llvmlite.binding as llvm

    host = llvm.get_host_cpu_features().flatten()
    out = _run("import os, mhalearn\nprint(os.environ['NUMBA_CPU_FEATURES'] == " + repr(host) + ")\n"
               + CODEGEN_FEATURES, NUMBA_CPU_FEATURES=host)
    assert out.split() == ["True", host.split(",")[-1]]


def test_a_numba_that_compiled_before_the_package_is_left_alone():
    out = _run("import os, numba\nnumba.njit(lambda x: x + 1)(1)\n"
               "from mhalearn._vector_width import prefer_full_vector_width\n"
               "import mhalearn\nprint(prefer_full_vector_width(), 'NUMBA_CPU_FEATURES' in os.environ)\n"
               + CODEGEN_FEATURES)
    assert out.split()[:2] == ["None", "False"] and out.split()[2] != FULL_WIDTH


DIGESTS = """
import hashlib
import numpy as np
from mhalearn.attention import kernels
from mhalearn.attention.data import labelled_block
from mhalearn.attention.teachers import sample_teacher
rng = np.random.default_rng(5)
X, Y = rng.standard_normal((512, 16, 16)), rng.standard_normal((512, 16, 16))
thetas, ws = rng.standard_normal((4, 16, 16)) / 4, rng.standard_normal((4, 16, 16))
loss, *grads = kernels.loss_and_grad(X, Y, thetas, ws)
block = labelled_block(sample_teacher(4, 12, rng=0), 4, "boolean", 0.0, 3, 0, 4096)
arrays = [kernels.forward(X, thetas, ws), np.asarray(loss), *grads, *[np.asarray(part) for part in block[:2]]]
print(*[hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()[:16] for a in arrays])
"""


@pytest.mark.slow
@pytest.mark.skipif(not HOST_HAS_AVX512, reason="the width is LLVM's default without AVX-512")
def test_full_width_kernels_give_the_bits_of_the_default_width():
    import llvmlite.binding as llvm

    default = _run(DIGESTS, NUMBA_CPU_FEATURES=llvm.get_host_cpu_features().flatten())
    full = _run(DIGESTS)
    assert full == default and len(full.split()) >= 5
