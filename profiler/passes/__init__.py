"""Device passes and clocks: models, proposers, the batch executor and its serving loop."""
