"""Read a results folder, never re-run: terminal tables, compare, gate and export."""
