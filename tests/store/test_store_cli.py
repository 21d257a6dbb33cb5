"""``audiogate sources add|show|list|retire --store DIR``."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

from storekit import source

from audiogate.cli import EXIT_BAD_INPUT, EXIT_OK, main


def _run(*argv: str) -> tuple[int, object]:
    out = io.StringIO()
    code = main(list(argv), stdout=out)
    text = out.getvalue()
    return code, json.loads(text) if text.strip() else None


def test_add_show_list_retire(tmp_path: Path) -> None:
    audio = tmp_path / "clip.wav"
    data = source(seed=1)
    audio.write_bytes(data)
    sha = hashlib.sha256(data).hexdigest()
    store = str(tmp_path / "store")
    code, added = _run(
        "sources", "add", "--store", store, "--family", "gemma3n", "--scope", "shared", str(audio)
    )
    assert code == EXIT_OK
    assert added["sha256"] == sha
    assert added["created"] is True
    assert added["scope"] == "shared"
    assert added["status"] == "ready"
    assert (
        _run("sources", "add", "--store", store, "--family", "gemma3n", str(audio))[1]["created"]
        is False
    )
    assert _run("sources", "show", "--store", store, sha)[1]["bytes"] == len(data)
    assert [r["sha256"] for r in _run("sources", "list", "--store", store)[1]] == [sha]
    assert _run("sources", "list", "--store", store, "--owner", "bob")[1] == []
    assert _run("sources", "retire", "--store", store, sha)[1]["status"] == "retired"
    assert _run("sources", "list", "--store", store)[1] == []
    assert [r["status"] for r in _run("sources", "list", "--store", store, "--all")[1]] == [
        "retired"
    ]


def test_refusals_exit_with_bad_input(tmp_path: Path, capsys) -> None:
    store = str(tmp_path / "store")
    assert main(["sources", "show", "--store", store, "a" * 64]) == EXIT_BAD_INPUT
    assert "is not in the source store" in capsys.readouterr().err
    assert main(["sources", "show", "--store", store, "XYZ"]) == 2
    empty = tmp_path / "empty.wav"
    empty.write_bytes(b"")
    code = main(["sources", "add", "--store", store, "--family", "gemma3n", str(empty)])
    assert code == EXIT_BAD_INPUT
