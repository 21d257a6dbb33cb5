"""Each family's shipped JSON schema is valid, fresh, and admits its pinned defaults."""

from __future__ import annotations

import json

import pytest
from jsonschema import Draft202012Validator
from shipped import shipped_families

from audiogate.policy import build_schema, dump_schema
from audiogate.testing.checkpoints import pinned_document

FAMILIES = tuple(family.name for family in shipped_families())


@pytest.mark.parametrize("family", FAMILIES)
def test_shipped_schema_is_fresh(host, family: str) -> None:
    spec = host.family(family).spec
    regenerated = json.loads(dump_schema(build_schema(family, spec.keys)))
    assert dict(spec.schema) == regenerated, "run: python scripts/regen_schemas.py"


@pytest.mark.parametrize("family", FAMILIES)
def test_schema_is_a_valid_draft_2020_12_schema(host, family: str) -> None:
    Draft202012Validator.check_schema(dict(host.family(family).spec.schema))


@pytest.mark.parametrize("family", FAMILIES)
def test_pinned_values_written_at_every_path_load_back_unchanged(
    host, model_dir, family: str
) -> None:
    spec = host.family(family).spec
    pinned = host.default_policy(family)
    document = pinned_document(spec)
    Draft202012Validator(dict(spec.schema)).validate(document)
    policy = host.load_model_policy(model_dir(family, preprocessor=document))
    assert policy == pinned
    assert policy.from_checkpoint
