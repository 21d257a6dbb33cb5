"""``audiogate batch`` throughput (issue #24): the local engine and the Ray engine against
this machine's cores times the single-thread in-process rate, and a plain loop over the
family's transformers feature extractor, in one run.

N generated clips (default 2,000) of 1 to 30 s (uniform, seeded), 16 kHz mono PCM16 WAV
(noise over a tone), each a manifest row ``{"id", "audio"}`` under a media root; family
Gemma 3n's pinned defaults (``--family gemma3n``). Paths:

* **in-process**: one gate, ``prepare_row`` over the rows in this process (one thread):
  the single-thread rate r1 the targets are relative to;
* **local**: ``audiogate batch --engine local --workers CORES`` as a subprocess;
* **ray**: ``audiogate batch --engine ray --workers CORES`` (Ray's local cluster, started
  and stopped by the command, counted in its time);
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
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from audiogate.batch import GateSpec, policy_fingerprint, prepare_row
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


def in_process(manifest: Path, media: Path) -> dict[str, float]:
    spec = GateSpec(family="gemma3n", media_root=str(media))
    gate = spec.build()
    fingerprint = policy_fingerprint(gate.policy)
    lines = manifest.read_text().splitlines()
    prepare_row(gate, lines[0], fingerprint=fingerprint)  # warm-up
    start, cpu = time.perf_counter(), time.process_time()
    for line in lines:
        row = prepare_row(gate, line, fingerprint=fingerprint)
        assert row["status"] == "ok", row["error"]
    wall = time.perf_counter() - start
    import resource

    return {
        "clips_per_s": len(lines) / wall,
        "cpu_per_clip_s": (time.process_time() - cpu) / len(lines),
        "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }


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


def engine(manifest: Path, media: Path, out: Path, name: str, workers: int) -> dict[str, float]:
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
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with TreeSampler(process.pid) as sampler:
        _, err = process.communicate()
    wall = time.perf_counter() - start
    if process.returncode != 0:
        raise SystemExit(f"{name} engine failed:\n{err[-3000:]}")
    summary = json.loads((out / "_SUCCESS.json").read_text())
    assert summary["ok"] == summary["rows"], summary
    return {
        "clips_per_s": summary["rows"] / wall,
        "cpu_per_clip_s": sampler.cpu_s / summary["rows"],
        "peak_rss": sampler.peak_rss,
    }


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
        results = {"in-process (1 thread)": in_process(manifest, media)}
        results["local engine"] = engine(manifest, media, root / "local", "local", cores)
        if not args.skip_ray:
            results["ray engine"] = engine(manifest, media, root / "ray", "ray", cores)
        results["transformers loop"] = transformers_loop(manifest, media)
        r1 = results["in-process (1 thread)"]["clips_per_s"]
        print(f"{'path':<24}{'clips/s':>9}{'CPU ms/clip':>13}{'peak RSS MiB':>14}  vs target")
        targets = {"local engine": 0.85, "ray engine": 0.70}
        for name, r in results.items():
            note = ""
            if name in targets:
                ideal = cores * r1
                share = r["clips_per_s"] / ideal
                verdict = "met" if share >= targets[name] else "MISSED"
                note = f"{share:.0%} of {cores}xr1 (>= {targets[name]:.0%}: {verdict})"
            print(
                f"{name:<24}{r['clips_per_s']:>9.1f}{r['cpu_per_clip_s'] * 1e3:>13.1f}"
                f"{r['peak_rss'] / 2**20:>14.0f}  {note}"
            )
        ours = results["local engine"]["clips_per_s"]
        theirs = results["transformers loop"]["clips_per_s"]
        print(f"\nlocal engine / transformers loop: {ours / theirs:.2f}x clips/s")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
