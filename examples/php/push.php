<?php
/**
 * Push mail jobs for the SendGroups worker from the command line, through SendGroupProducer.
 *
 *   php push.php REDIS_URL QUEUE [PREFIX] < mails.jsonl
 *
 * One JSON object per input line: the mail (to, from, subject, text, html, ...) and, optionally,
 * "delay" (seconds, then the job is delayed) and "maxTries". Prints one job uuid per line, in
 * input order. Ready jobs are pushed in one MULTI/EXEC. Exit 1 with a message naming the line
 * on bad input (nothing is pushed), 2 on a usage error.
 */

declare(strict_types=1);

require __DIR__ . '/SendGroupProducer.php';
require __DIR__ . '/redis_connect.php';

use SendGroups\SendGroupProducer;

if ($argc < 3) {
    fwrite(STDERR, "usage: php push.php REDIS_URL QUEUE [PREFIX] < mails.jsonl\n");
    exit(2);
}
[, $url, $queue] = $argv;
$prefix = $argv[3] ?? (getenv('SENDGROUP_KEY_PREFIX') ?: '');

try {
    $producer = new SendGroupProducer(\SendGroups\redis_connect($url), $prefix);
    $rows = [];
    $line = 0;
    while (($text = fgets(STDIN)) !== false) {
        $line++;
        if (trim($text) === '') {
            continue;
        }
        try {
            $row = json_decode($text, true, 512, JSON_THROW_ON_ERROR);
        } catch (\JsonException $e) {
            throw new \InvalidArgumentException("line $line: not JSON (" . $e->getMessage() . ')', 0, $e);
        }
        if (!is_array($row)) {
            throw new \InvalidArgumentException("line $line: not a JSON object");
        }
        $rows[] = [$line, $row];
    }
    // check every row before pushing any
    foreach ($rows as [$n, $row]) {
        try {
            // delay: whole seconds >= 0 (checked here, so that a bad one pushes nothing)
            if (isset($row['delay']) && (!is_int($row['delay']) || $row['delay'] < 0)) {
                throw new \InvalidArgumentException('delay must be whole seconds >= 0, got ' . var_export($row['delay'], true));
            }
            $producer->payload(array_diff_key($row, ['delay' => 1, 'maxTries' => 1]), array_intersect_key($row, ['maxTries' => 1]));
        } catch (\InvalidArgumentException $e) {
            throw new \InvalidArgumentException("line $n: " . $e->getMessage(), 0, $e);
        }
    }
    $uuids = [];
    $ready = [];
    foreach ($rows as $i => [$n, $row]) {
        $mail = array_diff_key($row, ['delay' => 1, 'maxTries' => 1]);
        $options = array_intersect_key($row, ['maxTries' => 1]);
        if (isset($row['delay'])) {
            $uuids[$i] = $producer->later($queue, $row['delay'], $mail, $options);
        } else {
            $ready[$i] = [$mail, $options];
        }
    }
    // ready jobs with the same options go in one round trip each
    $groups = [];
    foreach ($ready as $i => [$mail, $options]) {
        $groups[json_encode($options)][$i] = $mail;
    }
    foreach ($groups as $optionsJson => $mails) {
        $pushed = $producer->pushMany($queue, array_values($mails), json_decode($optionsJson, true) ?: []);
        foreach (array_keys($mails) as $k => $i) {
            $uuids[$i] = $pushed[$k];
        }
    }
    ksort($uuids);
    echo implode("\n", $uuids), $uuids ? "\n" : '';
} catch (\InvalidArgumentException | \JsonException $e) {
    fwrite(STDERR, 'push.php: ' . $e->getMessage() . "; nothing was pushed\n");
    exit(1);
}
