#!/usr/bin/env python3
"""tools/train/export.py: trained weights -> GGUF files sluice loads.

Runs at the end of train.py (on the GPU machine, with the carried `gguf`
wheel) or by hand on a checkpoint train.py saved:
    python3 tools/train/export.py --ckpt OUT/model.npz --vocab .train/vocab.gguf --out OUT

Writes <name>-f16.gguf (2-D weights F16, norms F32) and <name>-q8_0.gguf (2-D
weights Q8_0 through gguf.quants, norms F32). The layout is llama.cpp's
`llama` architecture with tied embeddings (no output.weight). Rope is the
adjacent-pair rotation sluice and llama.cpp apply to `llama` files, which
train.py trains with directly, so q/k rows are written unpermuted.
Tokenizer keys are copied verbatim from the vocab GGUF that build/tools/mkvocab
wrote from Mistral's tokenizer.json, so the file tokenizes exactly as sluice
expects; the chat template is our own (below): the model saw plain text only.
"""
import argparse
import json
import os

import numpy as np

# Plain paragraphs: a turn's text, then a blank line; an assistant turn ends
# with </s>, which the model learnt at the end of every document, and <s>
# opens the first turn and each turn after an assistant's, as it opened every
# training document. Mistral's [INST] template would feed the model markers
# it never saw in training.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first or messages[loop.index0 - 1]['role'] == 'assistant' %}{{ bos_token }}{% endif %}"
    "{% if message['role'] == 'assistant' %}{{ message['content'] + eos_token }}"
    "{% else %}{{ message['content'] + '\\n\\n' }}{% endif %}"
    "{% endfor %}"
)


def copy_tokenizer_keys(gguf, writer, vocab_path):
    """Copies every tokenizer.* key of vocab_path into writer, same types."""
    r = gguf.GGUFReader(vocab_path)
    VT = gguf.GGUFValueType
    for name, f in r.fields.items():
        if not name.startswith("tokenizer.") or name == "tokenizer.chat_template":
            continue
        vtype = VT(int(f.types[0]))
        if vtype == VT.ARRAY:
            sub = VT(int(f.types[1]))
            if sub == VT.STRING:
                val = [bytes(f.parts[i]).decode("utf-8") for i in f.data]
            else:
                val = [f.parts[i].tolist()[0] for i in f.data]
            writer.add_key_value(name, val, vtype, sub_type=sub)
        elif vtype == VT.STRING:
            writer.add_key_value(name, bytes(f.parts[f.data[0]]).decode("utf-8"), vtype)
        else:
            writer.add_key_value(name, f.parts[f.data[0]].tolist()[0], vtype)


def export(weights, cfg, vocab_path, out_path, qtype, info=None):
    """weights: GGUF tensor name -> float32 array shaped (ne1, ne0) like a
    torch Linear weight (out, in); cfg: the model config of train.py."""
    import gguf

    GT = gguf.GGMLQuantizationType
    w = gguf.GGUFWriter(out_path, "llama")
    w.add_name(cfg.get("name", "sluice-default"))
    w.add_context_length(cfg["ctx"])
    w.add_embedding_length(cfg["dim"])
    w.add_block_count(cfg["n_layer"])
    w.add_feed_forward_length(cfg["ffn"])
    w.add_head_count(cfg["n_head"])
    w.add_head_count_kv(cfg["n_kv_head"])
    w.add_key_length(cfg["head_dim"])
    w.add_value_length(cfg["head_dim"])
    w.add_layer_norm_rms_eps(cfg["norm_eps"])
    w.add_rope_freq_base(cfg["rope_base"])
    w.add_rope_dimension_count(cfg["head_dim"])
    w.add_file_type(1 if qtype == "F16" else 7)  # llama.cpp's LLAMA_FTYPE_MOSTLY_F16 / _Q8_0
    if info:
        w.add_string("general.description", info)
    copy_tokenizer_keys(gguf, w, vocab_path)
    w.add_chat_template(CHAT_TEMPLATE)
    for name in sorted(weights, key=tensor_order):
        a = np.ascontiguousarray(weights[name], dtype=np.float32)
        if a.ndim == 1:
            w.add_tensor(name, a)
        elif qtype == "F16":
            w.add_tensor(name, a.astype(np.float16))
        else:
            w.add_tensor(name, gguf.quants.quantize(a, GT.Q8_0), raw_dtype=GT.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def tensor_order(name):
    """token_embd, the blocks in order, output_norm: llama.cpp's order."""
    if name.startswith("blk."):
        return (1, int(name.split(".")[1]), name)
    return (0 if name.startswith("token_embd") else 2, 0, name)


def export_all(weights, cfg, vocab_path, out_dir, info=None):
    base = cfg.get("file_stem", "sluice-default")
    paths = []
    for qtype, suffix in (("F16", "f16"), ("Q8_0", "q8_0")):
        p = os.path.join(out_dir, f"{base}-{suffix}.gguf")
        export(weights, cfg, vocab_path, p, qtype, info)
        paths.append(p)
    return paths


def load_gguf(path):
    """Weights (float32, shaped (ne1, ne0)) and train.py's config back from an
    exported F16/F32 file: what parity.py checks against sluice."""
    import gguf

    r = gguf.GGUFReader(path)

    def val(key):
        f = r.fields[key]
        return f.parts[f.data[0]].tolist()[0]

    cfg = {"ctx": val("llama.context_length"), "dim": val("llama.embedding_length"),
           "n_layer": val("llama.block_count"), "ffn": val("llama.feed_forward_length"),
           "n_head": val("llama.attention.head_count"), "n_kv_head": val("llama.attention.head_count_kv"),
           "head_dim": val("llama.attention.key_length"), "norm_eps": val("llama.attention.layer_norm_rms_epsilon"),
           "rope_base": val("llama.rope.freq_base"), "vocab": 32000, "dropout": 0.0}
    weights = {}
    for t in r.tensors:
        a = np.asarray(t.data)
        if a.dtype not in (np.float16, np.float32):
            raise ValueError(f"{path}: tensor {t.name} is not F16/F32; pass the F16 file")
        weights[t.name] = a.astype(np.float32).reshape([int(n) for n in reversed(t.shape)])
    cfg["vocab"] = weights["token_embd.weight"].shape[0]
    return weights, cfg


def split_file(path, part_bytes):
    """Cuts path into path.part0, .part1, ... of part_bytes each (the GPU
    machine hands back files of at most 16 MiB); `cat path.part*` rejoins."""
    paths = []
    with open(path, "rb") as fh:
        i = 0
        while True:
            chunk = fh.read(part_bytes)
            if not chunk:
                break
            paths.append(f"{path}.part{i}")
            with open(paths[-1], "wb") as out:
                out.write(chunk)
            i += 1
    os.remove(path)
    return paths


def load_ckpt(path):
    z = np.load(path)
    cfg = json.loads(str(z["__config__"]))
    return {k: z[k] for k in z.files if k != "__config__"}, cfg


def main():
    ap = argparse.ArgumentParser(description="export a train.py checkpoint to GGUF (F16 and Q8_0)")
    ap.add_argument("--ckpt", required=True, help="model.npz written by train.py")
    ap.add_argument("--vocab", required=True, help="vocab.gguf written by prepare.py")
    ap.add_argument("--out", required=True, help="output folder")
    args = ap.parse_args()
    weights, cfg = load_ckpt(args.ckpt)
    os.makedirs(args.out, exist_ok=True)
    for p in export_all(weights, cfg, args.vocab, args.out):
        print(f"export: wrote {p} ({os.path.getsize(p) / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
