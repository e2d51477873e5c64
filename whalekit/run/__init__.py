"""One run, the paper's Algorithm 1: the driver, its parts, state, methods, config, schedules and accounting."""
