"""AcquisitionPolicy: ceilings that can only be lowered, the env switch read once, narrowing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

from audiogate.acquire import (
    ABSOLUTE_MAX_BYTES,
    ALLOW_PRIVATE_MEDIA_URLS,
    PRIVATE_MEDIA_URLS_ENV,
    AcquisitionPolicy,
)
from audiogate.acquire.policy import env_flag


def test_defaults_are_mlxcels_ceilings_and_everything_risky_is_off():
    policy = AcquisitionPolicy()
    assert policy.max_clips == 16
    assert policy.max_bytes_per_clip == policy.max_bytes_per_request == 500 * 1024 * 1024
    assert policy.allow_url_fetch is False
    assert policy.media_root is None
    assert policy.allowed_hosts is None
    assert policy.https_only is False
    assert policy.max_redirects == 5
    assert (policy.total_timeout_s, policy.connect_timeout_s) == (10.0, 5.0)
    assert policy.allow_private_addresses is ALLOW_PRIVATE_MEDIA_URLS


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_clips", 17),
        ("max_clips", 0),
        ("max_clips", True),
        ("max_bytes_per_clip", ABSOLUTE_MAX_BYTES + 1),
        ("max_bytes_per_request", ABSOLUTE_MAX_BYTES + 1),
        ("max_bytes_per_request", 0),
        ("max_redirects", 6),
        ("max_redirects", -1),
        ("total_timeout_s", 0),
        ("connect_timeout_s", float("inf")),
        ("allow_url_fetch", 1),
        ("media_root", "relative/dir"),
        ("allowed_hosts", "example.com"),
        ("allowed_hosts", ("exa mple.com",)),
        ("allowed_hosts", ("a.*.com",)),
        ("allowed_hosts", ("münchen.de",)),
    ],
)
def test_out_of_range_fields_are_refused(field, value):
    with pytest.raises(ValueError, match=field if field != "allowed_hosts" else "allowed"):
        AcquisitionPolicy(**{field: value})


def test_allowed_hosts_are_normalized():
    policy = AcquisitionPolicy(
        allowed_hosts=["Media.Example.COM.", "*.CDN.example", "[2001:0DB8::1]", "media.example.com"]
    )
    assert policy.allowed_hosts == ("media.example.com", "*.cdn.example", "2001:db8::1")


def test_narrowed_takes_the_stricter_family_limits():
    pinned = pytest.importorskip("audiogate_gemma3n.policy").PINNED
    family = attrs.evolve(
        pinned,
        max_clips=3,
        max_encoded_bytes_per_clip=1000,
        max_encoded_bytes_per_request=1500,
    )
    narrowed = AcquisitionPolicy(allow_url_fetch=True, max_bytes_per_clip=800).narrowed(family)
    assert (narrowed.max_clips, narrowed.max_bytes_per_clip, narrowed.max_bytes_per_request) == (
        3,
        800,
        1500,
    )
    assert narrowed.allow_url_fetch is True
    # A family more generous than the absolute ceilings cannot raise them.
    roomy = attrs.evolve(family, max_clips=64, max_encoded_bytes_per_request=2 * ABSOLUTE_MAX_BYTES)
    wide = AcquisitionPolicy().narrowed(roomy)
    assert (wide.max_clips, wide.max_bytes_per_request) == (16, ABSOLUTE_MAX_BYTES)


@pytest.mark.parametrize(
    ("value", "on"),
    [
        ("1", True),
        ("true", True),
        (" TRUE ", True),
        ("On", True),
        ("yes\n", True),
        (None, False),
        ("", False),
        ("0", False),
        ("false", False),
        ("y", False),
        ("enabled", False),
    ],
)
def test_env_flag_accepts_exactly_mlxcels_words(value, on):
    assert env_flag(value) is on


@pytest.mark.parametrize(("value", "expected"), [(" Yes ", "True"), ("no", "False")])
def test_the_escape_hatch_is_read_from_the_environment_at_import(value, expected):
    env = {**os.environ, PRIVATE_MEDIA_URLS_ENV: value}
    code = (
        "from audiogate.acquire import AcquisitionPolicy, ALLOW_PRIVATE_MEDIA_URLS as A;"
        "print(A, AcquisitionPolicy().allow_private_addresses)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == [expected, expected]


def test_changing_the_environment_after_start_up_changes_nothing(monkeypatch):
    before = AcquisitionPolicy().allow_private_addresses
    monkeypatch.setenv(PRIVATE_MEDIA_URLS_ENV, "0" if before else "1")
    assert AcquisitionPolicy().allow_private_addresses is before


def test_media_root_accepts_str_and_path(tmp_path: Path):
    assert AcquisitionPolicy(media_root=str(tmp_path)).media_root == tmp_path
