"""The package as users get it: installed (scripts/setup, or `pip install clients/python`), with
its gRPC stubs generated when it was built, a version and PEP 561 type information.

These tests fail when the tests run against the source tree instead of the installed package, or
when the installed package is older than proto/ (rerun scripts/setup).
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import einsummable
from einsummable import _protogen, _stubs

HERE = Path(__file__).resolve().parent
CLIENT_ROOT = HERE.parent
REPO_ROOT = CLIENT_ROOT.parent.parent


def clean_env() -> dict:
    """The environment without anything that would put the source tree on the path."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    return env


def pip(*args: str) -> None:
    """Runs this interpreter's pip quietly, offline-friendly (nothing fetched to build)."""
    subprocess.run(
        [sys.executable, "-m", "pip", *args, "-q", "--disable-pip-version-check", "--no-deps"],
        check=True,
        env=clean_env(),
    )


def test_import_works_from_any_directory_and_finds_the_installed_package(tmp_path):
    probe = (
        "import einsummable, einsummable._stubs as s; s.modules(); "
        "print(einsummable.__file__); print(s.modules().service_pb2.__file__)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    package_file, stubs_file = (Path(line) for line in done.stdout.split())
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    assert package_file.resolve().parent == site / "einsummable"
    assert stubs_file.resolve().parent == site / "einsummable" / "v1"


def test_the_tests_use_the_installed_package_not_the_source_tree():
    package_dir = Path(einsummable.__file__).resolve().parent
    assert CLIENT_ROOT / "src" not in package_dir.parents, package_dir
    assert not (CLIENT_ROOT / "src" / "einsummable" / "v1" / "service_pb2.py").exists(), (
        "generated stubs in the source tree: nothing should write them there any more"
    )


def test_version_and_type_information():
    assert importlib.metadata.version("einsummable") == einsummable.__version__
    assert einsummable.__version__.count(".") == 2
    assert (Path(einsummable.__file__).parent / "py.typed").is_file()


def test_installed_stubs_are_current_with_the_checkouts_protos():
    stamp = _protogen.read_stamp(Path(_stubs.__file__).parent / "v1")
    assert stamp == _protogen.proto_hash(REPO_ROOT / "proto"), (
        "the installed package's stubs were generated from other .proto files or another "
        "grpcio-tools: reinstall it (scripts/setup)"
    )


def test_pip_builds_a_wheel_that_works_in_another_environment(tmp_path):
    """`pip install clients/python` elsewhere: the wheel carries the generated stubs and py.typed
    (and no tests), and its install imports with nothing from this checkout on the path."""
    wheels = tmp_path / "wheels"
    pip("wheel", "--no-build-isolation", "-w", str(wheels), str(CLIENT_ROOT))
    (wheel,) = wheels.glob("einsummable-*.whl")
    assert wheel.name.startswith(f"einsummable-{einsummable.__version__}-")
    names = set(zipfile.ZipFile(wheel).namelist())
    for module in ("graph_pb2.py", "service_pb2.py", "service_pb2_grpc.py", "service_pb2.pyi"):
        assert f"einsummable/v1/{module}" in names, sorted(names)
    assert "einsummable/py.typed" in names
    assert not any(name.startswith("tests/") for name in names)

    target = tmp_path / "site"
    pip("install", "--target", str(target), str(wheel))
    probe = (
        "import einsummable as es, einsummable._stubs as s; s.modules(); "
        "g = es.createGraph(); x = g.insertTensor(es.tensorDesc([2, 3]), name='x'); "
        "g.save(g.unary(x, 'relu')); g.to_graphdef(); print(es.__file__)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        env={**clean_env(), "PYTHONPATH": str(target)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()).resolve().parent == (target / "einsummable").resolve()
