"""The harness lever: the Meta-Harness search stage, the archive, the mechanisms and the proposers."""
