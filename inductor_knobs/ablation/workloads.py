"""What an ablation compiles: built-in workloads, and the protocol for your own.

A workload factory is ``factory(device: str, quick: bool) -> Workload``.  Your own is named
``--workload pkg.module:factory`` and imported as ``python -m`` would find it: from the current
directory first, then ``sys.path`` (the runner passes the directory to the workers through
``PYTHONPATH``).  It may also return a plain ``(model, inputs)`` pair, where
``model`` is an ``nn.Module`` or callable and ``inputs`` a list of argument tuples (one call each;
an iteration calls the model once per tuple).  Inputs must be created on ``device``.

Built-ins (bf16 on CUDA, fp32 on CPU, as the issue asks):

- ``gemm_mlp`` (the default): four ``Linear(K -> N, bias=False)`` layers, K = N = 4096 on
  M = 4096 tokens on CUDA (2048 with ``--quick``), 512 on 256 tokens on CPU (256 on 128 quick).
  GEMM-bound on purpose: no activations, so the time measured is GEMM time, the four GEMMs share
  one shape (one autotune per arm), and on CPU no C++ pointwise kernel has to be compiled.
- ``reference_mlp``: ``Linear(3420 -> 1280, bias=False)`` at seq_len 560, 1024, 2048, the first
  dimension marked dynamic: one GEMM autotuned at three token counts.
- ``transformer_block``: pre-norm attention (``scaled_dot_product_attention``) + GELU MLP.
- ``conv_net``: three conv/BN/ReLU stages, pooling and a linear head.
- ``small_mlp``: ``SimpleMLP(1024, 1024, 1024)`` on a 256x1024 batch, the two-layer MLP of the
  usual GEMM-autotuning tutorials.

Real models, random weights, no downloads (:mod:`.models`): ``hf:bert-base``,
``hf:tinyllama-2layer`` (``pip install 'transformers>=4.40'``) and ``timm:<any timm model>``
such as ``timm:resnet50`` or ``timm:vit_small_patch16_224`` (``pip install 'timm>=0.9'``).  Their
factories return plain ``(model, inputs)`` pairs, so :mod:`.models` never imports this module.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..errors import UnknownKnob
from ..ext import unknown_message as _unknown_message
from . import models


@dataclass
class Workload:
    """A model and the calls one iteration makes.

    Attributes:
        model: an ``nn.Module`` or a callable.
        inputs: one tuple of arguments per call.
        dynamic_dims: ``(input index, dim)`` pairs to ``torch._dynamo.mark_dynamic`` before each call.
    """

    model: Any
    inputs: list[tuple[Any, ...]]
    dynamic_dims: list[tuple[int, int]] = field(default_factory=list)


def _dtype(device: str) -> Any:
    import torch

    return torch.bfloat16 if device.startswith("cuda") else torch.float32


def gemm_mlp(device: str, quick: bool) -> Workload:
    import torch

    dtype = _dtype(device)
    if device.startswith("cuda"):
        tokens, width = (2048, 2048) if quick else (4096, 4096)
    else:
        tokens, width = (128, 256) if quick else (256, 512)
    layers = [torch.nn.Linear(width, width, bias=False) for _ in range(4)]
    model = torch.nn.Sequential(*layers).to(device=device, dtype=dtype).eval()
    # Scaled so that activations stay near unit size through the four layers (bf16 keeps its
    # relative precision, and the comparison with eager has a meaningful scale).
    with torch.no_grad():
        for layer in layers:
            layer.weight.mul_(width**-0.5 / layer.weight.std())
    return Workload(model, [(torch.randn(tokens, width, device=device, dtype=dtype),)])


def reference_mlp(device: str, quick: bool) -> Workload:
    import torch

    dtype = _dtype(device)
    model = torch.nn.Linear(3420, 1280, bias=False, device=device, dtype=dtype)
    lens = (56, 102, 204) if quick and device == "cpu" else (560, 1024, 2048)
    inputs = [(torch.randn(n, 3420, device=device, dtype=dtype),) for n in lens]
    return Workload(model, inputs, dynamic_dims=[(0, 0)])


def transformer_block(device: str, quick: bool) -> Workload:
    import torch

    class Block(torch.nn.Module):
        def __init__(self, dim: int, heads: int) -> None:
            super().__init__()
            self.heads = heads
            self.norm1, self.norm2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
            self.qkv, self.proj = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)
            self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, s, d = x.shape
            q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, d // self.heads).unbind(2)
            attn = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
            x = x + self.proj(attn.transpose(1, 2).reshape(b, s, d))
            return x + self.mlp(self.norm2(x))

    on_gpu = device.startswith("cuda")
    dim, heads, batch, seq = (1024, 16, 8, 512) if on_gpu else (128, 4, 2, 64) if quick else (256, 8, 2, 128)
    dtype = _dtype(device)
    model = Block(dim, heads).to(device=device, dtype=dtype)
    return Workload(model, [(torch.randn(batch, seq, dim, device=device, dtype=dtype),)])


def conv_net(device: str, quick: bool) -> Workload:
    import torch

    def stage(cin: int, cout: int) -> list[torch.nn.Module]:
        return [torch.nn.Conv2d(cin, cout, 3, padding=1), torch.nn.BatchNorm2d(cout), torch.nn.ReLU()]

    dtype = _dtype(device)
    model = (
        torch.nn.Sequential(
            *stage(3, 32),
            torch.nn.MaxPool2d(2),
            *stage(32, 64),
            torch.nn.MaxPool2d(2),
            *stage(64, 128),
            torch.nn.AdaptiveAvgPool2d(1),
            torch.nn.Flatten(),
            torch.nn.Linear(128, 10),
        )
        .to(device=device, dtype=dtype)
        .eval()
    )
    batch, size = (32, 128) if device.startswith("cuda") else (2, 32) if quick else (4, 64)
    return Workload(model, [(torch.randn(batch, 3, size, size, device=device, dtype=dtype),)])


def small_mlp(device: str, quick: bool) -> Workload:
    import torch

    dtype = _dtype(device)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024))
    model = model.to(device=device, dtype=dtype)
    return Workload(model, [(torch.randn(256, 1024, device=device, dtype=dtype),)])


BUILTIN: dict[str, Callable[[str, bool], Workload]] = {
    "gemm_mlp": gemm_mlp,
    "reference_mlp": reference_mlp,
    "transformer_block": transformer_block,
    "conv_net": conv_net,
    "small_mlp": small_mlp,
}


@contextlib.contextmanager
def _cwd_on_path() -> Iterator[None]:
    # The console script's sys.path[0] is its bin directory, not the current one, so
    # ``--workload mymodels:factory`` next to the user would not import.  Put the directory first for
    # the import only: the command may run inside a longer-lived process (tests, notebooks).
    cwd = os.getcwd()
    if cwd in sys.path or "" in sys.path:
        yield
        return
    sys.path.insert(0, cwd)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(cwd)


def resolve(name: str) -> Callable[[str, bool], Any]:
    """The factory for a built-in name, a real model (``hf:…``, ``timm:…``, see :mod:`.models`) or
    ``pkg.module:factory`` (importable from the current directory).

    Args:
        name (str): ``--workload``.

    Returns:
        Callable[[str, bool], Any]: ``factory(device, quick)``.

    Raises:
        UnknownKnob: not a built-in, not a known model and not an importable ``module:attribute``
            naming a callable.
        InvalidKnobValue: a real model whose extra (transformers, timm) is not installed.
    """
    if name in BUILTIN:
        return BUILTIN[name]
    if models.is_model(name):
        return models.check(name)
    module_name, sep, attr = name.partition(":")
    if not sep or not module_name or not attr:
        raise UnknownKnob(_unknown_message("workload (a built-in, or pkg.module:factory)", name, BUILTIN))
    try:
        with _cwd_on_path():
            module = importlib.import_module(module_name)
        factory = getattr(module, attr)
    except (ImportError, AttributeError) as err:
        raise UnknownKnob(f"unknown workload {name!r}: {err}") from err
    if not callable(factory):
        raise UnknownKnob(f"workload {name!r} is a {type(factory).__name__}, not a factory(device, quick)")
    return factory  # type: ignore[no-any-return]


def build(name: str, device: str, quick: bool) -> Workload:
    """Call the factory and normalise a ``(model, inputs)`` pair into a :class:`Workload`.

    Args:
        name (str): ``--workload``.
        device (str): ``cuda`` or ``cpu``.
        quick (bool): the smaller inputs.

    Returns:
        Workload: the model and its calls.

    Raises:
        UnknownKnob, InvalidKnobValue: as :func:`resolve`.
    """
    made = resolve(name)(device, quick)
    if isinstance(made, Workload):
        return made
    model, inputs = made
    calls = [tuple(i) if isinstance(i, (tuple, list)) else (i,) for i in (inputs if isinstance(inputs, list) else [inputs])]
    return Workload(model, calls)
