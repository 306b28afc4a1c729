#!/usr/bin/env python3
"""`export` read back by PyTorch: small_cnn trained two steps by remat on a small CIFAR-10 file,
its checkpoint exported, and the weights loaded into the module tools/bench/bench_pytorch_model.py
builds from the same YAML (load_remat_safetensors). The file holds the parameters and running
statistics alone (no optimizer state, metadata {"format": "pt"}), every tensor equals the
checkpoint's, and PyTorch's loss on the batch of step 3 equals the loss remat reported for that
step (both FP32 on the CPU: within 1e-4 relative). A model of another YAML refuses the file.
An imported model's weights go back under their state_dict names and shapes: a small
torchvision ConvNeXt exported to ONNX, trained one step by remat and exported, loads into the
PyTorch module with load_state_dict(strict=True), its layer scales [C, 1, 1] as PyTorch has them
(remat trains them as conv2d weights [C, 1, 1, 1]), and a module with constants added and
multiplied, a learned bias [C, 1, 1], a learned gain and a learned offset loads with its
constants left out and its parameters trained; skipped in a build without the importer.
Usage: test_export.py TOOLS_DIR"""
import json
import os
import random
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F
import yaml

from checks import Checks

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tools", "bench"))
import bench_pytorch_model as bpm  # noqa: E402

CONFIG = os.path.join(ROOT, "configs", "small_cnn.yaml")
MEAN, STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)  # models/data.h
RECORDS, BATCH = 24, 8


def main():
    tools = sys.argv[1]
    check = Checks()

    def run(*args):
        r = subprocess.run([os.path.join(tools, args[0]), *args[1:]], capture_output=True, text=True)
        check(r.returncode == 0, f"{' '.join(args)}: exit {r.returncode}: {r.stderr[-2000:]}")
        return r

    with tempfile.TemporaryDirectory() as tmp:
        rng = random.Random(5)
        records = [bytes([rng.randrange(10)]) + bytes(rng.randrange(256) for _ in range(3072))
                   for _ in range(RECORDS)]
        with open(os.path.join(tmp, "test_batch.bin"), "wb") as f:
            f.write(b"".join(records))
        text = open(CONFIG).read()
        synthetic = "data: {source: synthetic, seed: 7}"
        check(synthetic in text, "configs/small_cnn.yaml changed: update this test")
        config = os.path.join(tmp, "small_cnn.yaml")
        with open(config, "w") as f:
            f.write(text.replace(synthetic, "data: {source: cifar10, path: ., split: test}"))
        ck, w, m = (os.path.join(tmp, n) for n in ("ck.safetensors", "w.safetensors", "m.jsonl"))
        common = ["--config", config, "--batch", str(BATCH)]
        run("train", *common, "--steps", "2", "--save", ck)
        run("train", *common, "--steps", "3", "--metrics", m)
        out = run("export", "--config", config, "--checkpoint", ck, "-o", w).stdout
        check("exported 16 tensors" in out, f"export said: {out}")
        if check.failures:
            return check.report()

        tensors, meta = bpm.read_safetensors(w)
        check(meta == {"format": "pt"}, f"metadata {meta}")
        check(not any(n.endswith(".momentum") for n in tensors), f"optimizer state: {list(tensors)}")
        saved, _ = bpm.read_safetensors(ck)
        for name, t in tensors.items():
            check(torch.equal(t, saved[name]), f"{name} differs from the checkpoint")

        cfg = yaml.safe_load(open(config))
        model = bpm.build_segments(cfg, config)
        loaded = bpm.load_remat_safetensors(model, w)
        check(sorted(loaded) == sorted(tensors), f"loaded {sorted(loaded)} of {sorted(tensors)}")
        # The batch of step 3 (0-based 2): records (2 * BATCH + i) mod RECORDS, normalised.
        idx = [(2 * BATCH + i) % RECORDS for i in range(BATCH)]
        x = torch.tensor([list(records[i][1:]) for i in idx], dtype=torch.float32).reshape(BATCH, 3, 32, 32)
        x = (x / 255 - torch.tensor(MEAN).reshape(1, 3, 1, 1)) / torch.tensor(STD).reshape(1, 3, 1, 1)
        y = torch.tensor([records[i][0] for i in idx])
        model.train()  # batch statistics, as remat's training step
        with torch.no_grad():
            loss = F.cross_entropy(model(x), y).item()
        remat_loss = json.loads(open(m).read().splitlines()[2])["loss"]
        check(abs(loss - remat_loss) <= 1e-4 * abs(remat_loss),
              f"PyTorch loss {loss} vs remat's step 3 loss {remat_loss}")
        print(f"step 3 loss: PyTorch {loss:.7f}, remat {remat_loss:.7f}")

        wrong = subprocess.run([os.path.join(tools, "export"), "--config",
                                os.path.join(ROOT, "configs", "gpt2_tiny.yaml"), "--checkpoint", ck,
                                "-o", os.path.join(tmp, "x.safetensors")], capture_output=True, text=True)
        check(wrong.returncode == 1 and "checkpoint of model 'small_cnn'" in wrong.stderr,
              f"export of another model's checkpoint: exit {wrong.returncode}: {wrong.stderr}")
        check(not os.path.exists(os.path.join(tmp, "x.safetensors")), "a file written after an error")
        usage = subprocess.run([os.path.join(tools, "export"), "--config", config],
                               capture_output=True, text=True)
        check(usage.returncode == 2 and "--checkpoint is required" in usage.stderr,
              f"export without --checkpoint: exit {usage.returncode}: {usage.stderr}")

        other = bpm.build_segments(yaml.safe_load(open(os.path.join(ROOT, "configs", "small_dag.yaml"))),
                                   "small_dag.yaml")
        try:
            bpm.load_remat_safetensors(other, w)
            check(False, "small_dag's module accepted small_cnn's weights")
        except bpm.ConfigError as e:
            check("no tensor for" in str(e) or "does not have" in str(e), f"message: {e}")
        export_imported(tools, check, tmp)
    return check.report()


def train_and_export(tools, check, tmp, model, name, overrides=()):
    """Exports `model` to ONNX, trains one step of it with remat, exports the checkpoint's weights
    (both with the config `overrides`): (the weights file's tensors, the checkpoint's), or None
    where this build cannot import."""
    path, ck, w = (os.path.join(tmp, name + s)
                   for s in (".onnx", "_ck.safetensors", "_w.safetensors"))
    torch.onnx.export(model, torch.randn(2, 3, 32, 32), path, opset_version=13,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                      input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})
    r = subprocess.run([os.path.join(tools, "train"), "--onnx", path, "--batch", "2", "--steps", "1",
                        "--save", ck, *overrides], capture_output=True, text=True)
    if r.returncode != 0 and "no ONNX importer" in r.stderr:
        print("skipped the imported models: this build has no ONNX importer")
        return None
    check(r.returncode == 0, f"{name}: train --onnx: exit {r.returncode}: {r.stderr[-2000:]}")
    out = subprocess.run([os.path.join(tools, "export"), "--onnx", path, "--checkpoint", ck, "-o", w,
                          *overrides], capture_output=True, text=True)
    check(out.returncode == 0,
          f"{name}: export --onnx: exit {out.returncode}: {out.stderr[-2000:]}")
    if check.failures:
        return None
    return bpm.read_safetensors(w)[0], bpm.read_safetensors(ck)[0]


class WithConstants(torch.nn.Module):
    """A convolution plus a constant [C, 1, 1] and a learned bias [C, 1, 1], times another
    constant (plain tensors: constants of the export, which remat holds as buffers and `export`
    leaves out) and a registered buffer `gate` [C, 1, 1] (named in model.buffers: a constant that
    `export` writes back as it was), pooled, times a learned gain [C] plus a learned offset [C]
    (parameters remat trains as learned add_constant and mul_table layers), into a linear head."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.head = torch.nn.Linear(4, 4)
        self.shift = torch.linspace(-1, 1, 4).view(4, 1, 1)
        self.scale = torch.tensor([0.5, 1.0, 2.0, 4.0]).view(4, 1, 1)
        self.bias = torch.nn.Parameter(torch.linspace(-0.2, 0.2, 4).view(4, 1, 1))
        self.gain = torch.nn.Parameter(torch.linspace(0.5, 1.5, 4))
        self.offset = torch.nn.Parameter(torch.linspace(-0.1, 0.1, 4))
        self.register_buffer("gate", torch.tensor([1.5, 0.5, 1.0, 2.0]).view(4, 1, 1))

    def forward(self, x):
        pooled = torch.relu(self.conv(x) + self.shift + self.bias).mul(self.scale * self.gate)
        pooled = pooled.mean((2, 3))
        return self.head(pooled * self.gain + self.offset)


def export_imported(tools, check, tmp):
    try:
        from torchvision.models.convnext import CNBlockConfig, ConvNeXt
    except ImportError:
        print("skipped the imported models: no torchvision")
        return
    torch.manual_seed(0)
    model = ConvNeXt([CNBlockConfig(8, 16, 1), CNBlockConfig(16, None, 1)], num_classes=4).train()
    got = train_and_export(tools, check, tmp, model, "convnext")
    if got is None:
        return
    tensors, saved = got
    check(list(tensors["features.1.0.layer_scale"].shape) == [8, 1, 1],
          f"layer scale exported as {list(tensors['features.1.0.layer_scale'].shape)}")
    before = model.features[1][0].layer_scale.detach().clone()
    try:
        model.load_state_dict(tensors, strict=True)
    except RuntimeError as e:
        check(False, f"PyTorch refuses the exported weights: {e}")
        return
    trained = model.features[1][0].layer_scale.detach()
    check(torch.equal(trained.flatten(), saved["features.1.0.layer_scale"].flatten()),
          "the loaded layer scale is not the checkpoint's")
    check(not torch.equal(trained, before), "one step left the layer scale where it started")
    print(f"imported ConvNeXt: {len(tensors)} tensors load into PyTorch with strict=True")

    model = WithConstants().train()
    got = train_and_export(tools, check, tmp, model, "constants", ["model.buffers=[gate]"])
    if got is None:
        return
    tensors, saved = got
    tables = [name for name in saved if name.endswith(".table")]
    check(len(tables) == 2, f"constant tables in the checkpoint: {tables}")
    check("gate" in tensors and torch.equal(tensors["gate"], model.gate),
          "the buffer `gate` is not written back as it was")
    check(list(tensors["bias"].shape) == [4, 1, 1],
          f"bias exported as {list(tensors['bias'].shape)}")
    before = model.gain.detach().clone(), model.offset.detach().clone(), model.bias.detach().clone()
    try:
        model.load_state_dict(tensors, strict=True)
        check(not torch.equal(model.gain.detach(), before[0]),
              "one step left the gain where it started")
        check(not torch.equal(model.offset.detach(), before[1]),
              "one step left the offset where it started")
        check(not torch.equal(model.bias.detach(), before[2]),
              "one step left the bias where it started")
        print(f"imported constants: {len(tensors)} tensors load with strict=True, "
              "the tables left out, the bias, the gain and the offset trained")
    except RuntimeError as e:
        check(False, f"PyTorch refuses the exported weights of a model with a constant: {e}")


if __name__ == "__main__":
    sys.exit(main())
