"""Kernels written in tkpy, each a torch-facing function plus its tkpy kernel."""


def forward_only(name: str, *tensors) -> None:
    """Raise NotImplementedError where autograd would need a backward pass these kernels do not have: some input
    requires grad while grad mode is on (the output would otherwise carry no gradient, silently)."""
    import torch

    if torch.is_grad_enabled() and any(isinstance(x, torch.Tensor) and x.requires_grad for x in tensors):
        raise NotImplementedError(f"{name}: no backward pass (forward only); call it under torch.no_grad() or "
                                  "torch.inference_mode(), or on tensors that do not require grad")
