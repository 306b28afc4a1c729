#!/usr/bin/python3
"""Writes the ONNX importer's fuzz seeds beside small_cnn.onnx: tiny exports of the forms the
importer reads besides a CNN of images, so that the fuzzer starts from them. Run with Debian's
python3-torch and python3-onnx: tests/fuzz/seeds/make_onnx_seeds.py [OUT_DIR]."""
import os
import sys

import torch

nn = torch.nn


class Norms(nn.Module):
    """nn.GroupNorm, nn.InstanceNorm2d with and without its affine, nn.PixelShuffle."""

    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 8, 3, padding=1)
        self.gn, self.inorm = nn.GroupNorm(4, 8), nn.InstanceNorm2d(8, affine=True)
        self.plain = nn.InstanceNorm2d(8)
        self.ps = nn.PixelShuffle(2)

    def forward(self, x):
        return self.ps(self.plain(self.inorm(self.gn(self.c(x)))))


class Signal(nn.Module):
    """A 1-D CNN over [N, 4, 32]: Conv1d, BatchNorm1d, MaxPool1d, a mean over L, a linear head."""

    def __init__(self):
        super().__init__()
        self.c, self.bn = nn.Conv1d(4, 8, 3, padding=1), nn.BatchNorm1d(8)
        self.p, self.fc = nn.MaxPool1d(2), nn.Linear(8, 5)

    def forward(self, x):
        return self.fc(self.p(torch.relu(self.bn(self.c(x)))).mean(-1))


class Resizes(nn.Module):
    """F.interpolate by 1.5 (bilinear) and with corners aligned to 7 x 5 (bicubic): constant maps."""

    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        x = nn.functional.interpolate(self.c(x), scale_factor=1.5, mode="bilinear")
        return nn.functional.interpolate(x, size=(7, 5), mode="bicubic", align_corners=True)


class Masked(nn.Module):
    """nn.MultiheadAttention over [N, 6, 8] under a band mask, the mean over the tokens."""

    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)
        i = torch.arange(6)
        self.register_buffer("band", torch.zeros(6, 6).masked_fill((i[:, None] - i[None, :]).abs() > 1,
                                                                    float("-inf")))

    def forward(self, x):
        return self.attn(x, x, x, need_weights=False, attn_mask=self.band)[0].mean(1)


class Recurrent(nn.Module):
    """A bidirectional nn.LSTM then an nn.GRU over [N, 3, 5] (Note [unrolled recurrent layers]),
    the last step."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(5, 4, batch_first=True, bidirectional=True)
        self.gru = nn.GRU(8, 4, batch_first=True)

    def forward(self, x):
        return self.gru(self.lstm(x)[0])[0][:, -1]


def export(model, x, path):
    torch.onnx.export(model.train(), x, path, opset_version=13, input_names=["input"],
                      output_names=["out"], dynamic_axes={"input": {0: "batch"}, "out": {0: "batch"}},
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "onnx")
    torch.manual_seed(0)
    export(Norms(), torch.randn(2, 3, 8, 8), os.path.join(out, "norms.onnx"))
    export(Signal(), torch.randn(2, 4, 32), os.path.join(out, "signal.onnx"))
    mlp = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    export(mlp, torch.randn(2, 6), os.path.join(out, "mlp.onnx"))
    export(Resizes(), torch.randn(2, 3, 6, 6), os.path.join(out, "resize.onnx"))
    export(Masked(), torch.randn(2, 6, 8), os.path.join(out, "masked.onnx"))
    export(Recurrent(), torch.randn(2, 3, 5), os.path.join(out, "recurrent.onnx"))


if __name__ == "__main__":
    main()
