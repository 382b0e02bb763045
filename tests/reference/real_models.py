"""The two real GGUF models of the parity checks and their prompts: plain
text, or text with the model's special tokens recognised. Shared by
tests/reference/test_real_models.py (sluice's CPU backend against llama.cpp
here) and tools/real-parity.py (any backend, on any machine, against
llama.cpp later). The file names are tools/fetch-models.py's."""
import numpy as np

STEPS = 48   # greedy tokens per continuation

FILES = {
    "qwen2.5-coder-0.5b": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    "gemma-3-270m": "gemma-3-270m-q4_k_m.gguf",
}

MODELS = {
    "qwen2.5-coder-0.5b": {
        "specials": ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|fim_prefix|>", "<|fim_middle|>",
                     "<|fim_suffix|>", "<|repo_name|>", "<|file_sep|>"],
        "prompts": [
            ("plain", "def fibonacci(n):"),
            ("plain", "The capital of France is"),
            ("plain", "# A function that reverses a string in C\n"),
            ("special", "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
                        "Write a Python function that checks whether a number is prime.<|im_end|>\n"
                        "<|im_start|>assistant\n"),
            ("special", "<|im_start|>user\nWhat is a linked list?<|im_end|>\n<|im_start|>assistant\n"),
            ("plain", "SELECT name, COUNT(*) FROM users"),
            ("plain", "import numpy as np\n\nx = np.arange(10)\n"),
            ("plain", "Les trois couleurs du drapeau français sont"),
        ],
    },
    "gemma-3-270m": {
        "specials": ["<bos>", "<eos>", "<pad>", "<start_of_turn>", "<end_of_turn>", "<start_of_image>",
                     "<mask>"],
        "prompts": [
            ("plain", "The capital of France is"),
            ("plain", "Once upon a time, in a small village,"),
            ("plain", "I believe the meaning of life is"),
            ("plain", "def fibonacci(n):"),
            ("special", "<start_of_turn>user\nWhat is the tallest mountain?<end_of_turn>\n<start_of_turn>model\n"),
            ("plain", "The three primary colors are"),
            ("plain", "Water boils at"),
            ("plain", "Der schnellste Weg nach Berlin ist"),
        ],
    },
}


def first_logprob(llm, ids, tok):
    """llama.cpp's logprob of token `tok` after the prompt `ids`."""
    llm.reset()
    llm.eval(ids)
    row = np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float64)
    return float(row[tok] - np.logaddexp.reduce(row))


def open_llama(llama_cpp, path, f32_kv=False):
    """llama.cpp on `path` as every parity check runs it: 256 positions, 2
    threads, logits of every position; its default float16 KV cache, or a
    float32 one (the spread of its own rounding)."""
    kv = {"type_k": 0, "type_v": 0} if f32_kv else {}   # 0: GGML_TYPE_F32
    return llama_cpp.Llama(model_path=str(path), n_ctx=256, n_batch=256, n_threads=2, logits_all=True,
                           verbose=False, **kv)


def llama_greedy(llm, ids):
    """llama.cpp's STEPS greedy tokens after the prompt `ids`, and (first
    token, its logprob)."""
    llm.reset()
    llm.eval(ids)
    out = []
    first = None
    for _ in range(STEPS):
        row = np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float64)
        nxt = int(np.argmax(row))
        if first is None:
            first = (nxt, float(row[nxt] - np.logaddexp.reduce(row)))
        out.append(nxt)
        llm.eval([nxt])
    return out, first
