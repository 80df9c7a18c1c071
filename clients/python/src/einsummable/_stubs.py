"""Finds (and, in a source checkout, generates) the ``einsummable.v1`` protobuf/gRPC modules.

An installed package carries modules generated at build time (``setup.py``). Imported from the
source tree, the package generates them on first use from ``proto/`` two levels above
``clients/python`` (or ``$EINSUMMABLE_PROTO_DIR``) into ``src/einsummable/v1/``, which git
ignores, and regenerates them whenever the .proto files change (a stamp holds their digest).
When the source tree is read-only the modules go to
``$XDG_CACHE_HOME/einsummable/stubs/<digest>/v1`` (default ``~/.cache``), which is added to the
package's search path. See ``_protogen`` for the generation itself.
"""

from __future__ import annotations

import importlib
import os
import threading
from pathlib import Path
from types import SimpleNamespace

from . import _protogen

_PACKAGE_DIR = Path(__file__).resolve().parent
_lock = threading.Lock()
_modules: SimpleNamespace | None = None


def _source_proto_root() -> Path | None:
    # src/einsummable/_stubs.py -> src -> clients/python -> clients -> repository root
    return _protogen.find_proto_root(
        [os.environ.get("EINSUMMABLE_PROTO_DIR"), _PACKAGE_DIR.parents[3] / "proto"]
    )


def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "einsummable" / "stubs"


def _ensure_generated() -> None:
    proto_root = _source_proto_root()
    if proto_root is None:
        return  # an installed package: the modules were generated when it was built
    digest = _protogen.proto_hash(proto_root)
    if _protogen.read_stamp(_PACKAGE_DIR / "v1") == digest:
        return
    try:
        _protogen.generate(proto_root, _PACKAGE_DIR.parent)
        return
    except PermissionError:
        pass
    except OSError as error:  # read-only file system and the like
        if error.errno not in (13, 30):
            raise
    cached = _cache_root() / digest
    if _protogen.read_stamp(cached / "einsummable" / "v1") != digest:
        _protogen.generate(proto_root, cached)
    import einsummable

    entry = str(cached / "einsummable")
    if entry not in einsummable.__path__:
        einsummable.__path__.insert(0, entry)


def modules() -> SimpleNamespace:
    """``graph_pb2``, ``service_pb2`` and ``service_pb2_grpc``, generating them if needed."""
    global _modules
    with _lock:
        if _modules is None:
            _ensure_generated()
            try:
                loaded = {
                    name: importlib.import_module(f"einsummable.v1.{name}")
                    for name in _protogen.GENERATED_MODULES
                }
            except ImportError as error:
                raise ImportError(
                    "einsummable: the generated gRPC stubs (einsummable.v1) are missing; "
                    "install the package with `pip install clients/python`, or run from a "
                    "source checkout that has proto/ and grpcio-tools"
                ) from error
            except Exception as error:  # protobuf's VersionError for a too-old runtime
                raise ImportError(
                    f"einsummable: the generated gRPC stubs do not load: {error}; upgrade "
                    "protobuf and grpcio, or reinstall the package"
                ) from error
            _modules = SimpleNamespace(**loaded)
        return _modules
