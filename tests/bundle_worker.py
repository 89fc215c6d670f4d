"""Run in a subprocess by test_serving_bundle: build a serving bundle, or load one in a fresh process.

python bundle_worker.py build PATH [cuda]       compile, warm two lengths (on CUDA: capture one graph each), save
python bundle_worker.py load PATH [cuda]        load the bundle (empty TORCHINDUCTOR_CACHE_DIR), serve one request
                                                under the guard; print the proof, torch's own counters, the guard
python bundle_worker.py load-other PATH         load it for another model (on_cold="raise"); print the refusal
python bundle_worker.py build-aot PATH [cuda]   the same recipe, saved as an AOTInductor package (aot=True)
python bundle_worker.py load-aot PATH [cuda]    load that bundle without the model; serve a warmed and an unwarmed
                                                length under the guard; print the proof, the counters and the errors
                                                against the eager model
python bundle_worker.py build-small PATH        a one-kernel model on the CPU, warmed at one shape, saved (cheap)
python bundle_worker.py load-small PATH         load it; print whether the load refused
"""

import faulthandler
import json
import sys
import warnings

import torch

import inductor_knobs as ik

#: The knobs of the build's ik.compile (with mode="max-autotune-no-cudagraphs", dynamic=False); the load reads
#: them from the bundle.  On a CPU the C++ bmm template makes Inductor autotune (torch 2.6+, AVX2/AVX512).
KNOBS = {"cpu": ik.Knobs(gemm_backends="ATEN,CPP"), "cuda": ik.Knobs(gemm_backends="ATEN,TRITON")}
#: Sequence lengths warmed (the "buckets"): one static graph each.
SHAPES = [48, 56]
device = "cpu"


class Model(torch.nn.Module):
    def __init__(self, offset: float = 1.0) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.weight = torch.nn.Parameter(torch.randn(4, 64, 32))
        self.offset = offset

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(torch.bmm(x, self.weight)) + self.offset


def model(offset: float = 1.0) -> torch.nn.Module:
    return Model(offset).to(device).eval()


def factory(n: int) -> torch.Tensor:
    return torch.randn(4, n, 64, generator=torch.Generator().manual_seed(n)).to(device)


class Small(torch.nn.Module):
    """One pointwise kernel: the cheapest bundle to build and load."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sin() + 1


def small_factory(n: int) -> torch.Tensor:
    return torch.ones(n)


def counters() -> dict:
    from torch._dynamo.utils import counters as found

    groups = ("inductor", "aot_autograd", "stats")
    return {f"{group}.{name}": int(value) for group in groups for name, value in found[group].items()}


def main(mode: str, path: str) -> None:
    if mode in ("build", "build-aot"):
        compiled = ik.compile(model(), KNOBS[device], mode="max-autotune-no-cudagraphs", dynamic=False)
        with torch.no_grad(), ik.record_autotune() as rec:
            report = ik.serving.warmup(compiled, shapes=SHAPES, factory=factory, probes=None)
            served = compiled
            if device == "cuda":
                served = ik.serving.capture_cuda_graphs(compiled, shapes=SHAPES, factory=factory)
                report = ik.serving.warmup(served, shapes=SHAPES, factory=factory, probes=None)
        aot = {"aot": True, "factory": factory} if mode == "build-aot" else {}
        header = ik.serving.save_serving_bundle(path, served, report, **aot)
        print(json.dumps({"benchmarked": len(rec.benchmarked), "buckets": header["serving"]["buckets"], "counters": counters()}))
    elif mode in ("load", "load-aot"):
        aot = mode == "load-aot"
        # Every 20 s, every thread's stack to stderr, which the test shows: a load that hangs says where.
        faulthandler.dump_traceback_later(20, repeat=True)
        bundle = ik.serving.load_serving_bundle(path, None if aot else model(), factory=factory, on_cold="warn", on="record")
        errors, refused = {}, None
        with bundle.guard as served, torch.no_grad():
            answer = served(factory(56))
            # What the load and a warmed call imported (an unwarmed call below starts torch's profiler, whose
            # prepare_trace imports torch._inductor: ``hasattr(torch, "_inductor")``, profiler.py in 2.13).
            heavy = ("torch._inductor", "torch._dynamo", "triton")
            imported = sorted(m for m in heavy if m in sys.modules)
            if aot:  # a length inside the exported range that was never warmed: the package serves it too
                errors = {n: float((served(factory(n)) - model()(factory(n))).abs().max()) for n in (52,)}
                errors[56] = float((answer - model()(factory(56))).abs().max())
                try:
                    served(factory(40))
                    refused = ""
                except ik.errors.InvalidKnobValue as err:
                    refused = str(err)
        out = {
            "imported": imported,
            "proof": bundle.proof.to_dict(),
            "table": bundle.proof.table(),
            "counters": counters(),
            "buckets": list(bundle.buckets or ()),
            "guard_calls": bundle.guard.calls,
            "guard_stalls": [s.to_dict() for s in bundle.guard.stalls],
            "replays": getattr(bundle.served, "replays", None),
            "errors": errors,
            "refused": refused if aot else None,
        }
        print(json.dumps(out))
    elif mode == "build-small":
        compiled = ik.compile(Small(), dynamic=False)
        with torch.no_grad():
            report = ik.serving.warmup(compiled, shapes=[8], factory=small_factory, probes=None)
        built = ik.serving.save_serving_bundle(path, compiled, report)["setup"]
        print(json.dumps({"knobs": built["knobs"], "sources": built["sources"]}))
    elif mode == "load-small":
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ik.serving.ColdStartWarning)  # the C++ of a CPU kernel is built again
                ik.serving.load_serving_bundle(path, Small(), factory=small_factory, on_cold="warn")
            print(json.dumps({"refused": None}))
        except ik.serving.CompileCacheRefused as err:
            print(json.dumps({"refused": str(err)}))
    else:
        try:
            ik.serving.load_serving_bundle(path, model(offset=2.0), factory=factory)
        except ik.serving.ColdStartCompiled as err:
            print(json.dumps({"raised": str(err), "proof": err.proof.to_dict(), "counters": counters()}))


if __name__ == "__main__":
    device = sys.argv[3] if len(sys.argv) > 3 else "cpu"
    # As a strict server runs: any warning of inductor_knobs (a knob not applied, a cold load) is an error.
    warnings.simplefilter("error", ik.errors.KnobsWarning)
    main(sys.argv[1], sys.argv[2])
