<?php

namespace Bench;

use Illuminate\Contracts\Queue\Job;

/**
 * The benchmark's no-op job for Laravel's worker, the counterpart of the Python peers' task body
 * (bench/peer_workers.py job_body): write one 8-byte stamp (microtime(true) as a C double) to the
 * pipe the benchmark passed as --stamp-fd, then delete the job as CallQueuedHandler does after a
 * queued job ran. The payloads name it as Laravel names a raw job: "Bench\Stamp@fire".
 */
class Stamp
{
    /** @var resource|null */
    private static $out = null;

    public function fire(Job $job, array $data): void
    {
        if (self::$out === null) {
            self::$out = fopen('php://fd/' . BENCH_STAMP_FD, 'wb');
        }
        fwrite(self::$out, pack('d', microtime(true)));
        $job->delete();
    }
}
