"""deploy/systemd: sluice.service passes `systemd-analyze verify` with no
warning (ExecStart pointed at the binary under test in a copy), stays well
hardened by `systemd-analyze security`'s measure, stops later than the
drain of sluice.conf ends, keeps the admin socket in its RuntimeDirectory;
and the real server accepts sluice.conf."""
import re
import shutil
import subprocess

import pytest

from deploy_files import assert_served_from, parse_config
from paths import REPO, SLUICE

UNIT = REPO / "deploy" / "systemd" / "sluice.service"
CONF = REPO / "deploy" / "systemd" / "sluice.conf"
INSTALLED_BINARY = "/usr/local/bin/sluice"
# systemd-analyze security's 0-10 exposure scale (lower is better); the unit
# scored 1.7 with systemd 252: a change that loosens it fails here
EXPOSURE_MAX = 2.5


def service_settings():
    """The [Service] section's Key -> [values]."""
    out, section = {}, None
    for line in UNIT.read_text().splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line
        elif section == "[Service]" and line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out.setdefault(key, []).append(value)
    return out


@pytest.fixture
def unit_copy(tmp_path):
    """The unit with ExecStart naming the binary under test (verify checks
    that the executable exists)."""
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is missing (Debian package systemd)")
    text = UNIT.read_text()
    assert INSTALLED_BINARY in text
    copy = tmp_path / "sluice.service"
    copy.write_text(text.replace(INSTALLED_BINARY, SLUICE))
    return copy


def test_unit_verifies_without_warnings(unit_copy):
    r = subprocess.run(["systemd-analyze", "verify", str(unit_copy)], capture_output=True, text=True, timeout=20)
    assert r.returncode == 0 and r.stdout == "" and r.stderr == "", r.stdout + r.stderr


def test_unit_is_hardened(unit_copy):
    r = subprocess.run(["systemd-analyze", "security", "--offline=yes", "--no-pager", str(unit_copy)],
                       capture_output=True, text=True, timeout=20)
    if r.returncode != 0 and "offline" in r.stderr:
        pytest.skip("this systemd-analyze has no --offline (systemd < 250)")
    m = re.search(r"Overall exposure level for \S+: ([0-9.]+)", r.stdout)
    assert m, r.stdout + r.stderr
    assert float(m.group(1)) <= EXPOSURE_MAX, r.stdout


def test_stop_timeout_outlasts_the_drain():
    svc, conf = service_settings(), parse_config(CONF.read_text())
    assert svc["ExecStart"] == [f"{INSTALLED_BINARY} serve --config /etc/sluice/sluice.conf"]
    assert svc["KillSignal"] == ["SIGTERM"] and svc["KillMode"] == ["mixed"]
    drain = int(conf["drain-delay"]) + int(conf["drain-timeout"])
    assert int(svc["TimeoutStopSec"][0]) > drain, (svc["TimeoutStopSec"], drain)
    assert svc["RestartPreventExitStatus"] == ["2"] and svc["Restart"] == ["on-failure"]


def test_admin_socket_is_in_the_runtime_directory():
    svc, conf = service_settings(), parse_config(CONF.read_text())
    assert conf["admin-socket"].startswith(f"/run/{svc['RuntimeDirectory'][0]}/")


def test_the_server_accepts_sluice_conf(tmp_path):
    assert_served_from(CONF, tmp_path)
