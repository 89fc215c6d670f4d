"""Real models as workloads, built from configurations with random weights (nothing is downloaded).

``--workload hf:<name>`` (needs ``pip install 'transformers>=4.40'``, the ``[hf]`` extra) and
``--workload timm:<model>`` (needs ``pip install 'timm>=0.9'``, the ``[timm]`` extra).  Inference
only: eval mode, no autograd (the worker runs under ``torch.no_grad``), bf16 on CUDA and fp32 on
CPU.  Every worker seeds torch before building, so every process of every arm gets the same
weights; the model is created on its device (random initialisation on a GPU takes a fraction of
the seconds it takes on the CPU).

Factories return a plain ``(model, [args tuple])`` pair (the workload protocol of
:mod:`.workloads`), so this module never imports :mod:`.workloads`, which imports it.

Hugging Face models (:data:`HF_MODELS`), each a ``*Model`` without a task head whose forward returns
``last_hidden_state``:

- ``hf:bert-base``: ``BertModel(BertConfig())``, bert-base's shape (12 layers, hidden 768);
  token ids 8×128 on CUDA (2×128 on CPU; quick: 2×64, CPU 1×32).
- ``hf:tinyllama-2layer``: ``LlamaModel`` with TinyLlama-1.1B's layer shape (hidden 2048,
  intermediate 5632, 32 heads, 4 KV heads) and 2 layers; 1×512 tokens on CUDA (1×128 on CPU;
  quick: 1×256, CPU 1×32).

timm: any name ``timm.list_models()`` knows (``timm:resnet50``, ``timm:vit_small_patch16_224``),
``timm.create_model(name, pretrained=False)``; images of the model's default input size, batch 16
on CUDA (2 on CPU; quick: 4, CPU 1).

:func:`check` runs in the parent before any arm: a missing extra and an unknown name are errors
that name what to install or the closest names.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import sys
from collections.abc import Callable
from typing import Any

from ..errors import InvalidKnobValue, UnknownKnob

#: Prefix -> (module to import, extra that installs it, the requirement the extra holds in pyproject.toml).
EXTRAS = {"hf": ("transformers", "hf", "transformers>=4.40"), "timm": ("timm", "timm", "timm>=0.9")}


def install_hint(prefix: str) -> str:
    """The exact command that installs what ``prefix`` needs.

    Args:
        prefix (str): ``hf`` or ``timm``.

    Returns:
        str: ``pip install '…' (the [extra] extra: pip install 'inductor-knobs[extra]')``.
    """
    _, extra, requirement = EXTRAS[prefix]
    return f"pip install '{requirement}' (the [{extra}] extra: pip install 'inductor-knobs[{extra}]')"


def _dtype(device: str) -> Any:
    import torch

    return torch.bfloat16 if device.startswith("cuda") else torch.float32


def _batch(device: str, quick: bool, cuda: tuple[int, int], cpu: tuple[int, int]) -> int:
    full, small = cuda if device.startswith("cuda") else cpu
    return small if quick else full


def _last_hidden(model: Any) -> Any:
    """``model`` (a transformers ``*Model``) wrapped so that a call returns its ``last_hidden_state``
    tensor: the worker compares tensors with eager, and would skip a ``ModelOutput``."""
    import torch

    class LastHidden(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            return self.inner(input_ids=input_ids)[0]  # type: ignore[no-any-return]

    return LastHidden(model)


def _token_workload(make: Callable[[], Any], vocab: int, batch: int, seq: int, device: str) -> Any:
    """``make()`` (a transformers ``*Model``) built on ``device``, with ``batch`` x ``seq`` token ids."""
    import torch

    with torch.device(device):
        model = make()
    model = _last_hidden(model).to(dtype=_dtype(device)).eval()
    ids = torch.randint(0, vocab, (batch, seq), device=device)
    return model, [(ids,)]


def bert_base(device: str, quick: bool) -> Any:
    """``hf:bert-base``: ``BertModel(BertConfig())`` with random weights and token ids.

    Args:
        device (str): ``cuda`` or ``cpu``.
        quick (bool): the smaller inputs.

    Returns:
        Any: ``(model, [(input_ids,)])``.
    """
    from transformers import BertConfig, BertModel

    config = BertConfig()  # bert-base-uncased's shape: 12 layers, hidden 768, 12 heads
    batch = _batch(device, quick, cuda=(8, 2), cpu=(2, 1))
    seq = 64 if quick else 128
    seq = 32 if quick and not device.startswith("cuda") else seq
    return _token_workload(lambda: BertModel(config, add_pooling_layer=False), config.vocab_size, batch, seq, device)


def tinyllama_2layer(device: str, quick: bool) -> Any:
    """``hf:tinyllama-2layer``: a ``LlamaModel`` of TinyLlama-1.1B's layer shape, 2 layers, random weights.

    Args:
        device (str): ``cuda`` or ``cpu``.
        quick (bool): the smaller inputs.

    Returns:
        Any: ``(model, [(input_ids,)])``.
    """
    from transformers import LlamaConfig, LlamaModel

    config = LlamaConfig(
        hidden_size=2048,
        intermediate_size=5632,
        num_hidden_layers=2,
        num_attention_heads=32,
        num_key_value_heads=4,
        vocab_size=32000,
        max_position_embeddings=2048,
        use_cache=False,  # a KV cache object is state the comparison with eager would not see
    )
    on_gpu = device.startswith("cuda")
    seq = (256 if quick else 512) if on_gpu else (32 if quick else 128)
    return _token_workload(lambda: LlamaModel(config), config.vocab_size, 1, seq, device)


#: ``hf:<name>`` -> (description, factory(device, quick)).
HF_MODELS: dict[str, tuple[str, Callable[[str, bool], Any]]] = {
    "bert-base": ("BertModel(BertConfig()): bert-base shape, random weights", bert_base),
    "tinyllama-2layer": ("LlamaModel, TinyLlama-1.1B layer shape, 2 layers, random weights", tinyllama_2layer),
}


def timm_model(name: str) -> Callable[[str, bool], Any]:
    """The factory for ``timm:<name>`` (checked by :func:`check` first).

    Args:
        name (str): the timm model's name.

    Returns:
        Callable[[str, bool], Any]: ``factory(device, quick)`` returning ``(model, [(images,)])``.
    """

    def factory(device: str, quick: bool) -> Any:
        import timm
        import torch

        with torch.device(device):
            model = timm.create_model(name, pretrained=False)
        model = model.to(dtype=_dtype(device)).eval()
        size = tuple(getattr(model, "pretrained_cfg", {}).get("input_size", (3, 224, 224)))
        batch = _batch(device, quick, cuda=(16, 4), cpu=(2, 1))
        images = torch.randn(batch, *size, device=device, dtype=_dtype(device))
        return model, [(images,)]

    return factory


def _installed(module: str) -> bool:
    # A None entry in sys.modules is how Python marks a module as not importable (and how tests
    # simulate a missing extra); find_spec would raise ValueError on it.
    if module in sys.modules:
        return sys.modules[module] is not None
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _need(prefix: str, workload: str, load: bool) -> Any:
    """Raise unless the extra behind ``prefix`` is installed; with ``load``, import and return it."""
    module = EXTRAS[prefix][0]
    message = (
        f"--workload {workload!r} needs {module}, which is not installed: {install_hint(prefix)}; or choose a built-in workload"
    )
    if not _installed(module):
        raise InvalidKnobValue(message)
    if not load:
        return None
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise InvalidKnobValue(f"{message}; importing it failed: {err}") from err


def _unknown(workload: str, name: str, known: list[str], what: str, lister: str) -> UnknownKnob:
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    shown = ", ".join(known) if len(known) <= 8 else f"{len(known)} names, see {lister}"
    return UnknownKnob(f"--workload {workload!r}: unknown {what} {name!r}{hint} Known: {shown}")


def is_model(workload: str) -> bool:
    """Whether ``workload`` names a real model.

    Args:
        workload (str): ``--workload``.

    Returns:
        bool: it starts with ``hf:`` or ``timm:``.
    """
    prefix, sep, _ = workload.partition(":")
    return bool(sep) and prefix in EXTRAS


def check(workload: str) -> Callable[[str, bool], Any]:
    """Validate ``hf:<name>`` / ``timm:<name>`` in the parent and return its factory.

    Args:
        workload (str): ``--workload``.

    Returns:
        Callable[[str, bool], Any]: ``factory(device, quick)``.

    Raises:
        InvalidKnobValue: the extra that provides it is not installed (the message names the
            ``pip install`` to run).
        UnknownKnob: the model name is unknown (the message lists the closest names).
    """
    prefix, _, name = workload.partition(":")
    if prefix == "hf":
        if name not in HF_MODELS:  # checked before the import: no need to load transformers to say so
            raise _unknown(workload, name, sorted(HF_MODELS), "Hugging Face model", "inductor_knobs.ablation.models")
        _need("hf", workload, load=False)  # the workers import it; the parent need not pay for that
        return HF_MODELS[name][1]
    timm = _need("timm", workload, load=True)
    if not timm.is_model(name):
        raise _unknown(workload, name, sorted(timm.list_models()), "timm model", "timm.list_models()")
    return timm_model(name)
