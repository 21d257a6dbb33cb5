"""One vocabulary of error codes: the library's ``code``, the server's JSON ``code`` and
the batch output's ``error_code`` are the same string for the same error, each code has
one metrics reason, and the reasons are the metric labels of docs/provenance.md."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import pytest

from audiogate.batch.rows import error_code as batch_error_code
from audiogate.errors import INTERNAL_CODE, AudioGateError, DecodeError, error_code
from audiogate.metrics import REJECTION_REASONS, rejection_reason
from audiogate.server.errors import error_payload

ROOT = Path(__file__).resolve().parents[2]

#: mlxcel's rejection labels, in its order (the metric names and values must not change).
MLXCEL_REASONS = (
    "queue_full",
    "memory_limit",
    "worker_unavailable",
    "overflow",
    "waveform",
    "feature",
    "feature_panic",
    "context_limit",
)


@pytest.fixture(scope="module")
def gen_docs():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        yield importlib.import_module("gen_docs")
    finally:
        sys.path.remove(str(ROOT / "scripts"))


@pytest.fixture(scope="module")
def codes(gen_docs) -> list:
    return gen_docs.error_codes()


def test_the_metrics_reasons_are_the_seed_systems() -> None:
    assert REJECTION_REASONS == MLXCEL_REASONS


def test_every_code_is_snake_case_and_listed_once(codes) -> None:
    names = [code for code, *_ in codes]
    assert len(names) == len(set(names))
    for name in names:
        assert re.fullmatch(r"[a-z][a-z0-9_]*", name), name
    assert names[-1] == INTERNAL_CODE


def test_every_error_class_has_its_code_in_the_table(gen_docs, codes) -> None:
    listed = {code for code, *_ in codes}
    for cls in gen_docs._error_classes():
        assert cls.code in listed, cls


def test_each_code_has_one_metrics_reason(gen_docs, codes) -> None:
    reasons: dict[str, set[str]] = {}
    examples = [instance for _code, _cls, instance, _meaning in codes if instance is not None]
    for cls in gen_docs._error_classes():
        _template, instance = gen_docs._template(cls)
        examples.append(instance if instance is not None else cls(""))
    for error in examples:
        reasons.setdefault(error_code(error), set()).add(type(error).reason)
    mixed = {code: found for code, found in reasons.items() if len(found) > 1}
    assert mixed == {}
    assert set().union(*reasons.values()) <= {*MLXCEL_REASONS, "cancelled"}


def test_the_server_the_batch_and_the_library_give_the_same_code(codes) -> None:
    for code, _cls, instance, _meaning in codes:
        error = instance if instance is not None else RuntimeError("a bug")
        assert error_code(error) == code
        assert batch_error_code(error) == code
        assert error_payload(error)["error"]["code"] == code


def test_a_decode_error_keeps_its_rule_as_its_code() -> None:
    error = DecodeError("x", clip_index=0, code="riff_size_mismatch")
    assert error_code(error) == "riff_size_mismatch"
    assert error_payload(error)["error"]["code"] == "riff_size_mismatch"
    assert error_payload(error)["error"]["reason"] == "waveform"


def test_an_error_class_of_a_plugins_own_inherits_its_parents_code() -> None:
    class ToyFeatureError(DecodeError):
        pass

    class Unknown(AudioGateError):
        reason = "not_a_label"  # type: ignore[assignment]

    assert error_code(ToyFeatureError("x", clip_index=0)) == "corrupt"
    assert error_code(Unknown("x")) == "error"
    assert rejection_reason(Unknown("x")) == "feature_panic"
    assert error_code(ValueError("x")) == INTERNAL_CODE == "internal"
