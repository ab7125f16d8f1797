<?php

namespace App\Console;

use App\Jobs\SendWelcome;
use App\Mail\OrderShipped;
use App\Notifications\InvoicePaid;
use Illuminate\Console\Command;
use Illuminate\Support\Facades\Mail;
use Illuminate\Support\Facades\Notification;

/**
 * Queue mail the way a Laravel app does, through Laravel's own producer: for each recipient
 * one of a queued Mailable (Mail::queue), a queued Notification (mail channel) and a job class
 * (dispatch), in turn. Prints "<kind> <recipient>" per job.
 */
class PushMail extends Command
{
    protected $signature = 'sendgroups:push {queue} {recipients*}';

    protected $description = 'Queue a Mailable, a Notification or a job per recipient, in turn';

    public function handle(): int
    {
        $queue = $this->argument('queue');
        foreach (array_values($this->argument('recipients')) as $i => $to) {
            switch ($i % 3) {
                case 0:
                    Mail::to($to)->queue((new OrderShipped($to))->onQueue($queue));
                    $this->line("mailable $to");
                    break;
                case 1:
                    Notification::route('mail', $to)->notify((new InvoicePaid($to))->onQueue($queue));
                    $this->line("notification $to");
                    break;
                default:
                    SendWelcome::dispatch($to)->onQueue($queue);
                    $this->line("job $to");
            }
        }
        return 0;
    }
}
