#!/usr/bin/env python3
"""torchvision's ResNet-18, unmodified, as the layers of a pipeline: its children in order, as
torchgpipe's flatten_sequential takes them, with the flatten its forward does between the pooling
and the classifier. Random weights (weights=None): nothing is downloaded.

  python3 models/examples/resnet18.py resnet18.pt [--classes 10]

writes the scripted nn.Sequential; a gpipe-model/1 file names it as "torchscript" (see
models/examples/resnet18.json). Its ReLUs work in place (inplace=True), as torchvision builds them.
"""
import argparse

import torch
import torchvision


def build(classes: int = 10) -> torch.nn.Sequential:
    net = torchvision.models.resnet18(weights=None, num_classes=classes)
    layers = []
    for name, child in net.named_children():
        if name == "fc":
            layers.append(torch.nn.Flatten(1))  # what ResNet.forward does before fc
        layers.append(child)
    return torch.nn.Sequential(*layers)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="where to write the scripted model (.pt)")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0, help="seed of the random initial weights")
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    torch.jit.script(build(args.classes)).save(args.out)


if __name__ == "__main__":
    main()
