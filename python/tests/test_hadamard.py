# SPDX-License-Identifier: MIT
"""cpd.hadamard (issue 33 item 6) against its definition written with NumPy: Sylvester's
Hadamard matrix by Kronecker products, the signs from cpd.random_bits' top bit, a float64
matrix product per block; the inverse, the tail, torch tensors, non-finite blocks, errors."""

import math

import numpy as np
import pytest

import cpd


def sylvester(b):
    h = np.ones((1, 1))
    while h.shape[0] < b:
        h = np.kron(np.array([[1.0, 1.0], [1.0, -1.0]]), h)
    return h


def signs(b, seed, stream):
    return np.array([-1.0 if cpd.random_bits(seed, stream, j) >> 31 else 1.0 for j in range(b)])


def reference(x, b, seed, stream, inverse):
    x = np.asarray(x, np.float64).ravel()
    y = x.copy()
    h, s, k = sylvester(b) / math.sqrt(b), signs(b, seed, stream), x.size // b
    blocks = x[:k * b].reshape(k, b)
    y[:k * b] = ((blocks @ h.T) * s).ravel() if inverse else ((blocks * s) @ h.T).ravel()
    return y


@pytest.mark.parametrize("b", [2, 16, 32, 64, 128, 256])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rotation_is_the_signed_hadamard_product(b, dtype):
    rng = np.random.default_rng(b)
    n = 3 * b + b - 1  # three blocks and a tail
    x = (rng.standard_normal(n) * np.exp(2 * rng.standard_normal(n))).astype(dtype)
    for inverse in (False, True):
        y, st = cpd.hadamard(x, b, seed=7, stream=2, inverse=inverse, stats=True)
        assert y.dtype == dtype and st == {"blocks": 3, "nonfinite_blocks": 0}
        ref = reference(x, b, 7, 2, inverse)
        tol = (math.log2(b) + 3) * np.finfo(dtype).eps * np.abs(x[:3 * b]).reshape(3, b).sum(1).max() / math.sqrt(b)
        assert np.max(np.abs(y.astype(np.float64) - ref)) <= tol
        assert np.array_equal(y[3 * b:].view(np.uint8), x[3 * b:].view(np.uint8))  # the tail, bit for bit


def test_inverse_round_trip_and_norms():
    rng = np.random.default_rng(1)
    x = rng.integers(-1000, 1000, 4096).astype(np.float32)
    y = cpd.hadamard(x, 64, seed=3)
    assert np.array_equal(cpd.hadamard(y, 64, seed=3, inverse=True), x)  # exact: integers, b = 4^3
    assert np.allclose(np.linalg.norm(y.reshape(-1, 64), axis=1), np.linalg.norm(x.reshape(-1, 64), axis=1),
                       rtol=1e-6)
    assert not np.array_equal(cpd.hadamard(x, 64, seed=4), y)


def test_an_outlier_is_spread_over_its_block():
    x = np.zeros(32, np.float32)
    x[3] = 1024.0
    y = cpd.hadamard(x, 16)
    assert np.all(np.abs(y[:16]) == 256.0) and np.all(y[16:] == 0)


def test_torch_out_threads_and_non_finite_blocks():
    torch = pytest.importorskip("torch")
    x = torch.randn(1000, dtype=torch.float64)
    y = cpd.hadamard(x, 128, seed=5)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float64
    out = torch.empty_like(x)
    assert cpd.hadamard(x, 128, seed=5, out=out, threads=3) is out
    assert torch.equal(out, y)
    z = np.ones(48, np.float32)
    z[20] = np.inf
    r, st = cpd.hadamard(z, 16, stats=True)
    assert st == {"blocks": 3, "nonfinite_blocks": 1}
    assert not np.isfinite(r[16:32]).any() and np.isfinite(r[:16]).all() and np.isfinite(r[32:]).all()


def test_bad_input_is_refused():
    x = np.ones(64, np.float32)
    for b in (0, 1, 3, 24, 2**17):
        with pytest.raises(ValueError, match="block"):
            cpd.hadamard(x, b)
    with pytest.raises(TypeError, match="float32 or float64"):
        cpd.hadamard(x.astype(np.float16), 16)
    with pytest.raises(ValueError, match="seed"):
        cpd.hadamard(x, 16, seed=-1)
