#!/usr/bin/env python3
"""The zoo's YAML against torchvision: each config that torchvision also ships is built as a
PyTorch module by tools/bench/bench_pytorch_model.py (the benchmark's translation of the YAML)
and compared with torchvision's network, as an independent check of the YAML. Compared: the
multiset of convolution and linear weight shapes (every layer's kernel, channels and width), and
the trainable parameter count, equal after the documented differences between Keras (which the
configs follow) and torchvision: Keras's ResNet v1 convolutions have biases, torchvision's none;
Keras's InceptionV3 batch norms have no learned scale (scale=False), torchvision's do. Each YAML
module also runs a forward pass at the config's input size and gives [1, classes]. And for every
config whose header states "Parameters: N trainable", the PyTorch module has N trainable
parameters (the benchmark trains the network the header describes; NASNet exercises the
two-input repeat blocks of the translation).
Usage: test_zoo_torchvision.py (exit 0 on success, 1 with the differences listed)."""
import collections
import glob
import os
import re
import sys

import torch
import torch.nn as nn
import torchvision
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tools", "bench"))
import bench_pytorch_model as bpm  # noqa: E402


def weight_shapes(model):
    """Counter of the weight shapes of every Conv2d and Linear."""
    out = collections.Counter()
    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            out[tuple(m.weight.shape)] += 1
    return out


def trainable(model):
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def conv_biases(model):
    return sum(m.bias.numel() for m in model.modules() if isinstance(m, nn.Conv2d) and m.bias is not None)


def scaleless_bn_channels(model):
    return sum(m.num_features for m in model.modules() if isinstance(m, bpm.BatchNormNoScale))


# config -> (torchvision network, what to add to the YAML module's count to get torchvision's)
CASES = {
    "densenet121": (lambda: torchvision.models.densenet121(), lambda m: 0),
    "densenet169": (lambda: torchvision.models.densenet169(), lambda m: 0),
    "densenet201": (lambda: torchvision.models.densenet201(), lambda m: 0),
    "mobilenet_v2": (lambda: torchvision.models.mobilenet_v2(), lambda m: 0),
    "resnet50": (lambda: torchvision.models.resnet50(), lambda m: -conv_biases(m)),
    "resnet101": (lambda: torchvision.models.resnet101(), lambda m: -conv_biases(m)),
    "resnet152": (lambda: torchvision.models.resnet152(), lambda m: -conv_biases(m)),
    "inception_v3": (lambda: torchvision.models.inception_v3(aux_logits=False, init_weights=False),
                     scaleless_bn_channels),
}


def header_counts(failures):
    """Every config's stated trainable count against the module the benchmark builds."""
    for path in sorted(glob.glob(os.path.join(ROOT, "configs", "*.yaml"))):
        text = open(path).read()
        header = " ".join(l[1:].strip() for l in text.splitlines() if l.startswith("#"))
        m = re.search(r"Parameters: ([\d,]+) trainable", header)
        if not m:
            continue
        want = int(m.group(1).replace(",", ""))
        got = trainable(bpm.build_segments(yaml.safe_load(text), path))
        if got != want:
            failures.append(f"{os.path.basename(path)}: header says {want:,} trainable, module {got:,}")


def main():
    failures = []
    torch.manual_seed(0)
    header_counts(failures)
    for name, (make_tv, adjust) in CASES.items():
        path = os.path.join(ROOT, "configs", name + ".yaml")
        cfg = yaml.safe_load(open(path))
        ours = bpm.build_segments(cfg, path).eval()
        theirs = make_tv().eval()
        a, b = weight_shapes(ours), weight_shapes(theirs)
        if a != b:
            failures.append(f"{name}: weight shapes differ: only in the YAML {dict(a - b)}, "
                            f"only in torchvision {dict(b - a)}")
        want = trainable(theirs)
        got = trainable(ours) + adjust(ours)
        if got != want:
            failures.append(f"{name}: {trainable(ours):,} trainable, adjusted {got:,}, torchvision {want:,}")
        with torch.no_grad():
            y = ours(torch.zeros(1, *cfg["input"]))
        if tuple(y.shape) != (1, cfg["classes"]):
            failures.append(f"{name}: output {tuple(y.shape)}")
        print(f"{name}: {trainable(ours):,} trainable (torchvision {want:,}), "
              f"{sum(a.values())} conv / linear weights", flush=True)
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
