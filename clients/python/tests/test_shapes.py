"""Integration: the daemon binds a model's symbols from its inputs' shapes (no ``dims`` needed),
and refuses ``dims`` that disagree with them, naming the symbol, the input and both sizes.

Uses the ``daemon_client`` fixture (conftest.py) and the tiny ``matmul_graph``.
"""

import numpy as np
import pytest
from conftest import matmul_graph

import einsummable as es

pytestmark = pytest.mark.integration


def test_symbols_bind_from_the_inputs_shapes(daemon_client):
    model = "shapes-bind"
    daemon_client.register_model(model, matmul_graph(), weights=["w"])
    try:
        rng = np.random.default_rng(5)
        w = rng.standard_normal((8, 8), dtype=np.float32)
        daemon_client.upload_tensor(model, "w", w, progress=False)
        options = {"devices": 2}
        for tokens in (3, 5):
            x = rng.standard_normal((tokens, 8), dtype=np.float32)
            result = daemon_client.execute(model, {"x": x}, options=options)
            np.testing.assert_allclose(result.outputs["y"], x @ w, rtol=1e-5, atol=1e-5)
            # dims that agree are still accepted, and name the same plan.
            again = daemon_client.execute(model, {"x": x}, {"tokens": tokens}, options)
            assert again.cache_hit is True
            np.testing.assert_array_equal(again.outputs["y"], result.outputs["y"])
        x = np.zeros((3, 8), np.float32)
        with pytest.raises(es.InvalidArgumentError) as info:
            daemon_client.execute(model, {"x": x}, {"tokens": 4}, options)
        assert info.value.details == (
            "dims: symbol 'tokens' is bound to 4, but input 'x' dimension 0 ('tokens') is 3"
        )
        # Compile has no inputs: its dims still bind every symbol.
        with pytest.raises(es.InvalidArgumentError, match=r"symbol 'tokens' .* is not bound"):
            daemon_client.compile(model, {}, options)
    finally:
        daemon_client.unregister(model)
