<?php

$app = new Illuminate\Foundation\Application(
    $_ENV['APP_BASE_PATH'] ?? dirname(__DIR__)
);
// Writable paths: the worker pod's root filesystem is read-only, so storage moves under /tmp
// (LARAVEL_STORAGE_PATH, the variable Laravel 10+ reads itself; set by the operator).
if ($storage = getenv('LARAVEL_STORAGE_PATH')) {
    $app->useStoragePath($storage);
    foreach (['framework/views', 'framework/cache', 'logs'] as $dir) {
        is_dir("$storage/$dir") || mkdir("$storage/$dir", 0775, true);
    }
}
$app->singleton(Illuminate\Contracts\Console\Kernel::class, App\Console\Kernel::class);
$app->singleton(
    Illuminate\Contracts\Debug\ExceptionHandler::class,
    Illuminate\Foundation\Exceptions\Handler::class
);

return $app;
