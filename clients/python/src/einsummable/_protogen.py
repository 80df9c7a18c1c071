"""Generates the gRPC and protobuf modules of ``einsummable.v1`` from the repository's proto/.

The wire contract lives in ``proto/einsummable/v1/*.proto`` at the repository root; the Python
modules are never committed. They are generated with grpcio-tools in two situations:

* at build time: ``setup.py`` (the ``build_py`` step of ``pip install clients/python``) writes
  ``einsummable/v1/{graph_pb2,service_pb2,service_pb2_grpc}.py`` into the wheel;
* on first import from the source tree (tests, examples run in place): ``einsummable._stubs``
  writes them into ``src/einsummable/v1/`` (ignored by git), or into a per-user cache when the
  source tree is read-only, and regenerates them when the .proto files change.

The protos' own path (``einsummable/v1/graph.proto``) fixes the generated import lines
(``from einsummable.v1 import graph_pb2``), which is why the modules live in the ``v1``
sub-package of this package.

This module imports nothing outside the standard library at import time, so ``setup.py`` can
load it by path before the package is installed.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from pathlib import Path

PROTO_FILES = ("einsummable/v1/graph.proto", "einsummable/v1/service.proto")
GENERATED_MODULES = ("graph_pb2", "service_pb2", "service_pb2_grpc")
STAMP_NAME = "_proto_hash.txt"


def proto_hash(proto_root: Path) -> str:
    """A digest of the .proto files' names and contents: generated code is current iff equal."""
    digest = hashlib.sha256()
    for rel in PROTO_FILES:
        digest.update(rel.encode())
        digest.update(b"\0")
        digest.update((Path(proto_root) / rel).read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def find_proto_root(candidates) -> Path | None:
    """The first candidate directory that holds every file of PROTO_FILES."""
    for candidate in candidates:
        if candidate is None:
            continue
        root = Path(candidate)
        if all((root / rel).is_file() for rel in PROTO_FILES):
            return root.resolve()
    return None


def _run_protoc(proto_root: Path, out_dir: Path) -> None:
    try:
        from grpc_tools import protoc
    except ImportError as error:
        raise ImportError(
            "einsummable: generating the gRPC stubs from proto/ needs grpcio-tools "
            "(pip install grpcio-tools), or install the package with "
            "`pip install clients/python`, which generates them at build time"
        ) from error
    try:
        from importlib.resources import files

        include = str(files("grpc_tools") / "_proto")  # google/protobuf/*.proto
    except (ImportError, TypeError):
        include = str(Path(protoc.__file__).parent / "_proto")
    args = [
        "grpc_tools.protoc",
        f"-I{proto_root}",
        f"-I{include}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *[str(Path(proto_root) / rel) for rel in PROTO_FILES],
    ]
    status = protoc.main(args)
    if status != 0:
        raise RuntimeError(f"einsummable: protoc failed (exit {status}) on {proto_root}")


def generate(proto_root: Path, package_parent: Path) -> Path:
    """Writes ``<package_parent>/einsummable/v1/`` (modules, ``__init__.py``, stamp).

    The sub-package is produced in a temporary directory beside the target and moved into
    place with one rename, so a concurrent importer sees either the old or the new complete
    set, never a half-written one. Returns the ``v1`` directory.
    """
    proto_root = Path(proto_root)
    target = Path(package_parent) / "einsummable" / "v1"
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = proto_hash(proto_root)
    scratch = Path(tempfile.mkdtemp(prefix=".v1-gen-", dir=target.parent))
    try:
        _run_protoc(proto_root, scratch)
        produced = scratch / "einsummable" / "v1"
        (produced / "__init__.py").write_text(
            '"""Generated from proto/einsummable/v1 by grpcio-tools; do not edit."""\n'
        )
        (produced / STAMP_NAME).write_text(digest + "\n")
        if target.exists():
            if read_stamp(target) == digest:
                return target  # another process got there first
            stale = Path(tempfile.mkdtemp(prefix=".v1-old-", dir=target.parent))
            os.replace(target, stale / "v1")
            shutil.rmtree(stale, ignore_errors=True)
        try:
            os.replace(produced, target)
        except OSError:
            if read_stamp(target) != digest:
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def read_stamp(v1_dir: Path) -> str | None:
    try:
        return (Path(v1_dir) / STAMP_NAME).read_text().strip()
    except OSError:
        return None


_GENCODE_VERSION = re.compile(
    r"ValidateProtobufRuntimeVersion\(\s*_runtime_version\.Domain\.PUBLIC,\s*(\d+),\s*(\d+),\s*(\d+)"
)
_GRPC_GENERATED_VERSION = re.compile(r"GRPC_GENERATED_VERSION\s*=\s*'([0-9.]+)'")


def runtime_requirements(v1_dir: Path) -> list[str]:
    """The protobuf and grpcio versions the generated code checks for at import time.

    Code from a newer protoc refuses an older protobuf runtime (and likewise for grpcio), so
    the installed package must require at least the versions its code was generated with.
    """
    requirements = []
    graph = (Path(v1_dir) / "graph_pb2.py").read_text()
    match = _GENCODE_VERSION.search(graph)
    requirements.append(
        f"protobuf>={match.group(1)}.{match.group(2)}.{match.group(3)}" if match else "protobuf"
    )
    grpc_module = (Path(v1_dir) / "service_pb2_grpc.py").read_text()
    match = _GRPC_GENERATED_VERSION.search(grpc_module)
    requirements.append(f"grpcio>={match.group(1)}" if match else "grpcio")
    return requirements
