"""What is sent: prompt and output lengths, datasets, prompt pools, sessions, traces, cancels (pure, seeded)."""
