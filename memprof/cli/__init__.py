"""The `memprof` command line: one module per command, registered in app.py."""
