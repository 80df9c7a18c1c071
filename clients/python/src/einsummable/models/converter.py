"""``einsummable-convert HF_DIR OUT_DIR``: a Hugging Face LLaMA-family directory (config.json and
*.safetensors) to an entry of an Einsummable model repository (docs/models.md):

    OUT_DIR/<name>/config.pbtxt                 weights and batching on "tokens"
    OUT_DIR/<name>/<version>/graph.pbtxt        the whole model, tokens symbolic
    OUT_DIR/<name>/<version>/*.safetensors      the weights, HF names and layout, one output
                                                file per input file
    OUT_DIR/<name>/<version>/source.json        where it came from (the daemon ignores it)

Everything is checked before a byte is written (architecture, every weight present with the
shape the config implies, no unknown tensor); tensors are then streamed one at a time in
bounded chunks, so memory stays at a chunk whatever the checkpoint's size. The version is
written under a hidden name and renamed when complete: the daemon never sees half of one.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .. import dtypes as _dtypes
from . import llama, safetensors_io

OUTPUT_DTYPES = ("f32", "bf16", "f16")
_TORCH_DTYPES = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")


class ConversionError(ValueError):
    """A checkpoint the converter refuses, with what is wrong (the file, the tensor)."""


@dataclass(frozen=True)
class Conversion:
    """What ``convert`` wrote."""

    model: str
    version: int
    directory: Path  # OUT_DIR/<model>/<version>
    spec: llama.LlamaSpec
    dtype: str
    weights: int
    weight_bytes: int
    seconds: float


def load_config(hf_dir: Path) -> dict:
    path = Path(hf_dir) / "config.json"
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ConversionError(
            f"{path}: no config.json (is {hf_dir} a Hugging Face model directory?)"
        ) from None
    except json.JSONDecodeError as error:
        raise ConversionError(f"{path}: not valid JSON: {error}") from None


def plan(hf_dir: Path, spec: llama.LlamaSpec) -> dict:
    """{weight name: TensorInfo} for every weight the graph reads, checked against the config:
    a missing tensor, a shape other than the config implies, a tensor the graph does not read
    are errors naming the tensor (and its file)."""
    try:
        tensors = safetensors_io.read_directory(hf_dir)
    except safetensors_io.SafetensorsError as error:
        raise ConversionError(str(error)) from None
    shapes = spec.weight_shapes()
    missing = [name for name in shapes if name not in tensors]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        files = ", ".join(sorted({t.path.name for t in tensors.values()}))
        raise ConversionError(
            f"{hf_dir}: tensor '{missing[0]}'{more} is missing: the {spec.family} config "
            f"needs it, no safetensors file has it (files: {files})"
        )
    for name, shape in shapes.items():
        info = tensors[name]
        if info.shape != tuple(shape):
            raise ConversionError(
                f"{info.path}: tensor '{name}' has shape {list(info.shape)}, but config.json "
                f"implies {list(shape)}"
            )
        if info.dtype not in ("F32", "F16", "BF16"):
            raise ConversionError(f"{info.path}: tensor '{name}' is {info.dtype}, not a float")
    extra = [name for name in tensors if name not in shapes and not spec.ignored(name)]
    if extra:
        raise ConversionError(
            f"{tensors[extra[0]].path}: tensor '{extra[0]}' is not a weight of the "
            f"{spec.family} graph this config describes (attention_bias, mlp_bias or "
            "tie_word_embeddings disagreeing with the checkpoint?)"
        )
    return {name: tensors[name] for name in shapes}


def _default_dtype(spec: llama.LlamaSpec, weights: dict) -> str:
    """The checkpoint's own dtype: config.json's (torch_)dtype, else its embedding table's."""
    if spec.torch_dtype in _TORCH_DTYPES:
        return _TORCH_DTYPES[spec.torch_dtype]
    table = weights["model.embed_tokens.weight"].dtype
    return safetensors_io.SAFETENSORS_DTYPES[table][0]


def next_version(model_dir: Path) -> int:
    """One past the greatest numeric version (the daemon's rule for a version: a positive
    decimal number without a leading zero); 1 for a new model."""
    versions = (
        [
            int(p.name)
            for p in model_dir.glob("*")
            if p.is_dir() and p.name.isdigit() and not p.name.startswith("0")
        ]
        if model_dir.is_dir()
        else []
    )
    return max(versions, default=0) + 1


def model_config_text(weights, dimension: str = "tokens") -> str:
    """config.pbtxt: a RegisterModelRequest in text format with the weights (so a missing one is
    refused by name) and batching along the tokens, so requests carry their sequence ends."""
    from google.protobuf import text_format

    from .. import _stubs

    pb = _stubs.modules().service_pb2
    request = pb.RegisterModelRequest(
        weights=list(weights), batching=pb.Batching(dimension=dimension)
    )
    return text_format.MessageToString(request)


def convert(
    hf_dir,
    out_dir,
    dtype: str | None = None,
    name: str | None = None,
    version: int | None = None,
    progress=None,
    chunk_bytes: int = safetensors_io.CHUNK_BYTES,
) -> Conversion:
    """Converts ``hf_dir`` into the repository ``out_dir`` as model ``name`` (default the
    directory's name) at ``version`` (default one past the greatest there). ``dtype``: the
    weights' and the graph's float type (default the checkpoint's). ``progress``: a tqdm bar
    over the bytes written (default: when stderr is a terminal)."""
    started = time.monotonic()
    hf_dir, out_dir = Path(hf_dir), Path(out_dir)
    if not hf_dir.is_dir():
        raise ConversionError(f"{hf_dir}: not a directory")
    config = load_config(hf_dir)
    try:
        spec = llama.spec_from_config(config)
    except llama.UnsupportedModelError as error:
        raise ConversionError(f"{hf_dir}: {error}") from None
    weights = plan(hf_dir, spec)
    if dtype is None:
        dtype = _default_dtype(spec, weights)
    dtype = _dtypes.normalize(dtype)
    if dtype not in OUTPUT_DTYPES:
        raise ConversionError(f"--dtype {dtype}: one of {', '.join(OUTPUT_DTYPES)}")
    name = name if name is not None else hf_dir.resolve().name
    if not _NAME.match(name):
        raise ConversionError(
            f"model name {name!r}: letters, digits, '_', '-', '.', at most 128 characters "
            "(give --name)"
        )
    graph, _ = llama.build_graph(spec, dtype)
    graph_text = graph.to_text()
    model_dir = out_dir / name
    if version is None:
        version = next_version(model_dir)
    if version <= 0:
        raise ConversionError(f"version {version}: versions are positive")
    final = model_dir / str(version)
    if final.exists():
        raise ConversionError(f"{final} exists; give another --version or remove it")
    model_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{version}.converting-", dir=model_dir))
    target = safetensors_io.safetensors_dtype(dtype)
    total = sum(
        safetensors_io.SAFETENSORS_DTYPES[target][1] * _elements(info.shape)
        for info in weights.values()
    )
    bar = _progress_bar(progress, total, name)
    try:
        (staging / "graph.pbtxt").write_text(graph_text)
        # One output file per input file, the tensors in the input's order: each output file
        # is about as large as its input (a sharded checkpoint stays sharded).
        by_file: dict = {}
        for weight, info in sorted(weights.items(), key=lambda kv: (kv[1].path, kv[1].begin)):
            by_file.setdefault(info.path, []).append((weight, info))
        for path, entries in by_file.items():
            writer = safetensors_io.StreamingWriter(
                staging / path.name, metadata={"format": "einsummable", "source": path.name}
            )
            for weight, info in entries:
                writer.add(weight, target, info.shape)
            try:
                for _, info in entries:
                    for piece in safetensors_io.chunks(info, target, chunk_bytes):
                        writer.write(piece)
                        if bar is not None:
                            bar.update(len(piece))
                writer.close()
            except BaseException:
                writer.abort()
                raise
        (staging / "source.json").write_text(
            json.dumps(
                {
                    "converted_from": str(hf_dir.resolve()),
                    "family": spec.family,
                    "dtype": dtype,
                    "config": config,
                },
                indent=2,
            )
            + "\n"
        )
        (model_dir / "config.pbtxt").write_text(model_config_text(spec.weight_shapes()))
        staging.rename(final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    finally:
        if bar is not None:
            bar.close()
    return Conversion(
        name, version, final, spec, dtype, len(weights), total, time.monotonic() - started
    )


def _elements(shape) -> int:
    count = 1
    for size in shape:
        count *= int(size)
    return count


def _progress_bar(progress, total: int, name: str):
    if progress is None:
        progress = sys.stderr.isatty()
    if not progress:
        return None
    from tqdm import tqdm

    return tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=name)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="einsummable-convert",
        description="Converts a Hugging Face LLaMA-family model directory (config.json, "
        "*.safetensors: LLaMA 2/3, Mistral, Qwen2) into a model of an Einsummable model "
        "repository (einsummabled --model_repository OUT_DIR).",
    )
    parser.add_argument("hf_dir", type=Path, help="the Hugging Face model directory")
    parser.add_argument("out_dir", type=Path, help="the model repository")
    parser.add_argument(
        "--dtype",
        choices=OUTPUT_DTYPES,
        default=None,
        help="weight type (default: the checkpoint's)",
    )
    parser.add_argument("--name", default=None, help="model name (default: HF_DIR's name)")
    parser.add_argument(
        "--version", type=int, default=None, help="version (default: one past the greatest)"
    )
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bar (default: when stderr is a terminal)",
    )
    args = parser.parse_args(argv)
    try:
        result = convert(
            args.hf_dir, args.out_dir, args.dtype, args.name, args.version, args.progress
        )
    except (ConversionError, OSError) as error:
        print(f"einsummable-convert: {error}", file=sys.stderr)
        return 1
    spec = result.spec
    print(
        f"{result.directory}: {spec.family}, {spec.layers} layers, hidden {spec.hidden}, "
        f"{spec.heads_q}/{spec.heads_kv} heads, vocab {spec.vocab}, "
        f"{llama.parameters(spec):,} parameters as {result.dtype} "
        f"({result.weight_bytes:,} bytes in {result.seconds:.2f} s); serve with "
        f"einsummabled --model_repository {args.out_dir}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
