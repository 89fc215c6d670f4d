"""User workloads for test_ablate (the documented ``pkg.module:factory`` protocol)."""

import torch


def tiny(device, quick):
    """Returns a plain (model, inputs) pair: the simplest form of the protocol."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU()).to(device)
    return model, [(torch.randn(4, 16, device=device),)]


def graph_break(device, quick):
    """A model Dynamo cannot capture whole: fullgraph=True arms crash on it."""

    def model(x):
        torch._dynamo.graph_break()
        return x + 1

    return model, [(torch.randn(4, device=device),)]


NOT_CALLABLE = 3
