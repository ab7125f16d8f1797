from __future__ import annotations

import pytest

from sendgroup_worker.queue.keys import InvalidQueueName, QueueKeys, hash_tag


def test_laravel_layout_with_and_without_prefix() -> None:
    k = QueueKeys("default")
    assert k.laravel_keys == (
        "queues:default",
        "queues:default:delayed",
        "queues:default:reserved",
        "queues:default:notify",
    )
    p = QueueKeys("default", prefix="laravel_database_")
    assert p.reserved == "laravel_database_queues:default:reserved"


def test_every_key_of_a_tagged_queue_shares_its_hash_tag() -> None:
    k = QueueKeys("{mail-x}")
    assert k.slot_tag == "mail-x"
    assert {hash_tag(key) for key in k.all_keys} == {"mail-x"}
    assert {hash_tag(key) for key in (k.lock, k.staging("ready"))} == {"mail-x"}


def test_purge_names_never_cover_a_queue_sharing_a_prefix() -> None:
    one, ten = QueueKeys("mail-1"), QueueKeys("mail-10")
    assert not set(one.all_keys) & set(ten.all_keys)
    assert all(key == one.base or key.startswith(one.base + ":") for key in one.all_keys)


@pytest.mark.parametrize(
    "bad", ["", "mail-1:delayed", "../x", "a/b", "a b", "{}", "{a}{b}", "-x", "x" * 201]
)
def test_bad_queue_names_are_refused(bad: str) -> None:
    with pytest.raises(InvalidQueueName):
        QueueKeys(bad)


def test_hash_tag_rules_follow_the_cluster_spec() -> None:
    assert hash_tag("a{b}c{d}") == "b"
    assert hash_tag("a{}b") is None
    assert hash_tag("plain") is None
