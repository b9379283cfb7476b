"""The linear-recurrence scan: algebras of transitions, methods (sequential, associative,
the Pallas kernel), storage, and the sequence split across devices."""
