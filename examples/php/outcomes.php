<?php
/**
 * Read the SendGroups outcome stream and manage the suppression set from the command line,
 * through SendGroupOutcomes.
 *
 *   php outcomes.php REDIS_URL NAMESPACE read [LAST_ID] [COUNT] [BLOCK_MS]
 *       prints one JSON object per entry: {"id": ..., "uuid": ..., "outcome": ..., ...}
 *   php outcomes.php REDIS_URL NAMESPACE follow GROUP CONSUMER [COUNT] [BLOCK_MS]
 *       reads as consumer CONSUMER of group GROUP (created if needed), prints and acknowledges
 *   php outcomes.php REDIS_URL NAMESPACE suppress ADDRESS...
 *   php outcomes.php REDIS_URL NAMESPACE unsuppress ADDRESS...
 *
 * The key prefix comes from SENDGROUP_KEY_PREFIX (as for the workers). Exit 1 on bad input.
 */

declare(strict_types=1);

require __DIR__ . '/SendGroupOutcomes.php';
require __DIR__ . '/redis_connect.php';

use SendGroups\SendGroupOutcomes;

if ($argc < 4) {
    fwrite(STDERR, "usage: php outcomes.php REDIS_URL NAMESPACE read|follow|suppress|unsuppress ...\n");
    exit(2);
}
[, $url, $namespace, $command] = $argv;
$args = array_slice($argv, 4);

try {
    $outcomes = new SendGroupOutcomes(\SendGroups\redis_connect($url), $namespace, getenv('SENDGROUP_KEY_PREFIX') ?: '');
    switch ($command) {
        case 'read':
            $entries = $outcomes->read($args[0] ?? '0-0', (int) ($args[1] ?? 1000), (int) ($args[2] ?? 0));
            break;
        case 'follow':
            if (count($args) < 2) {
                throw new \InvalidArgumentException('follow needs GROUP CONSUMER');
            }
            $outcomes->createGroup($args[0]);
            $entries = $outcomes->readGroup($args[0], $args[1], (int) ($args[2] ?? 1000), (int) ($args[3] ?? 0));
            $outcomes->ack($args[0], ...array_map('strval', array_keys($entries)));
            break;
        case 'suppress':
            echo $outcomes->suppress(...$args), "\n";
            exit(0);
        case 'unsuppress':
            echo $outcomes->unsuppress(...$args), "\n";
            exit(0);
        default:
            throw new \InvalidArgumentException("unknown command '$command'");
    }
    foreach ($entries as $id => $fields) {
        echo json_encode(['id' => (string) $id] + $fields, JSON_UNESCAPED_UNICODE | JSON_UNESCAPED_SLASHES | JSON_THROW_ON_ERROR), "\n";
    }
} catch (\InvalidArgumentException $e) {
    fwrite(STDERR, 'outcomes.php: ' . $e->getMessage() . "\n");
    exit(1);
}
