"""The real GPU paths: only where an NVIDIA GPU, CuPy and dask-cuda are present."""
import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


def test_gpu_check_passes():
    from workbench.bench.gpucheck import main
    assert main() == 0


def test_cupy_model_gradient_matches_numpy():
    import numpy as np

    from workbench.maths.backend import get_xp, to_numpy
    from workbench.maths.models import make_model
    cp = get_xp("gpu")
    model = make_model("mlp", 20, 5, hidden=(16,))
    params = model.init(0)
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((32, 20)).astype(np.float32), rng.integers(0, 5, 32)
    loss_np, g_np = model.loss_and_grad(params, X, y)
    loss_cp, g_cp = model.loss_and_grad(cp.asarray(params), cp.asarray(X), cp.asarray(y))
    assert abs(loss_np - loss_cp) < 1e-5
    np.testing.assert_allclose(to_numpy(g_cp), g_np, atol=1e-5)
