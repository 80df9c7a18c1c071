"""dtype conversions, status-code exceptions, and the generation of the gRPC stubs."""

import numpy as np
import pytest
from conftest import REPO_ROOT

import einsummable as es
from einsummable import _protogen
from einsummable import dtypes as dt

PROTO_ROOT = REPO_ROOT / "proto"


def test_dtype_names():
    assert dt.normalize("F32") == "f32"
    assert dt.normalize("bfloat16") == "bf16"
    assert dt.normalize(np.float16) == "f16"
    assert dt.normalize(np.dtype("float64")) == "f64"
    with pytest.raises(es.GraphError):
        dt.normalize(np.int8)


def test_round_trips_per_dtype():
    values = np.array([[1.5, -2.25], [0.0, 3.0e-3]], dtype=np.float32)
    for dtype, np_type in [("f32", np.float32), ("f16", np.float16), ("f64", np.float64)]:
        data = dt.to_bytes(values, dtype)
        assert len(data) == values.size * dt.itemsize(dtype)
        back = dt.from_bytes(data, dtype, values.shape)
        assert back.dtype == np_type and back.shape == (2, 2)
        np.testing.assert_allclose(back, values, rtol=1e-3)
    back = dt.from_bytes(dt.to_bytes(values, "bf16"), "bf16", (2, 2))
    assert back.dtype == np.float32
    np.testing.assert_allclose(back, values, rtol=2**-8)


def test_bf16_rounds_to_nearest_even_and_keeps_nan():
    # 1 + 2^-8 lies halfway between bf16 neighbours 1 and 1 + 2^-7: ties go to the even one (1).
    halfway = np.float32(1 + 2**-8)
    above = np.nextafter(halfway, np.float32(2))
    bits = dt.float32_to_bf16_bits(np.array([halfway, above, np.nan, -0.0], dtype=np.float32))
    assert bits[0] == 0x3F80 and bits[1] == 0x3F81
    assert np.isnan(dt.bf16_bits_to_float32(bits[2:3]))[0]
    assert bits[3] == 0x8000


def test_wire_bytes_are_little_endian_row_major():
    values = np.arange(6, dtype=">f4").reshape(2, 3).T  # big-endian, not C-contiguous
    data = dt.to_bytes(values, "f32")
    assert np.frombuffer(data, "<f4").tolist() == [0, 3, 1, 4, 2, 5]


def test_from_bytes_checks_the_size():
    with pytest.raises(ValueError, match="tensor data has 4 bytes; f32\\[2\\] needs 8"):
        dt.from_bytes(b"\0" * 4, "f32", (2,))


def test_exceptions_by_status_code():
    from einsummable.errors import error_for_code

    error = error_for_code("INVALID_ARGUMENT", "node 'h': shape mismatch", "Compile")
    assert isinstance(error, es.InvalidArgumentError)
    assert isinstance(error, es.InvalidArgument) and isinstance(error, es.EinsummableError)
    assert error.details == "node 'h': shape mismatch" and error.method == "Compile"
    assert str(error) == "Compile: node 'h': shape mismatch (INVALID_ARGUMENT)"
    for code, cls in [
        ("NOT_FOUND", es.NotFound),
        ("FAILED_PRECONDITION", es.FailedPrecondition),
        ("RESOURCE_EXHAUSTED", es.ResourceExhausted),
        ("ALREADY_EXISTS", es.AlreadyExists),
        ("UNAUTHENTICATED", es.Unauthenticated),
        ("UNAVAILABLE", es.Unavailable),
    ]:
        assert type(error_for_code(code, "m")) is cls
    assert type(error_for_code("SOMETHING_NEW", "m")) is es.EinsummableError


def test_stub_generation_writes_a_stamped_package(tmp_path):
    pytest.importorskip("grpc_tools", reason="generating stubs needs grpcio-tools")
    root = PROTO_ROOT
    v1 = _protogen.generate(root, tmp_path)
    assert {p.name for p in v1.iterdir()} >= {
        "__init__.py",
        "graph_pb2.py",
        "service_pb2.py",
        "service_pb2_grpc.py",
        "_proto_hash.txt",
    }
    assert _protogen.read_stamp(v1) == _protogen.proto_hash(root)
    # Generating again over a current package keeps it (no error, same stamp).
    assert _protogen.generate(root, tmp_path) == v1
    requirements = _protogen.runtime_requirements(v1)
    assert requirements[0].startswith("protobuf>=") and requirements[1].startswith("grpcio>=")


def test_stub_regenerates_when_the_protos_change(tmp_path):
    pytest.importorskip("grpc_tools", reason="generating stubs needs grpcio-tools")
    root = PROTO_ROOT
    protos = tmp_path / "proto"
    for rel in _protogen.PROTO_FILES:
        (protos / rel).parent.mkdir(parents=True, exist_ok=True)
        (protos / rel).write_bytes((root / rel).read_bytes())
    out = tmp_path / "out"
    v1 = _protogen.generate(protos, out)
    before = _protogen.read_stamp(v1)
    with open(protos / _protogen.PROTO_FILES[1], "a") as f:
        f.write("\nmessage AddedForTheTest {}\n")
    assert _protogen.proto_hash(protos) != before
    _protogen.generate(protos, out)
    assert _protogen.read_stamp(v1) == _protogen.proto_hash(protos)
    assert "_ADDEDFORTHETEST" in (v1 / "service_pb2.py").read_text()
