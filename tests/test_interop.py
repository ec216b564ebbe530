"""PyTorch interop (issue 13); skipped, with the reason, where torch is not installed (JAX: test_interop_jax.py)."""

import numpy as np
import pytest

import mhalearn
from mhalearn.attention import kernels

torch = pytest.importorskip("torch", reason="PyTorch interop needs the 'torch' extra (pip install 'mhalearn[torch]')")


def _multihead_attention(d: int, m: int, seed: int, **options):
    torch.manual_seed(seed)
    return torch.nn.MultiheadAttention(d, m, **options).double().eval()


def _torch_self_attention(module, X: np.ndarray) -> np.ndarray:
    tokens = torch.as_tensor(X)
    if not module.batch_first:
        tokens = tokens.transpose(0, 1)
    out = module(tokens, tokens, tokens, need_weights=False)[0]
    return (out if module.batch_first else out.transpose(0, 1)).detach().numpy()


def test_to_torch_forward_equals_predict_and_round_trips_exactly():
    teacher = mhalearn.sample_teacher(3, 5, rng=0)
    X = mhalearn.boolean_inputs(40, 6, 5, rng=1)
    module = teacher.to_torch()
    assert module.thetas.dtype == torch.float64 and module.thetas.requires_grad
    out = module(torch.as_tensor(X)).detach().numpy()
    assert np.max(np.abs(out - teacher.predict(X))) <= 1e-10 * np.max(np.abs(teacher.predict(X)))
    back = mhalearn.MultiHeadAttention.from_torch(module)
    assert np.array_equal(back.thetas, teacher.thetas) and np.array_equal(back.ws, teacher.ws)


def test_loss_and_grad_agree_with_torch_autograd_on_random_shapes():
    rng = np.random.default_rng(7)
    for _ in range(5):
        n, k, d, m = (int(value) for value in rng.integers(1, 7, size=4))
        X, Y = rng.standard_normal((n, k, d)), rng.standard_normal((n, k, d))
        thetas, ws = rng.standard_normal((m, d, d)), rng.standard_normal((m, d, d))
        loss, d_thetas, d_ws = kernels.loss_and_grad(X, Y, thetas, ws)
        module = mhalearn.MultiHeadAttention(thetas, ws).to_torch()
        reference = 0.5 * ((module(torch.as_tensor(X)) - torch.as_tensor(Y)) ** 2).sum() / n
        reference.backward()
        assert loss == pytest.approx(reference.item(), rel=1e-10)
        np.testing.assert_allclose(d_thetas, module.thetas.grad.numpy(), rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(d_ws, module.ws.grad.numpy(), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("d, m, batch_first", [(6, 2, False), (8, 4, True), (5, 1, False), (4, 4, True)])
def test_from_torch_multihead_attention_equals_its_forward(d, m, batch_first):
    module = _multihead_attention(d, m, seed=d + m, bias=False, batch_first=batch_first)
    layer = mhalearn.MultiHeadAttention.from_torch(module)
    assert layer.heads == m and layer.dim == d
    assert all(np.linalg.matrix_rank(theta) <= d // m for theta in layer.thetas)  # each head has rank d/m
    X = mhalearn.gaussian_inputs(20, 7, d, rng=3)
    np.testing.assert_allclose(layer.predict(X), _torch_self_attention(module, X), rtol=1e-10, atol=1e-12)


def test_from_torch_ignores_a_key_bias_and_refuses_biases_it_cannot_represent():
    module = _multihead_attention(6, 2, seed=0, bias=True)
    with torch.no_grad():
        module.in_proj_bias.zero_()
        module.out_proj.bias.zero_()
        module.in_proj_bias[6:12] = torch.randn(6, dtype=torch.float64)  # the key bias: softmax ignores it
    X = mhalearn.gaussian_inputs(10, 5, 6, rng=4)
    layer = mhalearn.MultiHeadAttention.from_torch(module)
    np.testing.assert_allclose(layer.predict(X), _torch_self_attention(module, X), rtol=1e-10, atol=1e-12)
    for name, rows in (("query", slice(0, 6)), ("value", slice(12, 18))):
        with torch.no_grad():
            module.in_proj_bias.zero_()
            module.in_proj_bias[rows] = 0.1
        with pytest.raises(ValueError, match=f"expected a zero {name} bias"):
            mhalearn.MultiHeadAttention.from_torch(module)
    with pytest.raises(TypeError, match="module: expected"):
        mhalearn.MultiHeadAttention.from_torch(torch.nn.Linear(3, 3))


def test_heads_of_a_torch_multihead_attention_planted_as_teacher_are_learned_back():
    module = _multihead_attention(6, 2, seed=0, bias=False)
    teacher = mhalearn.MultiHeadAttention.from_torch(module)
    X, Y = mhalearn.make_dataset(teacher, 2000, 7, rng=1)
    learner = mhalearn.GradientLearner(2, random_state=0).fit(X, Y)
    X_test = mhalearn.boolean_inputs(2000, 7, 6, rng=2)
    assert mhalearn.relative_error(learner.model_, teacher, X_test) <= 1e-6

