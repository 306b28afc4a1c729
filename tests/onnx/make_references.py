#!/usr/bin/env python3
"""The PyTorch side of the ONNX import tests (tests/onnx_models.h): exports torchvision
networks with torch.onnx.export and writes what PyTorch computes on one batch, to compare with
what remat computes on the imported graph.

For each model NAME, into OUTDIR:
  NAME.onnx          the export (training mode, opset 13 unless the spec says otherwise, the
                     batch a dynamic axis unless the mode is train_fixed_batch, no constant
                     folding: parameters keep their state_dict names)
  NAME.safetensors   "input" [N, 3, S, S] f32, "labels" [N] i32 ([N, S, S] for a segmentation
                     model, whose loss is per pixel; [N, T] for a per-position one), and, each
                     computed in float64
                     and stored rounded to f32, with KEY.err the largest difference of
                     PyTorch's float32 result from it: "eval_logits" [N, K] (eval mode), then of
                     a training-mode forward and backward from the same state "logits", "loss"
                     [1] (mean softmax cross-entropy), "grad.<p>" for every parameter p and
                     "after.<b>" for every batch-norm running statistic
Dropout and stochastic depth are set to p = 0 (their masks are PyTorch's random numbers; stochastic
depth's Bernoulli does not export at all), and every batch norm's
running statistics start away from (0, 1) so that evaluation reads them.
Usage: make_references.py OUTDIR [NAME ...]   (default: every model of MODELS)"""
import copy
import json
import math
import os
import struct
import sys
import traceback

# PyTorch's float32 error (the yardstick of Note [ONNX model tolerance] in tests/onnx_models.cpp)
# was measured with two OpenBLAS threads: so on every machine, whatever the environment says
# (OpenBLAS reads it when torch loads it).
os.environ["OPENBLAS_NUM_THREADS"] = "2"

import onnx
import onnx.numpy_helper
import torch
import torch.nn.functional as F
import torchvision
import yaml

# name -> (torchvision constructor keywords, input size, batch, opset, export mode: train, eval or
# train_fixed_batch)
MODELS = {
    # The input is large enough that no batch norm normalizes fewer than 8 values per channel:
    # over 2 or 4 values its output hangs on rounding (float32 and float64 PyTorch disagree).
    "resnet18": ({}, 64, 4, 13, "train"),
    # VGG at the input its classifier expects (7 x 7 after the features, where the adaptive
    # pooling exports as an identity); dropout off.
    "vgg11": ({}, 224, 2, 13, "train"),
    "mobilenet_v2": ({}, 64, 4, 13, "train"),
    "densenet121": ({}, 64, 2, 13, "train"),
    "squeezenet1_0": ({}, 64, 2, 13, "train"),
    "googlenet": ({"aux_logits": False, "transform_input": False, "init_weights": True}, 64, 2, 17, "train"),
    "regnet_x_400mf": ({}, 64, 2, 17, "train"),
    # Squeeze-and-excitation (x * sigmoid(...) / hardsigmoid(...): channel_scale); MobileNetV3 at
    # opset 13 writes its hard swish as x * HardSigmoid(x).
    "regnet_y_400mf": ({}, 64, 2, 17, "train"),
    # SiLU (x * Sigmoid(x)) and sigmoid squeeze-and-excitation; stochastic depth off (its
    # Bernoulli does not export).
    "efficientnet_b0": ({}, 64, 2, 13, "train"),
    "mobilenet_v3_small": ({}, 64, 4, 13, "train"),
    # Channel shuffles (Reshape + Transpose + Reshape) and torch.chunk of channels (Slice).
    "shufflenet_v2_x0_5": ({}, 64, 4, 13, "train"),
    # Segmentation: torchvision's FCN (a dilated ResNet-50, F.interpolate back to the input size:
    # Resize, bilinear) and its per-pixel loss, labels [N, S, S].
    "fcn_resnet50": ({"aux_loss": False, "weights_backbone": None}, 64, 2, 13, "train"),
    # Transposed convolutions (ConvTranspose: stride 2 with padding and output_padding, grouped
    # without a bias) in a small U-Net, per-pixel loss.
    "unet_tiny": ({}, 32, 2, 13, "train"),
    # nn.GELU() (the exact, erf GELU: Div, Erf, Add, Mul, Mul) after convolutions and a linear.
    "gelu_net": ({}, 32, 4, 13, "train"),
    # torchvision's ConvNeXt at two small stages: permutes of data (Transpose [0, 2, 3, 1] and
    # back: transpose), layer norm over channels-last values (written out at opset 13), linears
    # on [N, H, W, C], nn.GELU(), the layer scale (Mul by a [C, 1, 1] parameter: a depthwise
    # 1 x 1 conv2d) and LayerNorm2d after the pooling ([C, 1, 1] to [1, 1, C]: a reshape).
    "convnext_mini": ({}, 32, 2, 13, "train"),
    # Arithmetic of data and scalar constants (x * c, c + x, c - x, x / c, -x: affine).
    "scalar_net": ({}, 32, 4, 13, "train"),
    # Tensor constants the export computes, meeting data: Sub of a per-channel mean made in
    # forward, a sinusoidal encoding added to tokens, a local (non-causal) attention mask of
    # -inf before the softmax, a constant less data (add_constant; Note [tensor constants]).
    "constant_net": ({}, 32, 2, 13, "train"),
    # Products and quotients of data by data and by tensors: the input divided and multiplied by
    # per-channel constants (mul_table), a quotient by a pooled map (pow -1 + channel_scale), an
    # RMSNorm (a mean over the last axis: row_mean; rsqrt: pow -1; the learned weight of the last
    # axis: mul_table; a learned shift: add_constant), a gate (GLU: an elementwise
    # channel_scale), data less data of its shape (affine + add) and less a mean of its rows or
    # planes (channel_shift), masked_fill with a finite value (mul_table + add_constant), a
    # constant over data (pow -1 + affine).
    "broadcast_net": ({}, 32, 2, 13, "train"),
    # Broadcasts that keep the last axes (Note [kept axes]): a learned bias [C, 1, 1] of an image
    # (add_constant), a spatial attention from the mean over channels (CBAM's: row_mean and
    # channel_scale keeping H, W), a learned offset subtracted (affine + add_constant), adaLN's
    # modulation of tokens by scales and shifts [N, 1, D] from their mean over the tokens, a gated
    # residual through torch.erf (Erf outside a GELU: erf), a quotient by [N, 1, D] and the
    # tokens' mean subtracted (channel_scale and channel_shift keeping D).
    "modulation_net": ({}, 32, 2, 13, "train"),
    # Attention written with torch.einsum over windows of tokens, as MaxViT writes it: q k^T
    # ("bghid,bghjd->bghij", matmul with transpose_b), p v and p^T v (transpose_a); the heads
    # split by a 5-D permute of the middle axes (transpose); MaxViT's relative position bias
    # (Gather of its table by torchvision's index, Reshape, Transpose, Unsqueeze, Add:
    # relative_position_bias).
    "einsum_net": ({}, 16, 2, 13, "train"),
    # torchvision's PatchMerging (Swin's: strided Slices of [N, H, W, C] + Concat, a layer norm
    # and a linear without bias) between convolutions and a linear, before a pooled head.
    "patch_merge_net": ({}, 32, 2, 13, "train"),
    # Normalizations and pixel shuffles of images: nn.GroupNorm (Reshape to [N, G, -1],
    # InstanceNormalization with scale 1 and bias 0, Reshape back, the weight and bias as Mul and
    # Add of Unsqueeze views [C, 1, 1]: layernorm with axes + conv2d + add_constant),
    # nn.InstanceNorm2d with its affine (layernorm + a depthwise conv2d with bias) and without,
    # nn.PixelUnshuffle (Reshape, Transpose, Reshape), nn.PixelShuffle (DepthToSpace, CRD),
    # nn.LayerNorm over [C, H, W] (LayerNormalization from axis 1: layernorm with axes 3).
    "norm_net": ({}, 32, 2, 17, "train"),
    # F.interpolate where upsample's kernel does not compute it (Note [resize as linear maps]):
    # bilinear by 0.75 (half-pixel centres), bilinear to a size with align_corners=True, bicubic
    # by 1.5 and by 2 with align_corners=True, nearest to a fractional size and by 0.5 (PyTorch's
    # nearest: asymmetric, floor), each a dense layer with a constant map per resized axis.
    "resize_net": ({}, 32, 2, 13, "train"),
    # torch.chunk of channels (Split: two channel_slice layers, their gradients joined by one
    # concat) and torch.cat along H and along W (Concat with axis 2 and 3).
    "split_net": ({}, 32, 2, 13, "train"),
    # A multilayer perceptron over feature vectors [N, 20] (Gemm, nn.BatchNorm1d of [N, F],
    # nn.GELU(), nn.LayerNorm): float inputs that are not images.
    "mlp_net": ({}, 20, 4, 13, "train"),
    # A 1-D CNN over signals [N, 4, 64] (Note [signals]): nn.Conv1d (padded, strided, dilated,
    # depthwise), nn.BatchNorm1d of [N, C, L], nn.MaxPool1d, nn.AvgPool1d, a residual sum,
    # nn.ConvTranspose1d, F.interpolate of a signal (linear, nearest), a Concat of signals,
    # nn.AdaptiveAvgPool1d(1) and a mean over L, a linear head.
    "signal_net": ({}, 64, 4, 13, "train"),
    # A transformer over float sequences [N, 16, 6] (a time series): a linear embedding, a
    # learned position table, nn.TransformerEncoderLayer (batch first, no mask), the mean over the
    # tokens, a linear head.
    "sequence_net": ({}, 16, 4, 17, "train"),
    # The same layers with the head at every token (a sequence tagger): logits [N, 16, 10] against
    # labels [N, 16], a class per position (Note [per-position labels], loss: token_xent).
    "tagger_net": ({}, 16, 4, 17, "train"),
    # nn.LSTM (Note [unrolled recurrent layers]): two batch-first layers of 16 over float sequences [N, 16,
    # 6] (each ONNX LSTM node unrolled into dense, channel_slice, sigmoid, tanh, channel_scale and
    # add layers per step, the parameters reordered by the export traced back to weight_ih_l0 and
    # the others), the head on the last step (y[:, -1]).
    "lstm_net": ({}, 16, 4, 14, "train"),
    # Two bidirectional nn.LSTM layers of 12 without biases as a tagger over [N, 4, 6]: logits
    # [N, 4, 10] at every step (the reverse direction from the last step back; the directions
    # joined along the features, per step for the second layer: Note [per-step sequences]).
    "bilstm_tagger": ({}, 4, 4, 14, "train"),
    # nn.GRU the same way (PyTorch's cell: ONNX's linear_before_reset, gates z, r, h where
    # PyTorch stores r, z, n): two batch-first layers of 16 with biases over [N, 16, 6], the head
    # on the last step; two bidirectional GRU layers of 12 without biases as a tagger over
    # [N, 8, 6], exported at a fixed batch (its zero initial state then a Constant expanded, not
    # a ConstantOfShape).
    "gru_net": ({}, 16, 4, 14, "train"),
    "bigru_tagger": ({}, 8, 4, 14, "train_fixed_batch"),
    # Attention under masks other than the causal one (Note [attention masks]) over float
    # sequences [N, 16, 6]: nn.TransformerEncoderLayer with a float band mask (-inf beyond two
    # tokens) and nn.MultiheadAttention (4 heads) with a boolean prefix mask, each spelled out as
    # matmul, add_constant of the mask, softmax and matmul.
    "masked_net": ({}, 16, 4, 13, "train"),
    # The same layers sequence-first (batch_first=False between permutes of the tokens).
    "masked_seq_first": ({}, 16, 4, 13, "train"),
    # torchvision's MaxViT, small (two stages of one block, 2 x 2 partitions, 2 heads of 8):
    # MBConv (batch norm, depthwise convolution, squeeze-excitation), block and grid partitions
    # (5- and 6-D permutes: transposes), attention in einsum with the relative position bias,
    # layer norms written out, nn.GELU(), the classifier's Tanh; stochastic depth off.
    "maxvit_mini": ({}, 32, 2, 13, "train"),
    # torchvision's SwinTransformer, small (two stages of one block: no shifted windows; 4
    # windows of 4 x 4 in the first stage, one in the second): the window partition folds the
    # windows into the batch ([4N, 16, 16]: Note [folded batch]), qkv[0], qkv[1], qkv[2] after a
    # 5-D permute (channel_slice along an axis + transpose), the relative position bias, the
    # patch merging, layer norms written out; stochastic depth off.
    "swin_mini": ({}, 32, 2, 13, "train"),
    # The same with two blocks per stage: the first stage's second block shifts its 4 windows
    # by 2 (torch.roll both ways: roll; the mask, folded from ScatterND of region ids, added with
    # the bias: relative_position_bias with shift and windows); the second stage has one window,
    # where Swin shifts nothing.
    "swin_shifted": ({}, 32, 2, 13, "train"),
    # torchvision's VisionTransformer, small: the patches' Reshape + Transpose (transpose), the
    # class token (Expand + Concat: class_token), the position table (Add: position_embedding),
    # nn.MultiheadAttention's export (dense + attention + dense), layer norms written out, the
    # class token's row for the head (Gather: channel_slice + reshape).
    "vit_mini": ({}, 32, 2, 13, "train"),
    # The same exported with its batch fixed (no dynamic axes): the reshapes name 2 H, not N H.
    "vit_mini_fixed_batch": ({}, 32, 2, 13, "train_fixed_batch"),
    "resnet18_eval": ({}, 64, 4, 13, "eval"),  # eval-mode export: batch norm folded into the convs
    # configs/gpt2_tiny.yaml as PyTorch (tools/bench/bench_pytorch_gpt2.py): token ids [N, 64].
    "gpt2_tiny": ({}, 64, 4, 17, "train"),
    "gpt2_tiny_opset14": ({}, 64, 4, 14, "train"),  # layer norm written out (no LayerNormalization)
    # A GPT as PyTorch users write it: nn.TransformerEncoder (pre-norm layers of
    # nn.MultiheadAttention with a causal attn_mask buffer: baddbmm(mask, q, k), attention with
    # causal: true; F.gelu: gelu_erf), a learned position table, token ids [N, 16].
    "encoder_gpt": ({}, 16, 4, 17, "train"),
    # CLIP's text transformer's layout: the tokens permuted to [T, N, C] for layers of
    # nn.MultiheadAttention's default batch_first=False and back for the head (Note
    # [sequence-first values]): a post-norm nn.TransformerEncoderLayer (ReLU; its input read by
    # the attention and the residual), then CLIP's pre-norm block with the causal attn_mask and
    # QuickGELU (x * sigmoid(1.702 x)); layer norms written out (opset 13).
    "encoder_seq_first": ({}, 16, 4, 13, "train"),
    # PyTorch's word language model tutorial (TransformerModel): sequence-first throughout, token
    # ids [T, N] in (the batch the second axis, dynamic) and logits [T, N, V] out; the embedding
    # scaled by sqrt(C), the sinusoidal position encoding buffer `pe` [64, 1, C] sliced to T
    # (imported with model.buffers=[pe]: Note [module buffers]) and a learned table [T, 1, C], two
    # post-norm nn.TransformerEncoderLayers (ReLU) under the causal mask, the decoder. The
    # reference's input, labels and logits are stored batch-first, as remat holds them.
    "encoder_tutorial": ({}, 16, 4, 13, "train"),
}
SEQUENCE_FIRST_IO = ("encoder_tutorial",)
FLOAT_INPUTS = {"mlp_net": (20,), "signal_net": (4, 64), "sequence_net": (16, 6),  # per sample
                "masked_net": (16, 6), "masked_seq_first": (16, 6), "tagger_net": (16, 6),
                "lstm_net": (16, 6), "bilstm_tagger": (4, 6), "gru_net": (16, 6),
                "bigru_tagger": (8, 6)}
PER_POSITION = ("tagger_net", "bilstm_tagger", "bigru_tagger")  # labels [N, T]
CLASSES = 10
SEGMENTATION = ("fcn_resnet50", "unet_tiny")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VOCAB = 256  # gpt2_tiny's


def save_safetensors(path, tensors):
    """tensors: {name: torch tensor (float32 or int32)}; the format's own layout."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous()
        dtype = {torch.float32: "F32", torch.int32: "I32"}[t.dtype]
        raw = t.numpy().tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path + ".tmp", "wb") as f:  # whole or not at all: a reader sees no partial file
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    os.replace(path + ".tmp", path)


class TinyUNet(torch.nn.Module):
    """Down a level and back up by two transposed convolutions, the skip concatenated."""

    def __init__(self, classes):
        super().__init__()
        nn = torch.nn
        self.down = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.mid = nn.Sequential(nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
        self.up = nn.ConvTranspose2d(16, 8, 3, stride=2, padding=1, output_padding=1)
        self.up_grouped = nn.ConvTranspose2d(16, 8, 2, stride=2, groups=2, bias=False)
        self.head = nn.Conv2d(16, classes, 1)

    def forward(self, x):
        d = self.down(x)
        m = self.mid(d)
        return self.head(torch.cat([d, self.up(m) + self.up_grouped(m)], 1))


class ScalarNet(torch.nn.Module):
    """A convolution, then arithmetic with Python scalars between its layers."""

    def __init__(self, classes):
        super().__init__()
        nn = torch.nn
        self.conv = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU())
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, classes))

    def forward(self, x):
        y = 3.0 - (self.conv(x) * 0.5 + 1.0)
        return self.head(-(self.conv2(y) / 4.0))


class PatchAttention(torch.nn.Module):
    """What ConstantNet and EinsumNet share: 8-channel tokens from 4 x 4 patches, the q, k and v
    linears of one attention, and a head that pools an [N, 8, H, W] map into the classes."""

    def __init__(self, classes):
        super().__init__()
        nn = torch.nn
        self.patches = nn.Conv2d(3, 8, 4, stride=4)
        self.q, self.k, self.v = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 8)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, classes))


class ConstantNet(PatchAttention):
    """64 tokens of 8 channels from 4 x 4 patches of the input less a mean, a sinusoidal encoding
    added, one attention head that sees the keys within 2 positions of its query, a constant
    less its output, pooled into a linear head. The encoding, the mask and the shift are plain
    tensors (no parameters, no buffers): constants of the export."""

    def __init__(self, classes):
        super().__init__(classes)
        t, c = 64, 8
        angle = torch.arange(t, dtype=torch.float64)[:, None] * \
            torch.exp(-math.log(1e4) * torch.arange(0, c, 2, dtype=torch.float64) / c)
        self.encoding = torch.stack([angle.sin(), angle.cos()], -1).reshape(t, c).float()
        i = torch.arange(t)
        self.far = (i[:, None] - i[None, :]).abs() > 2
        self.shift = torch.linspace(-1, 1, c)

    def forward(self, x):
        x = x - torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
        p = self.patches(x)
        n, c, h, w = p.shape
        t = p.flatten(2).transpose(1, 2) + self.encoding
        s = self.q(t) @ self.k(t).transpose(1, 2) * c ** -0.5
        o = self.shift - s.masked_fill(self.far, float("-inf")).softmax(-1) @ self.v(t)
        return self.head(o.transpose(1, 2).reshape(n, c, h, w))


class BroadcastNet(torch.nn.Module):
    """The input divided by a per-channel spread and scaled per channel, 4 x 4 patches of 8
    channels divided by one plus their pooled squares, less half their pooled mean, 64 tokens
    through an RMSNorm with its learned weight and a learned shift, less their mean, a gated
    linear unit less half its input, a masked_fill of every third token's features with 0.25,
    and t + 2 / (2 + t t), pooled into a linear head. The spread, the scale and the mask are
    plain tensors (constants of the export)."""

    def __init__(self, classes):
        super().__init__()
        nn = torch.nn
        self.spread = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)
        self.scale = torch.tensor([1.0, 2.0, 0.5]).view(3, 1, 1)
        self.patches = nn.Conv2d(3, 8, 4, stride=4)
        self.norm_weight = nn.Parameter(torch.linspace(0.5, 1.5, 8))
        self.shift = nn.Parameter(torch.linspace(-0.2, 0.2, 8))
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)
        self.hidden = (torch.arange(64)[:, None] % 3 == 0).expand(64, 8).clone()
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, classes))

    def forward(self, x):
        x = x / self.spread * self.scale
        p = self.patches(x)
        p = p / (1 + F.adaptive_avg_pool2d(p * p, 1))
        p = p - 0.5 * F.adaptive_avg_pool2d(p, 1)
        n, c, h, w = p.shape
        t = p.flatten(2).transpose(1, 2)
        t = t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6) * self.norm_weight + self.shift
        t = t - t.mean(-1, keepdim=True)
        t = self.a(t) * torch.sigmoid(self.b(t)) - 0.5 * t
        t = t.masked_fill(self.hidden, 0.25)
        t = t + 2.0 / (2 + t * t)
        return self.head(t.transpose(1, 2).reshape(n, c, h, w))


class ModulationNet(torch.nn.Module):
    """4 x 4 patches of 8 channels plus a learned per-channel bias, weighted by a spatial
    attention computed from their mean over the channels, 64 tokens less a learned offset,
    modulated by scales and shifts from their mean over the tokens (adaLN), a gated residual
    through erf,
    divided by one plus the squared mean and less the tokens' mean, pooled into a linear head."""

    def __init__(self, classes):
        super().__init__()
        nn = torch.nn
        self.patches = nn.Conv2d(3, 8, 4, stride=4)
        self.bias = nn.Parameter(torch.linspace(-0.5, 0.5, 8).view(8, 1, 1))
        self.spatial = nn.Conv2d(1, 1, 3, padding=1)
        self.offset = nn.Parameter(torch.linspace(0.2, -0.2, 8))
        self.scale, self.shift, self.gate = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 8)
        self.mlp = nn.Linear(8, 8)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, classes))

    def forward(self, x):
        p = self.patches(x) + self.bias
        p = p * torch.sigmoid(self.spatial(p.mean(1, keepdim=True)))
        n, c, h, w = p.shape
        t = p.flatten(2).transpose(1, 2) - self.offset
        cond = t.mean(1)
        t = t * (1 + self.scale(cond).unsqueeze(1)) + self.shift(cond).unsqueeze(1)
        t = t + self.gate(cond).unsqueeze(1) * torch.erf(self.mlp(t))
        t = t / (1 + cond * cond).unsqueeze(1) - t.mean(1, keepdim=True)
        return self.head(t.transpose(1, 2).reshape(n, c, h, w))


class NormNet(torch.nn.Module):
    """A convolution and nn.GroupNorm, a pixel unshuffle to half the size, a convolution and
    nn.InstanceNorm2d with its affine, a convolution, a pixel shuffle back and nn.InstanceNorm2d
    without, a strided convolution and nn.LayerNorm over [C, H, W], pooled into a linear head."""

    def __init__(self, classes):
        super().__init__()
        nn = torch.nn
        self.stem, self.gn = nn.Conv2d(3, 16, 3, padding=1), nn.GroupNorm(4, 16)
        self.down, self.conv = nn.PixelUnshuffle(2), nn.Conv2d(64, 16, 3, padding=1)
        self.inorm = nn.InstanceNorm2d(16, affine=True)
        self.up, self.shuffle = nn.Conv2d(16, 32, 3, padding=1), nn.PixelShuffle(2)
        self.plain = nn.InstanceNorm2d(8)
        self.pool, self.ln = nn.Conv2d(8, 8, 4, stride=4), nn.LayerNorm([8, 8, 8])
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, classes))
        with torch.no_grad():  # the affines away from 1 and 0, so that their gradients count
            for norm in (self.gn, self.inorm, self.ln):
                norm.weight.uniform_(0.5, 1.5)
                norm.bias.uniform_(-0.2, 0.2)

    def forward(self, x):
        x = F.relu(self.gn(self.stem(x)))
        x = F.relu(self.inorm(self.conv(self.down(x))))
        x = self.plain(self.shuffle(self.up(x)))
        return self.head(self.ln(self.pool(x)))


class ResizeNet(torch.nn.Module):
    """Convolutions between F.interpolate calls of every kind the export writes as Resize other
    than upsample's (fractional, downsampling, align_corners, bicubic), pooled into a linear
    head."""

    def __init__(self, classes):
        super().__init__()
        nn = torch.nn
        self.c1, self.c2, self.c3, self.c4 = (nn.Conv2d(c, 8, 3, padding=1) for c in (3, 8, 8, 8))
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, classes))

    def forward(self, x):
        x = F.interpolate(F.relu(self.c1(x)), scale_factor=0.75, mode="bilinear", align_corners=False)
        x = F.interpolate(F.relu(self.c2(x)), size=(37, 29), mode="bilinear", align_corners=True)
        x = F.interpolate(F.relu(self.c3(x)), scale_factor=1.5, mode="bicubic", align_corners=False)
        x = F.interpolate(F.interpolate(x, size=(20, 25), mode="nearest"), scale_factor=0.5, mode="nearest")
        return self.head(F.interpolate(F.relu(self.c4(x)), scale_factor=2, mode="bicubic", align_corners=True))


class SplitNet(torch.nn.Module):
    """torch.chunk of the channels read by two convolutions and joined again (their gradients
    one concat, Note [split gradients]), rows cut and joined along H in another order, columns
    cut and joined along W (Concat along axes 2 and 3), pooled into a linear head."""

    def __init__(self, classes):
        super().__init__()
        nn = torch.nn
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.lo, self.hi = nn.Conv2d(4, 4, 3, padding=1), nn.Conv2d(4, 4, 1)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, classes))

    def forward(self, x):
        lo, hi = torch.chunk(F.relu(self.stem(x)), 2, dim=1)
        x = torch.cat([self.lo(lo), self.hi(hi)], dim=1)
        x = torch.cat([x[:, :, 20:], F.relu(x[:, :, :20]), x[:, :, 24:]], dim=2)
        return self.head(torch.cat([x[..., :5], x[..., 9:]], dim=-1))


class SignalNet(torch.nn.Module):
    """Conv1d, BatchNorm1d and ReLU, a max pool, a strided dilated Conv1d, a residual block with
    a depthwise Conv1d, an average pool; back up by a ConvTranspose1d beside linear and nearest
    upsampling, joined along the channels; both global means into a linear head."""

    def __init__(self, classes):
        super().__init__()
        nn = torch.nn
        self.stem = nn.Sequential(nn.Conv1d(4, 16, 5, padding=2), nn.BatchNorm1d(16), nn.ReLU(),
                                  nn.MaxPool1d(2))
        self.down = nn.Sequential(nn.Conv1d(16, 32, 3, stride=2, padding=2, dilation=2),
                                  nn.BatchNorm1d(32), nn.ReLU())
        self.block = nn.Sequential(nn.Conv1d(32, 32, 3, padding=1, groups=32), nn.BatchNorm1d(32),
                                   nn.ReLU(), nn.Conv1d(32, 32, 1))
        self.pool, self.gap = nn.AvgPool1d(2), nn.AdaptiveAvgPool1d(1)
        self.up = nn.ConvTranspose1d(32, 16, 4, stride=2, padding=1)
        self.head = nn.Linear(96, classes)

    def forward(self, x):
        x = self.down(self.stem(x))
        x = self.pool(torch.relu(x + self.block(x)))
        x = torch.cat([self.up(x), F.interpolate(x, scale_factor=2, mode="linear") +
                       F.interpolate(x, scale_factor=2)], 1)
        return self.head(torch.cat([self.gap(x).flatten(1), x.mean(-1)], 1))


class SequenceNet(torch.nn.Module):
    """Float sequences [N, T, F] embedded by a linear layer plus a learned position table, one
    batch-first nn.TransformerEncoderLayer, the mean over the tokens, a linear head."""

    def __init__(self, seq, classes):
        super().__init__()
        nn = torch.nn
        self.embed = nn.Linear(6, 16)
        self.pos = nn.Parameter(torch.randn(1, seq, 16) * 0.1)
        self.layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
        self.head = nn.Linear(16, classes)

    def forward(self, x):
        return self.head(self.layer(self.embed(x) + self.pos).mean(1))


class TaggerNet(SequenceNet):
    """SequenceNet's layers with the head at every token: logits [N, T, K]."""

    def forward(self, x):
        return self.head(self.layer(self.embed(x) + self.pos))


class RecurrentNet(torch.nn.Module):
    """Two batch-first layers of `cell` (nn.LSTM or nn.GRU) over float sequences [N, T, 6], a
    linear head on the last step."""

    def __init__(self, cell, classes):
        super().__init__()
        self.rnn = cell(6, 16, num_layers=2, batch_first=True)
        self.head = torch.nn.Linear(16, classes)

    def forward(self, x):
        return self.head(self.rnn(x)[0][:, -1])


class RecurrentTagger(torch.nn.Module):
    """Two bidirectional layers of `cell` without biases, a linear head at every step: logits
    [N, T, K]."""

    def __init__(self, cell, classes):
        super().__init__()
        self.rnn = cell(6, 12, num_layers=2, bidirectional=True, bias=False, batch_first=True)
        self.head = torch.nn.Linear(24, classes)

    def forward(self, x):
        return self.head(self.rnn(x)[0])


class MaskedNet(SequenceNet):
    """SequenceNet's layer under a float band mask, then a residual nn.MultiheadAttention under a
    boolean prefix mask (the first 4 tokens visible to every query, the rest causally)."""

    def __init__(self, seq, classes):
        super().__init__(seq, classes)
        self.attn = torch.nn.MultiheadAttention(16, 4, batch_first=True)
        i = torch.arange(seq)
        self.register_buffer("band", torch.zeros(seq, seq).masked_fill((i[:, None] - i[None, :]).abs() > 2,
                                                                        float("-inf")))
        self.register_buffer("prefix", (i[None, :] > i[:, None]) & (i[None, :] >= 4))

    def forward(self, x):
        h = self.layer(self.embed(x) + self.pos, src_mask=self.band)
        h = h + self.attn(h, h, h, need_weights=False, attn_mask=self.prefix)[0]
        return self.head(h.mean(1))


class MaskedSeqFirst(MaskedNet):
    """MaskedNet's layers with batch_first=False, the tokens permuted to [T, N, C] around them."""

    def __init__(self, seq, classes):
        super().__init__(seq, classes)
        self.layer = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0)
        self.attn = torch.nn.MultiheadAttention(16, 4)

    def forward(self, x):
        h = self.layer((self.embed(x) + self.pos).permute(1, 0, 2), src_mask=self.band)
        h = h + self.attn(h, h, h, need_weights=False, attn_mask=self.prefix)[0]
        return self.head(h.permute(1, 0, 2).mean(1))


class EncoderGpt(torch.nn.Module):
    """Token ids [N, T] through an embedding plus a learned position table, two pre-norm
    nn.TransformerEncoderLayers (2 heads of 16, GELU, no dropout) under PyTorch's causal mask, a
    final layer norm and a linear head over the vocabulary."""

    def __init__(self, tokens=16, dim=32):
        super().__init__()
        nn = torch.nn
        self.embed = nn.Embedding(VOCAB, dim)
        self.positions = nn.Parameter(torch.randn(1, tokens, dim) * 0.1)
        layer = nn.TransformerEncoderLayer(dim, 2, 4 * dim, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, VOCAB, bias=False)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(tokens))

    def forward(self, ids):
        return self.head(self.norm(self.blocks(self.embed(ids) + self.positions, mask=self.mask)))


class SequenceFirstGpt(torch.nn.Module):
    """Token ids [N, T] embedded plus a learned position table, permuted to [T, N, C]; a post-norm
    nn.TransformerEncoderLayer (2 heads of 16, ReLU, no dropout) and CLIP's residual attention
    block (pre-norm nn.MultiheadAttention under the causal mask, QuickGELU), both sequence-first;
    permuted back for a final layer norm and a linear head over the vocabulary."""

    def __init__(self, tokens=16, dim=32):
        super().__init__()
        nn = torch.nn
        self.embed = nn.Embedding(VOCAB, dim)
        self.positions = nn.Parameter(torch.randn(1, tokens, dim) * 0.1)
        self.post = nn.TransformerEncoderLayer(dim, 2, 4 * dim, dropout=0.0)
        self.ln_1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, 2)
        self.ln_2 = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, 4 * dim)
        self.proj = nn.Linear(4 * dim, dim)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, VOCAB, bias=False)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(tokens))

    def forward(self, ids):
        x = (self.embed(ids) + self.positions).permute(1, 0, 2)
        x = self.post(x, src_mask=self.mask)
        h = self.ln_1(x)
        x = x + self.attn(h, h, h, need_weights=False, attn_mask=self.mask)[0]
        h = self.fc(self.ln_2(x))
        x = x + self.proj(h * torch.sigmoid(1.702 * h))
        return self.head(self.norm(x.permute(1, 0, 2)))


class TutorialTransformer(torch.nn.Module):
    """PyTorch's tutorial TransformerModel over token ids [T, N]: logits [T, N, V]."""

    def __init__(self, tokens=16, dim=32, max_len=64):
        super().__init__()
        nn = torch.nn
        self.encoder = nn.Embedding(VOCAB, dim)
        position = torch.arange(max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, dim, 2) * (-math.log(10000.0) / dim))
        pe = torch.zeros(max_len, 1, dim)
        pe[:, 0, 0::2] = torch.sin(position * div_term)
        pe[:, 0, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe)
        self.positions = nn.Parameter(torch.randn(tokens, 1, dim) * 0.1)
        layer = nn.TransformerEncoderLayer(dim, 2, 2 * dim, dropout=0.0)
        self.transformer_encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.decoder = nn.Linear(dim, VOCAB)
        self.dim = dim
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(tokens))

    def forward(self, src):
        x = self.encoder(src) * math.sqrt(self.dim) + self.pe[:src.size(0)] + self.positions
        return self.decoder(self.transformer_encoder(x, self.mask))


class EinsumNet(PatchAttention):
    """Patches as G = 4 windows of P = 4 tokens of C = 8 channels, one attention of 2 heads over
    each window's tokens written with torch.einsum with MaxViT's relative position bias, pooled
    into a linear head."""

    def __init__(self, classes):
        super().__init__(classes)
        nn = torch.nn
        from torchvision.models.maxvit import _get_relative_position_index
        self.relative_position_bias_table = nn.Parameter(torch.randn(9, 2))  # a 2 x 2 window, 2 heads
        self.register_buffer("relative_position_index", _get_relative_position_index(2, 2))

    def forward(self, x):
        t = self.patches(x).permute(0, 2, 3, 1)  # [N, G, P, C]
        n, g, p, c = t.shape
        q, k, v = (f(t).reshape(n, g, p, 2, c // 2).permute(0, 1, 3, 2, 4) for f in (self.q, self.k, self.v))
        s = torch.einsum("bghid,bghjd->bghij", q, k) * 0.5
        bias = self.relative_position_bias_table[self.relative_position_index.view(-1)].view(p, p, -1)
        s = s + bias.permute(2, 0, 1).contiguous().unsqueeze(0)
        a = s.softmax(-1)
        o = torch.einsum("bghij,bghjd->bghid", a, v) + torch.einsum("bghji,bghjd->bghid", a, v)
        return self.head(o.permute(0, 1, 3, 2, 4).reshape(n, g, p, c).permute(0, 3, 1, 2))


def build(name, kwargs):
    arch = name
    for suffix in ("_eval", "_fixed_batch"):
        arch = arch[:-len(suffix)] if arch.endswith(suffix) else arch
    torch.manual_seed(0)
    if arch.startswith("gpt2_tiny"):
        sys.path.insert(0, os.path.join(ROOT, "tools", "bench"))
        from bench_pytorch_gpt2 import build_gpt2
        path = os.path.join(ROOT, "configs", "gpt2_tiny.yaml")
        with open(path) as f:
            model = build_gpt2(yaml.safe_load(f), path)
    elif arch == "scalar_net":
        model = ScalarNet(CLASSES)
    elif arch == "constant_net":
        model = ConstantNet(CLASSES)
    elif arch == "broadcast_net":
        model = BroadcastNet(CLASSES)
    elif arch == "encoder_gpt":
        model = EncoderGpt(MODELS[name][1])
    elif arch == "encoder_seq_first":
        model = SequenceFirstGpt(MODELS[name][1])
    elif arch == "encoder_tutorial":
        model = TutorialTransformer(MODELS[name][1])
    elif arch == "modulation_net":
        model = ModulationNet(CLASSES)
    elif arch == "norm_net":
        model = NormNet(CLASSES)
    elif arch == "resize_net":
        model = ResizeNet(CLASSES)
    elif arch == "split_net":
        model = SplitNet(CLASSES)
    elif arch == "signal_net":
        model = SignalNet(CLASSES)
    elif arch == "masked_net":
        model = MaskedNet(MODELS[name][1], CLASSES)
    elif arch == "masked_seq_first":
        model = MaskedSeqFirst(MODELS[name][1], CLASSES)
    elif arch == "sequence_net":
        model = SequenceNet(MODELS[name][1], CLASSES)
    elif arch == "tagger_net":
        model = TaggerNet(MODELS[name][1], CLASSES)
    elif arch in ("lstm_net", "gru_net"):
        model = RecurrentNet(torch.nn.LSTM if arch == "lstm_net" else torch.nn.GRU, CLASSES)
    elif arch in ("bilstm_tagger", "bigru_tagger"):
        model = RecurrentTagger(torch.nn.LSTM if arch == "bilstm_tagger" else torch.nn.GRU, CLASSES)
    elif arch == "mlp_net":
        nn = torch.nn
        model = nn.Sequential(nn.Linear(20, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, 32), nn.GELU(),
                              nn.LayerNorm(32), nn.Linear(32, CLASSES))
    elif arch == "einsum_net":
        model = EinsumNet(CLASSES)
    elif arch == "patch_merge_net":
        from torchvision.models.swin_transformer import PatchMerging
        nn = torch.nn

        class ToLast(nn.Module):
            def forward(self, x):
                return x.permute(0, 2, 3, 1)

        class ToFirst(nn.Module):
            def forward(self, x):
                return x.permute(0, 3, 1, 2)

        model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
                              nn.Conv2d(8, 8, 4, stride=4), ToLast(), PatchMerging(8), nn.Linear(16, 16), nn.GELU(),
                              ToFirst(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, CLASSES))
    elif arch == "maxvit_mini":
        from torchvision.models.maxvit import MaxVit
        model = MaxVit(input_size=(32, 32), stem_channels=8, partition_size=2, block_channels=[16, 32],
                       block_layers=[1, 1], head_dim=8, stochastic_depth_prob=0.0, num_classes=CLASSES)
    elif arch.startswith("swin_"):
        from torchvision.models.swin_transformer import SwinTransformer
        depths = [1, 1] if arch == "swin_mini" else [2, 2]
        model = SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=depths, num_heads=[2, 2], window_size=[4, 4],
                                stochastic_depth_prob=0.0, num_classes=CLASSES)
    elif arch == "unet_tiny":
        model = TinyUNet(CLASSES)
    elif arch == "convnext_mini":
        from torchvision.models.convnext import CNBlockConfig, ConvNeXt
        model = ConvNeXt([CNBlockConfig(16, 32, 2), CNBlockConfig(32, None, 1)], num_classes=CLASSES)
        with torch.no_grad():  # layer scales away from their 1e-6 start, so the blocks count
            for m in model.modules():
                if hasattr(m, "layer_scale"):
                    m.layer_scale.uniform_(0.5, 1.5)
    elif arch == "vit_mini":
        from torchvision.models.vision_transformer import VisionTransformer
        model = VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=16,
                                  mlp_dim=32, num_classes=CLASSES)
        with torch.no_grad():  # the class token and the head away from their zero start, so
            model.class_token.normal_(0, 1)  # that every gradient counts
            model.heads.head.weight.normal_(0, 0.5)
            model.heads.head.bias.normal_(0, 0.5)
    elif arch == "gelu_net":
        nn = torch.nn
        model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.GELU(), nn.MaxPool2d(2),
                              nn.Conv2d(8, 16, 3, padding=1), nn.GELU(), nn.AdaptiveAvgPool2d(1),
                              nn.Flatten(), nn.Linear(16, 32), nn.GELU(), nn.Linear(32, CLASSES))
    elif arch in SEGMENTATION:
        sys.path.insert(0, os.path.join(ROOT, "tools", "bench"))
        from onnx_zoo_bench import SegmentationOut  # the "out" map alone
        model = SegmentationOut(getattr(torchvision.models.segmentation, arch)(num_classes=CLASSES, **kwargs))
    else:
        model = getattr(torchvision.models, arch)(num_classes=CLASSES, **kwargs)
    for m in model.modules():
        if isinstance(m, (torch.nn.Dropout, torchvision.ops.StochasticDepth)):
            m.p = 0.0
        if isinstance(m, torch.nn.BatchNorm2d):
            with torch.no_grad():
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
    return model


def run(model, x, labels, sequence_first=False):
    """Eval-mode logits, then a training-mode forward and backward from the same state; a
    sequence-first model reads x [N, T] as [T, N], its logits turned back to [N, T, V]."""
    model.eval()
    out = {}
    if x.is_floating_point():
        x = x.to(next(model.parameters()).dtype)
    forward = (lambda ids: model(ids.t()).transpose(0, 1)) if sequence_first else model
    with torch.no_grad():
        out["eval_logits"] = forward(x)
    model.train()
    logits = forward(x)
    if logits.dim() == 4:  # per pixel: logits [N, K, H, W], labels [N, H, W]
        loss = F.cross_entropy(logits, labels)
    else:
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
    loss.backward()
    out["logits"] = logits.detach()
    out["loss"] = loss.detach().reshape(1)
    for p_name, p in model.named_parameters():
        out["grad." + p_name] = p.grad
    for b_name, b in model.named_buffers():
        if "running" in b_name:
            out["after." + b_name] = b
    return out


def make(outdir, name):
    kwargs, size, batch, opset, mode = MODELS[name]
    # A reader takes the pair once the .safetensors exists (written last): an earlier run's goes
    # first, so that it never meets this run's export.
    if os.path.exists(os.path.join(outdir, name + ".safetensors")):
        os.remove(os.path.join(outdir, name + ".safetensors"))
    gen = torch.Generator().manual_seed(1)
    if name.startswith("gpt2_tiny") or name.startswith("encoder_"):  # token ids and labels
        x = torch.randint(0, VOCAB, (batch, size), generator=gen)
        labels = torch.randint(0, VOCAB, (batch, size), generator=gen)
        out = {"input": x.to(torch.int32), "labels": labels.to(torch.int32)}
    elif name in FLOAT_INPUTS:  # features [N, F], signals [N, C, L], sequences [N, T, F]
        x = torch.randn(batch, *FLOAT_INPUTS[name], generator=gen)
        label_shape = (batch, FLOAT_INPUTS[name][0]) if name in PER_POSITION else (batch,)
        labels = torch.randint(0, CLASSES, label_shape, generator=gen)
        out = {"input": x, "labels": labels.to(torch.int32)}
    else:
        x = torch.randn(batch, 3, size, size, generator=gen)
        label_shape = (batch, size, size) if name in SEGMENTATION else (batch,)
        labels = torch.randint(0, CLASSES, label_shape, generator=gen)
        out = {"input": x, "labels": labels.to(torch.int32)}
    path = os.path.join(outdir, name + ".onnx")
    training = mode in ("train", "train_fixed_batch")
    seq_first = name in SEQUENCE_FIRST_IO
    axis = 1 if seq_first else 0
    dynamic = {} if mode == "train_fixed_batch" else {"input": {axis: "batch"}, "logits": {axis: "batch"}}
    exported = build(name, kwargs)
    exported.train(training)
    torch.onnx.export(exported, x.t() if seq_first else x, path, opset_version=opset, input_names=["input"],
                      output_names=["logits"], dynamic_axes=dynamic,
                      training=torch.onnx.TrainingMode.TRAINING if training else torch.onnx.TrainingMode.EVAL,
                      do_constant_folding=not training)
    # A training-mode export traces a forward that moves the running statistics before they are
    # written: the reference starts from the file's values.
    model = build(name, kwargs)
    state = model.state_dict()
    with torch.no_grad():
        for init in onnx.load(path).graph.initializer:
            if init.name in state:
                state[init.name].copy_(torch.from_numpy(onnx.numpy_helper.to_array(init).copy()))
    exact_model = copy.deepcopy(model).double()
    results = {torch.float32: run(model, x, labels, seq_first),
               torch.float64: run(exact_model, x, labels, seq_first)}
    # PyTorch's own float32 error per tensor, against float64 (Note [ONNX model tolerance]).
    for key, exact in results[torch.float64].items():
        out[key] = exact.float()
        out[key + ".err"] = (results[torch.float32][key].double() - exact).abs().max().reshape(1).float()
    save_safetensors(os.path.join(outdir, name + ".safetensors"), out)


def main():
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    failed = []
    for name in sys.argv[2:] or list(MODELS):
        if name not in MODELS:
            sys.exit(f"make_references.py: no model '{name}'; the models: {', '.join(MODELS)}")
        try:
            make(outdir, name)
            print("wrote", name, flush=True)
        except Exception:  # the others are still made; the failure is named at the end
            traceback.print_exc()
            failed.append(name)
    if failed:
        sys.exit(f"make_references.py: failed to make {', '.join(failed)} (tracebacks above)")


if __name__ == "__main__":
    main()
