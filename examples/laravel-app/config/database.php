<?php

return [
    // no SQL database: artisan's database commands need the service, never a connection
    'default' => 'none',
    'connections' => ['none' => ['driver' => 'sqlite', 'database' => ':memory:']],
    'redis' => [
        'client' => 'phpredis',
        'options' => [
            // what SENDGROUP_KEY_PREFIX must be set to for the SendGroup's tools and workers
            'prefix' => env('REDIS_PREFIX', 'laravel_database_'),
        ],
        'default' => [
            'url' => env('REDIS_URL'),
            'host' => env('REDIS_HOST', '127.0.0.1'),
            'password' => env('REDIS_PASSWORD'),
            'port' => env('REDIS_PORT', '6379'),
            'database' => env('REDIS_DB', '0'),
        ],
    ],
];
