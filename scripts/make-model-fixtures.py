#!/usr/bin/env python3
"""Writes tests/data/models/<fixture>/: small random-weight LLaMA-family models made by
transformers, with the logits transformers computes for a few packed prompts. The converter
tests (clients/python/tests/test_models.py) convert them and check the daemon's logits against
these, so the tests need neither torch nor transformers; this script regenerates them.

Each fixture directory holds:
    hf/config.json, hf/model.safetensors     save_pretrained's output (safetensors)
    expected.npz                             ids (int32 [tokens], the prompts packed end to end),
                                             sequence_ends (int64), logits (float32 [tokens,
                                             vocab]: each prompt run alone by transformers, the
                                             results concatenated), and for bf16 fixtures
                                             logits_f32 (the same bf16 weights run in float32)
    generate.json                            transformers' greedy generate for each of those
                                             prompts alone: MAX_NEW_TOKENS new ids, eos off, with
                                             the smallest top-1/top-2 logit gap of each (a later
                                             test: the daemon's generation loop, token for token)

Fixtures (2 layers, hidden 32, vocab 128, grouped-query attention 4 query / 2 key-value heads):
    llama        LLaMA 3.1 style: rope_theta 500000, rope_scaling llama3 (an original context of
                 16 so that all three frequency bands occur in a head of 8), untied lm_head
    mistral      head_dim 16 given explicitly (q_out 64 != hidden 32), no sliding window
    qwen2        q/k/v biases, tied embeddings
    llama-bf16   LLaMA 2 style (rope_theta 10000, linear rope scaling 2), bf16 weights, tied

Usage:
    scripts/make-model-fixtures [--python PY] [OUT]   (default tests/data/models)

The script runs itself under a Python that has torch and transformers: --python, else
$EINSUMMABLE_REF_PYTHON, else the gitignored venv .venv-ref (made on first use with pip:
CPU torch and transformers, about 1 GB).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "tests" / "data" / "models"
REF_VENV = ROOT / ".venv-ref"
SEED = 20261206
# Prompt lengths, packed end to end: positions restart and attention stops at each end.
PROMPTS = (5, 9, 3)
# generate.json: greedy continuations this long; f32 fixtures refuse a step whose top two logits
# are closer than MIN_GAP (a near tie another correct implementation may break the other way).
MAX_NEW_TOKENS = 32
MIN_GAP = 1e-4

COMMON = dict(
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=128,
    max_position_embeddings=64,
    rms_norm_eps=1e-5,
)

FIXTURES = {
    "llama": dict(
        family="llama",
        dtype="float32",
        config=dict(
            COMMON,
            rope_theta=500000.0,
            rope_scaling=dict(
                rope_type="llama3",
                factor=8.0,
                low_freq_factor=1.0,
                high_freq_factor=4.0,
                original_max_position_embeddings=16,
            ),
            tie_word_embeddings=False,
        ),
    ),
    "mistral": dict(
        family="mistral",
        dtype="float32",
        config=dict(
            COMMON,
            head_dim=16,
            rope_theta=1000000.0,
            sliding_window=None,
            tie_word_embeddings=False,
        ),
    ),
    "qwen2": dict(
        family="qwen2",
        dtype="float32",
        config=dict(
            COMMON,
            rope_theta=1000000.0,
            tie_word_embeddings=True,
            use_sliding_window=False,
        ),
    ),
    "llama-bf16": dict(
        family="llama",
        dtype="bfloat16",
        config=dict(
            COMMON,
            rope_theta=10000.0,
            rope_scaling=dict(rope_type="linear", factor=2.0),
            tie_word_embeddings=True,
        ),
    ),
}


def reference_python(explicit: str | None) -> str:
    """A Python with torch and transformers: the one given, else the project's .venv-ref."""
    if explicit:
        return explicit
    python = REF_VENV / "bin" / "python"
    if not python.exists():
        print(
            f"make-model-fixtures: creating {REF_VENV} (torch CPU, transformers)",
            flush=True,
        )
        subprocess.run([sys.executable, "-m", "venv", str(REF_VENV)], check=True)
        pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        subprocess.run(
            [*pip, "torch", "--index-url", "https://download.pytorch.org/whl/cpu"],
            check=True,
        )
        subprocess.run([*pip, "transformers>=4.45", "safetensors", "numpy"], check=True)
    return str(python)


def make(out: Path) -> None:
    """Runs under the reference Python: writes every fixture."""
    import numpy as np
    import torch
    import transformers

    classes = {
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
    }
    torch.manual_seed(SEED)
    for name, spec in FIXTURES.items():
        config_class, model_class = classes[spec["family"]]
        config = config_class(**spec["config"])
        # The eager implementation: the reference is the plain formula, not a fused kernel.
        config._attn_implementation = "eager"
        model = model_class(config).eval()
        with torch.no_grad():
            # Random weights of order one (the default init's 0.02 makes every logit ~0, a weak
            # check); norms around 1, biases small but present.
            for param_name, param in model.named_parameters():
                if param_name.endswith("norm.weight"):
                    param.copy_(1.0 + 0.1 * torch.randn_like(param))
                elif param_name.endswith("bias"):
                    param.copy_(0.1 * torch.randn_like(param))
                else:
                    param.copy_(torch.randn_like(param) / param.shape[-1] ** 0.5)
        dtype = getattr(torch, spec["dtype"])
        model = model.to(dtype)
        directory = out / name
        if directory.exists():
            shutil.rmtree(directory)
        model.save_pretrained(directory / "hf", safe_serialization=True)
        for extra in ("generation_config.json",):
            (directory / "hf" / extra).unlink(missing_ok=True)

        generator = torch.Generator().manual_seed(SEED + len(name))
        prompts = [
            torch.randint(0, config.vocab_size, (length,), generator=generator)
            for length in PROMPTS
        ]

        def logits_of(load_dtype, model_class=model_class, directory=directory, prompts=prompts):
            # The saved directory loaded back as a user would (from_pretrained with a dtype:
            # RoPE's frequencies stay float32 as in real use, where model.to(bfloat16) would
            # round them), so the logits are those of exactly the files written.
            m = model_class.from_pretrained(
                directory / "hf", dtype=load_dtype, attn_implementation="eager"
            ).eval()
            with torch.no_grad():
                return torch.cat([m(p[None, :]).logits[0].float() for p in prompts]).numpy()

        arrays = {
            "ids": torch.cat(prompts).numpy().astype(np.int32),
            "sequence_ends": np.cumsum(PROMPTS).astype(np.int64),
            "logits": logits_of(dtype).astype(np.float32),
        }
        if dtype != torch.float32:
            arrays["logits_f32"] = logits_of(torch.float32).astype(np.float32)
        np.savez_compressed(directory / "expected.npz", **arrays)
        # Greedy decoding draws no random numbers, but the fixtures after this one take their
        # weights from the global generator: keep it untouched whatever generate does.
        with torch.random.fork_rng(devices=[]):
            write_generate(directory, model_class, dtype, prompts)
        (directory / "versions.json").write_text(
            json.dumps(
                {
                    "torch": torch.__version__,
                    "transformers": transformers.__version__,
                    "seed": SEED,
                },
                indent=2,
            )
            + "\n"
        )
        size = sum(f.stat().st_size for f in directory.rglob("*") if f.is_file())
        print(f"{directory}: {size} bytes, logits {arrays['logits'].shape}", flush=True)


def greedy(model, prompt):
    """transformers' generate, greedy, on one prompt (no padding, no eos): the new ids, the
    smallest gap between the two largest logits over the steps, the step where it occurs, and
    whether one forward pass over prompt + new ids (no KV cache) picks the same ids."""
    import torch

    ids = prompt[None, :].long()
    with torch.no_grad():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=MAX_NEW_TOKENS,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
            return_dict_in_generate=True,
            output_logits=True,
        )
        new = out.sequences[0, ids.shape[1] :]
        assert len(new) == MAX_NEW_TOKENS, f"generate stopped after {len(new)} tokens"
        logits = torch.stack([step[0] for step in out.logits]).float()
        assert torch.equal(logits.argmax(-1), new), "generate did not pick the largest logits"
        top = logits.topk(2, dim=-1).values
        gaps = top[:, 0] - top[:, 1]
        full = model(out.sequences).logits[0, ids.shape[1] - 1 : -1]
        agrees = torch.equal(full.argmax(-1), new)
    step = int(gaps.argmin())
    return new.tolist(), float(f"{float(gaps[step]):.6g}"), step, agrees


def write_generate(directory: Path, model_class, dtype, prompts) -> None:
    """generate.json: transformers' greedy continuation of each prompt of expected.npz, from
    the saved directory loaded back in the fixture's dtype (and for bf16 also in float32)."""
    import re

    import torch
    import transformers

    def load(load_dtype):
        return model_class.from_pretrained(
            directory / "hf", dtype=load_dtype, attn_implementation="eager"
        ).eval()

    runs = [(dtype, load(dtype), "")]
    if dtype != torch.float32:
        runs.append((torch.float32, load(torch.float32), "_f32"))
    eos = json.loads((directory / "hf" / "config.json").read_text()).get("eos_token_id")
    results = []
    for prompt in prompts:
        entry = {"prompt_ids": prompt.tolist()}
        for run_dtype, model, suffix in runs:
            new, gap, step, agrees = greedy(model, prompt)
            if run_dtype == torch.float32 and gap < MIN_GAP:
                raise SystemExit(
                    f"{directory.name}: prompt {prompt.tolist()} step {step}: top-2 logit gap "
                    f"{gap:.3g} < {MIN_GAP} in float32; choose other prompts"
                )
            if run_dtype == torch.float32 and not agrees:
                raise SystemExit(f"{directory.name}: cached and uncached greedy ids differ")
            entry[f"new_ids{suffix}"] = new
            entry[f"min_top2_gap{suffix}"] = gap
            entry[f"min_top2_gap_step{suffix}"] = step
            entry[f"uncached_forward_agrees{suffix}"] = agrees
            entry[f"config_eos_among_new_ids{suffix}"] = eos in new
        results.append(entry)

    note = (
        "Greedy, one prompt at a time, no padding. eos is off (eos_token_id=None), so exactly "
        "max_new_tokens ids come out; the config's eos id never occurs among them "
        "(config_eos_among_new_ids), so generation with eos on gives the same ids. "
        "min_top2_gap: the smallest difference between the two largest logits over the steps "
        "(at step min_top2_gap_step, 0 = the first new id); uncached_forward_agrees: one forward "
        "pass over prompt + new ids without the KV cache picks the same ids."
    )
    if dtype != torch.float32:
        note += (
            " bf16: the weights and the computation are bfloat16 as in expected.npz's logits; "
            "bf16 greedy is fragile: logits round to 8 bits of mantissa, so exact ties (gap 0) "
            "occur, which torch's argmax breaks toward the lower id and another correct bf16 "
            "implementation may break otherwise, after which the continuations part. "
            "new_ids_f32 etc.: the same bf16 weights run in float32 (as logits_f32), the robust "
            "comparison."
        )
    document = {
        "how_made": (
            "scripts/make-model-fixtures.py: "
            f"{model_class.__name__}.from_pretrained(hf, dtype={str(dtype).split('.')[-1]}, "
            "attn_implementation='eager').generate(prompt_ids[None], attention_mask=ones, "
            f"max_new_tokens={MAX_NEW_TOKENS}, do_sample=False, eos_token_id=None, "
            "pad_token_id=0), KV cache on (transformers' default)"
        ),
        "note": note,
        "dtype": str(dtype).split(".")[-1],
        "max_new_tokens": MAX_NEW_TOKENS,
        "do_sample": False,
        "eos_token_id": None,
        "pad_token_id": 0,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "prompts": results,
    }
    text = json.dumps(document, indent=2)
    # Lists of ids on one line each.
    text = re.sub(
        r"\[\s*(-?\d+(?:,\s*-?\d+)*)\s*\]",
        lambda m: "[" + ", ".join(m.group(1).replace(",", " ").split()) + "]",
        text,
    )
    (directory / "generate.json").write_text(text + "\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, default=DEFAULT_OUT)
    parser.add_argument(
        "--python",
        default=os.environ.get("EINSUMMABLE_REF_PYTHON"),
        help="a Python with torch and transformers (default $EINSUMMABLE_REF_PYTHON, else "
        ".venv-ref, made on first use)",
    )
    parser.add_argument("--in-reference-python", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    out = args.out.resolve()
    if args.in_reference_python:
        make(out)
        return 0
    python = reference_python(args.python)
    return subprocess.run(
        [python, str(Path(__file__).resolve()), "--in-reference-python", str(out)], check=False
    ).returncode


if __name__ == "__main__":
    sys.exit(main())
