"""The one operating-system boundary (bubblewrap), the harness workers behind it and the Python tool."""
