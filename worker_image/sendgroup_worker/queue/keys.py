"""Re-export of :mod:`sendgroup_contract.keys`, where queue key names and the queue-name rule
are defined (the operator reads them from there too)."""

from sendgroup_contract.keys import (
    QUEUE_NAME_PATTERN,
    QUEUE_NAME_RE,
    STAGING_NAMES,
    InvalidQueueName,
    QueueKeys,
    hash_tag,
    validate_queue_name,
)

__all__ = [
    "QUEUE_NAME_PATTERN",
    "QUEUE_NAME_RE",
    "STAGING_NAMES",
    "InvalidQueueName",
    "QueueKeys",
    "hash_tag",
    "validate_queue_name",
]
