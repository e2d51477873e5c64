"""The weight lever: RSFT (trainer, config, loss, optimiser) and its distributed ranks."""
