"""The small networks of the ONNX import tests (make_references.py's MODELS): each made to
reach some ONNX form that torchvision's networks do not (scalars and constants, broadcasts,
normalizations over other axes, resizes, splits, signals, sequences, recurrent layers, masks,
sequence-first transformers, einsum), with every parameter's gradient counting."""
import math

import torch
import torch.nn.functional as F

VOCAB = 256  # the token models' vocabulary (gpt2_tiny's)


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
