"""Builds the einsummable wheel, generating the gRPC/protobuf modules from ../../proto.

``build_py`` runs grpcio-tools' protoc over proto/einsummable/v1/*.proto and writes
``einsummable/v1/`` into the build directory, so the wheel carries generated code that the
source tree never holds. The .proto files are looked up in ``$EINSUMMABLE_PROTO_DIR``, then
``./proto`` (an sdist carries a copy there), then the repository's ``../../proto``.
"""

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = Path(__file__).resolve().parent

_spec = importlib.util.spec_from_file_location(
    "_einsummable_protogen", HERE / "src" / "einsummable" / "_protogen.py"
)
protogen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(protogen)


def proto_root() -> Path:
    root = protogen.find_proto_root(
        [os.environ.get("EINSUMMABLE_PROTO_DIR"), HERE / "proto", HERE.parent.parent / "proto"]
    )
    if root is None:
        raise SystemExit(
            "einsummable: proto/einsummable/v1/*.proto not found; build from the repository "
            "checkout (clients/python) or set EINSUMMABLE_PROTO_DIR"
        )
    return root


def dependencies() -> list:
    scratch = Path(tempfile.mkdtemp(prefix="einsummable-deps-"))
    try:
        generated = protogen.generate(proto_root(), scratch)
        return [
            "numpy>=1.24",
            "tqdm>=4.60",
            "safetensors>=0.4",
            *protogen.runtime_requirements(generated),
        ]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


class BuildPyWithStubs(build_py):
    """build_py, then protoc into the build directory's einsummable/v1."""

    def run(self):
        super().run()
        stale = Path(self.build_lib) / "einsummable" / "v1"
        if stale.exists() and protogen.read_stamp(stale) is None:
            shutil.rmtree(stale)
        protogen.generate(proto_root(), Path(self.build_lib))


class SdistWithProtos(sdist):
    """An sdist that builds anywhere: it carries the .proto files in ./proto."""

    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        root = proto_root()
        for rel in protogen.PROTO_FILES:
            target = Path(base_dir) / "proto" / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(root / rel, target)


setup(
    install_requires=dependencies(),
    cmdclass={"build_py": BuildPyWithStubs, "sdist": SdistWithProtos},
)
