"""``audiogate batch``: rows against the gate called directly, bad rows recorded, resume,
the summary, the engines, and reading the output without audiogate."""

from __future__ import annotations

import base64
import io
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from batchkit import EXPECTED, GEMMA

from audiogate.api import AudioGate
from audiogate.batch import (
    SUCCESS_FILE,
    BatchOptions,
    BatchProgress,
    ExtraMissingError,
    GateSpec,
    error_code,
    policy_fingerprint,
    run_batch,
)
from audiogate.batch.shards import BatchCounts
from audiogate.cli import main
from audiogate.errors import DecodeError, LimitError, MemoryLimitError

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def _options(manifest: Path, media: Path, out: Path, **kw) -> BatchOptions:
    spec = GateSpec(model_dir=str(GEMMA), media_root=str(media))
    return BatchOptions(gate=spec, manifest=manifest, out_dir=out, **{"workers": 1, **kw})


def _rows(out: Path) -> list[dict]:
    """The output rows, read with pyarrow only, in a stable order."""
    table = pq.read_table(str(out))
    return sorted(table.to_pylist(), key=lambda r: (r["id"] or "", r["row_sha256"]))


def test_every_row_is_written_and_bad_rows_are_counted_by_code(manifest, tmp_path):
    path, media = manifest
    out = tmp_path / "out"
    summary = run_batch(_options(path, media, out, shard_rows=4), progress=io.StringIO())
    rows = _rows(out)
    by_id = {r["id"]: r for r in rows if r["id"] is not None}
    assert {k: (r["status"], r["error_code"]) for k, r in by_id.items()} == EXPECTED
    nameless = [r for r in rows if r["id"] is None]
    assert sorted(r["error_code"] for r in nameless) == ["bad_row", "bad_row"]
    assert all(r["error"] for r in rows if r["status"] == "error")
    assert sorted(p.name for p in out.glob("part-*.parquet")) == [
        f"part-{n:05d}.parquet" for n in range(4)
    ]
    written = json.loads((out / SUCCESS_FILE).read_text())
    assert written == summary
    assert summary["rows"] == 13
    assert summary["ok"] == 5
    assert summary["errors_by_code"] == {
        "acquisition": 3,
        "bad_row": 3,
        "limit": 1,
        "riff_size_mismatch": 1,
    }
    assert summary["errors"] == 8
    assert summary["seconds"] > 0
    assert summary["clips_per_s"] > 0
    assert summary["policy_fingerprint"] == by_id["a0"]["policy_fingerprint"]


def test_rows_equal_the_gate_called_directly(manifest, tmp_path):
    # Path against path: the batch row of a clip is what AudioGate.prepare gives.
    path, media = manifest
    out = tmp_path / "out"
    run_batch(_options(path, media, out), progress=io.StringIO())
    by_id = {r["id"]: r for r in _rows(out)}
    gate = AudioGate.from_model_dir(GEMMA)
    # The chat request a user would send: the clip, then the prompt, in one user turn.
    data = base64.b64encode((media / "c0.wav").read_bytes()).decode()
    audio = {"type": "input_audio", "input_audio": {"data": data, "format": "wav"}}
    content = [audio, {"type": "text", "text": "What is said?"}]
    want = gate.prepare([{"role": "user", "content": content}])
    row = by_id["a0"]
    assert row["input_ids"] == list(want.input_ids)
    assert row["tokens"] == [want.batch.clips[0].tokens]
    assert row["frames"] == [want.batch.clips[0].frames]
    assert row["family"] == "gemma3n"
    assert row["policy_fingerprint"] == policy_fingerprint(gate.policy)
    features = np.load(io.BytesIO(row["features"][0]))
    mask = np.load(io.BytesIO(row["masks"][0]))
    np.testing.assert_array_equal(features, want.features[0])
    np.testing.assert_array_equal(mask, want.masks[0])
    assert features.shape == (want.batch.clips[0].frames, 128)
    # A text-only chat row: token ids, no clips.
    assert by_id["t0"]["input_ids"]
    assert by_id["t0"]["features"] == []


def test_a_rerun_skips_finished_shards_and_redoes_a_lost_one(manifest, tmp_path):
    path, media = manifest
    out = tmp_path / "out"
    run_batch(_options(path, media, out, shard_rows=4), progress=io.StringIO())
    first = _rows(out)
    (out / "part-00001.parquet").unlink()  # a shard lost
    (out / ".part-00009.parquet.123.partial").write_bytes(b"PAR1 cut")  # a crash's leftover
    (out / "part-00007.parquet").write_bytes(b"PAR1 cut short")  # written in place, cut
    summary = run_batch(_options(path, media, out, shard_rows=4), progress=io.StringIO())
    assert summary["rows_this_run"] == 4
    assert summary["rows_resumed"] == 9
    assert summary["rows"] == 13
    assert _rows(out) == first
    assert not list(out.glob(".*partial"))
    again = run_batch(_options(path, media, out, shard_rows=4), progress=io.StringIO())
    assert again["rows_this_run"] == 0
    assert again["rows"] == 13


def test_a_parquet_manifest_gives_the_same_rows(manifest, tmp_path):
    path, media = manifest
    rows = []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if "messages" in row:
            row["messages"] = json.dumps(row["messages"])  # JSON text in a string column
        rows.append(row)
    names = sorted({name for row in rows for name in row})
    table = pa.table({name: [row.get(name) for row in rows] for name in names})
    pq.write_table(table, str(tmp_path / "manifest.parquet"))
    run_batch(
        _options(tmp_path / "manifest.parquet", media, tmp_path / "pq"), progress=io.StringIO()
    )
    run_batch(_options(path, media, tmp_path / "jsonl"), progress=io.StringIO())
    keep = ("id", "status", "error_code", "input_ids", "tokens", "frames", "features", "masks")
    got = {r["id"]: {k: r[k] for k in keep} for r in _rows(tmp_path / "pq") if r["id"]}
    want = {r["id"]: {k: r[k] for k in keep} for r in _rows(tmp_path / "jsonl") if r["id"]}
    assert got == want


def test_a_process_pool_gives_the_same_rows(manifest, tmp_path):
    path, media = manifest
    run_batch(_options(path, media, tmp_path / "one", shard_rows=3), progress=io.StringIO())
    run_batch(
        _options(path, media, tmp_path / "two", shard_rows=3, workers=2), progress=io.StringIO()
    )
    assert _rows(tmp_path / "one") == _rows(tmp_path / "two")


def test_the_family_defaults_take_plain_prompts(manifest, tmp_path):
    path, media = manifest
    spec = GateSpec(family="qwen2audio", media_root=str(media))
    out = tmp_path / "out"
    run_batch(
        BatchOptions(gate=spec, manifest=path, out_dir=out, workers=1), progress=io.StringIO()
    )
    by_id = {r["id"]: r for r in _rows(out)}
    assert by_id["a0"]["status"] == "ok"
    assert by_id["a0"]["family"] == "qwen2audio"
    assert by_id["a0"]["input_ids"] == []  # no tokenizer
    # Chat messages need a chat template: a typed error, recorded.
    assert by_id["m0"]["error_code"] == "invalid_request"


def test_error_codes():
    assert error_code(DecodeError("x", clip_index=0, code="riff_size_mismatch")) == (
        "riff_size_mismatch"
    )
    assert error_code(LimitError("clip count", actual=20, maximum=16)) == "limit"
    assert error_code(MemoryLimitError("in-flight host bytes", actual=2, maximum=1)) == (
        "memory_limit"
    )
    assert error_code(RuntimeError("bug")) == "internal"


def test_progress_is_a_bar_on_a_terminal_and_lines_otherwise():
    done = BatchCounts(rows=5, ok=4)
    done.errors["limit"] = 1
    plain = io.StringIO()
    bar = BatchProgress(plain, total=10, tty=False, interval_s=0)
    bar(done)
    bar.show(final=True)  # the same figures: not printed twice
    assert plain.getvalue().count("\n") == 1
    assert plain.getvalue().startswith("audiogate batch: 5/10 clips")
    assert "errors 1" in plain.getvalue()
    assert "ETA 0:00:" in plain.getvalue()
    tty = io.StringIO()
    bar = BatchProgress(tty, total=10, tty=True)
    bar(done)
    bar(done)
    bar.show(final=True)
    assert tty.getvalue().startswith("\r[############............] 5/10 clips")
    assert tty.getvalue().endswith("\n")
    assert "\r[########################] 10/10 clips" in tty.getvalue()


def test_the_output_reads_without_audiogate(manifest, tmp_path):
    # What docs/datasets.md shows a training loader doing: pyarrow and numpy only.
    path, media = manifest
    out = tmp_path / "out"
    run_batch(_options(path, media, out), progress=io.StringIO())
    code = f"""
import io, sys, numpy as np, pyarrow.dataset as ds
assert not any(m.startswith("audiogate") for m in sys.modules)
table = ds.dataset({str(out)!r}, format="parquet").to_table(filter=ds.field("status") == "ok")
for row in table.to_pylist():
    feats = [np.load(io.BytesIO(b)) for b in row["features"]]
    masks = [np.load(io.BytesIO(b)) for b in row["masks"]]
    assert [f.shape[0] for f in feats] == row["frames"], row["id"]
    assert all(m.shape == f.shape[:1] for f, m in zip(feats, masks))
print(table.num_rows)
assert not any(m.startswith("audiogate") for m in sys.modules)
"""
    import subprocess

    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "5"


# --- the command line -----------------------------------------------------------------


def test_the_command_writes_the_shards(manifest, tmp_path, capsys):
    path, media = manifest
    out = tmp_path / "out"
    args = ["batch", "--model", str(GEMMA), "--manifest", str(path), "--out", str(out)]
    assert main([*args, "--media-path", str(media), "--workers", "1"]) == 0
    printed = capsys.readouterr()
    assert printed.out.startswith("13 rows: 5 ok, 8 errors (acquisition 3, bad_row 3")
    assert "audiogate batch: 13/13 clips" in printed.err  # not a terminal: plain lines
    assert (out / SUCCESS_FILE).is_file()


@pytest.mark.parametrize(
    ("extra", "want"),
    [
        ([], "give exactly one of --model DIR or --family NAME"),
        (["--family", "gemma3n", "--model", "x"], "give exactly one of"),
        (["--family", "gemma3n", "--media-path", "/nonexistent"], "is not a directory"),
        (["--family", "gemma3n", "--ray-address", "auto"], "--ray-address goes with"),
    ],
)
def test_usage_errors(manifest, tmp_path, capsys, extra, want):
    path, _ = manifest
    args = ["batch", "--manifest", str(path), "--out", str(tmp_path / "o"), *extra]
    assert main(args) == 2
    assert want in capsys.readouterr().err


def test_without_pyarrow_the_error_names_the_extra(manifest, tmp_path, capsys, monkeypatch):
    path, _ = manifest
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    args = ["batch", "--family", "gemma3n", "--manifest", str(path), "--out", str(tmp_path)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "pip install 'audiogate[batch]'" in err


def test_without_ray_the_ray_engine_names_the_extra(manifest, tmp_path, capsys, monkeypatch):
    path, _ = manifest
    monkeypatch.setitem(sys.modules, "ray", None)
    args = ["batch", "--family", "gemma3n", "--manifest", str(path), "--out", str(tmp_path)]
    assert main([*args, "--engine", "ray"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "pip install 'audiogate[ray]'" in err
    with pytest.raises(ExtraMissingError):
        run_batch(
            BatchOptions(
                gate=GateSpec(family="gemma3n"), manifest=path, out_dir=tmp_path, engine="ray"
            )
        )


# --- Ray --------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # Ray's own, at import and init
def test_the_ray_engine_writes_the_local_engines_rows(manifest, tmp_path):
    pytest.importorskip("ray.data")
    import ray

    path, media = manifest
    run_batch(_options(path, media, tmp_path / "local", shard_rows=4), progress=io.StringIO())
    ray.init(num_cpus=2, include_dashboard=False, logging_level="error")
    try:
        summary = run_batch(
            _options(path, media, tmp_path / "ray", engine="ray", workers=2, shard_rows=4),
            progress=io.StringIO(),
        )
        assert _rows(tmp_path / "ray") == _rows(tmp_path / "local")
        assert summary["rows"] == 13
        assert not [p for p in os.listdir(tmp_path / "ray") if p.startswith("_staging")]
        # A rerun has nothing left to do.
        again = run_batch(
            _options(path, media, tmp_path / "ray", engine="ray", workers=2, shard_rows=4),
            progress=io.StringIO(),
        )
        assert again["rows_this_run"] == 0
        assert again["rows"] == 13
    finally:
        ray.shutdown()
