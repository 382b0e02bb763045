"""Session fixtures shared by the reference and integration tests."""
import subprocess

import pytest

from paths import data_path, tool


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="session")
def make_model(model_dir):
    """make_model(preset, type, **opts) -> path of a model written by mkmodel
    once per session (opts become --flags: n_vocab=1024 -> --n-vocab 1024)."""
    cache = {}

    def make(preset, qtype, **opts):
        key = (preset, qtype, tuple(sorted(opts.items())))
        if key not in cache:
            path = model_dir / f"m{len(cache)}-{preset}-{qtype}.gguf"
            cmd = [tool("mkmodel"), "-o", str(path), "--preset", preset, "--type", qtype]
            for k, v in opts.items():
                cmd += [f"--{k.replace('_', '-')}", str(v)]
            subprocess.run(cmd, check=True)
            cache[key] = path
        return cache[key]

    return make


@pytest.fixture(scope="session")
def qwen3_tokenizer():
    """mkmodel options for Qwen3's real tokenizer and chat template."""
    return dict(tokenizer=str(data_path("tokenizers/qwen3/tokenizer.json")),
                tokenizer_config=str(data_path("tokenizers/qwen3/tokenizer_config.json")))


@pytest.fixture(scope="session")
def chat_model(make_model, qwen3_tokenizer):
    """A tiny qwen3-shaped Q8_0 model with Qwen3's tokenizer and template, for
    the tests that run the real server."""
    return make_model("tiny-qwen3", "Q8_0", peak=4, **qwen3_tokenizer)
