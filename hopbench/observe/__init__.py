"""Beside the load: scrapes in, live figures out, the live progress panel."""
