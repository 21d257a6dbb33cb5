"""``audiogate batch`` throughput (issue #24): the local engine and the Ray engine against
this machine's cores times the single-thread in-process rate, and a plain loop over the
family's transformers feature extractor, in one run.

N generated clips (default 2,000) of 1 to 30 s (uniform, seeded), 16 kHz mono PCM16 WAV
(noise over a tone), each a manifest row ``{"id", "audio"}`` under a media root; family
Gemma 3n's pinned defaults (``--family gemma3n``). Paths:

* **in-process (1 thread)**: the engines' per-row code in one fresh process on one thread
  (``GateSpec(block_threads=1)``): ``prepare_row`` and the shard writer ``run_shard``,
  writing the same Parquet shards. The rate r1 the targets are relative to. Also shown:
  ``prepare_row`` alone on one thread, and on the two threads per clip a server uses;
* **local**: ``audiogate batch --engine local --workers CORES`` as a subprocess;
* **ray, running cluster**: ``ray start --head`` first, then ``--engine ray --ray-address
  auto`` (the job alone is timed; CPU is the machine's, from ``/proc/stat``, as the
  cluster's processes are not the command's children);
* **ray, own ray.init()**: ``--engine ray`` starting and stopping its local cluster;
* **Ray's floor**: the same Ray Data pipeline with an actor that passes rows through, on
  the same manifest: Ray's own seconds for this many rows, and the best share they leave;
* **transformers**: ``soundfile.read`` and ``Gemma3nAudioFeatureExtractor`` per clip, one
  process (what a dataset script would do without audiogate).

Per path: clips/s (wall clock, start-up included), CPU seconds per clip and the peak RSS
of the whole process tree (``/proc`` sampled every 0.2 s: the driver, its pool
processes or Ray's processes). Targets: local >= 0.85 x CORES x r1, Ray >= 0.70 x
CORES x r1. Tests never assert on these numbers.

    .venv/bin/python benchmarks/bench_batch.py [--clips N] [--skip-ray] [--workers N]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from audiogate.testing.audio import encoded_clip

ROOT = Path(__file__).resolve().parents[1]
CLK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def _descendants(root: int) -> list[int]:
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [root], [root]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


class TreeSampler:
    """Peak summed RSS and cumulative CPU seconds of a process tree, sampled."""

    def __init__(self, root: int, interval_s: float = 0.2) -> None:
        self.root = root
        self.interval_s = interval_s
        self.peak_rss = 0
        self.cpu: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        rss = 0
        for pid in _descendants(self.root):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                with open(f"/proc/{pid}/statm") as f:
                    rss += int(f.read().split()[1]) * PAGE
            except OSError:
                continue
            cpu = (int(fields[11]) + int(fields[12])) / CLK  # utime + stime
            self.cpu[pid] = max(self.cpu.get(pid, 0.0), cpu)
        self.peak_rss = max(self.peak_rss, rss)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval_s)

    def __enter__(self) -> TreeSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def cpu_s(self) -> float:
        return sum(self.cpu.values())


def make_dataset(root: Path, clips: int, seed: int) -> tuple[Path, Path, float]:
    media = root / "media"
    media.mkdir()
    rng = np.random.default_rng(seed)
    seconds = rng.uniform(1.0, 30.0, size=clips)
    with (root / "manifest.jsonl").open("w") as manifest:
        for i, s in enumerate(seconds):
            (media / f"c{i:05d}.wav").write_bytes(encoded_clip(seconds=float(s), seed=i).data)
            manifest.write(json.dumps({"id": f"c{i:05d}", "audio": f"c{i:05d}.wav"}) + "\n")
    return root / "manifest.jsonl", media, float(seconds.sum())


def in_process(
    manifest: Path, media: Path, out: Path, *, write: bool, threads: int | None
) -> dict[str, float]:
    """The per-row code in one process: ``prepare_row`` over the rows, and with ``write``
    the local engine's own shard writer (``run_shard``, the code each pool process runs),
    with ``threads`` threads per clip (``None``: the process default). In a fresh
    interpreter, so one path's thread setting does not leak into another."""
    code = f"""
import json, resource, time
from pathlib import Path
from audiogate.batch.manifest import scan_manifest
from audiogate.batch import GateSpec, prepare_row
from audiogate.batch.local import _gate, run_shard
spec = GateSpec(family="gemma3n", media_root={str(media)!r}, block_threads={threads!r})
gate, fingerprint = _gate(spec)  # the gate run_shard uses, warmed below
manifest = scan_manifest(Path({str(manifest)!r}))
refs = list(manifest.refs)
lines = Path({str(manifest)!r}).read_text().splitlines()
prepare_row(gate, lines[0], fingerprint=fingerprint)  # warm-up
start, cpu = time.perf_counter(), time.process_time()
if {write!r}:
    out = Path({str(out)!r})
    out.mkdir()
    for number, first in enumerate(range(0, len(refs), 32)):
        counts = run_shard(spec, manifest, out, (number, tuple(refs[first : first + 32])))
        assert counts.ok == counts.rows, counts
else:
    for line in lines:
        row = prepare_row(gate, line, fingerprint=fingerprint)
        assert row["status"] == "ok", row["error"]
wall = time.perf_counter() - start
print(json.dumps({{"clips_per_s": len(lines) / wall,
    "cpu_per_clip_s": (time.process_time() - cpu) / len(lines),
    "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}}))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"in-process run failed:\n{done.stderr[-3000:]}")
    shutil.rmtree(out, ignore_errors=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def transformers_loop(manifest: Path, media: Path) -> dict[str, float]:
    code = f"""
import json, time, resource, soundfile
from transformers import Gemma3nAudioFeatureExtractor
fe = Gemma3nAudioFeatureExtractor()
names = [json.loads(l)["audio"] for l in open({str(manifest)!r})]
def one(name):
    samples, rate = soundfile.read({str(media)!r} + "/" + name, dtype="float32")
    return fe(samples, sampling_rate=rate, return_tensors="np")
one(names[0])
start, cpu = time.perf_counter(), time.process_time()
for name in names:
    one(name)
wall = time.perf_counter() - start
print(json.dumps({{"clips_per_s": len(names) / wall,
    "cpu_per_clip_s": (time.process_time() - cpu) / len(names),
    "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}}))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def engine(
    manifest: Path, media: Path, out: Path, name: str, workers: int, address: str | None = None
) -> dict[str, float]:
    command = [
        str(Path(sys.executable).parent / "audiogate"),
        "batch",
        "--family",
        "gemma3n",
        "--manifest",
        str(manifest),
        "--out",
        str(out),
        "--media-path",
        str(media),
        "--engine",
        name,
        "--workers",
        str(workers),
        "--shard-rows",
        "32",
    ]
    if address is not None:
        command += ["--ray-address", address]
    start, machine = time.perf_counter(), machine_cpu_s()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with TreeSampler(process.pid) as sampler:
        _, err = process.communicate()
    wall = time.perf_counter() - start
    machine = machine_cpu_s() - machine
    if process.returncode != 0:
        raise SystemExit(f"{name} engine failed:\n{err[-3000:]}")
    summary = json.loads((out / "_SUCCESS.json").read_text())
    assert summary["ok"] == summary["rows"], summary
    shutil.rmtree(out, ignore_errors=True)
    # A running cluster's processes are not the command's children: count the machine.
    cpu = machine if address is not None else sampler.cpu_s
    return {
        "clips_per_s": summary["rows"] / wall,
        "cpu_per_clip_s": cpu / summary["rows"],
        "peak_rss": sampler.peak_rss,
    }


def machine_cpu_s() -> float:
    """CPU seconds this machine has spent, all processes and the kernel (``/proc/stat``)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    busy = sum(fields[:8]) - fields[3] - fields[4]  # minus idle and iowait
    return busy / CLK


def ray_floor(
    manifest: Path, media: Path, out: Path, cores: int, address: str | None, *, carry: bool
) -> float:
    """Seconds the engine's Ray Data pipeline takes with rows that cost nothing to prepare
    (read the manifest, an actor pool of ``cores``, write Parquet with the engine's
    options): Ray's own cost for this many rows, which no per-row speed removes. With
    ``carry``, each actor emits output rows of the real rows' size (a features blob of
    1.6 x the WAV's bytes: 128 float32 mel bins per 160 PCM16 samples), so the floor also
    holds moving the output through the object store to the writers and writing it."""
    code = f"""
import json, logging, os, time
start = time.perf_counter()
import ray
from audiogate.batch.shards import parquet_options, rows_table
ray.init(address={address!r}, include_dashboard=False, logging_level=logging.WARNING)
rows = sum(1 for _ in open({str(manifest)!r}))
class Floor:
    def __call__(self, batch):
        if not {carry!r}:
            return batch
        out = []
        for line in batch.column("text").to_pylist():
            size = os.path.getsize(os.path.join({str(media)!r}, json.loads(line)["audio"]))
            out.append({{"id": "x", "status": "ok", "error_code": None, "error": None,
                "input_ids": [], "tokens": [1], "frames": [1], "family": "f",
                "policy_fingerprint": "p", "features": [bytes(size * 8 // 5)], "masks": [b"m"],
                "row_sha256": "0" * 64}})
        return rows_table(out)
ray.data.DataContext.get_current().enable_progress_bars = False
ray.data.read_text({str(manifest)!r}, num_cpus=0, override_num_blocks=-(-rows // 32)).map_batches(
    Floor, batch_size=32, batch_format="pyarrow",
    compute=ray.data.ActorPoolStrategy(size={cores}), num_cpus=1,
).write_parquet({str(out)!r}, min_rows_per_file=32, ray_remote_args={{"num_cpus": 0}},
    concurrency={cores}, **parquet_options())
ray.shutdown()
print(time.perf_counter() - start)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"Ray floor run failed:\n{done.stderr[-3000:]}")
    shutil.rmtree(out, ignore_errors=True)
    return float(done.stdout.strip().splitlines()[-1])


@contextlib.contextmanager
def ray_cluster(cores: int) -> Iterator[str]:
    """A local Ray head node, started before and stopped after the job (the long-running
    cluster ``--ray-address`` points a job at); yields its address."""
    ray = str(Path(sys.executable).parent / "ray")
    port = "6390"
    subprocess.run(
        [
            ray,
            "start",
            "--head",
            f"--port={port}",
            f"--num-cpus={cores}",
            "--include-dashboard=false",
            "--disable-usage-stats",
        ],
        check=True,
        capture_output=True,
    )
    try:
        time.sleep(2.0)  # let its processes settle before the clock starts
        yield "auto"  # the head node started above (it binds to the host address)
    finally:
        subprocess.run([ray, "stop", "--force"], capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clips", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-ray", action="store_true")
    args = parser.parse_args()
    cores = args.workers
    root = Path(tempfile.mkdtemp(prefix="bench_batch_"))
    try:
        manifest, media, audio_s = make_dataset(root, args.clips, args.seed)
        print(
            f"{args.clips} clips, {audio_s / 3600:.2f} h of audio (1-30 s, 16 kHz mono), "
            f"gemma3n pinned defaults, {cores} workers on {os.cpu_count()} cores\n"
        )
        out = root / "out"
        results = {
            "prepare only, 2 threads/clip": in_process(
                manifest, media, out, write=False, threads=None
            ),
            "prepare only, 1 thread": in_process(manifest, media, out, write=False, threads=1),
            "in-process (1 thread)": in_process(manifest, media, out, write=True, threads=1),
        }
        results["local engine"] = engine(manifest, media, out, "local", cores)
        floors: dict[str, tuple[float, float]] = {}
        if not args.skip_ray:
            with ray_cluster(cores) as address:
                name = "ray engine, running cluster"
                results[name] = engine(manifest, media, out, "ray", cores, address)
                floors[name] = (
                    ray_floor(manifest, media, out, cores, address, carry=False),
                    ray_floor(manifest, media, out, cores, address, carry=True),
                )
            name = "ray engine, own ray.init()"
            results[name] = engine(manifest, media, out, "ray", cores)
            floors[name] = (
                ray_floor(manifest, media, out, cores, None, carry=False),
                ray_floor(manifest, media, out, cores, None, carry=True),
            )
        results["transformers loop"] = transformers_loop(manifest, media)
        r1 = results["in-process (1 thread)"]["clips_per_s"]
        print(f"{'path':<32}{'clips/s':>9}{'CPU ms/clip':>13}{'peak RSS MiB':>14}  vs target")
        targets = {
            "local engine": 0.85,
            "ray engine, running cluster": 0.70,
            "ray engine, own ray.init()": 0.70,
        }
        for name, r in results.items():
            note = ""
            if name in targets:
                ideal = cores * r1
                share = r["clips_per_s"] / ideal
                verdict = "met" if share >= targets[name] else "MISSED"
                note = f"{share:.0%} of {cores}xr1 (>= {targets[name]:.0%}: {verdict})"
            print(
                f"{name:<32}{r['clips_per_s']:>9.1f}{r['cpu_per_clip_s'] * 1e3:>13.1f}"
                f"{r['peak_rss'] / 2**20:>14.0f}  {note}"
            )
        prepare_1 = results["prepare only, 1 thread"]["clips_per_s"]
        for name, (bare, carried) in floors.items():
            # The best this path could do: Ray's own seconds, then every row prepared (and,
            # when the floor did not carry the output, written) at CORES x the one-thread
            # rate.
            bounds = (
                ("no-op rows", bare, r1),
                ("no-op rows of the output's size", carried, prepare_1),
            )
            for what, floor, rate in bounds:
                best = args.clips / (floor + args.clips / (cores * rate))
                print(
                    f"{name}: Ray's own cost for {args.clips} {what} {floor:.1f} s, so at "
                    f"most {best:.1f} clips/s = {best / (cores * r1):.0%} of {cores}xr1 here"
                )
        ours = results["local engine"]["clips_per_s"]
        theirs = results["transformers loop"]["clips_per_s"]
        print(f"\nlocal engine / transformers loop: {ours / theirs:.2f}x clips/s")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
