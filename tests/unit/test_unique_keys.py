"""The default key of a unique job, and how an enqueue's options make it unique."""

from __future__ import annotations

import hashlib

import pytest

from fastq.options import EnqueueOptions
from fastq.producer.unique import UniquePlan, default_unique_key, unique_plan


def test_the_default_key_is_the_sha1_of_canonical_json_of_name_args_kwargs() -> None:
    key = default_unique_key("refresh", (42, "x"), {"b": 1, "a": [1, 2]})
    expected = hashlib.sha1(b'["refresh",[42,"x"],{"a":[1,2],"b":1}]').hexdigest()
    assert key == expected
    # kwargs in any order, args as a list or a tuple: the same key
    assert default_unique_key("refresh", [42, "x"], {"a": [1, 2], "b": 1}) == key
    assert default_unique_key("refresh", (42, "x"), None) == default_unique_key(
        "refresh", [42, "x"], {}
    )
    # another name, other args, or the same value given by keyword: another key
    assert default_unique_key("other", (42, "x"), {"b": 1, "a": [1, 2]}) != key
    assert default_unique_key("refresh", (43, "x"), {"b": 1, "a": [1, 2]}) != key
    assert default_unique_key("refresh", (42,), {"s": "x"}) != default_unique_key(
        "refresh", (42, "x"), None
    )


def test_an_enqueue_is_unique_by_its_options_over_its_jobs() -> None:
    assert unique_plan(EnqueueOptions(), None) is None
    assert unique_plan(EnqueueOptions(unique_for_s=1.5), None) == UniquePlan("end", 1500, None)
    options = EnqueueOptions(unique_for_s=0.0001, unique_key="k", unique_until="start")
    assert unique_plan(options, None) == UniquePlan("start", 1, "k")  # at least a ms
    with pytest.raises(ValueError, match="need unique_for_s"):
        unique_plan(EnqueueOptions(unique_key="k"), None)
