"""Models that executor/export_model.py must refuse, each with one line that names the problem, and
one it takes (list_outputs); see tests/python/export_test.py. Input: tokens, vocab 96."""
import torch
from torch import nn


class NeedsMask(nn.Module):
    def forward(self, hidden, mask):  # a second required argument the previous layer does not give
        return hidden * mask


class ReturnsNone(nn.Module):
    def forward(self, hidden):
        hidden.mul(2)


class BatchOfTwo(nn.Module):
    def forward(self, hidden):
        if hidden.shape[0] == 2:  # a Python branch on the batch size: the trace keeps one side
            return hidden * 2
        return hidden


def extra_argument():
    return nn.Sequential(nn.Embedding(96, 8), NeedsMask())


def returns_none():
    return nn.Sequential(nn.Embedding(96, 8), ReturnsNone())


def not_a_module():
    return [nn.Embedding(96, 8), nn.Linear(8, 96)]


def batch_size_baked_in():
    return nn.Sequential(nn.Embedding(96, 8), nn.Linear(8, 8), BatchOfTwo(), nn.Linear(8, 96))


class Split(nn.Module):
    def forward(self, hidden):
        return [hidden, hidden * 2]  # a list: exported as a tuple


class Join(nn.Module):
    def forward(self, a, b):
        return a + b


def list_outputs():
    """Exports (a control): a layer that returns a list of tensors."""
    return nn.Sequential(nn.Embedding(96, 8), Split(), Join(), nn.Linear(8, 96))
