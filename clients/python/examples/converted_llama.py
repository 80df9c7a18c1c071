#!/usr/bin/env python3
"""Logits of a converted Hugging Face model served from the daemon's model repository, checked
against the logits transformers computed (docs/models.md), and tokens generated from its first
prompt with the Generate RPC, checked against transformers' greedy ``generate``
(docs/generation.md; the fixture's generate.json, when it has one).

The model was converted by ``einsummable-convert`` from one of the fixtures of
tests/data/models (small random LLaMA-family models saved by transformers, with transformers'
logits for three prompts packed end to end) and loaded by ``einsummabled --model_repository``
at start; this sends the fixture's token ids with their sequence ends and compares. Exit status
1 when the logits differ from transformers' by more than 1e-4 of the largest (3e-2 for bf16).

    einsummable-convert tests/data/models/llama/hf repo --name llama
    einsummabled --model_repository repo &
    python clients/python/examples/converted_llama.py --server 127.0.0.1:50051 --model llama \\
        --fixture tests/data/models/llama
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

import einsummable as es


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default=None, help="host:port (default $EINSUMMABLE_SERVER)")
    parser.add_argument("--model", default="llama", help="the repository model's name")
    parser.add_argument(
        "--fixture", type=Path, required=True, help="its tests/data/models/<name> directory"
    )
    parser.add_argument("--tolerance", type=float, default=None, help="default 1e-4 (3e-2 bf16)")
    args = parser.parse_args(argv)
    with np.load(args.fixture / "expected.npz") as data:
        ids, ends, want = data["ids"], data["sequence_ends"], data["logits"]
        bf16 = "logits_f32" in data.files  # the bf16 fixtures also keep an f32 run
    try:
        with es.Client(args.server, timeout=120) as client:
            # The daemon answers while its repository loads in the background.
            client.wait_ready(timeout=120)
            result = client.execute(args.model, {"ids": ids}, sequence_ends=[int(e) for e in ends])
            generation = None
            if (args.fixture / "generate.json").exists() and not bf16:
                prompt = json.loads((args.fixture / "generate.json").read_text())["prompts"][0]
                tokens = client.generate(args.model, prompt["prompt_ids"], max_tokens=32)
                generation = (prompt, [token.token_id for token in tokens])
    except (es.EinsummableError, ValueError) as error:
        print(f"converted_llama: {error}", file=sys.stderr)
        return 2
    logits = result.outputs["logits"]
    tolerance = args.tolerance or (3e-2 if bf16 else 1e-4)
    error = float(np.max(np.abs(logits - want)) / np.max(np.abs(want)))
    ok = logits.shape == want.shape and error <= tolerance
    print(
        f"converted {args.model}: {len(ends)} prompts packed in {len(ids)} tokens, logits "
        f"{list(logits.shape)}: {'ok' if ok else 'MISMATCH'} against transformers "
        f"(largest difference {error:.3g} of the largest logit, tolerance {tolerance:g})"
    )
    if generation is not None:
        prompt, got = generation
        same = got == prompt["new_ids"]
        ok = ok and same
        print(
            f"generated {len(got)} tokens after prompt {prompt['prompt_ids']}: "
            f"{'ok, equal to' if same else 'MISMATCH against'} transformers' greedy generate "
            f"({got[:8]} ...)"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
