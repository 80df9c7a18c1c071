"""Uploads against the real daemon: the client's chunks carry offsets and the tensor's CRC-32,
and the daemon refuses streams that lost, repeated or corrupted a chunk (service.proto,
UploadTensorChunk; docs/server.md, UploadTensor). Streams other than the client's are sent
through the raw stub."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

import einsummable as es

ROWS, COLS = 64, 256  # w: 64 KiB of f32
CHUNK = 16 * 1024


def identity_graph():
    g = es.createGraph()
    w = g.insertTensor(es.tensorDesc([("d", ROWS), ("e", COLS)]), name="w")
    g.save(g.unary(w, "neg", name="y"))
    return g, w


def raw_upload(client, model, data: bytes, *, offsets=True, crc32=None, order=None):
    """Streams `data` in CHUNK pieces through the raw stub, pieces in `order` (by index)."""
    pb = client._pb.service_pb2
    count = len(data) // CHUNK
    order = list(range(count)) if order is None else order

    def chunks():
        for position, piece_idx in enumerate(order):
            begin = piece_idx * CHUNK
            chunk = pb.UploadTensorChunk(data=data[begin : begin + CHUNK])
            if offsets:
                chunk.offset = begin
            if position == 0:
                chunk.model = model
                chunk.name = "w"
                chunk.dtype = es.dtypes.enum_name("f32")
                chunk.shape.extend([ROWS, COLS])
                if crc32 is not None:
                    chunk.crc32 = crc32
            yield chunk

    return client._call("UploadTensor", chunks()).bytes


def served(cg):
    cg.execute()
    return -cg.offload("y")


def test_the_clients_upload_is_checked_and_served(daemon_client):
    """The client's own upload (offsets and checksum) in several chunks is accepted."""
    g, w = identity_graph()
    value = np.random.default_rng(1).standard_normal((ROWS, COLS), dtype=np.float32)
    with es.compileGraph(g, device=1, client=daemon_client, weights=[w]) as cg:
        stored = daemon_client.upload_tensor(
            cg.model, "w", value, chunk_bytes=CHUNK, progress=False
        )
        assert stored == value.nbytes
        cg._loaded_weights.add("w")
        np.testing.assert_array_equal(served(cg), value)


def test_a_corrupted_stream_is_data_loss_and_the_old_weight_serves(daemon_client):
    g, w = identity_graph()
    rng = np.random.default_rng(2)
    old = rng.standard_normal((ROWS, COLS), dtype=np.float32)
    new = rng.standard_normal((ROWS, COLS), dtype=np.float32).tobytes()
    corrupted = bytearray(new)
    corrupted[1000] ^= 0x01
    with es.compileGraph(g, device=1, client=daemon_client, weights=[w]) as cg:
        cg.load(w, old, progress=False)
        with pytest.raises(es.DataLossError) as info:
            raw_upload(daemon_client, cg.model, bytes(corrupted), crc32=zlib.crc32(new))
        assert f"0x{zlib.crc32(new):08x}" in info.value.details
        assert f"0x{zlib.crc32(bytes(corrupted)):08x}" in info.value.details
        np.testing.assert_array_equal(served(cg), old)
        # The same bytes with their own checksum: stored.
        assert raw_upload(daemon_client, cg.model, new, crc32=zlib.crc32(new)) == len(new)
        expected = np.frombuffer(new, np.float32).reshape(ROWS, COLS)
        np.testing.assert_array_equal(served(cg), expected)


def test_a_repeated_and_a_lost_chunk_are_refused_naming_the_chunk(daemon_client):
    g, w = identity_graph()
    old = np.ones((ROWS, COLS), np.float32)
    data = np.zeros((ROWS, COLS), np.float32).tobytes()
    with es.compileGraph(g, device=1, client=daemon_client, weights=[w]) as cg:
        cg.load(w, old, progress=False)
        with pytest.raises(es.InvalidArgumentError) as info:
            raw_upload(daemon_client, cg.model, data, order=[0, 1, 1, 3])  # the right total
        assert info.value.details == (
            f"chunk 2 of the upload of 'w' starts at byte {CHUNK}; expected {2 * CHUNK} "
            "(a chunk was lost or repeated)"
        )
        np.testing.assert_array_equal(served(cg), old)


def test_an_old_client_without_offsets_or_checksum_still_uploads(daemon_client):
    g, w = identity_graph()
    value = np.arange(ROWS * COLS, dtype=np.float32).reshape(ROWS, COLS)
    with es.compileGraph(g, device=1, client=daemon_client, weights=[w]) as cg:
        assert raw_upload(daemon_client, cg.model, value.tobytes(), offsets=False) == value.nbytes
        cg._loaded_weights.add("w")
        np.testing.assert_array_equal(served(cg), value)
