<?php

namespace App\Console;

use Illuminate\Console\Command;
use Illuminate\Support\Facades\Queue;
use SendGroups\SendGroupProducer;

/**
 * Way A from a Laravel app: queue sendgroups.SendMail jobs for the SendGroup's Python workers
 * through Laravel's own queue connection (its key prefix and Lua push script), the envelope
 * built by examples/php/SendGroupProducer.php. Prints one job uuid per recipient.
 */
class PushSendMail extends Command
{
    protected $signature = 'sendgroups:push-sendmail {queue} {recipients*}';

    protected $description = 'Queue one sendgroups.SendMail job per recipient with Queue::pushRaw';

    public function handle(): int
    {
        // copy SendGroupProducer.php into your app (app/SendGroupProducer.php); in this
        // repository it is the example next door (not in the example image: its build context
        // is this directory)
        $found = array_filter([app_path('SendGroupProducer.php'), base_path('../php/SendGroupProducer.php')], 'is_file');
        if ($found === []) {
            $this->error('SendGroupProducer.php not found: copy examples/php/SendGroupProducer.php to '
                . app_path('SendGroupProducer.php'));
            return 1;
        }
        require_once reset($found);
        $producer = new SendGroupProducer(null);  // payload() only: Laravel pushes
        foreach ($this->argument('recipients') as $to) {
            [$uuid, $payload] = $producer->payload([
                'to' => $to,
                'from' => 'news@shop.example',
                'subject' => 'Spring sale',
                'html' => view('emails.shipped', ['customer' => $to])->render(),
            ]);
            Queue::connection('redis')->pushRaw($payload, $this->argument('queue'));
            $this->line($uuid);
        }
        return 0;
    }
}
