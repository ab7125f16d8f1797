"""sendgroup_worker: the Laravel-compatible Redis queue core, the mail worker, the producer
client and the dump/restore/purge commands. The operator imports the queue core from here."""

__version__ = "0.1.0"
