"""A float64 numpy forward pass for the llama, qwen2, qwen3, gemma2, gemma3,
granite and phi3 architectures and the mixture-of-experts qwen2moe, qwen3moe
and Mixtral (llama with llama.expert_count > 0), and gpt-oss, that reads a GGUF file only through the `gguf` package (its
reader and its reference dequantizers). This is the engine's reference:
nothing in it comes from sluice's C code. One exception: Q8_1, which the
package cannot read (its size table keeps the old 40-byte block_q8_1 with
float d and s; ggml's, and llama.cpp's, is 36 bytes with fp16 ones, and the
package has no Q8_1 dequantizer): the size is corrected below and x = d * qs
decoded here. Two: MXFP4 (type 39, gpt-oss's expert format), which gguf
packages before 0.18 do not know: the type is registered with the package
below (block of 32 in 17 bytes) and decoded here by its definition (ggml's
dequantize_row_mxfp4: the E2M1 values doubled, times 2^(e-128)).

Gemma, as llama.cpp computes it: embeddings times sqrt(n_embd); each
branch's output RMS-normed (post_attention_norm, post_ffw_norm) before its
residual add; gelu(gate) * up with GELU's tanh form; sliding-window layers
(gemma2: even layers, gemma3: all but every sixth) where position p sees
(p - window, p], at rope base 10000 on gemma3; gemma2 soft-caps attention
scores and the logits (cap * tanh(x / cap)). The norm weights are used as
stored: the converter already wrote 1 + w.

Granite, as llama.cpp computes it: llama's pass with the embeddings times
granite.embedding_scale, the scores times granite.attention.scale instead of
1/sqrt(head_dim), each block's attention and FFN output times
granite.residual_scale before its residual add, and the logits divided by
granite.logit_scale (each optional but logit_scale; absent or 0 = no change).

Phi-3: fused blk.N.attn_qkv (Q rows, then K, then V) and blk.N.ffn_up
(gate rows, then up rows), split here into the separate matrices; NEOX rope
over the first rope.dimension_count dims of each head. Longrope (any
architecture, as llama.cpp): each pair's frequency divided by
rope_factors_long when the context the model is run with (max_ctx, default
4096, fwdump's) exceeds rope.scaling.original_context_length, else by
rope_factors_short; cos and sin of every rotated pair times
rope.scaling.attn_factor.

Mixture of experts, as llama.cpp's build_moe_ffn: router logits
blk.N.ffn_gate_inp . x, softmax over all experts, the expert_used_count
largest (ties to the lower index), weights renormalised to sum 1 on
qwen3moe and Mixtral (not qwen2moe), each expert e computing
down_e(silu(gate_e x) * up_e x) from the 3-D tensors ffn_{gate,up,down}_exps
(numpy shape (n_expert, rows, cols)); qwen2moe adds the shared expert
ffn_{gate,up,down}_shexp times sigmoid(ffn_gate_inp_shexp . x).

gpt-oss, as llama.cpp computes it (src/models/openai-moe.cpp): q/k/v and
attn_output biases; per head a sink logit blk.N.attn_sinks joining each
softmax's denominator only; even layers slide (window
attention.sliding_window); NEOX rope with YaRN (below); the FFN input norm
is blk.N.post_attention_norm; the MoE router adds ffn_gate_inp.bias, takes
the expert_used_count largest logits (ties to the lower index) and softmaxes
over those; each expert adds its row of ffn_{gate,up,down}_exps.bias after
its matmul and activates with x * sigmoid(1.702 x) * (y + 1), x = min(gate,
7), y = clamp(up, -7, 7).

YaRN (rope.scaling.type yarn, any architecture), from its definition as
llama.cpp applies it: with s = 1 / rope.scaling.factor, pair i's angle is
pos * base^(-2i/n_rot) * (s + (1 - s) * r_i), where r_i = 1 - clip((i - lo) /
max(0.001, hi - lo), 0, 1), lo = max(0, floor(c(beta_fast))), hi =
min(n_rot - 1, ceil(c(beta_slow))), c(b) = n_rot * ln(n_ctx_orig / (2 pi b))
/ (2 ln base) (beta_fast 32, beta_slow 1), and cos and sin are multiplied by
1 + 0.1 ln(factor).

Before each weight matmul the input row is rounded the way llama.cpp (and the
engine by default) feeds it to a weight of that type: 8-bit Q8_0 blocks of 32
for Q4_0/Q8_0/Q5_0/IQ4_NL/Q8_1/MXFP4 weights, Q8_1 for Q4_1/Q5_1 (Q8_0's codes, and the weight's
block mins meet the activation block sum as ggml stores it: s = fp16(d *
sum(q))), Q8_K blocks of 256 for the K-quants, fp16 or bf16 for
F16/BF16 weights (quantized, then dequantized in float64). Model(path,
act_quant=False) gives the plain float64 pass (the engine's SLUICE_CPU_ACT=f32
path)."""
import numpy as np
from gguf import GGUFReader, GGML_QUANT_SIZES, GGMLQuantizationType
from gguf.quants import dequantize

GGML_QUANT_SIZES[GGMLQuantizationType.Q8_1] = (32, 2 + 2 + 32)   # see the module note

if not hasattr(GGMLQuantizationType, "MXFP4"):   # see the module note
    _mx = int.__new__(GGMLQuantizationType, 39)
    _mx._name_, _mx._value_ = "MXFP4", 39
    GGMLQuantizationType._value2member_map_[39] = _mx
    GGMLQuantizationType._member_map_["MXFP4"] = _mx
    GGML_QUANT_SIZES[_mx] = (32, 1 + 16)
MXFP4_VALUES = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=np.float64)

# Weight types with a per-block min (x = d*q + m), and their block bytes.
MIN_TYPES = {"Q4_1": 20, "Q5_1": 24}


def _q8_codes(x):
    """Q8_0/Q8_1 codes (..., n/32, 32) of rows x and each block's amax."""
    b = x.reshape(*x.shape[:-1], -1, 32)
    amax = np.abs(b).max(axis=-1, keepdims=True)
    inv = np.divide(127.0, amax, out=np.zeros_like(amax), where=amax > 0)
    return np.clip(np.rint(b * inv), -127, 127), amax


def q8_1_sum_error(x):
    """(..., n/32): the stored Q8_1 sum s = fp16(d * sum(q)) minus the sum of
    the dequantized codes, fp16(d) * sum(q): what ggml's Q4_1/Q5_1 dots add
    per unit of block min beyond the rounded activations' own dot."""
    q, amax = _q8_codes(x)
    d, qs = (amax / 127.0)[..., 0], q.sum(axis=-1)
    s = (d * qs).astype(np.float32).astype(np.float16).astype(np.float64)
    return s - d.astype(np.float16).astype(np.float64) * qs


def act_round(x, wtype):
    """Rows of x (..., n) quantized as ggml's activations for a weight of
    type `wtype` (a GGML type name), then dequantized, in float64."""
    if wtype in ("F16",):
        return x.astype(np.float32).astype(np.float16).astype(np.float64)
    if wtype in ("BF16",):
        u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
        u = ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
        return u.view(np.float32).astype(np.float64)
    if wtype in ("Q8_0", "Q4_0", "Q5_0", "Q4_1", "Q5_1", "IQ4_NL", "Q8_1", "MXFP4"):
        # d = amax/127 kept as fp16; q = nearest-even(x * 127/amax) (ggml's
        # x86 quantizer, the one llama.cpp runs on x86; Q8_1 has the same)
        q, amax = _q8_codes(x)
        return (q * (amax / 127.0).astype(np.float16).astype(np.float64)).reshape(x.shape)
    if wtype in ("Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_XS", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S",
                 "IQ1_S", "IQ1_M", "TQ1_0", "TQ2_0"):
        # the element of largest magnitude, sign kept, maps to -127;
        # q = min(127, nearest-even(iscale*x)), d = 1/iscale
        b = x.reshape(*x.shape[:-1], -1, 256)
        i = np.abs(b).argmax(axis=-1)[..., None]
        vmax = np.take_along_axis(b, i, axis=-1)
        iscale = np.divide(-127.0, vmax, out=np.zeros_like(vmax), where=vmax != 0)
        q = np.minimum(np.rint(iscale * b), 127)
        d = np.divide(1.0, iscale, out=np.zeros_like(iscale), where=iscale != 0)
        return (q * d).reshape(x.shape)
    return x


def _mxfp4(data):
    """MXFP4 blocks (e, 16 bytes of nibbles) in float64: exact, as each value
    is a small integer times a power of two."""
    b = np.asarray(data, dtype=np.uint8).reshape(-1, 17)
    d = np.ldexp(1.0, b[:, 0].astype(np.int64) - 128)[:, None]
    codes = np.concatenate([b[:, 1:] & 0xF, b[:, 1:] >> 4], axis=1)
    return (MXFP4_VALUES[codes] * d).reshape(-1)


def _dequantize(t):
    """The tensor's values in float64 (Q8_1 decoded here: d fp16, s fp16
    (ignored), 32 int8 codes per block; MXFP4 by _mxfp4)."""
    if t.tensor_type.name == "MXFP4":
        return _mxfp4(t.data)
    if t.tensor_type.name != "Q8_1":
        return dequantize(t.data, t.tensor_type).astype(np.float64)
    b = np.asarray(t.data, dtype=np.uint8).reshape(-1, 36)
    d = b[:, 0:2].copy().view(np.float16).astype(np.float32)
    return (b[:, 4:].view(np.int8).astype(np.float32) * d).astype(np.float64).reshape(-1)


def _field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    v = f.parts[f.data[0]]
    if f.types[0].name == "STRING":
        return bytes(v).decode()
    return v.tolist()[0]


class Model:
    def __init__(self, path, act_quant=True, max_ctx=4096):
        r = GGUFReader(path)
        self.arch = _field(r, "general.architecture")
        a = self.arch
        self.n_embd = _field(r, f"{a}.embedding_length")
        self.n_layer = _field(r, f"{a}.block_count")
        self.n_head = _field(r, f"{a}.attention.head_count")
        self.n_head_kv = _field(r, f"{a}.attention.head_count_kv", self.n_head)
        self.head_dim = _field(r, f"{a}.attention.key_length", self.n_embd // self.n_head)
        self.n_rot = _field(r, f"{a}.rope.dimension_count", self.head_dim)
        self.eps = _field(r, f"{a}.attention.layer_norm_rms_epsilon")
        self.rope_base = _field(r, f"{a}.rope.freq_base", 10000.0)
        self.n_ctx_orig = _field(r, f"{a}.rope.scaling.original_context_length", _field(r, f"{a}.context_length"))
        self.rope_mscale = _field(r, f"{a}.rope.scaling.attn_factor", 1.0)
        self.max_ctx = max_ctx
        self.neox = a in ("qwen2", "qwen3", "gemma2", "gemma3", "phi3", "qwen2moe", "qwen3moe", "gpt-oss")
        self.n_expert = _field(r, f"{a}.expert_count", 0) if a in ("llama", "qwen2moe", "qwen3moe", "gpt-oss") else 0
        self.n_expert_used = _field(r, f"{a}.expert_used_count", 0)
        self.moe_norm = a in ("llama", "qwen3moe")
        granite = (lambda k, d: (_field(r, f"granite.{k}", 0.0) or d)) if a == "granite" else (lambda k, d: d)
        self.embd_scale = granite("embedding_scale", 1.0)
        self.attn_scale = granite("attention.scale", 1.0 / np.sqrt(self.head_dim))
        self.residual_scale = granite("residual_scale", 1.0)
        self.logit_scale = granite("logit_scale", 1.0)
        self.gemma = a in ("gemma2", "gemma3")
        self.gptoss = a == "gpt-oss"
        self.window = (_field(r, f"{a}.attention.sliding_window", 4096 if a == "gemma2" else 0)
                       if self.gemma or self.gptoss else 0)
        self.yarn = None
        if _field(r, f"{a}.rope.scaling.type") == "yarn":
            self.yarn = (_field(r, f"{a}.rope.scaling.factor"),
                         _field(r, f"{a}.rope.scaling.yarn_beta_fast", 32.0),
                         _field(r, f"{a}.rope.scaling.yarn_beta_slow", 1.0))
        self.attn_cap = _field(r, f"{a}.attn_logit_softcapping", 50.0) if a == "gemma2" else 0.0
        self.final_cap = _field(r, f"{a}.final_logit_softcapping", 30.0) if a == "gemma2" else 0.0
        self.swa_base = 10000.0 if a == "gemma3" else self.rope_base
        self.act_quant = act_quant
        self.t, self.types, self.mins = {}, {}, {}
        for t in r.tensors:
            self.types[t.name] = t.tensor_type.name
            w = _dequantize(t)
            shape = [int(x) for x in reversed(t.shape.tolist())]
            self.t[t.name] = w.reshape(shape)
            if t.tensor_type.name in MIN_TYPES:
                # block min m: bytes 2-3 of each block (after d), fp16
                raw = np.asarray(t.data, dtype=np.uint8).reshape(-1, MIN_TYPES[t.tensor_type.name])
                m = raw[:, 2:4].copy().view(np.float16)[:, 0].astype(np.float64)
                self.mins[t.name] = m.reshape(*shape[:-1], -1)   # (..., rows, blocks)
        if a == "phi3":
            self._split_fused()
        out = "output.weight" if "output.weight" in self.t else "token_embd.weight"
        self.output = self.t[out]
        self.output_type = self.types[out]
        self.output_name = out

    def _split_fused(self):
        """phi3's fused matrices as the separate ones the pass reads (a row
        range of a quantized matrix is a matrix: its rows are independent)."""
        q, kv, E = self.n_head * self.head_dim, self.n_head_kv * self.head_dim, self.n_embd
        for l in range(self.n_layer):
            p = f"blk.{l}."
            parts = [("attn_qkv.weight", [("attn_q.weight", q), ("attn_k.weight", kv), ("attn_v.weight", kv)])]
            n_ff = self.t[p + "ffn_up.weight"].shape[0] // 2
            parts.append(("ffn_up.weight", [("ffn_gate.weight", n_ff), ("ffn_up.weight", n_ff)]))
            for fused, split in parts:
                if p + fused not in self.t:
                    continue
                w, wtype, mins = self.t.pop(p + fused), self.types.pop(p + fused), self.mins.pop(p + fused, None)
                assert w.shape == (sum(n for _, n in split), E), (fused, w.shape)
                r0 = 0
                for name, n in split:
                    self.t[p + name], self.types[p + name] = w[r0:r0 + n], wtype
                    if mins is not None:
                        self.mins[p + name] = mins[r0:r0 + n]
                    r0 += n

    def _mm(self, x, w, wtype, name=None, mins=None):
        """x @ w.T with x rounded as activations for a weight of type wtype
        (mins: the block mins of w when not self.mins[name], e.g. one expert's)."""
        if not self.act_quant:
            return x @ w.T
        y = act_round(x, wtype) @ w.T
        if wtype in MIN_TYPES:
            y = y + q8_1_sum_error(x) @ (self.mins[name] if mins is None else mins).T
        return y

    def _moe(self, h, p):
        """The MoE FFN of rows h (T, n_embd) in layer prefix p."""
        mm = lambda x, n, e=None: self._mm(x, self.t[p + n] if e is None else self.t[p + n][e], self.types[p + n],
                                           p + n, None if e is None else self.mins.get(p + n, [None] * (e + 1))[e])
        logits = mm(h, "ffn_gate_inp.weight")
        if self.gptoss:
            logits = logits + self.t[p + "ffn_gate_inp.bias"]
        pr = np.exp(logits - logits.max(axis=-1, keepdims=True))
        pr /= pr.sum(axis=-1, keepdims=True)
        k = self.n_expert_used
        out = np.zeros_like(h)
        bias = (lambda n, e: self.t[p + n][e]) if self.gptoss else (lambda n, e: 0.0)
        for t in range(h.shape[0]):
            order = sorted(range(self.n_expert), key=lambda e: (-pr[t, e], e))[:k]
            w = pr[t, order]
            if self.gptoss:   # softmax over the chosen k logits
                z = np.exp(logits[t, order] - logits[t, order].max())
                w = z / z.sum()
            if self.moe_norm:
                w = w / max(w.sum(), 6.103515625e-5)
            for e, we in zip(order, w):
                x = h[t:t + 1]
                gate = mm(x, "ffn_gate_exps.weight", e) + bias("ffn_gate_exps.bias", e)
                up = mm(x, "ffn_up_exps.weight", e) + bias("ffn_up_exps.bias", e)
                if self.gptoss:
                    g, u = np.minimum(gate, 7.0), np.clip(up, -7.0, 7.0)
                    act = g / (1 + np.exp(-1.702 * g)) * (u + 1)
                else:
                    act = gate / (1 + np.exp(-gate)) * up
                out[t] += we * (mm(act, "ffn_down_exps.weight", e)[0] + bias("ffn_down_exps.bias", e))
        if p + "ffn_down_shexp.weight" in self.t:
            gate, up = mm(h, "ffn_gate_shexp.weight"), mm(h, "ffn_up_shexp.weight")
            sh = mm(gate / (1 + np.exp(-gate)) * up, "ffn_down_shexp.weight")
            gi = mm(h, "ffn_gate_inp_shexp.weight")           # (T,)
            out = out + sh / (1 + np.exp(-gi))[:, None]
        return out

    def _slides(self, l):
        if not self.window:
            return False
        return l % 2 == 0 if self.arch in ("gemma2", "gpt-oss") else l % 6 < 5

    def _rope(self, x, pos, base=None):
        # x: (T, H, D)
        half = self.n_rot // 2
        inv = (base or self.rope_base) ** (-2.0 * np.arange(half) / self.n_rot)
        if "rope_freqs.weight" in self.t:
            inv = inv / self.t["rope_freqs.weight"]
        if "rope_factors_long.weight" in self.t:
            table = "long" if self.max_ctx > self.n_ctx_orig else "short"
            inv = inv / self.t[f"rope_factors_{table}.weight"]
        mscale = self.rope_mscale
        if self.yarn:
            factor, fast, slow = self.yarn
            base_ = base or self.rope_base
            c_ = lambda b: self.n_rot * np.log(self.n_ctx_orig / (2 * np.pi * b)) / (2 * np.log(base_))
            lo, hi = max(0.0, np.floor(c_(fast))), min(self.n_rot - 1.0, np.ceil(c_(slow)))
            r = 1 - np.clip((np.arange(half) - lo) / max(0.001, hi - lo), 0, 1)
            inv = inv * (r + (1 - r) / factor)
            mscale = mscale * (1 + 0.1 * np.log(factor))
        ang = pos[:, None] * inv[None, :]           # (T, half)
        c, s = np.cos(ang)[:, None, :] * mscale, np.sin(ang)[:, None, :] * mscale
        x = x.copy()
        if self.neox:
            a, b = x[..., :half].copy(), x[..., half:2 * half].copy()
            x[..., :half] = a * c - b * s
            x[..., half:2 * half] = a * s + b * c
        else:
            a, b = x[..., 0:2 * half:2].copy(), x[..., 1:2 * half:2].copy()
            x[..., 0:2 * half:2] = a * c - b * s
            x[..., 1:2 * half:2] = a * s + b * c
        return x

    def _norm(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def logits(self, tokens):
        """Logits (T, n_vocab) for every position of `tokens` (one sequence)."""
        T = len(tokens)
        pos = np.arange(T, dtype=np.float64)
        x = self.t["token_embd.weight"][np.array(tokens)]
        if self.gemma:
            x = x * np.sqrt(self.n_embd)
        x = x * self.embd_scale
        H, KV, D = self.n_head, self.n_head_kv, self.head_dim
        mask = np.triu(np.full((T, T), -np.inf), 1)
        # sliding window: key s is masked for query t when t - s >= window
        swa_mask = mask + np.where(np.subtract.outer(np.arange(T), np.arange(T)) >= max(self.window, 1), -np.inf, 0)
        for l in range(self.n_layer):
            p = f"blk.{l}."
            g = lambda n: self.t[p + n]
            h = self._norm(x, g("attn_norm.weight"))
            mm = lambda x, n: self._mm(x, g(n), self.types[p + n], p + n)
            q, k, v = mm(h, "attn_q.weight"), mm(h, "attn_k.weight"), mm(h, "attn_v.weight")
            if p + "attn_q.bias" in self.t:
                q, k, v = q + g("attn_q.bias"), k + g("attn_k.bias"), v + g("attn_v.bias")
            q, k, v = q.reshape(T, H, D), k.reshape(T, KV, D), v.reshape(T, KV, D)
            if p + "attn_q_norm.weight" in self.t:
                q = self._norm(q, g("attn_q_norm.weight"))
                k = self._norm(k, g("attn_k_norm.weight"))
            slides = self._slides(l)
            base = self.swa_base if slides else self.rope_base
            q, k = self._rope(q, pos, base), self._rope(k, pos, base)
            rep = H // KV
            k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
            s = np.einsum("thd,shd->hts", q, k) * self.attn_scale
            if self.attn_cap:
                s = self.attn_cap * np.tanh(s / self.attn_cap)
            s = s + (swa_mask if slides else mask)
            if self.gptoss:   # the sink: a logit per head in the denominator only
                sink = g("attn_sinks.weight")[:, None, None]
                mx = np.maximum(s.max(axis=-1, keepdims=True), sink)
                s = np.exp(s - mx)
                s /= s.sum(axis=-1, keepdims=True) + np.exp(sink - mx)
            else:
                s = np.exp(s - s.max(axis=-1, keepdims=True))
                s /= s.sum(axis=-1, keepdims=True)
            att = np.einsum("hts,shd->thd", s, v).reshape(T, H * D)
            o = mm(att, "attn_output.weight")
            if self.gptoss:
                o = o + g("attn_output.bias")
            x = x + (self._norm(o, g("post_attention_norm.weight")) if self.gemma else o) * self.residual_scale
            h = self._norm(x, g("post_attention_norm.weight" if self.gptoss else "ffn_norm.weight"))
            if self.n_expert:
                o = self._moe(h, p)
            else:
                gate, up = mm(h, "ffn_gate.weight"), mm(h, "ffn_up.weight")
                if self.gemma:
                    act = 0.5 * gate * (1 + np.tanh(np.sqrt(2 / np.pi) * (gate + 0.044715 * gate ** 3)))
                else:
                    act = gate / (1 + np.exp(-gate))
                o = mm(act * up, "ffn_down.weight")
            x = x + (self._norm(o, g("post_ffw_norm.weight")) if self.gemma else o) * self.residual_scale
        out = self._mm(self._norm(x, self.t["output_norm.weight"]), self.output, self.output_type,
                       self.output_name)
        if self.final_cap:
            out = self.final_cap * np.tanh(out / self.final_cap)
        return out / self.logit_scale
