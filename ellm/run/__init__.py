"""What a run is besides its loop: the command line, the config checked, records and snapshots."""
