"""Does Inductor's Triton-template codegen cache fill under small-GPU emulation?  (GPU, torch 2.11+)

    python bench/generated_code_cache_probe.py OUT_DIR [--sms 40]

Observed on an H200 with torch 2.11: ``torch.mm`` of 21x15 @ 15x31 fp16 compiled with
``max_autotune=True`` leaves one entry in ``TritonTemplate.all_templates["mm"]._generated_code_cache``
on the full GPU and none under ``emulate_gpu(sms=40)`` with the gate forced open, although Triton
templates were autotuned.  Torch fills that cache in ``TritonTemplate.generate_and_load``
(``_inductor/select_algorithm.py``; 2.11 :1819-2003) only when all of these hold:
``config.enable_caching_generated_triton_templates``, the template opted in
(``cache_codegen_enabled_for_template``, true for ``mm``), the call came through
``maybe_append_choice`` (``generate_with_caching=True``), and ``GeneratedCodeCache.make_key`` returned
a key (None for a ``FlexibleLayout`` output or input, subgraphs, a workspace, or an epilogue without a
hash).  It is emptied by ``torch._inductor.utils.clear_caches()``: ``fresh_cache()`` calls it on entry
and exit, and so does every compile while ``force_disable_caches`` is set
(``compile_fx.with_fresh_cache_if_config``).  And no lowering happens at all on an FX-graph-cache hit.

Each arm below runs in one ``fresh_cache()`` (entered once, so the cache survives between arms; the
``mm`` cache is emptied by hand before each arm) and records, to tell those causes apart:
``make_key`` calls that returned a key and those that returned None (with the layout kinds it saw),
``put_entry``/``cache_clear`` calls, the cache size right after the compile and after the arm's blocks
exit, Inductor's ``generated_module_cache_*`` and FX-graph-cache counters, the autotuned choices
(``ik.record_autotune``) and the config that matters.

Arms: ``full`` (no knobs), ``full_gate_forced`` (``ik.knobs(min_sms=1)``), ``emulated``
(``emulate_gpu(sms)`` + ``ik.knobs(min_sms=1)``), ``emulated_recompile`` (the same after
``torch._dynamo.reset()``: a second compile of the same graph and salt).  Writes
``generated_code_cache_probe.json`` to OUT_DIR.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import traceback
from pathlib import Path
from typing import Any

import torch

import inductor_knobs as ik

SHAPES = ((21, 15), (15, 31))
CONFIG_KEYS = (
    "enable_caching_generated_triton_templates",
    "force_disable_caches",
    "autotune_in_subproc",
    "autotune_local_cache",
    "max_autotune",
    "max_autotune_gemm",
    "max_autotune_gemm_backends",
    "max_autotune_allow_flexible_layouts",
    "fx_graph_cache",
    "triton.cudagraphs",
)


class Spy:
    """Wraps ``GeneratedCodeCache.make_key``/``put_entry``/``cache_clear`` (class-wide) and records calls."""

    def __init__(self) -> None:
        from torch._inductor import ir
        from torch._inductor.select_algorithm import GeneratedCodeCache

        self.cls = GeneratedCodeCache
        self.ir = ir
        self.originals = {n: GeneratedCodeCache.__dict__[n] for n in ("make_key", "put_entry", "cache_clear")}
        self.reset()

    def reset(self) -> None:
        self.keys: list[dict[str, Any]] = []
        self.puts = 0
        self.clears: list[str] = []

    def install(self) -> None:
        spy, make_key, put_entry, cache_clear = self, *self.originals.values()

        signature = inspect.signature(make_key)

        def layout_kind(node: Any) -> str:
            try:
                return type(node.get_layout()).__name__
            except Exception as exc:  # noqa: BLE001 - a probe records what it cannot read
                return f"unreadable ({type(exc).__name__})"

        def spy_make_key(cache: Any, input_nodes: Any, *args: Any, **kwargs: Any) -> Any:
            key = make_key(cache, input_nodes, *args, **kwargs)
            bound = signature.bind(cache, input_nodes, *args, **kwargs).arguments
            spy.keys.append(
                {
                    "key": key is not None,
                    "output_layout": type(bound.get("layout")).__name__,
                    "input_layouts": [layout_kind(n) for n in input_nodes],
                    "subgraphs": bound.get("subgraphs") is not None,
                    "workspace_arg": bound.get("workspace_arg") is not None,
                    "epilogue_fn_hash": bound.get("epilogue_fn_hash"),
                }
            )
            return key

        def spy_put_entry(cache: Any, key: Any, *args: Any, **kwargs: Any) -> Any:
            spy.puts += key is not None
            return put_entry(cache, key, *args, **kwargs)

        def spy_cache_clear(cache: Any) -> Any:
            spy.clears.append("".join(traceback.format_stack(limit=6)[:-1]))
            return cache_clear(cache)

        self.cls.make_key = spy_make_key
        self.cls.put_entry = spy_put_entry
        self.cls.cache_clear = spy_cache_clear

    def uninstall(self) -> None:
        for name, original in self.originals.items():
            setattr(self.cls, name, original)


def mm_cache_size() -> int:
    from torch._inductor.select_algorithm import TritonTemplate

    return len(TritonTemplate.all_templates["mm"]._generated_code_cache._cache)


def counters() -> dict[str, int]:
    from torch._dynamo.utils import counters as torch_counters

    wanted = ("generated_module_cache", "fxgraph_cache", "select_algorithm", "aot_autograd")
    out = {k: v for k, v in torch_counters["inductor"].items() if k.startswith(wanted)}
    out.update({f"aot_autograd.{k}": v for k, v in torch_counters["aot_autograd"].items()})
    return dict(out)


def config_now() -> dict[str, Any]:
    import torch._inductor.config as cfg

    values: dict[str, Any] = {}
    for key in CONFIG_KEYS:
        try:
            obj: Any = cfg
            for part in key.split("."):
                obj = getattr(obj, part)
            values[key] = obj
        except AttributeError:
            values[key] = "absent"
    values["cache_key_tag"] = getattr(torch.compiler.config, "cache_key_tag", "absent")
    return values


def run_arm(name: str, sms: int | None, gate_forced: bool, spy: Spy, a: torch.Tensor, b: torch.Tensor) -> dict[str, Any]:
    from torch._inductor.select_algorithm import TritonTemplate

    TritonTemplate.all_templates["mm"]._generated_code_cache._cache.clear()  # not cache_clear(): the spy counts those
    spy.reset()
    before = counters()
    row: dict[str, Any] = {"sms": sms, "gate_forced": gate_forced}
    with contextlib.ExitStack() as stack:
        if sms is not None:
            emu = stack.enter_context(ik.emulate_gpu(sms=sms))
            row["granted_sms"] = emu.granted_sms
        if gate_forced:
            stack.enter_context(ik.knobs(min_sms=1))
        rec = stack.enter_context(ik.record_autotune())
        compiled = torch.compile(lambda x, y: torch.mm(x, y), options={"max_autotune": True}, dynamic=False)
        out = compiled(a, b)
        torch.cuda.synchronize()
        row["max_abs_err"] = float((out.float() - (a.float() @ b.float())).abs().max())
        row["config_inside"] = config_now()
        row["mm_cache_entries_inside"] = mm_cache_size()
        row["autotune"] = [
            {"op": r.op, "winner": r.winner, "from_cache": r.from_cache, "choices": [c.name for c in r.choices]}
            for r in rec.records
        ]
    row["mm_cache_entries_after_exit"] = mm_cache_size()
    after = counters()
    row["counter_deltas"] = {k: after.get(k, 0) - before.get(k, 0) for k in sorted(set(after) | set(before))}
    row["make_key_calls"] = len(spy.keys)
    row["make_key_returned_none"] = [k for k in spy.keys if not k["key"]][:5]
    row["make_key_returned_key"] = sum(k["key"] for k in spy.keys)
    row["put_entry_with_key"] = spy.puts
    row["cache_clear_calls"] = len(spy.clears)
    row["cache_clear_stacks"] = spy.clears[:2]
    print(
        {k: row[k] for k in ("mm_cache_entries_inside", "make_key_returned_key", "put_entry_with_key", "cache_clear_calls")},
        name,
        flush=True,
    )
    return row


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out_dir")
    parser.add_argument("--sms", type=int, default=40)
    args = parser.parse_args()
    from torch._inductor import utils

    fresh = getattr(utils, "fresh_cache", None) or utils.fresh_inductor_cache
    a = torch.randn(*SHAPES[0], device="cuda", dtype=torch.float16)
    b = torch.randn(*SHAPES[1], device="cuda", dtype=torch.float16)
    spy = Spy()
    arms: dict[str, Any] = {}
    spy.install()
    try:
        with fresh():
            for name, sms, forced in (
                ("full", None, False),
                ("full_gate_forced", None, True),
                ("emulated", args.sms, True),
                ("emulated_recompile", args.sms, True),
            ):
                torch._dynamo.reset()
                try:
                    arms[name] = run_arm(name, sms, forced, spy, a, b)
                except Exception as exc:  # noqa: BLE001 - record it; the other arms still tell something
                    arms[name] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
                    print(name, arms[name]["error"], flush=True)
            inside_fresh = mm_cache_size()
            clears_before_exit = len(spy.clears)
        spy_clears_at_fresh_exit = len(spy.clears) - clears_before_exit
    finally:
        spy.uninstall()
    result = {
        "gpu": torch.cuda.get_device_name(0),
        "sms": torch.cuda.get_device_properties(0).multi_processor_count,
        "torch": torch.__version__,
        "inductor_knobs": getattr(ik, "__version__", None),
        "shapes": SHAPES,
        "arms": arms,
        "mm_cache_entries_before_fresh_cache_exit": inside_fresh,
        "mm_cache_entries_after_fresh_cache_exit": mm_cache_size(),
        "cache_clear_calls_at_fresh_cache_exit": spy_clears_at_fresh_exit,
    }
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "generated_code_cache_probe.json").write_text(json.dumps(result, indent=2, default=str))
    print("wrote", out / "generated_code_cache_probe.json")


if __name__ == "__main__":
    main()
