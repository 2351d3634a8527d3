"""The local engine: spawned worker processes per device, the dispatcher, the watchdog, the worker loop."""
