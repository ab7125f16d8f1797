<?php

namespace App\Jobs;

use Illuminate\Bus\Queueable;
use Illuminate\Contracts\Queue\ShouldQueue;
use Illuminate\Foundation\Bus\Dispatchable;
use Illuminate\Queue\InteractsWithQueue;
use Illuminate\Queue\SerializesModels;
use Illuminate\Support\Facades\Mail;

class SendWelcome implements ShouldQueue
{
    use Dispatchable, InteractsWithQueue, Queueable, SerializesModels;

    public $tries = 3;

    public function __construct(public string $to)
    {
    }

    public function handle(): void
    {
        Mail::raw("Welcome aboard, {$this->to}!", function ($message) {
            $message->from('hello@shop.example')->to($this->to)->subject('Welcome');
        });
    }
}
