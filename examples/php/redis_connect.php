<?php
/** Connect phpredis from a redis:// URL (host, port, password, database); used by the examples. */

declare(strict_types=1);

namespace SendGroups;

function redis_connect(string $url): \Redis
{
    $parts = parse_url($url);
    if ($parts === false || ($parts['scheme'] ?? '') !== 'redis') {
        throw new \InvalidArgumentException('REDIS_URL must look like redis://[:password@]host:port/db');
    }
    $redis = new \Redis();
    $redis->connect($parts['host'] ?? '127.0.0.1', (int) ($parts['port'] ?? 6379), 5.0);
    if (isset($parts['pass'])) {
        $redis->auth(isset($parts['user']) && $parts['user'] !== '' ? [rawurldecode($parts['user']), rawurldecode($parts['pass'])] : rawurldecode($parts['pass']));
    }
    $db = (int) ltrim($parts['path'] ?? '/0', '/');
    if ($db !== 0) {
        $redis->select($db);
    }
    return $redis;
}
