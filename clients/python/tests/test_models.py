"""einsummable.models and einsummable-convert (docs/models.md) against transformers.

The fixtures (tests/data/models, scripts/make-model-fixtures) are small random LLaMA 3.1,
Mistral, Qwen2 and bf16 LLaMA 2 models saved by transformers, with the logits transformers
computes for three prompts. Without a daemon: the config is read right, the converter's
repository entry has the expected files and refuses broken checkpoints naming the tensor, and
the converted graph evaluated in NumPy (graph_numpy.py) gives transformers' logits — which
checks the graph, the weight layout and rope's scalings. With the daemon (marked integration):
the converted repository served at start gives those logits on several planners and device
counts, again after a restart, and broken models are refused by name while the others serve.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path

import graph_numpy
import numpy as np
import pytest
from conftest import REPO_ROOT, Daemon

import einsummable as es
from einsummable import models
from einsummable.models import converter as convert_module
from einsummable.models import safetensors_io

FIXTURES = REPO_ROOT / "tests" / "data" / "models"
SEED = 20261206
F32_FIXTURES = ("llama", "mistral", "qwen2")
RTOL = 1e-4
# bf16 weights and activations: transformers' own bf16 logits against ours, relative to the
# largest logit (bf16 has 8 bits of mantissa; NumPy in float64 on the same bf16 weights is
# 0.8 % off transformers' bf16 run).
BF16_TOL = 3e-2


def expected(fixture: str) -> dict:
    with np.load(FIXTURES / fixture / "expected.npz") as data:
        return {key: data[key] for key in data.files}


def hf_config(fixture: str) -> dict:
    return json.loads((FIXTURES / fixture / "hf" / "config.json").read_text())


def relative_error(actual, wanted) -> float:
    """Largest |actual - wanted| over the largest |wanted|: logits near zero are no special
    case (an elementwise relative error there measures noise)."""
    wanted = np.asarray(wanted, dtype=np.float64)
    return float(np.max(np.abs(np.asarray(actual, np.float64) - wanted)) / np.max(np.abs(wanted)))


def read_weights(directory: Path) -> dict:
    """Every tensor of a converted version directory as float32."""
    return {
        name: np.frombuffer(b"".join(safetensors_io.chunks(info, "F32")), "<f4").reshape(info.shape)
        for name, info in safetensors_io.read_directory(directory).items()
    }


@pytest.fixture()
def workdir():
    with tempfile.TemporaryDirectory(prefix="einsummable-models-") as directory:
        yield Path(directory)


def copy_fixture(fixture: str, target: Path) -> Path:
    hf = target / fixture
    shutil.copytree(FIXTURES / fixture / "hf", hf)
    return hf


def rewrite_checkpoint(hf: Path, change) -> None:
    """Rewrites hf/model.safetensors with ``change(tensors)`` applied to its float32 arrays,
    with the safetensors package's own writer."""
    from safetensors.numpy import save_file

    tensors = read_weights(hf)
    change(tensors)
    (hf / "model.safetensors").unlink()
    save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, hf / "model.safetensors")


# ---- the config -----------------------------------------------------------------------------


def test_configs_of_each_family():
    llama = models.spec_from_config(hf_config("llama"))
    assert (llama.family, llama.layers, llama.heads_q, llama.heads_kv, llama.head_dim) == (
        "llama",
        2,
        4,
        2,
        8,
    )
    assert not llama.tied and not llama.attention_bias
    assert llama.rope == models.RopeSpec(500000.0, "llama3", 8.0, 1.0, 4.0, 16)
    mistral = models.spec_from_config(hf_config("mistral"))
    assert (mistral.head_dim, mistral.q_out, mistral.hidden) == (16, 64, 32)
    qwen2 = models.spec_from_config(hf_config("qwen2"))
    assert qwen2.tied and qwen2.attention_bias and not qwen2.o_bias
    assert "lm_head.weight" not in qwen2.weight_shapes()
    assert qwen2.weight_shapes()["model.layers.1.self_attn.k_proj.bias"] == (16,)
    bf16 = models.spec_from_config(hf_config("llama-bf16"))
    assert bf16.rope == models.RopeSpec(10000.0, "linear", 2.0) and bf16.torch_dtype == "bfloat16"


def test_transformers_4_rope_keys_are_read_as_5_writes_them():
    config = hf_config("llama")
    params = config.pop("rope_parameters")
    config["rope_theta"] = params.pop("rope_theta")
    config["rope_scaling"] = params  # transformers 4.x: rope_theta beside rope_scaling
    assert models.spec_from_config(config).rope == models.RopeSpec(
        500000.0, "llama3", 8.0, 1.0, 4.0, 16
    )
    config["rope_scaling"] = {"type": "linear", "factor": 4.0}  # before 4.45: "type"
    assert models.spec_from_config(config).rope.scaling == "linear"
    config["rope_scaling"] = None
    assert models.spec_from_config(config).rope == models.RopeSpec(500000.0)


@pytest.mark.parametrize(
    ("fixture", "change", "message"),
    [
        (
            "llama",
            {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]},
            "unsupported architecture: model_type 'gpt2'",
        ),
        (
            "llama",
            {"architectures": ["LlamaForSequenceClassification"]},
            "unsupported architecture 'LlamaForSequenceClassification'",
        ),
        (
            "mistral",
            {"sliding_window": 32},
            "sliding_window 32 is smaller than max_position_embeddings 64",
        ),
        ("qwen2", {"use_sliding_window": True}, "use_sliding_window is true"),
        ("llama", {"hidden_act": "gelu"}, "hidden_act 'gelu' is not supported"),
        (
            "llama",
            {"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e4}},
            "rope_type 'yarn' is not supported",
        ),
        ("llama", {"num_key_value_heads": 3}, "not a multiple of num_key_value_heads 3"),
        ("llama", {"hidden_size": None}, "config.json has no 'hidden_size'"),
    ],
)
def test_unsupported_configs_are_refused_saying_why(fixture, change, message):
    config = hf_config(fixture)
    config.update(change)
    with pytest.raises(models.UnsupportedModelError, match=message):
        models.spec_from_config(config)


def test_a_mistral_window_as_long_as_the_context_is_no_window():
    config = hf_config("mistral")
    config["sliding_window"] = config["max_position_embeddings"]
    assert models.spec_from_config(config).family == "mistral"


# ---- generate.json: transformers' greedy generation, for the generation loop's test -----------


@pytest.mark.parametrize("fixture", (*F32_FIXTURES, "llama-bf16"))
def test_generate_json_is_well_formed(fixture):
    """generate.json (scripts/make-model-fixtures): for each prompt of expected.npz,
    transformers' 32 greedy ids, all within the vocabulary, and for float32 no near tie."""
    document = json.loads((FIXTURES / fixture / "generate.json").read_text())
    vocab = hf_config(fixture)["vocab_size"]
    assert document["max_new_tokens"] == 32 and document["do_sample"] is False
    assert document["eos_token_id"] is None
    assert document["dtype"] == hf_config(fixture)["dtype"]
    assert document["torch"] and document["transformers"] and document["how_made"]
    want = expected(fixture)
    prompts = np.split(want["ids"], want["sequence_ends"][:-1])
    assert [p["prompt_ids"] for p in document["prompts"]] == [p.tolist() for p in prompts]
    # The bf16 fixture also holds the float32 run of its weights (``_f32``): bf16 ties.
    suffixes = ("", "_f32") if fixture == "llama-bf16" else ("",)
    for prompt in document["prompts"]:
        assert len(prompt["prompt_ids"]) > 0
        assert len(prompt["prompt_ids"]) + 32 <= hf_config(fixture)["max_position_embeddings"]
        for suffix in suffixes:
            ids = prompt["prompt_ids"] + prompt[f"new_ids{suffix}"]
            assert len(prompt[f"new_ids{suffix}"]) == 32
            assert all(isinstance(i, int) and 0 <= i < vocab for i in ids), ids
            assert prompt[f"min_top2_gap{suffix}"] >= 0
            assert 0 <= prompt[f"min_top2_gap_step{suffix}"] < 32
            if fixture != "llama-bf16" or suffix:
                assert prompt[f"min_top2_gap{suffix}"] >= 1e-4, (fixture, prompt["prompt_ids"])


# ---- the converter, without a daemon --------------------------------------------------------


def test_converted_entry_is_a_repository_model(workdir):
    repo = workdir / "repo"
    result = models.convert(FIXTURES / "qwen2" / "hf", repo, name="qwen2", progress=False)
    assert (result.model, result.version, result.dtype) == ("qwen2", 1, "f32")
    version = repo / "qwen2" / "1"
    assert sorted(p.name for p in version.iterdir()) == [
        "graph.pbtxt",
        "model.safetensors",
        "source.json",
    ]
    # No staging directory is left behind.
    assert sorted(p.name for p in (repo / "qwen2").iterdir()) == ["1", "config.pbtxt"]
    from google.protobuf import text_format

    from einsummable import _stubs

    pb = _stubs.modules()
    request = text_format.Parse(
        (repo / "qwen2" / "config.pbtxt").read_text(), pb.service_pb2.RegisterModelRequest()
    )
    spec = result.spec
    assert list(request.weights) == list(spec.weight_shapes())
    assert request.batching.dimension == "tokens"
    graph_def = text_format.Parse((version / "graph.pbtxt").read_text(), pb.graph_pb2.GraphDef())
    inputs = {i.name: i for i in graph_def.inputs}
    assert set(inputs) == {*spec.weight_shapes(), "ids"}
    assert inputs["ids"].dtype == pb.graph_pb2.DType.Value("I32")
    assert [d.symbol for d in inputs["ids"].dims] == ["tokens"]
    assert list(graph_def.saved) == ["logits"]
    kinds = [op.kind for op in graph_def.operators]
    assert kinds.count("embedding") == 1 and kinds.count("attention") == spec.layers
    assert kinds.count("rope") == 2 * spec.layers
    # No operator carries sequence ends: the requests give them (batching).
    assert not any("sequence_ends" in op.attributes for op in graph_def.operators)
    # The weights: the package's own reader agrees, and the bytes are the checkpoint's.
    from safetensors import safe_open

    with (
        safe_open(str(version / "model.safetensors"), framework="numpy") as converted,
        safe_open(str(FIXTURES / "qwen2" / "hf" / "model.safetensors"), "numpy") as original,
    ):
        assert sorted(converted.keys()) == sorted(spec.weight_shapes())
        for key in converted.keys():  # noqa: SIM118 - a safe_open, not a dict
            np.testing.assert_array_equal(converted.get_tensor(key), original.get_tensor(key))
    # A second conversion is the next version; config.pbtxt is rewritten.
    again = models.convert(FIXTURES / "qwen2" / "hf", repo, name="qwen2", progress=False)
    assert again.version == 2 and (repo / "qwen2" / "2" / "graph.pbtxt").exists()
    with pytest.raises(models.ConversionError, match="exists; give another --version"):
        models.convert(FIXTURES / "qwen2" / "hf", repo, name="qwen2", version=2, progress=False)


@pytest.mark.parametrize("fixture", F32_FIXTURES)
def test_converted_graph_gives_transformers_logits_in_numpy(fixture, workdir):
    result = models.convert(FIXTURES / fixture / "hf", workdir, name=fixture, progress=False)
    graph, _ = models.build_graph(result.spec, "f32")
    want = expected(fixture)
    inputs = read_weights(result.directory)
    inputs["ids"] = want["ids"]
    logits = graph_numpy.run(graph, inputs, list(want["sequence_ends"]))["logits"]
    assert logits.shape == want["logits"].shape
    error = relative_error(logits, want["logits"])
    assert error < RTOL, f"{fixture}: {error:.3g} of the largest logit"


def test_dtype_conversion_bf16_to_f32_and_back(workdir):
    """bf16 -> f32 is exact (the f32 run of the bf16 weights is matched as closely as f32
    allows); f32 -> bf16 rounds each weight to nearest even."""
    want = expected("llama-bf16")
    wide = models.convert(
        FIXTURES / "llama-bf16" / "hf", workdir, dtype="f32", name="wide", progress=False
    )
    graph, _ = models.build_graph(wide.spec, "f32")
    inputs = read_weights(wide.directory)
    inputs["ids"] = want["ids"]
    logits = graph_numpy.run(graph, inputs, list(want["sequence_ends"]))["logits"]
    assert relative_error(logits, want["logits_f32"]) < RTOL
    narrow = models.convert(
        FIXTURES / "llama" / "hf", workdir, dtype="bf16", name="narrow", progress=False
    )
    source = read_weights(FIXTURES / "llama" / "hf")
    for name, info in safetensors_io.read_directory(narrow.directory).items():
        assert info.dtype == "BF16"
        bits = np.frombuffer(b"".join(safetensors_io.chunks(info, "BF16")), "<u2")
        np.testing.assert_array_equal(bits, es.dtypes.float32_to_bf16_bits(source[name]).ravel())


def test_streaming_in_small_chunks_writes_the_same_bytes(workdir):
    whole = models.convert(
        FIXTURES / "llama" / "hf", workdir, dtype="bf16", name="whole", progress=False
    )
    chunked = models.convert(
        FIXTURES / "llama" / "hf",
        workdir,
        dtype="bf16",
        name="chunked",
        progress=False,
        chunk_bytes=40,  # 10 f32 elements at a time: chunks cut across rows and tensors
    )
    a = (whole.directory / "model.safetensors").read_bytes()
    b = (chunked.directory / "model.safetensors").read_bytes()
    assert a == b


MEMORY_CHECK = r"""
import resource, sys
from einsummable import models
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
models.convert(sys.argv[1], sys.argv[2], dtype="bf16", name="big", progress=False,
               chunk_bytes=1 << 20)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print((after - before) * 1024)
"""


def test_conversion_memory_is_a_chunk_not_the_checkpoint(workdir):
    """A 45 MiB checkpoint whose largest tensor is 32 MiB, converted f32 -> bf16 in 1 MiB chunks
    in a fresh process: its peak RSS grows by far less than the largest tensor."""
    import subprocess
    import sys

    config = json.loads((FIXTURES / "llama" / "hf" / "config.json").read_text())
    config.update(
        hidden_size=1024,
        intermediate_size=1024,
        num_hidden_layers=1,
        num_attention_heads=8,
        num_key_value_heads=4,
        vocab_size=8192,
        tie_word_embeddings=True,
    )
    hf = workdir / "hf"
    hf.mkdir()
    (hf / "config.json").write_text(json.dumps(config))
    spec = models.spec_from_config(config)
    writer = safetensors_io.StreamingWriter(hf / "model.safetensors")
    for name, shape in spec.weight_shapes().items():
        writer.add(name, "F32", shape)
    rng = np.random.default_rng(SEED)
    for shape in spec.weight_shapes().values():
        rows = shape[0]
        for first in range(0, rows, 256):  # written in pieces: the test holds no tensor whole
            count = min(256, rows - first)
            writer.write(rng.standard_normal((count, *shape[1:]), dtype=np.float32).tobytes())
    writer.close()
    size = (hf / "model.safetensors").stat().st_size
    assert size > 40 << 20
    out = subprocess.run(
        [sys.executable, "-c", MEMORY_CHECK, str(hf), str(workdir / "repo")],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    growth = int(out.split()[-1])
    print(f"peak RSS growth {growth / 2**20:.1f} MiB converting {size / 2**20:.1f} MiB")
    assert growth < 12 << 20, f"peak RSS grew {growth} bytes for a {size}-byte checkpoint"
    converted = safetensors_io.read_directory(workdir / "repo" / "big" / "1")
    assert converted["model.embed_tokens.weight"].nbytes == 8192 * 1024 * 2


def test_streaming_writer_refuses_a_short_tensor(workdir):
    writer = safetensors_io.StreamingWriter(workdir / "w.safetensors")
    writer.add("a", "F32", (2, 2))
    writer.add("empty", "F32", (0, 3))
    writer.add("b", "F16", (3,))
    writer.write(np.arange(4, dtype="<f4").tobytes())
    writer.write(np.ones(2, dtype="<f2").tobytes())
    with pytest.raises(ValueError, match="tensor 'b' got 4 of its 6 bytes"):
        writer.close()
    assert list(workdir.iterdir()) == []  # neither the file nor its .partial
    writer = safetensors_io.StreamingWriter(workdir / "w.safetensors")
    writer.add("a", "F32", (1,))
    writer.write(b"\0" * 4)
    with pytest.raises(ValueError, match="more bytes than the tensors added hold"):
        writer.write(b"\0")


def _refused(hf: Path, workdir: Path, message: str) -> None:
    repo = workdir / "repo"
    with pytest.raises(models.ConversionError, match=message):
        models.convert(hf, repo, name="broken", progress=False)
    # Nothing half-written: no version directory, no staging directory.
    assert not (repo / "broken").exists() or list((repo / "broken").iterdir()) == []


def test_a_missing_tensor_is_named(workdir):
    hf = copy_fixture("llama", workdir)
    rewrite_checkpoint(hf, lambda t: t.pop("model.layers.1.mlp.up_proj.weight"))
    _refused(hf, workdir, r"tensor 'model.layers.1.mlp.up_proj.weight' is missing")


def test_a_misshaped_tensor_is_named(workdir):
    hf = copy_fixture("mistral", workdir)
    rewrite_checkpoint(
        hf,
        lambda t: t.update(
            {"model.layers.0.self_attn.k_proj.weight": np.zeros((16, 32), np.float32)}
        ),
    )
    _refused(
        hf,
        workdir,
        r"tensor 'model.layers.0.self_attn.k_proj.weight' has shape \[16, 32\], but config.json "
        r"implies \[32, 32\]",
    )


def test_an_unknown_tensor_is_named_and_old_rotary_buffers_are_skipped(workdir):
    hf = copy_fixture("llama", workdir)
    rewrite_checkpoint(
        hf,
        lambda t: t.update(
            {
                "model.layers.0.self_attn.rotary_emb.inv_freq": np.ones(4, np.float32),
                "model.layers.0.self_attn.q_proj.bias": np.ones(32, np.float32),
            }
        ),
    )
    _refused(hf, workdir, r"tensor 'model.layers.0.self_attn.q_proj.bias' is not a weight")
    rewrite_checkpoint(hf, lambda t: t.pop("model.layers.0.self_attn.q_proj.bias"))
    result = models.convert(hf, workdir / "repo", name="ok", progress=False)
    assert "model.layers.0.self_attn.rotary_emb.inv_freq" not in read_weights(result.directory)


def test_a_sharded_checkpoint_stays_sharded(workdir):
    """Real checkpoints come in shards (model-0000k-of-0000n.safetensors beside an index): one
    output file per input file; a tensor in two shards is refused naming both."""
    from safetensors.numpy import save_file

    hf = copy_fixture("qwen2", workdir)
    tensors = read_weights(hf)
    (hf / "model.safetensors").unlink()
    names = sorted(tensors)
    shards = {
        "model-00001-of-00002.safetensors": names[:10],
        "model-00002-of-00002.safetensors": names[10:],
    }
    for file, keys in shards.items():
        save_file({k: tensors[k] for k in keys}, hf / file)
    index = {"weight_map": {k: file for file, keys in shards.items() for k in keys}}
    (hf / "model.safetensors.index.json").write_text(json.dumps(index))
    result = models.convert(hf, workdir / "repo", name="sharded", progress=False)
    for file, keys in shards.items():
        written = safetensors_io.read_index(result.directory / file)
        assert sorted(written) == keys
    want = expected("qwen2")
    graph, _ = models.build_graph(result.spec, "f32")
    inputs = read_weights(result.directory)
    inputs["ids"] = want["ids"]
    logits = graph_numpy.run(graph, inputs, list(want["sequence_ends"]))["logits"]
    assert relative_error(logits, want["logits"]) < RTOL
    save_file({names[0]: tensors[names[0]]}, hf / "model-extra.safetensors")
    _refused(
        hf,
        workdir,
        rf"tensor '{names[0]}' is in two files: model-00001-of-00002.safetensors and "
        "model-extra.safetensors",
    )


def test_a_corrupt_file_is_named(workdir):
    hf = copy_fixture("qwen2", workdir)
    data = (hf / "model.safetensors").read_bytes()
    (hf / "model.safetensors").write_bytes(data[: len(data) - 100])
    _refused(hf, workdir, r"model.safetensors: not a valid safetensors file")


def test_the_cli(workdir, capsys):
    repo = workdir / "repo"
    status = convert_module.main(
        [str(FIXTURES / "llama-bf16" / "hf"), str(repo), "--name", "tiny", "--no-progress"]
    )
    out = capsys.readouterr().out
    assert status == 0
    assert "tiny/1: llama, 2 layers, hidden 32, 4/2 heads, vocab 128" in out
    assert "as bf16" in out and "--model_repository" in out
    status = convert_module.main([str(workdir / "absent"), str(repo)])
    assert status == 1
    assert "absent: not a directory" in capsys.readouterr().err
    hf = copy_fixture("llama", workdir)
    config = json.loads((hf / "config.json").read_text())
    config["model_type"], config["architectures"] = "gemma", ["GemmaForCausalLM"]
    (hf / "config.json").write_text(json.dumps(config))
    assert convert_module.main([str(hf), str(repo), "--no-progress"]) == 1
    assert "unsupported architecture: model_type 'gemma'" in capsys.readouterr().err
    assert convert_module.main([str(hf), str(repo), "--name", "bad name", "--no-progress"]) == 1


@pytest.mark.parametrize("fixture", ["llama", "llama-bf16"])
def test_the_client_registers_uploads_and_executes_a_converted_model(fake_server, fixture, workdir):
    """The client's side end to end over gRPC (the in-process fake server, NumPy numerics):
    i32 ids, request sequence ends, batching, weights uploaded from the converted files."""
    result = models.convert(FIXTURES / fixture / "hf", workdir, name=fixture, progress=False)
    graph, shapes = models.build_graph(result.spec, result.dtype)
    want = expected(fixture)
    with es.Client(fake_server.address, timeout=60) as client:
        client.register_model(
            f"converted-{fixture}", graph, weights=list(shapes), batching=es.Batching("tokens")
        )
        for name, array in read_weights(result.directory).items():
            client.upload_tensor(f"converted-{fixture}", name, array, result.dtype, progress=False)
        try:
            logits = client.execute(
                f"converted-{fixture}",
                {"ids": want["ids"]},
                dims={"tokens": len(want["ids"])},  # the fake binds symbols from dims only
                sequence_ends=[int(end) for end in want["sequence_ends"]],
            ).outputs["logits"]
            # An id past the vocabulary is refused, naming it.
            with pytest.raises(es.InvalidArgumentError, match="id 128 at position 1"):
                client.execute(
                    f"converted-{fixture}",
                    {"ids": np.array([3, 128], np.int32)},
                    dims={"tokens": 2},
                )
        finally:
            client.unregister(f"converted-{fixture}")
    # The fake computes in float64 on the bf16 weights: transformers' f32 run of them.
    reference = want["logits_f32"] if "logits_f32" in want else want["logits"]
    tolerance = 2**-7 if fixture == "llama-bf16" else RTOL  # logits returned as bf16
    assert relative_error(logits, reference) < tolerance


# ---- against the daemon ---------------------------------------------------------------------


def make_repository(repo: Path) -> None:
    for fixture in (*F32_FIXTURES, "llama-bf16"):
        models.convert(FIXTURES / fixture / "hf", repo, name=fixture, progress=False)


def check_logits(client, fixture: str, options=None) -> float:
    want = expected(fixture)
    result = client.execute(
        fixture,
        {"ids": want["ids"]},
        sequence_ends=[int(end) for end in want["sequence_ends"]],
        options=options,
    )
    logits = result.outputs["logits"]
    assert logits.shape == want["logits"].shape
    error = relative_error(logits, want["logits"])
    tolerance = BF16_TOL if fixture == "llama-bf16" else RTOL
    assert error < tolerance, f"{fixture} {options}: {error:.3g} of the largest logit"
    return error


@pytest.mark.integration
@pytest.mark.parametrize("devices", [1, 4])
def test_converted_models_are_served_with_transformers_logits(daemon_binary, devices, workdir):
    repo = workdir / "repo"
    make_repository(repo)
    daemon = Daemon(
        daemon_binary,
        workdir,
        [f"--model_repository={repo}", f"--devices={devices}", "--synthesis_iterations=50"],
    )
    daemon.start()
    try:
        with es.Client(daemon.address, timeout=120) as client:
            ready = client.repository_index(ready_only=True)
            assert sorted(m.model for m in ready) == ["llama", "llama-bf16", "mistral", "qwen2"]
            # dp's plan is data parallel here, greedy's and megatron's tensor parallel (megatron
            # splitting reductions too): other plans, the same logits.
            for planner in ("dp", "greedy", "megatron"):
                for fixture in (*F32_FIXTURES, "llama-bf16"):
                    error = check_logits(client, fixture, es.CompileOptions(planner=planner))
                    print(f"{fixture} devices={devices} planner={planner}: {error:.3g}")
            # An id outside the vocabulary is a request error; the model still serves.
            with pytest.raises(es.InvalidArgumentError, match="128") as refused:
                client.execute("llama", {"ids": np.array([1, 128, 2], np.int32)})
            print(f"out of range: {refused.value}")
            check_logits(client, "llama")
        daemon.stop()
        # Restarted: served again from the repository, no client action.
        daemon.start()
        with es.Client(daemon.address, timeout=120) as client:
            for fixture in (*F32_FIXTURES, "llama-bf16"):
                check_logits(client, fixture)
    finally:
        daemon.stop()


@pytest.mark.integration
def test_generation_shares_the_weights_layout_across_a_restart(daemon_binary, workdir):
    """A model's first Generate lays out its weights with the generation caches
    (docs/generation.md "Memory"): the model's Execute then reads that one layout, and after a
    restart (the plan store kept it) Generate pins it again instead of copying the weights; the
    tokens and logits stay transformers'."""
    repo = workdir / "repo"
    models.convert(FIXTURES / "llama" / "hf", repo, name="llama", progress=False)
    prompt = json.loads((FIXTURES / "llama" / "generate.json").read_text())["prompts"][0]
    daemon = Daemon(
        daemon_binary,
        workdir,
        [f"--model_repository={repo}", "--devices=2", "--synthesis_iterations=50"],
    )
    for run in range(2):
        daemon.start()
        try:
            with es.Client(daemon.address, timeout=300) as client:
                client.wait_ready(timeout=120)
                got = [
                    t.token_id
                    for t in client.generate("llama", prompt["prompt_ids"], max_tokens=32)
                ]
                assert got == prompt["new_ids"], f"run {run}"
                check_logits(client, "llama")
        finally:
            daemon.stop()
        log = daemon.log_path.read_text(errors="replace")
        assert "keeps its own copy of the weights" not in log, daemon.log_tail()
    assert "laid out by generation pool" in log
    assert "weights laid out as the plan store kept them" in log


@pytest.mark.integration
def test_broken_models_are_refused_by_name_while_the_others_serve(daemon_binary, workdir):
    repo = workdir / "repo"
    for fixture in ("llama", "qwen2"):
        models.convert(FIXTURES / fixture / "hf", repo, name=fixture, progress=False)
    broken = {}
    # missing: a weight removed from the converted file (config.pbtxt lists it).
    models.convert(FIXTURES / "llama" / "hf", repo, name="missing", progress=False)
    # extra: a tensor the graph does not read.
    models.convert(FIXTURES / "llama" / "hf", repo, name="extra", progress=False)
    # misshaped: a weight of another shape.
    models.convert(FIXTURES / "llama" / "hf", repo, name="misshaped", progress=False)
    # corrupt: the file cut short.
    models.convert(FIXTURES / "llama" / "hf", repo, name="corrupt", progress=False)
    from safetensors.numpy import save_file

    def rewrite(model: str, change) -> None:
        path = repo / model / "1" / "model.safetensors"
        tensors = read_weights(path.parent)
        change(tensors)
        path.unlink()
        save_file(tensors, path)

    rewrite("missing", lambda t: t.pop("model.layers.1.mlp.down_proj.weight"))
    broken["missing"] = "model.layers.1.mlp.down_proj.weight"
    rewrite("extra", lambda t: t.update({"model.layers.0.extra.weight": np.ones(3, np.float32)}))
    broken["extra"] = "model.layers.0.extra.weight"
    rewrite(
        "misshaped",
        lambda t: t.update({"model.norm.weight": np.ones(31, np.float32)}),
    )
    broken["misshaped"] = "model.norm.weight"
    path = repo / "corrupt" / "1" / "model.safetensors"
    path.write_bytes(path.read_bytes()[:-64])
    broken["corrupt"] = "corrupt/1/model.safetensors"

    daemon = Daemon(daemon_binary, workdir, [f"--model_repository={repo}", "--devices=2"])
    daemon.start()
    try:
        with es.Client(daemon.address, timeout=120) as client:
            index = {m.model: m for m in client.repository_index()}
            assert {name for name, m in index.items() if m.state == "READY"} == {"llama", "qwen2"}
            for model, culprit in broken.items():
                print(f"{model}: {index[model].state}: {index[model].reason}")
                assert index[model].state == "UNAVAILABLE"
                assert culprit in index[model].reason, (model, index[model].reason)
            check_logits(client, "llama")
            check_logits(client, "qwen2")
    finally:
        daemon.stop()


@pytest.mark.integration
def test_tritonclient_sends_int32_ids_to_a_converted_model(daemon_binary, workdir):
    """KServe v2 with Triton's own client: INT32 token ids (numpy int32, raw contents) in, FP32
    logits out equal to transformers' for the first prompt alone (a request without
    sequence_ends is one sequence) and for the three prompts packed (the sequence_ends
    parameter); INT64 ids are refused naming the input's INT32, and an id past the vocabulary
    names its position, the model still serving."""
    grpcclient = pytest.importorskip("tritonclient.grpc", reason="tritonclient[grpc] not installed")
    from tritonclient.utils import InferenceServerException

    repo = workdir / "repo"
    models.convert(FIXTURES / "llama" / "hf", repo, name="llama", progress=False)
    daemon = Daemon(daemon_binary, workdir, [f"--model_repository={repo}", "--devices=2"])
    daemon.start()
    triton = grpcclient.InferenceServerClient(url=daemon.address)
    try:
        want = expected("llama")
        first = int(want["sequence_ends"][0])
        metadata = triton.get_model_metadata("llama")
        assert [(t.name, t.datatype, list(t.shape)) for t in metadata.inputs] == [
            ("ids", "INT32", [-1])
        ]

        def infer(ids, datatype="INT32"):
            tensor = grpcclient.InferInput("ids", list(ids.shape), datatype)
            tensor.set_data_from_numpy(ids)
            return triton.infer("llama", [tensor])

        logits = infer(want["ids"][:first].astype(np.int32)).as_numpy("logits")
        assert logits.shape == (first, want["logits"].shape[1])
        assert relative_error(logits, want["logits"][:first]) < RTOL
        with pytest.raises(InferenceServerException, match="input 'ids' is INT32; got INT64"):
            infer(want["ids"][:first].astype(np.int64), "INT64")
        with pytest.raises(InferenceServerException, match="position 2 holds id 5000"):
            infer(np.array([1, 2, 5000], np.int32))
        assert triton.is_model_ready("llama")
        again = infer(want["ids"][:first].astype(np.int32)).as_numpy("logits")
        np.testing.assert_array_equal(again, logits)
        # All three prompts packed in one request: the `sequence_ends` parameter.
        packed = grpcclient.InferInput("ids", [len(want["ids"])], "INT32")
        packed.set_data_from_numpy(want["ids"].astype(np.int32))
        ends = ",".join(str(int(end)) for end in want["sequence_ends"])
        all_logits = triton.infer("llama", [packed], parameters={"sequence_ends": ends})
        assert relative_error(all_logits.as_numpy("logits"), want["logits"]) < RTOL
    finally:
        triton.close()
        daemon.stop()


def generated_ids(client, fixture: str, prompt_ids, options=None) -> list[int]:
    tokens = list(client.generate(fixture, prompt_ids, max_tokens=32, options=options))
    assert [t.index for t in tokens] == list(range(len(tokens)))
    assert tokens[-1].finish_reason == "length"
    return [t.token_id for t in tokens]


@pytest.mark.integration
def test_greedy_generation_equals_transformers_generate(daemon_binary, workdir):
    """Generate (docs/generation.md) against transformers' greedy ``generate`` (generate.json,
    32 new tokens per prompt), token for token: each fixture alone on 4 devices with the default
    plan, one with megatron's and on 1 device, and every prompt of every fixture at once, so that
    their steps batch with each other. The bf16 fixture is left out: its greedy choices meet exact
    ties (generate.json's note)."""
    from concurrent.futures import ThreadPoolExecutor

    repo = workdir / "repo"
    for fixture in F32_FIXTURES:
        models.convert(FIXTURES / fixture / "hf", repo, name=fixture, progress=False)
    daemon = Daemon(
        daemon_binary,
        workdir,
        [f"--model_repository={repo}", "--devices=4", "--synthesis_iterations=50"],
    )
    daemon.start()
    try:
        with es.Client(daemon.address, timeout=300) as client:
            client.wait_ready(timeout=120)
            cases = [
                (fixture, prompt)
                for fixture in F32_FIXTURES
                for prompt in json.loads((FIXTURES / fixture / "generate.json").read_text())[
                    "prompts"
                ]
            ]
            for fixture, prompt in cases:
                got = generated_ids(client, fixture, prompt["prompt_ids"])
                assert got == prompt["new_ids"], (fixture, prompt["prompt_ids"])
            fixture, prompt = cases[0]
            for options in (es.CompileOptions(planner="megatron"), es.CompileOptions(devices=1)):
                got = generated_ids(client, fixture, prompt["prompt_ids"], options)
                assert got == prompt["new_ids"], (fixture, options)
            with ThreadPoolExecutor(len(cases)) as pool:
                together = list(
                    pool.map(
                        lambda case: generated_ids(client, case[0], case[1]["prompt_ids"]), cases
                    )
                )
            for (fixture, prompt), got in zip(cases, together):
                assert got == prompt["new_ids"], ("batched", fixture, prompt["prompt_ids"])
            # A stop id ends the generation after it; leaving the stream early cancels it.
            stop = prompt["new_ids"][3]
            tokens = list(
                client.generate(fixture, prompt["prompt_ids"], max_tokens=32, stop_ids=[stop])
            )
            first = prompt["new_ids"].index(stop)
            assert [t.token_id for t in tokens] == prompt["new_ids"][: first + 1]
            assert tokens[-1].finish_reason == "stop"
            with pytest.raises(es.InvalidArgumentError, match="prompt_ids is empty"):
                list(client.generate(fixture, []))
            with pytest.raises(es.InvalidArgumentError, match="128"):
                list(client.generate(fixture, [1, 128]))
            # Generate ran on key/value caches: each model's pool has the daemon's slots, and a
            # generation the client leaves after one token frees its slot.
            info = client.server_info()
            assert (info.generation_slots, info.generation_capacity) == (16, 2048)
            stream = client.generate(fixture, prompt["prompt_ids"], max_tokens=32)
            assert next(stream).index == 0
            stream.close()
            deadline = time.monotonic() + 60
            while client.server_info().generation_slots_in_use and time.monotonic() < deadline:
                time.sleep(0.05)
            assert client.server_info().generation_slots_in_use == 0
    finally:
        daemon.stop()
