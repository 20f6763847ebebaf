"""Layers and their building blocks: Module, Parameter, Dropout and the initialisers."""

from tinyllm.nn.dropout import Dropout, dropout
from tinyllm.nn.init import orthogonal, xavier_uniform
from tinyllm.nn.module import Module, Parameter

__all__ = ["Dropout", "Module", "dropout", "Parameter", "orthogonal", "xavier_uniform"]
