"""CUTLASS from the ``nvidia-cutlass`` wheel, on a GPU: does Inductor build, benchmark and run CUTLASS GEMMs?

    pip install nvidia-cutlass            # or: pip install 'inductor-knobs[cutlass]'
    PYTHONPATH=. python bench/cutlass_pip_gpu.py OUT_DIR [--m 4096 --n 4096 --k 4096] [--max-configs 8]

Needs an NVIDIA GPU, torch 2.5+ with CUDA (autotune records: ``add_feedback_saver``), and ``nvcc``
(``CUDA_HOME/bin/nvcc`` or on ``PATH``): Inductor compiles each CUTLASS candidate with it.  No CUTLASS
checkout: ``inductor_knobs`` points the CUTLASS directory key (``cutlass.cutlass_dir`` on 2.11+,
``cuda.cutlass_dir`` before) at a directory of links into the wheel (:mod:`inductor_knobs.core.cutlass`).

Phases, each in a fresh Inductor cache and Dynamo state, each caught separately (the exception's
type, message and traceback tail go into the JSON instead of stopping the run):

- ``setup``: versions, GPU, nvcc, the wheel, ``doctor``'s CUTLASS line, and inside a knobs block
  asking for CUTLASS: the generated directory, torch's own ``try_import_cutlass()`` and the nvcc
  include directories torch derives from it (``compile_utils._cutlass_include_paths``).
- ``aten_cutlass``: a bf16 ``M×K @ K×N`` GEMM compiled under
  ``ik.knobs(gemm_backends="ATEN,CUTLASS", max_autotune_gemm=True)`` inside ``ik.record_autotune()``:
  choices per kind, CUTLASS choices benchmarked (finite time) and failed, the winner and its kind,
  the CUTLASS directory the compile attested, the result against eager (``torch.allclose``, bf16
  tolerance) and latency (median ms, compiled vs eager).
- ``cutlass_only``: the same with ``gemm_backends="CUTLASS"`` so a CUTLASS kernel must win, which
  checks a CUTLASS kernel's numerics (``--skip-cutlass-only`` leaves it out).

Writes ``OUT_DIR/cutlass_pip_gpu.json`` and ``OUT_DIR/autotune-<phase>.jsonl`` and prints a summary.
``--max-configs`` caps the CUTLASS candidates profiled (``cutlass_max_profiling_configs``; 0: all),
because every candidate is an nvcc compile.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
import traceback
import warnings
from collections import Counter
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

import inductor_knobs as ik
from inductor_knobs.core import cutlass, torch_compat
from inductor_knobs.errors import NoFallbackWarning

# bf16 has an 8-bit mantissa: torch.testing's bf16 rtol (1.6e-2), and an atol for K-long sums near 0.
RTOL, ATOL = 1.6e-2, 1e-1


def failure(err: BaseException) -> dict[str, Any]:
    """The exact exception, for the JSON: type, message and the traceback's last frames."""
    return {
        "type": f"{type(err).__module__}.{type(err).__qualname__}",
        "message": str(err),
        "cause": repr(err.__cause__) if err.__cause__ is not None else None,
        "traceback": traceback.format_exception(type(err), err, err.__traceback__)[-12:],
    }


def version_of(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def nvcc() -> dict[str, Any]:
    """Which nvcc Inductor would find (``CUDA_HOME/bin/nvcc``, else ``PATH``) and its version line."""
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    path = os.path.join(home, "bin", "nvcc") if home and os.path.exists(os.path.join(home, "bin", "nvcc")) else None
    path = path or shutil.which("nvcc")
    info: dict[str, Any] = {"path": path, "CUDA_HOME": home}
    if path:
        try:
            out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60).stdout
            info["version"] = next((line for line in out.splitlines() if "release" in line), out.strip()[-200:])
        except (OSError, subprocess.SubprocessError) as err:
            info["version"] = f"failed: {err}"
    return info


def cutlass_key() -> str:
    patches = torch_compat.installed(strict=False)
    return patches.cutlass_dir_key(torch_compat.release_of(torch.__version__))


def profiling_key() -> str | None:
    """The config key capping CUTLASS candidates: ``cutlass.`` on 2.11+, ``cuda.`` before."""
    cfg = importlib.import_module("torch._inductor.config")
    for key in ("cutlass.cutlass_max_profiling_configs", "cuda.cutlass_max_profiling_configs"):
        if key in cfg._config:  # type: ignore[attr-defined]
            return key
    return None


def try_import_cutlass_fn() -> Any:
    for module in ("torch._inductor.codegen.cutlass.utils", "torch._inductor.codegen.cuda.cutlass_utils"):
        try:
            return importlib.import_module(module).try_import_cutlass
        except (ImportError, AttributeError):
            continue
    raise ImportError("no try_import_cutlass in torch._inductor.codegen.{cutlass.utils,cuda.cutlass_utils}")


@contextlib.contextmanager
def fresh_state() -> Any:
    """A fresh Inductor cache (torch's fresh_cache / fresh_inductor_cache) and Dynamo state."""
    from torch._inductor import codecache, utils

    fresh = getattr(utils, "fresh_cache", None) or utils.fresh_inductor_cache
    torch._dynamo.reset()
    with fresh():
        yield
    torch._dynamo.reset()
    # torch 2.11's fresh_cache leaves the CUDA/CUTLASS code caches' in-memory maps pointing into the
    # cache directory it just deleted; the next phase's precompile then fails with FileNotFoundError
    # on a .cu file (seen on the H200).  Clear them between phases.
    for name in ("CUDACodeCache", "CUTLASSCodeCache"):
        clear = getattr(getattr(codecache, name, None), "cache_clear", None)
        if clear is not None:
            clear()


def median_ms(fn: Any) -> float:
    """Median latency in ms (triton's do_bench where available, else CUDA events)."""
    try:
        from triton.testing import do_bench

        return float(do_bench(fn, warmup=10, rep=100, return_mode="median"))
    except ImportError:
        samples = []
        for _ in range(50):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            samples.append(start.elapsed_time(end))
        return statistics.median(samples)


# -- phases -------------------------------------------------------------------------------------------


def phase_setup() -> dict[str, Any]:
    props = torch.cuda.get_device_properties(0)
    key = cutlass_key()
    cfg = importlib.import_module("torch._inductor.config")
    out: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "triton": version_of("triton"),
        "nvidia_cutlass": version_of("nvidia-cutlass"),
        "inductor_knobs": version_of("inductor-knobs"),
        "gpu": {"name": props.name, "sms": props.multi_processor_count, "capability": f"{props.major}.{props.minor}"},
        "nvcc": nvcc(),
        "cutlass_dir_key": key,
        "cutlass_dir_before": getattr(cfg, key),
    }
    found, where = torch_compat.installed(strict=False).cutlass_available(cfg, torch_compat.release_of(torch.__version__))
    out["doctor_cutlass"] = cutlass.describe(found, where, key, gpu_ok=not torch.version.hip)
    try:
        with ik.knobs(gemm_backends="ATEN,CUTLASS", max_autotune_gemm=True):
            out["cutlass_dir_in_block"] = getattr(cfg, key)
            out["try_import_cutlass"] = bool(try_import_cutlass_fn()())
            from torch._inductor.codegen.cuda import compile_utils

            includes: list[str] = getattr(compile_utils, "_cutlass_include_paths", list)()
            out["nvcc_include_dirs"] = {path: os.path.isdir(path) for path in includes}
    except Exception as err:  # noqa: BLE001 - reported, not fatal: the GEMM phases report their own
        out["error"] = failure(err)
    out["cutlass_dir_after"] = getattr(cfg, key)
    out["restored"] = out["cutlass_dir_after"] == out["cutlass_dir_before"]
    return out


def phase_gemm(name: str, backends: str, shape: tuple[int, int, int], max_configs: int, out_dir: Path) -> dict[str, Any]:
    m, n, k = shape
    torch.manual_seed(0)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)

    def gemm(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x @ y

    config: dict[str, Any] = {}
    cap = profiling_key()
    if cap and max_configs > 0:
        config[cap] = max_configs
    key = cutlass_key()
    row: dict[str, Any] = {"backends": backends, "shape": [m, n, k], "dtype": "bfloat16", "config": config}
    started = time.perf_counter()
    try:
        with fresh_state(), warnings.catch_warnings():
            warnings.simplefilter("ignore", NoFallbackWarning)  # cutlass_only leaves ATEN out on purpose
            with ik.record_autotune() as rec:
                with ik.knobs(gemm_backends=backends, max_autotune_gemm=True, config=config):
                    compiled = torch.compile(gemm, dynamic=False)
                    with torch.no_grad():
                        out = compiled(a, b)
                    torch.cuda.synchronize()
                row["compile_seconds"] = round(time.perf_counter() - started, 2)
                with torch.no_grad():
                    ref = gemm(a, b)
                    ref32 = a.float() @ b.float()
                    row["allclose_eager"] = bool(torch.allclose(out, ref, rtol=RTOL, atol=ATOL))
                    row["tolerance"] = {"rtol": RTOL, "atol": ATOL}
                    row["max_abs_diff_vs_eager"] = float((out.float() - ref.float()).abs().max())
                    row["max_abs_diff_vs_fp32"] = float((out.float() - ref32).abs().max())
                    row["eager_max_abs_diff_vs_fp32"] = float((ref.float() - ref32).abs().max())
                    row["compiled_ms"] = median_ms(lambda: compiled(a, b))
                    row["eager_ms"] = median_ms(lambda: gemm(a, b))
            row["records"] = [summarize(record) for record in rec.records]
            row["cutlass_choices"] = sum(r["kinds"].get("cutlass", 0) for r in row["records"])
            row["cutlass_benchmarked"] = sum(r["cutlass_benchmarked"] for r in row["records"])
            row["cutlass_failed"] = sum(r["cutlass_failed"] for r in row["records"])
            row["winner_kinds"] = [r["winner_kind"] for r in row["records"]]
            row["attested_cutlass_dir"] = sorted({_attested(att, key) for att in rec.attestations} - {None})
            row["attestations_ok"] = all(att.ok for att in rec.attestations)
            rec.to_jsonl(out_dir / f"autotune-{name}.jsonl")
            row["table"] = rec.table(top=8)
    except Exception as err:  # noqa: BLE001 - the point is to report why CUTLASS cannot work here
        row["error"] = failure(err)
        row["seconds_until_error"] = round(time.perf_counter() - started, 2)
    return row


def _attested(attestation: Any, key: str) -> str | None:
    try:
        return str(attestation.value(key))
    except KeyError:
        return None


def summarize(record: Any) -> dict[str, Any]:
    kinds = Counter(choice.kind for choice in record.choices)
    cutlass = [choice for choice in record.choices if choice.kind == "cutlass"]
    winner = next((choice for choice in record.choices if choice.name == record.winner), None)
    return {
        "signature": record.signature,
        "kinds": dict(kinds),
        # A cross-check of the kind mapping (records.CHOICE_KINDS): CUTLASS choices carry "cutlass" in their names.
        "cutlass_by_name": sum("cutlass" in choice.name.lower() for choice in record.choices),
        "from_cache": record.from_cache,
        "cutlass_benchmarked": 0 if record.from_cache else sum(choice.time_ms is not None for choice in cutlass),
        "cutlass_failed": sum(choice.time_ms is None for choice in cutlass),
        "best_cutlass": min(
            ({"name": c.name, "time_ms": c.time_ms} for c in cutlass if c.time_ms is not None),
            key=lambda c: c["time_ms"],
            default=None,
        ),
        "winner": record.winner,
        "winner_kind": winner.kind if winner else None,
        "winner_ms": winner.time_ms if winner else None,
        "benchmark_seconds": record.benchmark_seconds,
        "precompile_seconds": record.precompile_seconds,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--m", type=int, default=4096)
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--k", type=int, default=4096)
    parser.add_argument("--max-configs", type=int, default=8, help="CUTLASS candidates profiled (0: all)")
    parser.add_argument("--skip-cutlass-only", action="store_true")
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    shape = (args.m, args.n, args.k)
    results: dict[str, Any] = {"argv": sys.argv[1:], "setup": phase_setup()}
    results["aten_cutlass"] = phase_gemm("aten_cutlass", "ATEN,CUTLASS", shape, args.max_configs, args.out_dir)
    if not args.skip_cutlass_only:
        results["cutlass_only"] = phase_gemm("cutlass_only", "CUTLASS", shape, args.max_configs, args.out_dir)
    (args.out_dir / "cutlass_pip_gpu.json").write_text(json.dumps(results, indent=2, default=str))

    setup = results["setup"]
    print(f"torch {setup['torch']} on {setup['gpu']['name']}; nvidia-cutlass {setup['nvidia_cutlass']}; nvcc {setup['nvcc']}")
    print(f"doctor: CUTLASS {setup['doctor_cutlass']}")
    print(f"in block: {setup.get('cutlass_dir_in_block')}; try_import_cutlass: {setup.get('try_import_cutlass')}")
    if "error" in setup:
        print(f"setup error: {setup['error']['type']}: {setup['error']['message']}")
    for phase in ("aten_cutlass", "cutlass_only"):
        row = results.get(phase)
        if row is None:
            continue
        if "error" in row:
            error = row["error"]
            print(f"{phase}: FAILED after {row['seconds_until_error']} s: {error['type']}: {error['message'][:2000]}")
            continue
        print(
            f"{phase}: {row['cutlass_choices']} CUTLASS choices, {row['cutlass_benchmarked']} benchmarked, "
            f"{row['cutlass_failed']} failed; winner kinds {row['winner_kinds']}; allclose(eager) {row['allclose_eager']} "
            f"(max |diff| {row['max_abs_diff_vs_eager']:.4g}); compiled {row['compiled_ms']:.4f} ms vs eager "
            f"{row['eager_ms']:.4f} ms; compile {row['compile_seconds']} s"
        )
        print(row["table"])
    print(f"wrote {args.out_dir / 'cutlass_pip_gpu.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
