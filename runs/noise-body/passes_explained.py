"""The noise-free test's passes against those noise at the assumed share's sigma explains (development teachers 30-31).

Per m and sigma, under W_Sigma plus an error of relative size 0.02, on 4e5 sequences: the second sigma
estimate (at the share phase 2 assumes), the rows the noise-free test passes, the passes noise at that sigma
explains (the share's rows in chi2_nu's lower tail), and the passes at 2 and 4 times the tolerance.

    python runs/noise-body/passes_explained.py > runs/noise-body/passes-explained.txt
"""
import numpy as np
from scipy import stats

from mhalearn.attention.teacher_source import TeacherSource
from mhalearn.attention.teachers import sample_teacher
from mhalearn.learners.chen_li import BodySettings
from mhalearn.learners.chen_li.decoder import decoding_residuals
from mhalearn.learners.chen_li.noise import distinct_tokens
from mhalearn.seeding import seeded_rng

S = BodySettings()
for heads, noise in [(1, 0.1), (2, 0.1), (3, 0.1), (4, 0.0), (3, 0.0), (2, 0.0)]:
    for seed in (30, 31):
        teacher = sample_teacher(heads, 12, rng=seeded_rng(20_251, heads, seed))
        w_sum = teacher.ws.sum(axis=0)
        e = np.random.default_rng(seed).standard_normal(w_sum.shape)
        w_hat = w_sum + 0.02 * np.linalg.norm(w_sum) * e / np.linalg.norm(e)
        X, Y = TeacherSource(teacher, 10**7, 4, seed=seed, noise=noise).head(400_000)
        X, Y = np.asarray(X), np.asarray(Y)
        r, v = decoding_residuals(X, Y, w_hat)
        ny = np.sqrt(np.einsum("nrd,nrd->nr", Y, Y))
        dof = np.broadcast_to((12 - distinct_tokens(X) + 1)[:, None], r.shape)
        ok = (v <= S.simplex_tol) & np.isfinite(r) & (ny > 0)
        scaled = ((r * ny) ** 2 / stats.chi2.median(dof))[ok]
        share = 0.01 if heads > 1 else 1.0
        sig2 = np.sqrt(np.quantile(scaled, share / 2))
        passing = int(np.sum(r[ok] <= S.residual_tol))
        # expected passes if a share of rows agree with noise sig2: P(sig2^2 chi2_nu <= (tol |y|)^2)
        p = stats.chi2.cdf((S.residual_tol * ny[ok]) ** 2 / sig2 ** 2, dof[ok])
        expected = share * p.sum()
        # pass counts at 2x and 4x the tolerance
        c2, c4 = int(np.sum(r[ok] <= 2 * S.residual_tol)), int(np.sum(r[ok] <= 4 * S.residual_tol))
        print(f"m={heads} sigma={noise} seed={seed}: est2 {sig2:.3f} passing {passing} "
              f"expected-from-noise {expected:.3g} at 2tol {c2} at 4tol {c4} rows {ok.sum()}", flush=True)
