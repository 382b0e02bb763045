"""`sluice --version`: exit 0 and the build's facts, one per line: the
version CMakeLists.txt's project() declares with the git commit, the build
type and options, and whether the CUDA backend was built."""
import re
import subprocess

from paths import BUILD, REPO, SLUICE


def cmake_version():
    m = re.search(r"project\(sluice\s+VERSION\s+([0-9.]+)", (REPO / "CMakeLists.txt").read_text())
    assert m, "CMakeLists.txt has no project(sluice VERSION ...)"
    return m.group(1)


def cuda_built():
    cache = BUILD / "CMakeCache.txt"
    return cache.is_file() and re.search(r"^SLUICE_CUDA:BOOL=(ON|TRUE|1)$", cache.read_text(), re.M) is not None


def test_version_names_release_commit_and_cuda():
    r = subprocess.run([SLUICE, "--version"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 3, r.stdout
    # the commit is the tree's at build time: 12 hex digits, -dirty for
    # uncommitted changes, "unknown" when built outside a git checkout
    m = re.fullmatch(r"sluice (\S+) \(commit ([0-9a-f]{12}(?:-dirty)?|unknown)\)", lines[0])
    assert m, lines[0]
    assert m.group(1) == cmake_version()
    assert lines[1].startswith("build: "), lines[1]
    want = "cuda: built" if cuda_built() else "cuda: not built"
    assert lines[2].startswith(want), lines[2]


def test_version_is_also_a_command():
    a = subprocess.run([SLUICE, "--version"], capture_output=True, text=True, timeout=10)
    b = subprocess.run([SLUICE, "version"], capture_output=True, text=True, timeout=10)
    assert b.returncode == 0 and a.stdout == b.stdout


def test_commit_can_come_from_the_environment(tmp_path):
    # a source tree without .git (the container build) names its commit this way
    out = tmp_path / "build_info.c"
    r = subprocess.run(["cmake", f"-DSRC={tmp_path}", f"-DOUT={out}", "-DVERSION=1.2.3", "-DBUILD_TYPE=Release",
                        "-DOPTIONS=", "-DCUDA=OFF", "-P", str(REPO / "cmake" / "build_info.cmake")],
                       env={"PATH": "/usr/bin:/bin", "SLUICE_BUILD_COMMIT": "0123456789ab"},
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert 'sl_build_commit[] = "0123456789ab"' in out.read_text()
    r = subprocess.run(["cmake", f"-DSRC={tmp_path}", f"-DOUT={out}", "-DVERSION=1.2.3", "-DBUILD_TYPE=Release",
                        "-DOPTIONS=", "-DCUDA=OFF", "-P", str(REPO / "cmake" / "build_info.cmake")],
                       env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and 'sl_build_commit[] = "unknown"' in out.read_text()
