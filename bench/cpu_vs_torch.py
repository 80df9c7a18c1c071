"""The CPU backend against PyTorch eager on the same cores (bench/README.md, "cpu_vs_torch").

    scripts/setup --bench          # once: PyTorch from PyPI into .venv-bench (~5.6 GB)
    .venv-bench/bin/python bench/cpu_vs_torch.py [--quick] [--build build] [--rounds N]

A LLaMA-shaped stack (compiler/workloads' llama-stack: BLOCKS blocks of RMSNorm, Q/K/V
projections, RoPE, causal grouped-query attention, the output projection, RMSNorm and a SwiGLU
feed-forward, one sequence of TOKENS tokens) in f32, bf16 and f16, run

  - by einsummable: `einsummable-run --workload llama-stack:... --backend cpu --devices P`, the
    CPU backend with P virtual devices (one core each), the default planner; the time is the
    median of its executions (inputs loaded, plan compiled beforehand);
  - by PyTorch eager: the same block written as a user would (matmuls, F.rms_norm-like arithmetic,
    F.scaled_dot_product_attention with is_causal and enable_gqa), `torch.set_num_threads(P)`,
    under torch.inference_mode(), weights and RoPE tables made beforehand.

The two take turns round by round, so a noisy phase of a shared machine hits both; the table
gives each side's median time over the rounds and the median of the per-round ratios
(einsummable / PyTorch: below 1 is faster). Writes bench/results/cpu-vs-torch-<date>.json
(--quick: bench/results/quick/, which git ignores).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent

BLOCKS = 4
TOKENS = 512
D_MODEL = 512
HEADS_Q = 8
HEADS_KV = 4
D_HEAD = 64
D_FF = 1536
EPS = 1e-5
THETA = 10000.0

TORCH_DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def workload(dtype: str) -> str:
    return (
        f"llama-stack:blocks={BLOCKS},tokens={TOKENS},d_model={D_MODEL},heads_q={HEADS_Q},"
        f"heads_kv={HEADS_KV},d_head={D_HEAD},d_ff={D_FF},dtype={dtype}"
    )


def einsummable_seconds(
    build: Path, dtype: str, devices: int, repeat: int
) -> tuple[float, dict]:
    """Median execute time of einsummable-run, and its JSON line (which also says the outputs
    matched the double-precision reference)."""
    result = subprocess.run(
        [
            str(build / "bin" / "einsummable-run"),
            f"--workload={workload(dtype)}",
            "--backend=cpu",
            f"--devices={devices}",
            f"--repeat={repeat}",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise SystemExit(
            f"einsummable-run failed ({result.returncode}):\n{result.stderr}"
        )
    line = json.loads(result.stdout.strip().splitlines()[-1])
    if not line["within_tolerance"]:
        raise SystemExit(f"einsummable-run: outputs outside tolerance: {line}")
    return line["execute_median_s"], line


class TorchStack:
    """The same stack in PyTorch eager, weights drawn once (normal, std 0.02)."""

    def __init__(self, dtype: torch.dtype):
        gen = torch.Generator().manual_seed(20261206)

        def weight(*shape):
            return (torch.randn(*shape, generator=gen) * 0.02).to(dtype)

        self.blocks = []
        q_out, kv_out = HEADS_Q * D_HEAD, HEADS_KV * D_HEAD
        for _ in range(BLOCKS):
            self.blocks.append(
                {
                    "attn_norm": torch.ones(D_MODEL, dtype=dtype),
                    "wq": weight(D_MODEL, q_out),
                    "wk": weight(D_MODEL, kv_out),
                    "wv": weight(D_MODEL, kv_out),
                    "wo": weight(q_out, D_MODEL),
                    "ffn_norm": torch.ones(D_MODEL, dtype=dtype),
                    "w1": weight(D_MODEL, D_FF),
                    "w3": weight(D_MODEL, D_FF),
                    "w2": weight(D_FF, D_MODEL),
                }
            )
        self.x = torch.randn(TOKENS, D_MODEL, generator=gen).to(dtype)
        # RoPE on two halves of each head, positions 0..TOKENS-1 (compiler/ir/ops/rope.cc).
        half = D_HEAD // 2
        inv = THETA ** (-torch.arange(half, dtype=torch.float64) / half)
        angles = torch.arange(TOKENS, dtype=torch.float64)[:, None] * inv[None, :]
        self.cos = angles.cos().to(dtype)[:, None, :]
        self.sin = angles.sin().to(dtype)[:, None, :]

    def rmsnorm(self, x, weight):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * weight

    def rope(self, x):
        half = D_HEAD // 2
        first, second = x[..., :half], x[..., half:]
        return torch.cat(
            (
                first * self.cos - second * self.sin,
                second * self.cos + first * self.sin,
            ),
            -1,
        )

    def forward(self):
        x = self.x
        for w in self.blocks:
            a = self.rmsnorm(x, w["attn_norm"])
            q = self.rope((a @ w["wq"]).view(TOKENS, HEADS_Q, D_HEAD))
            k = self.rope((a @ w["wk"]).view(TOKENS, HEADS_KV, D_HEAD))
            v = (a @ w["wv"]).view(TOKENS, HEADS_KV, D_HEAD)
            attn = F.scaled_dot_product_attention(
                q.transpose(0, 1),
                k.transpose(0, 1),
                v.transpose(0, 1),
                is_causal=True,
                enable_gqa=True,
            )
            h = x + attn.transpose(0, 1).reshape(TOKENS, HEADS_Q * D_HEAD) @ w["wo"]
            f = self.rmsnorm(h, w["ffn_norm"])
            x = h + (F.silu(f @ w["w1"]) * (f @ w["w3"])) @ w["w2"]
        return x


def torch_seconds(stack: TorchStack, threads: int, repeat: int) -> float:
    torch.set_num_threads(threads)
    with torch.inference_mode():
        stack.forward()  # warm-up: oneDNN/MKL pick and JIT their kernels on first use
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            stack.forward()
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", type=Path, default=ROOT / "build")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--repeat", type=int, default=10, help="executions per side per round"
    )
    parser.add_argument(
        "--quick", action="store_true", help="2 rounds, 3 executions, f32 only"
    )
    args = parser.parse_args()
    rounds, repeat, dtypes = args.rounds, args.repeat, ["f32", "bf16", "f16"]
    if args.quick:
        rounds, repeat, dtypes = 2, 3, ["f32"]
    devices = [1, 2]

    stacks = {dtype: TorchStack(TORCH_DTYPES[dtype]) for dtype in dtypes}
    samples: dict[tuple[str, int], dict[str, list]] = {
        (dtype, p): {"einsummable": [], "torch": [], "ratio": []}
        for dtype in dtypes
        for p in devices
    }
    kernels = ""
    for round_idx in range(rounds):
        for dtype in dtypes:
            for p in devices:
                ours, line = einsummable_seconds(args.build, dtype, p, repeat)
                theirs = torch_seconds(stacks[dtype], p, repeat)
                cell = samples[(dtype, p)]
                cell["einsummable"].append(ours)
                cell["torch"].append(theirs)
                cell["ratio"].append(ours / theirs)
                kernels = line.get("kernels", "")
                print(
                    f"round {round_idx + 1}/{rounds} {dtype} p={p}: einsummable "
                    f"{ours * 1e3:.1f} ms ({line['strategy']}), PyTorch {theirs * 1e3:.1f} ms",
                    file=sys.stderr,
                )

    rows = []
    print(
        f"\n{workload('<dtype>')}, CPU backend vs PyTorch {torch.__version__} eager, "
        f"{rounds} rounds x {repeat} executions, medians\n"
    )
    print(f"einsummable kernels: {kernels}")
    print(
        f"PyTorch: MKL {torch.backends.mkl.is_available()}, oneDNN "
        f"{torch.backends.mkldnn.is_available()}, CPU capability "
        f"{torch.backends.cpu.get_cpu_capability()}\n"
    )
    print("| dtype | p | einsummable ms | PyTorch ms | einsummable / PyTorch |")
    print("|---|---|---|---|---|")
    for dtype in dtypes:
        for p in devices:
            cell = samples[(dtype, p)]
            row = {
                "dtype": dtype,
                "devices": p,
                "einsummable_ms": statistics.median(cell["einsummable"]) * 1e3,
                "torch_ms": statistics.median(cell["torch"]) * 1e3,
                "ratio": statistics.median(cell["ratio"]),
            }
            rows.append(row)
            print(
                f"| {dtype} | {p} | {row['einsummable_ms']:.1f} | {row['torch_ms']:.1f} | "
                f"{row['ratio']:.2f} |"
            )

    out_dir = ROOT / "bench" / "results" / ("quick" if args.quick else "")
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / f"cpu-vs-torch-{datetime.date.today().isoformat()}.json"
    out.write_text(
        json.dumps(
            {
                "workload": workload("<dtype>"),
                "rounds": rounds,
                "repeat": repeat,
                "torch": torch.__version__,
                "einsummable_kernels": kernels,
                "cpu": platform.processor() or platform.machine(),
                "cores": os.cpu_count(),
                "rows": rows,
                "samples": {f"{d}/p{p}": v for (d, p), v in samples.items()},
            },
            indent=2,
        )
        + "\n"
    )
    print(f"\nwrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
