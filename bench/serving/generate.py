"""Generation throughput on this CPU (issue 37, bench/README.md "serving/generate"): the daemon's
``Generate`` one generation at a time against ``--concurrency`` at once, and against
transformers' ``generate`` on the same weights and the same cores.

    .venv/bin/python bench/serving/generate.py [--layers 4] [--hidden 512] [--intermediate 1376]
        [--vocab 8000] [--concurrency 16] [--tokens 32] [--repeats 3]
        [--reference /path/to/python-with-torch]

1. Writes a random LLaMA checkpoint (bench/models/real_size.py's writer: bf16 random bits of a
   fixed exponent) of ``--layers`` layers, hidden ``--hidden``, converts it to f32 with
   ``einsummable.models.convert`` and serves it with ``build/bin/einsummabled
   --model_repository`` on the CPU backend (``--devices``).
2. ``--concurrency`` prompts of 8 to 24 random ids. **Alone**: each prompt's greedy generation
   of ``--tokens`` tokens, one after another. **Together**: all of them at once, one thread
   each, so that their steps batch in the daemon. Tokens per second of each, the median over
   ``--repeats`` runs, and their ratio (the target: together at least 4x alone at 16). The
   default model's f32 weights (66 MB) do not fit a cache, as no real model's do; with a model
   whose weights do (``--hidden 256 --intermediate 688 --vocab 2000``, 15 MB), a step of one
   row reads its weights from L3 and batching gains less (the script's gemm ceiling says how
   much it can).
3. With ``--reference`` (a Python with torch and transformers; torch is never needed by the
   project's tests), the same prompts through ``LlamaForCausalLM.generate`` (greedy, f32, eos
   off) one at a time with ``torch.set_num_threads(--threads)``: its tokens per second, and
   how many of the generations equal the daemon's token for token.

The daemon generates on key/value caches resident on the devices (docs/generation.md "The
loop on caches"), every decode step advancing all its slots together, as transformers keeps a
key/value cache per generation. Writes the results as
JSON (``--json``, default bench/results/generate-DATE.json) and prints a table.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "clients" / "python" / "tests"))
sys.path.insert(0, str(REPO_ROOT / "bench" / "models"))

from conftest import Daemon  # noqa: E402
from real_size import llama_config, write_checkpoint  # noqa: E402

import einsummable as es  # noqa: E402
from einsummable import models  # noqa: E402

REFERENCE = textwrap.dedent(
    """
    import json, sys, time
    import torch
    from transformers import LlamaForCausalLM
    hf, tokens, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    prompts = json.loads(sys.stdin.read())
    torch.set_num_threads(threads)
    model = LlamaForCausalLM.from_pretrained(hf, dtype=torch.float32).eval()
    outputs, started = [], time.monotonic()
    with torch.no_grad():
        for prompt in prompts:
            ids = torch.tensor([prompt])
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=tokens,
                                 do_sample=False, eos_token_id=None, pad_token_id=0)
            outputs.append(out[0, len(prompt):].tolist())
    seconds = time.monotonic() - started
    print(json.dumps({"seconds": seconds, "outputs": outputs,
                      "torch": torch.__version__}))
    """
)


# The weights' gemms of one decode step, timed in a fresh NumPy on one thread at 1 and at
# `concurrency` rows: the most batching can give when a step's time is its gemms (a step of
# many rows then costs what their gemms cost, a step of one what its gemv costs).
GEMM_CEILING = textwrap.dedent(
    """
    import json, sys, time
    import numpy as np
    layers, hidden, intermediate, vocab, rows = (int(a) for a in sys.argv[1:6])
    shapes = [(hidden, hidden)] * 4 + [(hidden, intermediate)] * 2 + [(intermediate, hidden)]
    weights = [np.random.rand(*s).astype(np.float32) for s in shapes * layers + [(hidden, vocab)]]
    def step(m):
        x = {k: np.random.rand(m, k).astype(np.float32) for k in (hidden, intermediate)}
        best = float("inf")
        for _ in range(50):
            started = time.perf_counter()
            for w in weights:
                x[w.shape[0]] @ w
            best = min(best, time.perf_counter() - started)
        return best
    one, many = step(1), step(rows)
    print(json.dumps({"one_row_s": one, "rows_s": many, "ceiling": rows * one / many}))
    """
)


def gemm_ceiling(config, rows: int) -> dict:
    """GEMM_CEILING in a subprocess with OpenBLAS on one thread (the daemon's device runs its
    gemms on one)."""
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            GEMM_CEILING,
            str(config["num_hidden_layers"]),
            str(config["hidden_size"]),
            str(config["intermediate_size"]),
            str(config["vocab_size"]),
            str(rows),
        ],
        env={
            "OPENBLAS_NUM_THREADS": "1",
            "OMP_NUM_THREADS": "1",
            "PATH": "/usr/bin:/bin",
        },
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)


def generate_all(client, model: str, prompts, tokens: int, together: bool):
    def one(prompt):
        return [t.token_id for t in client.generate(model, prompt, max_tokens=tokens)]

    started = time.monotonic()
    if together:
        with ThreadPoolExecutor(len(prompts)) as pool:
            outputs = list(pool.map(one, prompts))
    else:
        outputs = [one(prompt) for prompt in prompts]
    return time.monotonic() - started, outputs


def run(args) -> dict:
    rng = np.random.default_rng(args.seed)
    config = llama_config(
        layers=args.layers,
        hidden_size=args.hidden,
        intermediate_size=args.intermediate,
        num_attention_heads=args.heads,
        num_key_value_heads=args.heads,
        vocab_size=args.vocab,
        max_position_embeddings=256,
    )
    prompts = [
        [int(i) for i in rng.integers(3, args.vocab, size=int(rng.integers(8, 25)))]
        for _ in range(args.concurrency)
    ]
    with tempfile.TemporaryDirectory(prefix="generate_bench_") as tmp:
        workdir = Path(tmp)
        hf = workdir / "hf"
        write_checkpoint(hf, config)
        models.convert(hf, workdir / "repo", name="bench", dtype="f32", progress=False)
        (workdir / "daemon").mkdir()
        daemon = Daemon(
            Path(args.daemon),
            workdir / "daemon",
            [f"--model_repository={workdir / 'repo'}", f"--devices={args.devices}"]
            + args.daemon_flag,
        )
        daemon.start(timeout=300)
        try:
            with es.Client(daemon.address, timeout=600) as client:
                client.wait_ready(timeout=300)
                # Warm: one generation compiles the plans of every length the others meet.
                generate_all(client, "bench", prompts[:1], args.tokens, together=False)
                alone, together = [], []
                for _ in range(args.repeats):
                    seconds, outputs = generate_all(
                        client, "bench", prompts, args.tokens, False
                    )
                    alone.append(len(prompts) * args.tokens / seconds)
                    seconds, batched = generate_all(
                        client, "bench", prompts, args.tokens, True
                    )
                    together.append(len(prompts) * args.tokens / seconds)
                    assert batched == outputs, "batched generations differ from alone"
        finally:
            daemon.stop()
        result = {
            "date": datetime.date.today().isoformat(),
            "config": {
                k: config[k]
                for k in (
                    "num_hidden_layers",
                    "hidden_size",
                    "intermediate_size",
                    "num_attention_heads",
                    "vocab_size",
                )
            },
            "devices": args.devices,
            "concurrency": args.concurrency,
            "tokens": args.tokens,
            "prompt_lengths": [len(p) for p in prompts],
            "alone_tokens_per_s": alone,
            "together_tokens_per_s": together,
            "alone_median": statistics.median(alone),
            "together_median": statistics.median(together),
            "together_over_alone": statistics.median(together)
            / statistics.median(alone),
            "gemm_ceiling": gemm_ceiling(config, args.concurrency),
        }
        if args.reference:
            reference = subprocess.run(
                [
                    args.reference,
                    "-c",
                    REFERENCE,
                    str(hf),
                    str(args.tokens),
                    str(args.threads),
                ],
                input=json.dumps(prompts),
                capture_output=True,
                text=True,
                check=True,
            )
            ref = json.loads(reference.stdout.strip().splitlines()[-1])
            result["transformers_tokens_per_s"] = (
                len(prompts) * args.tokens / ref["seconds"]
            )
            result["torch"] = ref["torch"]
            result["torch_threads"] = args.threads
            result["equal_generations"] = sum(
                a == b for a, b in zip(outputs, ref["outputs"])
            )
            result["alone_over_transformers"] = (
                result["alone_median"] / result["transformers_tokens_per_s"]
            )
            result["together_over_transformers"] = (
                result["together_median"] / result["transformers_tokens_per_s"]
            )
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--intermediate", type=int, default=1376)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument(
        "--threads", type=int, default=2, help="torch threads for --reference"
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--daemon", default=str(REPO_ROOT / "build" / "bin" / "einsummabled")
    )
    parser.add_argument("--reference", help="a Python with torch and transformers")
    parser.add_argument(
        "--daemon-flag",
        action="append",
        default=[],
        help="a flag for the daemon (repeatable), e.g. --daemon-flag=--generation_page_size=64",
    )
    parser.add_argument("--json", help="where to write the results")
    args = parser.parse_args(argv)
    result = run(args)
    path = Path(
        args.json
        or REPO_ROOT
        / "bench"
        / "results"
        / f"generate-{datetime.date.today().isoformat()}.json"
    )
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"prompts {args.concurrency} x {args.tokens} tokens, devices {args.devices}")
    print(f"alone     {result['alone_median']:9.1f} tokens/s")
    print(
        f"together  {result['together_median']:9.1f} tokens/s  "
        f"({result['together_over_alone']:.2f}x alone; the weights' gemms alone, NumPy on one "
        f"thread: {result['gemm_ceiling']['ceiling']:.2f}x at {args.concurrency} rows)"
    )
    if "transformers_tokens_per_s" in result:
        print(
            f"transformers generate {result['transformers_tokens_per_s']:9.1f} tokens/s "
            f"({args.threads} threads); daemon alone / transformers "
            f"{result['alone_over_transformers']:.2f}, together / transformers "
            f"{result['together_over_transformers']:.2f}; equal generations "
            f"{result['equal_generations']}/{args.concurrency}"
        )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
