<?php

return [
    // queue:work's restart signal (queue:restart) and unique locks live in the cache
    'default' => env('CACHE_DRIVER', 'redis'),
    'stores' => [
        'array' => ['driver' => 'array'],
        'redis' => ['driver' => 'redis', 'connection' => 'default'],
    ],
    'prefix' => 'laravel_cache',
];
