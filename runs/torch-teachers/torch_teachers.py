"""Heads of a PyTorch ``nn.MultiheadAttention`` planted as teachers and learned back (issue 13).

For each (d, m): a ``torch.nn.MultiheadAttention(embed_dim=d, num_heads=m,
bias=False)`` with PyTorch's default initialisation (seed 0) is read with
``MultiHeadAttention.from_torch`` (Θ_h = W_Q,hᵀ W_K,h/√(d/m), W_h =
W_V,hᵀ W_O,hᵀ, each of rank d/m), n = 2000 Boolean sequences of k = 7 tokens
are labelled by it, and ``GradientLearner`` learns them back; prints the
relative test error and the fit time.  Needs ``pip install -e '.[torch]'``.

    python runs/torch-teachers/torch_teachers.py
"""

import time

import mhalearn

SHAPES = [(6, 1), (6, 2), (6, 3), (8, 2), (4, 4), (8, 4)]


def main():
    try:
        import torch
    except ImportError:
        print("torch is not installed: pip install -e '.[torch]' (a CPU build of torch first)")
        return
    for d, m in SHAPES:
        torch.manual_seed(0)
        module = torch.nn.MultiheadAttention(embed_dim=d, num_heads=m, bias=False).double().eval()
        planted = mhalearn.MultiHeadAttention.from_torch(module)
        X, Y = mhalearn.make_dataset(planted, 2000, 7, rng=1)
        start = time.perf_counter()
        learner = mhalearn.GradientLearner(m, random_state=0).fit(X, Y)
        X_test = mhalearn.boolean_inputs(2000, 7, d, rng=2)
        print(f"nn.MultiheadAttention(embed_dim={d}, num_heads={m}): relative test error "
              f"{mhalearn.relative_error(learner.model_, planted, X_test):.2e} "
              f"({time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
