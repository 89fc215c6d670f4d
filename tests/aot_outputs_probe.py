"""Imported by ``test_serving_bundle_aot.py`` as an AOT bundle's output module: its import is what the test observes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch.utils import _pytree


@dataclass
class Pair:
    """An output class registered with torch's pytree at import, as transformers registers its ``ModelOutput`` s."""

    first: torch.Tensor
    second: torch.Tensor


_pytree.register_pytree_node(
    Pair, lambda p: ([p.first, p.second], None), lambda xs, _: Pair(*xs), serialized_type_name="aot_outputs_probe.Pair"
)


class Named(NamedTuple):
    """A namedtuple output: torch's pytree records ``collections.namedtuple`` as its type and the class as its context."""

    first: torch.Tensor
    second: torch.Tensor
