#!/usr/bin/env python3
"""Writes configs/onnx/small_resnet.onnx, the ONNX model the documentation's examples import: a
small residual CNN for 3 x 32 x 32 images and 10 classes (conv + batch norm + relu, two residual
blocks, max pooling, global average pooling, a linear layer), exported by torch.onnx.export in
training mode with the batch as a dynamic axis, as a user would export their own module.
Usage: python3 configs/onnx/export_small_resnet.py"""
import os

import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(x + self.bn2(self.conv2(y)))


class SmallResNet(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU())
        self.block1 = Block(32)
        self.pool = nn.MaxPool2d(2)
        self.block2 = Block(32)
        self.fc = nn.Linear(32, classes)

    def forward(self, x):
        x = self.block2(self.pool(self.block1(self.stem(x))))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def main():
    torch.manual_seed(0)
    model = SmallResNet().train()
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "small_resnet.onnx")
    torch.onnx.export(model, torch.randn(2, 3, 32, 32), path, opset_version=13,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                      input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})
    print("wrote", path)


if __name__ == "__main__":
    main()
