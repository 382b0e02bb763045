"""`cmake --install`: the installed tree (PREFIX/bin/sluice,
PREFIX/share/sluice/models, PREFIX/lib/sluice for the CUDA backend) works on
its own. The installed binary, run from outside the source tree with an
empty home (so an empty model cache), uses the installed default model, and
looks for libsluice_cuda.so in PREFIX/lib/sluice."""
import os
import re
import shutil
import subprocess

import pytest

from paths import BUILD, REPO

SHIPPED = "sluice-default-q8_0.gguf"


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    if not (BUILD / "cmake_install.cmake").is_file():
        pytest.fail(f"{BUILD} is not a configured CMake build (cmake -S . -B build)")
    p = tmp_path_factory.mktemp("prefix")
    r = subprocess.run(["cmake", "--install", str(BUILD), "--prefix", str(p)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    return p


def bare_env(home):
    """The environment of a fresh login: HOME empty, no model cache or
    default-model override, nothing pointing back into the source tree."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("SLUICE_MODEL_CACHE", "XDG_CACHE_HOME", "SLUICE_DEFAULT_MODEL", "SLUICE_CUDA_LIB")}
    env["HOME"] = str(home)
    return env


def run_installed(prefix, tmp_path, *args):
    home = tmp_path / "home"
    work = tmp_path / "elsewhere"
    home.mkdir(exist_ok=True)
    work.mkdir(exist_ok=True)
    return subprocess.run([str(prefix / "bin" / "sluice"), *args], cwd=work, env=bare_env(home),
                          capture_output=True, text=True, timeout=60)


def test_install_lays_out_binary_models_and_backend(prefix):
    assert os.access(prefix / "bin" / "sluice", os.X_OK)
    shipped = sorted((REPO / "models" / "default").glob("*.gguf"))
    assert shipped, "models/default/*.gguf are missing from the checkout"
    for f in shipped:
        installed = prefix / "share" / "sluice" / "models" / f.name
        assert installed.is_file() and installed.stat().st_size == f.stat().st_size, installed
    if (BUILD / "libsluice_cuda.so").exists():
        assert (prefix / "lib" / "sluice" / "libsluice_cuda.so").is_file()
    else:
        assert not (prefix / "lib").exists()


def test_installed_binary_uses_the_installed_default_model(prefix, tmp_path):
    r = run_installed(prefix, tmp_path, "generate", "-p", "In the beginning", "-n", "8", "--temp", "0", "-t", "1")
    assert r.returncode == 0, r.stderr
    m = re.search(r"no -m given: using (\S+), the shipped 12M model", r.stderr)
    assert m, r.stderr
    assert os.path.samefile(m.group(1), prefix / "share" / "sluice" / "models" / SHIPPED)
    assert r.stdout.strip()


def test_installed_binary_without_a_model_says_so(prefix, tmp_path_factory, tmp_path):
    bare = tmp_path_factory.mktemp("bare-prefix")
    (bare / "bin").mkdir()
    shutil.copy(prefix / "bin" / "sluice", bare / "bin" / "sluice")
    r = run_installed(bare, tmp_path, "generate", "-p", "x", "-n", "1")
    assert r.returncode == 2 and "the default model is missing" in r.stderr, r.stderr


def test_installed_binary_looks_for_the_cuda_backend_in_lib_sluice(prefix, tmp_path_factory, tmp_path):
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler to build a stand-in libsluice_cuda.so")
    # a copy of the tree without the backend: the error names the folders searched
    tree = tmp_path_factory.mktemp("cuda-prefix")
    shutil.copytree(prefix, tree, dirs_exist_ok=True, ignore=shutil.ignore_patterns("libsluice_cuda.so"))
    r = run_installed(tree, tmp_path, "generate", "-p", "x", "-n", "1", "--device", "cuda")
    assert r.returncode != 0 and "not found next to" in r.stderr and "lib/sluice" in r.stderr, r.stderr
    # then a library without the backend's entry point in lib/sluice: the
    # error names that file, so the lookup reached it
    (tree / "lib" / "sluice").mkdir(parents=True, exist_ok=True)
    src = tmp_path / "stand_in.c"
    src.write_text("int sluice_stand_in;\n")
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(tree / "lib" / "sluice" / "libsluice_cuda.so"), str(src)],
                   check=True, timeout=60)
    r = run_installed(tree, tmp_path, "generate", "-p", "x", "-n", "1", "--device", "cuda")
    assert r.returncode != 0, r.stderr
    assert re.search(r"bin/\.\./lib/sluice/libsluice_cuda\.so lacks", r.stderr), r.stderr
