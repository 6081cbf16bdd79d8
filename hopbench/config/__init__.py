"""The profile: TOML in, frozen records out; one parser per profile table."""
