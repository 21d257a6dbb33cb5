"""Comments and docs cite sources a stranger can follow.

Every pinned number names its upstream source (mlxcel, the Phi-4 MM remote code,
transformers, the Qwen2-Audio serving guide …) by the short names that
``docs/provenance.md`` lists, with files and revisions. Nothing may cite the research
notes audiogate was written from, which are not in this repository: "the seed", its
section signs, or the notes' file names.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from fnmatch import fnmatch
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SUFFIXES = (".py", ".md", ".json")
#: Generated stand-in tokenizers (data) and the changelog (history) are not checked.
EXCLUDED = ("examples/models/*/tokenizer.json", "CHANGELOG.md", "tests/meta/test_provenance.py")

#: "the seed(s)", "seed's", "seed §…", "(seed X" and a "Seed:" label; not ``seed=…``,
#: ``f(seed)``, a ``seed: int`` annotation, ``:param seed:``, "random seed" or ``seed_name``.
SEED = re.compile(
    r"\bthe\s+seeds?\b(?!\s*=)"
    r"|\bseed['’]s\b"
    r"|\bseed\s+§"
    r"|\(seed\s(?!\s*=)"
    r"|(?<!param )\bseed:(?!\s*[A-Za-z_][\w.]*\s*(?:[\[|=,)]|$))",
    re.IGNORECASE | re.MULTILINE,
)
#: The research notes themselves.
NOTES = re.compile(
    r"families\.md|mlxcel-audio-boundary\.md|reference-extractors\.md|tiny-models\.md"
    r"|peers\.md|003_b4bc0aaf81808af3"
)


def _tracked() -> list[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout")
    listing = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    return sorted(
        path
        for path in listing.split("\0")
        if path.endswith(SUFFIXES) and not any(fnmatch(path, pattern) for pattern in EXCLUDED)
    )


def citations(text: str) -> list[tuple[int, str]]:
    """``(line, match)`` of every citation of a document that is not in the repository."""
    found = [*SEED.finditer(text), *NOTES.finditer(text)]
    return sorted((text.count("\n", 0, m.start()) + 1, " ".join(m.group().split())) for m in found)


def test_no_file_cites_documents_outside_the_repository() -> None:
    offenders = [
        f"{path}:{line}: {match!r}"
        for path in _tracked()
        if (ROOT / path).is_file()
        for line, match in citations((ROOT / path).read_text(encoding="utf-8"))
    ]
    assert not offenders, "cite docs/provenance.md's sources instead:\n" + "\n".join(offenders)


@pytest.mark.parametrize(
    "text",
    [
        "the seed's 500 MiB",
        "(the seed system pins them)",
        "# Seed: 16,000 and 8,000 samples give 97 frames",
        "Golden (seed §4.3)",
        "(seed ``DEFAULT_MAX_AUDIO_INPUTS``)",
        "over the\nseed",
        "see ``families.md``",
        "``mlxcel-audio-boundary.md`` §9.1",
        "reference-extractors.md §1",
        "tiny-models.md §2",
        "peers.md",
        "the seed ``003_b4bc0aaf81808af3.txt``",
    ],
)
def test_citations_are_found(text: str) -> None:
    assert citations(text)


@pytest.mark.parametrize(
    "text",
    [
        "def signal(samples: int, seed: int = 0) -> None:",
        "    seed: int | None = None,",
        "rng = np.random.default_rng(seed=3)",
        "x = make_signal('am', seed=index)",
        "rng = _rng(seed)",
        "f(seed, n)",
        "@given(seed=st.integers(0, 2**32 - 1))",
        ":param seed: the generator's seed.",
        "a random seed per clip",
        "paths.get('seed_name')",
        "def test_seed_golden_through_the_host(): ...",
        "RFC 9112 §6.1",
        "mlxcel's ``ABSOLUTE_MAX_AUDIO_PAYLOAD_SIZE`` (``src/server/media.rs``)",
    ],
)
def test_code_and_upstream_citations_pass(text: str) -> None:
    assert citations(text) == []
