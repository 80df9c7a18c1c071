"""Loads the ``einsummable.v1`` protobuf/gRPC modules generated when the package was built.

``pip install clients/python`` (scripts/setup does it into the project's .venv) runs
grpcio-tools over ``proto/einsummable/v1/*.proto`` in ``setup.py``'s ``build_py`` step, so the
installed package carries ``einsummable/v1/{graph_pb2,service_pb2,service_pb2_grpc}.py``; the
source tree never holds them. They are loaded on first use, not at ``import einsummable``, so
the graph API works without gRPC installed until a message is built.
"""

from __future__ import annotations

import importlib
import threading
from types import SimpleNamespace

from . import _protogen

_lock = threading.Lock()
_modules: SimpleNamespace | None = None


def modules() -> SimpleNamespace:
    """``graph_pb2``, ``service_pb2`` and ``service_pb2_grpc`` of the installed package."""
    global _modules
    with _lock:
        if _modules is None:
            try:
                loaded = {
                    name: importlib.import_module(f"einsummable.v1.{name}")
                    for name in _protogen.GENERATED_MODULES
                }
            except ImportError as error:
                raise ImportError(
                    "einsummable: the generated gRPC stubs (einsummable.v1) are missing: this "
                    "package was not built by pip (run `pip install clients/python`, which "
                    "generates them from proto/; importing clients/python/src in place is not "
                    f"supported): {error}"
                ) from error
            except Exception as error:  # protobuf's VersionError for a too-old runtime
                raise ImportError(
                    f"einsummable: the generated gRPC stubs do not load: {error}; upgrade "
                    "protobuf and grpcio, or reinstall the package"
                ) from error
            _modules = SimpleNamespace(**loaded)
        return _modules
