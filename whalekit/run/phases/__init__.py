"""The phases the driver steps: the Phase protocol, the weight-update registry, the RSFT and search phases."""
