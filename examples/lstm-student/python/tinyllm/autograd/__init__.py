"""Reverse-mode automatic differentiation over numpy arrays."""

from tinyllm.autograd.tensor import Tensor

__all__ = ["Tensor"]
