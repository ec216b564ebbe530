"""A vectorisable exp for the softmax logits, and the bit casts it is built from ([design: kernels]).

:func:`exp_nonpositive` is what every softmax of mhalearn's kernels calls
(compiled with :data:`~mhalearn._numba.FASTMATH`, like every kernel);
``_float_to_bits`` and ``_bits_to_float`` reinterpret a float64's bits as an
int64 and back inside a kernel (the Boolean token codes read them too:
:mod:`mhalearn.data.token_codes`).
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.extending import intrinsic

from ._numba import FASTMATH

# LLVM here has no vector math library (Numba's SVML is off), so np.exp stays
# a scalar libm call and dominates the softmax.  This exp only ever sees
# shifted logits x <= 0, which makes a branch-free version easy:
# exp(x) = 2^n · exp(r), |r| <= ln2/2, 2^n assembled in the exponent bits and
# exp(r) = 1 + r + r²·g(r) with g a degree-9 polynomial fitted in Chebyshev
# nodes (fit error 1e-17 relative; with 1 + r exact the result stays within
# 1 ulp of exp: tests/test_kernels.py).  g is evaluated by Estrin's scheme,
# whose dependent chain is half of Horner's; with the forward kernel's head
# groups it made that kernel 3–10 % faster at k = 4, d = 12
# (runs/generated-pass/README.md).
# Comparisons are written as selects, which vectorise.

@intrinsic
def _bits_to_float(typingctx, value):
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.float64))
    return types.float64(types.int64), codegen


@intrinsic
def _float_to_bits(typingctx, value):
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.int64))
    return types.int64(types.float64), codegen


_LOG2E = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10
_INTEGER_SHIFT = 6755399441055744.0  # 1.5·2^52: n + shift holds the integer n in its low mantissa bits
_INTEGER_SHIFT_BITS = 0x4338000000000000
EXP_FLOOR = -708.0  # below this exp underflows to subnormals; we return 0
# g(r) = (exp(r) − 1 − r)/r² ≈ Σ_j _EXP_Gj · r^j on |r| <= ln2/2
# (mpmath.chebyfit at 50 digits, degree 9, then rounded to doubles).
_EXP_G0 = 0.5000000000000001
_EXP_G1 = 0.16666666666666669
_EXP_G2 = 0.041666666666624164
_EXP_G3 = 0.008333333333330065
_EXP_G4 = 0.0013888888917196719
_EXP_G5 = 0.00019841269863040545
_EXP_G6 = 2.4801521322368692e-05
_EXP_G7 = 2.7557268480310024e-06
_EXP_G8 = 2.7620075879983367e-07
_EXP_G9 = 2.5100375832561234e-08


@njit(inline="always", fastmath=FASTMATH, cache=True)
def exp_nonpositive(x):
    """exp(x) for x <= 0, branch-free so that loops over it vectorise."""
    clamped = x if x > EXP_FLOOR else EXP_FLOOR
    n_float = np.rint(clamped * _LOG2E)
    r = clamped - n_float * _LN2_HI - n_float * _LN2_LO
    # Estrin's scheme: the pairs, then their pairs, in parallel chains of at most five dependent
    # operations where Horner's has ten (same coefficients, same accuracy).
    r2 = r * r
    r4 = r2 * r2
    g01 = _EXP_G0 + _EXP_G1 * r
    g23 = _EXP_G2 + _EXP_G3 * r
    g45 = _EXP_G4 + _EXP_G5 * r
    g67 = _EXP_G6 + _EXP_G7 * r
    g89 = _EXP_G8 + _EXP_G9 * r
    g = (g01 + r2 * g23) + r4 * ((g45 + r2 * g67) + r4 * g89)
    p = (g * r + 1.0) * r + 1.0
    n = _float_to_bits(n_float + _INTEGER_SHIFT) - _INTEGER_SHIFT_BITS
    value = p * _bits_to_float((n + 1023) << 52)
    return value if x >= EXP_FLOOR else 0.0


__all__ = ["EXP_FLOOR", "exp_nonpositive"]
