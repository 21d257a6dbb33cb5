"""Record a WebM/Opus clip with a real browser's MediaRecorder (issue #32).

Headless Chromium (``chromium-headless-shell`` or ``chromium``) captures a WAV through
its fake audio device (``--use-file-for-fake-audio-capture``), records it with
``MediaRecorder`` (``audio/webm;codecs=opus``, a chunk every ``--timeslice-ms`` as web
apps ask for it) and posts the Blob to a one-page HTTP server on the loopback, which
writes it to ``--out``. What it writes is what a browser uploads: a live WebM (unknown
Segment and Cluster sizes, no duration), 48 kHz Opus in SimpleBlocks.

The speech is espeak-ng's (a Harvard sentence), so the capture needs no download. A
browser's capture is not bit-reproducible (it runs in real time): the file is committed
as captured, and ``scripts/make_audio_corpus.py`` describes it in ``MANIFEST.json``
(FFmpeg's decoded length) without rewriting it. Usage::

    apt-get install chromium-headless-shell espeak-ng sox
    python scripts/capture_mediarecorder.py --seconds 2.5 --out OUT.webm

(the corpus's is ``tests/data/audio/mediarecorder-chromium-opus-mono-48000.webm``).

Runs as root with ``--no-sandbox`` (the sandbox needs user namespaces a container lacks).
"""

from __future__ import annotations

import argparse
import http.server
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Final

BROWSERS: Final = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome")
SENTENCE: Final = "The boy was there when the sun rose. A rod is used to catch pink salmon."

PAGE: Final = """<!doctype html>
<meta charset="utf-8">
<title>capture</title>
<script>
(async () => {
  const stream = await navigator.mediaDevices.getUserMedia({audio: true});
  const recorder = new MediaRecorder(stream, {mimeType: "audio/webm;codecs=opus"});
  const chunks = [];
  recorder.ondataavailable = (event) => { if (event.data.size) chunks.push(event.data); };
  recorder.onstop = async () => {
    const blob = new Blob(chunks, {type: recorder.mimeType});
    await fetch("/upload", {method: "POST", body: blob,
                            headers: {"X-Mime-Type": recorder.mimeType}});
  };
  recorder.start(TIMESLICE_MS);
  setTimeout(() => { recorder.stop(); stream.getTracks().forEach((t) => t.stop()); },
             SECONDS * 1000);
})().catch((error) => fetch("/error", {method: "POST", body: String(error)}));
</script>
"""


def browser() -> str:
    """The first headless-capable Chromium on ``PATH``."""
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    sys.exit(f"no Chromium found ({', '.join(BROWSERS)}): apt-get install chromium-headless-shell")


def speech(work: Path, rate_hz: int) -> Path:
    """espeak-ng's sentence as a 16-bit mono WAV at ``rate_hz`` (the fake device's input)."""
    spoken, wav = work / "spoken.wav", work / "speech.wav"
    subprocess.run(["espeak-ng", "-v", "en-us", "-s", "150", "-w", str(spoken), SENTENCE],
                   check=True)  # fmt: skip
    subprocess.run(["sox", "-R", "-D", "-V1", str(spoken), "-r", str(rate_hz), "-b", "16",
                    str(wav), "gain", "-n", "-3"], check=True)  # fmt: skip
    return wav


def capture(*, seconds: float, timeslice_ms: int, input_rate_hz: int, timeout_s: float) -> bytes:
    """The Blob headless Chromium's MediaRecorder gives for ``seconds`` of speech."""
    result: dict[str, bytes] = {}
    done = threading.Event()
    page = PAGE.replace("TIMESLICE_MS", str(timeslice_ms)).replace("SECONDS", str(seconds))

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = page.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            result[self.path] = self.rfile.read(length)
            result["mime"] = self.headers.get("X-Mime-Type", "").encode()
            self.send_response(204)
            self.end_headers()
            done.set()

        def log_message(self, format: str, *args: object) -> None:
            pass

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        wav = speech(work, input_rate_hz)
        server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        command = [
            browser(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            f"--user-data-dir={work / 'profile'}",
            "--autoplay-policy=no-user-gesture-required",
            "--use-fake-ui-for-media-stream",
            "--use-fake-device-for-media-stream",
            f"--use-file-for-fake-audio-capture={wav}",
            url,
        ]
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            if not done.wait(timeout_s):
                raise SystemExit(f"no recording within {timeout_s} s from {command[0]}")
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
            server.shutdown()
    if "/error" in result:
        raise SystemExit(f"the page failed: {result['/error'].decode(errors='replace')}")
    print(f"MediaRecorder mimeType: {result['mime'].decode()}", file=sys.stderr)
    return result["/upload"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="the .webm to write")
    parser.add_argument("--seconds", type=float, default=4.0, help="recording length")
    parser.add_argument("--timeslice-ms", type=int, default=250, help="MediaRecorder chunks")
    parser.add_argument("--input-rate", type=int, default=48_000, help="fake device's WAV")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait")
    args = parser.parse_args()
    data = capture(
        seconds=args.seconds,
        timeslice_ms=args.timeslice_ms,
        input_rate_hz=args.input_rate,
        timeout_s=args.timeout,
    )
    if data[:4] != b"\x1aE\xdf\xa3":
        raise SystemExit(f"not a WebM/Matroska file: starts {data[:16]!r}")
    args.out.write_bytes(data)
    print(f"{args.out}: {len(data)} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
