<?php

namespace App\Providers;

use Illuminate\Queue\Events\Looping;
use Illuminate\Queue\RedisQueue;
use Illuminate\Support\ServiceProvider;

/**
 * Makes `php artisan queue:work` honour a SendGroup's pause marker.
 *
 * While a group is paused, cancelled or being deleted, the operator sets the string key
 * `<prefix>queues:<queue>:paused` (docs/queue-protocol.md); our Python worker then reserves
 * nothing. Laravel's worker does not know that key: this listener makes it stop taking jobs too.
 * Before each loop, Worker::daemonShouldRun() fires Illuminate\Queue\Events\Looping; a listener
 * that returns false makes the worker sleep (--sleep, at least 1 s) instead of popping a job.
 *
 * Cost: one EXISTS per loop, on the queue connection's own Redis connection (so Laravel's key
 * prefix is applied as for every queue key; a hash tag in the queue name, `{mail-x}`, stays in
 * the key, so the marker lives in the queue's slot). A worker on several queues
 * (--queue=a,b) checks them in the same EXISTS and pauses while any of them is paused.
 * If Redis cannot answer, the worker pauses too (it could not pop a job either) and the error
 * is reported. `queue:work --once` / `queue:listen` children do not fire Looping.
 *
 * Register it in config/app.php's 'providers' (Laravel 8-10) or bootstrap/providers.php
 * (Laravel 11+). Copy this file as is; it needs nothing else (no Composer package).
 */
class SendGroupPauseServiceProvider extends ServiceProvider
{
    public function boot(): void
    {
        $this->app['events']->listen(Looping::class, function (Looping $event) {
            // false: skip this loop; null: let the worker (and other listeners) go on
            return $this->paused($event) ? false : null;
        });
    }

    private function paused(Looping $event): bool
    {
        $queue = $this->app['queue']->connection($event->connectionName);
        if (! $queue instanceof RedisQueue) {
            return false;
        }
        $keys = [];
        foreach (explode(',', (string) $event->queue) as $name) {
            $keys[] = $queue->getQueue($name) . ':paused';   // "queues:<name>:paused"
        }
        try {
            return (int) $queue->getConnection()->exists(...$keys) > 0;
        } catch (\Throwable $e) {
            report($e);
            return true;
        }
    }
}
