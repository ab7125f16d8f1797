<?php
/**
 * SendGroupOutcomes: the loop back from the SendGroups workers to your app, with phpredis only.
 *
 * Two keys per Kubernetes namespace, behind your key prefix (docs/laravel.md, "The loop back"):
 *
 *   <prefix>sendgroups:<namespace>:outcomes    stream: one entry per attempt of a mail job
 *   <prefix>sendgroups:<namespace>:suppressed  set: addresses the workers must never mail
 *
 * An outcome entry's fields (all strings): uuid (what SendGroupProducer::push returned; also the
 * X-SendGroup-Job header and the Message-ID), outcome (delivered | deferred | failed |
 * suppressed), reply (the SMTP reply, e.g. "250 2.0.0 Ok" or "550 5.1.1 no such user", or the
 * reason), exception (for failed/deferred), to (recipients, comma-separated), suppressed,
 * attempt, retryIn (deferred: seconds), queue, group, at (unix seconds).
 * Entries come at least once: key your updates on uuid + outcome.
 *
 * Usage:
 *
 *   $outcomes = new \SendGroups\SendGroupOutcomes($redis, 'shop', 'laravel_database_');
 *   $outcomes->suppress('ann@gmail.com');                 // on unsubscribe or hard bounce
 *   $last = '0-0';                                         // keep it in your database
 *   foreach ($outcomes->read($last, 100, 5000) as $id => $entry) {
 *       // e.g. mark $entry['uuid'] delivered / bounced; on a 5xx, suppress($entry['to'])
 *       $last = $id;
 *   }
 *   // several app instances sharing the work: a consumer group
 *   $outcomes->createGroup('app');
 *   foreach ($outcomes->readGroup('app', gethostname(), 100, 5000) as $id => $entry) { ...; $outcomes->ack('app', $id); }
 *
 * Pass '' as $prefix when the \Redis object already has \Redis::OPT_PREFIX set.
 */

declare(strict_types=1);

namespace SendGroups;

final class SendGroupOutcomes
{
    public function __construct(
        private \Redis $redis,
        private string $namespace = 'default',
        private string $prefix = '',
    ) {
        if (!preg_match('/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/', $namespace)) {
            throw new \InvalidArgumentException("'$namespace' is not a Kubernetes namespace name");
        }
    }

    public function streamKey(): string
    {
        return $this->prefix . 'sendgroups:' . $this->namespace . ':outcomes';
    }

    public function suppressionKey(): string
    {
        return $this->prefix . 'sendgroups:' . $this->namespace . ':suppressed';
    }

    /**
     * Entries after $lastId ('0-0' = from the oldest kept), at most $count, waiting up to
     * $blockMs milliseconds for new ones (0 = do not wait). Returns [entry id => fields].
     *
     * @return array<string, array<string, string>>
     */
    public function read(string $lastId = '0-0', int $count = 100, int $blockMs = 0): array
    {
        $reply = $blockMs > 0
            ? $this->redis->xRead([$this->streamKey() => $lastId], $count, $blockMs)
            : $this->redis->xRead([$this->streamKey() => $lastId], $count);
        return is_array($reply) ? ($reply[$this->streamKey()] ?? []) : [];
    }

    /** Create consumer group $group (reading from the oldest entry kept); idempotent. */
    public function createGroup(string $group): void
    {
        try {
            $this->redis->xGroup('CREATE', $this->streamKey(), $group, '0', true);
        } catch (\RedisException $e) {
            if (!str_contains($e->getMessage(), 'BUSYGROUP')) {
                throw $e;
            }
        }
        $error = $this->redis->getLastError();
        if ($error !== null && !str_contains($error, 'BUSYGROUP')) {
            throw new \RuntimeException("XGROUP CREATE failed: $error");
        }
        $this->redis->clearLastError();
    }

    /**
     * New entries for consumer $consumer of group $group (acknowledge each with ack()).
     *
     * @return array<string, array<string, string>>
     */
    public function readGroup(string $group, string $consumer, int $count = 100, int $blockMs = 0): array
    {
        $streams = [$this->streamKey() => '>'];
        $reply = $blockMs > 0
            ? $this->redis->xReadGroup($group, $consumer, $streams, $count, $blockMs)
            : $this->redis->xReadGroup($group, $consumer, $streams, $count);
        return is_array($reply) ? ($reply[$this->streamKey()] ?? []) : [];
    }

    /** Acknowledge entries read with readGroup(). Returns how many were pending. */
    public function ack(string $group, string ...$ids): int
    {
        return $ids === [] ? 0 : (int) $this->redis->xAck($this->streamKey(), $group, $ids);
    }

    /** Never mail these addresses again (checked by the workers right before each send). */
    public function suppress(string ...$addresses): int
    {
        return $addresses === [] ? 0 : (int) $this->redis->sAdd($this->suppressionKey(), ...self::normalize($addresses));
    }

    /** Allow these addresses again. */
    public function unsuppress(string ...$addresses): int
    {
        return $addresses === [] ? 0 : (int) $this->redis->sRem($this->suppressionKey(), ...self::normalize($addresses));
    }

    public function isSuppressed(string $address): bool
    {
        return (bool) $this->redis->sIsMember($this->suppressionKey(), self::normalize([$address])[0]);
    }

    /**
     * Bare, lower-cased addresses ("Ann <Ann@X.example>" -> "ann@x.example"), as the workers compare them.
     *
     * @param list<string> $addresses
     * @return list<string>
     */
    private static function normalize(array $addresses): array
    {
        $out = [];
        foreach ($addresses as $address) {
            $bare = preg_match('/<([^<>]+)>\s*$/', $address, $m) ? $m[1] : $address;
            $bare = strtolower(trim($bare));
            if (filter_var($bare, FILTER_VALIDATE_EMAIL) === false) {
                throw new \InvalidArgumentException(var_export($address, true) . ' is not an e-mail address');
            }
            $out[] = $bare;
        }
        return $out;
    }
}
