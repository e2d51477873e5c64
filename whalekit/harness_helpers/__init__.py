"""Display-only helpers that harness code may import (mounted into every harness worker's
sandbox): text formatting of what the domains already show, never a way to solve a task.
They import nothing but the standard library and the harness contract."""
