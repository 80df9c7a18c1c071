"""A soak of Generate on key/value caches (issue 37, bench/README.md "serving/soak"): rounds of
random generations, a third of them left by their client after a random token, against one
daemon; after each round the daemon's resident set size and the slots and pages still in use.

    .venv/bin/python bench/serving/soak.py [--rounds 8] [--generations 48] [--threads 8]
        [--slots 4] [--cache-tokens 160] [--seed 20261207]

1. Writes a random LLaMA checkpoint (2 layers, hidden 128; bench/models/real_size.py's writer),
   converts it to f32 and serves it with ``build/bin/einsummabled --model_repository`` on the
   CPU backend with ``--generation_slots`` (fewer slots than threads, so generations also wait
   for slots), capacity 64 and ``--generation_cache_tokens`` (pages of 16: fewer than the slots'
   worth, so generations also wait for pages).
2. Each round: ``--generations`` generations of random prompts (1-24 ids) and lengths (1-40
   tokens), greedy or seeded sampling, on ``--threads`` client threads; every third is closed
   after 1-4 tokens (its server-side generation is cancelled).
3. After each round: VmRSS of the daemon (``/proc/PID/status``) and GetServerInfo's
   ``generation_slots_in_use`` and ``generation_pages_in_use``, which must be 0. After the last round, every generation that
   finished is replayed alone and must be equal token for token; a left one must be the replay's
   first tokens.

Prints one line per round and a summary: RSS growth from the first round to the last. Exits 1
when a slot or page leaked or a generation differs from its replay.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
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


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def plan_round(rng, count: int, vocab: int) -> list[dict]:
    plans = []
    for g in range(count):
        plans.append(
            {
                "prompt": [
                    int(i)
                    for i in rng.integers(0, vocab, size=int(rng.integers(1, 25)))
                ],
                "max_tokens": int(rng.integers(1, 41)),
                "seed": 0 if g % 2 == 0 else int(rng.integers(1, 1 << 30)),
                "leave_after": int(rng.integers(1, 5)) if g % 3 == 0 else 0,
            }
        )
    return plans


def generate(client, plan: dict) -> list[int]:
    sampling = {"temperature": 1.0, "seed": plan["seed"]} if plan["seed"] else {}
    stream = client.generate(
        "soak", plan["prompt"], max_tokens=plan["max_tokens"], **sampling
    )
    ids = []
    for token in stream:
        ids.append(token.token_id)
        if plan["leave_after"] and len(ids) == plan["leave_after"]:
            stream.close()  # the client leaves: the server cancels the generation
            break
    return ids


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--daemon", default=str(REPO_ROOT / "build" / "bin" / "einsummabled")
    )
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--generations", type=int, default=48)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--cache-tokens", type=int, default=160)
    parser.add_argument("--seed", type=int, default=20261207)
    args = parser.parse_args()
    print(f"seed {args.seed}")
    rng = np.random.default_rng(args.seed)
    vocab = 512
    config = llama_config(
        layers=2,
        hidden_size=128,
        intermediate_size=256,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=vocab,
        max_position_embeddings=128,
    )
    failures = 0
    with tempfile.TemporaryDirectory(prefix="soak_bench_") as tmp:
        workdir = Path(tmp)
        write_checkpoint(workdir / "hf", config)
        models.convert(
            workdir / "hf", workdir / "repo", name="soak", dtype="f32", progress=False
        )
        (workdir / "daemon").mkdir()
        daemon = Daemon(
            Path(args.daemon),
            workdir / "daemon",
            [
                f"--model_repository={workdir / 'repo'}",
                "--devices=2",
                f"--generation_slots={args.slots}",
                "--generation_capacity=64",
                "--generation_page_size=16",
                f"--generation_cache_tokens={args.cache_tokens}",
            ],
        )
        daemon.start(timeout=300)
        try:
            with es.Client(daemon.address, timeout=600) as client:
                client.wait_ready(timeout=300)
                everything = []
                rss = []
                for round_index in range(args.rounds):
                    plans = plan_round(rng, args.generations, vocab)
                    started = time.monotonic()
                    with ThreadPoolExecutor(args.threads) as pool:
                        outputs = list(pool.map(lambda p: generate(client, p), plans))
                    seconds = time.monotonic() - started
                    deadline = time.monotonic() + 30

                    def in_use():
                        info = client.server_info()
                        return (
                            info.generation_slots_in_use,
                            info.generation_pages_in_use,
                        )

                    while any(in_use()) and time.monotonic() < deadline:
                        time.sleep(0.05)
                    slots, pages = in_use()
                    rss.append(rss_kib(daemon.process.pid))
                    tokens = sum(len(o) for o in outputs)
                    print(
                        f"round {round_index}: {len(plans)} generations, {tokens} tokens in "
                        f"{seconds:.2f} s, slots in use after {slots}, pages {pages}, daemon RSS "
                        f"{rss[-1]} KiB"
                    )
                    if slots or pages:
                        print("  FAILED: a slot or page stayed in use")
                        failures += 1
                    everything.extend(zip(plans, outputs))
                for plan, got in everything:
                    alone = generate(client, {**plan, "leave_after": 0})
                    expected = (
                        alone[: plan["leave_after"]] if plan["leave_after"] else alone
                    )
                    if got != expected:
                        print(f"  FAILED: {plan} gave {got}, alone {expected}")
                        failures += 1
        finally:
            daemon.stop()
    growth = rss[-1] - rss[0]
    print(
        f"RSS after round 0: {rss[0]} KiB, after round {len(rss) - 1}: {rss[-1]} KiB "
        f"(growth {growth} KiB, {100.0 * growth / rss[0]:.1f} %); median over rounds "
        f"{int(np.median(rss))} KiB; {len(everything)} generations replayed alone, "
        f"{failures} failures"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
