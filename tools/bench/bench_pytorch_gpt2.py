# A remat GPT-2 YAML (configs/gpt2*.yaml) as a nanoGPT-style PyTorch module, for
# tools/bench/bench_pytorch.py: the same hyperparameters (vocabulary, sequence, layers, width,
# heads, MLP width, dropout rates, init std, layernorm eps), the same parameters (q, k and v as
# three linears, the lm head tied to the token embedding) and the same AdamW decay rule, so that
# PyTorch and remat train the same network. Attention is torch's fused
# F.scaled_dot_product_attention(is_causal=True) where it exists (PyTorch 2), otherwise the
# explicit masked softmax remat's YAML spells out (PyTorch 1.x).
# The model is an nn.Sequential of stages (embeddings, each block, final layernorm + head), so
# checkpoint_sequential can cut between blocks.
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

HAS_SDPA = hasattr(F, "scaled_dot_product_attention")


class ConfigError(Exception):
    pass


def is_gpt2(cfg):
    """A token model of the GPT-2 family: a `vocab` / `sequence` at the top, or an embedding."""
    if "vocab" in cfg or "sequence" in cfg:
        return True
    return any(layer.get("op") == "embedding" for layer in cfg.get("layers", []))


def gpt2_hparams(cfg, path):
    """The hyperparameters of a GPT-2 YAML, read from its layers:
    {vocab, T, C, heads, hidden, layers, eps, std_wte, std_wpe, std_qkv, std_proj, std_fc,
     std_mlp_proj, embd_drop, attn_drop, resid_drop, head_bias}."""
    top = cfg["layers"]
    ops = [x.get("op") for x in top]
    blocks = [x for x in top if "layers" in x]
    if len(blocks) != 1 or "embedding" not in ops:
        raise ConfigError(f"{path}: not a GPT-2 layout (an embedding, one repeated block, a head)")
    wte = top[ops.index("embedding")]
    wpe = top[ops.index("position_embedding")] if "position_embedding" in ops else None
    if wpe is None:
        raise ConfigError(f"{path}: no position_embedding")
    block = blocks[0]
    inner = block["layers"]
    linears = [x for x in inner if x.get("op") in ("linear", "dense")]
    # q, k and v as three linears split into heads, or packed in one (c_attn) under an attention
    # op with `heads` (Note [attention layouts] in ops/attention.h): the same model to PyTorch.
    packed = len(linears) == 4
    if packed:
        linears = [linears[0]] * 3 + linears[1:]
    if len(linears) != 6:
        raise ConfigError(f"{path}: a block should have 6 linears (q, k, v, proj, fc, proj) or 4 "
                          f"(c_attn, proj, fc, proj), has {len(linears)}")
    heads = {int(x["heads"]) for x in inner
             if x.get("op") == "split_heads" or (x.get("op") == "attention" and "heads" in x)}
    if len(heads) != 1:
        raise ConfigError(f"{path}: split_heads (or a packed attention) with one `heads` expected")
    # Dropout after the softmax (or the fused attention op's own `dropout`) is attention
    # dropout; any other in the block is residual.
    attn_drop, resid_drop = 0.0, 0.0
    for i, x in enumerate(inner):
        if x.get("op") == "attention":
            attn_drop = float(x.get("dropout", 0.0))
        if x.get("op") != "dropout":
            continue
        prev = inner[i - 1].get("op") if i > 0 and "inputs" not in x else None
        if prev == "softmax":
            attn_drop = float(x.get("rate", 0.5))
        else:
            resid_drop = float(x.get("rate", 0.5))
    embd = [x for x in top if x.get("op") == "dropout"]
    head = top[-1]
    if head.get("op") not in ("linear", "dense"):
        raise ConfigError(f"{path}: the last layer should be the lm head (a linear)")
    if "weight" not in head.get("share", {}):
        raise ConfigError(f"{path}: the lm head should share the token embedding's weight")
    norms = [x for x in inner + top if x.get("op") == "layernorm"]
    eps = {float(x.get("eps", 1e-5)) for x in norms}
    C = int(wte["dim"])
    hp = {"vocab": int(wte["vocab"]), "T": int(cfg.get("sequence", wpe["max_len"])), "C": C,
          "heads": heads.pop(), "hidden": int(linears[4]["units"]),
          "layers": int(block.get("repeat", 1)), "eps": eps.pop() if len(eps) == 1 else 1e-5,
          "std_wte": float(wte.get("init_std", 0.02)), "std_wpe": float(wpe.get("init_std", 0.02)),
          "std_qkv": [float(x.get("init_std", 0.02)) for x in linears[:3]],
          "std_proj": float(linears[3].get("init_std", 0.02)),
          "std_fc": float(linears[4].get("init_std", 0.02)),
          "std_mlp_proj": float(linears[5].get("init_std", 0.02)),
          "bias": [bool(x.get("bias", True)) for x in linears],
          "embd_drop": float(embd[0].get("rate", 0.5)) if embd else 0.0,
          "attn_drop": attn_drop, "resid_drop": resid_drop,
          "head_bias": bool(head.get("bias", True))}
    if hp["T"] > int(wpe["max_len"]):
        raise ConfigError(f"{path}: sequence {hp['T']} exceeds the position table {wpe['max_len']}")
    if packed and int(linears[0]["units"]) != 3 * C:
        raise ConfigError(f"{path}: c_attn should have 3 x {C} units")
    if any(int(x["units"]) != C for i, x in enumerate(linears)
           if i != 4 and not (packed and i < 3)):
        raise ConfigError(f"{path}: q, k, v and both projections should have {C} units")
    if C % hp["heads"]:
        raise ConfigError(f"{path}: dim {C} is not a multiple of {hp['heads']} heads")
    return hp


def _linear(cin, cout, std, bias):
    lin = nn.Linear(cin, cout, bias=bias)
    nn.init.normal_(lin.weight, 0.0, std)
    if bias:
        nn.init.zeros_(lin.bias)
    return lin


class Embeddings(nn.Module):
    def __init__(self, hp):
        super().__init__()
        self.wte = nn.Embedding(hp["vocab"], hp["C"])
        self.wpe = nn.Embedding(hp["T"], hp["C"])
        nn.init.normal_(self.wte.weight, 0.0, hp["std_wte"])
        nn.init.normal_(self.wpe.weight, 0.0, hp["std_wpe"])
        self.drop = nn.Dropout(hp["embd_drop"])

    def forward(self, idx):  # idx (B, T) int64 -> (B, T, C)
        pos = torch.arange(idx.shape[1], device=idx.device)
        return self.drop(self.wte(idx) + self.wpe(pos))


class Block(nn.Module):
    """Pre-LN: x + drop(proj(attn(ln_1(x)))), then x + drop(mlp_proj(gelu(fc(ln_2(x)))))."""

    def __init__(self, hp):
        super().__init__()
        C, b = hp["C"], hp["bias"]
        self.heads, self.attn_p = hp["heads"], hp["attn_drop"]
        self.ln_1 = nn.LayerNorm(C, eps=hp["eps"])
        self.q = _linear(C, C, hp["std_qkv"][0], b[0])
        self.k = _linear(C, C, hp["std_qkv"][1], b[1])
        self.v = _linear(C, C, hp["std_qkv"][2], b[2])
        self.attn_proj = _linear(C, C, hp["std_proj"], b[3])
        self.ln_2 = nn.LayerNorm(C, eps=hp["eps"])
        self.fc = _linear(C, hp["hidden"], hp["std_fc"], b[4])
        self.mlp_proj = _linear(hp["hidden"], C, hp["std_mlp_proj"], b[5])
        self.drop = nn.Dropout(hp["resid_drop"])
        self.probs_drop = nn.Dropout(hp["attn_drop"])

    def attention(self, x):  # (B, T, C) -> (B, T, C)
        B, T, C = x.shape
        h = self.heads

        def split(t):  # (B, T, C) -> (B, h, T, C / h)
            return t.view(B, T, h, C // h).transpose(1, 2)
        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        if HAS_SDPA:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.attn_p if self.training else 0.0,
                                               is_causal=True)
        else:  # the YAML's primitives: scaled scores, causal softmax, dropout, matmul
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // h))
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
            att = self.probs_drop(F.softmax(att.masked_fill(mask, float("-inf")), dim=-1))
            y = att @ v
        return y.transpose(1, 2).contiguous().view(B, T, C)

    def forward(self, x):
        x = x + self.drop(self.attn_proj(self.attention(self.ln_1(x))))
        return x + self.drop(self.mlp_proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh")))


class Head(nn.Module):
    """Final layernorm and the lm head, its weight the token embedding's."""

    def __init__(self, hp, wte):
        super().__init__()
        self.ln_f = nn.LayerNorm(hp["C"], eps=hp["eps"])
        self.lm_head = nn.Linear(hp["C"], hp["vocab"], bias=hp["head_bias"])
        self.lm_head.weight = wte.weight
        if hp["head_bias"]:
            nn.init.zeros_(self.lm_head.bias)

    def forward(self, x):  # (B, T, C) -> logits (B, T, vocab)
        return self.lm_head(self.ln_f(x))


def build_gpt2(cfg, path):
    """nn.Sequential(Embeddings, Block x layers, Head) of a GPT-2 YAML."""
    hp = gpt2_hparams(cfg, path)
    emb = Embeddings(hp)
    return nn.Sequential(emb, *[Block(hp) for _ in range(hp["layers"])], Head(hp, emb.wte))


def parameter_count(model):
    """Distinct parameters' elements (the tied lm head counts once), as remat counts them."""
    return sum(p.numel() for p in model.parameters())


def optimizer_groups(model, rule="weights"):
    """AdamW's parameter groups under remat's decay rule (ops/adam.cpp, Note [AdamW decay rule]):
    `weights` decays the linears' weights only, `matrices` adds the embedding tables, `all`
    decays everything. Returns [(params, decays)]."""
    emb = model[0]
    tables = {id(emb.wte.weight), id(emb.wpe.weight)}
    decay, keep = [], []
    for p in model.parameters():
        if rule == "all" or (p.dim() == 2 and (id(p) not in tables or rule == "matrices")):
            decay.append(p)
        else:
            keep.append(p)
    return [(decay, True), (keep, False)]


def forward_flops(cfg, path, batch):
    """Forward matmul FLOPs (2 x multiply-adds) of `batch` sequences: per layer and sequence the
    q, k, v, projection and MLP linears (2 T (4 C^2 + 2 C hidden)) and attention's scores and
    weighted sum (2 x 2 T^2 C, the full square as is usual), then the lm head (2 T C vocab)."""
    hp = gpt2_hparams(cfg, path)
    T, C, H, V = hp["T"], hp["C"], hp["hidden"], hp["vocab"]
    per_layer = 2 * T * (4 * C * C + 2 * C * H) + 2 * 2 * T * T * C
    return batch * (hp["layers"] * per_layer + 2 * T * C * V)
