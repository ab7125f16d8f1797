<?php

namespace Bench;

use App\Mail\OrderShipped;
use Illuminate\Console\Command;

/**
 * What building one mail costs Laravel (scenario 2, bench/scenarios/smtp.py): the example app's
 * OrderShipped Mailable sent as its queued job sends it (SendQueuedMailable::handle ->
 * Mailable::send: build(), the Blade view rendered, Illuminate\Mail\Message over a
 * Swift_Message, Mailer::sendSwiftMessage) through Laravel's `array` transport, which keeps the
 * Swift_Message instead of sending it; then the message's bytes (Swift_Message::toString, what
 * the SMTP transport streams with toByteStream). No queue, no network. Prints one JSON line:
 * messages timed, process CPU (getrusage, user + system) and wall microseconds per message, and
 * the message's size in bytes. {warmup} messages first, not timed (the compiled view, autoloads).
 */
class MailBuild extends Command
{
    protected $signature = 'bench:mail-build {count} {--warmup=200}';

    protected $description = 'CPU per message of building the example Mailable (no sending)';

    public function handle(): int
    {
        $config = $this->laravel['config'];
        $config->set('mail.mailers.bench-array', ['transport' => 'array']);
        $mailer = $this->laravel['mail.manager']->mailer('bench-array');
        $transport = $mailer->getSwiftMailer()->getTransport();
        $count = (int) $this->argument('count');
        $warmup = (int) $this->option('warmup');
        $bytes = 0;
        $cpu0 = $wall0 = 0.0;
        for ($i = -$warmup; $i < $count; $i++) {
            if ($i === 0) {
                $cpu0 = self::cpu();
                $wall0 = hrtime(true);
            }
            $to = "user$i@bench.example";
            (new OrderShipped($to))->to($to)->send($mailer);
            $bytes = strlen($transport->messages()->last()->toString());
            $transport->flush();
        }
        $cpu = self::cpu() - $cpu0;
        $wall = (hrtime(true) - $wall0) / 1e9;
        $this->line(json_encode([
            'messages' => $count,
            'cpu_us_per_message' => $cpu / max($count, 1) * 1e6,
            'wall_us_per_message' => $wall / max($count, 1) * 1e6,
            'message_bytes' => $bytes,
        ]));

        return 0;
    }

    /** CPU seconds (user + system) of this process so far. */
    private static function cpu(): float
    {
        $r = getrusage();

        return $r['ru_utime.tv_sec'] + $r['ru_utime.tv_usec'] / 1e6
            + $r['ru_stime.tv_sec'] + $r['ru_stime.tv_usec'] / 1e6;
    }
}
