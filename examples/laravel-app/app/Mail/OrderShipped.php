<?php

namespace App\Mail;

use Illuminate\Bus\Queueable;
use Illuminate\Contracts\Queue\ShouldQueue;
use Illuminate\Mail\Mailable;
use Illuminate\Queue\SerializesModels;

class OrderShipped extends Mailable implements ShouldQueue
{
    use Queueable, SerializesModels;

    public $tries = 3;

    public function __construct(public string $customer)
    {
    }

    public function build(): static
    {
        return $this->from('shop@shop.example')
            ->subject('Your order has shipped')
            ->view('emails.shipped', ['customer' => $this->customer]);
    }
}
