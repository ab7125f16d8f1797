<?php

namespace Bench;

use App\Mail\OrderShipped;
use Illuminate\Console\Command;
use Illuminate\Queue\Connectors\ConnectorInterface;
use Illuminate\Queue\RedisQueue;
use Illuminate\Support\Facades\Mail;

/**
 * The Laravel payloads of scenarios 2 and 3, made by Laravel's own producer: for each recipient
 * `Mail::to($to)->queue((new OrderShipped($to))->onQueue($queue))`, the example app's queued
 * Mailable queued as its PushMail command does (PendingMail::fill, Mailer::queue,
 * Mailable::queue, RedisQueue::push, createPayload). Only the last step differs: the queue
 * connection is a RedisQueue whose pushRaw writes the payload as one line to {out} instead of
 * running Laravel's push script, so the benchmark can push the same payloads in every round
 * with that script's two RPUSHes (tests/support/dumps.py push) outside the timed part.
 */
class MailPayloads extends Command
{
    protected $signature = 'bench:mail-payloads {queue} {count} {domain} {out}';

    protected $description = 'Write queued-Mailable payloads (one per line) for the isolation benchmark';

    public function handle(): int
    {
        $queue = (string) $this->argument('queue');
        $out = fopen((string) $this->argument('out'), 'wb');
        $this->laravel['queue']->extend('bench-capture', static fn () => new CaptureConnector($out));
        $this->laravel['config']->set('queue.connections.bench-capture', ['driver' => 'bench-capture']);
        $this->laravel['config']->set('queue.default', 'bench-capture');
        $domain = (string) $this->argument('domain');
        $count = (int) $this->argument('count');
        for ($i = 0; $i < $count; $i++) {
            $to = "user$i@$domain";
            Mail::to($to)->queue((new OrderShipped($to))->onQueue($queue));
        }
        fclose($out);
        return 0;
    }
}

/** @internal */
final class CaptureConnector implements ConnectorInterface
{
    /** @param resource $out */
    public function __construct(private $out)
    {
    }

    public function connect(array $config)
    {
        return new CaptureQueue($this->out, app('redis'), 'default', 'default', 90, null);
    }
}

/** @internal a RedisQueue whose push script is replaced by writing the payload line */
final class CaptureQueue extends RedisQueue
{
    /** @param resource $out */
    public function __construct(private $out, ...$args)
    {
        parent::__construct(...$args);
    }

    public function pushRaw($payload, $queue = null, array $options = [])
    {
        fwrite($this->out, $payload . "\n");
        return json_decode($payload, true)['id'] ?? null;
    }
}
