#!/usr/bin/env python3
"""torchvision's classification models through the ONNX importer: each exported by
torch.onnx.export (training mode, opset 13, 224 x 224, the batch a dynamic axis; stochastic
depth off, since its Bernoulli does not export), imported,
trained one CPU step at batch 1, and searched for its largest batch under a budget. With
--segmentation, torchvision's segmentation models instead (their "out" map, per-pixel loss, no
auxiliary head, the plan and the step at batch 2: a pooling branch's batch norm needs two values
per channel; tools/bench/results/onnx/torchvision_segmentation.csv). Prints a table and appends
one CSV row per model to --csv (tools/bench/results/onnx/torchvision.csv):
  model, params (PyTorch's trainable count), onnx_nodes, status (imports | the importer's error,
  shortened), remat_nodes (the training graph's planned nodes), remat_params (the trained
  step's weights), step_s (the wall time of `train --batch 1 --steps 1`: the file read, the plan
  and one CPU step), maxbatch_keep and maxbatch_checkmate (under --budget,
  FLOPs costs; checkmate's with its upper bound), import_s (loading and translating the file),
  and the provenance columns revision, date, machine, load.
Usage: onnx_zoo_bench.py --bin build/tools [--segmentation] [--models a,b] [--budget 16GB]
       [--time-limit 10] [--csv FILE] [--machine TEXT] [--load TEXT]"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

import torch
import torchvision

from result_rows import append_row, provenance

FIELDS = ["model", "params", "onnx_nodes", "status", "remat_nodes", "remat_params", "step_s",
          "maxbatch_keep", "maxbatch_checkmate", "import_s", "revision", "date", "machine", "load"]


class SegmentationOut(torch.nn.Module):
    """A torchvision segmentation model's "out" map alone (it returns a dict)."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x):
        return self.net(x)["out"]


def build(name, segmentation):
    if not segmentation:
        kwargs = {"aux_logits": False, "init_weights": True} if name in ("googlenet", "inception_v3") else {}
        return torchvision.models.get_model(name, **kwargs)
    try:
        net = torchvision.models.get_model(name, weights_backbone=None, aux_loss=False)
    except TypeError:  # a model without an auxiliary head
        net = torchvision.models.get_model(name, weights_backbone=None)
    return SegmentationOut(net)


def export(name, path, segmentation):
    model = build(name, segmentation).train()
    for m in model.modules():  # EfficientNet, ConvNeXt, Swin: trained without stochastic depth
        if isinstance(m, torchvision.ops.StochasticDepth):
            m.p = 0.0
    size = 299 if name == "inception_v3" else 224
    params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    torch.onnx.export(model, torch.randn(2, 3, size, size), path, opset_version=13,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                      input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})
    import onnx
    return params, len(onnx.load(path, load_external_data=False).graph.node)


def run(tools, *args, timeout=1800):
    t0 = time.time()
    r = subprocess.run([os.path.join(tools, args[0]), *args[1:]], capture_output=True, text=True,
                       timeout=timeout)
    return r, time.time() - t0


def short_error(text):
    line = next((l for l in text.splitlines() if l.startswith("error:")), text.strip()[-200:])
    m = re.search(r"\((\w+), opset \d+\): (.*)", line)
    if m:
        reason = m.group(2).split(" (supported:")[0]
        return f"{m.group(1)}: {reason}"[:120]
    return line.replace("error: ", "")[:120]


def measure(tools, name, path, budget, limit, step_batch):
    row = {"status": "imports"}
    r, row["import_s"] = run(tools, "plan", "--onnx", path, "--batch", str(step_batch), "--budget", "1TB",
                             "--strategies", "all-keep")
    row["import_s"] = f"{row['import_s']:.2f}"
    if r.returncode != 0:
        row["status"] = short_error(r.stderr)
        return row
    row["remat_nodes"] = re.search(r": (\d+) nodes", r.stdout).group(1)
    r, secs = run(tools, "train", "--onnx", path, "--batch", str(step_batch), "--steps", "1",
                  "--log-every", "1")
    if r.returncode != 0:
        row["status"] = "step: " + short_error(r.stderr)
        return row
    row["remat_params"] = re.search(r"\((\d+) weights\)", r.stdout).group(1)
    row["step_s"] = f"{secs:.1f}"
    r, _ = run(tools, "maxbatch", "--onnx", path, "--batch", str(step_batch), "--budget", budget, "--strategies",
               "all-keep,checkmate", "--time-limit", str(limit))
    if r.returncode != 0:
        row["status"] = "maxbatch: " + short_error(r.stderr)
        return row
    for line in r.stdout.splitlines():
        m = re.match(r"(all-keep|checkmate)\s+(\d+)\s+(\d+)", line)
        if m:
            cell = m.group(2) + ("" if m.group(2) == m.group(3) else f" (<= {m.group(3)})")
            row["maxbatch_keep" if m.group(1) == "all-keep" else "maxbatch_checkmate"] = cell
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--segmentation", action="store_true")
    ap.add_argument("--models", default="")
    ap.add_argument("--budget", default="16GB")
    ap.add_argument("--time-limit", type=float, default=10)
    ap.add_argument("--csv", default="")
    ap.add_argument("--machine", default="not recorded")
    ap.add_argument("--load", default="not recorded")
    a = ap.parse_args()
    module = torchvision.models.segmentation if a.segmentation else torchvision.models
    names = a.models.split(",") if a.models else torchvision.models.list_models(module=module)
    print(f"{'model':22} {'params':>11} {'onnx':>5} {'remat':>5} {'keep':>5} {'checkmate':>12}  status")
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            row = {k: "" for k in FIELDS}
            row.update(model=name, **provenance(a.machine, a.load, a.bin))
            path = os.path.join(tmp, name + ".onnx")
            try:
                params, nodes = export(name, path, a.segmentation)
                row.update(params=str(params), onnx_nodes=str(nodes))
                row.update(measure(a.bin, name, path, a.budget, a.time_limit, 2 if a.segmentation else 1))
            except Exception as e:  # an export PyTorch refuses, or a tool that ran out of time
                row["status"] = "export: " + str(e).splitlines()[0][:100]
            finally:
                if os.path.exists(path):
                    os.remove(path)
            print(f"{name:22} {row['params']:>11} {row['onnx_nodes']:>5} {row['remat_nodes']:>5} "
                  f"{row['maxbatch_keep']:>5} {row['maxbatch_checkmate']:>12}  {row['status']}", flush=True)
            if a.csv:
                append_row(a.csv, FIELDS, row)


if __name__ == "__main__":
    sys.exit(main())
