<?php

namespace Bench;

use Illuminate\Console\Command;
use Illuminate\Queue\Events\Looping;
use Illuminate\Support\ServiceProvider;

/**
 * Laravel 12.40's `php artisan queue:pause` / `queue:resume` and the worker's check of them, brought
 * to Debian's Laravel 8.83 for the pause benchmark (bench/scenarios/pause.py) only.
 *
 * Laravel 12.40+ (laravel/framework#57800; src/Illuminate/Queue/QueueManager.php `pause`, `isPaused`;
 * src/Illuminate/Queue/Worker.php `getNextJob`, `queuePaused`):
 * - `queue:pause connection:queue` stores `true` forever under the cache key
 *   `illuminate:queue:paused:{connection}:{queue}` in the default cache store;
 * - on every loop iteration the worker reads that key (`QueueManager::isPaused`: one cache GET
 *   per queue), skips a paused queue, finds no job and sleeps `--sleep` seconds (default 3);
 *   then `stopIfNecessary` reads the restart signal (`illuminate:queue:restart`), as always.
 *
 * Laravel 8 has no such command, but its `Worker::daemonShouldRun` fires
 * `Illuminate\Queue\Events\Looping` before each iteration and, when a listener returns false,
 * sleeps `--sleep` seconds (`pauseWorker`) and then runs `stopIfNecessary`. The listener below
 * reads the same key through the same cache store, so a paused iteration costs what Laravel
 * 12's costs: one cache GET for the pause key, the sleep, one cache GET for the restart signal.
 * One difference: Laravel 12 skips only the paused queues of a `--queue=a,b` worker; this
 * listener pauses the iteration only when every queue of the worker is paused (the benchmark's
 * workers have one queue).
 */
class QueuePauseServiceProvider extends ServiceProvider
{
    public function boot(): void
    {
        $this->app['events']->listen(Looping::class, function (Looping $event) {
            foreach (explode(',', (string) $event->queue) as $queue) {
                if (! $this->paused($event->connectionName, $queue)) {
                    return null;
                }
            }

            return false;
        });
        $this->commands([PauseQueueCommand::class, ResumeQueueCommand::class]);
    }

    /** Laravel 12's QueueManager::isPaused. */
    private function paused(string $connection, string $queue): bool
    {
        return (bool) $this->app['cache']->store()->get(self::key($connection, $queue), false);
    }

    public static function key(string $connection, string $queue): string
    {
        return "illuminate:queue:paused:{$connection}:{$queue}";
    }

    /** Laravel 12's PauseCommand::parseQueue: "connection:queue", or a queue of the default. */
    public static function parse(string $arg, string $default): array
    {
        [$connection, $queue] = array_pad(explode(':', $arg, 2), 2, null);

        return isset($queue) ? [$connection, $queue] : [$default, $connection];
    }
}

class PauseQueueCommand extends Command
{
    protected $signature = 'queue:pause {queue : connection:queue}';

    protected $description = 'Pause job processing for a queue (Laravel 12.40, backported)';

    public function handle(): int
    {
        [$connection, $queue] = QueuePauseServiceProvider::parse(
            $this->argument('queue'),
            $this->laravel['config']['queue.default']
        );
        $this->laravel['cache']->store()
            ->forever(QueuePauseServiceProvider::key($connection, $queue), true);
        $this->info("Job processing on queue [{$connection}:{$queue}] has been paused.");

        return 0;
    }
}

class ResumeQueueCommand extends Command
{
    protected $signature = 'queue:resume {queue : connection:queue}';

    protected $description = 'Resume job processing for a paused queue (Laravel 12.40, backported)';

    public function handle(): int
    {
        [$connection, $queue] = QueuePauseServiceProvider::parse(
            $this->argument('queue'),
            $this->laravel['config']['queue.default']
        );
        $this->laravel['cache']->store()
            ->forget(QueuePauseServiceProvider::key($connection, $queue));
        $this->info("Job processing on queue [{$connection}:{$queue}] has been resumed.");

        return 0;
    }
}
