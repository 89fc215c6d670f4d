"""Serving: the warm-up, the guards, CUDA graphs per bucket, buckets, compile caches and serving bundles.

>>> import inductor_knobs as ik
>>> report = ik.serving.warmup(model, example_inputs, buckets=[1, 8, 64])  # doctest: +SKIP
>>> with ik.serving.no_stalls(on="raise"):                              # doctest: +SKIP
...     serve()

Every public name loads from its module on first use (PEP 562), so importing this package imports no torch.
"""

import importlib

TYPE_CHECKING = False

#: Public name -> the module of this package that defines it.
_PUBLIC = {
    "no_autotune": "autotune_guard",
    "bucket_for": "buckets",
    "pad_to_bucket": "buckets",
    "suggest_buckets": "buckets",
    "ServingBundle": "bundle",
    "load_serving_bundle": "bundle",
    "save_serving_bundle": "bundle",
    "ColdStartProof": "cold_start",
    "load_compile_cache": "compile_cache",
    "save_compile_cache": "compile_cache",
    "AutotuneDuringServing": "errors",
    "AutotuneDuringServingWarning": "errors",
    "BundleInputRefused": "errors",
    "ColdStartCompiled": "errors",
    "ColdStartWarning": "errors",
    "CompileCacheRefused": "errors",
    "GraphCallRefused": "errors",
    "GraphCaptureFailed": "errors",
    "StallDuringServing": "errors",
    "StallWarning": "errors",
    "CapturedGraphs": "graphs",
    "capture_cuda_graphs": "graphs",
    "Stall": "stall_report",
    "StallReport": "stall_report",
    "no_stalls": "stalls",
    "warmup": "warm_up",
    "WarmupReport": "warm_up_report",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> object:
    module = _PUBLIC.get(name)
    if module is None:
        try:  # a module of this package, e.g. inductor_knobs.serving.errors
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as err:
            if err.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_PUBLIC])


if TYPE_CHECKING:  # for type checkers and IDEs (a test keeps this equal to _PUBLIC)
    from .autotune_guard import no_autotune as no_autotune
    from .buckets import bucket_for as bucket_for
    from .buckets import pad_to_bucket as pad_to_bucket
    from .buckets import suggest_buckets as suggest_buckets
    from .bundle import ServingBundle as ServingBundle
    from .bundle import load_serving_bundle as load_serving_bundle
    from .bundle import save_serving_bundle as save_serving_bundle
    from .cold_start import ColdStartProof as ColdStartProof
    from .compile_cache import load_compile_cache as load_compile_cache
    from .compile_cache import save_compile_cache as save_compile_cache
    from .errors import AutotuneDuringServing as AutotuneDuringServing
    from .errors import AutotuneDuringServingWarning as AutotuneDuringServingWarning
    from .errors import BundleInputRefused as BundleInputRefused
    from .errors import ColdStartCompiled as ColdStartCompiled
    from .errors import ColdStartWarning as ColdStartWarning
    from .errors import CompileCacheRefused as CompileCacheRefused
    from .errors import GraphCallRefused as GraphCallRefused
    from .errors import GraphCaptureFailed as GraphCaptureFailed
    from .errors import StallDuringServing as StallDuringServing
    from .errors import StallWarning as StallWarning
    from .graphs import CapturedGraphs as CapturedGraphs
    from .graphs import capture_cuda_graphs as capture_cuda_graphs
    from .stall_report import Stall as Stall
    from .stall_report import StallReport as StallReport
    from .stalls import no_stalls as no_stalls
    from .warm_up import warmup as warmup
    from .warm_up_report import WarmupReport as WarmupReport
