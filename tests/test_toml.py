"""The TOML reader with locations (hopbench/_toml.py): what bad bytes read as."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hopbench import ProfileError, load_profile


def test_toml_a_byte_order_mark_is_named_with_its_cure(tmp_path: Path) -> None:
    # a Windows editor's "UTF-8 with BOM": tomllib said only "Invalid statement"
    path = tmp_path / "bom.toml"
    path.write_bytes(b"\xef\xbb\xbf[run]\nduration_s = 3\n")
    with pytest.raises(ProfileError) as e:
        load_profile(path)
    assert str(e.value).startswith(f"{path}:1: ")
    assert "byte order mark" in str(e.value) and "without a BOM" in str(e.value)


def test_toml_validate_names_the_byte_order_mark_and_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "bom.toml"
    path.write_bytes(b"\xef\xbb\xbf" + (Path(__file__).parents[1] / "profiles" / "smoke.toml").read_bytes())
    proc = subprocess.run([sys.executable, "-m", "hopbench", "validate", str(path)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2
    assert "byte order mark" in proc.stderr and "Traceback" not in proc.stderr
