<?php
/**
 * SendGroupProducer: queue `sendgroups.SendMail` jobs for the SendGroups mail worker from PHP.
 *
 * Dependency-free: PHP >= 8.1 with the phpredis extension (Debian: php-cli php-redis), no
 * Composer package, no Laravel. Copy this file into your app (or `require` it).
 *
 * It writes exactly what Laravel's RedisQueue writes (docs/queue-protocol.md):
 *
 *   ready job    RPUSH <prefix>queues:<queue> <payload>  +  RPUSH <prefix>queues:<queue>:notify 1
 *                (one MULTI/EXEC, so a blocking worker wakes once per job)
 *   delayed job  ZADD <prefix>queues:<queue>:delayed <now + delay> <payload>   (no notify token)
 *
 * The payload is Laravel's envelope: uuid, displayName, job, maxTries, maxExceptions,
 * failOnTimeout, backoff, timeout, retryUntil, data, id, attempts (0), plus pushedAt (unix
 * seconds as a JSON string, as Horizon writes it) and createdAt (integer unix seconds, as
 * Laravel 12 writes it). `data` is the mail: to, from, subject, text and/or html (or template +
 * vars), headers, cc, bcc, reply_to.
 *
 * maxTries is always written (default 3): Laravel's `queue:work` gives a job without it one
 * try (its --tries default), our worker the group's `worker.tries`; with maxTries in the payload
 * both kinds of worker allow the same attempts on one queue.
 *
 * $prefix is the client-side key prefix (Laravel 11's default `laravel_database_`), the value of
 * the worker's SENDGROUP_KEY_PREFIX. Pass '' when the \Redis object already has
 * \Redis::OPT_PREFIX set, or the prefix is applied twice.
 *
 * Usage:
 *
 *   $redis = new \Redis();
 *   $redis->connect('127.0.0.1', 6379);
 *   $producer = new \SendGroups\SendGroupProducer($redis, 'laravel_database_');
 *   $uuid = $producer->push('mail-spring-sale-gmail', [
 *       'to' => 'ann@gmail.com', 'from' => 'news@shop.example',
 *       'subject' => 'Spring sale', 'text' => 'Hello Ann', 'html' => '<p>Hello Ann</p>',
 *   ]);
 *   $producer->later('mail-spring-sale-gmail', 600, $mail);      // in 10 minutes
 *   $uuids = $producer->pushMany('mail-spring-sale-gmail', $mails); // one round trip
 *
 * Every method returns the job uuid(s): the worker puts it in the `X-SendGroup-Job` header and
 * the Message-ID of the mail, and in the outcome stream (see SendGroupOutcomes.php).
 * Bad input throws \InvalidArgumentException naming the field, before anything is written.
 */

declare(strict_types=1);

namespace SendGroups;

final class SendGroupProducer
{
    public const MAIL_JOB = 'sendgroups.SendMail';
    public const DEFAULT_TRIES = 3;

    /** Mail fields the worker reads from `data`. */
    private const MAIL_FIELDS = [
        'to', 'cc', 'bcc', 'from', 'reply_to', 'subject', 'text', 'html', 'template', 'vars',
        'headers',
    ];

    /** Header fields the worker writes itself (it refuses a job naming them in 'headers'). */
    private const OWN_HEADERS = [
        'from', 'to', 'cc', 'bcc', 'reply-to', 'subject', 'mime-version', 'content-type',
        'content-transfer-encoding', 'x-sendgroup-job',
    ];

    /** $redis may be null when only payload() is used (e.g. with Laravel's Queue::pushRaw). */
    public function __construct(
        private ?\Redis $redis,
        private string $prefix = '',
        private int $maxTries = self::DEFAULT_TRIES,
    ) {
        if ($maxTries < 1) {
            throw new \InvalidArgumentException("maxTries must be >= 1, got $maxTries");
        }
    }

    /**
     * Queue one mail now. $options: maxTries (int), backoff (seconds: int, list or "10,60"),
     * timeout (seconds), retryUntil (unix seconds). Returns the job uuid.
     */
    public function push(string $queue, array $mail, array $options = []): string
    {
        return $this->pushMany($queue, [$mail], $options)[0];
    }

    /**
     * Queue many mails in one MULTI/EXEC round trip (all or none). Returns their uuids, in order.
     *
     * @param list<array<string, mixed>> $mails
     * @return list<string>
     */
    public function pushMany(string $queue, array $mails, array $options = []): array
    {
        $ready = $this->key($queue);
        $payloads = [];
        $uuids = [];
        foreach (array_values($mails) as $i => $mail) {
            try {
                [$uuid, $payloads[]] = $this->payload($mail, $options);
            } catch (\InvalidArgumentException $e) {
                throw new \InvalidArgumentException("mail #$i: " . $e->getMessage(), 0, $e);
            }
            $uuids[] = $uuid;
        }
        if ($payloads === []) {
            return [];
        }
        $tx = $this->connection()->multi(\Redis::MULTI);
        foreach ($payloads as $payload) {
            $tx->rPush($ready, $payload);
            $tx->rPush($ready . ':notify', '1');
        }
        $replies = $tx->exec();
        if (!is_array($replies) || in_array(false, $replies, true)) {
            throw new \RuntimeException('Redis refused the push: ' . ($this->redis->getLastError() ?? 'EXEC failed'));
        }
        return $uuids;
    }

    /** Queue one mail to be sent after $delaySeconds (>= 0). Returns the job uuid. */
    public function later(string $queue, int $delaySeconds, array $mail, array $options = []): string
    {
        if ($delaySeconds < 0) {
            throw new \InvalidArgumentException("delay must be >= 0 seconds, got $delaySeconds");
        }
        [$uuid, $payload] = $this->payload($mail, $options);
        $added = $this->connection()->zAdd($this->key($queue) . ':delayed', time() + $delaySeconds, $payload);
        if ($added === false) {
            throw new \RuntimeException('Redis refused the push: ' . ($this->redis->getLastError() ?? 'ZADD failed'));
        }
        return $uuid;
    }

    /**
     * The JSON envelope of one mail job, as pushed. Returns [uuid, payload string].
     *
     * @return array{0: string, 1: string}
     */
    public function payload(array $mail, array $options = []): array
    {
        $data = self::mailData($mail);
        $uuid = self::uuid4();
        $now = microtime(true);
        $maxTries = $options['maxTries'] ?? $this->maxTries;
        if (!is_int($maxTries) || $maxTries < 1) {
            throw new \InvalidArgumentException('maxTries must be an int >= 1');
        }
        $envelope = [
            'uuid' => $uuid,
            'displayName' => self::MAIL_JOB,
            'job' => self::MAIL_JOB,
            'maxTries' => $maxTries,
            'maxExceptions' => null,
            'failOnTimeout' => false,
            'backoff' => self::backoff($options['backoff'] ?? null),
            'timeout' => self::optionalInt($options, 'timeout'),
            'retryUntil' => self::optionalInt($options, 'retryUntil'),
            'data' => $data,
            'id' => $uuid,
            'attempts' => 0,
            'pushedAt' => sprintf('%.6F', $now),
            'createdAt' => (int) $now,
        ];
        return [$uuid, json_encode($envelope, JSON_UNESCAPED_UNICODE | JSON_THROW_ON_ERROR)];
    }

    private function connection(): \Redis
    {
        if ($this->redis === null) {
            throw new \LogicException('SendGroupProducer was built without a \Redis connection: only payload() works');
        }
        return $this->redis;
    }

    /** The ready list's key of $queue (with the prefix). */
    public function key(string $queue): string
    {
        if ($queue === '' || preg_match('/[\s\x00-\x1f]/', $queue)) {
            throw new \InvalidArgumentException("queue name '$queue' is empty or has a space or control character");
        }
        return $this->prefix . 'queues:' . $queue;
    }

    /** Check a mail and keep the fields the worker reads. */
    private static function mailData(array $mail): array
    {
        $unknown = array_diff(array_keys($mail), self::MAIL_FIELDS);
        if ($unknown !== []) {
            throw new \InvalidArgumentException('unknown mail field(s): ' . implode(', ', $unknown)
                . ' (known: ' . implode(', ', self::MAIL_FIELDS) . ')');
        }
        $to = $mail['to'] ?? null;
        $recipients = is_array($to) ? $to : [$to];
        if ($recipients === [] || in_array(null, $recipients, true)) {
            throw new \InvalidArgumentException("'to' is required");
        }
        foreach (['to' => $recipients, 'cc' => (array) ($mail['cc'] ?? []), 'bcc' => (array) ($mail['bcc'] ?? []),
                  'from' => (array) ($mail['from'] ?? []), 'reply_to' => (array) ($mail['reply_to'] ?? [])] as $field => $list) {
            foreach ($list as $address) {
                if (!is_string($address) || filter_var(self::bareAddress($address), FILTER_VALIDATE_EMAIL) === false) {
                    throw new \InvalidArgumentException("$field: " . var_export($address, true) . ' is not an e-mail address');
                }
            }
        }
        if (count((array) ($mail['from'] ?? [])) !== 1) {
            throw new \InvalidArgumentException("'from': exactly one sender is required");
        }
        $given = static fn (string $f): bool => isset($mail[$f]) && $mail[$f] !== '' && $mail[$f] !== [];
        if (!$given('text') && !$given('html') && !$given('template')) {
            throw new \InvalidArgumentException("a mail needs a body: 'text', 'html' or 'template'");
        }
        $headers = $mail['headers'] ?? [];
        if (!is_array($headers) || ($headers !== [] && array_is_list($headers))) {
            throw new \InvalidArgumentException("headers must be an object: ['Name' => 'value', ...]");
        }
        $seen = [];
        foreach ($headers as $name => $value) {
            $lower = strtolower((string) $name);
            if (!preg_match('/^[!-9;-~]+$/D', (string) $name)) {
                throw new \InvalidArgumentException("headers: '$name' is not a header name (printable ASCII, no space or colon)");
            }
            if (in_array($lower, self::OWN_HEADERS, true)) {
                throw new \InvalidArgumentException("headers.$name: the worker writes it from the mail's own fields (from, to, cc, bcc, reply_to, subject, text, html)");
            }
            if (isset($seen[$lower])) {
                throw new \InvalidArgumentException("headers.$name: given twice (names are case-insensitive)");
            }
            $seen[$lower] = true;
        }
        foreach (['subject' => $mail['subject'] ?? ''] + (array) ($mail['headers'] ?? []) as $name => $value) {
            if (!is_scalar($value) || preg_match('/[\r\n]/', (string) $value)) {
                throw new \InvalidArgumentException("$name: a header value must be one line of text");
            }
        }
        // Empty arrays would be encoded as JSON [] where the worker expects an object: leave them out.
        return array_filter($mail, static fn ($v) => $v !== null && $v !== '' && $v !== []);
    }

    /** "Ann <ann@x.example>" -> "ann@x.example". */
    private static function bareAddress(string $address): string
    {
        return preg_match('/<([^<>]+)>\s*$/', $address, $m) ? $m[1] : trim($address);
    }

    /** Laravel writes backoff as a comma-joined string ("10,60,300") or null. */
    private static function backoff(mixed $backoff): ?string
    {
        if ($backoff === null) {
            return null;
        }
        $parts = is_array($backoff) ? $backoff : explode(',', (string) $backoff);
        foreach ($parts as $part) {
            if (!is_numeric(trim((string) $part)) || (float) $part < 0) {
                throw new \InvalidArgumentException('backoff must be seconds like 10 or [10, 60], got ' . var_export($backoff, true));
            }
        }
        return implode(',', array_map(static fn ($p) => trim((string) $p), $parts));
    }

    private static function optionalInt(array $options, string $name): ?int
    {
        $value = $options[$name] ?? null;
        if ($value !== null && (!is_int($value) || $value < 1)) {
            throw new \InvalidArgumentException("$name must be an int >= 1");
        }
        return $value;
    }

    /** A random (version 4) UUID, as Laravel's Str::uuid(). */
    private static function uuid4(): string
    {
        $b = random_bytes(16);
        $b[6] = chr((ord($b[6]) & 0x0f) | 0x40);
        $b[8] = chr((ord($b[8]) & 0x3f) | 0x80);
        return vsprintf('%s%s-%s-%s-%s-%s%s%s', str_split(bin2hex($b), 4));
    }
}
