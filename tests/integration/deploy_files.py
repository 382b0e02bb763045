"""Helpers for the tests of deploy/: read a `sluice serve --config` file, and
check that the real server accepts one, taking each of its settings from the
file."""
from paths import REPO
from serve import Server

DEFAULT_MODEL = REPO / "models" / "default" / "sluice-default-q8_0.gguf"
# what tests/integration/serve.py's Server passes as flags (which win over a file)
SERVER_FLAGS = {"model", "port", "frontends", "threads", "kv-memory", "admin-socket", "drain-delay",
                "drain-timeout"}


def parse_config(text):
    """The name -> value settings of a config file's text ('name = value'
    lines, '#' comment lines)."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.partition("=")
        assert sep, f"not a 'name = value' line: {line!r}"
        out[name.strip()] = value.strip()
    return out


def assert_served_from(conf_path, tmp_path):
    """Starts `sluice serve --config conf_path` on the shipped model (a free
    port, a private admin socket) and checks that every setting of the file
    that no flag overrides is in effect with source "file"."""
    settings = parse_config(conf_path.read_text())
    s = Server(DEFAULT_MODEL, tmp_path, frontends=1, extra=["--config", str(conf_path)])
    try:
        cfg = s.admin("effective-config")["config"]
        for name, value in settings.items():
            assert name in cfg, f"{conf_path.name}: {name} is not a sluice serve setting"
            if name not in SERVER_FLAGS:
                assert cfg[name] == {"value": value, "source": "file"}, (name, cfg[name])
    finally:
        s.stop()
