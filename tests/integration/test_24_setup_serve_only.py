"""`tools/setup.sh --serve-only`: the Debian packages it installs hold no
test toolchain and are the full setup's but for python3-pip, and the build it runs
(SLUICE_TESTS=OFF) configures with only the serving libraries' pkg-config
files: criterion is needed by the unit tests alone."""
import shutil
import subprocess

import pytest

from paths import REPO

SETUP = str(REPO / "tools" / "setup.sh")
TEST_TOOLCHAIN = {"libcriterion-dev", "clang", "libclang-rt-14-dev", "valgrind", "haproxy", "prometheus",
                  "python3-venv", "yamllint", "systemd", "chromium", "chromium-driver"}
# the pkg-config modules the server's CMake files require (CMakeLists.txt, frontend/)
SERVING_MODULES = ("jansson", "libpcre2-8", "libh2o-evloop")


def packages(*args):
    r = subprocess.run([SETUP, *args, "--print-packages"], capture_output=True, text=True, timeout=20)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def test_serve_only_installs_no_test_toolchain():
    serve, full = packages("--serve-only"), packages()
    assert serve and not TEST_TOOLCHAIN & set(serve), serve
    assert TEST_TOOLCHAIN <= set(full)
    # pip for tools/fetch-models.py is the one package the full setup gets from its .venv instead
    assert set(serve) - set(full) == {"python3-pip"}, set(serve) - set(full)


def test_unknown_option_is_refused():
    r = subprocess.run([SETUP, "--serve-onyl"], capture_output=True, text=True, timeout=20)
    assert r.returncode == 2 and "unknown option --serve-onyl" in r.stderr


def test_the_build_without_tests_needs_only_the_serving_libraries(tmp_path):
    if shutil.which("pkg-config") is None:
        pytest.skip("pkg-config is missing")
    pc = tmp_path / "pkgconfig"
    pc.mkdir()
    for m in SERVING_MODULES:
        d = subprocess.run(["pkg-config", "--variable", "pcfiledir", m], capture_output=True, text=True)
        if d.returncode != 0:
            pytest.fail(f"pkg-config module {m} is not installed (tools/setup.sh installs it)")
        (pc / f"{m}.pc").symlink_to(f"{d.stdout.strip()}/{m}.pc")
    env = {"PATH": "/usr/bin:/bin", "PKG_CONFIG_LIBDIR": str(pc), "HOME": str(tmp_path)}

    def configure(tests):
        return subprocess.run(["cmake", "-S", str(REPO), "-B", str(tmp_path / f"build-{tests}"),
                               "-DCMAKE_BUILD_TYPE=Release", f"-DSLUICE_TESTS={tests}"],
                              capture_output=True, text=True, env=env, timeout=60)

    r = configure("OFF")
    assert r.returncode == 0, r.stdout + r.stderr
    # the same pkg-config view with the tests on does miss criterion: the check is not vacuous
    r = configure("ON")
    assert r.returncode != 0 and "criterion" in r.stdout + r.stderr
