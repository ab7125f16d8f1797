<?php

return [
    'default' => env('QUEUE_CONNECTION', 'redis'),
    'connections' => [
        'redis' => [
            'driver' => 'redis',
            'connection' => 'default',
            // the SendGroup's queue (spec.queue, default mail-<name>)
            'queue' => env('REDIS_QUEUE', 'default'),
            // the group's worker.retryAfter: must stay above queue:work --timeout
            'retry_after' => (int) env('REDIS_QUEUE_RETRY_AFTER', 90),
            'block_for' => null,
            'after_commit' => false,
        ],
    ],
    // failed jobs: logged only (no database in this app)
    'failed' => ['driver' => 'null'],
];
