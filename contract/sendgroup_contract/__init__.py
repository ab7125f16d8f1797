"""What the operator and the worker agree on, in one place, with no I/O library.

* :mod:`.keys`             queue key names and the queue-name rule (the CRD's ``spec.queue``
                           pattern)
* :mod:`.jobs`             job names carried in payloads (the mail job)
* :mod:`.worker_settings`  the worker's settings table: field, environment variable, kind,
                           default, doc (the operator's builder writes it, the worker reads it)
* :mod:`.measure`          the queue measurement: Lua script, KEYS, reply -> ``QueueMeasure``
* :mod:`.durations`        the CRD's duration language and its one parser
* :mod:`.timestamps`       ``pushedAt`` and ``createdAt`` parsing
* :mod:`.tls`              the SMTP TLS mode

Import-linter (``.importlinter``) forbids this package to import redis, kubernetes, kopf or any
other package of the project.
"""
