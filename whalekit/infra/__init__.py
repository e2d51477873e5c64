"""Run directories, timing, progress, tracking, shutdown, process lifetime, memory and CPU facts."""
