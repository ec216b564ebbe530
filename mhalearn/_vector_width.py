"""Full-width vectors for the kernels on a core with AVX-512 ([design: kernels]).

LLVM compiles for an Intel core with AVX-512 as if it preferred 256-bit vectors (its
``prefer-256-bit`` tuning, which guards older cores against the clock drop of 512-bit
instructions), so Numba's kernels use half the width the core has while NumPy's dgemm,
the yardstick of ``bench/kernels.py``, uses all of it.  The forward kernel keeps eight
float64 sequences side by side (``LANES``): exactly one 512-bit register.  On the 2-core
Rocket Lake VM of ``runs/fit-speed/`` dropping the tuning took the forward kernel from 28 %
to 48 % of one core's dgemm at k = d = 16 and from 27 % to 38–43 % at the labelling shape.

The kernels are compiled without reassociation (:data:`mhalearn._numba.FASTMATH`), so the
width changes how many lanes an instruction carries, never the order of a sum: the bits
are the same (``tests/test_vector_width.py``).

Applied once, when the package is first imported and before Numba compiles anything:
the host's own feature string (what Numba would use) with ``-prefer-256-bit`` appended,
through ``NUMBA_CPU_FEATURES``.  A ``NUMBA_CPU_FEATURES`` or ``NUMBA_CPU_NAME`` the user set
is left alone (set ``NUMBA_CPU_FEATURES`` to the host's features to keep LLVM's default),
and so is a Numba that has already compiled in this process.  Worker processes inherit
the variable, so every process of a Dask cluster compiles alike.
"""

from __future__ import annotations

import os
import sys

#: The LLVM feature that, appended to the host's, lifts the 256-bit preference.
FULL_WIDTH = "-prefer-256-bit"


def full_width_features() -> str | None:
    """The host's LLVM feature string with :data:`FULL_WIDTH` appended, or None without AVX-512."""
    import llvmlite.binding as llvm

    features = llvm.get_host_cpu_features().flatten()
    return f"{features},{FULL_WIDTH}" if "+avx512f" in features.split(",") else None


def prefer_full_vector_width() -> str | None:
    """Ask Numba for full-width vectors where it has not compiled yet; the feature string set, or None."""
    if "NUMBA_CPU_FEATURES" in os.environ or "NUMBA_CPU_NAME" in os.environ:
        return None
    numba = sys.modules.get("numba")
    if numba is not None:
        from numba.core.registry import cpu_target

        # The CPU target reads the features once, when its context is first built.
        if "_toplevel_target_context" in vars(cpu_target) or numba.config.CPU_FEATURES is not None:
            return None
    features = full_width_features()
    if features is None:
        return None
    os.environ["NUMBA_CPU_FEATURES"] = features
    if numba is not None:
        numba.config.CPU_FEATURES = features
    return features
