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
                     "after.<b>" for every batch-norm running statistic. A float32 result
                     that is not finite, or that a second identical run does not repeat to the
                     bit, is no yardstick: the model fails, naming the tensor
Dropout and stochastic depth are set to p = 0 (their masks are PyTorch's random numbers; stochastic
depth's Bernoulli does not export at all), and every batch norm's
running statistics start away from (0, 1) so that evaluation reads them.
Usage: make_references.py OUTDIR [NAME ...]   (default: every model of MODELS)
       make_references.py --self-test   (the yardstick check refuses what it must; exit 1 if not)"""
import copy
import json
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

from reference_nets import (VOCAB, BroadcastNet, ConstantNet, EinsumNet, EncoderGpt, MaskedNet,
                            MaskedSeqFirst, ModulationNet, NormNet, RecurrentNet, RecurrentTagger,
                            ResizeNet, ScalarNet, SequenceFirstGpt, SequenceNet, SignalNet,
                            SplitNet, TaggerNet, TinyUNet, TutorialTransformer)

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
    # and a linear without bias) between convolutions and linears, before a pooled head. The GELU
    # sits between two linears: PyTorch 1.13's float32 GELU gradient is wrong when the gradient
    # it is given is not contiguous (a permute's), and its error would then be no yardstick.
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

        model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1),
                              nn.ReLU(), nn.Conv2d(8, 8, 4, stride=4), ToLast(), PatchMerging(8),
                              nn.Linear(16, 16), nn.GELU(), nn.Linear(16, 16), ToFirst(),
                              nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, CLASSES))
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
    again = run(copy.deepcopy(model), x, labels, seq_first)
    results = {torch.float32: run(model, x, labels, seq_first),
               torch.float64: run(exact_model, x, labels, seq_first)}
    out.update(yardsticks(name, results[torch.float32], again, results[torch.float64]))
    save_safetensors(os.path.join(outdir, name + ".safetensors"), out)


def yardsticks(name, f32, again, f64):
    """Each float64 result rounded to float32 and, as KEY.err, PyTorch's own float32 error
    against it (Note [ONNX model tolerance]). An error that is not finite, or a float32 result
    that `again` (a second identical run) does not repeat to the bit (a kernel reading memory it
    never wrote), is no yardstick: ValueError naming the model and the tensor."""
    out = {}
    for key, exact in f64.items():
        got = f32[key]
        err = (got.double() - exact).abs().max().reshape(1).float()
        same = torch.equal(got, again[key])
        if not same or not torch.isfinite(err).all():
            raise ValueError(f"{name}: PyTorch's float32 '{key}' is not a yardstick: error "
                             f"{err.item():g} against float64, {'the same' if same else 'another'}"
                             " result in a second identical run")
        out[key] = exact.float()
        out[key + ".err"] = err
    return out


def self_test():
    """yardsticks() refuses a float32 result that is not repeated or not finite."""
    f64 = {"t": torch.tensor([1.0, -2.0], dtype=torch.float64)}
    good = {"t": torch.tensor([1.0, -2.0000002])}
    cases = {"a repeated, finite result": (good, {"t": good["t"].clone()}, True),
             "a result a second run does not repeat": (good, {"t": torch.tensor([1.0, -2.0])}, False),
             "a NaN": ({"t": torch.tensor([1.0, float("nan")])},
                       {"t": torch.tensor([1.0, float("nan")])}, False),
             "an infinity": ({"t": torch.tensor([1.0, float("inf")])},
                             {"t": torch.tensor([1.0, float("inf")])}, False)}
    failures = []
    for what, (f32, again, accepted) in cases.items():
        try:
            out = yardsticks("self-test", f32, again, f64)
            if not accepted:
                failures.append(f"{what} is taken as a yardstick")
            elif not 0 < out["t.err"].item() < 1e-6:
                failures.append(f"{what}: error {out['t.err'].item():g}, not 2.4e-7")
        except ValueError as e:
            if accepted:
                failures.append(f"{what} is refused: {e}")
    for f in failures:
        print(f"make_references.py: self-test: {f}", file=sys.stderr)
    return 1 if failures else 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(self_test())
    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
        print("usage: make_references.py OUTDIR [NAME ...] | --self-test", file=sys.stderr)
        sys.exit(2)
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
