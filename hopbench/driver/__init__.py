"""A profile in, a results folder out: one process, worker processes, Ray, stages."""
