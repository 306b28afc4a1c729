# A remat model YAML (configs/*.yaml) as a PyTorch module, for tools/bench/bench_pytorch.py: the same
# layers, attributes, name resolution and parameter layout as models/config.h describes, so that
# PyTorch and remat train the same network. Also the network as a list of single-input
# segments (cut where one value alone is live), which torch's checkpoint_sequential needs.
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class ConfigError(Exception):
    pass


def _pair(v, default):
    if v is None:
        return tuple(default)
    if isinstance(v, int):
        return (v, v)
    if len(v) == 1:
        return (v[0], v[0])
    return tuple(v)


def flatten_layers(cfg, path):
    """Expands repeat blocks and resolves inputs as models/config.h does.
    Returns [(full_name, op, [input full names or 'input'], attrs)] in definition order."""
    out = []
    defined = set()

    def resolve(name, scopes, where):
        if name == "previous" and "previous" not in scopes[0]:
            raise ConfigError(f"{path}: layer '{where}': 'previous' outside a two-input block")
        for scope in scopes:
            if name in scope:
                return scope[name]
        if name in defined:
            return name
        raise ConfigError(f"{path}: layer '{where}': input '{name}' is not defined earlier")

    def expand(layers, prefix, outer, block_input, previous=None):
        local = {"input": block_input}
        if previous is not None:  # a two-input block (models/config.h, Note [two-input blocks])
            local["previous"] = previous
        prev = block_input
        for layer in layers:
            name = layer["name"]
            scopes = [local] + outer
            if "layers" in layer:
                inp, carried = prev, None
                if "inputs" in layer:
                    ins = layer["inputs"]
                    ins = [ins] if isinstance(ins, str) else list(ins)
                    inp = resolve(ins[0], scopes, name)
                    if len(ins) == 2:
                        carried = resolve(ins[1], scopes, name)
                for i in range(int(layer.get("repeat", 1))):
                    last = expand(layer["layers"], f"{prefix}{name}.{i}.", scopes, inp, carried)
                    carried = inp if carried is not None else None
                    inp = last
                local[name] = inp
                prev = inp
                continue
            ins = layer.get("inputs")
            ins = [prev] if ins is None else ([ins] if isinstance(ins, str) else list(ins))
            if "inputs" in layer:
                ins = [resolve(x, scopes, prefix + name) for x in ins]
            attrs = {k: v for k, v in layer.items() if k not in ("name", "op", "inputs")}
            full = prefix + name
            out.append((full, layer["op"], ins, attrs))
            local[name] = full
            defined.add(full)
            prev = full
        return prev

    expand(cfg["layers"], "", [], "input")
    return out


def _sides(v):
    """padding / cropping as written (n, [h, w] or [top, bottom, left, right]) -> 4 sides."""
    if v is None:
        return (0, 0, 0, 0)
    if isinstance(v, int):
        return (v, v, v, v)
    if len(v) == 2:
        return (v[0], v[0], v[1], v[1])
    return tuple(v)


def _resolve_padding(v, size, kernel, stride, dilation=(1, 1)):
    """The (top, bottom, left, right) pads of `padding` for an input of `size` (H, W):
    TensorFlow's 'same' puts the odd pixel at the bottom / right (ops/padding.h)."""
    if v == "valid":
        return (0, 0, 0, 0)
    if v != "same":
        return _sides(v)
    out = []
    for n, k, st, d in zip(size, kernel, stride, dilation):
        o = (n + st - 1) // st
        total = max((o - 1) * st + d * (k - 1) + 1 - n, 0)
        out += [total // 2, total - total // 2]
    return tuple(out)


class Pad(nn.Module):
    """Pads (top, bottom, left, right) with `value` (0, or -inf so that padding never wins a max)."""

    def __init__(self, sides, value=0.0):
        super().__init__()
        self.sides, self.value = sides, value

    def forward(self, x):
        t, b, l, r = self.sides
        return F.pad(x, (l, r, t, b), value=self.value) if any(self.sides) else x


class Crop(nn.Module):
    def __init__(self, sides):
        super().__init__()
        self.sides = sides

    def forward(self, x):
        t, b, l, r = self.sides
        return x[:, :, t:x.shape[2] - b, l:x.shape[3] - r]


class AvgPoolRealElements(nn.Module):
    """Average pooling over zero-padded windows divided by each window's real elements
    (count_include_pad: false) with any per-side pads."""

    def __init__(self, kernel, stride, sides):
        super().__init__()
        self.kernel, self.stride, self.pad = kernel, stride, Pad(sides)

    def forward(self, x):
        ones = torch.ones_like(x[:1, :1])
        s = F.avg_pool2d(self.pad(x), self.kernel, self.stride)
        n = F.avg_pool2d(self.pad(ones), self.kernel, self.stride)
        return s / n


class BatchNormNoScale(nn.BatchNorm2d):
    """Batch norm with a shift but no learned scale (Keras's scale=False)."""

    def __init__(self, c, eps, momentum):
        super().__init__(c, eps=eps, momentum=momentum, affine=False)
        self.bias = nn.Parameter(torch.zeros(c))

    def forward(self, x):
        train = self.training
        return F.batch_norm(x, self.running_mean, self.running_var, None, self.bias, train,
                            self.momentum, self.eps)


class Act(nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.kind = kind

    def forward(self, x):
        if self.kind == "relu":
            return F.relu(x)
        if self.kind == "relu6":
            return F.relu6(x)
        return x


def make_layer(op, attrs, in_shapes, where):
    """A module for one layer and its output shape (per sample, without N)."""
    s = in_shapes[0]
    if op == "conv2d":
        k = _pair(attrs.get("kernel"), (1, 1))
        st = _pair(attrs.get("stride"), (1, 1))
        d = _pair(attrs.get("dilation"), (1, 1))
        t, b, l, r = _resolve_padding(attrs.get("padding"), s[1:], k, st, d)
        g = int(attrs.get("groups", 1))
        sym = t == b and l == r
        conv = nn.Conv2d(s[0], int(attrs["filters"]), k, st, (t, l) if sym else 0, d, g,
                         bias=bool(attrs.get("bias", True)))
        ho = (s[1] + t + b - d[0] * (k[0] - 1) - 1) // st[0] + 1
        wo = (s[2] + l + r - d[1] * (k[1] - 1) - 1) // st[1] + 1
        mods = ([] if sym else [Pad((t, b, l, r))]) + [conv, Act(attrs.get("activation", "none"))]
        return nn.Sequential(*mods), (conv.out_channels, ho, wo)
    if op == "dense":
        lin = nn.Linear(s[0], int(attrs["units"]), bias=bool(attrs.get("bias", True)))
        return nn.Sequential(lin, Act(attrs.get("activation", "none"))), (lin.out_features,)
    if op == "batchnorm":
        eps, momentum = float(attrs.get("eps", 1e-5)), float(attrs.get("momentum", 0.1))
        if not attrs.get("scale", True):
            return BatchNormNoScale(s[0], eps, momentum), s
        return nn.BatchNorm2d(s[0], eps=eps, momentum=momentum), s
    if op in ("relu", "relu6"):
        return Act(op), s
    if op in ("maxpool", "avgpool"):
        k = _pair(attrs.get("kernel"), (1, 1))
        st = _pair(attrs.get("stride"), k)
        t, b, l, r = sides = _resolve_padding(attrs.get("padding"), s[1:], k, st)
        out = (s[0], (s[1] + t + b - k[0]) // st[0] + 1, (s[2] + l + r - k[1]) // st[1] + 1)
        count_pad = bool(attrs.get("count_include_pad", True))
        if op == "maxpool":
            mod = (nn.MaxPool2d(k, st, (t, l)) if t == b and l == r
                   else nn.Sequential(Pad(sides, float("-inf")), nn.MaxPool2d(k, st)))
        elif not count_pad and any(sides):
            mod = AvgPoolRealElements(k, st, sides)
        else:  # the padding counts (or there is none): zeros in every window
            mod = nn.Sequential(Pad(sides), nn.AvgPool2d(k, st))
        return mod, out
    if op == "zeropad":  # 'same': the pads of the window `kernel` / `stride` that follows
        k = _pair(attrs.get("kernel"), (1, 1))
        st = _pair(attrs.get("stride"), (1, 1))
        t, b, l, r = sides = _resolve_padding(attrs["padding"], s[1:], k, st)
        return Pad(sides), (s[0], s[1] + t + b, s[2] + l + r)
    if op == "crop":
        t, b, l, r = sides = _sides(attrs["cropping"])
        return Crop(sides), (s[0], s[1] - t - b, s[2] - l - r)
    if op == "global_avgpool":
        return nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten()), (s[0],)
    if op == "flatten":
        return nn.Flatten(), (math.prod(s),)
    if op == "dropout":
        return nn.Dropout(float(attrs.get("rate", 0.5))), s
    if op == "upsample":
        f = _pair(attrs.get("factor"), (2, 2))
        mode = attrs.get("mode", "nearest")
        up = (nn.Upsample(scale_factor=f, mode="bilinear", align_corners=False) if mode == "bilinear"
              else nn.Upsample(scale_factor=f, mode="nearest"))
        return up, (s[0], s[1] * f[0], s[2] * f[1])
    if op == "add":
        return None, s
    if op == "concat":
        return None, (sum(x[0] for x in in_shapes),) + tuple(s[1:])
    raise ConfigError(f"layer '{where}': op '{op}' has no PyTorch translation in this benchmark")


class Segment(nn.Module):
    """Layers run in order over a dict of live values; one value in, one value out."""

    def __init__(self, layers, mods, inp, outp):
        super().__init__()
        self.layers = layers  # [(name, op, inputs)]
        self.mods = mods      # nn.ModuleDict keyed by sanitized names
        self.inp, self.outp = inp, outp

    def forward(self, x):
        vals = {self.inp: x}
        for name, op, ins, key in self.layers:
            args = [vals[i] for i in ins]
            if op == "add":
                y = args[0]
                for a in args[1:]:
                    y = y + a
            elif op == "concat":
                y = torch.cat(args, dim=1)
            else:
                y = self.mods[key](args[0])
            vals[name] = y
        return vals[self.outp]


def build_segments(cfg, path):
    """The model as an nn.Sequential of Segments, cut wherever a single value is live."""
    layers = flatten_layers(cfg, path)
    shapes = {"input": tuple(cfg["input"])}
    mods = {}
    last_use = {}
    for i, (_, _, ins, _) in enumerate(layers):
        for x in ins:
            last_use[x] = i
    for full, op, ins, attrs in layers:
        mod, shapes[full] = make_layer(op, attrs, [shapes[x] for x in ins], full)
        if mod is not None:
            mods[full] = mod
    defined_at = {"input": -1}
    defined_at.update({full: i for i, (full, _, _, _) in enumerate(layers)})
    segments = []
    cur, cur_in = [], "input"
    for i, (full, op, ins, _) in enumerate(layers):
        key = full.replace(".", "_")
        cur.append((full, op, ins, key))
        live = {x for x, j in last_use.items() if j > i and defined_at[x] <= i and x != full}
        if not live:  # only this layer's output crosses the cut
            md = nn.ModuleDict({k: mods[n] for n, _, _, k in cur if n in mods})
            segments.append(Segment(cur, md, cur_in, full))
            cur, cur_in = [], full
    if cur:
        raise ConfigError(f"{path}: the last layer does not end the graph")
    return nn.Sequential(*segments)


def forward_flops(cfg, path, batch):
    """Multiply-adds x 2 of the forward convolutions and dense layers (the usual FLOP count)."""
    layers = flatten_layers(cfg, path)
    shapes = {"input": tuple(cfg["input"])}
    flops = 0
    for full, op, ins, attrs in layers:
        _, out = make_layer(op, attrs, [shapes[x] for x in ins], full)
        if op == "conv2d":
            k = _pair(attrs.get("kernel"), (1, 1))
            cin = shapes[ins[0]][0] // int(attrs.get("groups", 1))
            flops += 2 * batch * math.prod(out) * cin * k[0] * k[1]
        elif op == "dense":
            flops += 2 * batch * shapes[ins[0]][0] * out[0]
        shapes[full] = out
    return flops


def remat_state(model):
    """{remat name ('conv1.weight', 'bn1.running_mean'): the module's tensor} for a model
    build_segments made: the names and PyTorch layouts remat's checkpoints and `export` use.
    (BatchNorm's num_batches_tracked has no remat counterpart and is left out.)"""
    out = {}
    for seg in model:
        for full, _op, _ins, key in seg.layers:
            if key not in seg.mods:
                continue
            mod = seg.mods[key]
            if isinstance(mod, nn.Sequential):  # ((pad,) conv or linear, activation)
                mod = next((m for m in mod if isinstance(m, (nn.Conv2d, nn.Linear))), mod)
            for name, t in list(mod.named_parameters(recurse=False)) + list(mod.named_buffers(recurse=False)):
                if name != "num_batches_tracked":
                    out[f"{full}.{name}"] = t
    return out


_ST_DTYPES = {"F32": (torch.float32, 4), "I32": (torch.int32, 4), "BF16": (torch.bfloat16, 2)}


def read_safetensors(path):
    """({name: tensor}, metadata) of a safetensors file (the format's own layout: an 8-byte
    little-endian header length, a JSON header, the data), without the safetensors package."""
    import json
    import struct
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__", {})
    data = blob[8 + n:]
    out = {}
    for name, h in header.items():
        dtype, size = _ST_DTYPES[h["dtype"]]
        begin, end = h["data_offsets"]
        count = math.prod(h["shape"]) if h["shape"] else 1
        if end - begin != count * size:
            raise ConfigError(f"{path}: tensor '{name}' has {end - begin} bytes for shape {h['shape']}")
        t = torch.frombuffer(bytearray(data[begin:end]), dtype=dtype) if count else torch.empty(0, dtype=dtype)
        out[name] = t.reshape(h["shape"])
    return out, meta


def load_remat_safetensors(model, path):
    """Copies the weights `export` wrote (or a checkpoint's parameters and buffers) into a model
    build_segments made from the same YAML. Every tensor of the model must be in the file with
    its shape; file tensors the model lacks are an error unless they are optimizer state of a
    checkpoint (".momentum", ".adam_m", ...). Returns the names loaded."""
    tensors, _meta = read_safetensors(path)
    state = remat_state(model)
    missing = [n for n in state if n not in tensors]
    if missing:
        raise ConfigError(f"{path}: no tensor for {missing[:5]} (of {len(missing)} missing)")
    extra = [n for n in tensors if n not in state and n.rsplit(".", 1)[0] not in state]
    if extra:
        raise ConfigError(f"{path}: tensors the model does not have: {extra[:5]}")
    with torch.no_grad():
        for name, t in state.items():
            src = tensors[name]
            if tuple(src.shape) != tuple(t.shape):
                raise ConfigError(f"{path}: tensor '{name}' is {list(src.shape)}, the model's {list(t.shape)}")
            t.copy_(src.to(t.dtype))
    return list(state)
