"""Where Triton's perf_analyzer is and how to start it: shared by test_perf_analyzer.py and
bench/serving/run.py.

perf_analyzer is the C++ binary in tritonclient's wheel (pip puts it in the environment's
scripts folder, ``.venv/bin``); it links Debian's libb64 and CUDA 12's runtime, which
scripts/setup installs (libb64-0d; the nvidia-cuda-runtime-cu12 wheel, whose folder
``perf_analyzer_env`` puts on LD_LIBRARY_PATH).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sysconfig
from pathlib import Path


def perf_analyzer_binary() -> Path | None:
    """The perf_analyzer of this Python environment's tritonclient, else the first on PATH."""
    candidate = Path(sysconfig.get_path("scripts")) / "perf_analyzer"
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return candidate
    found = shutil.which("perf_analyzer")
    return Path(found) if found else None


def cuda_runtime_lib() -> Path | None:
    """The folder of nvidia-cuda-runtime-cu12's libcudart.so.12, or None."""
    spec = importlib.util.find_spec("nvidia.cuda_runtime")
    if spec is None or not spec.submodule_search_locations:
        return None
    lib = Path(next(iter(spec.submodule_search_locations))) / "lib"
    return lib if (lib / "libcudart.so.12").exists() else None


def perf_analyzer_env() -> dict:
    """This process's environment with libcudart's folder first on LD_LIBRARY_PATH."""
    env = dict(os.environ)
    lib = cuda_runtime_lib()
    if lib is not None:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            p for p in (str(lib), env.get("LD_LIBRARY_PATH", "")) if p
        )
    return env
