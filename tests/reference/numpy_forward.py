"""A float64 numpy forward pass for the llama, qwen2 and qwen3 architectures
that reads a GGUF file only through the `gguf` package (its reader and its
reference dequantizers). This is the engine's reference: nothing in it comes
from sluice's C code."""
import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def _field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    v = f.parts[f.data[0]]
    if f.types[0].name == "STRING":
        return bytes(v).decode()
    return v.tolist()[0]


class Model:
    def __init__(self, path):
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
        self.neox = a in ("qwen2", "qwen3")
        self.t = {}
        for t in r.tensors:
            w = dequantize(t.data, t.tensor_type).astype(np.float64)
            shape = [int(x) for x in reversed(t.shape.tolist())]
            self.t[t.name] = w.reshape(shape)
        self.output = self.t.get("output.weight", self.t["token_embd.weight"])

    def _rope(self, x, pos):
        # x: (T, H, D)
        half = self.n_rot // 2
        inv = self.rope_base ** (-2.0 * np.arange(half) / self.n_rot)
        if "rope_freqs.weight" in self.t:
            inv = inv / self.t["rope_freqs.weight"]
        ang = pos[:, None] * inv[None, :]           # (T, half)
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
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
        H, KV, D = self.n_head, self.n_head_kv, self.head_dim
        mask = np.triu(np.full((T, T), -np.inf), 1)
        for l in range(self.n_layer):
            p = f"blk.{l}."
            g = lambda n: self.t[p + n]
            h = self._norm(x, g("attn_norm.weight"))
            q, k, v = h @ g("attn_q.weight").T, h @ g("attn_k.weight").T, h @ g("attn_v.weight").T
            if p + "attn_q.bias" in self.t:
                q, k, v = q + g("attn_q.bias"), k + g("attn_k.bias"), v + g("attn_v.bias")
            q, k, v = q.reshape(T, H, D), k.reshape(T, KV, D), v.reshape(T, KV, D)
            if p + "attn_q_norm.weight" in self.t:
                q = self._norm(q, g("attn_q_norm.weight"))
                k = self._norm(k, g("attn_k_norm.weight"))
            q, k = self._rope(q, pos), self._rope(k, pos)
            rep = H // KV
            k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
            s = np.einsum("thd,shd->hts", q, k) / np.sqrt(D) + mask
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            s /= s.sum(axis=-1, keepdims=True)
            att = np.einsum("hts,shd->thd", s, v).reshape(T, H * D)
            x = x + att @ g("attn_output.weight").T
            h = self._norm(x, g("ffn_norm.weight"))
            gate, up = h @ g("ffn_gate.weight").T, h @ g("ffn_up.weight").T
            x = x + (gate / (1 + np.exp(-gate)) * up) @ g("ffn_down.weight").T
        return self._norm(x, self.t["output_norm.weight"]) @ self.output.T
